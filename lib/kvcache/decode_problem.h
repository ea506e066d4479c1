// Decode attention over a KV cache (one query token per sequence, a batch of sequences of their
// own lengths): the shape, the counter-based inputs, the storage layouts
// the CPU and CUDA variants share, and the correctness gate.
//
// Layouts (E = the stored element: bf16 bits, e4m3 bits or int8):
//   q, out         [batch][heads][head_dim] bf16
//   contiguous K/V [batch][kv_heads][context][head_dim] E   (capacity = context for every sequence)
//   paged K/V      [num_blocks][kv_heads][block_size][head_dim] E, sequence b's token t in block
//                  table[b][t / block_size], slot t % block_size
//   fp8 scales     [batch][kv_heads] floats for K and for V (per sequence and head)
//   int8 scales    per token: contiguous [batch][kv_heads][context], paged [num_blocks][kv_heads][block_size]
//   int4 / int2 (KIVI, G = kivi_group, B = kivi_bits(format) = 4 / 2; contiguous only), per
//                  (sequence, kv head), capacity = context:
//                  K and V codes [batch][kv_heads][context][head_dim·B/8] (rows of the residual
//                  tokens unused), K (scale, zero) fp16 pairs [batch][kv_heads][ceil(context/G)][head_dim][2],
//                  V pairs [batch][kv_heads][context][head_dim/G][2], K and V residual
//                  [batch][kv_heads][G][head_dim] bf16 (token t of the residual at slot t mod G).
// Query head h reads kv head h / (heads / kv_heads).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "numerics/half.h"
#include "numerics/kv_format.h"
#include "numerics/random.h"

namespace ib::kvcache {

struct DecodeShape {
  int batch = 1, heads = 32, kv_heads = 32, head_dim = 128, context = 4096;
  bool ragged = false;  // sequence lengths vary in (context/2, context]; sequence 0 has context
  KvFormat format = KvFormat::BF16;
  int block_size = 0;           // 0: contiguous cache
  int kivi_group = kKiviGroup;  // int4/int2: G, tokens per key group and channels per value group

  bool paged() const { return block_size > 0; }
  int group() const { return heads / kv_heads; }
  int length(int b) const;
  int quantized_length(int b) const;  // int4/int2: tokens in full key groups (the rest is the bf16 residual)
  int64_t total_tokens() const;       // Σ lengths
  int blocks_per_seq() const;         // paged: ceil(context / block_size)
  double kv_bytes() const;            // K and V bytes a step reads: elements + scales
  double io_bytes() const;            // kv_bytes + q read + out written
  double flops() const;               // 4·head_dim per (query head, key)
  double scale() const;               // 1/sqrt(head_dim)
  std::string label() const;
};

// The key that sets G of a KIVI format ("int4_group", "int2_group"; "" for the others), named in
// decode_shape_problem's message.
const char* kivi_group_key(KvFormat f);

// Why the shape is not a decode-attention problem ("" when it is).
std::string decode_shape_problem(const DecodeShape& s);

// The block tables of a paged cache for the shape, made by a BlockManager with a pool of exactly
// the blocks the sequences need, appending tokens to the sequences in seeded random order so that
// a sequence's blocks are scattered over the pool as after real churn. table: [batch][max_blocks],
// -1 past a sequence's last block.
struct BlockTables {
  int num_blocks = 0, max_blocks = 0;
  std::vector<int32_t> table;
};
BlockTables build_block_tables(const DecodeShape& s, uint64_t seed);

// Inputs: q(b,h,c) = bf16(2·u), k(b,kvh,t,c) = bf16(u), v = bf16(u) with u uniform in [-1, 1)
// drawn from counters of the logical position (independent of the layout), seeds seed, +1, +2.
struct DecodeInputs {
  uint64_t seed = 0;
  int heads = 32, kv_heads = 32, head_dim = 128, context = 4096;
  static constexpr float kQScale = 2.0f;
  uint64_t q_index(int b, int h, int c) const { return (static_cast<uint64_t>(b) * heads + h) * head_dim + c; }
  uint64_t kv_index(int b, int kvh, int t, int c) const {
    return ((static_cast<uint64_t>(b) * kv_heads + kvh) * context + t) * head_dim + c;
  }
  float q(int b, int h, int c) const { return round_bf16(kQScale * random_uniform(seed, q_index(b, h, c))); }
  float k(int b, int kvh, int t, int c) const { return round_bf16(random_uniform(seed + 1, kv_index(b, kvh, t, c))); }
  float v(int b, int kvh, int t, int c) const { return round_bf16(random_uniform(seed + 2, kv_index(b, kvh, t, c))); }
  static float round_bf16(float x) { return bf16_bits_to_float(float_to_bf16_bits(x)); }
};
DecodeInputs decode_inputs(const DecodeShape& s, uint64_t seed);

// One (sequence, kv head) of a cache as stored: n tokens × head_dim elements of the format
// (bf16: 2 little-endian bytes each) and its scales (fp8: 1 per head; int8: 1 per token; bf16: none).
// int4 / int2 (KIVI): k and v hold the nq = quantized_length(b) packed code rows (head_dim·B/8 bytes
// each), then the n - nq residual rows as bf16; k_scale the (scale, zero) pairs of K
// [nq/G][head_dim][2] and v_scale those of V [nq][head_dim/G][2], as floats (fp16 values).
struct StoredHead {
  std::vector<uint8_t> k, v;
  std::vector<float> k_scale, v_scale;
};

// The host quantizer (the rules of kv_format.h): what a correct cache holds for (b, kvh).
StoredHead quantize_head(const DecodeShape& s, const DecodeInputs& in, int b, int kvh);
// Element t·head_dim + c of a stored head, dequantized (float).
void dequantize_head(const DecodeShape& s, const StoredHead& h, int n, std::vector<float>& k, std::vector<float>& v);
// The original (bf16) values of (b, kvh): n × head_dim each.
void original_head(const DecodeShape& s, const DecodeInputs& in, int b, int kvh, std::vector<float>& k, std::vector<float>& v);

// Float64 attention of one query q[d] over n keys/values [n][d] into out[d].
void attend(int n, int d, const float* q, const float* k, const float* v, double scale, double* out);

}  // namespace ib::kvcache
