// The element-wise and small kernels of the CUDA transformer engine (lib/model/cuda_model*.cpp):
// everything of a Llama-family decoder step except the matmuls (cuBLAS) and prefill attention
// (FlashAttention-2, kernels/attention.h). Activations are bf16 (stored as uint16_t bits), the
// residual stream and logits fp32; every launcher enqueues on `stream` and checks the launch.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

namespace ib {

// One query row of attention over a sequence's KV cache. The cache of a sequence is one buffer
// [layers][2 (K, V)][kv_heads][capacity][head_dim] bf16, so a row needs only its base, its
// capacity and the position of its query token: the row's own K/V are written at `pos`, and it
// attends to keys max(0, pos + 1 − window) .. pos (all of 0 .. pos without a window). Decode has
// one row per sequence; the split-K prefill path one row per token, all sharing a cache.
struct AttnRow {
  uint16_t* cache = nullptr;
  int32_t capacity = 0;
  int32_t pos = 0;
};
static_assert(sizeof(AttnRow) == 16, "AttnRow is uploaded as raw bytes");

// dst[i] = bits for i < count (e.g. 0x3F80 = 1.0 in bf16: the RMSNorm weights of random models).
void launch_fill_u16(uint16_t* dst, size_t count, uint16_t bits, cudaStream_t stream);

// x[r][:] = float(table[tokens[r]][:]) for r < rows (the residual stream starts as the embedding).
// Tokens outside [0, vocab) give a zero row (callers validate tokens on the host).
void launch_embed(const uint16_t* table, const int32_t* tokens, int rows, int hidden, int vocab, float* x, cudaStream_t stream);

// Residual add + RMSNorm: if delta != nullptr, x[r] += delta[r] (bf16) first and the sum is
// written back to x; then out[r] = bf16(x[r] / sqrt(mean(x[r]²) + eps) · w), all in fp32.
// Rows of x and out are contiguous with `hidden` elements.
void launch_add_rmsnorm(float* x, const uint16_t* delta, const uint16_t* w, float eps, int rows, int hidden, uint16_t* out,
                        cudaStream_t stream);

// What follows the fused QKV GEMM, in one kernel per row: qkv[r] = [q (heads·D) | k (kv·D) |
// v (kv·D)] bf16, optionally + bias (same layout; with qk_bias_applied only v's part is added:
// launch_head_rmsnorm added q's and k's), RoPE on q and k (Hugging Face rotate-half: pairs
// (i, i + D/2), angle pos·inv_freq[i], pos = rows[r].pos, cos and sin times attention_factor;
// inv_freq: device, [D/2], ModelConfig::rope_inv_freq), then
//   - q: back into qkv in place (q_heads_major == nullptr), or into q_heads_major laid out
//     [heads][n_rows][D] (the layout FlashAttention-2 reads);
//   - k, v: into the cache of rows[r] at position pos (layer `layer`).
//   With `slots` (tree verification), row r's k and v go to position slots[r] of its cache
//   instead of rows[r].pos (which stays its RoPE position).
void launch_qkv_rope_append(uint16_t* qkv, const uint16_t* bias, bool qk_bias_applied, const AttnRow* rows, int n_rows, int layer,
                            int heads, int kv_heads, int head_dim, const double* inv_freq, double attention_factor,
                            uint16_t* q_heads_major, cudaStream_t stream, const int32_t* slots = nullptr);

// Qwen3's q_norm / k_norm on qkv[r] (layout as above), in place, before RoPE: each q head (and
// k head) x (+ its bias, when `bias`) becomes bf16(x / sqrt(mean(x²) + eps) · q_w (k_w)).
void launch_head_rmsnorm(uint16_t* qkv, const uint16_t* bias, int n_rows, int heads, int kv_heads, int head_dim,
                         const uint16_t* q_w, const uint16_t* k_w, float eps, cudaStream_t stream);

// y[r][i] += bias[i] over rows × n fp32 (o_proj and down_proj biases on the residual stream).
void launch_add_bias_f32(float* y, const uint16_t* bias, int rows, int n, cudaStream_t stream);
// y[r][i] = bf16(y[r][i] + bias[i]) over rows × n bf16 (gate/up biases before SwiGLU).
void launch_add_bias_bf16(uint16_t* y, const uint16_t* bias, int rows, int n, cudaStream_t stream);

// rows[i] = {cache, capacity, first_pos + i} for i < n (the rows of one prefill chunk).
void launch_fill_attn_rows(AttnRow* rows, int n, uint16_t* cache, int capacity, int first_pos, cudaStream_t stream);

// What the attention kernels of query rows over their caches share: q (row r's head h at
// q[r·q_row_stride + h·D], rotated), the rows' caches and positions, GQA shape, sliding window
// (0 = none), softmax scale, and out: [n_rows][heads·D] bf16.
struct RowAttentionArgs {
  const uint16_t* q = nullptr;
  int64_t q_row_stride = 0;
  const AttnRow* rows = nullptr;
  int n_rows = 0;
  int layer = 0;
  int heads = 1, kv_heads = 1, head_dim = 128;
  int window = 0;
  float scale = 1.0f;
  uint16_t* out = nullptr;
};

// Split-K ("flash-decoding") attention of one query per row over keys 0 .. pos of its cache
// (within the window). `splits` blocks share each (row, kv head) and write partial (max, sum,
// output) to `workspace`, merged by a second kernel; splits == 1 writes out directly and needs
// no workspace.
struct DecodeAttentionArgs : RowAttentionArgs {
  int splits = 1;
  float* workspace = nullptr;  // decode_attention_workspace_floats(n_rows, heads, head_dim, splits)
};
bool decode_attention_supports(int head_dim, int heads, int kv_heads);
size_t decode_attention_workspace_floats(int n_rows, int heads, int head_dim, int splits);
// Blocks of one split: n_rows · kv_heads · ceil(group / heads per block); callers pick `splits`
// so that blocks · splits fills the GPU.
int64_t decode_attention_blocks_per_split(int n_rows, int heads, int kv_heads);
void launch_decode_attention(const DecodeAttentionArgs& a, cudaStream_t stream);

// Attention of the rows of a token tree (tree verification; lib/model's prefill_tree). Row r
// attends to the positions [first, base) of its cache – first = max(0, rows[r].pos + 1 − window),
// 0 without a window – and then to the positions anc[anc_begin[r] .. anc_begin[r + 1]) in that
// order: its ancestors' slots and its own. One block per (row, head), keys in tiles with an
// online softmax (any context; head_dim <= 256).
struct TreeAttentionArgs : RowAttentionArgs {
  int base = 0;                        // committed tokens before the tree
  const int32_t* anc_begin = nullptr;  // [n_rows + 1]
  const int32_t* anc = nullptr;
};
void launch_tree_attention(const TreeAttentionArgs& a, cudaStream_t stream);

// dst[r][h·D + d] = src[h][r][d]: FlashAttention-2's output back to token-major rows.
void launch_heads_to_rows(const uint16_t* src, int n_rows, int heads, int head_dim, uint16_t* dst, cudaStream_t stream);

// SwiGLU on the fused gate/up GEMM output gate_up[r] = [gate (mlp) | up (mlp)]:
// out[r][i] = bf16(silu(gate) · up), silu(g) = g / (1 + e^−g).
void launch_swiglu(const uint16_t* gate_up, int rows, int mlp, uint16_t* out, cudaStream_t stream);

// Token choice for `rows` rows of fp32 logits ([rows][vocab]), out[r] an int32 token id.
// Greedy (temperature <= 0): argmax, smallest index on ties, NaN ignored (-1 for a row of NaN;
// the masked argmax of constrain_mask.h without a mask). Otherwise the
// definition of model/sample.h: p = softmax(logits / T), kept = the top_k most likely (ties by
// index), then the smallest prefix (descending p, ties by index) of the kept tokens whose mass
// reaches top_p of the kept mass; the token is where u · (mass of the final set) falls in the
// cumulative distribution taken in that order, u = sample_uniform(seed, step, row_base + r).
// Same order (logit, then index) and formulas as the CPU sampler (model/sample.cpp), so the same
// logits give the same token barring rounding right at a boundary.
void launch_sample(const float* logits, int rows, int vocab, float temperature, int top_k, float top_p, uint64_t seed,
                   uint64_t step, int row_base, int32_t* out, cudaStream_t stream);

}  // namespace ib
