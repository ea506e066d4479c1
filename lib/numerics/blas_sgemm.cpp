#include "numerics/blas_sgemm.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include <cblas.h>

#include "numerics/parallel.h"

// Debian's OpenBLAS is built with DYNAMIC_ARCH: at load it picks kernels by the CPU's family and
// model, and a CPU it does not know (0.3.21 on an Emerald Rapids Xeon, model 207) gets its oldest,
// SSE3 "Prescott", at 27 GFLOP/s on one core where its SkylakeX kernels measured 150. It reads
// OPENBLAS_CORETYPE to override that, once, in its constructor. Linked statically (CMakeLists.txt
// always takes libopenblas.a for this), that constructor is one of this executable's, of default
// priority; this one, of priority 101, runs before it and names the kernels from the instruction
// sets the CPU reports, unless the user named them. (A .preinit_array entry would run earlier
// still, but its setenv is lost when libc's own initialisation resets the environment.)
namespace {

__attribute__((constructor(101))) void choose_openblas_core() {
  if (std::getenv("OPENBLAS_CORETYPE")) return;
  __builtin_cpu_init();
  const char* core = nullptr;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq"))
    core = "SkylakeX";
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    core = "Haswell";
  if (core) setenv("OPENBLAS_CORETYPE", core, 0);
}

}  // namespace

namespace ib {
namespace {

void single_threaded_blas() {
  static const bool once = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)once;
}

}  // namespace

void blas_sgemm(int m, int n, int k, const float* A, int lda, const float* B, int ldb, float* C, int ldc) {
  single_threaded_blas();
  // Column slices of 64 per task: each thread runs OpenBLAS on its own slice of B and C.
  const size_t slices = static_cast<size_t>((n + 63) / 64);
  parallel_for(slices, [&](size_t lo, size_t hi) {
    const int j0 = static_cast<int>(lo) * 64, j1 = std::min(n, static_cast<int>(hi) * 64);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, j1 - j0, k, 1.0f, A, lda, B + j0, ldb, 0.0f, C + j0, ldc);
  });
}

const char* blas_description() {
  static const std::string d = [] {
    // openblas_get_config(): "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ...": its first two words.
    const std::string config = openblas_get_config();
    const size_t second = config.find(' ', config.find(' ') + 1);
    return config.substr(0, second) + " (" + openblas_get_corename() + " kernels)";
  }();
  return d.c_str();
}

}  // namespace ib
