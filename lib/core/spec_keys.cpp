// The keys: the structural and run-control keys every experiment accepts besides its kind's, and
// which keys a kind accepts (for the parser, its suggestions and the spec reference).
#include "core/spec.h"

#include "core/spec_internal.h"

namespace ib {

namespace spec_detail {

// Keys that are not parameters of a kind; handled by the parser itself.
const std::set<std::string> kStructuralKeys = {"name", "kind", "description", "variants", "baseline", "skip",
                                               "book", "plot", "cpu",         "columns",  "summary"};

// Run-control and structural keys are never axes.
KeySpec key(std::string name, ParamType type, std::string doc, std::optional<Value> def, std::optional<double> min,
            std::optional<double> max) {
  KeySpec k = key_spec(std::move(name), type, std::move(doc), std::move(def), min, max);
  k.sweepable = false;
  return k;
}

const std::vector<KeySpec>& control_keys() {
  static const std::vector<KeySpec> keys = [] {
    RunControl d;
    return std::vector<KeySpec>{
        key("warmup", ParamType::Int, "unmeasured runs after validation (flag --warmup)", Value(d.warmup), 0.0),
        key("min_samples", ParamType::Int, "at least this many samples (flag --min-samples)", Value(d.min_samples), 1.0),
        key("min_time", ParamType::Seconds, "at least this much measured time (flag --min-time)", Value(d.min_time), 0.0),
        key("max_noise", ParamType::Float, "stop once the relative stdev is below this fraction (0.01 or 1%) (flag --max-noise)",
            Value(d.max_noise), 1e-6, 1.0),
        key("timeout", ParamType::Seconds, "wall-clock cap per row; the row names the condition left unmet (flag --timeout)",
            Value(d.timeout), 1e-3),
        key("cold_l2", ParamType::Bool, "flush L2 (GPU) or the last-level cache (CPU) before each sample (flag --cold-l2)",
            Value(d.cold_l2)),
        key("memory_limit", ParamType::Bytes,
            "emulate a smaller card: allocations past this become an OOM row; 0 = the real memory "
            "(flag --memory-limit)",
            Value(d.memory_limit), 0.0),
        key("seed", ParamType::Int, "seed of the random inputs (flag --seed)", Value(d.seed), 0.0),
    };
  }();
  return keys;
}

const KeySpec* SpecParser::find_key(const std::vector<KeySpec>& keys, const std::string& k) {
  for (const auto& ks : keys)
    if (ks.name == k) return &ks;
  return nullptr;
}

bool SpecParser::accepts(const KindInfo& kind, const std::string& k) {
  return kStructuralKeys.count(k) || find_key(control_keys(), k) || find_key(kind.keys, k);
}

std::vector<std::string> SpecParser::accepted_keys(const KindInfo& kind) {
  std::vector<std::string> out(kStructuralKeys.begin(), kStructuralKeys.end());
  for (const auto& k : control_keys()) out.push_back(k.name);
  for (const auto& k : kind.keys) out.push_back(k.name);
  return out;
}

}  // namespace spec_detail

using spec_detail::control_keys;
using spec_detail::key;

const std::vector<KeySpec>& common_keys() {
  static const std::vector<KeySpec> keys = [] {
    std::vector<KeySpec> k = {
        key("name", ParamType::String, "unique name of the experiment (letters, digits, '-', '_'); required"),
        key("kind", ParamType::String, "experiment kind (see below); required"),
        key("description", ParamType::String, "one line shown above the table", Value(std::string())),
        key("variants", ParamType::String,
            "variants to run, baseline first (default: every variant of the kind for the backend)"),
        key("baseline", ParamType::String, "variant the others are compared with (speedup, verdict); 'none' for no comparison",
            Value(std::string("none"))),
        key("skip", ParamType::String, "list of rules {key: value(s), variant: name(s)}: matching rows are not run"),
        key("book", ParamType::String,
            "the chapter's figures: {source, note, rows: [{<param>: v, role: r, <figure>: number}]}; `role` matches every "
            "variant that plays it on any backend (cpu_flash plays flash2, cpu_X plays X), `variant` one variant by name"),
        key("plot", ParamType::String,
            "SVG plots written beside the tables: {x: a numeric param, y: ms, speedup, tflops, gbps or a metric's name (or a "
            "list "
            "of them), book: the figure to show, log_x, log_y, title}, or a list of such maps; one line per variant and "
            "combination of the other varying params"),
        key("cpu", ParamType::String, "map of keys that replace these on the CPU backend (scaled sizes)"),
        key("columns", ParamType::String,
            "the columns of the stdout table besides variant and the varying params (report.md, CSV and JSON keep every "
            "one): ms, tflops, pct_gemm, gbps, pct_copy, peak_mem, speedup, verdict, book (every book figure) or book_<figure>, "
            "check, samples, stop, note, or a metric's name; default ms, tflops, gbps, speedup, book, check, note; "
            "`--columns all|LIST` overrides"),
        key("summary", ParamType::String,
            "the experiment's line in the run's summary: {claim: the chapter's claim in words, figure: the column summarised "
            "(default ms; overhead = 100·(1/speedup − 1) %), role: only the rows of that role, holds: a check or a list of "
            "them — faster, grows with <param>, shrinks with <param>, below <n>, above <n>, at least <n>, at most <n>}"),
    };
    for (const auto& c : control_keys()) k.push_back(c);
    return k;
  }();
  return keys;
}

}  // namespace ib
