#include "specdec/specdec.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

#include "core/random.h"

namespace ib::specdec {

double expected_tokens(double alpha, int k) {
  if (alpha >= 1.0) return k + 1.0;
  return (1.0 - std::pow(alpha, k + 1)) / (1.0 - alpha);
}

double predicted_speedup(double alpha, int k, double c, double v) { return expected_tokens(alpha, k) / (k * c + v); }

std::vector<int32_t> ngram_propose(const std::vector<int32_t>& h, int k, int ngram_min, int ngram_max) {
  const int len = static_cast<int>(h.size());
  for (int n = std::min(ngram_max, len - 1); n >= std::max(ngram_min, 1); --n) {
    // The most recent earlier occurrence of the last n tokens (ending before the last position).
    for (int start = len - n - 1; start >= 0; --start) {
      if (!std::equal(h.begin() + start, h.begin() + start + n, h.end() - n)) continue;
      const int from = start + n;
      const int take = std::min(k, len - from);
      if (take <= 0) continue;
      return std::vector<int32_t>(h.begin() + from, h.begin() + from + take);
    }
  }
  return {};
}

int verify_greedy(const std::vector<int32_t>& drafts, const std::vector<int32_t>& target, std::vector<int32_t>& emitted) {
  if (target.size() != drafts.size() + 1) throw std::invalid_argument("verify_greedy needs K + 1 target choices");
  size_t j = 0;
  while (j < drafts.size() && drafts[j] == target[j]) emitted.push_back(drafts[j++]);
  emitted.push_back(target[j]);
  return static_cast<int>(j);
}

int32_t draw(const float* probs, int vocab, float u) {
  double total = 0;
  for (int t = 0; t < vocab; ++t) total += probs[t];
  double cum = 0;
  int32_t last = 0;
  for (int t = 0; t < vocab; ++t) {
    if (probs[t] <= 0) continue;
    last = t;
    cum += probs[t];
    if (static_cast<double>(u) * total < cum) return t;
  }
  return last;
}

int verify_sampled(const std::vector<int32_t>& drafts, const std::vector<float>& p, const std::vector<float>& q, int vocab,
                   const std::vector<float>& u_accept, const std::vector<float>& u_resample, std::vector<int32_t>& emitted) {
  const size_t k = drafts.size();
  const size_t V = static_cast<size_t>(vocab);
  std::vector<float> residual(V);
  for (size_t i = 0; i < k; ++i) {
    const int32_t d = drafts[i];
    const float pi = p[i * V + static_cast<size_t>(d)], qi = q[i * V + static_cast<size_t>(d)];
    if (qi > 0 && static_cast<double>(u_accept[i]) < std::min(1.0, static_cast<double>(pi) / qi)) {
      emitted.push_back(d);
      continue;
    }
    double mass = 0;
    for (size_t t = 0; t < V; ++t) mass += residual[t] = std::max(0.0f, p[i * V + t] - q[i * V + t]);
    emitted.push_back(mass > 0 ? draw(residual.data(), vocab, u_resample[i]) : draw(&p[i * V], vocab, u_resample[i]));
    return static_cast<int>(i);
  }
  emitted.push_back(draw(&p[k * V], vocab, u_resample[k]));
  return static_cast<int>(k);
}

namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
int32_t fit(int32_t token, int vocab) { return token % vocab; }  // text ids into a smaller random-weight vocabulary
int32_t argmax_row(const float* l, int vocab) { return static_cast<int32_t>(std::max_element(l, l + vocab) - l); }

}  // namespace

std::vector<int32_t> speculative_generate(model::Model& target, int target_seq, model::Model* draft, int draft_seq, int32_t last,
                                          int n, const SpecConfig& cfg, const std::function<int32_t(int64_t)>& truth,
                                          bool force_truth, std::vector<int32_t>& history, SpecStats& stats) {
  const int tv = target.config().vocab;
  const bool sampled = !cfg.sampling.greedy();
  if (sampled && (cfg.source != DraftSource::Model || force_truth))
    throw std::invalid_argument("sampled verification needs the draft model's own distribution (acceptance: model)");
  std::vector<int32_t> out;
  std::vector<int32_t> pending = {last};  // accepted tokens the draft model has not seen yet
  std::vector<float> logits, p, q;
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
      if (sampled) q.assign(static_cast<size_t>(k) * static_cast<size_t>(tv), 0.0f);
      std::vector<int32_t> in(pending.size());
      for (size_t i = 0; i < pending.size(); ++i) in[i] = fit(pending[i], dv);
      for (int i = 0; i < k; ++i) {
        model::StepOutput o;
        o.logits = dl.data();
        if (i == 0) draft->prefill(draft_seq, in.data(), static_cast<int>(in.size()), 1, o);
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
          const uint64_t r = random_bits(cfg.seed ^ 0xC0DEull, static_cast<uint64_t>(pos) * 131u + step * 7u + static_cast<uint64_t>(i));
          const bool hit = static_cast<double>(r >> 11) * (1.0 / 9007199254740992.0) < cfg.alpha;
          d = hit ? want : static_cast<int32_t>((want + 1 + static_cast<int64_t>((r >> 3) % static_cast<uint64_t>(tv - 1))) % tv);
        } else if (sampled) {
          std::vector<float> qrow(static_cast<size_t>(dv));
          model::sampling_distribution(dl.data(), dv, cfg.sampling, qrow.data());
          std::copy(qrow.begin(), qrow.begin() + std::min(dv, tv), q.begin() + static_cast<std::ptrdiff_t>(i) * tv);
          d = draw(qrow.data(), dv, model::sample_uniform(cfg.seed ^ 0xD1ull, step, i));
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
      p.assign(static_cast<size_t>(kk + 1) * static_cast<size_t>(tv), 0.0f);
      for (int i = 0; i <= kk; ++i)
        model::sampling_distribution(&logits[static_cast<size_t>(i) * tv], tv, cfg.sampling, &p[static_cast<size_t>(i) * tv]);
      std::vector<float> ua(static_cast<size_t>(kk)), ur(static_cast<size_t>(kk + 1));
      for (int i = 0; i < kk; ++i) ua[static_cast<size_t>(i)] = model::sample_uniform(cfg.seed ^ 0xA1ull, step, i);
      for (int i = 0; i <= kk; ++i) ur[static_cast<size_t>(i)] = model::sample_uniform(cfg.seed ^ 0xB2ull, step, i);
      j = verify_sampled(drafts, p, q, tv, ua, ur, emitted);
    } else {
      std::vector<int32_t> choice(static_cast<size_t>(kk + 1));
      for (int i = 0; i <= kk; ++i)
        choice[static_cast<size_t>(i)] = force_truth ? truth(static_cast<int64_t>(out.size()) + i) : argmax_row(&logits[static_cast<size_t>(i) * tv], tv);
      j = verify_greedy(drafts, choice, emitted);
    }
    ++stats.steps;
    ++step;
    stats.drafted += kk;
    stats.accepted += j;
    stats.tested += j + (j < kk ? 1 : 0);
    stats.emitted += static_cast<int64_t>(emitted.size());
    // Keep last + the accepted drafts in the target's cache; the new last token is not cached yet.
    target.truncate(target_seq, base + 1 + j);
    if (draft && cfg.source != DraftSource::Ngram && kk > 0) {
      // The draft cached pending + d1..d_{K-1}; keep pending + the accepted ones among them.
      const int cached_drafts = kk - 1;
      const int keep = std::min(j, cached_drafts);
      draft->truncate(draft_seq, draft->length(draft_seq) - (cached_drafts - keep));
      pending.clear();
      if (j == kk) pending.push_back(drafts.back());
      pending.push_back(emitted.back());
    } else if (draft && cfg.source != DraftSource::Ngram) {
      pending.push_back(emitted.back());
    }
    for (int32_t t : emitted) {
      out.push_back(t);
      history.push_back(t);
    }
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
