#include "serve/answer_text.h"

#include <algorithm>
#include <iterator>
#include <optional>

#include "serve/stream_text.h"

namespace ib::serve {

Answer AnswerText::answer_of(const ApiRequest& r, std::vector<int32_t> tokens, bool ended_at_stop_token) const {
  Answer a;
  a.tokens = static_cast<int64_t>(tokens.size());
  if (ended_at_stop_token && !tokens.empty() &&
      (std::find(eos_ids_.begin(), eos_ids_.end(), tokens.back()) != eos_ids_.end() ||
       std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(), tokens.back()) != r.stop_token_ids.end()))
    tokens.pop_back();  // not text
  a.text = tok_->decode(tokens, true);
  if (r.stop.empty()) return a;
  const std::optional<size_t> cut = stop_cut(a.text, r.stop, r.include_stop_str);
  if (!cut) return a;
  // The fewest tokens whose text holds the stop sequence: what the request took.
  size_t lo = 1, hi = tokens.size();
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (stop_cut(tok_->decode(std::vector<int32_t>(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(mid)), true),
                 r.stop, false))
      hi = mid;
    else
      lo = mid + 1;
  }
  a.tokens = static_cast<int64_t>(lo);
  a.text.resize(*cut);
  a.stop_string = true;
  return a;
}

std::vector<TokenLogprobText> AnswerText::logprob_texts(const std::vector<TokenLogprob>& l, int64_t count) const {
  std::vector<TokenLogprobText> out;
  auto text = [&](int32_t id) { return tok_->decode({id}, false); };
  for (size_t i = 0; i < l.size() && static_cast<int64_t>(i) < count; ++i) {
    TokenLogprobText t;
    t.token = text(l[i].token);
    t.logprob = l[i].logprob;
    for (const auto& [id, lp] : l[i].top) t.top.emplace_back(text(id), lp);
    out.push_back(std::move(t));
  }
  return out;
}

void AnswerText::echo_prompt(const ApiRequest& r, const std::vector<std::vector<int32_t>>& prompts, size_t p,
                             const std::vector<TokenLogprob>& scored, ChoiceText& t) const {
  const std::vector<int32_t>& prompt_ids = prompts[p];
  // A prompt sent as ids is shown as its tokens' text; one sent as text, as it was sent.
  const std::string prompt = p < r.prompt_ids.size() ? tok_->decode(prompt_ids, false) : r.prompts[p - r.prompt_ids.size()];
  if (r.max_tokens == 0) {
    t.text.clear();
    t.logprobs.clear();
    t.finish_reason = "length";
  }
  t.text = prompt + t.text;
  if (r.logprobs < 0) return;
  std::vector<TokenLogprobText> all;
  all.push_back({tok_->decode({prompt_ids[0]}, false), 0, {}, /*known=*/false});
  for (TokenLogprobText& x : logprob_texts(scored, static_cast<int64_t>(scored.size()))) all.push_back(std::move(x));
  all.insert(all.end(), std::make_move_iterator(t.logprobs.begin()), std::make_move_iterator(t.logprobs.end()));
  t.logprobs = std::move(all);
}

}  // namespace ib::serve
