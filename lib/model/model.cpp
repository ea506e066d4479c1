// The Model interface's default members (what an engine does not support throws; batched
// prefill as one prefill per sequence), the Matmul names, and make_cuda_model without CUDA:
// none belongs to one engine, and all are built with or without the CUDA engine.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/errors.h"
#include "model/model.h"

namespace ib::model {

void Model::copy_cache(int, int, int, int) { throw std::runtime_error("copy_cache is not implemented by this backend"); }
int Model::share_prefix(int src, int length, int capacity) {
  const int seq = new_sequence(capacity);
  try {
    copy_cache(src, seq, 0, length);
  } catch (...) {
    release(seq);
    throw;
  }
  return seq;
}
void Model::enable_paged_kv(int, int) { throw std::runtime_error("paged KV is not supported by this engine"); }
int Model::blocks_needed(int, int) const { return 0; }
SwappedKv Model::swap_out(int) { throw std::runtime_error("swapping KV blocks to host memory is not supported by this engine"); }
int Model::swap_in(const SwappedKv&, int) {
  throw std::runtime_error("swapping KV blocks to host memory is not supported by this engine");
}
void Model::prefill_batch(const int* seqs, const int* counts, int n, const int32_t* tokens, const StepOutput& out,
                          bool last_only) {
  const std::vector<int> rows =
      last_only ? std::vector<int>(static_cast<size_t>(std::max(n, 0)), 1) : std::vector<int>(counts, counts + std::max(n, 0));
  prefill_batch_rows(seqs, counts, n, tokens, out, rows.data());
}
void Model::prefill_batch_rows(const int* seqs, const int* counts, int n, const int32_t* tokens, const StepOutput& out,
                               const int* logit_rows) {
  const size_t V = static_cast<size_t>(config().vocab);
  int row = 0, out_row = 0;
  for (int i = 0; i < n; ++i) {
    if (logit_rows[i] < 1 || logit_rows[i] > counts[i])
      throw std::invalid_argument("prefill_batch: a sequence's logit rows must be 1 to its token count");
    StepOutput o = out;
    if (o.logits) o.logits = out.logits + static_cast<size_t>(out_row) * V;
    if (o.next) o.next = out.next + out_row;
    prefill(seqs[i], tokens + row, counts[i], logit_rows[i], o);
    row += counts[i];
    out_row += logit_rows[i];
  }
}
void Model::prefill_tree(int, const int32_t*, const int32_t*, int, const StepOutput&) {
  throw std::runtime_error("prefill_tree (tree verification) is not supported by this engine");
}
void Model::keep_tree_path(int, const std::vector<int>&) {
  throw std::runtime_error("keep_tree_path (tree verification) is not supported by this engine");
}

const std::vector<std::string>& matmul_names() {
  static const std::vector<std::string> names = {"cublas", "gemv"};
  return names;
}
const char* to_string(Matmul m) { return matmul_names()[static_cast<size_t>(m)].c_str(); }
Matmul parse_matmul(const std::string& name) {
  const auto& names = matmul_names();
  for (size_t i = 0; i < names.size(); ++i)
    if (name == names[i]) return static_cast<Matmul>(i);
  throw InputError(fmt::format("matmul: '{}' is not one of {}", name, fmt::join(names, ", ")));
}

const std::vector<std::string>& cpu_matmul_names() {
  static const std::vector<std::string> names = {"reference", "packed", "blas", "int8"};
  return names;
}
const char* to_string(CpuMatmul m) { return cpu_matmul_names()[static_cast<size_t>(m)].c_str(); }
CpuMatmul parse_cpu_matmul(const std::string& name) {
  const auto& names = cpu_matmul_names();
  for (size_t i = 0; i < names.size(); ++i)
    if (name == names[i]) return static_cast<CpuMatmul>(i);
  throw InputError(fmt::format("cpu_matmul: '{}' is not one of {}", name, fmt::join(names, ", ")));
}

#if !defined(INFER_BENCH_HAVE_CUDA_MODEL)
std::unique_ptr<Model> make_cuda_model(const ModelConfig&, const WeightSource&, const EngineOptions&, void*) {
  throw InputError("this infer-bench was built without the CUDA engine");
}
#endif

}  // namespace ib::model
