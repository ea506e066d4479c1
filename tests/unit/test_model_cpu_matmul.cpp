// The CPU engine's packed decode GEMV (CpuMatmul::Packed, the default) against its float32
// reference GEMV: the same logits bit for bit in prefills of a few rows (GEMV) and of many (SGEMM,
// shared), in batched decode steps at different contexts, with resident LoRA adapters and with one
// merged (whose projections fall back to the merged float32 weights), on a model with q/k/v biases
// and widths that do not fill a 64-column panel.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "model/engine_studies.h"
#include "model/lora.h"
#include "model/model.h"
#include "model/model_choice.h"

namespace ib::model::cpu_matmul_test {
namespace {

struct Engines {
  ModelConfig c;
  std::unique_ptr<Model> ref, packed;
  explicit Engines(const std::string& name) : c(*preset(name)) {
    auto w = random_weights(c, 5);
    ref = make_cpu_model(c, *w, CpuMatmul::Reference);
    packed = make_cpu_model(c, *w, CpuMatmul::Packed);
  }
  size_t V() const { return static_cast<size_t>(c.vocab); }
  // Runs `pass` on both engines and expects the same logits.
  template <class F>
  void same(int n_logits, F pass, const char* what) {
    std::vector<float> want(static_cast<size_t>(n_logits) * V(), -1.0f), got(want.size(), -2.0f);
    pass(*ref, want.data());
    pass(*packed, got.data());
    ASSERT_EQ(got, want) << what;
  }
};

TEST(CpuMatmul, PackedGivesTheReferenceLogitsBitForBit) {
  Engines e("tiny-gqa");
  ASSERT_EQ(e.c.vocab % 64, 600 % 64);                                               // the LM head's last panel is partial
  EXPECT_LT(e.packed->streamed_weight_bytes(1), e.ref->streamed_weight_bytes(1));    // bf16 panels
  EXPECT_EQ(e.packed->streamed_weight_bytes(64), e.ref->streamed_weight_bytes(64));  // a prefill reads float32
  const auto p0 = random_prompt(e.c.vocab, 7, 1), p1 = random_prompt(e.c.vocab, 45, 2), p2 = random_prompt(e.c.vocab, 20, 3);
  for (Model* m : {e.ref.get(), e.packed.get()})
    for (int s = 0; s < 3; ++s) ASSERT_EQ(m->new_sequence(96), s);
  e.same(
      7, [&](Model& m, float* l) { m.prefill(0, p0.data(), 7, 7, {l}); }, "prefill of 7 rows (GEMV)");
  e.same(
      2, [&](Model& m, float* l) { m.prefill(1, p1.data(), 45, 2, {l}); }, "prefill of 45 rows (SGEMM)");
  e.same(
      1, [&](Model& m, float* l) { m.prefill(2, p2.data(), 20, 1, {l}); }, "prefill of 20 rows");
  for (int step = 0; step < 4; ++step) {
    const int seqs[3] = {0, 1, 2};
    const int32_t tokens[3] = {step + 1, 2 * step + 3, 5};
    e.same(
        3, [&](Model& m, float* l) { m.decode(seqs, tokens, 3, {l}); }, "batched decode step");
  }
  // Resident adapters (their low-rank updates are added after the base product).
  const std::vector<LoraModule> all = {LoraModule::Q,    LoraModule::K,  LoraModule::V,   LoraModule::O,
                                       LoraModule::Gate, LoraModule::Up, LoraModule::Down};
  const LoraAdapter a = random_adapter(e.c, 4, 8.0f, all, 9);
  for (Model* m : {e.ref.get(), e.packed.get()}) {
    ASSERT_EQ(lora_adapters(*m).add_adapter(a), 0);
    lora_adapters(*m).set_adapter(1, 0);
  }
  const int seqs[2] = {0, 1};
  const int32_t tokens[2] = {11, 12};
  e.same(
      2, [&](Model& m, float* l) { m.decode(seqs, tokens, 2, {l}); }, "decode with a resident adapter");
  // Merged: the packed copies of the merged projections are not used.
  for (Model* m : {e.ref.get(), e.packed.get()}) {
    lora_adapters(*m).merge_adapter(0);
    lora_adapters(*m).set_adapter(0, 0);
  }
  e.same(
      2, [&](Model& m, float* l) { m.decode(seqs, tokens, 2, {l}); }, "decode with the adapter merged");
}

// OpenBLAS's prefill sums in its own order: within float32 rounding of the reference (and far
// from a different model: the 1e-5 bound is what a wrong weight or a transposed B would break).
TEST(CpuMatmul, BlasPrefillIsWithinFloatRoundingOfTheReference) {
  auto c = *preset("tiny-gqa");
  auto w = random_weights(c, 5);
  auto ref = make_cpu_model(c, *w, CpuMatmul::Reference), blas = make_cpu_model(c, *w, CpuMatmul::Blas);
  const auto p = random_prompt(c.vocab, 100, 4);
  const size_t V = static_cast<size_t>(c.vocab);
  std::vector<float> want(100 * V), got(100 * V);
  ASSERT_EQ(ref->new_sequence(128), 0);
  ASSERT_EQ(blas->new_sequence(128), 0);
  ref->prefill(0, p.data(), 100, 100, {want.data()});
  blas->prefill(0, p.data(), 100, 100, {got.data()});
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * static_cast<double>(got[i] - want[i]);
    den += want[i] * static_cast<double>(want[i]);
  }
  EXPECT_LT(std::sqrt(num / den), 1e-5);  // (here OpenBLAS's k-order FMA chains even give the same bits)
  // A decode step after it reads the cache it wrote: still within rounding.
  const int seq = 0;
  const int32_t t = 3;
  ref->decode(&seq, &t, 1, {want.data()});
  blas->decode(&seq, &t, 1, {got.data()});
  for (size_t i = 0; i < V; ++i) EXPECT_NEAR(got[i], want[i], 1e-3 * (1 + std::abs(want[i]))) << i;
}

TEST(CpuMatmul, NamesParseAndABadOneIsAnInputError) {
  EXPECT_EQ(parse_cpu_matmul("packed"), CpuMatmul::Packed);
  EXPECT_EQ(parse_cpu_matmul("reference"), CpuMatmul::Reference);
  EXPECT_EQ(parse_cpu_matmul("blas"), CpuMatmul::Blas);
  EXPECT_STREQ(to_string(CpuMatmul::Packed), "packed");
  try {
    parse_cpu_matmul("mkl");
    FAIL();
  } catch (const std::exception& x) {
    EXPECT_NE(std::string(x.what()).find("reference, packed, blas"), std::string::npos) << x.what();
  }
}

}  // namespace
}  // namespace ib::model::cpu_matmul_test
