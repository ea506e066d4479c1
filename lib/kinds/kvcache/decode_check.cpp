#include "kinds/kvcache/decode_check.h"

#include <algorithm>
#include <cmath>
#include <random>

#include <fmt/format.h>

namespace ib::kvcache {

DecodeCheck check_decode(const DecodeShape& s, const DecodeInputs& in, uint64_t seed, const FetchHead& fetch, const ReadOut& out,
                         double tolerance) {
  DecodeCheck r;
  const int d = s.head_dim, g = s.group();
  // Output written everywhere and finite.
  int64_t bad = 0;
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.heads; ++h)
      for (int c = 0; c < d; ++c)
        if (!std::isfinite(out(b, h, c))) {
          ++bad;
          break;
        }
  if (bad > 0) {
    r.gate = {false, "nan_rows", static_cast<double>(bad), 0,
              fmt::format("{} of {} (sequence, head) outputs hold NaN/inf or were not written", bad, int64_t{s.batch} * s.heads)};
    return r;
  }
  // Which (sequence, kv head) pairs to check.
  std::vector<std::pair<int, int>> picked;
  const int64_t pairs = int64_t{s.batch} * s.kv_heads;
  if (static_cast<double>(s.total_tokens()) * s.kv_heads * d <= 2e7) {
    for (int b = 0; b < s.batch; ++b)
      for (int kvh = 0; kvh < s.kv_heads; ++kvh) picked.emplace_back(b, kvh);
  } else {
    picked = {{0, 0}, {s.batch - 1, s.kv_heads - 1}};
    for (uint64_t t = 0; picked.size() < 8; ++t) {
      const int64_t i = static_cast<int64_t>(random_bits(seed ^ 0xDEC0, t) % static_cast<uint64_t>(pairs));
      picked.emplace_back(static_cast<int>(i / s.kv_heads), static_cast<int>(i % s.kv_heads));
    }
  }
  double err2 = 0, ref2 = 0, ferr2 = 0, fref2 = 0, fmax = 0;
  int64_t byte_mismatch = 0, scale_mismatch = 0;
  std::string first_mismatch;
  std::vector<float> kq, vq, ko, vo, q(static_cast<size_t>(d));
  std::vector<double> ref(static_cast<size_t>(d)), orig(static_cast<size_t>(d));
  for (auto [b, kvh] : picked) {
    const int n = s.length(b);
    const StoredHead got = fetch(b, kvh);
    const StoredHead want = quantize_head(s, in, b, kvh);
    auto count_bytes = [&](const std::vector<uint8_t>& x, const std::vector<uint8_t>& y, const char* what) {
      if (x.size() != y.size()) {
        byte_mismatch += static_cast<int64_t>(std::max(x.size(), y.size()));
        if (first_mismatch.empty())
          first_mismatch = fmt::format("{} of ({}, {}): {} bytes, want {}", what, b, kvh, x.size(), y.size());
        return;
      }
      for (size_t i = 0; i < x.size(); ++i)
        if (x[i] != y[i] && byte_mismatch++ == 0)
          first_mismatch = fmt::format("{} of ({}, {}) byte {}: {} want {}", what, b, kvh, i, x[i], y[i]);
    };
    auto count_scales = [&](const std::vector<float>& x, const std::vector<float>& y, const char* what) {
      if (x.size() != y.size()) {
        scale_mismatch += static_cast<int64_t>(std::max(x.size(), y.size()));
        return;
      }
      for (size_t i = 0; i < x.size(); ++i)
        if (float_bits(x[i]) != float_bits(y[i]) && scale_mismatch++ == 0 && first_mismatch.empty())
          first_mismatch = fmt::format("{} scale of ({}, {}) [{}]: {} want {}", what, b, kvh, i, x[i], y[i]);
    };
    count_bytes(got.k, want.k, "K");
    count_bytes(got.v, want.v, "V");
    count_scales(got.k_scale, want.k_scale, "K");
    count_scales(got.v_scale, want.v_scale, "V");
    if (byte_mismatch || scale_mismatch) continue;
    dequantize_head(s, got, n, kq, vq);
    original_head(s, in, b, kvh, ko, vo);
    for (int h = kvh * g; h < (kvh + 1) * g; ++h) {
      for (int c = 0; c < d; ++c) q[static_cast<size_t>(c)] = in.q(b, h, c);
      attend(n, d, q.data(), kq.data(), vq.data(), s.scale(), ref.data());
      attend(n, d, q.data(), ko.data(), vo.data(), s.scale(), orig.data());
      for (int c = 0; c < d; ++c) {
        const double o = out(b, h, c);
        const double e = o - ref[static_cast<size_t>(c)], fe = o - orig[static_cast<size_t>(c)];
        err2 += e * e;
        ref2 += ref[static_cast<size_t>(c)] * ref[static_cast<size_t>(c)];
        ferr2 += fe * fe;
        fref2 += orig[static_cast<size_t>(c)] * orig[static_cast<size_t>(c)];
        fmax = std::max(fmax, std::fabs(fe));
      }
    }
  }
  if (byte_mismatch || scale_mismatch) {
    r.gate = {false, "cache_mismatch", static_cast<double>(byte_mismatch + scale_mismatch), 0,
              fmt::format("the stored cache differs from the host quantizer: {} bytes, {} scales (first: {})", byte_mismatch,
                          scale_mismatch, first_mismatch)};
    return r;
  }
  const double rel = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  r.format_rel_l2 = fref2 > 0 ? std::sqrt(ferr2 / fref2) : std::sqrt(ferr2);
  r.format_max_err = fmax;
  r.gate = {rel <= tolerance, "rel_l2", rel, tolerance,
            fmt::format("{} of {} (sequence, kv head) caches equal the host quantizer; output vs float64 over the dequantized "
                        "cache",
                        picked.size(), pairs)};
  return r;
}

std::vector<Metric> decode_metrics(const DecodeShape& s, const DecodeCheck& c) {
  return {{"KV bytes", s.kv_bytes() / (1 << 20), "MiB"},
          {"rel L2 vs bf16 KV", c.format_rel_l2, ""},
          {"max err vs bf16 KV", c.format_max_err, ""}};
}

}  // namespace ib::kvcache
