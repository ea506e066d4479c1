#include "kvcache/decode_problem.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include <fmt/format.h>

#include "model/block_manager.h"

namespace ib::kvcache {

int DecodeShape::length(int b) const {
  if (!ragged || b == 0 || context < 2) return context;
  const int half = context / 2;
  return context - static_cast<int>(mix64(0x5EED0000ull + static_cast<uint64_t>(b)) % static_cast<uint64_t>(context - half));
}

int DecodeShape::quantized_length(int b) const {
  const int n = length(b);
  return is_kivi(format) ? n - n % kivi_group : n;
}

int64_t DecodeShape::total_tokens() const {
  int64_t n = 0;
  for (int b = 0; b < batch; ++b) n += length(b);
  return n;
}

int DecodeShape::blocks_per_seq() const { return paged() ? (context + block_size - 1) / block_size : 0; }

double DecodeShape::kv_bytes() const {
  if (is_kivi(format)) {  // full groups: codes + (scale, zero) pairs; the residual: bf16
    double bytes = 0;
    const double per_quantized =
        head_dim * kv_element_bytes(format) + kv_scale_bytes_per_token_head(format, head_dim, kivi_group);
    for (int b = 0; b < batch; ++b) {
      const int nq = quantized_length(b);
      bytes += nq * per_quantized + (length(b) - nq) * 2.0 * head_dim;
    }
    return 2.0 * kv_heads * bytes;
  }
  const double per_token_head = head_dim * kv_element_bytes(format) + kv_scale_bytes_per_token_head(format, head_dim);
  double bytes = 2.0 * static_cast<double>(total_tokens()) * kv_heads * per_token_head;
  if (format == KvFormat::FP8) bytes += 2.0 * batch * kv_heads * sizeof(float);
  return bytes;
}

double DecodeShape::io_bytes() const { return kv_bytes() + 2.0 * 2.0 * batch * heads * head_dim; }

double DecodeShape::flops() const { return 4.0 * head_dim * static_cast<double>(total_tokens()) * heads; }

double DecodeShape::scale() const { return 1.0 / std::sqrt(static_cast<double>(head_dim)); }

std::string DecodeShape::label() const {
  return fmt::format("batch {} × {} heads ({} kv) × d {}, context {}{}, {} {}", batch, heads, kv_heads, head_dim, context,
                     ragged ? " ragged" : "", to_string(format), paged() ? fmt::format("paged/{}", block_size) : "contiguous");
}

const char* kivi_group_key(KvFormat f) {
  switch (f) {
    case KvFormat::INT4:
      return "int4_group";
    case KvFormat::INT2:
      return "int2_group";
    default:
      return "";
  }
}

std::string decode_shape_problem(const DecodeShape& s) {
  if (s.kv_heads <= 0 || s.heads % s.kv_heads != 0)
    return fmt::format("heads ({}) must be a multiple of kv_heads ({})", s.heads, s.kv_heads);
  if (is_kivi(s.format)) {
    if (s.kivi_group < 2 || s.head_dim % s.kivi_group != 0)
      return fmt::format("{} needs {} >= 2 dividing head_dim ({}), got {}", to_string(s.format), kivi_group_key(s.format),
                         s.head_dim, s.kivi_group);
    if (s.head_dim * kivi_bits(s.format) % 8 != 0)
      return fmt::format("{} packs {} codes per byte: head_dim ({}) must be a multiple of it", to_string(s.format),
                         8 / kivi_bits(s.format), s.head_dim);
    if (s.paged())
      return fmt::format(
          "{} (KIVI) is contiguous only: a key group of G tokens shares per-channel scales across block "
          "boundaries, and the bf16 residual lives outside the block pool",
          to_string(s.format));
  }
  return {};
}

DecodeInputs decode_inputs(const DecodeShape& s, uint64_t seed) {
  DecodeInputs in;
  in.seed = seed;
  in.heads = s.heads;
  in.kv_heads = s.kv_heads;
  in.head_dim = s.head_dim;
  in.context = s.context;
  return in;
}

BlockTables build_block_tables(const DecodeShape& s, uint64_t seed) {
  BlockTables t;
  t.max_blocks = s.blocks_per_seq();
  std::vector<int> need(static_cast<size_t>(s.batch));
  for (int b = 0; b < s.batch; ++b) {
    need[static_cast<size_t>(b)] = (s.length(b) + s.block_size - 1) / s.block_size;
    t.num_blocks += need[static_cast<size_t>(b)];
  }
  BlockManager m(std::max(t.num_blocks, 1), s.block_size);
  std::vector<BlockManager::SeqId> ids;
  for (int b = 0; b < s.batch; ++b) ids.push_back(m.create());
  // Grow the sequences one block at a time in a seeded random interleaving.
  std::vector<int> order;
  for (int b = 0; b < s.batch; ++b) order.insert(order.end(), static_cast<size_t>(need[static_cast<size_t>(b)]), b);
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[random_bits(seed ^ 0xB10C, i) % i]);
  std::vector<int> grown(static_cast<size_t>(s.batch), 0);
  for (int b : order) {
    const int len = s.length(b), have = grown[static_cast<size_t>(b)];
    const int add = std::min(s.block_size, len - have);
    if (!m.append(ids[static_cast<size_t>(b)], add)) throw std::logic_error("build_block_tables: pool too small");
    grown[static_cast<size_t>(b)] += add;
  }
  t.table.assign(static_cast<size_t>(s.batch) * static_cast<size_t>(t.max_blocks), -1);
  for (int b = 0; b < s.batch; ++b) {
    const auto& tab = m.table(ids[static_cast<size_t>(b)]);
    std::copy(tab.begin(), tab.end(), t.table.begin() + static_cast<std::ptrdiff_t>(b) * t.max_blocks);
  }
  return t;
}

void original_head(const DecodeShape& s, const DecodeInputs& in, int b, int kvh, std::vector<float>& k, std::vector<float>& v) {
  const int n = s.length(b), d = s.head_dim;
  k.resize(static_cast<size_t>(n) * d);
  v.resize(k.size());
  for (int t = 0; t < n; ++t)
    for (int c = 0; c < d; ++c) {
      k[static_cast<size_t>(t) * d + c] = in.k(b, kvh, t, c);
      v[static_cast<size_t>(t) * d + c] = in.v(b, kvh, t, c);
    }
}

namespace {

// One tensor (K or V) of a head in the format: bytes and scales.
void quantize_tensor(KvFormat f, int n, int d, const std::vector<float>& x, std::vector<uint8_t>& bytes,
                     std::vector<float>& scales) {
  const size_t elems = static_cast<size_t>(n) * d;
  scales.clear();
  switch (f) {
    case KvFormat::BF16:
      bytes.resize(elems * 2);
      for (size_t i = 0; i < elems; ++i) {
        const uint16_t h = float_to_bf16_bits(x[i]);
        std::memcpy(&bytes[2 * i], &h, 2);
      }
      break;
    case KvFormat::FP8: {
      float amax = 0;
      for (float e : x) amax = std::max(amax, std::fabs(e));
      const float scale = fp8_scale(amax);
      scales.push_back(scale);
      bytes.resize(elems);
      for (size_t i = 0; i < elems; ++i) bytes[i] = fp8_quantize(x[i], scale);
      break;
    }
    case KvFormat::INT8:
      bytes.resize(elems);
      for (int t = 0; t < n; ++t) {
        float amax = 0;
        for (int c = 0; c < d; ++c) amax = std::max(amax, std::fabs(x[static_cast<size_t>(t) * d + c]));
        const float scale = int8_scale(amax);
        scales.push_back(scale);
        for (int c = 0; c < d; ++c) {
          const size_t i = static_cast<size_t>(t) * d + c;
          bytes[i] = static_cast<uint8_t>(int8_quantize(x[i], scale));
        }
      }
      break;
    case KvFormat::INT4:
    case KvFormat::INT2:
      throw std::logic_error("int4/int2 are quantized by quantize_kivi");
  }
}

// int4 / int2 (KIVI, B = bits) K or V of n tokens: the stored form of decode_problem.h (rules of kv_format.h).
void quantize_kivi(bool keys, int bits, int n, int d, int group, const std::vector<float>& x, std::vector<uint8_t>& bytes,
                   std::vector<float>& scales) {
  const int row = kivi_row_bytes(d, bits);
  const int nq = n - n % group;
  bytes.assign(static_cast<size_t>(nq) * row + static_cast<size_t>(n - nq) * d * 2, 0);
  scales.clear();
  auto at = [&](int t, int c) { return x[static_cast<size_t>(t) * d + c]; };
  auto put = [&](int t, int c, const KiviRange& r) {
    const uint32_t code = kivi_quantize(at(t, c), fp16_bits_to_float(r.scale), fp16_bits_to_float(r.zero), bits);
    kivi_set_code(&bytes[static_cast<size_t>(t) * row], c, bits, code);
  };
  if (keys) {
    for (int j = 0; j < nq; j += group)
      for (int c = 0; c < d; ++c) {
        float lo = at(j, c), hi = lo;
        for (int t = j + 1; t < j + group; ++t) {
          lo = std::min(lo, at(t, c));
          hi = std::max(hi, at(t, c));
        }
        const KiviRange r = kivi_range(lo, hi, bits);
        scales.push_back(fp16_bits_to_float(r.scale));
        scales.push_back(fp16_bits_to_float(r.zero));
        for (int t = j; t < j + group; ++t) put(t, c, r);
      }
  } else {
    for (int t = 0; t < nq; ++t)
      for (int g0 = 0; g0 < d; g0 += group) {
        float lo = at(t, g0), hi = lo;
        for (int c = g0 + 1; c < g0 + group; ++c) {
          lo = std::min(lo, at(t, c));
          hi = std::max(hi, at(t, c));
        }
        const KiviRange r = kivi_range(lo, hi, bits);
        scales.push_back(fp16_bits_to_float(r.scale));
        scales.push_back(fp16_bits_to_float(r.zero));
        for (int c = g0; c < g0 + group; ++c) put(t, c, r);
      }
  }
  for (int t = nq; t < n; ++t)
    for (int c = 0; c < d; ++c) {
      const uint16_t h = float_to_bf16_bits(at(t, c));
      std::memcpy(&bytes[static_cast<size_t>(nq) * row + (static_cast<size_t>(t - nq) * d + c) * 2], &h, 2);
    }
}

void dequantize_kivi(bool keys, int bits, int n, int d, int group, const std::vector<uint8_t>& bytes,
                     const std::vector<float>& scales, std::vector<float>& x) {
  const int row = kivi_row_bytes(d, bits);
  const int nq = n - n % group;
  x.resize(static_cast<size_t>(n) * d);
  for (int t = 0; t < nq; ++t)
    for (int c = 0; c < d; ++c) {
      // K: pair (t / G, c); V: pair (t, c / G).
      const size_t pair = keys ? static_cast<size_t>(t / group) * d + c : static_cast<size_t>(t) * (d / group) + c / group;
      const uint32_t code = kivi_get_code(&bytes.at(static_cast<size_t>(t) * row), c, bits);
      x[static_cast<size_t>(t) * d + c] = kivi_dequantize(code, scales.at(2 * pair), scales.at(2 * pair + 1));
    }
  for (int t = nq; t < n; ++t)
    for (int c = 0; c < d; ++c) {
      uint16_t h;
      std::memcpy(&h, &bytes.at(static_cast<size_t>(nq) * row + (static_cast<size_t>(t - nq) * d + c) * 2), 2);
      x[static_cast<size_t>(t) * d + c] = bf16_bits_to_float(h);
    }
}

void dequantize_tensor(KvFormat f, int n, int d, const std::vector<uint8_t>& bytes, const std::vector<float>& scales,
                       std::vector<float>& x) {
  const size_t elems = static_cast<size_t>(n) * d;
  x.resize(elems);
  for (size_t i = 0; i < elems; ++i) {
    switch (f) {
      case KvFormat::BF16: {
        uint16_t h;
        std::memcpy(&h, &bytes[2 * i], 2);
        x[i] = bf16_bits_to_float(h);
        break;
      }
      case KvFormat::FP8:
        x[i] = fp8_dequantize(bytes[i], scales.at(0));
        break;
      case KvFormat::INT8:
        x[i] = int8_dequantize(static_cast<int8_t>(bytes[i]), scales.at(i / static_cast<size_t>(d)));
        break;
      case KvFormat::INT4:
      case KvFormat::INT2:
        throw std::logic_error("int4/int2 are dequantized by dequantize_kivi");
    }
  }
}

}  // namespace

StoredHead quantize_head(const DecodeShape& s, const DecodeInputs& in, int b, int kvh) {
  std::vector<float> k, v;
  original_head(s, in, b, kvh, k, v);
  StoredHead h;
  const int n = s.length(b);
  if (const int bits = kivi_bits(s.format)) {
    quantize_kivi(true, bits, n, s.head_dim, s.kivi_group, k, h.k, h.k_scale);
    quantize_kivi(false, bits, n, s.head_dim, s.kivi_group, v, h.v, h.v_scale);
    return h;
  }
  quantize_tensor(s.format, n, s.head_dim, k, h.k, h.k_scale);
  quantize_tensor(s.format, n, s.head_dim, v, h.v, h.v_scale);
  return h;
}

void dequantize_head(const DecodeShape& s, const StoredHead& h, int n, std::vector<float>& k, std::vector<float>& v) {
  if (const int bits = kivi_bits(s.format)) {
    dequantize_kivi(true, bits, n, s.head_dim, s.kivi_group, h.k, h.k_scale, k);
    dequantize_kivi(false, bits, n, s.head_dim, s.kivi_group, h.v, h.v_scale, v);
    return;
  }
  dequantize_tensor(s.format, n, s.head_dim, h.k, h.k_scale, k);
  dequantize_tensor(s.format, n, s.head_dim, h.v, h.v_scale, v);
}

void attend(int n, int d, const float* q, const float* k, const float* v, double scale, double* out) {
  std::fill(out, out + d, 0.0);
  if (n <= 0) return;
  std::vector<double> w(static_cast<size_t>(n));
  double mx = -INFINITY;
  for (int t = 0; t < n; ++t) {
    double dot = 0;
    for (int c = 0; c < d; ++c) dot += static_cast<double>(q[c]) * k[static_cast<size_t>(t) * d + c];
    w[static_cast<size_t>(t)] = dot * scale;
    mx = std::max(mx, w[static_cast<size_t>(t)]);
  }
  double sum = 0;
  for (auto& e : w) sum += (e = std::exp(e - mx));
  for (int t = 0; t < n; ++t) {
    const double p = w[static_cast<size_t>(t)] / sum;
    for (int c = 0; c < d; ++c) out[c] += p * v[static_cast<size_t>(t) * d + c];
  }
}

}  // namespace ib::kvcache
