// The measurement engine: for each point of an experiment's sweep and each variant (baseline
// first): correctness gate -> warmup -> samples until the stopping rule holds.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/backend.h"
#include "core/registry.h"
#include "core/spec.h"
#include "core/stats.h"
#include "core/sweep.h"
#include "core/variant.h"

namespace ib {

// The card's measured limits, for the roofline columns. Zero means "not measured".
struct Ceilings {
  double copy_bytes_per_s = 0;  // device-to-device (or memcpy) bytes read + written per second
  double gemm_flops_per_s = 0;  // dense GEMM rate (cuBLAS bf16 on the GPU, our SGEMM on the CPU)
  std::string copy_label;       // what was measured: "cudaMemcpy D2D 1 GiB"
  std::string gemm_label;       // "cuBLAS bf16 8192x8192x8192"
  double fma_flops_per_s = 0;   // CPU: fused multiply-adds on registers only (0 where not measured)
  std::string fma_label;        // "avx512 FMAs on registers, 2 threads"
  // "copy 37.4 GB/s (memcpy 256 MiB), GEMM 0.221 TFLOP/s (...)[, FMA 0.3 TFLOP/s (...)]"
  std::string describe() const;
  nlohmann::json to_json() const;
  static Ceilings from_json(const nlohmann::json& j);
};

enum class RowStatus { Ok, Failed, Oom, Unsupported };
const char* to_string(RowStatus s);
RowStatus row_status_from_string(const std::string& s);

struct Row {
  std::string experiment;
  std::string kind;
  std::string variant;
  std::string role;  // the part the variant plays in the chapter's comparison (VariantDecl::role)
  Backend backend = Backend::Cpu;
  Point point;
  RowStatus status = RowStatus::Ok;
  std::string message;          // why FAILED / OOM / unsupported; on an ok row, a self-measured variant's note
  std::vector<double> samples;  // seconds
  Stats stats;                  // of samples
  std::string stop_reason;
  std::optional<Validation> validation;
  Work work;
  std::vector<Metric> metrics;
  std::optional<Speedup> speedup;  // vs the baseline at the same point
  bool is_baseline = false;
  std::vector<std::pair<std::string, BookFigure>> book;    // matched chapter figures
  int64_t peak_memory = -1;                                // bytes allocated above the row's start, at peak
  std::vector<std::pair<std::string, std::string>> texts;  // Variant::texts (prompt, output) of an ok row
};

// Derived columns every report shows, from a row's stats, work and the ceilings.
struct Roofline {
  std::optional<double> tflops, gbps, pct_gemm, pct_copy;
};
Roofline roofline(const Row& row, const Ceilings& c);

struct ExperimentResult {
  ExperimentSpec spec;
  SweepPlan plan;
  std::vector<Row> rows;
  bool interrupted = false;
};

class RunObserver {
 public:
  virtual ~RunObserver() = default;
  virtual void experiment_started(const ExperimentSpec&, const SweepPlan&) {}
  virtual void row_started(const ExperimentSpec&, size_t /*index*/, size_t /*total*/, const std::string& /*label*/) {}
  virtual void row_finished(const ExperimentResult&, const Row&) {}
  virtual void experiment_finished(const ExperimentResult&) {}
};

struct RunnerOptions {
  bool profile = false;  // a few runs between cudaProfilerStart/Stop instead of adaptive sampling
  int profile_runs = 3;
};

class Runner {
 public:
  Runner(BackendRuntime& rt, RunnerOptions options, RunObserver* observer = nullptr)
      : rt_(rt), options_(options), observer_(observer) {}
  // Runs every row of the experiment; stops early (result.interrupted) on Ctrl-C.
  ExperimentResult run(const ExperimentSpec& spec);

 private:
  Row run_row(const ExperimentSpec& spec, const Point& point, const std::string& variant, size_t point_index);
  Row run_row_on(BackendRuntime& rt, const ExperimentSpec& spec, const VariantDecl& decl, const Point& point, size_t point_index);
  BackendRuntime& rt_;
  RunnerOptions options_;
  RunObserver* observer_;
  std::unique_ptr<BackendRuntime> host_rt_;  // for host variants when rt_ is a GPU runtime
};

// "bytes=1GiB,dtype=bf16": the keys that vary in the experiment's sweep ("default" if none).
std::string config_label(const ExperimentSpec& spec, const Point& p);
// The NVTX path of a row, "<group>/<experiment>/<variant>/<config>": nested push/pop ranges in
// the "infer-bench" domain, as Nsight Compute's --nvtx-include expects them.
std::string row_range_name(const ExperimentSpec& spec, const std::string& variant, const Point& p);

// Whether a book row's match keys all equal the row's point, variant (`variant:`) and role (`role:`).
bool book_row_matches(const BookRow& book_row, const Point& p, const std::string& variant, const std::string& role);
// Book figures of every book row that matches.
std::vector<std::pair<std::string, BookFigure>> match_book(const Book& book, const Point& p, const std::string& variant,
                                                           const std::string& role);

}  // namespace ib
