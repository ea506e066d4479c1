#include "numerics/sgemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "numerics/parallel.h"

namespace ib {

namespace {

constexpr int MR = 6;    // rows of the register tile
constexpr int NR = 16;   // columns of the register tile: two 8-float vectors
constexpr int KC = 256;  // depth of the packed panels (B: NR × KC floats = 16 KiB, L1-resident)

// GCC/Clang vector extension: 8 floats; AVX in the Haswell clone, two SSE halves otherwise.
typedef float v8f __attribute__((vector_size(32)));

// C[mr × nr] += Ap · Bp where Ap is [kc][MR] and Bp is [kc][NR] (both packed, zero-padded).
// Twelve accumulators stay in registers. Instantiated for AVX2 + FMA and for generic x86-64;
// the dispatcher below picks by CPU feature (not by CPU model, which AMD parts would fail).
inline void store_tile(const v8f (&acc)[MR][2], float* C, int ldc, int mr, int nr) {
  float tile[MR][NR];
  std::memcpy(tile, acc, sizeof tile);
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j) C[i * ldc + j] += tile[i][j];
}

// Inlined into each target-specific wrapper, so it is compiled once per instruction set.
__attribute__((always_inline)) inline void micro_kernel_body(int kc, const float* Ap, const float* Bp, float* C, int ldc, int mr,
                                                             int nr) {
  v8f acc[MR][2];
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = v8f{};
  for (int p = 0; p < kc; ++p) {
    v8f b0, b1;
    std::memcpy(&b0, Bp + p * NR, sizeof b0);
    std::memcpy(&b1, Bp + p * NR + 8, sizeof b1);
    for (int i = 0; i < MR; ++i) {
      const v8f a = v8f{} + Ap[p * MR + i];  // broadcast
      acc[i][0] += a * b0;
      acc[i][1] += a * b1;
    }
  }
  store_tile(acc, C, ldc, mr, nr);
}

using MicroKernel = void (*)(int, const float*, const float*, float*, int, int, int);

void micro_kernel_generic(int kc, const float* Ap, const float* Bp, float* C, int ldc, int mr, int nr) {
  micro_kernel_body(kc, Ap, Bp, C, ldc, mr, nr);
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2,fma"))) void micro_kernel_avx2(int kc, const float* Ap, const float* Bp, float* C, int ldc, int mr,
                                                           int nr) {
  micro_kernel_body(kc, Ap, Bp, C, ldc, mr, nr);
}
#endif

MicroKernel pick_micro_kernel() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return micro_kernel_avx2;
#endif
  return micro_kernel_generic;
}

const MicroKernel micro_kernel = pick_micro_kernel();

}  // namespace

void sgemm_blocked(int m, int n, int k, const float* A, int lda, const float* B, int ldb, float* C, int ldc) {
  for (int i = 0; i < m; ++i) std::memset(C + static_cast<size_t>(i) * ldc, 0, sizeof(float) * n);
  const int panels = (n + NR - 1) / NR;
  const int row_tiles = (m + MR - 1) / MR;
  std::vector<float> Bp(static_cast<size_t>(panels) * NR * KC);
  for (int k0 = 0; k0 < k; k0 += KC) {
    const int kc = std::min(KC, k - k0);
    // Pack B[k0:k0+kc, :] into NR-wide panels [kc][NR], zero-padded on the right.
    parallel_for(static_cast<size_t>(panels), [&](size_t pb, size_t pe) {
      for (size_t pnl = pb; pnl < pe; ++pnl) {
        float* dst = Bp.data() + pnl * NR * KC;
        const int j0 = static_cast<int>(pnl) * NR, nr = std::min(NR, n - j0);
        for (int p = 0; p < kc; ++p) {
          const float* src = B + static_cast<size_t>(k0 + p) * ldb + j0;
          int j = 0;
          for (; j < nr; ++j) dst[p * NR + j] = src[j];
          for (; j < NR; ++j) dst[p * NR + j] = 0.0f;
        }
      }
    });
    // Each thread packs its row tiles of A as [kc][MR] and sweeps every B panel with them.
    parallel_for(static_cast<size_t>(row_tiles), [&](size_t tb, size_t te) {
      std::vector<float> Ap(static_cast<size_t>(MR) * KC);
      for (size_t t = tb; t < te; ++t) {
        const int i0 = static_cast<int>(t) * MR, mr = std::min(MR, m - i0);
        for (int p = 0; p < kc; ++p)
          for (int i = 0; i < MR; ++i)
            Ap[static_cast<size_t>(p) * MR + i] = i < mr ? A[static_cast<size_t>(i0 + i) * lda + k0 + p] : 0.0f;
        for (int pnl = 0; pnl < panels; ++pnl) {
          const int j0 = pnl * NR;
          micro_kernel(kc, Ap.data(), Bp.data() + static_cast<size_t>(pnl) * NR * KC, C + static_cast<size_t>(i0) * ldc + j0, ldc,
                       mr, std::min(NR, n - j0));
        }
      }
    });
  }
}

void sgemm_accumulate_serial(int m, int n, int k, const float* A, int lda, const float* B, int ldb, float* C, int ldc) {
  const int panels = (n + NR - 1) / NR;
  thread_local std::vector<float> Bp, Ap;
  Bp.resize(static_cast<size_t>(panels) * NR * KC);
  Ap.resize(static_cast<size_t>(MR) * KC);
  for (int k0 = 0; k0 < k; k0 += KC) {
    const int kc = std::min(KC, k - k0);
    for (int pnl = 0; pnl < panels; ++pnl) {
      float* dst = Bp.data() + static_cast<size_t>(pnl) * NR * KC;
      const int j0 = pnl * NR, nr = std::min(NR, n - j0);
      for (int p = 0; p < kc; ++p) {
        const float* src = B + static_cast<size_t>(k0 + p) * ldb + j0;
        int j = 0;
        for (; j < nr; ++j) dst[p * NR + j] = src[j];
        for (; j < NR; ++j) dst[p * NR + j] = 0.0f;
      }
    }
    for (int i0 = 0; i0 < m; i0 += MR) {
      const int mr = std::min(MR, m - i0);
      for (int p = 0; p < kc; ++p)
        for (int i = 0; i < MR; ++i)
          Ap[static_cast<size_t>(p) * MR + i] = i < mr ? A[static_cast<size_t>(i0 + i) * lda + k0 + p] : 0.0f;
      for (int pnl = 0; pnl < panels; ++pnl) {
        const int j0 = pnl * NR;
        micro_kernel(kc, Ap.data(), Bp.data() + static_cast<size_t>(pnl) * NR * KC, C + static_cast<size_t>(i0) * ldc + j0, ldc,
                     mr, std::min(NR, n - j0));
      }
    }
  }
}

}  // namespace ib
