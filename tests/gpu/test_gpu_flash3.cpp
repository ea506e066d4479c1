// flash3 (Hopper: TMA, mbarriers, wgmma, warp specialisation) in stages, so that one short GPU
// session can tell from a log which layer is wrong. Run them in this order, each stage in its own
// process (a kernel that traps, e.g. flash3's mbarrier hang guard, leaves the CUDA context
// unusable for every later test of the process):
//   Flash3Stage1Wgmma.*   wgmma alone: operands written into the 128-byte-swizzled panels by plain
//                         stores, flash3's own descriptor and GEMM functions, accumulators read out
//                         by the documented layout; small-integer data, so products are exact.
//   Flash3Stage2Tma.*     TMA alone: flash3's tensor maps and box loads into the panels through
//                         one mbarrier whose phase flips, read back through panel_offset.
//   Flash3Stage3Kernel.*  the whole kernel, launched directly, vs the float64 reference on small
//                         shapes: the serial schedule first (no softmax / P·V overlap), then the
//                         overlapped one; the first wrong element and a map of wrong rows on failure.
//   Flash3Stage4Runner.*  flash3 through the runner like GpuAttention's flash2 tests (poisoned
//                         output, the correctness gate of every row).
// Every test skips itself (saying why) without an sm_90 GPU.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "../common/run_kind.h"
#include "device_vectors.h"
#include "require_gpu.h"
#include "test_stream.h"

#include "attention.h"
#include "core/cuda_memory.h"
#include "fill.h"
#include "hopper_probe.h"
#include "kinds/attention/cuda_params.h"
#include "kinds/attention/problem.h"
#include "numerics/cuda_check.h"
#include "numerics/half.h"
#include "numerics/parallel.h"

namespace ib {
namespace {

using ib::testing::expect_all_ok;
using ib::testing::TestStream;
using ib::testing::to_device;
using ib::testing::to_host;

#define REQUIRE_HOPPER()                                                                             \
  do {                                                                                               \
    REQUIRE_GPU();                                                                                   \
    if (const std::string why = ::ib::hopper_probe_unsupported(); !why.empty()) GTEST_SKIP() << why; \
  } while (0)

uint16_t to_bits(float x, bool fp16) { return fp16 ? float_to_fp16_bits(x) : float_to_bf16_bits(x); }
float from_bits(uint16_t b, bool fp16) { return fp16 ? fp16_bits_to_float(b) : bf16_bits_to_float(b); }

// Waits for the stream; a failure (a trap: bad address, or a wait past the hang guard) says so.
void sync_or_fail(cudaStream_t s, const std::string& what) {
  const cudaError_t err = cudaStreamSynchronize(s);
  if (err != cudaSuccess)
    FAIL() << what << ": " << cudaGetErrorString(err)
           << " (a trap here is most likely an mbarrier wait that never completed: flash3's hang guard; the CUDA context "
              "is now unusable, so later tests of this process fail too — run the stages as separate processes)";
}

// "" when got matches want within tol everywhere, else the count, the first wrong element and a
// map of rows × 8-column blocks ('X': some element of the block is wrong, '.': all right), the
// shape a layout bug leaves.
std::string compare_tile(const std::vector<float>& got, const std::vector<double>& want, int rows, int cols, double tol) {
  int64_t bad = 0, first = -1;
  std::vector<std::string> map(static_cast<size_t>(rows), std::string(static_cast<size_t>(cols / 8), '.'));
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r) * static_cast<size_t>(cols) + static_cast<size_t>(c);
      if (!(std::fabs(static_cast<double>(got[i]) - want[i]) <= tol)) {  // NaN counts as wrong
        if (bad++ == 0) first = static_cast<int64_t>(i);
        map[static_cast<size_t>(r)][static_cast<size_t>(c / 8)] = 'X';
      }
    }
  if (bad == 0) return {};
  std::string s =
      fmt::format("{} of {} elements wrong (tolerance {}); first at row {} col {}: got {} want {}\n", bad, int64_t{rows} * cols,
                  tol, first / cols, first % cols, got[static_cast<size_t>(first)], want[static_cast<size_t>(first)]);
  s += "map (row: 8-column blocks, X wrong):\n";
  for (int r = 0; r < rows; ++r) s += fmt::format("{:4}: {}\n", r, map[static_cast<size_t>(r)]);
  return s;
}

// ================= stage 1: wgmma =================

// Values k/4 for k in -3..3: exact in bf16 and fp16, products and sums of up to 128 of them
// exact in fp32, so a right GEMM matches to the last bit and a wrong layout cannot hide.
std::vector<uint16_t> small_ints(size_t n, bool fp16, uint32_t seed, std::vector<float>* values) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(-3, 3);
  std::vector<uint16_t> bits(n);
  values->resize(n);
  for (size_t i = 0; i < n; ++i) {
    const float x = static_cast<float>(dist(gen)) / 4.0f;
    (*values)[i] = x;
    bits[i] = to_bits(x, fp16);
  }
  return bits;
}

void check_wgmma(WgmmaProbe which, int d, bool fp16, int a_row0) {
  constexpr int kRows = 128;
  std::vector<float> af, bf, vf;
  // a holds the Q tile (128 × d) or, for Pv, P (64 × 128): 128 × max(d, 128) covers both.
  const auto a = small_ints(static_cast<size_t>(kRows) * 128, fp16, 1, &af);
  const auto b = small_ints(static_cast<size_t>(kRows) * static_cast<size_t>(d), fp16, 2, &bf);
  const auto v = small_ints(static_cast<size_t>(kRows) * static_cast<size_t>(d), fp16, 3, &vf);
  const int cols = which == WgmmaProbe::Scores ? kRows : d;
  std::vector<double> want(static_cast<size_t>(64 * cols), 0.0);
  auto A = [&](int r, int k) {
    return static_cast<double>(af[static_cast<size_t>(r * (which == WgmmaProbe::Pv ? kRows : d) + k)]);
  };
  auto B = [&](int n, int k) { return static_cast<double>(bf[static_cast<size_t>(n * d + k)]); };
  auto V = [&](int k, int n) { return static_cast<double>(vf[static_cast<size_t>(k * d + n)]); };
  if (which == WgmmaProbe::Pv) {
    for (int r = 0; r < 64; ++r)
      for (int n = 0; n < d; ++n)
        for (int k = 0; k < kRows; ++k) want[static_cast<size_t>(r * d + n)] += A(r, k) * V(k, n);
  } else {
    std::vector<double> s(static_cast<size_t>(64 * kRows), 0.0);
    for (int r = 0; r < 64; ++r)
      for (int n = 0; n < kRows; ++n)
        for (int k = 0; k < d; ++k) s[static_cast<size_t>(r * kRows + n)] += A(a_row0 + r, k) * B(n, k);
    if (which == WgmmaProbe::Scores) {
      want = s;
    } else {  // P = S rounded to the element type, then P·V
      for (double& x : s) x = from_bits(to_bits(static_cast<float>(x), fp16), fp16);
      for (int r = 0; r < 64; ++r)
        for (int n = 0; n < d; ++n)
          for (int k = 0; k < kRows; ++k) want[static_cast<size_t>(r * d + n)] += s[static_cast<size_t>(r * kRows + k)] * V(k, n);
    }
  }
  auto da = to_device(a), db = to_device(b), dv = to_device(v);
  DeviceBuffer<float> dc(static_cast<size_t>(64 * cols), "C");
  IB_CUDA_CHECK(cudaMemset(dc.data(), 0xFF, dc.bytes()));  // NaN: an element the probe does not write shows
  TestStream st;
  launch_wgmma_probe(which, d, fp16, a_row0, da.data(), db.data(), dv.data(), dc.data(), st.get());
  sync_or_fail(st.get(), "wgmma probe");
  if (::testing::Test::HasFatalFailure()) return;
  const std::string why = compare_tile(to_host(dc), want, 64, cols, 1e-3);
  EXPECT_TRUE(why.empty()) << "head_dim " << d << (fp16 ? " fp16" : " bf16") << " a_row0 " << a_row0 << ": " << why;
}

// head_dim 64 and 128; the A rows of either consumer warpgroup (Pv takes P from registers).
void check_wgmma_all(WgmmaProbe which, bool fp16) {
  for (int d : {64, 128})
    for (int row0 : {0, 64})
      if (which != WgmmaProbe::Pv || row0 == 0) check_wgmma(which, d, fp16, row0);
}

// S = Q·Kᵀ: wgmma SS, both operands K-major, 128B-swizzle descriptors advanced by 32 bytes per
// k16 slice inside a 64-column panel and by one panel every 4 slices; the accumulator layout.
TEST(Flash3Stage1Wgmma, ScoresSharedShared) {
  REQUIRE_HOPPER();
  check_wgmma_all(WgmmaProbe::Scores, false);
}

// O = P·V: wgmma RS, P from registers by the documented A-fragment layout, V MN-major (LBO =
// panel stride for the second 64 columns, SBO = 1024 bytes between 8-key groups), imm-trans-b.
TEST(Flash3Stage1Wgmma, OutputRegisterShared) {
  REQUIRE_HOPPER();
  check_wgmma_all(WgmmaProbe::Pv, false);
}

// The FA3 trick: S's accumulators become P's A fragments in place (after rounding), then P·V.
// Passing the two tests above but failing here points at scores_to_a_fragments.
TEST(Flash3Stage1Wgmma, ScoresToProbabilitiesChain) {
  REQUIRE_HOPPER();
  check_wgmma_all(WgmmaProbe::Chain, false);
}

TEST(Flash3Stage1Wgmma, Fp16) {
  REQUIRE_HOPPER();
  for (WgmmaProbe which : {WgmmaProbe::Scores, WgmmaProbe::Pv, WgmmaProbe::Chain}) check_wgmma_all(which, true);
}

// ================= stage 2: TMA + mbarrier =================

void check_tma(int d, bool fp16) {
  constexpr int kBoxRows = 128;
  // A KV-cache-like view: 300 valid rows of a head with room for 320, heads and batches padded.
  const int rows = 300, heads = 3, batch = 2;
  const int64_t head_stride = int64_t{320} * d, batch_stride = heads * head_stride + 64 * d;
  const size_t total = static_cast<size_t>(batch * batch_stride);
  std::vector<uint16_t> src(total);
  std::mt19937 gen(7);
  for (auto& x : src) {
    x = static_cast<uint16_t>(gen());
    const uint16_t exp_mask = fp16 ? 0x7C00 : 0x7F80;
    if ((x & exp_mask) == exp_mask) x = static_cast<uint16_t>(x & ~0x0400);  // finite values only
    if (x == 0) x = 1;                                                       // zero is what out-of-range rows read
  }
  const std::vector<TmaProbeTile> tiles = {{0, 1, 0}, {128, 2, 1}, {256, 0, 1}, {100, 2, 0}};  // the third runs past row 300
  auto dsrc = to_device(src);
  DeviceBuffer<uint16_t> dout(tiles.size() * kBoxRows * static_cast<size_t>(d), "out");
  IB_CUDA_CHECK(cudaMemset(dout.data(), 0xFF, dout.bytes()));
  TestStream st;
  launch_tma_probe(dsrc.data(), fp16, d, rows, heads, batch, head_stride, batch_stride, tiles.data(),
                   static_cast<int>(tiles.size()), dout.data(), st.get());
  sync_or_fail(st.get(), "TMA probe");
  if (::testing::Test::HasFatalFailure()) return;
  const auto out = to_host(dout);
  for (size_t t = 0; t < tiles.size(); ++t) {
    std::vector<float> got(static_cast<size_t>(kBoxRows * d));
    std::vector<double> want(got.size());
    for (int r = 0; r < kBoxRows; ++r)
      for (int c = 0; c < d; ++c) {
        const size_t i = static_cast<size_t>(r * d + c);
        got[i] = static_cast<float>(out[t * kBoxRows * static_cast<size_t>(d) + i]);  // raw bits, compared exactly
        const int row = tiles[t].row0 + r;
        want[i] = row < rows ? static_cast<double>(src[static_cast<size_t>(tiles[t].batch * batch_stride +
                                                                           tiles[t].head * head_stride + int64_t{row} * d + c)])
                             : 0.0;
      }
    const std::string why = compare_tile(got, want, kBoxRows, d, 0.0);
    EXPECT_TRUE(why.empty()) << "head_dim " << d << " tile " << t << " (row0 " << tiles[t].row0 << ", head " << tiles[t].head
                             << ", batch " << tiles[t].batch << ", mbarrier phase " << (t & 1)
                             << "), values are raw bit patterns: " << why;
  }
}

// A tile's rows past the tensor's end arrive as zeros, heads and batches are found through
// their strides, the 128-byte swizzle is the one panel_offset undoes, and one mbarrier serves
// four loads in a row (phase parity 0, 1, 0, 1).
TEST(Flash3Stage2Tma, TilesIntoSwizzledPanels) {
  REQUIRE_HOPPER();
  for (int d : {64, 128}) check_tma(d, false);
  check_tma(128, true);
}

// ================= stage 3: the kernel, launched directly =================

struct Flash3Case {
  attention::AttentionShape shape;
  int kv_capacity = 0;  // > seq_k: K and V are views into a cache of this many rows per head
  std::string label() const {
    return shape.label() + (kv_capacity ? fmt::format(", K/V in a cache of {} rows per head", kv_capacity) : "");
  }
};

// Arguments in AttentionShape's order.
Flash3Case make_case(int batch, int heads, int kv_heads, int d, int seq_q, int seq_k, bool causal, int window = 0,
                     bool fp16 = false, int kv_capacity = 0) {
  return {attention::AttentionShape{batch, heads, kv_heads, d, seq_q, seq_k, causal, window, fp16 ? DType::F16 : DType::BF16},
          kv_capacity};
}

// Runs flash3 once on the case's inputs (the counter-based values the runner and the reference
// use) and returns the output's bits, or fails the test (empty result).
std::vector<uint16_t> run_case(const Flash3Case& c, Flash3Schedule schedule, uint64_t seed) {
  const attention::AttentionShape& s = c.shape;
  TestStream st;
  DeviceBuffer<uint16_t> q(static_cast<size_t>(s.q_elems()), "Q"), k(static_cast<size_t>(s.kv_elems()), "K"),
      v(static_cast<size_t>(s.kv_elems()), "V"), o(static_cast<size_t>(s.q_elems()), "O");
  launch_fill_random(q.data(), q.size(), s.dtype, seed, attention::AttentionInputs::kQScale, st.get());
  launch_fill_random(k.data(), k.size(), s.dtype, seed + 1, attention::AttentionInputs::kKScale, st.get());
  launch_fill_random(v.data(), v.size(), s.dtype, seed + 2, attention::AttentionInputs::kVScale, st.get());
  IB_CUDA_CHECK(cudaMemsetAsync(o.data(), 0xFF, o.bytes(), st.get()));  // NaN in bf16 and fp16
  AttentionParams p = attention::attention_params(s);
  p.q = q.data();
  p.k = k.data();
  p.v = v.data();
  p.o = o.data();
  DeviceBuffer<uint16_t> kc, vc;
  if (c.kv_capacity > s.seq_k) {  // copy K and V into caches [batch][kv_heads][capacity][d], NaN past seq_k
    const size_t head = static_cast<size_t>(c.kv_capacity) * static_cast<size_t>(s.head_dim);
    const size_t width = static_cast<size_t>(s.seq_k) * static_cast<size_t>(s.head_dim) * 2,
                 heads = static_cast<size_t>(s.batch * s.kv_heads);
    for (auto [cache, src] : {std::pair{&kc, &k}, std::pair{&vc, &v}}) {
      cache->allocate(heads * head, "K/V cache");
      IB_CUDA_CHECK(cudaMemsetAsync(cache->data(), 0xFF, cache->bytes(), st.get()));
      IB_CUDA_CHECK(
          cudaMemcpy2DAsync(cache->data(), head * 2, src->data(), width, width, heads, cudaMemcpyDeviceToDevice, st.get()));
    }
    p.k = kc.data();
    p.v = vc.data();
    p.k_head_stride = p.v_head_stride = static_cast<int64_t>(head);
    p.k_batch_stride = p.v_batch_stride = static_cast<int64_t>(head) * s.kv_heads;
  }
  launch_flash3_schedule(p, st.get(), schedule);
  sync_or_fail(st.get(), "flash3 " + c.label());
  if (::testing::Test::HasFatalFailure()) return {};
  return to_host(o);
}

// Every output element against the float64 reference (rows spread over the CPU's threads).
// Per element |got − want| <= 3e-2 (outputs are averages of values in [-1, 1], bf16 keeps ~3
// digits), and relative L2 over the tensor <= 1e-2 (the runner's gate).
void check_case(const Flash3Case& c, Flash3Schedule schedule) {
  SCOPED_TRACE(c.label() + (schedule == Flash3Schedule::Serial ? ", serial schedule" : ", overlapped schedule"));
  const uint64_t seed = 1234;
  const std::vector<uint16_t> out = run_case(c, schedule, seed);
  if (out.empty()) return;
  const attention::AttentionShape& s = c.shape;
  const bool fp16 = s.dtype == DType::F16;
  const attention::AttentionInputs in{seed, s.dtype};
  const int64_t rows = s.rows();
  const int d = s.head_dim;
  std::vector<double> want(static_cast<size_t>(rows * d));
  parallel_for(static_cast<size_t>(rows), [&](size_t begin, size_t end) {
    for (size_t r = begin; r < end; ++r) {
      const int64_t bh = static_cast<int64_t>(r) / s.seq_q;
      attention::reference_row(s, in, static_cast<int>(bh / s.heads), static_cast<int>(bh % s.heads),
                               static_cast<int>(static_cast<int64_t>(r) % s.seq_q), want.data() + r * static_cast<size_t>(d));
    }
  });
  double err2 = 0, ref2 = 0;
  int64_t bad = 0, bad_rows = 0, first = -1;
  std::string rows_list;  // the first 16 wrong rows
  auto where = [&](int64_t r) {
    return fmt::format("b{} h{} query {} (block {} row {})", r / s.seq_q / s.heads, r / s.seq_q % s.heads, r % s.seq_q,
                       r % s.seq_q / 128, r % s.seq_q % 128);
  };
  for (int64_t r = 0; r < rows; ++r) {
    bool row_bad = false;
    for (int col = 0; col < d; ++col) {
      const size_t i = static_cast<size_t>(r * d + col);
      const double e = from_bits(out[i], fp16) - want[i];
      err2 += e * e;
      ref2 += want[i] * want[i];
      if (!(std::fabs(e) <= 3e-2)) {  // NaN (an unwritten element) counts
        if (bad++ == 0) first = static_cast<int64_t>(i);
        row_bad = true;
      }
    }
    if (row_bad && bad_rows++ < 16) rows_list += "\n  " + where(r);
  }
  const double rel = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  if (bad == 0 && rel <= 1e-2) return;
  std::string msg = fmt::format("relative L2 error {:.3g} (gate 1e-2); {} elements in {} of {} rows off by more than 3e-2 or NaN",
                                rel, bad, bad_rows, rows);
  if (first >= 0)
    msg += fmt::format("; first: {} col {}: got {} want {:.6f}; first wrong rows:{}", where(first / d), first % d,
                       from_bits(out[static_cast<size_t>(first)], fp16), want[static_cast<size_t>(first)], rows_list);
  ADD_FAILURE() << msg;
}

// head_dim 64 and 128, causal or not, lengths inside one tile, one past it, and many tiles with a
// partial last one; 2 query heads on 1 kv head (GQA).
void check_small_shapes(Flash3Schedule schedule) {
  for (int d : {64, 128})
    for (int seq : {1, 17, 128, 129, 1000})
      for (bool causal : {false, true}) check_case(make_case(1, 2, 1, d, seq, seq, causal), schedule);
}

// Serial schedule first: a layout or masking bug shows here; the pipeline is not involved.
TEST(Flash3Stage3Kernel, SerialSmallShapes) {
  REQUIRE_HOPPER();
  check_small_shapes(Flash3Schedule::Serial);
}

// The production schedule on the same shapes: failing here but not above is a pipeline bug
// (waits, phases, the overlap of softmax and P·V).
TEST(Flash3Stage3Kernel, OverlappedSmallShapes) {
  REQUIRE_HOPPER();
  check_small_shapes(Flash3Schedule::Overlapped);
}

// 33 key tiles with a partial last one: the ring wraps many times; both schedules.
TEST(Flash3Stage3Kernel, Length4097) {
  REQUIRE_HOPPER();
  for (bool causal : {false, true})
    for (int d : {64, 128})
      for (auto schedule : {Flash3Schedule::Serial, Flash3Schedule::Overlapped})
        check_case(make_case(1, 2, 1, d, 4097, 4097, causal), schedule);
}

// Bottom-right causal alignment both ways (seq_q > seq_k leaves the first rows with no key:
// zeros), and 4 query heads per kv head.
TEST(Flash3Stage3Kernel, QueriesAndKeysOfDifferentLengths) {
  REQUIRE_HOPPER();
  const std::pair<int, int> lengths[] = {{1, 1000}, {7, 300}, {150, 100}, {1500, 1000}, {129, 257}};
  for (auto [sq, sk] : lengths)
    for (bool causal : {false, true})
      for (int d : {64, 128}) check_case(make_case(1, 4, 1, d, sq, sk, causal), Flash3Schedule::Overlapped);
}

TEST(Flash3Stage3Kernel, SlidingWindow) {
  REQUIRE_HOPPER();
  for (int window : {1, 50, 128, 1000})
    for (int sq : {1000, 9}) check_case(make_case(1, 2, 1, 128, sq, 1000, true, window), Flash3Schedule::Overlapped);
}

TEST(Flash3Stage3Kernel, Fp16BatchesAndHeads) {
  REQUIRE_HOPPER();
  for (int d : {64, 128})
    for (bool causal : {false, true}) check_case(make_case(2, 4, 2, d, 300, 300, causal, 0, true), Flash3Schedule::Overlapped);
}

// K and V as views into caches with room past seq_k (NaN there): the tensor maps' strides find
// each head, and the rows past seq_k of the last tile come from TMA's zero fill, not the cache.
TEST(Flash3Stage3Kernel, StridedKvCacheView) {
  REQUIRE_HOPPER();
  for (bool causal : {false, true})
    check_case(make_case(2, 4, 2, 128, 37, 1000, causal, 0, false, 1100), Flash3Schedule::Overlapped);
}

// The same inputs three times give the same bits: a race (a slot refilled too early, a missing
// wait) usually shows as a result that moves between runs.
TEST(Flash3Stage3Kernel, RepeatableAcrossRuns) {
  REQUIRE_HOPPER();
  const Flash3Case c = make_case(2, 8, 2, 128, 2048, 2048, true);
  const auto first = run_case(c, Flash3Schedule::Overlapped, 99);
  ASSERT_FALSE(first.empty());
  for (int run = 1; run < 3; ++run) {
    const auto again = run_case(c, Flash3Schedule::Overlapped, 99);
    ASSERT_EQ(again.size(), first.size());
    size_t diff = 0, first_diff = 0;
    for (size_t i = 0; i < first.size(); ++i)
      if (again[i] != first[i] && diff++ == 0) first_diff = i;
    EXPECT_EQ(diff, 0u) << "run " << run << ": " << diff << " elements differ from run 0, first at element " << first_diff
                        << " (row " << first_diff / 128 << ")";
  }
}

// ================= stage 4: through the runner =================

ExperimentResult run_gpu(const std::string& variants, const std::string& axes) {
  return testing::run_spec_text("{warmup: 0, min_samples: 1, min_time: 0, timeout: 1s}",
                                "  - {name: a, kind: attention, variants: [" + variants + "], " + axes + "}\n", Backend::Cuda);
}

TEST(Flash3Stage4Runner, ShortAndOddLengths) {
  REQUIRE_HOPPER();
  expect_all_ok(run_gpu(
      "flash3", "heads: 4, kv_heads: [4, 2, 1], head_dim: [64, 128], seq: [1, 17, 63, 64, 65, 129], causal: [true, false]"));
}

TEST(Flash3Stage4Runner, QueriesAndKeysOfDifferentLengths) {
  REQUIRE_HOPPER();
  expect_all_ok(run_gpu(
      "flash3", "heads: 4, kv_heads: 2, head_dim: [64, 128], seq: [100, 1000], seq_q: [1, 7, 150, 1500], causal: [true, false]"));
}

TEST(Flash3Stage4Runner, SlidingWindow) {
  REQUIRE_HOPPER();
  const auto r = run_gpu(
      "flash3", "heads: 4, kv_heads: 2, head_dim: [64, 128], seq: [100, 1000, 4097], seq_q: [0, 9], window: [1, 50, 128, 1000]");
  expect_all_ok(r, 2 * 3 * 2 * 4);
}

TEST(Flash3Stage4Runner, LongSequencesBf16AndFp16) {
  REQUIRE_HOPPER();
  expect_all_ok(run_gpu("flash3",
                        "batch: 2, heads: 8, kv_heads: [8, 2], head_dim: [64, 128], seq: [1000, 4097], causal: [true, false], "
                        "dtype: [bf16, fp16]"));
}

// The shape beside flash2 (Llama 2 7B attention, 8K, causal): both pass the gate; the
// rows' TFLOP/s are a first reading, not the measurement (experiments/attention.yaml is).
TEST(Flash3Stage4Runner, LlamaShapeBesideFlash2) {
  REQUIRE_HOPPER();
  const auto r = run_gpu("flash2, flash3", "heads: 32, head_dim: 128, seq: 8192, causal: true");
  expect_all_ok(r, 2);
}

}  // namespace
}  // namespace ib
