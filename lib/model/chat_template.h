// A checkpoint's chat template (Jinja, as transformers' apply_chat_template renders it), rendered
// by minja (third_party/minja, the Jinja implementation llama.cpp uses; Debian packages none).
// Used by `serve`'s /v1/chat/completions and by experiments' chat prompts.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace minja {
class TemplateNode;
}

namespace ib::model {

struct ChatTurn {
  std::string role;
  std::string content;
  // The message's other fields as a JSON object's text (an assistant turn's tool_calls, a tool
  // turn's tool_call_id and name), merged into the message the template reads; "" for none.
  std::string fields_json = {};
};

class ChatTemplate {
 public:
  // Parses `source` as transformers does (trim_blocks, lstrip_blocks); a template that does not
  // parse is an InputError naming `origin` (the file and key it came from).
  ChatTemplate(std::string source, std::string bos_token, std::string eos_token, std::string origin);
  // The conversation as text, with the assistant's turn opened when add_generation_prompt. A
  // template that fails (raise_exception, a missing variable it needs) is an InputError naming
  // the origin and the template's own message. `tools_json`: the request's tools as a JSON
  // array's text, the template's `tools` (undefined when ""), as transformers passes them.
  std::string render(const std::vector<ChatTurn>& messages, bool add_generation_prompt, const std::string& tools_json = {}) const;
  const std::string& origin() const { return origin_; }
  const std::string& source() const { return source_; }

 private:
  std::string source_, bos_, eos_, origin_;
  std::shared_ptr<minja::TemplateNode> root_;
};

// The checkpoint's own template: a GGUF file's tokenizer.chat_template, or a directory's
// tokenizer_config.json chat_template (a string, or the list of named templates' "default"), with
// its bos_token and eos_token. nullopt when the checkpoint has none.
std::optional<ChatTemplate> checkpoint_chat_template(const std::string& checkpoint);

}  // namespace ib::model
