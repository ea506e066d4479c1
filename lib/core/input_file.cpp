#include "core/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <zlib.h>

#include <vector>

#include "core/errors.h"

namespace ib {

namespace {

// Closes the descriptor on every path out.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

uint64_t open_regular(const std::string& path, Fd* f) {
  f->fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (f->fd < 0) throw InputError(path + ": cannot read: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(f->fd, &st) != 0) throw InputError(path + ": cannot read: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw InputError(path + ": cannot read: is " + file_kind(st.st_mode) + ", not a regular file");
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace

std::string limit_text(uint64_t bytes) {
  if (bytes >= (uint64_t{1} << 30) && bytes % (uint64_t{1} << 30) == 0) return std::to_string(bytes >> 30) + " GiB";
  if (bytes >= (uint64_t{1} << 20) && bytes % (uint64_t{1} << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= (uint64_t{1} << 10) && bytes % (uint64_t{1} << 10) == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " bytes";
}

uint64_t regular_file_size(const std::string& path) {
  Fd f;
  return open_regular(path, &f);
}

std::string read_input_file(const std::string& path, uint64_t limit) {
  Fd f;
  const uint64_t size = open_regular(path, &f);
  const std::string too_large = path + ": larger than " + limit_text(limit) + ", the limit for this file";
  if (size > limit) throw InputError(too_large);
  std::string text;
  text.resize(static_cast<size_t>(size));
  size_t got = 0;
  // Read to the end, not to the size stat gave: a file that grows meanwhile is still bounded.
  for (;;) {
    if (got == text.size()) {
      if (text.size() >= limit) {
        char probe = 0;
        const ssize_t n = ::read(f.fd, &probe, 1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw InputError(path + ": cannot read: " + std::strerror(errno));
        if (n > 0) throw InputError(too_large);
        break;
      }
      text.resize(static_cast<size_t>(std::min<uint64_t>(limit, text.size() + 65536)));
    }
    const ssize_t n = ::read(f.fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw InputError(path + ": cannot read: " + std::strerror(errno));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  return text;
}

std::string gunzip_bounded(const std::string& compressed, uint64_t limit, const std::string& source) {
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) throw InputError(source + ": zlib init failed");
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
  zs.avail_in = static_cast<uInt>(compressed.size());
  std::string out;
  std::vector<char> buf(1 << 16);
  int rc = Z_OK;
  while (rc == Z_OK) {
    zs.next_out = reinterpret_cast<Bytef*>(buf.data());
    zs.avail_out = static_cast<uInt>(buf.size());
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      inflateEnd(&zs);
      throw InputError(source + ": not a valid gzip file");
    }
    out.append(buf.data(), buf.size() - zs.avail_out);
    if (out.size() > limit) {
      inflateEnd(&zs);
      throw InputError(source + ": more than " + limit_text(limit) + " once decompressed, the limit for this file");
    }
  }
  inflateEnd(&zs);
  return out;
}

std::string maybe_gunzip(std::string raw, uint64_t limit, const std::string& source) {
  if (raw.size() >= 2 && static_cast<unsigned char>(raw[0]) == 0x1f && static_cast<unsigned char>(raw[1]) == 0x8b)
    return gunzip_bounded(raw, limit, source);
  if (raw.size() > limit) throw InputError(source + ": larger than " + limit_text(limit) + ", the limit for this file");
  return raw;
}

}  // namespace ib
