#include "core/output.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "core/errors.h"

namespace ib {

namespace {
bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

// Removes the directories a failed create_run_dir made, deepest first (nothing was written in them).
void remove_dirs(const std::vector<std::string>& created) {
  for (auto it = created.rbegin(); it != created.rend(); ++it) ::rmdir(it->c_str());
}

std::string stamp(const char* format) {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}
}  // namespace

std::string utc_stamp_compact() { return stamp("%Y%m%dT%H%M%SZ"); }
std::string utc_stamp_iso() { return stamp("%Y-%m-%dT%H:%M:%SZ"); }

void write_file_atomic(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw InputError(tmp + ": cannot write: " + std::strerror(errno));
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw InputError(tmp + ": cannot write: " + std::strerror(e));
    }
    done += static_cast<size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    throw InputError(path + ": cannot write: " + std::strerror(e));
  }
}

std::string choose_run_dir(const std::string& requested, const std::string& label) {
  if (!requested.empty()) {
    // Any file a run writes there, not only results.json: a report.md or results.csv left by
    // someone is not overwritten either.
    for (const char* file : {"results.json", "results.csv", "report.md"})
      if (exists(requested + "/" + file))
        throw InputError(fmt::format("--output {}: already holds {}; runs are never overwritten, choose another directory", requested, file));
    return requested;
  }
  const std::string base = "results/runs/" + utc_stamp_compact() + "-" + label;
  std::string dir = base;
  for (int i = 2; exists(dir); ++i) dir = fmt::format("{}-{}", base, i);
  return dir;
}

std::vector<std::string> create_run_dir(const std::string& dir) {
  std::vector<std::string> created;
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    partial = dir.substr(0, pos);
    if (partial.empty()) continue;
    if (::mkdir(partial.c_str(), 0755) == 0) {
      created.push_back(partial);
    } else if (errno != EEXIST) {
      const int e = errno;
      remove_dirs(created);
      throw InputError("--output " + dir + ": cannot create " + partial + ": " + std::strerror(e));
    }
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    remove_dirs(created);
    throw InputError("--output " + dir + ": not a directory");
  }
  // Tried, not asked (access(W_OK) says yes to root where the file system still refuses, as sysfs
  // does): the first result file is created, then removed.
  const std::string probe = dir + "/results.json.tmp";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd >= 0) {
    ::close(fd);
    ::unlink(probe.c_str());
  } else if (errno != EEXIST) {
    const int e = errno;
    remove_dirs(created);
    throw InputError("--output " + dir + ": not writable: " + std::strerror(e));
  }
  return created;
}

void remove_run_output(const std::string& dir, const std::vector<std::string>& created, const std::vector<std::string>& extra_files) {
  std::vector<std::string> names = {"results.json", "results.csv", "report.md"};
  names.insert(names.end(), extra_files.begin(), extra_files.end());
  for (const auto& name : names) {
    const std::string path = dir + "/" + name;
    ::unlink(path.c_str());
    ::unlink((path + ".tmp").c_str());
  }
  remove_dirs(created);  // an rmdir fails, harmlessly, where something else is in the directory
}

}  // namespace ib
