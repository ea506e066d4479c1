// Device pieces that flash2 (mma.sync) and flash3 (wgmma) share. Both hold a score tile in the
// mma accumulator layout: lane (g = lane / 4, t = lane % 4) holds rows g and g + 8 of its warp's
// 16 rows, so a row's values are spread over the 4 lanes of a quad.
#pragma once

#include <cmath>

#include "element.cuh"

namespace ib {

// x reduced over the quad (lanes 4q .. 4q + 3): every lane of the quad gets the result.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// One row's online-softmax step in base 2 on raw (unscaled) scores: softmax_merge
// (numerics/online_softmax.h) specialised to registers. `new_max` is max(row_max, the row's max
// over the new tile), already reduced over the quad (raw scores; valid because scale > 0). The
// running max becomes new_max; the row sum (this lane's share) is rescaled; the return value is
// alpha = exp(m_old − m_new), the factor on the output accumulated so far, and *offset =
// m_new · scale_log2, to subtract inside the exponent of the tile's scores. A row that has seen no
// visible key keeps max -inf: its offset is 0 so that exp2(-inf − offset) is 0, never
// exp2(-inf + inf) = NaN; the old max is -inf exactly when nothing was accumulated (alpha = 0
// then multiplies zeros).
__device__ __forceinline__ float online_softmax_rescale(float& row_max, float& row_sum, float new_max, float scale_log2,
                                                        float* offset) {
  *offset = new_max == -INFINITY ? 0.0f : new_max * scale_log2;
  const float alpha = exp2_approx(fmaf(row_max, scale_log2, -*offset));
  row_max = new_max;
  row_sum *= alpha;
  return alpha;
}

}  // namespace ib
