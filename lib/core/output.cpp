#include "core/output.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include <fmt/format.h>

#include "core/errors.h"

namespace ib {

namespace {
bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
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

void remove_created_dirs(const std::vector<std::string>& created) {
  for (auto it = created.rbegin(); it != created.rend(); ++it) ::rmdir(it->c_str());
}

std::string utc_stamp_compact() { return stamp("%Y%m%dT%H%M%SZ"); }
std::string utc_stamp_iso() { return stamp("%Y-%m-%dT%H:%M:%SZ"); }

void write_file_atomic(const std::string& path, const std::string& content) {
  // A name of this process's own: two writers of one path never share a temporary.
  const std::string tmp = fmt::format("{}.{}.tmp", path, static_cast<long>(::getpid()));
  auto fail = [&](const std::string& what, int e, int fd) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw OutputError(fmt::format("{}: cannot {}: {} (errno {}); {} is as it was before", tmp, what, std::strerror(e), e, path));
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("create", errno, -1);
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write", errno, fd);
    }
    done += static_cast<size_t>(n);
  }
  // A full disk may only show here (delayed allocation): the rename waits for both.
  if (::fsync(fd) != 0 && errno != EINVAL) fail("write (fsync)", errno, fd);
  if (::close(fd) != 0) fail("write (close)", errno, -1);
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("rename into place", errno, -1);
}

std::string choose_run_dir(const std::string& requested, const std::string& label) {
  if (!requested.empty()) {
    // Any file a run writes there, not only results.json: a report.md or results.csv left by
    // someone is not overwritten either.
    for (const char* file : {"results.json", "results.csv", "report.md"})
      if (exists(requested + "/" + file))
        throw InputError(
            fmt::format("--output {}: already holds {}; runs are never overwritten, choose another directory", requested, file));
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
      remove_created_dirs(created);
      throw InputError("--output " + dir + ": cannot create " + partial + ": " + std::strerror(e));
    }
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    remove_created_dirs(created);
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
    remove_created_dirs(created);
    throw InputError("--output " + dir + ": not writable: " + std::strerror(e));
  }
  return created;
}

RunDirLock::RunDirLock(const std::string& dir) : path_(dir + "/" + kFileName) {
  // Locked, then checked to be still the file at that path: a holder unlinks it when done, and a
  // lock on an unlinked file would not keep a third run out.
  for (int attempt = 0; attempt < 8; ++attempt) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw InputError(fmt::format("--output {}: cannot create {}: {}", dir, kFileName, std::strerror(errno)));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int e = errno;
      ::close(fd_);
      fd_ = -1;
      if (e == EWOULDBLOCK)
        throw InputError(fmt::format("--output {}: another infer-bench run is writing there; choose another directory", dir));
      throw InputError(fmt::format("--output {}: cannot lock {}: {}", dir, kFileName, std::strerror(e)));
    }
    struct stat held {
    }, named{};
    if (::fstat(fd_, &held) == 0 && ::stat(path_.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
        held.st_dev == named.st_dev)
      break;
    ::close(fd_);
    fd_ = -1;
  }
  if (fd_ < 0) throw InputError(fmt::format("--output {}: the lock file keeps changing; another run is starting there", dir));
  for (const char* file : {"results.json", "results.csv", "report.md"})
    if (exists(dir + "/" + file)) {
      ::close(fd_);
      fd_ = -1;
      throw InputError(
          fmt::format("--output {}: already holds {}; runs are never overwritten, choose another directory", dir, file));
    }
  const std::string pid = std::to_string(static_cast<long>(::getpid())) + "\n";
  if (::ftruncate(fd_, 0) == 0 && ::write(fd_, pid.data(), pid.size()) < 0) {
    // The pid is for a person looking at the file; the lock holds without it.
  }
}

RunDirLock::~RunDirLock() {
  if (fd_ < 0) return;
  // Only our own file: after remove_run_output took it away, the name may be another run's.
  struct stat held {
  }, named{};
  if (::fstat(fd_, &held) == 0 && ::stat(path_.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
      held.st_dev == named.st_dev)
    ::unlink(path_.c_str());
  ::close(fd_);
}

void remove_run_output(const std::string& dir, const std::vector<std::string>& created,
                       const std::vector<std::string>& extra_files) {
  std::vector<std::string> names = {"results.json", "results.csv", "report.md", RunDirLock::kFileName};
  names.insert(names.end(), extra_files.begin(), extra_files.end());
  for (const auto& name : names) {
    const std::string path = dir + "/" + name;
    ::unlink(path.c_str());
    ::unlink(fmt::format("{}.{}.tmp", path, static_cast<long>(::getpid())).c_str());
  }
  remove_created_dirs(created);  // an rmdir fails, harmlessly, where something else is in the directory
}

}  // namespace ib
