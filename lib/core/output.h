// Result files: atomic writes (temporary name + rename) into a run directory that never
// overwrites an earlier run.
#pragma once

#include <sys/types.h>
#include <string>
#include <vector>

namespace ib {

// Writes `content` to `path` through `path.<pid>.tmp` + fsync + rename; on any failure (a full
// disk: ENOSPC) throws OutputError naming the file and errno, and `path` keeps its last content.
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
// Removes the directories create_run_dir made, deepest first, where they are empty (rmdir).
void remove_created_dirs(const std::vector<std::string>& created);

// An exclusive lock on a run directory (flock on DIR/.infer-bench.lock) for the object's life: of
// two runs given one --output, one holds it and the other fails with an InputError at once,
// before it writes or removes anything there. Also refuses a directory that a run finished in
// while this one waited to lock it.
class RunDirLock {
 public:
  explicit RunDirLock(const std::string& dir);
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;
  static constexpr const char* kFileName = ".infer-bench.lock";

 private:
  std::string path_;
  int fd_ = -1;
};

// Undoes a run that ended in bad input: removes the result files (and their temporaries) from
// `dir`, then the directories `created` by create_run_dir, deepest first, when they are empty.
void remove_run_output(const std::string& dir, const std::vector<std::string>& created,
                       const std::vector<std::string>& extra_files = {});

}  // namespace ib
