// The CUDA engine's weights: each tensor rounded to bf16 (or filled on the device for random
// weights) and uploaded, with Q/K/V and gate/up packed into one matrix each for their fused GEMMs.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "fill.h"
#include "model/cuda_model_internal.h"
#include "model_ops.h"
#include "numerics/cuda_check.h"
#include "numerics/dtype.h"
#include "numerics/half.h"

namespace ib::model::cuda_detail {

void CudaModel::load_weights(const WeightSource& w) {
  const auto specs = tensor_specs(c_);
  std::vector<float> host_f;
  std::vector<uint16_t> host_b;
  auto find = [&](const std::string& name) -> const TensorSpec& {
    for (const auto& s : specs)
      if (s.name == name) return s;
    throw std::logic_error("no tensor " + name);
  };
  // Tensor `name` (expected_elems elements) into dst[0 .. expected_elems).
  auto put = [&](const std::string& name, uint16_t* dst, int64_t expected_elems) {
    const TensorSpec& s = find(name);
    if (s.elems() != expected_elems)
      throw std::logic_error(fmt::format("tensor {} has {} elements, the model needs {}", name, s.elems(), expected_elems));
    const size_t n = static_cast<size_t>(expected_elems);
    if (w.is_random()) {
      if (s.is_norm())
        launch_fill_u16(dst, n, 0x3F80, stream_);  // exactly 1.0
      else
        launch_fill_random(dst, n, DType::BF16, w.tensor_seed(s), w.tensor_scale(s), stream_);
      return;
    }
    host_f.resize(n);
    host_b.resize(n);
    w.read(s, host_f.data());
    for (size_t i = 0; i < n; ++i) host_b[i] = float_to_bf16_bits(host_f[i]);
    IB_CUDA_CHECK(cudaMemcpyAsync(dst, host_b.data(), n * sizeof(uint16_t), cudaMemcpyHostToDevice, stream_));
    IB_CUDA_CHECK(cudaStreamSynchronize(stream_));  // host_b is reused by the next tensor
  };
  auto alloc = [&](Bf16Buffer& b, int64_t elems, const std::string& what) {
    b.allocate(static_cast<size_t>(elems), what);
    weight_bytes_ += static_cast<int64_t>(b.bytes());
  };
  const int64_t h = c_.hidden, qd = c_.q_dim(), kvd = c_.kv_dim(), mlp = c_.mlp, vocab = c_.vocab;

  alloc(embed_, vocab * h, "embedding");
  put("model.embed_tokens.weight", embed_.data(), vocab * h);
  layers_.resize(static_cast<size_t>(c_.layers));
  for (int l = 0; l < c_.layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    LayerWeights& L = layers_[static_cast<size_t>(l)];
    alloc(L.in_norm, h, p + "input_layernorm");
    put(p + "input_layernorm.weight", L.in_norm.data(), h);
    alloc(L.post_norm, h, p + "post_attention_layernorm");
    put(p + "post_attention_layernorm.weight", L.post_norm.data(), h);
    alloc(L.wqkv, (qd + 2 * kvd) * h, p + "qkv_proj");
    put(p + "self_attn.q_proj.weight", L.wqkv.data(), qd * h);
    put(p + "self_attn.k_proj.weight", L.wqkv.data() + qd * h, kvd * h);
    put(p + "self_attn.v_proj.weight", L.wqkv.data() + (qd + kvd) * h, kvd * h);
    if (c_.qkv_bias) {
      alloc(L.bqkv, qd + 2 * kvd, p + "qkv_bias");
      put(p + "self_attn.q_proj.bias", L.bqkv.data(), qd);
      put(p + "self_attn.k_proj.bias", L.bqkv.data() + qd, kvd);
      put(p + "self_attn.v_proj.bias", L.bqkv.data() + qd + kvd, kvd);
    }
    if (c_.qk_norm) {
      alloc(L.q_norm, c_.head_dim, p + "q_norm");
      put(p + "self_attn.q_norm.weight", L.q_norm.data(), c_.head_dim);
      alloc(L.k_norm, c_.head_dim, p + "k_norm");
      put(p + "self_attn.k_norm.weight", L.k_norm.data(), c_.head_dim);
    }
    alloc(L.wo, h * qd, p + "o_proj");
    put(p + "self_attn.o_proj.weight", L.wo.data(), h * qd);
    if (c_.o_bias) {
      alloc(L.bo, h, p + "o_proj_bias");
      put(p + "self_attn.o_proj.bias", L.bo.data(), h);
    }
    alloc(L.wgu, 2 * mlp * h, p + "gate_up_proj");
    put(p + "mlp.gate_proj.weight", L.wgu.data(), mlp * h);
    put(p + "mlp.up_proj.weight", L.wgu.data() + mlp * h, mlp * h);
    alloc(L.wd, h * mlp, p + "down_proj");
    put(p + "mlp.down_proj.weight", L.wd.data(), h * mlp);
    if (c_.mlp_bias) {
      alloc(L.bgu, 2 * mlp, p + "gate_up_bias");
      put(p + "mlp.gate_proj.bias", L.bgu.data(), mlp);
      put(p + "mlp.up_proj.bias", L.bgu.data() + mlp, mlp);
      alloc(L.bd, h, p + "down_bias");
      put(p + "mlp.down_proj.bias", L.bd.data(), h);
    }
  }
  alloc(final_norm_, h, "model.norm");
  put("model.norm.weight", final_norm_.data(), h);
  if (!c_.tied_embeddings) {
    alloc(lm_head_, vocab * h, "lm_head");
    put("lm_head.weight", lm_head_.data(), vocab * h);
  }
}

}  // namespace ib::model::cuda_detail
