// Result files: atomic writes (temporary name + rename) into a run directory that never
// overwrites an earlier run.
#pragma once

#include <string>
#include <vector>

namespace ib {

// Writes `content` to `path` through `path.tmp` + fsync + rename; throws InputError on failure.
void write_file_atomic(const std::string& path, const std::string& content);

// "20261130T120102Z" (UTC, for directory names) and "2026-11-30T12:01:02Z" (for metadata).
std::string utc_stamp_compact();
std::string utc_stamp_iso();

// Decides the run directory without creating it: `requested` if given (refused when it already
// holds a run), else results/runs/<UTC>-<label>[-N]. Throws InputError.
std::string choose_run_dir(const std::string& requested, const std::string& label);
// Creates it (with parents); throws InputError naming the directory and the reason. Returns the
// directories it created, parents first (an existing directory is not among them).
std::vector<std::string> create_run_dir(const std::string& dir);
// Undoes a run that ended in bad input: removes the result files (and their temporaries) from
// `dir`, then the directories `created` by create_run_dir, deepest first, when they are empty.
void remove_run_output(const std::string& dir, const std::vector<std::string>& created,
                       const std::vector<std::string>& extra_files = {});

}  // namespace ib
