// Attention on the GPU: the softmax pass of standard (materialized) attention, and the fused
// FlashAttention kernels. Tensors are contiguous [batch][heads][seq][head_dim] in bf16 or fp16;
// with grouped-query attention head h reads kv head h / (heads / kv_heads).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <cuda_runtime_api.h>

namespace ib {

struct AttentionParams {
  const void* q = nullptr;  // [batch][heads][seq_q][head_dim]
  const void* k = nullptr;  // [batch][kv_heads][seq_k][head_dim]
  const void* v = nullptr;  // [batch][kv_heads][seq_k][head_dim]
  void* o = nullptr;        // [batch][heads][seq_q][head_dim], same dtype as q
  int batch = 1, heads = 1, kv_heads = 1, head_dim = 128, seq_q = 1, seq_k = 1;
  // Causal, aligned bottom-right as in FlashAttention-2: query i sees keys j <= i + seq_k - seq_q.
  bool causal = false;
  // flash2 and flash3 only, with causal: a sliding window of this many keys — query i sees keys
  // i + seq_k − seq_q − window < j <= i + seq_k − seq_q (Mistral: the last `window` positions,
  // its own included). 0: no window.
  int window = 0;
  float scale = 1.0f;  // softmax scale, usually 1/sqrt(head_dim)
  bool fp16 = false;   // element type of q, k, v, o: fp16 when true, bf16 otherwise
  // flash2 and flash3 only: elements between consecutive kv heads and batch entries of k and v
  // (rows within a head stay contiguous, head_dim apart), so k and v can be views into a KV cache
  // of larger capacity. 0 means contiguous: seq_k·head_dim and kv_heads·seq_k·head_dim.
  int64_t k_head_stride = 0, v_head_stride = 0;
  int64_t k_batch_stride = 0, v_batch_stride = 0;
};

// --- standard attention, pass 2 of 3 (passes 1 and 3 are cuBLAS GEMMs) ---
// Row softmax of S (already scaled) into P, both `rows` × seq_k in the element type. Row r is
// query r % seq_q (rows of one [batch, kv head] hold its heads' queries one after the other); with
// `causal` the keys after the query's diagonal get probability 0, and with `window` > 0 also those
// at or before diagonal − window. Reads in fp32, writes P.
void launch_attention_softmax(const void* s, void* p, int64_t rows, int seq_q, int seq_k, bool causal, int window, bool fp16,
                              cudaStream_t stream);

// --- FlashAttention-1 structure: grid over batch × heads; K/V tiles in the outer loop, Q tiles in
// the inner loop; the running output (fp32), row max and row sum live in HBM and are re-read and
// re-written for every K/V tile, then normalised into o at the end. ---
// Workspace: o_accum = batch·heads·seq_q·head_dim floats, row_max and row_sum = batch·heads·seq_q.
std::string flash1_unsupported(const AttentionParams& p);  // "" when supported
size_t flash1_workspace_floats(const AttentionParams& p);
void launch_flash1(const AttentionParams& p, float* workspace, cudaStream_t stream);

// --- FlashAttention-2 structure: grid over query tiles × heads × batch, Q tile held in registers,
// K/V tiles streamed through shared memory, tensor cores (mma.sync m16n8k16), online softmax with
// the rescale deferred to the end, fully masked causal tiles skipped. No workspace. ---
std::string flash2_unsupported(const AttentionParams& p);  // "" when supported
void launch_flash2(const AttentionParams& p, cudaStream_t stream);

// What flash2 and flash3 both need of a problem ("" when it is fine); `kernel` names the kernel
// in the reason: head_dim 64/128, scale > 0, causal windows, grid limits, 16-byte alignment, strides.
std::string fused_attention_problem(const AttentionParams& p, const char* kernel);
// Shapes that no fused kernel (flash1, flash2, flash3) handles, whatever the head_dim ("" when none):
// where flash1_unsupported and fused_attention_problem begin.
std::string fused_shape_problem(const AttentionParams& p, const char* kernel);

// --- FlashAttention-3 structure, Hopper only (sm_90a: wgmma, TMA, setmaxnreg): a producer warp
// loads Q once and K/V tiles of 128 keys through a two-stage shared-memory ring with TMA
// (mbarrier handshakes); two consumer warpgroups of 64 query rows each compute S = Q·Kᵀ and
// O += P·V with wgmma, P staying in registers, online softmax in fp32; the softmax of tile j
// overlaps the P·V wgmma of tile j − 1. Same problems as flash2 (strides, windows, GQA), on an
// sm_90 device only. No workspace. See kernels/attention_flash3.cu. ---
std::string flash3_unsupported(const AttentionParams& p);  // "" when supported (queries the current device)
void launch_flash3(const AttentionParams& p, cudaStream_t stream);
// For the staged GPU tests: Serial issues S = Q·Kᵀ and O += P·V one after the other (no overlap
// of the softmax with the P·V wgmma), so a wrong result that only Overlapped shows is a pipeline
// bug, not a layout bug. Serial is built for bf16 only.
enum class Flash3Schedule { Overlapped, Serial };
void launch_flash3_schedule(const AttentionParams& p, cudaStream_t stream, Flash3Schedule schedule);

}  // namespace ib
