// Request arrival times from a recorded trace, in place of a seeded arrival process: the bursts,
// lulls and daily shape of a real service's traffic. The format is Mooncake's trace (JSON Lines,
// a request per line): `timestamp`, and optionally `input_length`, `output_length` and
// `hash_ids` (the prompt's 512-token blocks; requests with the same leading ids share that
// prefix, which is what a prefix cache sees in production).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ib::serve {

struct TraceEntry {
  double time = 0;                // seconds after the trace's first request
  int input_length = 0;           // prompt tokens; 0: not in the trace
  int output_length = 0;          // output tokens; 0: not in the trace
  std::vector<int64_t> hash_ids;  // the prompt's blocks, in order; empty: not in the trace
};

// The first `limit` requests of the JSON Lines trace at `path`; `timestamp` is in `unit` seconds
// (0.001 for Mooncake's milliseconds). Timestamps must not decrease. A line that is not an
// object with a numeric `timestamp`, a negative length, or a trace with no request is an
// InputError naming the file and line.
std::vector<TraceEntry> read_arrival_trace(const std::string& path, double unit, size_t limit);

}  // namespace ib::serve
