// The CUDA engine's paths against the CPU reference (each test skips itself without a device):
// CUDA graphs on and off, the engine with matmul = gemv (kernels/gemv.h) against the cuBLAS one,
// the token sampler on identical logits, uploaded weights, OutOfMemory for a cache past the
// memory limit, and bad calls. Prefill, decoding and the KV cache: test_gpu_model.cpp.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <cuda_runtime_api.h>

#include <gtest/gtest.h>

#include "gpu_model_cases.h"
#include "require_gpu.h"
#include "test_stream.h"

#include "core/backend.h"
#include "core/cuda_memory.h"
#include "core/errors.h"
#include "core/memory.h"
#include "model/model.h"
#include "model_ops.h"
#include "numerics/cuda_check.h"
#include "numerics/random.h"

namespace ib::model {
namespace {

using ib::testing::TestStream;
using namespace gpu_model_cases;

// Two engines given the same two prompts (prompt b: len + step·b tokens, seed + b), each in a
// sequence of capacity 64: the sequences and the first tokens each engine chose.
struct TwoStarts {
  std::vector<int> s_on, s_off;
  std::vector<int32_t> t_on, t_off;
};
TwoStarts prefill_two(Model& on, Model& off, int vocab, int len, int step, uint64_t seed) {
  TwoStarts r;
  r.t_on.resize(2);
  r.t_off.resize(2);
  for (int b = 0; b < 2; ++b) {
    const auto p = prompt(vocab, len + step * b, seed + static_cast<uint64_t>(b));
    r.s_on.push_back(on.new_sequence(64));
    r.s_off.push_back(off.new_sequence(64));
    StepOutput o1, o2;
    o1.next = &r.t_on[static_cast<size_t>(b)];
    o2.next = &r.t_off[static_cast<size_t>(b)];
    on.prefill(r.s_on.back(), p.data(), static_cast<int>(p.size()), 1, o1);
    off.prefill(r.s_off.back(), p.data(), static_cast<int>(p.size()), 1, o2);
  }
  return r;
}

TEST(GpuModel, CudaGraphsOnAndOffGiveTheSameTokens) {
  REQUIRE_GPU();
  for (const ModelConfig& c : {P("tiny-gqa"), with_head_dim(128)}) {
    auto w = random_weights(c, 18);
    TestStream stream;
    auto on = make_cuda_model(c, *w, small_options(true), nullptr);  // graphs captured privately, launched on the legacy stream
    auto off = make_cuda_model(c, *w, small_options(false), stream.get());
    auto [s_on, s_off, t_on, t_off] = prefill_two(*on, *off, c.vocab, 10, 25, 30);
    std::vector<float> l_on, l_off;
    for (int step = 0; step < 16; ++step) {
      ASSERT_EQ(t_on, t_off) << c.name << " step " << step;
      const std::vector<int32_t> in_on = t_on, in_off = t_off;
      l_on = decode_logits(*on, s_on, in_on, t_on.data());
      l_off = decode_logits(*off, s_off, in_off, t_off.data());
      EXPECT_LT(rel_l2(l_on, l_off), 1e-6) << c.name << " step " << step;
      if (step == 7) {  // a batch size of its own in between: another graph, then back to 2
        int32_t one = 0;
        decode_logits(*on, {s_on[0]}, {in_on[0]}, &one);
        on->truncate(s_on[0], on->length(s_on[0]) - 1);
      }
    }
    EXPECT_EQ(t_on, t_off) << c.name;
  }
}

EngineOptions gemv_options(bool graph = true) {
  EngineOptions o = small_options(graph);
  o.matmul = Matmul::Gemv;
  return o;
}

int argmax(const float* l, int vocab) { return static_cast<int>(std::max_element(l, l + vocab) - l); }

// matmul = gemv: our GEMV takes every product of <= 8 rows whose `in` is a multiple of 8 (tiny's
// down_proj, in = 172, stays on cuBLAS), cuBLAS the longer prefills. Same logits as the cuBLAS
// engine to rounding, the CPU's greedy tokens (teacher-forced, so a near tie cannot derail the rest).
TEST(GpuModel, GemvMatmulsGiveTheCublasLogitsAndTheCpuTokens) {
  REQUIRE_GPU();
  for (const ModelConfig& c : all_configs()) {
    auto w = random_weights(c, 19);
    TestStream stream;
    auto cpu = make_cpu_model(c, *w);
    auto cub = make_cuda_model(c, *w, small_options(), stream.get());
    auto gem = make_cuda_model(c, *w, gemv_options(), stream.get());
    const size_t V = static_cast<size_t>(c.vocab);
    // Sequence 0: a 5-token prompt, a prefill of GEMVs only; sequence 1: 40 tokens, cuBLAS GEMMs
    // and a GEMV LM head.
    std::vector<int> sc, sb, sg;
    std::vector<int32_t> next(2);
    for (int b = 0; b < 2; ++b) {
      const auto p = prompt(c.vocab, b == 0 ? 5 : 40, 40 + static_cast<uint64_t>(b));
      sc.push_back(cpu->new_sequence(64));
      sb.push_back(cub->new_sequence(64));
      sg.push_back(gem->new_sequence(64));
      const auto lc = prefill_logits(*cpu, sc.back(), p, 1);
      const auto lb = prefill_logits(*cub, sb.back(), p, 1);
      const auto lg = prefill_logits(*gem, sg.back(), p, 1);
      ASSERT_TRUE(all_finite(lg)) << c.name;
      EXPECT_LT(rel_l2(lg, lb), 1e-2) << c.name << " prefill " << p.size();
      EXPECT_LT(rel_l2(lg, lc), 2e-2) << c.name << " prefill " << p.size();
      next[static_cast<size_t>(b)] = argmax(lc.data(), c.vocab);
    }
    for (int step = 0; step < 12; ++step) {
      std::vector<int32_t> tg(2, -1);
      const auto lc = decode_logits(*cpu, sc, next);
      const auto lb = decode_logits(*cub, sb, next);
      const auto lg = decode_logits(*gem, sg, next, tg.data());
      ASSERT_TRUE(all_finite(lg)) << c.name;
      EXPECT_LT(rel_l2(lg, lb), 1e-2) << c.name << " step " << step;
      EXPECT_LT(rel_l2(lg, lc), 2e-2) << c.name << " step " << step;
      for (size_t b = 0; b < 2; ++b) {
        const int want = argmax(lc.data() + b * V, c.vocab);
        if (tg[b] != want) {
          EXPECT_LT(top2_gap(lc.data() + b * V, c.vocab), 0.05f) << c.name << " step " << step << " row " << b;
        }
        next[b] = want;
      }
    }
  }
}

// With every matmul of a short prefill and of the decode steps on our GEMV (and attention on the
// split-K kernel), nothing in a step is left to a library's choice: graph replays and eager
// launches give the same bits.
TEST(GpuModel, GemvDecodeStepsReplayFromCudaGraphsBitwise) {
  REQUIRE_GPU();
  for (const ModelConfig& c : {P("tiny-gqa"), with_head_dim(128)}) {
    auto w = random_weights(c, 20);
    TestStream stream;
    auto on = make_cuda_model(c, *w, gemv_options(true), stream.get());
    auto off = make_cuda_model(c, *w, gemv_options(false), stream.get());
    auto [s_on, s_off, t_on, t_off] = prefill_two(*on, *off, c.vocab, 5, 3, 50);  // <= 8 rows: GEMV prefills
    for (int step = 0; step < 10; ++step) {
      ASSERT_EQ(t_on, t_off) << c.name << " step " << step;
      const std::vector<int32_t> in_on = t_on, in_off = t_off;
      const auto l_on = decode_logits(*on, s_on, in_on, t_on.data());
      const auto l_off = decode_logits(*off, s_off, in_off, t_off.data());
      EXPECT_EQ(l_on, l_off) << c.name << " step " << step;  // step 0 runs eager on both, the rest replay on `on`
    }
  }
}

TEST(GpuModel, SampledTokensMostlyMatchTheCpu) {
  REQUIRE_GPU();
  for (const ModelConfig& c : {P("tiny"), P("tiny-gqa")}) {
    Engines e(c, 19);
    SamplingParams sp;
    sp.temperature = 0.8f;
    sp.top_k = 40;
    sp.top_p = 0.9f;
    sp.seed = 1234;
    const auto p = prompt(c.vocab, 16, 12);
    const int sc = e.cpu->new_sequence(80), sg = e.gpu->new_sequence(80);
    prefill_logits(*e.cpu, sc, p, 1);
    prefill_logits(*e.gpu, sg, p, 1);
    // Teacher-forced: both decode the CPU's draw, so one disagreement does not derail the rest.
    // The GPU's logits differ from the CPU's by ~1% (bf16 activations), which moves the
    // cumulative distribution a little: a uniform that falls right next to a boundary can pick
    // the neighbouring token. With identical logits the two samplers agree exactly (see
    // SamplerMatchesTheCpuReferenceOnIdenticalLogits).
    const int steps = 60;
    int agree = 0;
    int32_t tok = p.back();
    for (int step = 0; step < steps; ++step) {
      int32_t nc = -1, ng = -1;
      decode_logits(*e.cpu, {sc}, {tok}, &nc, sp, static_cast<uint64_t>(step));
      decode_logits(*e.gpu, {sg}, {tok}, &ng, sp, static_cast<uint64_t>(step));
      ASSERT_GE(ng, 0);
      ASSERT_LT(ng, c.vocab);
      agree += nc == ng;
      tok = nc;
    }
    EXPECT_GE(agree, steps * 9 / 10) << c.name << ": " << agree << "/" << steps;
  }
}

// The GPU sampler alone, on logits both sides share exactly.
TEST(GpuModel, SamplerMatchesTheCpuReferenceOnIdenticalLogits) {
  REQUIRE_GPU();
  TestStream stream;
  struct Case {
    float t;
    int k;
    float p;
  };
  const std::vector<Case> cases = {{0.0f, 0, 1.0f},    {1.0f, 0, 1.0f},    {0.8f, 40, 0.9f}, {0.7f, 0, 0.95f},
                                   {1.3f, 5000, 1.0f}, {1.0f, 3000, 0.5f}, {2.0f, 1, 1.0f},  {0.5f, 2, 0.3f}};
  for (int vocab : {600, 152064}) {
    const int rows = 6;
    std::vector<float> logits(static_cast<size_t>(rows) * static_cast<size_t>(vocab));
    for (int r = 0; r < rows; ++r)
      for (int i = 0; i < vocab; ++i) {
        float x = 3.0f * random_uniform(99 + static_cast<uint64_t>(r), static_cast<uint64_t>(i)) * 2.0f;
        if (r % 2 == 1) x = std::round(x * 2.0f) / 2.0f;  // many exact ties: broken by index
        if (r == 2 && i % 97 == 0) x = -INFINITY;
        logits[static_cast<size_t>(r) * static_cast<size_t>(vocab) + static_cast<size_t>(i)] = x;
      }
    DeviceBuffer<float> dl(logits.size(), "test logits");
    DeviceBuffer<int32_t> dn(static_cast<size_t>(rows), "test tokens");
    IB_CUDA_CHECK(cudaMemcpy(dl.data(), logits.data(), logits.size() * sizeof(float), cudaMemcpyHostToDevice));
    int total = 0, agree = 0;
    for (const Case& cs : cases)
      for (uint64_t step = 0; step < 4; ++step) {
        SamplingParams sp;
        sp.temperature = cs.t;
        sp.top_k = cs.k;
        sp.top_p = cs.p;
        sp.seed = 77;
        launch_sample(dl.data(), rows, vocab, cs.t, cs.k, cs.p, sp.seed, step, 0, dn.data(), stream.get());
        std::vector<int32_t> got(static_cast<size_t>(rows));
        IB_CUDA_CHECK(cudaMemcpyAsync(got.data(), dn.data(), got.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, stream.get()));
        IB_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
        for (int r = 0; r < rows; ++r) {
          const int32_t want = sample_token(&logits[static_cast<size_t>(r) * static_cast<size_t>(vocab)], vocab, sp,
                                            sample_uniform(sp.seed, step, r));
          ++total;
          agree += got[static_cast<size_t>(r)] == want;
          EXPECT_EQ(got[static_cast<size_t>(r)], want)
              << "vocab " << vocab << " T " << cs.t << " k " << cs.k << " p " << cs.p << " step " << step << " row " << r;
        }
      }
    RecordProperty("agree_" + std::to_string(vocab), std::to_string(agree) + "/" + std::to_string(total));
  }
}

// The same weights read on the host and uploaded (the checkpoint path) instead of filled on the
// device: the same bf16 values, so the same logits.
class HostReadWeights : public WeightSource {
 public:
  explicit HostReadWeights(const WeightSource& w) : w_(w) {}
  void read(const TensorSpec& spec, float* dst) const override { w_.read(spec, dst); }
  std::string describe() const override { return "host copy of " + w_.describe(); }

 private:
  const WeightSource& w_;
};

TEST(GpuModel, UploadedWeightsGiveTheSameLogitsAsDeviceFilledOnes) {
  REQUIRE_GPU();
  for (const ModelConfig& c : {P("tiny-gqa"), with_head_dim(128)}) {
    auto w = random_weights(c, 22);
    HostReadWeights hw(*w);
    auto filled = make_cuda_model(c, *w, small_options(), nullptr);
    auto uploaded = make_cuda_model(c, hw, small_options(), nullptr);
    EXPECT_EQ(filled->weight_bytes(), uploaded->weight_bytes());
    const auto p = prompt(c.vocab, 30, 14);
    const int a = filled->new_sequence(32), b = uploaded->new_sequence(32);
    EXPECT_EQ(rel_l2(prefill_logits(*uploaded, b, p, 2), prefill_logits(*filled, a, p, 2)), 0.0) << c.name;
  }
}

TEST(GpuModel, ACachePastTheMemoryLimitIsOutOfMemory) {
  REQUIRE_GPU();
  const ModelConfig c = P("tiny");
  auto w = random_weights(c, 20);
  TestStream stream;
  auto m = make_cuda_model(c, *w, small_options(), stream.get());
  struct LimitGuard {
    int64_t old = device_memory().limit();
    ~LimitGuard() { device_memory().set_limit(old); }
  } guard;
  const int64_t per_token = c.kv_elems_per_token() * 2;  // bf16
  device_memory().set_limit(device_memory().current() + (int64_t{1} << 20));
  EXPECT_THROW(m->new_sequence(static_cast<int>((int64_t{4} << 20) / per_token)), OutOfMemory);
  EXPECT_EQ(m->kv_bytes(), 0);
  const int s = m->new_sequence(256);  // 128 KiB: fits
  EXPECT_EQ(m->kv_bytes(), 256 * per_token);
  const auto p = prompt(c.vocab, 10, 13);
  const auto l = prefill_logits(*m, s, p, 1);
  EXPECT_TRUE(all_finite(l));
  m->release(s);
  EXPECT_EQ(m->kv_bytes(), 0);
}

TEST(GpuModel, BadCallsAreRejected) {
  REQUIRE_GPU();
  const ModelConfig c = P("tiny");
  auto w = random_weights(c, 21);
  auto m = make_cuda_model(c, *w, small_options(), nullptr);
  const int s = m->new_sequence(4);
  const std::vector<int32_t> five = {1, 2, 3, 4, 5};
  EXPECT_THROW(m->prefill(s, five.data(), 5, 1, {}), std::invalid_argument);  // past the capacity
  const int32_t bad = c.vocab;
  EXPECT_THROW(m->prefill(s, &bad, 1, 1, {}), std::invalid_argument);
  const std::vector<int> twice = {s, s};
  EXPECT_THROW(m->decode(twice.data(), five.data(), 2, {}), std::invalid_argument);
  EXPECT_THROW(m->decode(&s, five.data(), 0, {}), std::invalid_argument);
  m->release(s);
  EXPECT_THROW(m->decode(&s, five.data(), 1, {}), std::invalid_argument);
  EXPECT_EQ(m->new_sequence(4), s);  // ids are reused
}

}  // namespace
}  // namespace ib::model
