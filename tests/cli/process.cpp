#include "process.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace ib::test {

std::string make_temp_dir() {
  std::string tmpl = (std::getenv("TMPDIR") ? std::string(std::getenv("TMPDIR")) : std::string("/tmp")) + "/ib-test-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
  return buf.data();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  if (!f) throw std::runtime_error("cannot write " + path);
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool path_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

namespace {
void walk(const std::string& root, const std::string& rel, std::vector<std::string>* out) {
  DIR* d = opendir((root + "/" + rel).c_str());
  if (!d) return;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    std::string r = rel.empty() ? name : rel + "/" + name;
    struct stat st {};
    if (::stat((root + "/" + r).c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode))
      walk(root, r, out);
    else
      out->push_back(r);
  }
  closedir(d);
}
}  // namespace

std::vector<std::string> list_files(const std::string& dir) {
  std::vector<std::string> out;
  walk(dir, "", &out);
  std::sort(out.begin(), out.end());
  return out;
}

ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& o) {
  std::string dir = make_temp_dir();
  std::string out_path = dir + "/stdout", err_path = dir + "/stderr";
  int pipe_fds[2] = {-1, -1};
  if (o.close_stdout_after_bytes >= 0 && ::pipe(pipe_fds) != 0) throw std::runtime_error("pipe failed");
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    int fo = pipe_fds[1] >= 0 ? pipe_fds[1] : ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (pipe_fds[0] >= 0) ::close(pipe_fds[0]);
    if (o.file_size_limit >= 0) {
      std::signal(SIGXFSZ, SIG_IGN);  // kept across exec: the write fails instead of killing
      struct rlimit lim {
        static_cast<rlim_t>(o.file_size_limit), static_cast<rlim_t>(o.file_size_limit)
      };
      if (setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(125);
    }
    int fe = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int fi = ::open("/dev/null", O_RDONLY);
    dup2(fo, 1);
    dup2(fe, 2);
    dup2(fi, 0);
    if (!o.cwd.empty() && chdir(o.cwd.c_str()) != 0) _exit(126);
    for (const auto& [k, v] : o.env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  std::string piped;
  if (pipe_fds[0] >= 0) {
    ::close(pipe_fds[1]);
    char buf[4096];
    while (piped.size() < static_cast<size_t>(o.close_stdout_after_bytes)) {
      const ssize_t n =
          ::read(pipe_fds[0], buf, std::min(sizeof buf, static_cast<size_t>(o.close_stdout_after_bytes) - piped.size()));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      piped.append(buf, static_cast<size_t>(n));
    }
    ::close(pipe_fds[0]);
  }
  if (o.sigint_after_ms >= 0) {
    usleep(static_cast<useconds_t>(o.sigint_after_ms) * 1000);
    kill(pid, SIGINT);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  ProcessResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = pipe_fds[0] >= 0 ? piped : read_text(out_path);
  r.err = read_text(err_path);
  ::unlink(out_path.c_str());
  ::unlink(err_path.c_str());
  ::rmdir(dir.c_str());
  return r;
}

}  // namespace ib::test
