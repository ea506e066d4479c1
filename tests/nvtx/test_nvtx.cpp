// A real CPU run under the recording injection library: the ranges, their names and nesting.
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "process.h"

namespace ib::test {
namespace {

struct Event {
  bool push;
  std::string domain, name;
};

std::vector<Event> parse_log(const std::string& text) {
  std::vector<Event> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string kind, domain, name;
    std::getline(f, kind, '\t');
    std::getline(f, domain, '\t');
    std::getline(f, name);
    out.push_back({kind == "push", domain, name});
  }
  return out;
}

TEST(Nvtx, RunEmitsNestedRangesPerRow) {
  std::string dir = make_temp_dir();
  write_text(dir + "/s.yaml",
             "experiments:\n  - name: tiny\n    kind: ceiling\n    variants: [memcpy]\n    bytes: [1MiB, 2MiB]\n"
             "    warmup: 1\n    min_samples: 3\n    min_time: 0\n    timeout: 1s\n");
  ProcessOptions o;
  o.cwd = dir;
  o.env = {{"NVTX_INJECTION64_PATH", IB_INJECT}, {"IB_NVTX_LOG", dir + "/nvtx.log"}};
  auto r = run_process({IB_BINARY, "run", "s.yaml", "--backend", "cpu", "-o", "out", "-q"}, o);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto events = parse_log(read_text(dir + "/nvtx.log"));
  ASSERT_FALSE(events.empty()) << "the injection library recorded nothing";

  // Balanced, all in our domain; each row is the nested path group/experiment/variant/config
  // holding validate -> warmup -> measure.
  std::vector<std::string> stack;
  std::vector<std::string> row_paths;                  // paths of depth 4
  std::vector<std::vector<std::string>> row_children;  // the ranges directly inside each
  for (const auto& e : events) {
    EXPECT_EQ(e.domain, "infer-bench");
    if (e.push) {
      if (stack.size() == 4) row_children.back().push_back(e.name);
      stack.push_back(e.name);
      if (stack.size() == 4) {
        row_paths.push_back(stack[0] + "/" + stack[1] + "/" + stack[2] + "/" + stack[3]);
        row_children.emplace_back();
      }
      EXPECT_LE(stack.size(), 5u);
    } else {
      ASSERT_FALSE(stack.empty()) << "pop without push";
      stack.pop_back();
    }
  }
  EXPECT_TRUE(stack.empty()) << "unbalanced ranges";
  ASSERT_GE(row_paths.size(), 4u);
  EXPECT_EQ(row_paths.front(), "ceiling/peak-copy/memcpy/default");  // the start-up peaks
  std::vector<std::string> last(row_paths.end() - 2, row_paths.end());
  EXPECT_EQ(last, (std::vector<std::string>{"ceiling/tiny/memcpy/bytes=1MiB", "ceiling/tiny/memcpy/bytes=2MiB"}));
  for (size_t i = row_paths.size() - 2; i < row_paths.size(); ++i)
    EXPECT_EQ(row_children[i], (std::vector<std::string>{"validate", "warmup", "measure"})) << row_paths[i];
}

}  // namespace
}  // namespace ib::test
