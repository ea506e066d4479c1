// Where cached K/V lives in the engine. The engine keeps one contiguous KV cache per sequence
// (lib/model/model.h), so a cached prefix is "positions [pos, pos + len) of sequence `holder`",
// and a hit is Model::copy_cache(holder, request, pos, len) for each run, in position order.
#pragma once

#include <vector>

namespace ib::prefix {

struct KvRun {
  int holder = -1;  // engine sequence id that computed (and keeps) these positions
  int pos = 0;      // first position (= index of the first token in the prompt)
  int len = 0;      // tokens
};

// Appends `r` to `runs`, merging it into the last run when it continues it in the same holder.
inline void append_run(std::vector<KvRun>& runs, const KvRun& r) {
  if (r.len <= 0) return;
  if (!runs.empty() && runs.back().holder == r.holder && runs.back().pos + runs.back().len == r.pos)
    runs.back().len += r.len;
  else
    runs.push_back(r);
}

}  // namespace ib::prefix
