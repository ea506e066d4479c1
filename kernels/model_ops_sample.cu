// Token choice of the CUDA transformer engine from fp32 logits: greedy (the masked argmax of
// constrain_mask.cu without a mask) or temperature / top-k / top-p sampling by radix search.
#include "model_ops.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "constrain_mask.h"
#include "numerics/cuda_check.h"
#include "numerics/sampling.h"

namespace ib {

namespace {

// =====================================================================================
// sampling
// =====================================================================================

// Greedy choice is constrain_mask.cu's masked argmax without a mask (smallest index on ties,
// NaN ignored).
constexpr int kSampleThreads = 1024;

// v1 sampling: one block of 1024 threads per row, exact selection by radix search instead of a
// sort. Each token gets a unique 64-bit key: the order-preserving bits of its logit above
// 0xFFFFFFFF − index, so descending key order is "descending logit (= probability), ties by
// smaller index", the order of the CPU sampler (model/sample.cpp). Probabilities follow its
// formula too, e = exp(logit/T − max/T) in double, and become fixed-point masses e·2^40 (integers:
// sums are exact and independent of the summation order, so the kernel is deterministic and a
// "cumulative mass in key order" is one integer). Every cut is one question: walking the keys in
// descending order, at which key does the running weight (1 per key, or its mass) first reach a
// threshold? radix_cross answers it with up to 8 passes over the candidates, 8 bits of key per
// pass: a 256-bucket histogram (count and mass, shared-memory atomics) of the keys matching the
// prefix fixed so far, then warp 0 finds the bucket where the running weight crosses; a bucket
// holding a single key ends the search early.
//   top-k: the key where the count reaches k (its mass-at-or-above is the kept mass M),
//   top-p: the key where the mass reaches ceil(top_p · M)   (CPU: renormalised cum >= top_p),
//   draw:  the key where the mass first exceeds floor(u · M') (CPU: u < renormalised cum),
// with M' the mass left after top-p. Once the candidates (keys >= the current cut) number at most
// kSampleCand they are compacted, with their masses, into shared memory, and the remaining
// searches scan that list instead of the whole vocabulary (top-k 40: only the k search reads the
// logits). Cost: a pass reads the row (600 KB at vocab 152064, from L2) and recomputes the
// exponentials; top-k or top-p searches take ~3–6 passes on a typical row.
constexpr int kSampleCand = 2048;
constexpr double kMassOne = 1099511627776.0;  // 2^40

struct SampleShared {
  unsigned int count[256];
  unsigned long long mass[256];
  unsigned long long cand_key[kSampleCand];
  unsigned long long cand_mass[kSampleCand];
  unsigned long long red[32];
  float redf[32];
  unsigned long long bcast_key, bcast_above_m, bcast_mass;
  unsigned int bcast_above_c, bcast_count, n_cand;
  int bcast_bucket;
};

// Float bits to an unsigned integer with the same order (negative values flipped entirely,
// positive ones with the sign bit set); NaN sorts below everything (it is never drawn).
__device__ __forceinline__ unsigned int ordered_bits(float f) {
  if (f != f) return 0u;
  const unsigned int u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ int key_index(unsigned long long k) {
  return static_cast<int>(0xFFFFFFFFu - static_cast<unsigned int>(k));
}

// The keys of one row of logits: key and fixed-point mass of token i.
struct GlobalKeys {
  const float* logits;
  int n;
  double inv_t, top;  // e = exp(logit · inv_t − top), top = max logit · inv_t (as the CPU)
  __device__ int size() const { return n; }
  __device__ void get(int i, unsigned long long& key, unsigned long long& mass) const {
    const float z = logits[i];
    key = (static_cast<unsigned long long>(ordered_bits(z)) << 32) | (0xFFFFFFFFu - static_cast<unsigned int>(i));
    const double e = z == z ? exp(static_cast<double>(z) * inv_t - top) : 0.0;  // in [0, 1]
    mass = __double2ull_rz(e * kMassOne);                                       // <= 2^40; a vocabulary < 2^17 sums below 2^57
  }
};
struct SharedKeys {
  const unsigned long long* keys;
  const unsigned long long* masses;
  int n;
  __device__ int size() const { return n; }
  __device__ void get(int i, unsigned long long& key, unsigned long long& mass) const {
    key = keys[i];
    mass = masses[i];
  }
};

struct Cross {
  unsigned long long key;      // the key where the running weight crosses
  unsigned long long mass_ge;  // mass of the keys >= key (and >= lower)
  unsigned int count_ge;       // number of such keys
};

// Among the keys >= lower, walked in descending order: the first key at which the running weight
// (count when by_count, else mass) is >= thr (strict: > thr). Callers pass a threshold that the
// total weight reaches (>= 1 for >=); should none be reached anyway, the smallest key is
// returned. Mass is monotone in the key, so zero-mass keys come last and are never the answer of
// a mass search. Must be called by the whole block.
template <class Keys>
__device__ Cross radix_cross(const Keys& keys, unsigned long long lower, bool by_count, unsigned long long thr, bool strict,
                             SampleShared& sh) {
  const int tid = threadIdx.x, lane = tid & 31;
  const int n = keys.size();
  unsigned long long prefix = 0, above_m = 0;
  unsigned int above_c = 0;
  for (int shift = 56; shift >= 0; shift -= 8) {
    const unsigned long long hi_mask = shift == 56 ? 0ull : ~0ull << (shift + 8);
    if (tid < 256) {
      sh.count[tid] = 0;
      sh.mass[tid] = 0;
    }
    __syncthreads();
    for (int i = tid; i < n; i += kSampleThreads) {
      unsigned long long k, mk;
      keys.get(i, k, mk);
      if (k >= lower && (k & hi_mask) == prefix) {
        const int b = static_cast<int>((k >> shift) & 255u);
        atomicAdd(&sh.count[b], 1u);
        if (mk) atomicAdd(&sh.mass[b], mk);
      }
    }
    __syncthreads();
    if (tid < 32) {
      // Lane l owns buckets 255 − 8l .. 248 − 8l (descending key order across the lanes).
      unsigned long long wm = 0;
      unsigned int wc = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        wm += sh.mass[255 - 8 * lane - j];
        wc += sh.count[255 - 8 * lane - j];
      }
      unsigned long long im = wm;  // inclusive scans over the lanes
      unsigned int ic = wc;
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const unsigned long long tm = __shfl_up_sync(0xffffffffu, im, off);
        const unsigned int tc = __shfl_up_sync(0xffffffffu, ic, off);
        if (lane >= off) {
          im += tm;
          ic += tc;
        }
      }
      const unsigned long long w_incl = by_count ? static_cast<unsigned long long>(above_c + ic) : above_m + im;
      const bool hit = strict ? w_incl > thr : w_incl >= thr;
      const unsigned hits = __ballot_sync(0xffffffffu, hit);
      const unsigned nonempty = __ballot_sync(0xffffffffu, wc > 0);
      // The first lane whose range crosses, or (never crossing) the lane with the lowest keys.
      const int src = hits ? __ffs(hits) - 1 : (nonempty ? 31 - __clz(nonempty) : 0);
      if (lane == src) {
        unsigned long long rm = above_m + (im - wm);  // weight of the keys above this lane's buckets
        unsigned int rc = above_c + (ic - wc);
        int chosen = -1;
        unsigned long long ch_m = rm;
        unsigned int ch_c = rc;
        for (int j = 0; j < 8; ++j) {
          const int b = 255 - 8 * lane - j;
          const unsigned int c = sh.count[b];
          if (c == 0) continue;  // weight 0: the running weight does not move
          const unsigned long long mb = sh.mass[b];
          chosen = b;  // without a hit this ends as the lowest non-empty bucket
          ch_m = rm;
          ch_c = rc;
          const unsigned long long w = by_count ? static_cast<unsigned long long>(rc + c) : rm + mb;
          if (hits && (strict ? w > thr : w >= thr)) break;
          rm += mb;
          rc += c;
        }
        if (chosen < 0) chosen = 0;  // no key at all (callers never ask): bucket 0, empty
        sh.bcast_bucket = chosen;
        sh.bcast_above_m = ch_m;
        sh.bcast_above_c = ch_c;
        sh.bcast_count = sh.count[chosen];
        sh.bcast_mass = sh.mass[chosen];
      }
    }
    __syncthreads();
    const int b = sh.bcast_bucket;
    above_m = sh.bcast_above_m;
    above_c = sh.bcast_above_c;
    const unsigned int cnt = sh.bcast_count;
    const unsigned long long msum = sh.bcast_mass;
    __syncthreads();  // everyone has read the broadcast before the next pass rewrites it
    prefix |= static_cast<unsigned long long>(b) << shift;
    if (cnt <= 1 || shift == 0) {
      unsigned long long key = prefix;  // at shift 0 the prefix is the whole key
      if (cnt == 1 && shift > 0) {
        // The one key with this prefix: whoever holds it publishes it.
        const unsigned long long mask = ~0ull << shift;
        for (int i = tid; i < n; i += kSampleThreads) {
          unsigned long long k, mk;
          keys.get(i, k, mk);
          if (k >= lower && (k & mask) == prefix) sh.bcast_key = k;
        }
        __syncthreads();
        key = sh.bcast_key;
        __syncthreads();
      }
      return Cross{key, above_m + msum, above_c + cnt};
    }
  }
  return Cross{prefix, above_m, above_c};  // not reached: shift 0 returns above
}

// Block-wide sum of 64-bit integers (exact, so the order does not matter).
__device__ unsigned long long block_sum_u64(unsigned long long v, SampleShared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  if (lane == 0) sh.red[warp] = v;
  __syncthreads();
  unsigned long long t = 0;
  for (int w = 0; w < kSampleThreads / 32; ++w) t += sh.red[w];
  __syncthreads();
  return t;
}

__device__ float block_max(float v, SampleShared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  if (lane == 0) sh.redf[warp] = v;
  __syncthreads();
  float t = -INFINITY;
  for (int w = 0; w < kSampleThreads / 32; ++w) t = fmaxf(t, sh.redf[w]);
  __syncthreads();
  return t;
}

__global__ void __launch_bounds__(kSampleThreads)
    sample_kernel(const float* __restrict__ logits, int vocab, float temperature, int top_k, float top_p, uint64_t seed,
                  uint64_t step, int row_base, int32_t* __restrict__ out) {
  __shared__ SampleShared sh;
  const int tid = threadIdx.x;
  const int row = blockIdx.x;
  const float* z = logits + static_cast<size_t>(row) * vocab;

  float mx = -INFINITY;
  for (int i = tid; i < vocab; i += kSampleThreads) mx = fmaxf(mx, z[i]);  // fmaxf ignores NaN
  mx = block_max(mx, sh);
  if (!(mx > -INFINITY) || mx == INFINITY) {  // nothing finite to normalise by (uniform branch)
    if (tid == 0) out[row] = 0;
    return;
  }
  GlobalKeys gk;
  gk.logits = z;
  gk.n = vocab;
  gk.inv_t = 1.0 / static_cast<double>(temperature);
  gk.top = static_cast<double>(mx) * gk.inv_t;

  unsigned long long lower = 0, kept = 0;
  unsigned int n_kept = static_cast<unsigned int>(vocab);
  {
    unsigned long long total = 0;
    for (int i = tid; i < vocab; i += kSampleThreads) {
      unsigned long long k, mk;
      gk.get(i, k, mk);
      total += mk;
    }
    kept = block_sum_u64(total, sh);
  }

  SharedKeys sk{sh.cand_key, sh.cand_mass, 0};
  bool in_shared = false;
  // The candidates (keys >= lower, at most kSampleCand of them) to shared memory.
  auto compact = [&]() {
    if (tid == 0) sh.n_cand = 0;
    __syncthreads();
    for (int i = tid; i < vocab; i += kSampleThreads) {
      unsigned long long k, mk;
      gk.get(i, k, mk);
      if (k >= lower) {
        const unsigned int slot = atomicAdd(&sh.n_cand, 1u);  // the order is irrelevant to the searches
        sh.cand_key[slot] = k;
        sh.cand_mass[slot] = mk;
      }
    }
    __syncthreads();
    sk.n = static_cast<int>(sh.n_cand);
    in_shared = true;
  };

  if (top_k > 0 && top_k < vocab) {
    const Cross c = radix_cross(gk, 0ull, true, static_cast<unsigned long long>(top_k), false, sh);
    lower = c.key;
    kept = c.mass_ge;
    n_kept = c.count_ge;
  }
  if (n_kept <= static_cast<unsigned int>(kSampleCand)) compact();
  if (top_p < 1.0f) {
    double want = ceil(static_cast<double>(top_p) * static_cast<double>(kept));
    if (want < 1.0) want = 1.0;
    unsigned long long thr = static_cast<unsigned long long>(want);
    if (thr > kept) thr = kept;
    const Cross c = in_shared ? radix_cross(sk, lower, false, thr, false, sh) : radix_cross(gk, lower, false, thr, false, sh);
    lower = c.key;
    kept = c.mass_ge;
    n_kept = c.count_ge;
    if (!in_shared && n_kept <= static_cast<unsigned int>(kSampleCand)) compact();
  }
  const float u = sample_uniform(seed, step, row_base + row);
  unsigned long long target = static_cast<unsigned long long>(floor(static_cast<double>(u) * static_cast<double>(kept)));
  if (kept > 0 && target >= kept) target = kept - 1;
  const Cross c = in_shared ? radix_cross(sk, lower, false, target, true, sh) : radix_cross(gk, lower, false, target, true, sh);
  if (tid == 0) out[row] = key_index(c.key);
}

}  // namespace

void launch_sample(const float* logits, int rows, int vocab, float temperature, int top_k, float top_p, uint64_t seed,
                   uint64_t step, int row_base, int32_t* out, cudaStream_t stream) {
  if (rows <= 0) return;
  if (vocab <= 0 || vocab >= (1 << 24)) throw std::invalid_argument("sample: vocab must be in 1 .. 2^24");
  if (temperature <= 0.0f) {
    launch_masked_argmax(logits, nullptr, vocab, rows, out, stream);  // checks its own launch
    return;
  }
  sample_kernel<<<static_cast<unsigned>(rows), kSampleThreads, 0, stream>>>(logits, vocab, temperature, top_k, top_p, seed, step,
                                                                            row_base, out);
  IB_CUDA_CHECK_LAUNCH();
}

}  // namespace ib
