// Conversations to take prompts from, as vLLM's ShareGPT benchmark does: each conversation's
// first user turn is a prompt, and the assistant's answer to it says how long an output to ask
// for. Real prompts have the lengths real users type (a long tail), which no seeded random
// length reproduces.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ib::serve {

struct Conversation {
  std::string prompt, reply;  // the first user turn, and the assistant turn that answers it
};

// A ShareGPT-style file: JSON Lines (one conversation per line), or one JSON array of them
// (ShareGPT's own, read an element at a time: its 650 MB are never held whole). A conversation is an
// object with `conversations` ([{from: human|user, value}, {from: gpt|assistant|chatgpt, value},
// ...], ShareGPT's) or `messages` ([{role: user, content}, {role: assistant, content}, ...],
// OpenAI's). Conversations without a user turn answered by the assistant are skipped and
// counted in `skipped`; a line that is not JSON, or a turn that is not text, is an InputError
// naming the file and line (or entry). At most `limit` conversations are read.
std::vector<Conversation> read_conversations(const std::string& path, size_t limit, size_t* skipped = nullptr);

}  // namespace ib::serve
