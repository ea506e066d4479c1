// The KV-cache kinds through the runner: the CPU decode variants of kv-quant and kv-paged (every
// layout, ragged GQA sequences, int4/int2), the engine's decode with quantized caches, the memory
// calculator against the chapter's Llama 2 figure and the waste replay.
#include <string>
#include <variant>

#include <gtest/gtest.h>

#include "../common/run_kind.h"

#include "core/point_access.h"
#include "kvcache/decode_problem.h"
#include "numerics/kv_format.h"

namespace ib::kvcache {
namespace {

using testing::expect_all_ok;
using testing::metric;

ExperimentResult run_kv(const std::string& body) {
  return testing::run_spec_text("{warmup: 0, min_samples: 2, min_time: 0, max_noise: 1, timeout: 5s}", body);
}

TEST(KvKinds, QuantVariantsPassTheGateOnEveryLayoutWithRaggedGqaSequences) {
  auto r = run_kv(
      "  - {name: q, kind: kv-quant, variants: [cpu_bf16, cpu_fp8, cpu_int8], baseline: cpu_bf16, batch: 3, heads: 8,"
      " kv_heads: [8, 2], head_dim: [64, 128], context: 1000, ragged: true, block_size: [0, 16, 7]}\n");
  expect_all_ok(r, 3 * 2 * 2 * 3);
  for (const auto& row : r.rows) {
    const double err = metric(row, "rel L2 vs bf16 KV");
    // bf16: only the output's float rounding; the quantized formats cost something, int8 less.
    const double most = row.variant == "cpu_bf16" ? 1e-3 : row.variant == "cpu_int8" ? 1e-2 : 5e-2;
    EXPECT_LT(err, most) << row.variant << " " << row.point.label();
    EXPECT_EQ(err > 1e-3, row.variant != "cpu_bf16") << row.variant << " " << row.point.label();
  }
}

TEST(KvKinds, Int4AndInt2PassTheGateOnOddRaggedGqaLengthsAndSayPagedIsUnsupported) {
  for (KvFormat f : {KvFormat::INT4, KvFormat::INT2}) {
    const std::string name = to_string(f), key = kivi_group_key(f), variant = "cpu_" + name;
    const bool two = f == KvFormat::INT2;
    auto r = run_kv("  - {name: q, kind: kv-quant, variants: [cpu_bf16, " + variant +
                    "], baseline: cpu_bf16, batch: 3, heads: 8,"
                    " kv_heads: [8, 2], head_dim: [64, 128], context: [1, 31, 33, 1000], ragged: true, " +
                    key + ": [32, 16]}\n");
    size_t kivi_rows = 0;
    for (const auto& row : r.rows) {
      EXPECT_EQ(row.status, RowStatus::Ok) << row.variant << " " << row.point.label() << ": " << row.message;
      ASSERT_TRUE(row.validation);
      EXPECT_TRUE(row.validation->ok) << row.variant << " " << row.point.label() << ": " << row.validation->detail;
      if (row.variant != variant) continue;
      ++kivi_rows;
      const double err = metric(row, "rel L2 vs bf16 KV");
      const int64_t context = std::get<int64_t>(PointAccess::at(row.point, "context")),
                    group = std::get<int64_t>(PointAccess::at(row.point, key));
      // Shorter than a group: all bf16 residual.
      EXPECT_LT(err, context < group ? 1e-3 : two ? 0.5 : 0.15) << row.variant << " " << row.point.label();
      if (context >= 1000) {
        EXPECT_GT(err, two ? 0.1 : 1e-2) << row.variant << " " << row.point.label();
      }
    }
    EXPECT_EQ(kivi_rows, 2u * 2 * 4 * 2) << name;
  }
  for (const char* v : {"cpu_int4", "cpu_int2"}) {
    auto paged = run_kv(std::string("  - {name: p, kind: kv-quant, variants: [") + v +
                        "], batch: 1, heads: 4, context: 100, block_size: 16}\n");
    ASSERT_EQ(paged.rows.size(), 1u);
    EXPECT_EQ(paged.rows[0].status, RowStatus::Unsupported);
    EXPECT_NE(paged.rows[0].message.find("contiguous only"), std::string::npos) << paged.rows[0].message;
  }
  auto odd = run_kv(
      "  - {name: g, kind: kv-quant, variants: [cpu_int2], batch: 1, heads: 4, head_dim: 64, context: 100,"
      " int2_group: 48}\n");
  ASSERT_EQ(odd.rows.size(), 1u);
  EXPECT_EQ(odd.rows[0].status, RowStatus::Unsupported);
  EXPECT_NE(odd.rows[0].message.find("int2_group"), std::string::npos) << odd.rows[0].message;
}

TEST(KvKinds, Int4CostsMoreThanInt8AndFp8OnRandomDataAndInt2MoreStill) {
  auto r = run_kv(
      "  - {name: q, kind: kv-quant, variants: [cpu_bf16, cpu_fp8, cpu_int8, cpu_int4, cpu_int2], baseline: cpu_bf16, batch: 1,"
      " heads: 4, head_dim: 128, context: 2048}\n");
  expect_all_ok(r, 5);
  const double fp8 = metric(r.rows[1], "rel L2 vs bf16 KV"), int8 = metric(r.rows[2], "rel L2 vs bf16 KV");
  const double int4 = metric(r.rows[3], "rel L2 vs bf16 KV");
  EXPECT_GT(int4, fp8);
  EXPECT_GT(int4, int8);
  // And reads about a third of bf16's bytes: 64 + 16 bytes of codes and pairs per token-head vs 256.
  EXPECT_NEAR(metric(r.rows[3], "KV bytes") / metric(r.rows[0], "KV bytes"), 80.0 / 256.0, 1e-9);
  // int2: on uniform values a step 5× int4's (3 levels vs 15), so about 5× the error (the
  // softmax-weighted average of many values shrinks both alike); 32 + 16 bytes per token-head.
  const double int2 = metric(r.rows[4], "rel L2 vs bf16 KV");
  EXPECT_GT(int2, 3 * int4);
  EXPECT_LT(int2, 8 * int4);
  EXPECT_NEAR(metric(r.rows[4], "KV bytes") / metric(r.rows[0], "KV bytes"), 48.0 / 256.0, 1e-9);
}

TEST(KvKinds, PagedAndContiguousAgreeAndHoldTheSameBytes) {
  auto r = run_kv(
      "  - {name: p, kind: kv-paged, variants: [cpu_contiguous, cpu_paged], baseline: cpu_contiguous, batch: 2, heads: 4,"
      " context: 333, ragged: true, kv_dtype: [bf16, fp8, int8], block_size: 16}\n");
  expect_all_ok(r, 6);
  for (size_t i = 0; i + 1 < r.rows.size(); i += 2) {
    EXPECT_DOUBLE_EQ(metric(r.rows[i], "KV bytes"), metric(r.rows[i + 1], "KV bytes"));
    EXPECT_NEAR(metric(r.rows[i], "rel L2 vs bf16 KV"), metric(r.rows[i + 1], "rel L2 vs bf16 KV"), 1e-5);
  }
}

TEST(KvKinds, MemoryFormulaGivesTheChaptersLlama2Figure) {
  auto r = run_kv(
      "  - {name: m, kind: kv-memory, variants: [formula], model: [llama2-7b, qwen2-0.5b], kv_dtype: [bf16, fp8, int8],"
      " seq: 4096, batch: 32, card_memory: 80GiB}\n");
  expect_all_ok(r, 6);
  EXPECT_DOUBLE_EQ(metric(r.rows[0], "KV batch (formula)"), 64.0);  // 2·32·32·128·2 B × 4096 × 32
  EXPECT_DOUBLE_EQ(metric(r.rows[0], "KV/token (formula)"), 512.0);
  EXPECT_NEAR(metric(r.rows[1], "vs bf16 (×)"), 2.0, 1e-4);  // less the per-head scales
  EXPECT_LT(metric(r.rows[2], "vs bf16 (×)"), 2.0);          // int8's per-token scales
  // 80 GiB − 12.55 GiB of weights = 67.45 GiB: 33 sequences of 2 GiB.
  EXPECT_EQ(metric(r.rows[0], "max batch at seq"), 33);
  // Qwen2-0.5B: 24 layers × 2 kv heads × 64 × 2 × 2 B = 12 KiB per token.
  EXPECT_DOUBLE_EQ(metric(r.rows[3], "KV/token (formula)"), 12.0);
  // int4 (KIVI): 64 B of codes + 16 B of fp16 (scale, zero) per token-head for K and for V:
  // 2·32·32·80 B = 160 KiB per token; + a 32-token bf16 residual per (layer, K/V, head) and sequence:
  // 2·32·32·32·128·2 B = 16 MiB.
  // int2: 32 B of codes + the same 16 B of pairs: 2·32·32·48 B = 96 KiB per token, the same
  // 16 MiB residual: 4096 × 96 KiB + 16 MiB = 400 MiB per sequence, 12.5 GiB for 32.
  auto kivi = run_kv(
      "  - {name: m, kind: kv-memory, variants: [formula], model: llama2-7b, kv_dtype: [int4, int2], seq: 4096, batch: 32,"
      " card_memory: 80GiB}\n");
  expect_all_ok(kivi, 2);
  EXPECT_DOUBLE_EQ(metric(kivi.rows[0], "KV/token (formula)"), 160.0);
  EXPECT_DOUBLE_EQ(metric(kivi.rows[0], "KV/seq (formula)"), 4096 * 160.0 / 1024 + 16);
  EXPECT_DOUBLE_EQ(metric(kivi.rows[1], "KV/token (formula)"), 96.0);
  EXPECT_DOUBLE_EQ(metric(kivi.rows[1], "KV/seq (formula)"), 400.0);
  EXPECT_DOUBLE_EQ(metric(kivi.rows[1], "KV batch (formula)"), 12.5);
  EXPECT_NEAR(metric(kivi.rows[1], "vs bf16 (×)"), 2048.0 / 400.0, 1e-12);
}

TEST(KvKinds, EngineDecodeWithInt4CostsMoreThanInt8ButKeepsMostTokens) {
  auto r = run_kv(
      "  - {name: e, kind: kv-quant-model, variants: [cpu_int8, cpu_int4, cpu_int2], model: tiny, prompt: 64, new_tokens: 16}\n");
  expect_all_ok(r, 3);
  EXPECT_LT(metric(r.rows[0], "attn err"), metric(r.rows[1], "attn err"));
  EXPECT_GE(metric(r.rows[1], "top-1 agree"), 50);
  EXPECT_LT(metric(r.rows[1], "KV/token"), metric(r.rows[0], "KV/token"));
  // int2 costs more than int4 in attention output and KL, for fewer bytes.
  EXPECT_LT(metric(r.rows[1], "attn err"), metric(r.rows[2], "attn err"));
  EXPECT_LT(metric(r.rows[1], "KL mean"), metric(r.rows[2], "KL mean"));
  EXPECT_LT(metric(r.rows[2], "KV/token"), metric(r.rows[1], "KV/token"));
}

TEST(KvKinds, EngineDecodeCostsLittleWithInt8AndBf16MoreWithFp8) {
  auto r = run_kv(
      "  - {name: e, kind: kv-quant-model, variants: [cpu_bf16, cpu_int8, cpu_fp8], model: tiny, prompt: 64, new_tokens: 16}\n");
  expect_all_ok(r, 3);
  for (const auto& row : r.rows) {
    EXPECT_GE(metric(row, "top-1 agree"), 75) << row.variant;
    EXPECT_LT(metric(row, "KL mean"), 0.05) << row.variant;
  }
  EXPECT_LT(metric(r.rows[0], "attn err"), metric(r.rows[2], "attn err"));
  EXPECT_LT(metric(r.rows[1], "attn err"), metric(r.rows[2], "attn err"));
}

TEST(KvKinds, PagedAllocationWastesLittleAndMaxReservationMuch) {
  auto r = run_kv(
      "  - {name: w, kind: kv-paged-waste, variants: [contiguous_max, contiguous_exact, paged], requests: 200,"
      " concurrent: 16}\n");
  expect_all_ok(r, 3);
  EXPECT_GT(metric(r.rows[0], "waste"), 50);
  EXPECT_LT(metric(r.rows[2], "waste"), 4);
  EXPECT_LT(metric(r.rows[2], "waste"), metric(r.rows[1], "waste"));
  EXPECT_DOUBLE_EQ(metric(r.rows[0], "mean stored"), metric(r.rows[2], "mean stored"));
  EXPECT_GT(metric(r.rows[2], "batch in same memory"), 2 * metric(r.rows[0], "batch in same memory"));
}

}  // namespace
}  // namespace ib::kvcache
