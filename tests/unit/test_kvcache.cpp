// KV cache formats (FP8 e4m3, INT8 and int4/int2 KIVI rules and packing), the block manager under random alloc/fork/append/
// free with copy-on-write checked against a model of every sequence's tokens, the decode-attention
// gate (it catches a corrupted cache), the engine's KV formats. The kinds through the runner:
// test_kv_kinds.cpp.
#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "core/stats.h"
#include "kinds/kvcache/decode_check.h"
#include "kvcache/decode_problem.h"
#include "model/block_manager.h"
#include "model/engine_studies.h"
#include "model/model.h"
#include "model/model_choice.h"
#include "numerics/kv_format.h"

namespace ib::kvcache {
namespace {

TEST(KvFormat, E4m3RoundTripsEveryFiniteCode) {
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;  // NaN
    const float x = e4m3_bits_to_float(static_cast<uint8_t>(b));
    if (x == 0.0f && b == 0x80) continue;  // -0 and +0 both decode to zero; -0 re-encodes as 0x80
    EXPECT_EQ(float_to_e4m3_bits(x), b) << "code " << b << " value " << x;
  }
  EXPECT_EQ(e4m3_bits_to_float(0x7e), 448.0f);
  EXPECT_EQ(e4m3_bits_to_float(0x01), 0.001953125f);  // smallest subnormal 2^-9
  EXPECT_EQ(e4m3_bits_to_float(0x08), 0.015625f);     // smallest normal 2^-6
  EXPECT_TRUE(std::isnan(e4m3_bits_to_float(0x7f)));
}

TEST(KvFormat, E4m3RoundsToNearestEvenAndSaturates) {
  // 1.0625 lies halfway between 1.0 (mantissa 0, even) and 1.125: ties to even.
  EXPECT_EQ(e4m3_bits_to_float(float_to_e4m3_bits(1.0625f)), 1.0f);
  EXPECT_EQ(e4m3_bits_to_float(float_to_e4m3_bits(1.1875f)), 1.25f);  // halfway 1.125/1.25 -> even 1.25
  EXPECT_EQ(e4m3_bits_to_float(float_to_e4m3_bits(1.07f)), 1.125f);
  EXPECT_EQ(float_to_e4m3_bits(1e6f), 0x7e);
  EXPECT_EQ(float_to_e4m3_bits(-INFINITY), 0xfe);
  EXPECT_EQ(float_to_e4m3_bits(460.0f), 0x7e);
  EXPECT_EQ(e4m3_bits_to_float(float_to_e4m3_bits(0.0029296875f)), 0.00390625f);  // 1.5·2^-9 ties to 2·2^-9
  // Relative error of a normal value is at most 2^-4.
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(0.02f, 440.0f);
  for (int i = 0; i < 10000; ++i) {
    const float x = u(rng);
    EXPECT_LE(std::fabs(e4m3_bits_to_float(float_to_e4m3_bits(x)) - x), x * 0.0625f + 1e-7f) << x;
  }
}

TEST(KvFormat, Int8ErrorIsWithinHalfAStep) {
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  std::vector<float> x(128);
  for (auto& e : x) e = u(rng);
  float amax = 0;
  for (float e : x) amax = std::max(amax, std::fabs(e));
  const float scale = int8_scale(amax);
  for (float e : x) {
    const int8_t q = int8_quantize(e, scale);
    EXPECT_LE(std::abs(static_cast<int>(q)), 127);
    EXPECT_LE(std::fabs(int8_dequantize(q, scale) - e), scale * 0.5f + 1e-6f);
  }
  EXPECT_EQ(int8_quantize(amax, scale), 127);
  EXPECT_EQ(int8_quantize(1.0f, 0.0f), 0);  // an all-zero token
}

// ---- block manager ----

// Every sequence's tokens, written through its block table into a simulated pool, read back.
// ---- int4 / int2 (KIVI) ----

TEST(KvFormat, KiviFormatsNameTheirBitsAndBytes) {
  EXPECT_EQ(kivi_bits(KvFormat::INT4), 4);
  EXPECT_EQ(kivi_bits(KvFormat::INT2), 2);
  EXPECT_EQ(kivi_bits(KvFormat::INT8), 0);
  EXPECT_FALSE(is_kivi(KvFormat::BF16));
  EXPECT_EQ(kv_format_from_string("int2"), KvFormat::INT2);
  EXPECT_STREQ(to_string(KvFormat::INT2), "int2");
  EXPECT_EQ(kv_element_bytes(KvFormat::INT2), 0.25);
  // d = 128, G = 32: 32 B of codes + 16 B of (scale, zero) per token-head; a 32-token bf16 residual.
  EXPECT_EQ(128 * kv_element_bytes(KvFormat::INT2) + kv_scale_bytes_per_token_head(KvFormat::INT2, 128), 48.0);
  EXPECT_EQ(kv_residual_bytes_per_seq_head(KvFormat::INT2, 128), 8192.0);
  EXPECT_EQ(kivi_row_bytes(128, 2), 32);
}

TEST(KvFormat, KiviRoundTripIsWithinHalfAStepForFourAndTwoBits) {
  std::mt19937 rng(5);
  for (int bits : {4, 2})
    for (int trial = 0; trial < 2000; ++trial) {
      // Ranges of every kind: around 0, all negative, all positive, tiny, wide, constant.
      const float center = std::uniform_real_distribution<float>(-50, 50)(rng);
      const float width = trial % 7 == 0 ? 0.0f : std::pow(10.0f, std::uniform_real_distribution<float>(-4, 2)(rng));
      std::vector<float> x(32);
      for (auto& e : x) e = center + width * std::uniform_real_distribution<float>(-1, 1)(rng);
      const float lo = *std::min_element(x.begin(), x.end()), hi = *std::max_element(x.begin(), x.end());
      const KiviRange r = kivi_range(lo, hi, bits);
      const float scale = fp16_bits_to_float(r.scale), zero = fp16_bits_to_float(r.zero);
      ASSERT_LE(zero, lo);
      ASSERT_GE(static_cast<double>(zero) + kivi_max_code(bits) * static_cast<double>(scale),
                hi - 1e-6 * (std::fabs(hi) + std::fabs(zero)));
      for (float e : x) {
        const uint32_t q = kivi_quantize(e, scale, zero, bits);
        ASSERT_LE(q, static_cast<uint32_t>(kivi_max_code(bits)));
        const double err = std::fabs(static_cast<double>(e) - kivi_dequantize(q, scale, zero));
        // scale/2, up to float rounding of (x - zero)/scale and of zero + code·scale.
        ASSERT_LE(err, scale / 2 * (1 + 1e-5) + 1e-6 * (std::fabs(e) + std::fabs(zero)))
            << bits << " bits, x " << e << " scale " << scale;
      }
    }
}

TEST(KvFormat, KiviPacksLowNibbleFirstAndRoundTripsEveryCode) {
  std::vector<uint8_t> row(static_cast<size_t>(kivi_row_bytes(64, 4)), 0xAA);
  for (int c = 0; c < 64; ++c) kivi_set_code(row.data(), c, 4, static_cast<uint32_t>(c % 16));
  EXPECT_EQ(row[0], 0x10);  // channel 0 low, channel 1 high
  EXPECT_EQ(row[7], 0xFE);
  for (int c = 0; c < 64; ++c) EXPECT_EQ(kivi_get_code(row.data(), c, 4), static_cast<uint32_t>(c % 16));
  std::vector<uint8_t> two(static_cast<size_t>(kivi_row_bytes(64, 2)), 0);
  ASSERT_EQ(two.size(), 16u);
  for (int c = 0; c < 64; ++c) kivi_set_code(two.data(), c, 2, static_cast<uint32_t>((c * 7) % 4));
  EXPECT_EQ(two[0], (0u | 3u << 2 | 2u << 4 | 1u << 6));
  for (int c = 0; c < 64; ++c) EXPECT_EQ(kivi_get_code(two.data(), c, 2), static_cast<uint32_t>((c * 7) % 4));
}

// Odd lengths: full groups packed, the rest bf16 as it came; the key pairs are per (group,
// channel), from that channel's range over the group, the value pairs per (token, channel group).
TEST(KvFormat, KiviStoredHeadKeepsTheResidualExactAndKeysPerChannel) {
  for (KvFormat f : {KvFormat::INT4, KvFormat::INT2})
    for (int group : {32, 16})
      for (int n : {1, 15, 31, 32, 33, 95, 100}) {
        DecodeShape s;
        s.batch = 1;
        s.heads = s.kv_heads = 1;
        s.head_dim = 64;
        s.context = n;
        s.format = f;
        s.kivi_group = group;
        SCOPED_TRACE(std::string(to_string(f)) + ", " + std::to_string(n) + " tokens, group " + std::to_string(group));
        const DecodeInputs in = decode_inputs(s, 3);
        const StoredHead h = quantize_head(s, in, 0, 0);
        const int d = s.head_dim, nq = n - n % group, bits = kivi_bits(f);
        ASSERT_EQ(s.quantized_length(0), nq);
        EXPECT_EQ(h.k.size(), static_cast<size_t>(nq * d * bits / 8 + (n - nq) * d * 2));
        EXPECT_EQ(h.v.size(), h.k.size());
        EXPECT_EQ(h.k_scale.size(), static_cast<size_t>(nq / group * d * 2));
        EXPECT_EQ(h.v_scale.size(), static_cast<size_t>(nq * (d / group) * 2));
        std::vector<float> k, v, ko, vo;
        dequantize_head(s, h, n, k, v);
        original_head(s, in, 0, 0, ko, vo);
        for (int t = 0; t < n; ++t)
          for (int c = 0; c < d; ++c) {
            const size_t i = static_cast<size_t>(t) * d + c;
            if (t >= nq) {  // the residual: bf16 as appended
              ASSERT_EQ(k[i], ko[i]);
              ASSERT_EQ(v[i], vo[i]);
              continue;
            }
            const float ks = h.k_scale[2 * (static_cast<size_t>(t / group) * d + c)];
            const float vs = h.v_scale[2 * (static_cast<size_t>(t) * (d / group) + c / group)];
            ASSERT_LE(std::fabs(k[i] - ko[i]), ks / 2 + 1e-6);
            ASSERT_LE(std::fabs(v[i] - vo[i]), vs / 2 + 1e-6);
          }
        // K's pair of (group j, channel c) is the range of channel c over the group's tokens.
        for (int j = 0; j < nq / group; ++j)
          for (int c = 0; c < d; ++c) {
            float lo = INFINITY, hi = -INFINITY;
            for (int t = j * group; t < (j + 1) * group; ++t) {
              lo = std::min(lo, ko[static_cast<size_t>(t) * d + c]);
              hi = std::max(hi, ko[static_cast<size_t>(t) * d + c]);
            }
            const KiviRange r = kivi_range(lo, hi, bits);
            const size_t at = 2 * (static_cast<size_t>(j) * d + c);
            ASSERT_EQ(h.k_scale[at], fp16_bits_to_float(r.scale));
            ASSERT_EQ(h.k_scale[at + 1], fp16_bits_to_float(r.zero));
          }
      }
}

// Keys with an outlier channel (as real keys have, the reason KIVI quantizes them per channel):
// per-channel groups keep the other channels' resolution; per-token groups spend it on the outlier.
TEST(KvFormat, KiviKeysPerChannelBeatPerTokenWithAnOutlierChannel) {
  for (KvFormat f : {KvFormat::INT4, KvFormat::INT2}) {
    SCOPED_TRACE(to_string(f));
    const int G = kKiviGroup, d = 64, bits = kivi_bits(f);
    std::mt19937 rng(9);
    std::vector<float> keys(static_cast<size_t>(G) * d);
    for (int t = 0; t < G; ++t)
      for (int c = 0; c < d; ++c)
        keys[static_cast<size_t>(t) * d + c] = (c == 5 ? 40.0f : 0.0f) + std::uniform_real_distribution<float>(-1, 1)(rng);
    std::vector<float> per_channel = keys, per_token = keys;
    kivi_round_key_group(per_channel.data(), G, d, d, bits);
    for (int t = 0; t < G; ++t) kivi_round_value_row(per_token.data() + static_cast<size_t>(t) * d, d, G, bits);
    auto err = [&](const std::vector<float>& x) {
      double e = 0, r = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        if (i % d == 5) continue;  // the other channels
        e += (x[i] - keys[i]) * (x[i] - keys[i]);
        r += keys[i] * keys[i];
      }
      return std::sqrt(e / r);
    };
    // Uniform values over 2^B levels: rms error scale/sqrt(12) = range/((2^B - 1)·sqrt(12)), rms
    // signal range/sqrt(12): relative 1/15 (int4), 1/3 (int2), up to the fp16 rounding of the range.
    EXPECT_LT(err(per_channel), bits == 4 ? 0.1 : 0.4);
    EXPECT_GT(err(per_token), (bits == 4 ? 5 : 2) * err(per_channel));
    // The decode problem's stored keys follow the per-channel rule: a group's stored K equals
    // kivi_round_key_group over the original values.
    DecodeShape s;
    s.batch = 1;
    s.heads = s.kv_heads = 1;
    s.head_dim = d;
    s.context = 2 * G;
    s.format = f;
    const DecodeInputs in = decode_inputs(s, 4);
    std::vector<float> k, v, ko, vo;
    dequantize_head(s, quantize_head(s, in, 0, 0), s.context, k, v);
    original_head(s, in, 0, 0, ko, vo);
    for (int j = 0; j < 2; ++j) kivi_round_key_group(ko.data() + static_cast<size_t>(j) * G * d, G, d, d, bits);
    for (int t = 0; t < s.context; ++t) kivi_round_value_row(vo.data() + static_cast<size_t>(t) * d, d, G, bits);
    EXPECT_EQ(k, ko);
    EXPECT_EQ(v, vo);
  }
}

TEST(BlockManager, RandomOperationsKeepInvariantsAndCopyOnWriteKeepsContents) {
  constexpr int kBlocks = 64, kBs = 4;
  BlockManager m(kBlocks, kBs);
  std::vector<int> pool(kBlocks * kBs, -1);
  std::map<int, std::vector<int>> want;  // sequence -> its tokens
  std::mt19937 rng(3);
  int next_token = 0;
  auto write = [&](int s, int from) {
    for (auto [src, dst] : m.take_copies())
      std::copy(pool.begin() + src * kBs, pool.begin() + (src + 1) * kBs, pool.begin() + dst * kBs);
    const auto& t = m.table(s);
    for (int i = from; i < m.length(s); ++i)
      pool[static_cast<size_t>(t[static_cast<size_t>(i / kBs)] * kBs + i % kBs)] = want[s][static_cast<size_t>(i)];
  };
  int copies_seen = 0;
  for (int step = 0; step < 4000; ++step) {
    const int op = static_cast<int>(rng() % 10);
    std::vector<int> live = m.sequences();
    if (live.empty() || op < 2) {
      want[m.create()] = {};
    } else {
      const int s = live[rng() % live.size()];
      if (op < 6) {
        const int n = 1 + static_cast<int>(rng() % 6);
        const int before = m.length(s);
        const int free_before = m.free_blocks(), need = m.blocks_needed(s, n);
        if (m.append(s, n)) {
          for (int i = 0; i < n; ++i) want[s].push_back(next_token++);
          copies_seen += static_cast<int>(m.copies_made() > 0);
          write(s, before);
          EXPECT_EQ(m.free_blocks(), free_before - need);
        } else {
          EXPECT_GT(need, free_before);
          EXPECT_EQ(m.length(s), before);
        }
      } else if (op < 8) {
        want[m.fork(s)] = want[s];
      } else if (op < 9) {
        m.free(s);
        want.erase(s);
      } else {
        const int len = static_cast<int>(rng() % static_cast<unsigned>(m.length(s) + 1));
        m.truncate(s, len);
        want[s].resize(static_cast<size_t>(len));
      }
    }
    ASSERT_NO_THROW(m.check_invariants()) << "step " << step;
    for (int s : m.sequences()) {
      ASSERT_EQ(m.length(s), static_cast<int>(want[s].size()));
      const auto& t = m.table(s);
      for (int i = 0; i < m.length(s); ++i)
        ASSERT_EQ(pool[static_cast<size_t>(t[static_cast<size_t>(i / kBs)] * kBs + i % kBs)], want[s][static_cast<size_t>(i)])
            << "step " << step << " sequence " << s << " token " << i;
    }
  }
  EXPECT_GT(m.copies_made(), 0);
  for (int s : m.sequences()) m.free(s);
  EXPECT_EQ(m.free_blocks(), kBlocks);
}

TEST(BlockManager, ForkSharesBlocksAndCopiesOnlyAPartialLastBlock) {
  BlockManager m(8, 4);
  const int a = m.create();
  ASSERT_TRUE(m.append(a, 6));  // blocks: [full, 2/4]
  const int b = m.fork(a);
  EXPECT_EQ(m.table(a), m.table(b));
  EXPECT_EQ(m.ref_count(m.table(a)[0]), 2);
  EXPECT_EQ(m.used_blocks(), 2);
  ASSERT_TRUE(m.append(b, 1));  // b writes into the shared partial block: copy-on-write
  const auto copies = m.take_copies();
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].first, m.table(a)[1]);
  EXPECT_EQ(copies[0].second, m.table(b)[1]);
  EXPECT_EQ(m.table(a)[0], m.table(b)[0]);  // the full block stays shared
  EXPECT_EQ(m.ref_count(m.table(a)[1]), 1);
  ASSERT_TRUE(m.append(a, 1));  // a now owns its block alone: no copy
  EXPECT_TRUE(m.take_copies().empty());
  m.free(a);
  EXPECT_EQ(m.ref_count(m.table(b)[0]), 1);
  m.free(b);
  EXPECT_EQ(m.free_blocks(), 8);
  m.check_invariants();
}

TEST(BlockManager, AppendPastThePoolChangesNothing) {
  BlockManager m(2, 4);
  const int a = m.create();
  EXPECT_FALSE(m.append(a, 9));
  EXPECT_EQ(m.length(a), 0);
  EXPECT_EQ(m.free_blocks(), 2);
  EXPECT_TRUE(m.append(a, 8));
  EXPECT_FALSE(m.append(a, 1));
  m.check_invariants();
}

TEST(BlockTables, ScatterEverySequencesBlocksOverAPoolOfExactlyTheNeededBlocks) {
  DecodeShape s;
  s.batch = 5;
  s.context = 1000;
  s.ragged = true;
  s.block_size = 16;
  const BlockTables t = build_block_tables(s, 7);
  int need = 0;
  for (int b = 0; b < s.batch; ++b) need += (s.length(b) + 15) / 16;
  EXPECT_EQ(t.num_blocks, need);
  std::vector<int> seen(static_cast<size_t>(need), 0);
  bool scattered = false;
  for (int b = 0; b < s.batch; ++b)
    for (int i = 0; i < t.max_blocks; ++i) {
      const int32_t blk = t.table[static_cast<size_t>(b * t.max_blocks + i)];
      if (i < (s.length(b) + 15) / 16) {
        ASSERT_GE(blk, 0);
        ++seen[static_cast<size_t>(blk)];
        if (i > 0 && blk != t.table[static_cast<size_t>(b * t.max_blocks + i - 1)] + 1) scattered = true;
      } else {
        EXPECT_EQ(blk, -1);
      }
    }
  for (int c : seen) EXPECT_EQ(c, 1);
  EXPECT_TRUE(scattered);
  EXPECT_NE(s.length(1), s.context);  // ragged
}

// ---- the decode-attention gate ----

TEST(DecodeCheck, FailsOnACorruptedCacheAndOnAWrongOutput) {
  DecodeShape s;
  s.heads = 4;
  s.kv_heads = 2;
  s.head_dim = 64;
  s.context = 100;
  s.format = KvFormat::INT8;
  const DecodeInputs in = decode_inputs(s, 11);
  // A correct output: float64 attention over the quantized cache.
  std::vector<double> out(static_cast<size_t>(s.heads * s.head_dim));
  std::vector<float> k, v, q(static_cast<size_t>(s.head_dim));
  for (int kvh = 0; kvh < s.kv_heads; ++kvh) {
    dequantize_head(s, quantize_head(s, in, 0, kvh), s.context, k, v);
    for (int h = kvh * 2; h < kvh * 2 + 2; ++h) {
      for (int c = 0; c < s.head_dim; ++c) q[static_cast<size_t>(c)] = in.q(0, h, c);
      attend(s.context, s.head_dim, q.data(), k.data(), v.data(), s.scale(), out.data() + h * s.head_dim);
    }
  }
  auto read = [&](int, int h, int c) { return static_cast<float>(out[static_cast<size_t>(h * s.head_dim + c)]); };
  auto good = [&](int b, int kvh) { return quantize_head(s, in, b, kvh); };
  const DecodeCheck ok = check_decode(s, in, 11, good, read, 1e-2);
  EXPECT_TRUE(ok.gate.ok) << ok.gate.detail;
  EXPECT_GT(ok.format_rel_l2, 1e-4);  // int8 costs something
  EXPECT_LT(ok.format_rel_l2, 2e-2);
  auto corrupt = [&](int b, int kvh) {
    StoredHead h = quantize_head(s, in, b, kvh);
    h.k[37] ^= 1;
    return h;
  };
  const DecodeCheck bad_cache = check_decode(s, in, 11, corrupt, read, 1e-2);
  EXPECT_FALSE(bad_cache.gate.ok);
  EXPECT_EQ(bad_cache.gate.metric, "cache_mismatch");
  out[5] += 0.5;
  EXPECT_FALSE(check_decode(s, in, 11, good, read, 1e-2).gate.ok);
  out[5] = NAN;
  EXPECT_EQ(check_decode(s, in, 11, good, read, 1e-2).gate.metric, "nan_rows");
}

TEST(DecodeCheck, CatchesACorruptedInt4OrInt2CodeOrPair) {
  double int4_err = 0;
  for (KvFormat f : {KvFormat::INT4, KvFormat::INT2}) {
    SCOPED_TRACE(to_string(f));
    DecodeShape s;
    s.heads = 2;
    s.kv_heads = 1;
    s.head_dim = 64;
    s.context = 70;  // two full groups and a residual of 6
    s.format = f;
    const DecodeInputs in = decode_inputs(s, 12);
    std::vector<double> out(static_cast<size_t>(s.heads * s.head_dim));
    std::vector<float> k, v, q(static_cast<size_t>(s.head_dim));
    dequantize_head(s, quantize_head(s, in, 0, 0), s.context, k, v);
    for (int h = 0; h < 2; ++h) {
      for (int c = 0; c < s.head_dim; ++c) q[static_cast<size_t>(c)] = in.q(0, h, c);
      attend(s.context, s.head_dim, q.data(), k.data(), v.data(), s.scale(), out.data() + h * s.head_dim);
    }
    auto read = [&](int, int h, int c) { return static_cast<float>(out[static_cast<size_t>(h * s.head_dim + c)]); };
    const DecodeCheck ok = check_decode(
        s, in, 12, [&](int b, int kvh) { return quantize_head(s, in, b, kvh); }, read, 1e-2);
    EXPECT_TRUE(ok.gate.ok) << ok.gate.detail;
    EXPECT_GT(ok.format_rel_l2, 1e-2);  // 4 bits cost more than int8
    EXPECT_LT(ok.format_rel_l2, f == KvFormat::INT4 ? 0.2 : 0.5);
    if (f == KvFormat::INT4)
      int4_err = ok.format_rel_l2;
    else
      EXPECT_GT(ok.format_rel_l2, 2 * int4_err);  // 2 bits: a step 5× int4's
    for (int what = 0; what < 3; ++what) {
      auto corrupt = [&](int b, int kvh) {
        StoredHead h = quantize_head(s, in, b, kvh);
        if (what == 0) h.k[40] ^= 0x10;           // a code
        if (what == 1) h.v[h.v.size() - 3] ^= 1;  // the residual
        if (what == 2) h.k_scale[7] *= 2;         // a pair
        return h;
      };
      EXPECT_EQ(check_decode(s, in, 12, corrupt, read, 1e-2).gate.metric, "cache_mismatch") << what;
    }
  }
}

// ---- the engine's KV formats ----

TEST(EngineKvFormat, RoundsWhatItWritesAndRefusesMisuse) {
  const auto c = model::preset("tiny").value();
  auto m = model::make_cpu_model(c, *model::random_weights(c, 5));
  const std::vector<int32_t> prompt = model::random_prompt(c.vocab, 40, 9);
  auto logits_with = [&](std::optional<KvFormat> f, const std::vector<float>& scales) {
    std::vector<float> l(static_cast<size_t>(c.vocab));
    const int s = m->new_sequence(64);
    if (f) model::kv_format_study(*m).set_kv_format(s, *f, scales);
    model::StepOutput out;
    out.logits = l.data();
    m->prefill(s, prompt.data(), static_cast<int>(prompt.size()), 1, out);
    m->release(s);
    return l;
  };
  const auto f32 = logits_with(std::nullopt, {});
  const int s = m->new_sequence(64);
  m->prefill(s, prompt.data(), static_cast<int>(prompt.size()), 1, model::StepOutput{});
  std::vector<float> scales = model::kv_format_study(*m).kv_amax(s);
  ASSERT_EQ(scales.size(), static_cast<size_t>(c.layers * 2 * c.kv_heads));
  for (float& x : scales) {
    EXPECT_GT(x, 0);
    x = fp8_scale(x);
  }
  EXPECT_THROW(model::kv_format_study(*m).set_kv_format(s, KvFormat::INT8), std::logic_error);  // the sequence holds tokens
  m->release(s);
  double prev = 0;
  for (KvFormat f : {KvFormat::BF16, KvFormat::INT8, KvFormat::FP8}) {
    const auto l = logits_with(f, scales);
    const double err = relative_l2(l, f32);
    EXPECT_GT(err, 0) << to_string(f);     // the rounding took effect
    EXPECT_LT(err, 0.05) << to_string(f);  // and stayed small
    if (f == KvFormat::FP8) {
      EXPECT_GT(err, prev);  // fp8's 3 mantissa bits cost more than int8's per-token scale here
    }
    prev = err;
  }
  const int t = m->new_sequence(8);
  EXPECT_THROW(model::kv_format_study(*m).set_kv_format(t, KvFormat::FP8), std::invalid_argument);  // fp8 needs its scales
  // int4 (KIVI): bf16 until a 32-token key group completes; the 40-token prompt completes one.
  const auto l4 = logits_with(KvFormat::INT4, {});
  EXPECT_GT(relative_l2(l4, f32), relative_l2(logits_with(KvFormat::BF16, {}), f32));
  EXPECT_LT(relative_l2(l4, f32), 0.2);
  // int2: the same groups with 2-bit codes cost more than int4, and still stay bounded.
  const auto l2 = logits_with(KvFormat::INT2, {});
  EXPECT_GT(relative_l2(l2, f32), relative_l2(l4, f32));
  EXPECT_LT(relative_l2(l2, f32), 0.5);
}

}  // namespace
}  // namespace ib::kvcache
