// The 12 int4 (KIVI, 4-bit codes) split-K decode kernels (head_dim 64 / 128 / 256, 1 / 2 / 4 / 8
// heads per block): one code width per translation unit, so the widths compile in parallel.
#include "kv_decode_kivi.cuh"

namespace ib::detail {

template KiviKernel kivi_pick_dim<4>(int head_dim, int g);

}  // namespace ib::detail
