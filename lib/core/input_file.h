// Reading a file a user names (a spec, tokenizer.json, config.json, a safetensors header, a
// results.json): only a regular file, only up to a size the caller states. A FIFO would block
// the run forever and /dev/zero would grow without end; both are refused before a byte is read.
#pragma once

#include <cstdint>
#include <string>

namespace ib {

// The size of a regular file, after opening it without blocking (O_NONBLOCK: a FIFO does not
// wait for a writer). InputError naming the path otherwise: missing, unreadable, a directory,
// a FIFO, a device or a socket.
uint64_t regular_file_size(const std::string& path);

// The whole file, when it is a regular file of at most `limit` bytes; InputError naming the path
// and the limit otherwise (also when it grows past the limit while being read).
std::string read_input_file(const std::string& path, uint64_t limit);

// Decompresses gzip data of `source` (a path, for the message) into at most `limit` bytes:
// InputError past it (a gzip bomb) or on corrupt data.
std::string gunzip_bounded(const std::string& compressed, uint64_t limit, const std::string& source);
// `raw` itself, or its decompression when it starts with gzip's magic bytes; at most `limit`.
std::string maybe_gunzip(std::string raw, uint64_t limit, const std::string& source);

// "64 MiB", "1 GiB", "512 KiB" or "N bytes": a limit in an error message.
std::string limit_text(uint64_t bytes);

}  // namespace ib
