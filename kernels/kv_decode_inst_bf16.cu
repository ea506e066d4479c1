// The 24 split-K decode kernels of a bf16 cache (contiguous and paged, head_dim 64 / 128 / 256,
// every heads-per-block size): one format per translation unit, so the formats compile in parallel.
#include "kv_decode_kernel.cuh"

namespace ib::detail {

template DecodeKernel pick_layout<KvElem::BF16>(bool paged, int d, int g);

}  // namespace ib::detail
