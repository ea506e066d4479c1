// How the card's peaks are measured (core/ceilings.h), provided by the `ceiling` kind: the built-in
// spec of its copy and GEMM variants, and which of its rows are the peaks. Core runs it at the
// start of every run and for `info`, and knows nothing of the kind's keys or variants.
#include <fmt/format.h>

#include "core/ceilings.h"
#include "core/spec.h"
#include "core/units.h"
#include "kinds/ceiling/ceiling_keys.h"

namespace ib {
namespace {

Spec ceiling_spec_yaml(Backend backend, bool quick, const RunControlOverrides& overrides) {
  // The GPU sizes are far past L2 (60 MB on H200) and large enough for cuBLAS's best kernels;
  // the CPU sizes fit a 2-core CI machine. `quick` only shortens the sampling.
  const char* control =
      quick ? "    warmup: 2\n    min_samples: 5\n    min_time: 50ms\n    max_noise: 2%\n    timeout: 2s\n" : "";
  const char* cpu_bytes = "256MiB";
  const int cpu_gemm = 1024;
  std::string yaml = fmt::format(
      "version: 1\n"
      "experiments:\n"
      "  - name: peak-copy\n"
      "    kind: ceiling\n"
      "    description: Copy bandwidth, bytes read + written per second\n"
      "    variants: [copy]\n"
      "    bytes: 1GiB\n"
      "{0}"
      "    cpu: {{variants: [memcpy], bytes: {1}}}\n"
      "  - name: peak-gemm\n"
      "    kind: ceiling\n"
      "    description: Dense GEMM rate, 2·m·n·k FLOP per run\n"
      "    variants: [gemm]\n"
      "    m: 8192\n    n: 8192\n    k: 8192\n    dtype: bf16\n"
      "{0}"
      "    cpu: {{variants: [sgemm, blas_sgemm, fma_peak], m: {2}, n: {2}, k: {2}, dtype: fp32}}\n",
      control, cpu_bytes, cpu_gemm);
  SpecOptions opt;
  opt.backend = backend;
  opt.overrides = overrides;
  return parse_spec(yaml, "<built-in ceiling spec>", opt);
}

Ceilings peaks_of(const std::vector<ExperimentResult>& results) {
  Ceilings c;
  for (const auto& e : results)
    for (const auto& r : e.rows) {
      if (r.status != RowStatus::Ok || r.stats.median <= 0) continue;
      if ((r.variant == "copy" || r.variant == "memcpy") && r.work.bytes > 0) {
        double rate = r.work.bytes / r.stats.median;
        if (rate > c.copy_bytes_per_s) {
          c.copy_bytes_per_s = rate;
          c.copy_label = fmt::format("{} {}", r.variant == "copy" ? "cudaMemcpy D2D" : "memcpy",
                                     format_bytes(static_cast<double>(ceiling_keys().read(r.point).bytes)));
        }
      }
      if (r.variant == "fma_peak" && r.work.flops > 0) {
        c.fma_flops_per_s = r.work.flops / r.stats.median;
        c.fma_label = r.message;
      }
      if ((r.variant == "gemm" || r.variant == "sgemm" || r.variant == "blas_sgemm") && r.work.flops > 0) {
        double rate = r.work.flops / r.stats.median;
        if (rate > c.gemm_flops_per_s) {
          c.gemm_flops_per_s = rate;
          const char* who = r.variant == "gemm" ? "cuBLAS" : r.variant == "sgemm" ? "our blocked SGEMM" : "OpenBLAS SGEMM";
          const CeilingKeys k = ceiling_keys().read(r.point);
          c.gemm_label = fmt::format("{} {} {}x{}x{}", who, k.dtype, k.m, k.n, k.k);
        }
      }
    }
  return c;
}

const CeilingProvision provision({ceiling_spec_yaml, peaks_of});

}  // namespace
}  // namespace ib
