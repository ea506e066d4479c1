// Kind `ceiling`: the card's copy bandwidth and GEMM rate, the denominators of every report's
// roofline columns (`infer-bench info` prints them). Its variants are declared beside their code:
// cpu_ceiling.cpp and cuda_ceiling.cpp.
#include "core/registry.h"

namespace ib {
namespace {

KindInfo ceiling_kind() {
  KindInfo k;
  k.name = "ceiling";
  k.group = "ceiling";
  k.doc =
      "Peak rates of the machine: copy bandwidth (bytes read + written per second) and dense GEMM "
      "throughput (2·m·n·k FLOP per run). `copy`/`memcpy` use `bytes`; `gemm`/`sgemm` use `m`, `n`, `k`, `dtype`.";
  k.keys = {
      key_spec("bytes", ParamType::Bytes, "size of the copied buffer", Value(int64_t{1} << 30), 4096.0),
      key_spec("m", ParamType::Int, "GEMM rows of A and C", Value(int64_t{8192}), 1.0),
      key_spec("n", ParamType::Int, "GEMM columns of B and C", Value(int64_t{8192}), 1.0),
      key_spec("k", ParamType::Int, "GEMM inner dimension", Value(int64_t{8192}), 1.0),
  };
  KeySpec dtype = key_spec("dtype", ParamType::Enum, "GEMM element type (fp32 accumulation)", Value(std::string("bf16")));
  dtype.choices = {"bf16", "fp16", "fp32"};
  k.keys.push_back(dtype);
  return k;
}

const KindRegistration registration(ceiling_kind());

}  // namespace
}  // namespace ib
