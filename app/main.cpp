// infer-bench: reproduce and measure the inference-acceleration techniques of Chapter 8.
#include <csignal>
#include <cstdio>
#include <exception>
#include <string>

#include <fmt/format.h>

#include "cli.h"
#include "core/build_info.h"
#include "core/errors.h"

int main(int argc, char** argv) {
  ib::app::Cli cli{CLI::App{"infer-bench: FlashAttention, speculative decoding, KV-cache compression, prefix caching and "
                            "constrained decoding, measured on your card against honest baselines.",
                            "infer-bench"},
                   {},
                   {},
                   {}};
  // A closed stdout (`infer-bench run … | head`) is an EPIPE the run handles (it stops as on
  // Ctrl-C, its files complete), not a signal that kills it between two writes.
  std::signal(SIGPIPE, SIG_IGN);
  for (int i = 0; i < argc; ++i) cli.argv.emplace_back(argv[i]);
  cli.app.set_version_flag("--version", fmt::format("infer-bench {} (git {}, CUDA backend {})", ib::build_version(),
                                                    ib::build_git_sha(), ib::build_has_cuda() ? "built" : "not built"));
  cli.app.require_subcommand(1);
  cli.app.footer(
      "Exit codes: 0 all rows measured, 1 some row FAILED, 2 bad input, 3 results could not be written, 130 interrupted.\n"
      "Spec reference: infer-bench keys. Default suite: infer-bench run experiments/chapter8.yaml");
  ib::app::register_run(cli);
  ib::app::register_list(cli);
  ib::app::register_info(cli);
  ib::app::register_keys(cli);
  ib::app::register_plot(cli);
  ib::app::register_compare(cli);
  ib::app::register_techniques(cli);
  ib::app::register_serve(cli);
  ib::app::register_load(cli);
  ib::app::register_merge(cli);

  try {
    cli.app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return cli.app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return cli.app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return cli.app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "infer-bench: %s (see infer-bench --help)\n", ib::one_line(e.what()).c_str());
    return 2;
  }
  try {
    return cli.action ? cli.action() : 2;
  } catch (const ib::InputError& e) {
    std::fprintf(stderr, "infer-bench: %s\n", ib::one_line(e.what()).c_str());
    return 2;
  } catch (const ib::OutputError& e) {
    std::fprintf(stderr, "infer-bench: %s\n", ib::one_line(e.what()).c_str());
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "infer-bench: error: %s\n", ib::one_line(e.what()).c_str());
    return 1;
  }
}
