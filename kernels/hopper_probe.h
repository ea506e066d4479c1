// Staged checks of the Hopper building blocks flash3 is made of (kernels/hopper.cuh), for the GPU
// tests: each probe runs one block on device buffers and leaves raw results for the host to
// compare, so a failure points at one layer — the wgmma descriptors and fragment layouts, the
// TMA copy into the swizzled panels with its mbarrier, or the full kernel.
#pragma once

#include <cstdint>
#include <string>

#include <cuda_runtime_api.h>

namespace ib {

// "" when the probes can run here (an sm_90 device, built for sm_90a), else why not.
std::string hopper_probe_unsupported();

enum class WgmmaProbe {
  // c[64][128] = A·Bᵀ, A = rows a_row0 .. a_row0 + 63 of a[128][d], B = b[128][d]: both written
  // into shared-memory panels by plain stores, then flash3's warpgroup_scores (wgmma SS, K-major
  // descriptors), accumulators written out by their documented layout.
  Scores,
  // c[64][d] = P·V, P = a[64][128] loaded straight into A-fragment registers by the documented
  // layout, V = v[128][d] in panels: flash3's warpgroup_pv (wgmma RS, MN-major descriptor).
  Pv,
  // c[64][d] = round(A·Bᵀ)·V: Scores, then flash3's scores_to_a_fragments turns the accumulators
  // into P (rounded to the element type) in registers, then warpgroup_pv.
  Chain,
};

// One warpgroup; a, b, v are device arrays in the element type (bf16, or fp16 when `fp16`), c
// device floats. head_dim 64 or 128; a_row0 0 or 64 (the two consumer warpgroups' Q rows).
void launch_wgmma_probe(WgmmaProbe which, int head_dim, bool fp16, int a_row0, const void* a, const void* b, const void* v,
                        float* c, cudaStream_t stream);

// Where one TMA box of 128 rows starts: row, head and batch coordinates (rows past `rows` and
// negative ones arrive as zeros).
struct TmaProbeTile {
  int row0 = 0, head = 0, batch = 0;
};
constexpr int kTmaProbeMaxTiles = 4;

// Loads n_tiles (<= 4) tiles of 128 rows × head_dim of the tensor [batch][heads][rows][head_dim]
// at src (head_stride and batch_stride in elements) one after the other into the same shared
// panels through flash3's tensor map and TMA path, all completing on one mbarrier whose phase
// flips per tile, and copies each back out through panel_offset: out[tile][128][head_dim].
void launch_tma_probe(const void* src, bool fp16, int head_dim, int rows, int heads, int batch, int64_t head_stride,
                      int64_t batch_stride, const TmaProbeTile* tiles, int n_tiles, uint16_t* out, cudaStream_t stream);

}  // namespace ib
