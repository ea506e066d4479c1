// The batched generation loop (speculative_generate_batch: every sequence drafts and verifies in
// the same passes) and its baseline autoregressive_generate_batch.
#include "specdec/specdec.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "numerics/random.h"
#include "specdec/specdec_internal.h"
#include "specdec/step_helpers.h"

namespace ib::specdec {

namespace {

using detail::argmax_row;
using detail::check_sampled;
using detail::draft_distribution;
using detail::fit;
using detail::keep_accepted_drafts;
using detail::since;
using detail::verify_logits_sampled;

}  // namespace

namespace {

// Sequence b's own seed in a batch: its draws independent of the others'.
uint64_t sequence_seed(uint64_t seed, int b) { return b == 0 ? seed : random_bits(seed ^ 0xBA7Cull, static_cast<uint64_t>(b)); }

// Controlled drafting's decision for drafted position `pos` (i-th draft of `step`): the target's
// token with probability alpha, else another one.
int32_t controlled_draft(const SpecConfig& cfg, int32_t want, int64_t pos, uint64_t step, int i, int vocab, uint64_t stream = 0) {
  const uint64_t r = random_bits(cfg.seed ^ 0xC0DEull ^ (stream * 0x9E3779B97F4A7C15ull),
                                 static_cast<uint64_t>(pos) * 131u + step * 7u + static_cast<uint64_t>(i));
  const bool hit = static_cast<double>(r >> 11) * (1.0 / 9007199254740992.0) < cfg.alpha;
  return hit ? want
             : static_cast<int32_t>((want + 1 + static_cast<int64_t>((r >> 3) % static_cast<uint64_t>(vocab - 1))) % vocab);
}

}  // namespace

std::vector<std::vector<int32_t>> speculative_generate_batch(model::Model& target, const std::vector<int>& target_seqs,
                                                             model::Model& draft, const std::vector<int>& draft_seqs,
                                                             const std::vector<int32_t>& lasts, int n, const SpecConfig& cfg,
                                                             const std::vector<std::function<int32_t(int64_t)>>& truths,
                                                             SpecStats& stats) {
  if (cfg.source == DraftSource::Ngram) throw std::invalid_argument("batched speculative decoding drafts with a draft model");
  check_sampled(cfg, false);
  const bool sampled = !cfg.sampling.greedy();
  if (cfg.record_batch) cfg.record_batch->assign(target_seqs.size(), {});
  const int B = static_cast<int>(target_seqs.size());
  const int tv = target.config().vocab, dv = draft.config().vocab;
  const size_t TV = static_cast<size_t>(tv), DV = static_cast<size_t>(dv);
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(B));
  std::vector<std::vector<int32_t>> pending(static_cast<size_t>(B));  // accepted tokens the draft has not seen
  std::vector<int32_t> last = lasts;
  for (int b = 0; b < B; ++b) pending[static_cast<size_t>(b)] = {lasts[static_cast<size_t>(b)]};
  std::vector<float> dl, logits;
  uint64_t step = 0;
  for (;;) {
    // The unfinished sequences, each drafting k_a = min(K, tokens left − 1) this step.
    std::vector<int> act, ks;
    for (int b = 0; b < B; ++b) {
      const int left = n - static_cast<int>(out[static_cast<size_t>(b)].size());
      if (left <= 0) continue;
      act.push_back(b);
      ks.push_back(std::min(cfg.k, left - 1));
    }
    if (act.empty()) break;
    const int A = static_cast<int>(act.size());
    std::vector<int> ts, ds;
    for (int b : act) {
      ts.push_back(target_seqs[static_cast<size_t>(b)]);
      ds.push_back(draft_seqs[static_cast<size_t>(b)]);
    }
    // ---- draft: the sequences still drafting at depth i run together ----
    std::vector<std::vector<int32_t>> drafts(static_cast<size_t>(A));
    std::vector<std::vector<std::vector<float>>> qs(static_cast<size_t>(A));  // sampled: draft i's distribution, per sequence
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<int> sel;  // active indices drafting now; row r of dl is sel[r]'s (after the first pass: last rows)
    for (int a = 0; a < A; ++a)
      if (ks[static_cast<size_t>(a)] > 0) sel.push_back(a);
    if (!sel.empty()) {
      std::vector<int> seqs, counts;
      std::vector<int32_t> in;
      for (int a : sel) {
        const auto& pend = pending[static_cast<size_t>(act[static_cast<size_t>(a)])];
        seqs.push_back(ds[static_cast<size_t>(a)]);
        counts.push_back(static_cast<int>(pend.size()));
        for (int32_t t : pend) in.push_back(fit(t, dv));
      }
      dl.resize(in.size() * DV);
      model::StepOutput o;
      o.logits = dl.data();
      draft.prefill_batch(seqs.data(), counts.data(), static_cast<int>(sel.size()), in.data(), o);
      ++stats.draft_forward;
      std::vector<size_t> row;
      for (size_t r = 0, end = 0; r < sel.size(); ++r) row.push_back((end += static_cast<size_t>(counts[r])) - 1);
      for (int i = 0; !sel.empty(); ++i) {
        std::vector<int> next_sel;
        std::vector<int32_t> next_tok;
        for (size_t r = 0; r < sel.size(); ++r) {
          const int a = sel[r], b = act[static_cast<size_t>(a)];
          const int64_t pos = static_cast<int64_t>(out[static_cast<size_t>(b)].size()) + i;
          int32_t d;
          if (cfg.source == DraftSource::Controlled) {
            d = controlled_draft(cfg, truths[static_cast<size_t>(b)](pos), pos, step, i, tv, static_cast<uint64_t>(b));
          } else if (sampled) {
            std::vector<float>& q = qs[static_cast<size_t>(a)].emplace_back();
            draft_distribution(&dl[row[r] * DV], dv, tv, cfg.sampling, q);
            d = draw(q.data(), tv, model::sample_uniform(sequence_seed(cfg.seed, b) ^ 0xD1ull, step, i));
          } else {
            d = argmax_row(&dl[row[r] * DV], std::min(dv, tv));
          }
          drafts[static_cast<size_t>(a)].push_back(d);
          if (i + 1 < ks[static_cast<size_t>(a)]) {
            next_sel.push_back(a);
            next_tok.push_back(fit(d, dv));
          }
        }
        sel = std::move(next_sel);
        if (sel.empty()) break;
        seqs.clear();
        for (int a : sel) seqs.push_back(ds[static_cast<size_t>(a)]);
        dl.resize(sel.size() * DV);
        o.logits = dl.data();
        draft.decode(seqs.data(), next_tok.data(), static_cast<int>(sel.size()), o);
        ++stats.draft_forward;
        row.resize(sel.size());
        for (size_t r = 0; r < sel.size(); ++r) row[r] = r;
      }
    }
    stats.draft_seconds += since(t0);
    // ---- verify: [last, drafts] of every active sequence in one target pass ----
    std::vector<int> counts(static_cast<size_t>(A)), base(static_cast<size_t>(A)), first_row(static_cast<size_t>(A));
    std::vector<int32_t> in;
    for (int a = 0; a < A; ++a) {
      const int b = act[static_cast<size_t>(a)];
      base[static_cast<size_t>(a)] = target.length(ts[static_cast<size_t>(a)]);
      first_row[static_cast<size_t>(a)] = static_cast<int>(in.size());
      counts[static_cast<size_t>(a)] = ks[static_cast<size_t>(a)] + 1;
      in.push_back(fit(last[static_cast<size_t>(b)], tv));
      for (int32_t d : drafts[static_cast<size_t>(a)]) in.push_back(fit(d, tv));
    }
    logits.resize(in.size() * TV);
    const auto t1 = std::chrono::steady_clock::now();
    model::StepOutput o;
    o.logits = logits.data();
    target.prefill_batch(ts.data(), counts.data(), A, in.data(), o);
    stats.verify_seconds += since(t1);
    ++stats.passes;
    for (int a = 0; a < A; ++a) {
      const int b = act[static_cast<size_t>(a)], k = ks[static_cast<size_t>(a)];
      const float* rows = &logits[static_cast<size_t>(first_row[static_cast<size_t>(a)]) * TV];
      std::vector<int32_t> emitted;
      int j;
      if (sampled) {
        // This sequence's chain by rejection sampling, with its own stream of uniforms.
        SpecConfig own = cfg;
        own.seed = sequence_seed(cfg.seed, b);
        own.record_target = cfg.record_batch ? &(*cfg.record_batch)[static_cast<size_t>(b)] : nullptr;
        std::vector<std::vector<float>>& q = qs[static_cast<size_t>(a)];
        q.resize(static_cast<size_t>(k) + 1);
        std::vector<int> path;
        j = verify_logits_sampled(DraftTree::chain(drafts[static_cast<size_t>(a)]), rows, tv, own, &q, step, emitted, path);
      } else {
        std::vector<int32_t> choice(static_cast<size_t>(k + 1));
        for (int i = 0; i <= k; ++i) choice[static_cast<size_t>(i)] = argmax_row(rows + static_cast<size_t>(i) * TV, tv);
        j = verify_greedy(drafts[static_cast<size_t>(a)], choice, emitted);
      }
      ++stats.steps;
      stats.drafted += k;
      stats.accepted += j;
      stats.count_positions(k, j);
      stats.tested += j + (j < k ? 1 : 0);
      stats.emitted += static_cast<int64_t>(emitted.size());
      target.truncate(ts[static_cast<size_t>(a)], base[static_cast<size_t>(a)] + 1 + j);
      keep_accepted_drafts(draft, ds[static_cast<size_t>(a)], drafts[static_cast<size_t>(a)], k, j, emitted,
                           pending[static_cast<size_t>(b)]);
      std::vector<int32_t>& o_b = out[static_cast<size_t>(b)];
      o_b.insert(o_b.end(), emitted.begin(), emitted.end());
      last[static_cast<size_t>(b)] = emitted.back();
    }
    ++step;
  }
  for (auto& o_b : out) o_b.resize(static_cast<size_t>(n));
  return out;
}

std::vector<std::vector<int32_t>> autoregressive_generate_batch(model::Model& target, const std::vector<int>& target_seqs,
                                                                const std::vector<int32_t>& lasts, int n,
                                                                const model::SamplingParams& sampling) {
  const int B = static_cast<int>(target_seqs.size()), tv = target.config().vocab;
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(B));
  std::vector<int32_t> in(static_cast<size_t>(B)), next(static_cast<size_t>(B));
  for (int b = 0; b < B; ++b) in[static_cast<size_t>(b)] = fit(lasts[static_cast<size_t>(b)], tv);
  for (int i = 0; i < n; ++i) {
    model::StepOutput o;
    o.next = next.data();
    o.sampling = sampling;
    o.step = static_cast<uint64_t>(i);
    target.decode(target_seqs.data(), in.data(), B, o);
    for (int b = 0; b < B; ++b) {
      out[static_cast<size_t>(b)].push_back(next[static_cast<size_t>(b)]);
      in[static_cast<size_t>(b)] = next[static_cast<size_t>(b)];
    }
  }
  return out;
}

}  // namespace ib::specdec
