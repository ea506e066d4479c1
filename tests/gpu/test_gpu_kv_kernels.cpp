// The KV-cache kernels called directly (each test skips itself without a device): the
// quantize-on-append kernels against the host quantizer, in chunks (int4/int2: chunks that end
// inside key groups), saturating values, ties and zeros included; decode attention on inputs the
// decode problem never makes (empty sequences, scores that keep climbing). Through the runner:
// test_gpu_kvcache.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "../common/run_kind.h"
#include "device_vectors.h"
#include "require_gpu.h"
#include "test_stream.h"

#include "core/cuda_memory.h"
#include "kv_decode.h"
#include "kvcache/decode_problem.h"
#include "numerics/cuda_check.h"
#include "numerics/half.h"
#include "numerics/kv_format.h"
#include "numerics/random.h"

namespace ib::kvcache {
namespace {

using ib::testing::TestStream;
using ib::testing::to_device;
using ib::testing::to_host;

KvElem elem_of(KvFormat f) { return f == KvFormat::BF16 ? KvElem::BF16 : f == KvFormat::FP8 ? KvElem::FP8 : KvElem::INT8; }

// A device cache of the shape filled by the staging, calibration and append kernels in chunks of
// `chunk` tokens appended to all sequences at once (paged: through the shape's block tables).
struct FilledCache {
  DeviceBuffer<uint8_t> k, v;
  DeviceBuffer<float> k_scale, v_scale;
  DeviceBuffer<int32_t> table;
  BlockTables tables;
  KvCacheView view;

  FilledCache(const DecodeShape& s, uint64_t seed, int chunk, cudaStream_t st) {
    const size_t eb = s.format == KvFormat::BF16 ? 2 : 1, d = static_cast<size_t>(s.head_dim);
    size_t rows = static_cast<size_t>(s.batch) * s.kv_heads * s.context;
    view.elem = elem_of(s.format);
    view.batch = s.batch;
    view.kv_heads = s.kv_heads;
    view.head_dim = s.head_dim;
    view.capacity = s.context;
    if (s.paged()) {
      tables = build_block_tables(s, seed);
      rows = static_cast<size_t>(tables.num_blocks) * s.kv_heads * s.block_size;
      table = to_device(tables.table);
      view.block_table = table.data();
      view.max_blocks = tables.max_blocks;
      view.block_size = s.block_size;
    }
    k.allocate(rows * d * eb, "K");
    v.allocate(rows * d * eb, "V");
    view.k = k.data();
    view.v = v.data();
    if (s.format != KvFormat::BF16) {
      const size_t n = s.format == KvFormat::FP8 ? static_cast<size_t>(s.batch) * s.kv_heads : rows;
      k_scale.allocate(n, "K scales");
      v_scale.allocate(n, "V scales");
      view.k_scale = k_scale.data();
      view.v_scale = v_scale.data();
    }
    const size_t staged = static_cast<size_t>(s.batch) * s.kv_heads * chunk * d;
    DeviceBuffer<uint16_t> kn(staged, "staged K"), vn(staged, "staged V");
    const int chunks = (s.context + chunk - 1) / chunk;
    std::vector<std::vector<int32_t>> first(static_cast<size_t>(chunks)), count(static_cast<size_t>(chunks));
    std::vector<DeviceBuffer<int32_t>> first_d, count_d;
    for (int i = 0; i < chunks; ++i) {
      for (int b = 0; b < s.batch; ++b) {
        first[static_cast<size_t>(i)].push_back(i * chunk);
        count[static_cast<size_t>(i)].push_back(std::max(0, std::min(chunk, s.length(b) - i * chunk)));
      }
      first_d.push_back(to_device(first[static_cast<size_t>(i)]));
      count_d.push_back(to_device(count[static_cast<size_t>(i)]));
    }
    auto stage = [&](int i) {
      launch_kv_fill_chunk(kn.data(), s.batch, s.kv_heads, s.head_dim, chunk, i * chunk, s.context, seed + 1, st);
      launch_kv_fill_chunk(vn.data(), s.batch, s.kv_heads, s.head_dim, chunk, i * chunk, s.context, seed + 2, st);
    };
    if (s.format == KvFormat::FP8) {
      DeviceBuffer<float> ka(static_cast<size_t>(s.batch) * s.kv_heads, "K amax"), va(ka.size(), "V amax");
      IB_CUDA_CHECK(cudaMemsetAsync(ka.data(), 0, ka.bytes(), st));
      IB_CUDA_CHECK(cudaMemsetAsync(va.data(), 0, va.bytes(), st));
      for (int i = 0; i < chunks; ++i) {
        stage(i);
        launch_kv_amax(ka.data(), va.data(), kn.data(), vn.data(), s.batch, s.kv_heads, s.head_dim, chunk,
                       count_d[static_cast<size_t>(i)].data(), st);
      }
      IB_CUDA_CHECK(cudaStreamSynchronize(st));
      std::vector<float> ks = to_host(ka), vs = to_host(va);
      for (auto& x : ks) x = fp8_scale(x);
      for (auto& x : vs) x = fp8_scale(x);
      IB_CUDA_CHECK(cudaMemcpy(k_scale.data(), ks.data(), k_scale.bytes(), cudaMemcpyHostToDevice));
      IB_CUDA_CHECK(cudaMemcpy(v_scale.data(), vs.data(), v_scale.bytes(), cudaMemcpyHostToDevice));
    }
    for (int i = 0; i < chunks; ++i) {
      stage(i);
      launch_kv_append(view, kn.data(), vn.data(), chunk, first_d[static_cast<size_t>(i)].data(),
                       count_d[static_cast<size_t>(i)].data(), st);
    }
    IB_CUDA_CHECK(cudaStreamSynchronize(st));
  }

  // (b, kvh) as stored: n = length(b) tokens.
  StoredHead fetch(const DecodeShape& s, int b, int kvh) const {
    const size_t eb = s.format == KvFormat::BF16 ? 2 : 1, row_bytes = eb * s.head_dim;
    const std::vector<uint8_t> hk = to_host(k), hv = to_host(v);
    std::vector<float> hks, hvs;
    if (s.format != KvFormat::BF16) {
      hks = to_host(k_scale);
      hvs = to_host(v_scale);
    }
    StoredHead h;
    const size_t seq_head = static_cast<size_t>(b) * s.kv_heads + kvh;
    for (int t = 0; t < s.length(b); ++t) {
      size_t row = seq_head * s.context + t;
      if (s.paged()) {
        const int32_t page = tables.table[static_cast<size_t>(b) * tables.max_blocks + t / s.block_size];
        row = (static_cast<size_t>(page) * s.kv_heads + kvh) * s.block_size + t % s.block_size;
      }
      h.k.insert(h.k.end(), hk.begin() + row * row_bytes, hk.begin() + (row + 1) * row_bytes);
      h.v.insert(h.v.end(), hv.begin() + row * row_bytes, hv.begin() + (row + 1) * row_bytes);
      if (s.format == KvFormat::INT8) {
        h.k_scale.push_back(hks[row]);
        h.v_scale.push_back(hvs[row]);
      }
    }
    if (s.format == KvFormat::FP8) {
      h.k_scale.push_back(hks[seq_head]);
      h.v_scale.push_back(hvs[seq_head]);
    }
    return h;
  }
};

TEST(GpuKvAppend, ChunkedAppendEqualsTheHostQuantizer) {
  REQUIRE_GPU();
  TestStream st;
  for (KvFormat f : {KvFormat::BF16, KvFormat::FP8, KvFormat::INT8})
    for (int block : {0, 16, 5}) {
      DecodeShape s;
      s.batch = 3;
      s.heads = s.kv_heads = 2;
      s.head_dim = 64;
      s.context = 203;
      s.ragged = true;
      s.format = f;
      s.block_size = block;
      const uint64_t seed = 77;
      const DecodeInputs in = decode_inputs(s, seed);
      const FilledCache cache(s, seed, 50, st.get());  // chunks end inside sequences and inside blocks
      for (int b = 0; b < s.batch; ++b)
        for (int kvh = 0; kvh < s.kv_heads; ++kvh) {
          const StoredHead got = cache.fetch(s, b, kvh), want = quantize_head(s, in, b, kvh);
          SCOPED_TRACE(s.label() + " sequence " + std::to_string(b) + " kv head " + std::to_string(kvh));
          EXPECT_EQ(got.k, want.k);
          EXPECT_EQ(got.v, want.v);
          EXPECT_EQ(got.k_scale, want.k_scale);
          EXPECT_EQ(got.v_scale, want.v_scale);
        }
    }
}

// The int4 and int2 appends in chunks of 1 (decode), 7 and 50 tokens (groups completed across
// appends, from the residual) and 256 (the whole context at once) equal the host quantizer.
TEST(GpuKvAppend, Int4AndInt2ChunkedAppendEqualsTheHostQuantizer) {
  REQUIRE_GPU();
  TestStream st;
  for (KvFormat f : {KvFormat::INT4, KvFormat::INT2})
    for (int group : {32, 16})
      for (int chunk : {1, 7, 50, 256}) {
        DecodeShape s;
        s.batch = 3;
        s.heads = s.kv_heads = 2;
        s.head_dim = 128;
        s.context = 203;
        s.ragged = true;
        s.format = f;
        s.kivi_group = group;
        const uint64_t seed = 78;
        const DecodeInputs in = decode_inputs(s, seed);
        const size_t pairs = static_cast<size_t>(s.batch) * s.kv_heads, d = static_cast<size_t>(s.head_dim);
        const size_t ctx = static_cast<size_t>(s.context), G = static_cast<size_t>(group), key_groups = (ctx + G - 1) / G;
        const size_t row = static_cast<size_t>(kivi_row_bytes(s.head_dim, kivi_bits(f)));
        DeviceBuffer<uint8_t> kc(pairs * ctx * row, "K codes"), vc(kc.size(), "V codes");
        DeviceBuffer<uint32_t> kp(pairs * key_groups * d, "K pairs"), vp(pairs * ctx * (d / G), "V pairs");
        DeviceBuffer<uint16_t> kr(pairs * G * d, "K residual"), vr(kr.size(), "V residual");
        KiviCacheView view;
        view.k_codes = kc.data();
        view.v_codes = vc.data();
        view.k_params = kp.data();
        view.v_params = vp.data();
        view.k_residual = kr.data();
        view.v_residual = vr.data();
        view.batch = s.batch;
        view.kv_heads = s.kv_heads;
        view.head_dim = s.head_dim;
        view.capacity = s.context;
        view.group = group;
        view.bits = kivi_bits(f);
        const size_t staged = pairs * static_cast<size_t>(chunk) * d;
        DeviceBuffer<uint16_t> kn(staged, "staged K"), vn(staged, "staged V");
        for (int i = 0; i * chunk < s.context; ++i) {
          std::vector<int32_t> first, count;
          for (int b = 0; b < s.batch; ++b) {
            first.push_back(i * chunk);
            count.push_back(std::max(0, std::min(chunk, s.length(b) - i * chunk)));
          }
          const auto first_d = to_device(first), count_d = to_device(count);
          launch_kv_fill_chunk(kn.data(), s.batch, s.kv_heads, s.head_dim, chunk, i * chunk, s.context, seed + 1, st.get());
          launch_kv_fill_chunk(vn.data(), s.batch, s.kv_heads, s.head_dim, chunk, i * chunk, s.context, seed + 2, st.get());
          launch_kivi_append(view, kn.data(), vn.data(), chunk, first_d.data(), count_d.data(), st.get());
          IB_CUDA_CHECK(cudaStreamSynchronize(st.get()));
        }
        const auto hkc = to_host(kc), hvc = to_host(vc);
        const auto hkp = to_host(kp), hvp = to_host(vp);
        const auto hkr = to_host(kr), hvr = to_host(vr);
        auto pairs_of = [](const std::vector<uint32_t>& x, size_t at, size_t n) {
          std::vector<float> out;
          for (size_t i = at; i < at + n; ++i) {
            out.push_back(fp16_bits_to_float(static_cast<uint16_t>(x[i] & 0xffffu)));
            out.push_back(fp16_bits_to_float(static_cast<uint16_t>(x[i] >> 16)));
          }
          return out;
        };
        for (int b = 0; b < s.batch; ++b)
          for (int kvh = 0; kvh < s.kv_heads; ++kvh) {
            SCOPED_TRACE(s.label() + " group " + std::to_string(group) + " chunk " + std::to_string(chunk) + " sequence " +
                         std::to_string(b) + " kv head " + std::to_string(kvh));
            const StoredHead want = quantize_head(s, in, b, kvh);
            const size_t pair = static_cast<size_t>(b) * s.kv_heads + kvh;
            const size_t n = static_cast<size_t>(s.length(b)), nq = static_cast<size_t>(s.quantized_length(b));
            std::vector<uint8_t> k(hkc.begin() + pair * ctx * row, hkc.begin() + pair * ctx * row + nq * row);
            std::vector<uint8_t> v(hvc.begin() + pair * ctx * row, hvc.begin() + pair * ctx * row + nq * row);
            for (size_t i = 0; i < (n - nq) * d; ++i) {
              const uint16_t kx = hkr[pair * G * d + i], vx = hvr[pair * G * d + i];
              k.push_back(static_cast<uint8_t>(kx & 0xff));
              k.push_back(static_cast<uint8_t>(kx >> 8));
              v.push_back(static_cast<uint8_t>(vx & 0xff));
              v.push_back(static_cast<uint8_t>(vx >> 8));
            }
            EXPECT_EQ(k, want.k);
            EXPECT_EQ(v, want.v);
            EXPECT_EQ(pairs_of(hkp, pair * key_groups * d, nq / G * d), want.k_scale);
            EXPECT_EQ(pairs_of(hvp, pair * ctx * (d / G), nq * (d / G)), want.v_scale);
          }
      }
}

// Values the decode inputs never produce: past the fp8 range of the given scale (saturating to
// ±448), between e4m3 subnormals, exact rounding ties for int8, zeros and a row of zeros.
TEST(GpuKvAppend, SaturationTiesAndZerosFollowTheHostRules) {
  REQUIRE_GPU();
  TestStream st;
  const int d = 64, tokens = 4;
  std::vector<uint16_t> k(static_cast<size_t>(tokens) * d), v(k.size());
  const float specials[] = {1000.0f,       -1000.0f,       448.0f,        464.0f,  479.0f,  -480.0f, 0.0f, -0.0f,
                            0.0009765625f, 0.00146484375f, 0.0029296875f, 1.0625f, 1.1875f, -2.5f,   3.5f, 65504.0f};
  for (int t = 0; t < tokens; ++t)
    for (int c = 0; c < d; ++c) {
      const size_t i = static_cast<size_t>(t) * d + c;
      float x = specials[(c + t) % 16] * (t == 1 ? 0.25f : 1.0f);
      if (t == 3) x = 0.0f;  // an all-zero token: int8 scale 0
      k[i] = float_to_bf16_bits(x);
      // int8 ties: with amax 127 (scale 1) every x.5 sits exactly between two integers.
      v[i] = float_to_bf16_bits(t == 3 ? 0.0f : c == 0 ? 127.0f : static_cast<float>(c % 16) - 7.5f);
    }
  const DeviceBuffer<uint16_t> kd = to_device(k), vd = to_device(v);
  const DeviceBuffer<int32_t> first = to_device(std::vector<int32_t>{0}), count = to_device(std::vector<int32_t>{tokens});
  for (KvElem e : {KvElem::FP8, KvElem::INT8}) {
    KvCacheView c;
    c.elem = e;
    c.batch = 1;
    c.kv_heads = 1;
    c.head_dim = d;
    c.capacity = tokens;
    DeviceBuffer<uint8_t> kc(k.size(), "K"), vc(k.size(), "V");
    const size_t n_scales = e == KvElem::FP8 ? 1 : tokens;
    const float fp8_scale_k = 1.0f, fp8_scale_v = 0.0f;  // 1: ±1000 saturates; 0: every element is 0
    DeviceBuffer<float> ks = to_device(std::vector<float>(n_scales, fp8_scale_k));
    DeviceBuffer<float> vs = to_device(std::vector<float>(n_scales, fp8_scale_v));
    c.k = kc.data();
    c.v = vc.data();
    c.k_scale = ks.data();
    c.v_scale = vs.data();
    launch_kv_append(c, kd.data(), vd.data(), tokens, first.data(), count.data(), st.get());
    IB_CUDA_CHECK(cudaStreamSynchronize(st.get()));
    const std::vector<uint8_t> hk = to_host(kc), hv = to_host(vc);
    const std::vector<float> hks = to_host(ks), hvs = to_host(vs);
    for (int t = 0; t < tokens; ++t) {
      float k_amax = 0, v_amax = 0;
      for (int c2 = 0; c2 < d; ++c2) {
        k_amax = std::max(k_amax, std::fabs(bf16_bits_to_float(k[static_cast<size_t>(t) * d + c2])));
        v_amax = std::max(v_amax, std::fabs(bf16_bits_to_float(v[static_cast<size_t>(t) * d + c2])));
      }
      const float k_scale = e == KvElem::FP8 ? fp8_scale_k : int8_scale(k_amax);
      const float v_scale = e == KvElem::FP8 ? fp8_scale_v : int8_scale(v_amax);
      if (e == KvElem::INT8) {
        EXPECT_EQ(float_bits(hks[static_cast<size_t>(t)]), float_bits(k_scale)) << "token " << t;
        EXPECT_EQ(float_bits(hvs[static_cast<size_t>(t)]), float_bits(v_scale)) << "token " << t;
      }
      for (int c2 = 0; c2 < d; ++c2) {
        const size_t i = static_cast<size_t>(t) * d + c2;
        const float xk = bf16_bits_to_float(k[i]), xv = bf16_bits_to_float(v[i]);
        const uint8_t want_k = e == KvElem::FP8 ? fp8_quantize(xk, k_scale) : static_cast<uint8_t>(int8_quantize(xk, k_scale));
        const uint8_t want_v = e == KvElem::FP8 ? fp8_quantize(xv, v_scale) : static_cast<uint8_t>(int8_quantize(xv, v_scale));
        EXPECT_EQ(hk[i], want_k) << (e == KvElem::FP8 ? "fp8" : "int8") << " K token " << t << " x " << xk;
        EXPECT_EQ(hv[i], want_v) << (e == KvElem::FP8 ? "fp8" : "int8") << " V token " << t << " x " << xv;
      }
    }
    if (e == KvElem::FP8) {
      EXPECT_EQ(hk[0], 0x7e);  // 1000 saturates to 448
      EXPECT_EQ(hk[1], 0xfe);  // -1000 to -448
    }
  }
}

// Sequences of length 0 get zeros; a split grid over lengths 0, 300, 0 leaves only empty
// partials for the empty sequences.
TEST(GpuKvDecode, EmptySequencesGiveZeros) {
  REQUIRE_GPU();
  TestStream st;
  DecodeShape s;
  s.batch = 3;
  s.heads = 4;
  s.kv_heads = 2;
  s.head_dim = 128;
  s.context = 300;
  const uint64_t seed = 5;
  const FilledCache cache(s, seed, 300, st.get());
  const DecodeInputs in = decode_inputs(s, seed);
  std::vector<uint16_t> q(static_cast<size_t>(s.batch) * s.heads * s.head_dim);
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.heads; ++h)
      for (int c = 0; c < s.head_dim; ++c)
        q[(static_cast<size_t>(b) * s.heads + h) * s.head_dim + c] = float_to_bf16_bits(in.q(b, h, c));
  const DeviceBuffer<uint16_t> qd = to_device(q);
  const DeviceBuffer<int32_t> lengths = to_device(std::vector<int32_t>{0, 300, 0});
  for (int splits : {1, 4}) {
    DeviceBuffer<uint16_t> out(q.size(), "out");
    IB_CUDA_CHECK(cudaMemset(out.data(), 0xFF, out.bytes()));
    KvDecodeParams p;
    p.cache = cache.view;
    p.q = qd.data();
    p.out = out.data();
    p.lengths = lengths.data();
    p.heads = s.heads;
    p.max_length = s.context;
    p.scale = static_cast<float>(s.scale());
    p.splits = splits;
    DeviceBuffer<float> ws(std::max<size_t>(kv_decode_workspace_floats(p, splits), 1), "workspace");
    p.workspace = ws.data();
    launch_kv_decode(p, st.get());
    IB_CUDA_CHECK(cudaStreamSynchronize(st.get()));
    const std::vector<uint16_t> o = to_host(out);
    std::vector<float> k, v, qh(static_cast<size_t>(s.head_dim));
    std::vector<double> ref(static_cast<size_t>(s.head_dim));
    for (int b = 0; b < s.batch; ++b)
      for (int h = 0; h < s.heads; ++h) {
        if (b == 1) {
          original_head(s, in, 1, h / s.group(), k, v);
          for (int c = 0; c < s.head_dim; ++c) qh[static_cast<size_t>(c)] = in.q(1, h, c);
          attend(s.context, s.head_dim, qh.data(), k.data(), v.data(), s.scale(), ref.data());
        }
        double err2 = 0, ref2 = 0;
        for (int c = 0; c < s.head_dim; ++c) {
          const float got = bf16_bits_to_float(o[(static_cast<size_t>(b) * s.heads + h) * s.head_dim + c]);
          if (b != 1) {
            ASSERT_EQ(got, 0.0f) << "splits " << splits << " sequence " << b << " head " << h;
          } else {
            err2 += (got - ref[static_cast<size_t>(c)]) * (got - ref[static_cast<size_t>(c)]);
            ref2 += ref[static_cast<size_t>(c)] * ref[static_cast<size_t>(c)];
          }
        }
        if (b == 1) {
          EXPECT_LE(std::sqrt(err2 / ref2), 1e-2) << "splits " << splits << " head " << h;
        }
      }
  }
}

// One sequence and one kv head holding given bf16 K/V (n × d), appended by launch_kv_append
// (fp8: with the scales of their amax, as the calibration pass would set them).
struct OneHeadCache {
  DeviceBuffer<uint8_t> k, v;
  DeviceBuffer<float> k_scale, v_scale;
  KvCacheView view;
  int n;

  OneHeadCache(KvFormat f, int d, const std::vector<uint16_t>& kb, const std::vector<uint16_t>& vb, cudaStream_t st)
      : n(static_cast<int>(kb.size()) / d) {
    const size_t eb = f == KvFormat::BF16 ? 2 : 1;
    view.elem = elem_of(f);
    view.batch = view.kv_heads = 1;
    view.head_dim = d;
    view.capacity = n;
    k.allocate(kb.size() * eb, "K");
    v.allocate(kb.size() * eb, "V");
    view.k = k.data();
    view.v = v.data();
    if (f != KvFormat::BF16) {
      float ka = 0, va = 0;
      for (size_t i = 0; i < kb.size(); ++i) {
        ka = std::max(ka, std::fabs(bf16_bits_to_float(kb[i])));
        va = std::max(va, std::fabs(bf16_bits_to_float(vb[i])));
      }
      const size_t scales = f == KvFormat::FP8 ? 1 : static_cast<size_t>(n);
      k_scale = to_device(std::vector<float>(scales, fp8_scale(ka)));
      v_scale = to_device(std::vector<float>(scales, fp8_scale(va)));
      view.k_scale = k_scale.data();
      view.v_scale = v_scale.data();
    }
    const DeviceBuffer<uint16_t> kd = to_device(kb), vd = to_device(vb);
    const DeviceBuffer<int32_t> first = to_device(std::vector<int32_t>{0}), count = to_device(std::vector<int32_t>{n});
    launch_kv_append(view, kd.data(), vd.data(), n, first.data(), count.data(), st);
    IB_CUDA_CHECK(cudaStreamSynchronize(st));
  }

  StoredHead fetch() const {
    return {to_host(k), to_host(v), k_scale.size() ? to_host(k_scale) : std::vector<float>{},
            v_scale.size() ? to_host(v_scale) : std::vector<float>{}};
  }
};

// Scores that climb by ~11 (base 2) from one key of a lane to its next, so the running max keeps
// moving and the lazy rescale runs with a full accumulator, then fall again: every format, one
// and several splits, against float64 attention over what the cache holds.
TEST(GpuKvDecode, ClimbingScoresForceRescales) {
  REQUIRE_GPU();
  TestStream st;
  const int d = 64, n = 300, heads = 2;
  std::vector<uint16_t> kb(static_cast<size_t>(n) * d), vb(kb.size()), qb(static_cast<size_t>(heads) * d);
  for (int t = 0; t < n; ++t)
    for (int c = 0; c < d; ++c) {
      const size_t i = static_cast<size_t>(t) * d + c;
      const float ramp = static_cast<float>(t < 200 ? t : 400 - t);
      kb[i] = float_to_bf16_bits(c == 0 ? ramp : random_uniform(1, i));
      vb[i] = float_to_bf16_bits(random_uniform(2, i));
    }
  for (int h = 0; h < heads; ++h)
    for (int c = 0; c < d; ++c) {
      const float x = c == 0 ? (h == 0 ? 2.0f : -1.0f) : random_uniform(3, static_cast<uint64_t>(h * d + c));
      qb[static_cast<size_t>(h) * d + c] = float_to_bf16_bits(x);
    }
  DecodeShape s;
  s.batch = 1;
  s.heads = heads;
  s.kv_heads = 1;
  s.head_dim = d;
  s.context = n;
  const DeviceBuffer<uint16_t> qd = to_device(qb);
  const DeviceBuffer<int32_t> lengths = to_device(std::vector<int32_t>{n});
  for (KvFormat f : {KvFormat::BF16, KvFormat::FP8, KvFormat::INT8}) {
    s.format = f;
    const OneHeadCache cache(f, d, kb, vb, st.get());
    std::vector<float> kq, vq;
    dequantize_head(s, cache.fetch(), n, kq, vq);
    for (int splits : {1, 3}) {
      DeviceBuffer<uint16_t> out(qb.size(), "out");
      KvDecodeParams p;
      p.cache = cache.view;
      p.q = qd.data();
      p.out = out.data();
      p.lengths = lengths.data();
      p.heads = heads;
      p.max_length = n;
      p.scale = static_cast<float>(s.scale());
      p.splits = splits;
      DeviceBuffer<float> ws(std::max<size_t>(kv_decode_workspace_floats(p, splits), 1), "workspace");
      p.workspace = ws.data();
      launch_kv_decode(p, st.get());
      IB_CUDA_CHECK(cudaStreamSynchronize(st.get()));
      const std::vector<uint16_t> o = to_host(out);
      for (int h = 0; h < heads; ++h) {
        std::vector<float> q(static_cast<size_t>(d));
        std::vector<double> ref(static_cast<size_t>(d));
        for (int c = 0; c < d; ++c) q[static_cast<size_t>(c)] = bf16_bits_to_float(qb[static_cast<size_t>(h) * d + c]);
        attend(n, d, q.data(), kq.data(), vq.data(), s.scale(), ref.data());
        double err2 = 0, ref2 = 0;
        for (int c = 0; c < d; ++c) {
          const double e = bf16_bits_to_float(o[static_cast<size_t>(h) * d + c]) - ref[static_cast<size_t>(c)];
          err2 += e * e;
          ref2 += ref[static_cast<size_t>(c)] * ref[static_cast<size_t>(c)];
        }
        EXPECT_LE(std::sqrt(err2 / ref2), 1e-2) << to_string(f) << " splits " << splits << " head " << h;
      }
    }
  }
}

}  // namespace
}  // namespace ib::kvcache
