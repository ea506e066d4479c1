// The AVX-512 packed GEMV kernels' epilogue (float, block and int8 panels): NR rows of J registers
// of 16 columns stored to y (row stride `out`), the columns past `cols` untouched, since the last
// panel of a matrix may hold fewer than its width.
#pragma once

#include <algorithm>
#include <cstddef>

#include <immintrin.h>

namespace ib {

template <int NR, int J>
__attribute__((target("avx512f"))) inline void store_columns_avx512(const __m512 (&acc)[NR][J], int cols, float* y, int out) {
  for (int j = 0; j < J; ++j) {
    const int n = std::clamp(cols - 16 * j, 0, 16);
    const __mmask16 mask = static_cast<__mmask16>((1u << n) - 1u);
    for (int r = 0; r < NR; ++r) _mm512_mask_storeu_ps(y + static_cast<size_t>(r) * out + 16 * j, mask, acc[r][j]);
  }
}

}  // namespace ib
