// The scheduler's speculative decoding, before a step's pass: each decoding request's draft, by
// prompt lookup or from a draft model (its own sequence in the draft model, caught up and stepped
// in batches), under the request's constraint where it has one. step() verifies the drafts.
#include <algorithm>
#include <memory>
#include <stdexcept>
#include <vector>

#include "serve/scheduler.h"
#include "specdec/specdec.h"

namespace ib::serve {

int Scheduler::plan_drafts(int budget) {
  // Each decoding request drafts up to spec_tokens, leaving room for the token drawn after its
  // drafts (max_tokens). A constrained request's prompt-lookup draft is cut where it leaves the
  // constraint's language; a draft model drafts under a fork of the constraint; step() verifies
  // under the constraint itself, stepped along the draws.
  std::vector<Active*> drafting;  // draft model: the requests it drafts for, and how far
  std::vector<int> rooms;
  for (Active& a : running_) {
    if (a.chunk == 0 || budget <= 0) continue;
    int room = std::min({o_.spec_tokens, a.request.max_tokens - static_cast<int>(a.output.size()) - 1, budget});
    if (o_.draft_model) room = std::min(room, o_.draft_model->config().max_positions - a.total());
    if (room <= 0) continue;
    if (o_.draft_model) {
      drafting.push_back(&a);
      rooms.push_back(room);
      budget -= room;
      continue;
    }
    std::vector<int32_t> history = a.request.prompt;
    history.insert(history.end(), a.output.begin(), a.output.end());
    a.draft = specdec::ngram_propose(history, room, o_.spec_ngram_min, o_.spec_ngram_max);
    cut_to_constraint(a);
    budget -= static_cast<int>(a.draft.size());
  }
  if (!drafting.empty()) draft_from_model(drafting, rooms);
  for (Active& a : running_) a.chunk += static_cast<int>(a.draft.size());
  return budget;
}

void Scheduler::release_draft(Active& a) {
  if (a.draft_seq >= 0) o_.draft_model->release(a.draft_seq);
  a.draft_seq = -1;
  a.draft_cached = 0;
}

void Scheduler::cut_to_constraint(Active& a) const {
  if (a.draft.empty() || !a.request.constraint) return;
  const std::unique_ptr<TokenConstraint> along = a.request.constraint->fork();
  if (!along) return;
  for (size_t t = 0; t < a.draft.size(); ++t) {
    bool complete = false;
    try {
      complete = along->accept(a.draft[t]);
    } catch (const std::exception&) {  // the token leaves the language: no draw can equal it
      a.draft.resize(t);
      return;
    }
    if (complete) {  // nothing may follow it
      a.draft.resize(t + 1);
      return;
    }
  }
}

void Scheduler::draft_from_model(const std::vector<Active*>& drafting, const std::vector<int>& rooms_asked) {
  model::Model& m = *o_.draft_model;
  std::vector<int> rooms = rooms_asked;
  // Catch up: every token the draft's cache lacks, the last one's logits giving the first draft.
  std::vector<int> seqs, counts;
  std::vector<int32_t> tokens;
  for (Active* a : drafting) {
    if (a->draft_seq < 0) {
      a->draft_seq =
          m.new_sequence(std::min(static_cast<int>(a->request.prompt.size()) + a->request.max_tokens, m.config().max_positions));
      a->draft_cached = 0;
    }
    seqs.push_back(a->draft_seq);
    counts.push_back(a->total() - a->draft_cached);
    for (int i = a->draft_cached; i < a->total(); ++i) tokens.push_back(a->token(i));
    a->draft_cached = a->total();
  }
  const int n = static_cast<int>(drafting.size());
  // A constrained request drafts along a fork of its constraint: the draft model's greedy token
  // among those the constraint allows (its draws are made among them too); its draft ends where
  // the constraint allows nothing or is complete. Then the pass's logits are read on the host.
  std::vector<std::unique_ptr<TokenConstraint>> along(drafting.size());
  bool host = false;
  for (size_t i = 0; i < drafting.size(); ++i)
    if (drafting[i]->request.constraint) {
      along[i] = drafting[i]->request.constraint->fork();
      host |= along[i] != nullptr;
    }
  const int V = m.config().vocab;
  std::vector<float> logits;
  model::SamplingParams greedy;
  greedy.temperature = 0.0f;
  // Request i's draft token t from its row's logits `l` (or the backend's greedy token): -1 ends its draft.
  auto choose = [&](size_t i, int t, const float* l, int32_t backend_greedy) -> int32_t {
    if (!host) return backend_greedy;
    if (!along[i]) return static_cast<int32_t>(std::max_element(l, l + V) - l);
    const Active& a = *drafting[i];
    const int left = a.request.max_tokens - static_cast<int>(a.output.size()) - t;
    const int32_t token = along[i]->choose(l, V, greedy, 0.0f, left);
    if (token < 0) return -1;  // its draft stays t tokens long: the steps below feed only full drafts
    try {
      if (along[i]->accept(token)) rooms[i] = t + 1;  // complete: nothing may follow this token
    } catch (const std::exception&) {
      return -1;
    }
    return token;
  };
  std::vector<int32_t> next(drafting.size());
  model::StepOutput so;  // greedy: a point-mass draft
  if (host) {
    logits.resize(static_cast<size_t>(n) * static_cast<size_t>(V));
    so.logits = logits.data();
  } else {
    so.next = next.data();
  }
  m.prefill_batch(seqs.data(), counts.data(), n, tokens.data(), so, /*last_only=*/true);
  for (int i = 0; i < n; ++i) {
    Active* a = drafting[static_cast<size_t>(i)];
    const int32_t token = choose(static_cast<size_t>(i), 0, logits.data() + static_cast<size_t>(i) * static_cast<size_t>(V),
                                 next[static_cast<size_t>(i)]);
    a->draft.clear();
    if (token >= 0) a->draft.push_back(token);
  }
  // Then one batched step per further token, for the requests that have room for it.
  for (int t = 1;; ++t) {
    std::vector<int> step_seqs;
    std::vector<int32_t> fed;
    std::vector<Active*> who;
    std::vector<size_t> index;  // who[k] is drafting[index[k]]
    for (int i = 0; i < n; ++i)
      if (rooms[static_cast<size_t>(i)] > t && static_cast<int>(drafting[static_cast<size_t>(i)]->draft.size()) == t) {
        Active* a = drafting[static_cast<size_t>(i)];
        step_seqs.push_back(a->draft_seq);
        fed.push_back(a->draft.back());
        who.push_back(a);
        index.push_back(static_cast<size_t>(i));
        ++a->draft_cached;
      }
    if (who.empty()) break;
    std::vector<int32_t> out(who.size());
    model::StepOutput ds;
    if (host) {
      logits.resize(who.size() * static_cast<size_t>(V));
      ds.logits = logits.data();
    } else {
      ds.next = out.data();
    }
    m.decode(step_seqs.data(), fed.data(), static_cast<int>(who.size()), ds);
    for (size_t k = 0; k < who.size(); ++k) {
      const int32_t token = choose(index[k], t, logits.data() + k * static_cast<size_t>(V), out[k]);
      if (token >= 0) who[k]->draft.push_back(token);
    }
  }
}

}  // namespace ib::serve
