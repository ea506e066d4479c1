// Kind `ceiling`: the card's copy bandwidth and GEMM rate, the denominators of every report's
// roofline columns (`infer-bench info` prints them). Its variants are declared beside their code:
// cpu_ceiling.cpp and cuda_ceiling.cpp.
#include "core/registry.h"
#include "kinds/ceiling/ceiling_keys.h"

namespace ib {

const ParamSet<CeilingKeys>& ceiling_keys() {
  using P = CeilingKeys;
  static const ParamSet<CeilingKeys> set =
      ParamSet<CeilingKeys>()
          .add(&P::bytes, key_spec("bytes", ParamType::Bytes, "size of the copied buffer", Value(int64_t{1} << 30), 4096.0))
          .add(&P::m, key_spec("m", ParamType::Int, "GEMM rows of A and C", Value(int64_t{8192}), 1.0))
          .add(&P::n, key_spec("n", ParamType::Int, "GEMM columns of B and C", Value(int64_t{8192}), 1.0))
          .add(&P::k, key_spec("k", ParamType::Int, "GEMM inner dimension", Value(int64_t{8192}), 1.0))
          .add(&P::dtype, enum_key("dtype", "GEMM element type (fp32 accumulation)", "bf16", {"bf16", "fp16", "fp32"}));
  return set;
}

namespace {

KindInfo ceiling_kind() {
  KindInfo k;
  k.name = "ceiling";
  k.smallest = "bytes: 1 MiB\nm: 64\nn: 64\nk: 64\ndtype: fp32\n";
  k.group = "ceiling";
  k.doc =
      "Peak rates of the machine: copy bandwidth (bytes read + written per second) and dense GEMM "
      "throughput (2·m·n·k FLOP per run). `copy`/`memcpy` use `bytes`; `gemm`/`sgemm` use `m`, `n`, `k`, `dtype`.";
  k.keys = ceiling_keys().keys();
  k.roofline = true;
  return k;
}

const KindRegistration registration(ceiling_kind());

}  // namespace
}  // namespace ib
