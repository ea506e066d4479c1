// Workloads read from files: ShareGPT-style conversations (serve/conversation_dataset.h) and
// Mooncake-style arrival traces (serve/arrival_trace.h), over the bounded JSON Lines reader
// (core/json_lines.h).
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "core/errors.h"
#include "serve/arrival_trace.h"
#include "serve/conversation_dataset.h"

namespace fs = std::filesystem;
using namespace ib;
using namespace ib::serve;

namespace {

// A file of `text` in a directory of this test's own.
std::string file_of(const std::string& name, const std::string& text) {
  const fs::path dir =
      fs::temp_directory_path() / ("ib-workload-files-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                                   "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << text;
  return (dir / name).string();
}

// The InputError `f` throws, or "" when it throws none.
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ConversationDataset, ShareGptArrayAndOpenAiLinesGiveTheFirstAnsweredUserTurn) {
  // ShareGPT's own layout: a pretty-printed array; a conversation opening with the assistant, and
  // one with no answer, are skipped and counted.
  const std::string sharegpt = file_of("sg.json", R"([
  {"id": "a", "conversations": [{"from": "human", "value": "What is 2+2?"}, {"from": "gpt", "value": "4."},
                                {"from": "human", "value": "And 3+3?"}, {"from": "gpt", "value": "6."}]},
  {"id": "b", "conversations": [{"from": "gpt", "value": "Hello!"}]},
  {"id": "c", "conversations": [{"from": "system", "value": "Be brief."}, {"from": "human", "value": "Hi"},
                                {"from": "gpt", "value": "Hi there"}]},
  {"id": "d", "conversations": [{"from": "human", "value": "unanswered"}]}
])");
  size_t skipped = 0;
  const auto a = read_conversations(sharegpt, 100, &skipped);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].prompt, "What is 2+2?");
  EXPECT_EQ(a[0].reply, "4.");
  EXPECT_EQ(a[1].prompt, "Hi");
  EXPECT_EQ(a[1].reply, "Hi there");
  EXPECT_EQ(skipped, 2u);

  const std::string lines = file_of("chats.jsonl",
                                    "{\"messages\": [{\"role\": \"user\", \"content\": \"one\"}, {\"role\": \"assistant\", "
                                    "\"content\": \"uno\"}]}\n\n"
                                    "{\"messages\": [{\"role\": \"user\", \"content\": \"two\"}, {\"role\": \"assistant\", "
                                    "\"content\": \"dos\"}]}\r\n"
                                    "{\"messages\": [{\"role\": \"user\", \"content\": \"three\"}, {\"role\": \"assistant\", "
                                    "\"content\": \"tres\"}]}");
  const auto b = read_conversations(lines, 2);  // the limit stops the read
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[1].prompt, "two");
  EXPECT_EQ(b[1].reply, "dos");
}

TEST(ConversationDataset, BadInputNamesTheFileAndLine) {
  const std::string bad_json = file_of("bad.jsonl", "{\"messages\": []}\n{\"messages\": [oops\n");
  EXPECT_NE(error_of([&] { read_conversations(bad_json, 10); }).find("bad.jsonl:2: not JSON"), std::string::npos);
  const std::string not_text = file_of("nt.jsonl",
                                       "{\"messages\": [{\"role\": \"user\", \"content\": [1]}, "
                                       "{\"role\": \"assistant\", \"content\": \"x\"}]}\n");
  EXPECT_NE(error_of([&] { read_conversations(not_text, 10); }).find("nt.jsonl:1: messages[0].content is not text"),
            std::string::npos);
  const std::string no_list = file_of("nl.jsonl", "{\"prompt\": \"hi\"}\n");
  EXPECT_NE(error_of([&] { read_conversations(no_list, 10); }).find("nl.jsonl:1: a conversation has `conversations`"),
            std::string::npos);
  const std::string none = file_of("none.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}]}\n");
  EXPECT_NE(error_of([&] { read_conversations(none, 10); }).find("no conversation with a user turn"), std::string::npos);
  EXPECT_NE(error_of([&] { read_conversations("/nonexistent/sharegpt.json", 10); }).find("/nonexistent/sharegpt.json"),
            std::string::npos);
  EXPECT_NE(error_of([&] { read_conversations("/dev/zero", 10); }), "");
}

TEST(ConversationDataset, AJsonArrayIsReadAnElementAtATime) {
  // ShareGPT's own file is one array of 650 MB: read element by element, stopping at the limit.
  std::string big = "[";
  for (int i = 0; i < 2000; ++i)
    big += std::string(i ? "," : "") + "{\"conversations\": [{\"from\": \"human\", \"value\": \"q" + std::to_string(i) +
           "\"}, {\"from\": \"gpt\", \"value\": \"a\"}]}";
  const std::string many = file_of("many.json", big + "]");
  const auto first = read_conversations(many, 3);
  ASSERT_EQ(first.size(), 3u);
  EXPECT_EQ(first[2].prompt, "q2");
  EXPECT_EQ(read_conversations(many, 1u << 20).size(), 2000u);
  // Past the limit the rest is never parsed: a syntax error after it goes unseen.
  const std::string tail = file_of("tail.json", big.substr(0, 400) + "]]] not json");
  EXPECT_EQ(read_conversations(tail, 2).size(), 2u);
  EXPECT_NE(error_of([&] { read_conversations(tail, 100); }).find("tail.json: not JSON at byte"), std::string::npos);
  const std::string scalar = file_of("scalar.json", R"([{"messages": []}, 7])");
  EXPECT_NE(error_of([&] { read_conversations(scalar, 10); }).find("scalar.json: entry 1: a conversation is a JSON object"),
            std::string::npos);
  const std::string deep = file_of("deep.json", "[" + std::string(100, '[') + std::string(100, ']') + "]");
  EXPECT_NE(error_of([&] { read_conversations(deep, 10); }).find("deep.json: entry 0: JSON nested deeper than 64"),
            std::string::npos);
}

TEST(ArrivalTrace, MooncakeLinesGiveTimesLengthsAndBlocks) {
  const std::string trace = file_of("trace.jsonl",
                                    "{\"timestamp\": 27482, \"input_length\": 6955, \"output_length\": 52, \"hash_ids\": "
                                    "[46, 47, 48]}\n"
                                    "{\"timestamp\": 27482, \"input_length\": 100, \"output_length\": 4, \"hash_ids\": [46]}\n"
                                    "{\"timestamp\": 30535}\n"
                                    "{\"timestamp\": 31000}\n");
  const auto t = read_arrival_trace(trace, 1e-3, 3);
  ASSERT_EQ(t.size(), 3u);
  EXPECT_DOUBLE_EQ(t[0].time, 0.0);
  EXPECT_DOUBLE_EQ(t[1].time, 0.0);
  EXPECT_NEAR(t[2].time, 3.053, 1e-9);
  EXPECT_EQ(t[0].input_length, 6955);
  EXPECT_EQ(t[0].output_length, 52);
  EXPECT_EQ(t[0].hash_ids, (std::vector<int64_t>{46, 47, 48}));
  EXPECT_EQ(t[2].input_length, 0);
  EXPECT_TRUE(t[2].hash_ids.empty());
  const auto s = read_arrival_trace(trace, 1.0, 100);
  EXPECT_EQ(s.size(), 4u);
  EXPECT_DOUBLE_EQ(s[3].time, 31000.0 - 27482.0);
}

TEST(ArrivalTrace, BadInputNamesTheFileAndLine) {
  const std::string back = file_of("back.jsonl", "{\"timestamp\": 5}\n{\"timestamp\": 4}\n");
  EXPECT_NE(error_of([&] { read_arrival_trace(back, 1, 10); }).find("back.jsonl:2: timestamp 4 is before"), std::string::npos);
  const std::string no_time = file_of("nt.jsonl", "{\"timestamp\": 5}\n\n{\"time\": 6}\n");
  EXPECT_NE(error_of([&] { read_arrival_trace(no_time, 1, 10); }).find("nt.jsonl:3: a request is an object with a numeric"),
            std::string::npos);
  const std::string neg = file_of("neg.jsonl", "{\"timestamp\": 5, \"input_length\": -3}\n");
  EXPECT_NE(error_of([&] { read_arrival_trace(neg, 1, 10); }).find("neg.jsonl:1: input_length is a token count"),
            std::string::npos);
  const std::string ids = file_of("ids.jsonl", "{\"timestamp\": 5, \"hash_ids\": [1, \"x\"]}\n");
  EXPECT_NE(error_of([&] { read_arrival_trace(ids, 1, 10); }).find("ids.jsonl:1: hash_ids is a list of integers"),
            std::string::npos);
  const std::string empty = file_of("empty.jsonl", "\n  \n");
  EXPECT_NE(error_of([&] { read_arrival_trace(empty, 1, 10); }).find("no request in the trace"), std::string::npos);
  const std::string long_line = file_of("long.jsonl", "{\"timestamp\": 1, \"pad\": \"" + std::string(2u << 20, 'x') + "\"}\n");
  EXPECT_NE(error_of([&] { read_arrival_trace(long_line, 1, 10); }).find("long.jsonl:1: a line longer than"), std::string::npos);
}
