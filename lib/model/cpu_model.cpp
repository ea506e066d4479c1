// The CPU engine's construction (its weights read, and transposed to [in][out] as
// cpu_model_internal.h says) and its factory; its other members are in cpu_model_*.cpp, by noun.
#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "model/cpu_model_internal.h"
#include "model/model.h"
#include "numerics/parallel.h"

namespace ib::model::cpu_detail {

namespace {

// [in][a_out + b_out (+ c_out)]: the column blocks of matrices sharing their input side by side.
std::vector<float> side_by_side(int in, std::initializer_list<std::pair<const Buf*, int>> parts) {
  int out = 0;
  for (const auto& p : parts) out += p.second;
  std::vector<float> m(static_cast<size_t>(in) * static_cast<size_t>(out));
  for (int i = 0; i < in; ++i) {
    int c0 = 0;
    for (const auto& [buf, n] : parts) {
      std::copy_n(buf->data() + static_cast<size_t>(i) * static_cast<size_t>(n), n,
                  m.begin() + static_cast<std::ptrdiff_t>(i) * out + c0);
      c0 += n;
    }
  }
  return m;
}

const TensorSpec& spec_named(const std::vector<TensorSpec>& specs, const std::string& name) {
  for (const auto& s : specs)
    if (s.name == name) return s;
  throw std::logic_error("no tensor " + name);
}

}  // namespace

CpuModel::CpuModel(const ModelConfig& c, const WeightSource& w, CpuMatmul matmul)
    : c_(c), inv_freq_(c.rope_inv_freq()), rope_factor_(c.rope_attention_factor()) {
  const auto specs = tensor_specs(c);
  auto load = [&](const std::string& name, Buf& dst, bool transpose) {
    for (const auto& s : specs)
      if (s.name == name) {
        dst.allocate(static_cast<size_t>(s.elems()), name);
        if (!transpose || s.shape.size() != 2) {
          w.read(s, dst.data());
        } else {
          std::vector<float> tmp(static_cast<size_t>(s.elems()));
          w.read(s, tmp.data());
          const int64_t out = s.shape[0], in = s.shape[1];
          parallel_for(static_cast<size_t>(in), [&](size_t lo, size_t hi) {
            for (size_t i = lo; i < hi; ++i)
              for (int64_t o = 0; o < out; ++o)
                dst[i * static_cast<size_t>(out) + static_cast<size_t>(o)] = tmp[static_cast<size_t>(o * in) + i];
          });
        }
        weight_bytes_ += static_cast<int64_t>(dst.bytes());
        return;
      }
    throw std::logic_error("no tensor " + name);
  };
  load("model.embed_tokens.weight", embed_, false);
  layers_.resize(static_cast<size_t>(c.layers));
  const BlockDot dot = matmul == CpuMatmul::Int8 ? BlockDot::Int8 : BlockDot::Exact;
  // A product's packed copy from the stored blocks of its matrices, when the source keeps every
  // one in the same block format (a GGUF's Q8_0/Q4_0/Q4_1: streamed at 4.5-8.5 bits a weight, bit
  // for bit the float product on their dequantization; with int8 activations under
  // CpuMatmul::Int8); none when a matrix is not stored so or the panels cannot hold its blocks.
  auto from_blocks = [&](std::initializer_list<std::string> names, int in, int out) -> std::optional<PackedWeights> {
    std::optional<BlockType> type;
    std::vector<uint8_t> rows;
    for (const std::string& name : names) {
      auto b = w.block_rows(spec_named(specs, name));
      if (!b || (type && *type != b->type)) return std::nullopt;
      type = b->type;
      rows.insert(rows.end(), b->bytes.begin(), b->bytes.end());
    }
    try {
      return PackedWeights(*type, rows.data(), in, out, dot);
    } catch (const std::invalid_argument&) {  // blocks it cannot hold exactly
      return std::nullopt;
    }
  };
  const int h = c.hidden, qd = c.q_dim(), kvd = c.kv_dim(), mlp = c.mlp;
  const std::string lm_head_name = c.tied_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
  // Each layer's Q|K|V, O, gate|up and down from blocks, and the LM head's; read once, before the
  // float matrices are (or are not) loaded.
  std::vector<std::array<std::optional<PackedWeights>, 4>> blocks(static_cast<size_t>(c.layers));
  std::optional<PackedWeights> head_blocks;
  if (matmul != CpuMatmul::Reference) {
    for (int l = 0; l < c.layers; ++l) {
      const std::string p = fmt::format("model.layers.{}.", l);
      auto& b = blocks[static_cast<size_t>(l)];
      b[0] = from_blocks({p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"}, h,
                         qd + 2 * kvd);
      b[1] = from_blocks({p + "self_attn.o_proj.weight"}, qd, h);
      b[2] = from_blocks({p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"}, h, 2 * mlp);
      b[3] = from_blocks({p + "mlp.down_proj.weight"}, mlp, h);
    }
    head_blocks = from_blocks({lm_head_name}, h, c.vocab);
  }
  // Int8 panels take a pass of any row count, so when every product has them the float32
  // matrices would never be read: they are not loaded (SmolLM2-135M: 540 MB of 650), and an
  // adapter cannot be merged into them (merge_adapter says so; per-request adapters still run).
  float_matrices_ = matmul != CpuMatmul::Int8 || !head_blocks || !std::all_of(blocks.begin(), blocks.end(), [](const auto& b) {
                      return std::all_of(b.begin(), b.end(), [](const auto& p) { return p.has_value(); });
                    });
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    Layer& L = layers_[static_cast<size_t>(l)];
    load(p + "input_layernorm.weight", L.in_norm, false);
    load(p + "post_attention_layernorm.weight", L.post_norm, false);
    if (float_matrices_)
      for (auto [name, dst] : {std::pair{"self_attn.q_proj.weight", &L.wq},
                               {"self_attn.k_proj.weight", &L.wk},
                               {"self_attn.v_proj.weight", &L.wv},
                               {"self_attn.o_proj.weight", &L.wo},
                               {"mlp.gate_proj.weight", &L.wg},
                               {"mlp.up_proj.weight", &L.wu},
                               {"mlp.down_proj.weight", &L.wd}})
        load(p + name, *dst, true);
    if (c.qkv_bias) {
      load(p + "self_attn.q_proj.bias", L.bq, false);
      load(p + "self_attn.k_proj.bias", L.bk, false);
      load(p + "self_attn.v_proj.bias", L.bv, false);
    }
    if (c.qk_norm) {
      load(p + "self_attn.q_norm.weight", L.q_norm, false);
      load(p + "self_attn.k_norm.weight", L.k_norm, false);
    }
    if (c.o_bias) load(p + "self_attn.o_proj.bias", L.bo, false);
    if (c.mlp_bias) {
      load(p + "mlp.gate_proj.bias", L.bg, false);
      load(p + "mlp.up_proj.bias", L.bu, false);
      load(p + "mlp.down_proj.bias", L.bd, false);
    }
  }
  load("model.norm.weight", final_norm_, false);
  if (float_matrices_) load(lm_head_name, lm_head_, true);
  if (matmul == CpuMatmul::Reference) return;
  blas_ = matmul == CpuMatmul::Blas || matmul == CpuMatmul::Int8;
  // Each product's packed copy from its blocks where it has them, else the float matrix side by
  // side; `floats` makes the float copy (only when it is the one kept).
  auto pack = [&](std::optional<PackedWeights>& from, auto floats) { return from ? std::move(*from) : floats(); };
  auto as_is = [](const Buf& b, int in, int out) { return [&b, in, out] { return PackedWeights(b.data(), in, out); }; };
  for (int l = 0; l < c.layers; ++l) {
    Layer& L = layers_[static_cast<size_t>(l)];
    auto& b = blocks[static_cast<size_t>(l)];
    L.qkv = pack(b[0], [&] {
      const auto m = side_by_side(h, {{&L.wq, qd}, {&L.wk, kvd}, {&L.wv, kvd}});
      return PackedWeights(m.data(), h, qd + 2 * kvd);
    });
    L.o = pack(b[1], as_is(L.wo, qd, h));
    L.gate_up = pack(b[2], [&] {
      const auto m = side_by_side(h, {{&L.wg, mlp}, {&L.wu, mlp}});
      return PackedWeights(m.data(), h, 2 * mlp);
    });
    L.down = pack(b[3], as_is(L.wd, mlp, h));
    for (const PackedWeights* pw : {&L.qkv, &L.o, &L.gate_up, &L.down}) packed_bytes_ += static_cast<int64_t>(pw->bytes());
  }
  lm_head_packed_ = pack(head_blocks, as_is(lm_head_, h, c.vocab));
  packed_bytes_ += static_cast<int64_t>(lm_head_packed_.bytes());
}

int64_t CpuModel::streamed_weight_bytes(int rows) const {
  // Past 32 rows the float matrices are the float32 copies (SGEMM); int8 panels stay themselves.
  const bool int8_panels =
      !lm_head_packed_.empty() && lm_head_packed_.int8_dot() && std::all_of(layers_.begin(), layers_.end(), [](const Layer& L) {
        return L.qkv.int8_dot() && L.o.int8_dot() && L.gate_up.int8_dot() && L.down.int8_dot();
      });
  if (lm_head_packed_.empty() || (rows > 32 && !int8_panels)) return weight_bytes_ - static_cast<int64_t>(embed_.bytes());
  // The packed matrices, the norms and biases; the embedding rows a step reads are negligible.
  int64_t b = packed_bytes_;
  const int64_t matrices = static_cast<int64_t>(lm_head_.bytes()) + [&] {
    int64_t m = 0;
    for (const Layer& L : layers_)
      for (const Buf* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.wg, &L.wu, &L.wd}) m += static_cast<int64_t>(w->bytes());
    return m;
  }();
  b += weight_bytes_ - matrices - static_cast<int64_t>(embed_.bytes());
  return b;
}

}  // namespace ib::model::cpu_detail

namespace ib::model {

std::unique_ptr<Model> make_cpu_model(const ModelConfig& c, const WeightSource& w, CpuMatmul matmul) {
  return std::make_unique<cpu_detail::CpuModel>(c, w, matmul);
}

}  // namespace ib::model
