// Decode attention over a KV cache stored in bf16, FP8 e4m3 or INT8 (dequantized in registers),
// contiguous or paged (block tables), or int4 / int2 KIVI (contiguous), split-K ("flash-decoding"): `splits` blocks share each
// (sequence, kv head), write partial (max, sum, output) to a workspace, and a second kernel
// merges them. The layouts and quantization rules are those of lib/kvcache/decode_problem.h and
// lib/numerics/kv_format.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <cuda_runtime_api.h>

namespace ib {

enum class KvElem : int { BF16 = 0, FP8 = 1, INT8 = 2 };

struct KvCacheView {
  KvElem elem = KvElem::BF16;
  void* k = nullptr;  // contiguous [batch][kv_heads][capacity][head_dim] or paged [blocks][kv_heads][block_size][head_dim]
  void* v = nullptr;
  // fp8: [batch][kv_heads]; int8: contiguous [batch][kv_heads][capacity], paged [blocks][kv_heads][block_size]
  float* k_scale = nullptr;
  float* v_scale = nullptr;
  int batch = 1, kv_heads = 1, head_dim = 128;
  int capacity = 0;                      // contiguous: tokens per sequence
  const int32_t* block_table = nullptr;  // paged when set: [batch][max_blocks]
  int max_blocks = 0, block_size = 16;
};

struct KvDecodeParams {
  KvCacheView cache;
  const uint16_t* q = nullptr;       // [batch][heads][head_dim] bf16
  uint16_t* out = nullptr;           // [batch][heads][head_dim] bf16
  const int32_t* lengths = nullptr;  // [batch] tokens of each sequence (device)
  int heads = 1;
  int max_length = 0;          // the longest sequence (host knows it): sizes the split grid
  float scale = 1.0f;          // softmax scale
  int splits = 1;              // 0: chosen by kv_decode_splits
  float* workspace = nullptr;  // kv_decode_workspace_floats(...) floats when splits > 1
};

std::string kv_decode_unsupported(const KvDecodeParams& p);  // "" when supported
// Splits that fill the GPU for this problem (`sms` multiprocessors).
int kv_decode_splits(const KvDecodeParams& p, int sms);
size_t kv_decode_workspace_floats(const KvDecodeParams& p, int splits);
void launch_kv_decode(const KvDecodeParams& p, cudaStream_t stream);

// Staging for tests and benchmarks: dst [batch][kv_heads][chunk][head_dim] bf16 gets the inputs of
// decode_problem.h for tokens t0 .. t0+chunk-1: bf16(random_uniform(seed, kv_index(b, kvh, t, c)))
// with kv_index over a cache of `context` tokens.
void launch_kv_fill_chunk(uint16_t* dst, int batch, int kv_heads, int head_dim, int chunk, int t0, int context, uint64_t seed,
                          cudaStream_t stream);

// Quantize-on-append: sequence b gets count[b] tokens (count[b] <= n_tokens; 0 skips it) at
// positions first[b] .. first[b]+count[b]-1 from bf16 K and V laid out [batch][kv_heads][n_tokens][head_dim].
// bf16 copies; fp8 divides by the cache's per-(sequence, head) scale (which must be set) and
// rounds to e4m3 (RNE, saturating); int8 computes each token's scale = amax/127 over head_dim,
// stores it, and rounds x/scale to nearest even. Paged caches must have the blocks in the table.
void launch_kv_append(const KvCacheView& cache, const uint16_t* k_new, const uint16_t* v_new, int n_tokens, const int32_t* first,
                      const int32_t* count, cudaStream_t stream);
// fp8 calibration, one chunk at a time: k_amax[b·kv_heads + kvh] = max(itself, max |x|) over the
// count[b] tokens of k_new (likewise v); start from zeros; the scale is then amax/448 (fp8_scale).
void launch_kv_amax(float* k_amax, float* v_amax, const uint16_t* k_new, const uint16_t* v_new, int batch, int kv_heads,
                    int head_dim, int n_tokens, const int32_t* count, cudaStream_t stream);

// ---- int4 / int2 (KIVI) cache, contiguous (layouts of lib/kvcache/decode_problem.h, rules of
// lib/numerics/kv_format.h with B = bits, 4 or 2) ----
struct KiviCacheView {
  uint8_t* k_codes = nullptr;  // [batch][kv_heads][capacity][head_dim · bits / 8] packed codes, 8 / bits per byte
  uint8_t* v_codes = nullptr;
  uint32_t* k_params = nullptr;    // [batch][kv_heads][ceil(capacity / group)][head_dim]: fp16 scale | fp16 zero << 16
  uint32_t* v_params = nullptr;    // [batch][kv_heads][capacity][head_dim / group]
  uint16_t* k_residual = nullptr;  // [batch][kv_heads][group][head_dim] bf16: the last length mod group tokens
  uint16_t* v_residual = nullptr;
  int batch = 1, kv_heads = 1, head_dim = 128, capacity = 0, group = 32;
  int bits = 4;  // B: 4 (int4) or 2 (int2)
};

struct KiviDecodeParams {
  KiviCacheView cache;
  const uint16_t* q = nullptr;       // [batch][heads][head_dim] bf16
  uint16_t* out = nullptr;           // [batch][heads][head_dim] bf16
  const int32_t* lengths = nullptr;  // [batch] (device)
  int heads = 1;
  int max_length = 0;
  float scale = 1.0f;
  int splits = 1;              // 0: chosen by kivi_decode_splits
  float* workspace = nullptr;  // kivi_decode_workspace_floats(...) floats when splits > 1
};

std::string kivi_decode_unsupported(const KiviDecodeParams& p);  // "" when supported
int kivi_decode_splits(const KiviDecodeParams& p, int sms);
size_t kivi_decode_workspace_floats(const KiviDecodeParams& p, int splits);
void launch_kivi_decode(const KiviDecodeParams& p, cudaStream_t stream);
// Quantize-on-append: sequence b gets count[b] tokens at positions first[b] .. first[b]+count[b]-1
// from bf16 K and V laid out [batch][kv_heads][n_tokens][head_dim]; appends come in order
// (first[b] is the sequence's length, whose last first[b] mod group tokens are in the residual).
// Every key group the append completes is quantized (keys per channel, values per token) from
// the residual and the new tokens; the tokens of a group left incomplete go to the residual.
void launch_kivi_append(const KiviCacheView& cache, const uint16_t* k_new, const uint16_t* v_new, int n_tokens,
                        const int32_t* first, const int32_t* count, cudaStream_t stream);

}  // namespace ib
