// run_peer_process: posix_spawn in a process group of its own, stdout and stderr drained by
// poll until EOF, the deadline or Ctrl-C (then the whole group is killed).
#include "core/peer_process.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <stdexcept>

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/interrupt.h"

extern char** environ;

namespace ib {

namespace {

constexpr size_t kMaxStdout = size_t{64} << 20;  // samples of a long row fit many times over
constexpr size_t kMaxStderr = size_t{64} << 10;  // its tail: the traceback's last lines

// Closes a descriptor once; -1 = closed.
struct PipeFd {
  int fd = -1;
  ~PipeFd() { close(); }
  void close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

// Reads what is there into `into` (the head of stdout, the tail of stderr); false at EOF.
bool drain(PipeFd& f, std::string& into, bool keep_tail) {
  char buf[65536];
  const ssize_t n = ::read(f.fd, buf, sizeof buf);
  if (n < 0) return errno == EINTR || errno == EAGAIN;
  if (n == 0) return false;
  into.append(buf, static_cast<size_t>(n));
  if (keep_tail && into.size() > kMaxStderr) into.erase(0, into.size() - kMaxStderr);
  if (!keep_tail && into.size() > kMaxStdout) into.resize(kMaxStdout);
  return true;
}

}  // namespace

PeerProcess run_peer_process(const std::vector<std::string>& argv, double timeout_s) {
  PeerProcess r;
  int out_fds[2], err_fds[2];
  if (pipe2(out_fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  PipeFd out{out_fds[0]}, out_w{out_fds[1]};
  if (pipe2(err_fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  PipeFd err{err_fds[0]}, err_w{err_fds[1]};

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_w.fd, 1);  // dup2 clears close-on-exec on 1 and 2
  posix_spawn_file_actions_adddup2(&actions, err_w.fd, 2);
  // Its own process group: Ctrl-C here is handled here (the child is killed, not interrupted
  // mid-traceback), and a timeout kills whatever the child started too.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  sigaddset(&defaults, SIGINT);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  out_w.close();
  err_w.close();
  if (rc != 0) {
    r.spawn_error = std::strerror(rc);
    return r;
  }

  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  bool stopped_by_ctrl_c = false;
  while (out.fd >= 0 || err.fd >= 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      r.timed_out = true;
      break;
    }
    if (interrupted()) {
      stopped_by_ctrl_c = true;
      break;
    }
    pollfd fds[2] = {{out.fd, POLLIN, 0}, {err.fd, POLLIN, 0}};  // poll skips a negative fd
    const int n = ::poll(fds, 2, static_cast<int>(std::min<long long>(left, 200)));
    if (n < 0 && errno != EINTR) throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
    if (n <= 0) continue;
    if (fds[0].revents && !drain(out, r.out, false)) out.close();
    if (fds[1].revents && !drain(err, r.err, true)) err.close();
  }
  if (r.timed_out || stopped_by_ctrl_c) ::kill(-pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (stopped_by_ctrl_c) throw std::runtime_error("interrupted (Ctrl-C): the peer process was stopped");
  return r;
}

std::string last_line(const std::string& text) {
  const size_t end = text.find_last_not_of(" \r\n\t");
  if (end == std::string::npos) return {};
  const size_t nl = text.rfind('\n', end);
  const size_t begin = nl == std::string::npos ? 0 : nl + 1;
  return text.substr(begin, end + 1 - begin);
}

// The last stdout line that starts with '{' (the packages may print other lines before it).
std::string result_line(const std::string& out) {
  size_t end = out.size();
  while (end > 0) {
    const size_t nl = out.rfind('\n', end - 1);
    const size_t begin = nl == std::string::npos ? 0 : nl + 1;
    const size_t first = out.find_first_not_of(" \r\t", begin);
    if (first < end && out[first] == '{') return out.substr(begin, end - begin);
    if (begin == 0) break;
    end = begin - 1;
  }
  return {};
}

}  // namespace ib
