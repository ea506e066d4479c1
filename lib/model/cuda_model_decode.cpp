// The CUDA engine's decode step: its per-step inputs in one fixed device block that one copy
// refreshes, and the step captured once per batch size into a CUDA graph that later steps replay.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "model/cuda_model_internal.h"
#include "model_ops.h"
#include "numerics/cuda_check.h"
#include "numerics/cuda_handles.h"

namespace ib::model::cuda_detail {

void CudaModel::decode(const int* seqs, const int32_t* tokens, int batch, const StepOutput& out) {
  if (batch <= 0) throw std::invalid_argument("decode of an empty batch");
  if (batch > o_.max_batch)
    throw std::invalid_argument(fmt::format("decode batch {} is larger than max_batch {}", batch, o_.max_batch));
  check_tokens(tokens, batch, c_.vocab);
  for (int r = 0; r < batch; ++r) {
    no_tree(seqs[r], "decode");
    const Sequence& s = at(seqs[r]);
    if (s.length >= s.capacity) throw std::invalid_argument(fmt::format("sequence {} is full ({} tokens)", seqs[r], s.capacity));
    for (int r2 = 0; r2 < r; ++r2)
      if (seqs[r] == seqs[r2]) throw std::invalid_argument("a decode batch holds each sequence once");
  }

  // The step block: token ids, then the attention rows. The previous step's upload must have
  // left the pinned staging before it is rewritten.
  IB_CUDA_CHECK(cudaEventSynchronize(step_uploaded_.get()));
  unsigned char* host = step_host_->data();
  std::memcpy(host, tokens, sizeof(int32_t) * static_cast<size_t>(batch));
  auto* rows = reinterpret_cast<AttnRow*>(host + step_rows_offset_);
  for (int r = 0; r < batch; ++r) {
    Sequence& s = at(seqs[r]);
    rows[r].cache = s.cache.data();
    rows[r].capacity = s.capacity;
    rows[r].pos = s.length;
  }
  IB_CUDA_CHECK(cudaMemcpyAsync(step_dev_.data(), host, step_rows_offset_ + sizeof(AttnRow) * static_cast<size_t>(batch),
                                cudaMemcpyHostToDevice, stream_));
  IB_CUDA_CHECK(cudaEventRecord(step_uploaded_.get(), stream_));

  const int32_t* step_tokens = reinterpret_cast<const int32_t*>(step_dev_.data());
  const AttnRow* step_rows = reinterpret_cast<const AttnRow*>(step_dev_.data() + step_rows_offset_);
  auto graph = o_.cuda_graph ? graphs_.find(batch) : graphs_.end();
  if (graph != graphs_.end()) {
    IB_CUDA_CHECK(cudaGraphLaunch(graph->second->get(), stream_));
    for (int r = 0; r < batch; ++r) ++at(seqs[r]).length;
  } else {
    bind_cublas(stream_);
    forward_layers(stream_, batch, step_tokens, step_rows, nullptr);
    lm_head(stream_, 0, batch);
    for (int r = 0; r < batch; ++r) ++at(seqs[r]).length;  // this step is complete even if the capture below throws
    // The first step of a batch size runs directly (it also loads every kernel and lets
    // cuBLAS settle its choices); then the same sequence is captured for the next steps.
    if (o_.cuda_graph) capture(batch, step_tokens, step_rows);
  }

  if (out.logits || out.next) {
    emit(out, 0, batch);
    IB_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
}

// Records the decode step of `batch` rows (reading the fixed step block) into a graph.
// Captured on a private stream: the caller's stream may be the legacy default stream, which
// cannot be captured; the graph is then launched on the caller's stream.
void CudaModel::capture(int batch, const int32_t* step_tokens, const AttnRow* step_rows) {
  cudaStream_t cs = capture_stream_.get();
  bind_cublas(cs);
  IB_CUDA_CHECK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal));
  try {
    forward_layers(cs, batch, step_tokens, step_rows, nullptr);
    lm_head(cs, 0, batch);
  } catch (...) {
    cudaGraph_t broken = nullptr;
    (void)cudaStreamEndCapture(cs, &broken);
    if (broken) (void)cudaGraphDestroy(broken);
    (void)cudaGetLastError();
    bind_cublas(stream_);
    throw;
  }
  cudaGraph_t g = nullptr;
  IB_CUDA_CHECK(cudaStreamEndCapture(cs, &g));
  OwnedGraph graph(g);
  cudaGraphExec_t e = nullptr;
  IB_CUDA_CHECK(cudaGraphInstantiate(&e, graph.get(), 0));
  graphs_.emplace(batch, std::make_unique<OwnedGraphExec>(e));
  bind_cublas(stream_);
}

}  // namespace ib::model::cuda_detail
