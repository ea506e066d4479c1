// The CUDA engine's prefill passes: one sequence's tokens in chunks of max_prefill rows, and
// several sequences' tokens in one pass (batched speculative verification).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "model/cuda_model_internal.h"
#include "model_ops.h"
#include "numerics/cuda_check.h"

namespace ib::model::cuda_detail {

void CudaModel::prefill(int seq, const int32_t* tokens, int n, int n_logits, const StepOutput& out) {
  if (n <= 0) throw std::invalid_argument("prefill of no tokens");
  n_logits = std::clamp(n_logits, 1, n);
  check_tokens(tokens, n, c_.vocab);
  no_tree(seq, "prefill");
  {
    const Sequence& s = at(seq);
    if (s.length + n > s.capacity) throw std::invalid_argument(fmt::format("sequence {} is full ({} tokens)", seq, s.capacity));
  }
  const bool want = out.logits || out.next;
  const int first_out = n - n_logits;
  bind_cublas(stream_);
  for (int done = 0; done < n;) {
    // Chunks of max_prefill tokens; each attends to everything cached before it, which the
    // bottom-right causal alignment (query i sees keys <= i + seq_k − seq_q) makes exact.
    const int rows = std::min(o_.max_prefill, n - done);
    Sequence& s = at(seq);
    const int start = s.length;
    IB_CUDA_CHECK(cudaMemcpyAsync(prefill_tokens_.data(), tokens + done, sizeof(int32_t) * static_cast<size_t>(rows),
                                  cudaMemcpyHostToDevice, stream_));
    launch_fill_attn_rows(prefill_rows_.data(), rows, s.cache.data(), s.capacity, start, stream_);
    PrefillCache pc{s.cache.data(), s.capacity, start};
    forward_layers(stream_, rows, prefill_tokens_.data(), prefill_rows_.data(), &pc);
    s.length = start + rows;
    if (want) {
      // This chunk's rows among the last n_logits, through the LM head max_batch rows at a time.
      for (int r = std::max(first_out, done); r < done + rows;) {
        const int count = std::min(o_.max_batch, done + rows - r);
        lm_head(stream_, r - done, count);
        emit(out, r - first_out, count);
        r += count;
      }
    }
    done += rows;
  }
  if (want) IB_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

// One pass over every sequence's rows: the row table gives each row its cache and position, K/V
// are appended for all rows before attention, and the split-K kernel attends each row to its
// own sequence up to its position. More rows than max_prefill: one prefill per sequence.
void CudaModel::prefill_batch_rows(const int* seqs, const int* counts, int n, const int32_t* tokens, const StepOutput& out,
                                   const int* logit_rows) {
  int total = 0, out_total = 0;
  for (int i = 0; i < n; ++i) {
    if (counts[i] <= 0) throw std::invalid_argument("prefill_batch: a sequence with no tokens");
    if (logit_rows[i] < 1 || logit_rows[i] > counts[i])
      throw std::invalid_argument("prefill_batch: a sequence's logit rows must be 1 to its token count");
    out_total += logit_rows[i];
    no_tree(seqs[i], "prefill_batch");
    const Sequence& s = at(seqs[i]);
    if (s.length + counts[i] > s.capacity)
      throw std::invalid_argument(fmt::format("sequence {} is full ({} tokens)", seqs[i], s.capacity));
    for (int i2 = 0; i2 < i; ++i2)
      if (seqs[i] == seqs[i2]) throw std::invalid_argument("prefill_batch holds each sequence once");
    total += counts[i];
  }
  if (total > o_.max_prefill) return Model::prefill_batch_rows(seqs, counts, n, tokens, out, logit_rows);
  check_tokens(tokens, total, c_.vocab);
  std::vector<AttnRow> rows;
  for (int i = 0; i < n; ++i) {
    Sequence& s = at(seqs[i]);
    for (int j = 0; j < counts[i]; ++j) rows.push_back(AttnRow{s.cache.data(), s.capacity, s.length + j});
  }
  // Pageable sources: the copies have read them when cudaMemcpyAsync returns.
  IB_CUDA_CHECK(cudaMemcpyAsync(prefill_tokens_.data(), tokens, sizeof(int32_t) * static_cast<size_t>(total),
                                cudaMemcpyHostToDevice, stream_));
  IB_CUDA_CHECK(
      cudaMemcpyAsync(prefill_rows_.data(), rows.data(), sizeof(AttnRow) * rows.size(), cudaMemcpyHostToDevice, stream_));
  bind_cublas(stream_);
  forward_layers(stream_, total, prefill_tokens_.data(), prefill_rows_.data(), nullptr);
  for (int i = 0; i < n; ++i) at(seqs[i]).length += counts[i];
  if (out.logits || out.next) {
    if (out_total < total) {
      // Each sequence's last logit_rows[i] residual rows to the next output rows, in order: a
      // destination is never past its source and both increase, so no row is overwritten before
      // it is copied.
      const size_t h = static_cast<size_t>(c_.hidden);
      for (int i = 0, end = 0, dst = 0; i < n; ++i) {
        end += counts[i];
        for (int src = end - logit_rows[i]; src < end; ++src, ++dst)
          if (src != dst)
            IB_CUDA_CHECK(cudaMemcpyAsync(x_.data() + static_cast<size_t>(dst) * h, x_.data() + static_cast<size_t>(src) * h,
                                          sizeof(float) * h, cudaMemcpyDeviceToDevice, stream_));
      }
    }
    head_rows(out, out_total);
    IB_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
}

}  // namespace ib::model::cuda_detail
