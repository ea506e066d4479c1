#include "cli.h"

#include <algorithm>
#include <cmath>

#include "core/errors.h"
#include "core/units.h"

namespace ib::app {

void add_common_options(CLI::App* sub, CommonOptions& c, bool with_only) {
  sub->add_option("--backend", c.backend, "auto (CUDA when a GPU is usable, else CPU), cuda or cpu")->default_str("auto");
  sub->add_option("--format", c.format, "stdout format: md, csv or json (files are always all three)")->default_str("md");
  sub->add_option("--output,-o", c.output, "run directory (default results/runs/<UTC time>-<name>/); never overwritten")
      ->check([](const std::string& v) {
        return v.empty() ? std::string("an empty path (leave --output out for the default)") : std::string();
      });
  sub->add_option("--set", c.sets, "override a spec key: key=value or experiment.key=value (YAML value, repeatable)")
      ->allow_extra_args(false);
  if (with_only) sub->add_option("--only", c.only, "run only the named experiments (repeatable)")->allow_extra_args(false);
  sub->add_option("--warmup", c.warmup, "unmeasured runs after validation");
  sub->add_option("--min-samples", c.min_samples, "at least this many samples per row");
  sub->add_option("--min-time", c.min_time, "at least this much measured time per row (0.5, 500ms)");
  sub->add_option("--max-noise", c.max_noise, "stop when the relative stdev is below this (0.01 or 1%)");
  sub->add_option("--timeout", c.timeout, "wall-clock cap per row (10, 30s)");
  sub->add_flag("--cold-l2", c.cold_l2, "flush L2 (GPU) / last-level cache (CPU) before every sample");
  sub->add_option("--memory-limit", c.memory_limit, "emulate a smaller card: allocations past this are OOM rows (80GiB)");
  sub->add_option("--seed", c.seed, "seed of the random inputs");
  sub->add_option("--max-rows", c.max_rows, "refuse an experiment of more rows than this (default 100000)");
  sub->add_option("--columns", c.columns,
                  "stdout tables: all, or a comma-separated list (ms,speedup,book,check,note, a metric's name, ...) in place of "
                  "each experiment's `columns:`; report.md, CSV and JSON keep every column");
  sub->add_flag("--profile", c.profile, "a few runs per row between cudaProfilerStart/Stop, for ncu and nsys");
  sub->add_flag("--quiet,-q", c.quiet, "no notes or progress line on stderr (tables still go to stdout)");
}

void add_list_options(CLI::App* sub, CommonOptions& c) {
  sub->add_option("--backend", c.backend, "auto (CUDA when a GPU is usable, else CPU), cuda or cpu")->default_str("auto");
  sub->add_option("--set", c.sets, "override a spec key: key=value or experiment.key=value (YAML value, repeatable)")
      ->allow_extra_args(false);
  sub->add_option("--only", c.only, "list only the named experiments (repeatable)")->allow_extra_args(false);
  sub->add_option("--max-rows", c.max_rows, "refuse an experiment of more rows than this (default 100000)");
  sub->add_flag("--quiet,-q", c.quiet, "accepted for symmetry with run (list prints nothing on stderr but errors)");
}

SessionOptions Cli::session() const {
  SessionOptions s;
  s.argv = argv;
  s.backend = common.backend;
  s.format = common.format;
  s.output = common.output;
  s.sets = common.sets;
  s.only = common.only;
  s.quiet = common.quiet;
  s.profile = common.profile;
  if (!common.columns.empty()) {
    std::string item;
    for (size_t i = 0; i <= common.columns.size(); ++i) {
      const char ch = i < common.columns.size() ? common.columns[i] : ',';
      if (ch != ',') {
        item += ch;
        continue;
      }
      while (!item.empty() && item.front() == ' ') item.erase(item.begin());
      while (!item.empty() && item.back() == ' ') item.pop_back();
      if (item.empty()) throw InputError("--columns '" + common.columns + "': an empty column name");
      s.columns.push_back(item);
      item.clear();
    }
    if (s.columns.size() > 1 && std::find(s.columns.begin(), s.columns.end(), "all") != s.columns.end())
      throw InputError("--columns '" + common.columns + "': all stands alone");
  }
  if (common.max_rows != CommonOptions::kUnset) {
    if (common.max_rows < 1) throw InputError("--max-rows: must be at least 1");
    s.max_rows = common.max_rows;
  }
  RunControlOverrides& o = s.overrides;
  if (common.warmup != CommonOptions::kUnset) {
    if (common.warmup < 0) throw InputError("--warmup: must be at least 0");
    o.warmup = common.warmup;
  }
  if (common.min_samples != CommonOptions::kUnset) {
    if (common.min_samples < 1) throw InputError("--min-samples: must be at least 1");
    o.min_samples = common.min_samples;
  }
  if (common.seed != CommonOptions::kUnset) {
    if (common.seed < 0) throw InputError("--seed: must be at least 0");
    o.seed = common.seed;
  }
  auto seconds = [](const std::string& flag, const std::string& v) {
    auto secs = parse_seconds(v);
    if (!secs || *secs < 0) throw InputError(flag + " '" + v + "': expected a duration like 0.5, 500ms or 30s");
    return *secs;
  };
  if (!common.min_time.empty()) o.min_time = seconds("--min-time", common.min_time);
  if (!common.timeout.empty()) {
    o.timeout = seconds("--timeout", common.timeout);
    if (*o.timeout <= 0) throw InputError("--timeout: must be above 0");
  }
  if (!common.max_noise.empty()) {
    const std::optional<double> v = parse_fraction(common.max_noise);
    if (!v || *v <= 0 || *v > 1)
      throw InputError("--max-noise '" + common.max_noise + "': expected a fraction in (0, 1] like 0.01 or 1%");
    o.max_noise = *v;
  }
  if (common.cold_l2) o.cold_l2 = true;
  if (!common.memory_limit.empty()) {
    auto b = parse_bytes(common.memory_limit);
    if (!b || *b < 0) throw InputError("--memory-limit '" + common.memory_limit + "': expected a size like 80GiB");
    o.memory_limit = *b;
  }
  return s;
}

}  // namespace ib::app
