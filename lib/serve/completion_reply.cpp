#include "serve/completion_reply.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "core/errors.h"
#include "serve/stream_text.h"

namespace ib::serve {

CompletionReply::CompletionReply(Server server, ApiRequest r, std::vector<std::vector<int32_t>> prompts, std::string id,
                                 int64_t created)
    : s_(std::move(server)), r_(std::move(r)), prompts_(std::move(prompts)), id_(std::move(id)), created_(created) {
  for (const auto& p : prompts_) prompt_tokens_ += static_cast<int64_t>(p.size());
  choices_.resize(prompts_.size() * static_cast<size_t>(r_.n));
}

// Prompt p's choice i at index p·n + i, as OpenAI numbers them.
void CompletionReply::submit(const Request& q, const std::shared_ptr<SchemaConstraint>& schema) {
  for (size_t k = 0; k < choices_.size(); ++k) {
    const size_t i = k % static_cast<size_t>(r_.n);
    Request qi = q;
    qi.prompt = prompts_[k / static_cast<size_t>(r_.n)];
    qi.sampling->seed = q.sampling->seed + static_cast<uint64_t>(i);
    // Its own document of the schema compiled once (the masks' caches shared too).
    if (schema) qi.constraint = k == 0 ? schema : std::make_shared<SchemaConstraint>(schema->compiled());
    try {
      choices_[k].stream = s_.loop.submit(std::move(qi), &choices_[k].id);
    } catch (const InputError&) {
      cancel_all();
      throw;
    }
  }
}

std::vector<int64_t> CompletionReply::ids() const {
  std::vector<int64_t> out;
  for (const Choice& c : choices_)
    if (c.stream) out.push_back(c.id);
  return out;
}

void CompletionReply::cancel_all() {
  for (const Choice& c : choices_)
    if (c.stream) s_.loop.cancel(c.id);
}

Usage CompletionReply::usage() const {
  Usage u{prompt_tokens_, 0};
  for (const Choice& c : choices_) {
    u.completion_tokens += c.answer.tokens;
    if (!c.stream) continue;
    const auto [drafted, kept] = c.stream->speculation();
    u.draft_tokens += drafted;
    u.accepted_tokens += kept;
  }
  return u;
}

std::string CompletionReply::call_ids(size_t choice) const { return fmt::format("{}{}_", s_.call_id_prefix, choice); }

std::variant<std::string, ApiError, CompletionReply::ClientGone> CompletionReply::whole(
    const std::function<bool()>& client_gone) {
  std::vector<ChoiceText> out;
  for (size_t k = 0; k < choices_.size(); ++k) {
    Choice& c = choices_[k];
    bool done = false;
    while (!(done = c.stream->wait(c.tokens.size(), c.tokens, 0.25))) {
      if (client_gone()) {
        // Nobody would read the answer: its sequences go back to the engine now, not at the end.
        cancel_all();
        return ClientGone{};
      }
      if (!r_.stop.empty() && s_.text.answer_of(r_, c.tokens, false).stop_string) break;
    }
    c.answer = s_.text.answer_of(r_, c.tokens, done && c.stream->stopped());
    if (!done) s_.loop.cancel(c.id);  // a stop sequence ended it: the rest is not generated
    if (!c.answer.stop_string && !c.stream->error().empty()) {
      cancel_all();
      return s_.engine_error(c.stream->error());
    }
    const std::string ended = c.answer.stop_string || c.stream->stopped() ? "stop" : "length";
    ChoiceText t{
        c.answer.text, ended,
        r_.logprobs >= 0 ? s_.text.logprob_texts(c.stream->logprobs(0), c.answer.tokens) : std::vector<TokenLogprobText>{}};
    if (r_.echo) {
      s_.text.echo_prompt(r_, prompts_, k / static_cast<size_t>(r_.n), c.stream->prompt_logprobs(), t);
      if (r_.max_tokens == 0) c.answer.tokens = 0;  // the prompt scored: its one generated token not counted
    }
    if (r_.chat && r_.tools.choice != ToolChoice::None) {  // the text read back as tool calls
      ToolOutput calls = read_tool_output(r_.tools, c.answer.text, call_ids(k));
      t.finish_reason = tool_finish_reason(r_.tools, calls, ended);
      t.text = std::move(calls.content);
      t.tool_calls = std::move(calls.calls);
      t.content_null = calls.content_null;
    }
    out.push_back(std::move(t));
  }
  return completion_json(r_, id_, created_, s_.model_name, out, usage());
}

std::string CompletionReply::next_events() {
  if (finished_) return {};
  bool waited = false, all_ended = true;
  std::string out;
  for (size_t i = 0; i < choices_.size(); ++i) {
    if (choices_[i].ended) continue;
    bool ended = false;
    out += choice_events(i, !waited, ended);
    waited = true;
    all_ended = all_ended && ended;
  }
  if (all_ended) {
    if (r_.include_usage) out += usage_chunk(r_, id_, created_, s_.model_name, usage());
    out += "data: [DONE]\n\n";
    finished_ = true;
  }
  return out;
}

// Choice i's chunks since the last call: its new text as a chunk of its index, its finish reason
// when it ends.
std::string CompletionReply::choice_events(size_t i, bool wait, bool& ended) {
  Choice& c = choices_[i];
  std::string out;
  const bool done = c.stream->wait(c.tokens.size(), c.tokens, wait ? 0.25 : 0.0);
  const bool stopped = done && c.stream->stopped();
  c.answer = s_.text.answer_of(r_, c.tokens, stopped);
  const bool end = done || c.answer.stop_string;
  // Text that may yet turn out to start a stop sequence is held back until it does not.
  size_t limit = end || r_.stop.empty() ? c.answer.text.size() : stop_safe_end(c.answer.text, r_.stop);
  // With tools the model may choose: content until a call's tag (the calls are sent whole at the
  // end); required: all of it is the calls' array.
  const ToolChoice tools = r_.chat ? r_.tools.choice : ToolChoice::None;
  if (tools == ToolChoice::Auto) limit = std::min(limit, hermes_content_end(c.answer.text));
  if (tools == ToolChoice::Required) limit = 0;
  const std::string delta = text_delta(c.answer.text.substr(0, limit), c.sent, end);
  const int index = static_cast<int>(i);
  // The log-probabilities of the tokens received since the last chunk (of the answer's tokens).
  std::vector<TokenLogprobText> lps;
  if (r_.logprobs >= 0) {
    std::vector<TokenLogprob> fresh = c.stream->logprobs(c.logprobs_sent);
    lps = s_.text.logprob_texts(fresh, c.answer.tokens - static_cast<int64_t>(c.logprobs_sent));
  }
  // A chunk for every token that arrived, even one whose text is held back (a character's bytes
  // not yet complete, a stop string not yet ruled out), so a client times each token as vLLM's
  // server lets it; none before the first token (a client takes its first chunk as the time to
  // first token).
  if (!delta.empty() || c.tokens.size() > c.tokens_sent || (c.first && end) || !lps.empty()) {
    c.tokens_sent = c.tokens.size();
    const size_t generated_lps = lps.size();
    // echo: the prompt and its tokens' log-probabilities ahead of the first chunk's own; with
    // max_tokens 0 the one generated token is not shown (nor counted).
    ChoiceText shown{delta, "", std::move(lps)};
    if (r_.echo && c.first) {
      s_.text.echo_prompt(r_, prompts_, i / static_cast<size_t>(r_.n), c.stream->prompt_logprobs(), shown);
      if (r_.max_tokens == 0) c.answer.tokens = 0;
    }
    if (r_.echo && r_.max_tokens == 0 && !c.first) shown = ChoiceText{};
    lps = std::move(shown.logprobs);
    const Usage so_far = usage();
    if (tools == ToolChoice::Named)  // the text is the call's arguments, streamed as they come
      out +=
          tool_calls_chunk(r_, id_, created_, s_.model_name, {{0, c.first ? call_ids(i) + "0" : "", r_.tools.named, shown.text}},
                           c.first, so_far, index, &lps, c.logprobs_offset);
    else if (tools == ToolChoice::Required)
      out += tool_calls_chunk(r_, id_, created_, s_.model_name, {}, c.first, so_far, index, &lps, c.logprobs_offset);
    else
      out += stream_chunk(r_, id_, created_, s_.model_name, shown.text, "", c.first, so_far, index, &lps, c.logprobs_offset);
    c.first = false;
    c.logprobs_sent += generated_lps;
    for (const TokenLogprobText& t : lps) c.logprobs_offset += t.token.size();
  }
  if (!end) return out;
  ended = c.ended = true;
  if (!done) s_.loop.cancel(c.id);  // a stop sequence ended it: the rest is not generated
  if (!c.answer.stop_string && !c.stream->error().empty())
    return out + "data: " + error_json(s_.engine_error(c.stream->error())) + "\n\n";
  std::string reason = c.answer.stop_string || stopped ? "stop" : "length";
  if (r_.echo && r_.max_tokens == 0) reason = "length";  // the prompt scored, as unstreamed
  if (tools == ToolChoice::Auto || tools == ToolChoice::Required) {
    // The calls, whole, after what content was sent; a text that holds none is content.
    const ToolOutput calls = read_tool_output(r_.tools, c.answer.text, call_ids(i));
    const std::string& content = calls.calls.empty() ? c.answer.text : calls.content;
    const std::string rest = text_delta(content, c.sent, true);
    if (!rest.empty()) out += stream_chunk(r_, id_, created_, s_.model_name, rest, "", false, usage(), index);
    std::vector<ToolCallDelta> whole;
    for (const ToolCall& t : calls.calls) whole.push_back({static_cast<int>(whole.size()), t.id, t.name, t.arguments});
    if (!whole.empty()) out += tool_calls_chunk(r_, id_, created_, s_.model_name, whole, false, usage(), index);
    reason = tool_finish_reason(r_.tools, calls, reason);
  }
  return out + stream_chunk(r_, id_, created_, s_.model_name, "", reason, false, usage(), index);
}

}  // namespace ib::serve
