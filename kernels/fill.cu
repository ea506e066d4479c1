#include "fill.h"

#include "numerics/cuda_check.h"
#include "numerics/half.h"
#include "numerics/random.h"

namespace ib {

namespace {
// Grid-stride loop: one thread per element, any count.
template <DType T>
__global__ void fill_random_kernel(void* dst, size_t count, uint64_t seed, float scale) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    if constexpr (T == DType::U32) {
      static_cast<uint32_t*>(dst)[i] = static_cast<uint32_t>(random_bits(seed, i));
    } else {
      const float v = scale * random_uniform(seed, i);
      if constexpr (T == DType::F32)
        static_cast<float*>(dst)[i] = v;
      else if constexpr (T == DType::BF16)
        static_cast<uint16_t*>(dst)[i] = float_to_bf16_bits(v);
      else
        static_cast<uint16_t*>(dst)[i] = float_to_fp16_bits(v);
    }
  }
}
}  // namespace

void launch_fill_random(void* dst, size_t count, DType dtype, uint64_t seed, float scale, cudaStream_t stream) {
  if (count == 0) return;
  const int threads = 256;
  const size_t wanted = (count + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(wanted < 65536 ? wanted : 65536);
  switch (dtype) {
    case DType::F32:
      fill_random_kernel<DType::F32><<<blocks, threads, 0, stream>>>(dst, count, seed, scale);
      break;
    case DType::BF16:
      fill_random_kernel<DType::BF16><<<blocks, threads, 0, stream>>>(dst, count, seed, scale);
      break;
    case DType::F16:
      fill_random_kernel<DType::F16><<<blocks, threads, 0, stream>>>(dst, count, seed, scale);
      break;
    case DType::U32:
      fill_random_kernel<DType::U32><<<blocks, threads, 0, stream>>>(dst, count, seed, scale);
      break;
  }
  IB_CUDA_CHECK_LAUNCH();
}

}  // namespace ib
