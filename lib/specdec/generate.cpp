// The chain generation loop (speculative_generate: draft K tokens, verify, keep), its baseline
// autoregressive_generate, and the step bookkeeping the tree loop shares.
#include "specdec/specdec.h"

#include <algorithm>
#include <chrono>

#include "numerics/random.h"
#include "specdec/specdec_internal.h"
#include "specdec/step_helpers.h"

namespace ib::specdec {

namespace detail {

// One verify step in the statistics: `drafted` tokens verified, `accepted` of them kept, and
// whether verification rejected one (the tokens after a rejection are never tested).
void count_step(SpecStats& st, int drafted, int accepted, bool rejected, const std::vector<int32_t>& emitted) {
  ++st.steps;
  ++st.passes;
  st.drafted += drafted;
  st.accepted += accepted;
  st.tested += accepted + (rejected ? 1 : 0);
  st.emitted += static_cast<int64_t>(emitted.size());
}

void append_emitted(const std::vector<int32_t>& emitted, std::vector<int32_t>& out, std::vector<int32_t>& history) {
  out.insert(out.end(), emitted.begin(), emitted.end());
  history.insert(history.end(), emitted.begin(), emitted.end());
}

void keep_accepted_drafts(model::Model& draft, int draft_seq, const std::vector<int32_t>& drafts, int k, int j,
                          const std::vector<int32_t>& emitted, std::vector<int32_t>& pending) {
  if (k > 0) {
    // The draft cached pending + d1..d_{k-1}; keep pending + the accepted ones among them.
    const int cached_drafts = k - 1, keep = std::min(j, cached_drafts);
    draft.truncate(draft_seq, draft.length(draft_seq) - (cached_drafts - keep));
    pending.clear();
    if (j == k) pending.push_back(drafts.back());
  }
  pending.push_back(emitted.back());
}

}  // namespace detail

namespace {

using detail::append_emitted;
using detail::argmax_row;
using detail::check_sampled;
using detail::count_step;
using detail::draft_distribution;
using detail::fit;
using detail::keep_accepted_drafts;
using detail::since;
using detail::verify_logits_sampled;

}  // namespace

std::vector<int32_t> speculative_generate(model::Model& target, int target_seq, model::Model* draft, int draft_seq, int32_t last,
                                          int n, const SpecConfig& cfg, const std::function<int32_t(int64_t)>& truth,
                                          bool force_truth, std::vector<int32_t>& history, SpecStats& stats) {
  const int tv = target.config().vocab;
  const bool sampled = !cfg.sampling.greedy();
  check_sampled(cfg, force_truth);
  std::vector<int32_t> out;
  std::vector<int32_t> pending = {last};  // accepted tokens the draft model has not seen yet
  std::vector<float> logits;
  std::vector<std::vector<float>> q;  // sampled, draft model: the distribution each draft was drawn from
  uint64_t step = 0;
  while (static_cast<int>(out.size()) < n) {
    const int remaining = n - static_cast<int>(out.size());
    const int k = std::min(cfg.k, remaining - 1);
    std::vector<int32_t> drafts;
    // ---- draft ----
    const auto t0 = std::chrono::steady_clock::now();
    if (cfg.source == DraftSource::Ngram) {
      drafts = ngram_propose(history, k, cfg.ngram_min, cfg.ngram_max);
    } else if (k > 0) {
      const int dv = draft->config().vocab;
      std::vector<float> dl(static_cast<size_t>(dv));
      q.assign(sampled ? static_cast<size_t>(k) + 1 : 0, {});
      std::vector<int32_t> in(pending.size());
      for (size_t i = 0; i < pending.size(); ++i) in[i] = fit(pending[i], dv);
      for (int i = 0; i < k; ++i) {
        model::StepOutput o;
        o.logits = dl.data();
        if (i == 0)
          draft->prefill(draft_seq, in.data(), static_cast<int>(in.size()), 1, o);
        else {
          const int32_t prev = fit(drafts.back(), dv);
          draft->decode(&draft_seq, &prev, 1, o);
        }
        ++stats.draft_forward;
        int32_t d;
        if (cfg.source == DraftSource::Controlled) {
          // The draft model really ran; its token is the target's next one with probability α.
          const int64_t pos = static_cast<int64_t>(out.size()) + i;
          const int32_t want = truth(pos);
          const uint64_t r =
              random_bits(cfg.seed ^ 0xC0DEull, static_cast<uint64_t>(pos) * 131u + step * 7u + static_cast<uint64_t>(i));
          const bool hit = static_cast<double>(r >> 11) * (1.0 / 9007199254740992.0) < cfg.alpha;
          d = hit ? want : static_cast<int32_t>((want + 1 + static_cast<int64_t>((r >> 3) % static_cast<uint64_t>(tv - 1))) % tv);
        } else if (sampled) {
          std::vector<float>& qi = q[static_cast<size_t>(i)];
          draft_distribution(dl.data(), dv, tv, cfg.sampling, qi);
          d = draw(qi.data(), tv, model::sample_uniform(cfg.seed ^ 0xD1ull, step, i));
        } else {
          d = argmax_row(dl.data(), dv);
        }
        drafts.push_back(d);
      }
    }
    stats.draft_seconds += since(t0);
    // ---- verify: [last, d1..dK] in one target pass ----
    const int kk = static_cast<int>(drafts.size());
    std::vector<int32_t> in = {fit(last, tv)};
    for (int32_t d : drafts) in.push_back(fit(d, tv));
    logits.resize(static_cast<size_t>(kk + 1) * static_cast<size_t>(tv));
    const int base = target.length(target_seq);
    const auto t1 = std::chrono::steady_clock::now();
    model::StepOutput o;
    o.logits = logits.data();
    target.prefill(target_seq, in.data(), kk + 1, kk + 1, o);
    stats.verify_seconds += since(t1);
    std::vector<int32_t> emitted;
    int j;
    if (sampled) {
      std::vector<int> path;
      j = verify_logits_sampled(DraftTree::chain(drafts), logits.data(), tv, cfg, cfg.source == DraftSource::Ngram ? nullptr : &q,
                                step, emitted, path);
    } else {
      std::vector<int32_t> choice(static_cast<size_t>(kk + 1));
      for (int i = 0; i <= kk; ++i)
        choice[static_cast<size_t>(i)] =
            force_truth ? truth(static_cast<int64_t>(out.size()) + i) : argmax_row(&logits[static_cast<size_t>(i) * tv], tv);
      j = verify_greedy(drafts, choice, emitted);
    }
    count_step(stats, kk, j, j < kk, emitted);
    stats.count_positions(kk, j);
    ++step;
    // Keep last + the accepted drafts in the target's cache; the new last token is not cached yet.
    target.truncate(target_seq, base + 1 + j);
    if (draft && cfg.source != DraftSource::Ngram) keep_accepted_drafts(*draft, draft_seq, drafts, kk, j, emitted, pending);
    append_emitted(emitted, out, history);
    last = emitted.back();
  }
  out.resize(static_cast<size_t>(n));
  return out;
}

std::vector<int32_t> autoregressive_generate(model::Model& target, int target_seq, int32_t last, int n,
                                             const model::SamplingParams& sampling, const std::function<int32_t(int64_t)>& truth,
                                             bool force_truth) {
  const int tv = target.config().vocab;
  std::vector<int32_t> out;
  int32_t next = 0;
  for (int i = 0; i < n; ++i) {
    const int32_t in = fit(last, tv);
    model::StepOutput o;
    o.next = &next;
    o.sampling = sampling;
    o.step = static_cast<uint64_t>(i);
    target.decode(&target_seq, &in, 1, o);
    last = force_truth ? truth(i) : next;
    out.push_back(last);
  }
  return out;
}

}  // namespace ib::specdec
