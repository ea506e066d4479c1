#include "model/safetensors_file.h"

#include <cmath>
#include <cstring>
#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/errors.h"
#include "core/input_file.h"
#include "core/json_input.h"
#include "numerics/half.h"

namespace ib::model {

SafetensorsFile::SafetensorsFile(std::string p) : path_(std::move(p)) {
  file_bytes_ = regular_file_size(path_);  // a FIFO or a device is refused here, before it can block
  std::ifstream in(path_, std::ios::binary);
  if (!in) throw InputError(path_ + ": cannot open");
  unsigned char len_bytes[8];
  if (!in.read(reinterpret_cast<char*>(len_bytes), 8))
    throw InputError(path_ + ": not a safetensors file (shorter than 8 bytes)");
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | len_bytes[i];
  if (len == 0 || len > (uint64_t{1} << 30))
    throw InputError(path_ + ": not a safetensors file (header length " + std::to_string(len) + ")");
  std::string text(len, '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(len))) throw InputError(path_ + ": truncated header");
  try {
    header_ = parse_json_bounded(text, path_);
  } catch (const std::exception& e) {
    throw InputError(path_ + ": header is not JSON: " + e.what());
  }
  if (!header_.is_object()) throw InputError(path_ + ": the header is not a JSON object");
  data_start_ = 8 + len;
  if (data_start_ > file_bytes_)
    throw InputError(path_ + ": truncated header (the file holds " + std::to_string(file_bytes_) + " bytes)");
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (auto it = header_.begin(); it != header_.end(); ++it)
    if (it.key() != "__metadata__") out.push_back(it.key());
  return out;
}

const nlohmann::json& SafetensorsFile::entry(const std::string& tensor, const std::vector<int64_t>& want) const {
  if (!header_.contains(tensor)) throw InputError(fmt::format("{}: tensor '{}' is not in the file", path_, tensor));
  const nlohmann::json& info = header_.at(tensor);
  // Every field's type checked before it is read: a hand-made header gets an error naming it.
  auto bad = [&](const char* what) {
    return InputError(fmt::format("{}: tensor '{}': {} (the header at /{})", path_, tensor, what, tensor));
  };
  if (!info.is_object()) throw bad("not an object with dtype, shape and data_offsets");
  if (!info.contains("dtype") || !info["dtype"].is_string()) throw bad("no dtype string");
  if (!info.contains("shape") || !info["shape"].is_array()) throw bad("no shape list");
  for (const auto& d : info["shape"])
    if (!d.is_number_integer() || d.get<int64_t>() < 0) throw bad("a shape entry is not a non-negative integer");
  if (!info.contains("data_offsets") || !info["data_offsets"].is_array() || info["data_offsets"].size() != 2 ||
      !info["data_offsets"][0].is_number_unsigned() || !info["data_offsets"][1].is_number_unsigned())
    throw bad("data_offsets is not a pair of byte offsets");
  const std::string dtype = info["dtype"].get<std::string>();
  if (dtype != "BF16" && dtype != "F16" && dtype != "F32")
    throw InputError(fmt::format("{}: tensor '{}': dtype {} (BF16, F16 or F32 expected)", path_, tensor, dtype));
  const auto shape = info.at("shape").get<std::vector<int64_t>>();
  if (!want.empty() && shape != want)
    throw InputError(fmt::format("{}: tensor '{}': shape [{}], the config needs [{}]", path_, tensor, fmt::join(shape, ", "),
                                 fmt::join(want, ", ")));
  // Bounded before it is multiplied: a header may claim any shape (2^40 x 2^40 overflowed).
  int64_t elems = 1;
  for (int64_t d : shape) {
    if (d > 0 && elems > (int64_t{1} << 40) / d)
      throw InputError(
          fmt::format("{}: tensor '{}': shape [{}] has more elements than a file holds", path_, tensor, fmt::join(shape, ", ")));
    elems *= d;
  }
  const auto off = info.at("data_offsets").get<std::vector<uint64_t>>();
  const uint64_t es = dtype == "F32" ? 4 : 2;
  if (off.size() != 2 || off[1] < off[0] || off[1] - off[0] != static_cast<uint64_t>(elems) * es)
    throw InputError(fmt::format("{}: tensor '{}': data_offsets do not match its shape", path_, tensor));
  // Checked here, with the headers, so a cut-short file is an input error before anything runs.
  if (off[1] > file_bytes_ - data_start_)
    throw InputError(
        fmt::format("{}: tensor '{}': its data ends at byte {} of the data section, which holds {} bytes (truncated file?)",
                    path_, tensor, off[1], file_bytes_ - data_start_));
  return info;
}

std::vector<int64_t> SafetensorsFile::shape(const std::string& tensor) const {
  return entry(tensor).at("shape").get<std::vector<int64_t>>();
}

void SafetensorsFile::read(const std::string& tensor, float* dst) const {
  const nlohmann::json& info = entry(tensor);
  const std::string dtype = info.at("dtype").get<std::string>();
  const auto off = info.at("data_offsets").get<std::vector<uint64_t>>();
  const size_t es = dtype == "F32" ? 4 : 2;
  const size_t n = static_cast<size_t>((off[1] - off[0]) / es);
  std::vector<unsigned char> raw(n * es);
  std::ifstream in(path_, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(data_start_ + off[0]));
  if (!in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(raw.size())))
    throw InputError(fmt::format("{}: tensor '{}': data past the end of the file", path_, tensor));
  bool finite = true;
  for (size_t i = 0; i < n; ++i) {
    if (es == 4) {
      std::memcpy(&dst[i], &raw[i * 4], 4);
    } else {
      const uint16_t bits = static_cast<uint16_t>(raw[i * 2] | (raw[i * 2 + 1] << 8));
      dst[i] = dtype == "BF16" ? bf16_bits_to_float(bits) : fp16_bits_to_float(bits);
    }
    finite &= std::isfinite(dst[i]);
  }
  // A NaN or Inf weight (a corrupt file, a diverged run) makes every request's logits NaN: refused
  // when the model or adapter is loaded, not met by the first request.
  if (!finite)
    for (size_t i = 0; i < n; ++i)
      if (!std::isfinite(dst[i]))
        throw InputError(
            fmt::format("{}: tensor '{}' holds a non-finite value ({}) at element {} (a corrupt or diverged "
                        "checkpoint)",
                        path_, tensor, dst[i], i));
}

}  // namespace ib::model
