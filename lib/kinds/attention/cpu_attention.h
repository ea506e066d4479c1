// The public base of the CPU variants of `attention` (cpu_attention.cpp's reference, standard and
// flash; a new CPU variant derives from it in a file of its own): the fp32 inputs rounded as the
// GPU sees them, the output checked against float64 attention, the extra memory it used.
#pragma once

#include <limits>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/memory.h"
#include "core/variant.h"
#include "kinds/attention/attention_keys.h"
#include "kinds/attention/problem.h"
#include "kinds/attention/variant_common.h"
#include "numerics/parallel.h"

namespace ib::attention {

inline constexpr double kCpuTolerance = 1e-4;  // fp32 arithmetic on rounded inputs vs float64

class CpuAttention : public Variant {
 public:
  std::string unsupported(const Point& p) const override { return shape_problem(attention_shape(p)); }
  void prepare(const Point& p, BackendRuntime& rt, uint64_t seed) override {
    const AttentionKeys params = attention_keys().read(p);
    s_ = attention_shape(params);
    in_ = {seed, s_.dtype};
    seed_ = seed;
    score_table_ = params.score_table;
    q_.allocate(static_cast<size_t>(s_.q_elems()), "Q (fp32)");
    k_.allocate(static_cast<size_t>(s_.kv_elems()), "K (fp32)");
    v_.allocate(static_cast<size_t>(s_.kv_elems()), "V (fp32)");
    o_.allocate(static_cast<size_t>(s_.q_elems()), "O (fp32)");
    fill(q_, [&](int64_t i) { return in_.q(i); });
    fill(k_, [&](int64_t i) { return in_.k(i); });
    fill(v_, [&](int64_t i) { return in_.v(i); });
    mem_ = &rt.memory();
    io_bytes_ = mem_->current();
    allocate_workspace();
  }
  Validation validate(BackendRuntime& rt) override {
    std::fill(o_.begin(), o_.end(), std::numeric_limits<float>::quiet_NaN());
    run(rt);
    const int d = s_.head_dim;
    return check_output(
        s_, in_, seed_, [&](int64_t r, int c) { return o_[static_cast<size_t>(r * d + c)]; }, tolerance());
  }
  std::vector<Metric> metrics() const override {
    std::vector<Metric> m = {{"extra mem", static_cast<double>(mem_->peak() - io_bytes_) / (1 << 20), "MiB"}};
    if (score_table_) append_score_table(s_, m);
    return m;
  }

 protected:
  virtual void allocate_workspace() {}
  virtual double tolerance() const { return kCpuTolerance; }
  template <class F>
  static void fill(HostBuffer<float>& b, F&& value) {
    parallel_for(b.size(), [&](size_t lo, size_t hi) {
      for (size_t i = lo; i < hi; ++i) b[i] = value(static_cast<int64_t>(i));
    });
  }
  const float* q_rows(int b, int h) const { return q_.data() + ((int64_t{b} * s_.heads + h) * s_.seq_q) * s_.head_dim; }
  const float* kv_rows(const HostBuffer<float>& t, int b, int h) const {
    return t.data() + ((int64_t{b} * s_.kv_heads + h / s_.group()) * s_.seq_k) * s_.head_dim;
  }
  float* o_rows(int b, int h) { return o_.data() + ((int64_t{b} * s_.heads + h) * s_.seq_q) * s_.head_dim; }

  AttentionShape s_;
  AttentionInputs in_;
  uint64_t seed_ = 0;
  bool score_table_ = false;
  HostBuffer<float> q_, k_, v_, o_;
  MemoryTracker* mem_ = nullptr;
  int64_t io_bytes_ = 0;
};

}  // namespace ib::attention
