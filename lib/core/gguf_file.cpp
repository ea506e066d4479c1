#include "core/gguf_file.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>

#include <fmt/format.h>

#include "core/errors.h"
#include "numerics/half.h"

namespace ib::gguf {

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::U8:
      return "uint8";
    case ValueType::I8:
      return "int8";
    case ValueType::U16:
      return "uint16";
    case ValueType::I16:
      return "int16";
    case ValueType::U32:
      return "uint32";
    case ValueType::I32:
      return "int32";
    case ValueType::F32:
      return "float32";
    case ValueType::Bool:
      return "bool";
    case ValueType::String:
      return "string";
    case ValueType::Array:
      return "array";
    case ValueType::U64:
      return "uint64";
    case ValueType::I64:
      return "int64";
    case ValueType::F64:
      return "float64";
  }
  return "?";
}

bool Value::is_integer() const {
  switch (type) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::U16:
    case ValueType::I16:
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::U64:
    case ValueType::I64:
      return true;
    default:
      return false;
  }
}

std::optional<std::string> tensor_type_name(uint32_t type) {
  switch (static_cast<TensorType>(type)) {
    case TensorType::F32:
      return "F32";
    case TensorType::F16:
      return "F16";
    case TensorType::BF16:
      return "BF16";
    case TensorType::Q4_0:
      return "Q4_0";
    case TensorType::Q4_1:
      return "Q4_1";
    case TensorType::Q8_0:
      return "Q8_0";
    case TensorType::Q4_K:
      return "Q4_K";
    case TensorType::Q5_K:
      return "Q5_K";
    case TensorType::Q6_K:
      return "Q6_K";
  }
  return std::nullopt;
}

int64_t block_elements(TensorType t) {
  switch (t) {
    case TensorType::F32:
    case TensorType::F16:
    case TensorType::BF16:
      return 1;
    case TensorType::Q4_0:
    case TensorType::Q4_1:
    case TensorType::Q8_0:
      return 32;
    case TensorType::Q4_K:
    case TensorType::Q5_K:
    case TensorType::Q6_K:
      return 256;
  }
  return 1;
}

int64_t block_bytes(TensorType t) {
  switch (t) {
    case TensorType::F32:
      return 4;
    case TensorType::F16:
    case TensorType::BF16:
      return 2;
    case TensorType::Q4_0:
      return 2 + 16;
    case TensorType::Q4_1:
      return 2 + 2 + 16;
    case TensorType::Q8_0:
      return 2 + 32;
    case TensorType::Q4_K:
      return 2 + 2 + 12 + 128;
    case TensorType::Q5_K:
      return 2 + 2 + 12 + 32 + 128;
    case TensorType::Q6_K:
      return 128 + 64 + 16 + 2;
  }
  return 1;
}

namespace {

uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
float half_at(const uint8_t* p) { return fp16_bits_to_float(le16(p)); }

// The 6-bit scale and min of sub-block j of a Q4_K / Q5_K block (ggml's get_scale_min_k4).
void scale_min_k4(int j, const uint8_t* q, uint8_t& d, uint8_t& m) {
  if (j < 4) {
    d = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    d = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

void dequantize_q4_0(const uint8_t* b, float* y) {
  const float d = half_at(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

void dequantize_q4_1(const uint8_t* b, float* y) {
  const float d = half_at(b), m = half_at(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

void dequantize_q8_0(const uint8_t* b, float* y) {
  const float d = half_at(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

void dequantize_q4_k(const uint8_t* b, float* y) {
  const float d = half_at(b), min = half_at(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32) {
    uint8_t sc, m;
    scale_min_k4(is, scales, sc, m);
    const float d1 = d * sc, m1 = min * m;
    scale_min_k4(is + 1, scales, sc, m);
    const float d2 = d * sc, m2 = min * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
  }
}

void dequantize_q5_k(const uint8_t* b, float* y) {
  const float d = half_at(b), min = half_at(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, ql += 32) {
    uint8_t sc, m;
    scale_min_k4(is, scales, sc, m);
    const float d1 = d * sc, m1 = min * m;
    scale_min_k4(is + 1, scales, sc, m);
    const float d2 = d * sc, m2 = min * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    u1 = static_cast<uint8_t>(u1 << 2);
    u2 = static_cast<uint8_t>(u2 << 2);
  }
}

void dequantize_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = half_at(b + 208);
  for (int n = 0; n < 256; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
  }
}

}  // namespace

void dequantize(TensorType t, const uint8_t* src, int64_t elements, float* dst) {
  switch (t) {
    case TensorType::F32:
      std::memcpy(dst, src, static_cast<size_t>(elements) * 4);
      return;
    case TensorType::F16:
      for (int64_t i = 0; i < elements; ++i) dst[i] = half_at(src + 2 * i);
      return;
    case TensorType::BF16:
      for (int64_t i = 0; i < elements; ++i) dst[i] = bf16_bits_to_float(le16(src + 2 * i));
      return;
    default:
      break;
  }
  const int64_t be = block_elements(t), bb = block_bytes(t);
  for (int64_t blk = 0; blk < elements / be; ++blk) {
    const uint8_t* b = src + blk * bb;
    float* y = dst + blk * be;
    switch (t) {
      case TensorType::Q4_0:
        dequantize_q4_0(b, y);
        break;
      case TensorType::Q4_1:
        dequantize_q4_1(b, y);
        break;
      case TensorType::Q8_0:
        dequantize_q8_0(b, y);
        break;
      case TensorType::Q4_K:
        dequantize_q4_k(b, y);
        break;
      case TensorType::Q5_K:
        dequantize_q5_k(b, y);
        break;
      case TensorType::Q6_K:
        dequantize_q6_k(b, y);
        break;
      default:
        break;
    }
  }
}

int64_t TensorInfo::elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

namespace {

// A bounded cursor over the file's header: every read checks that the bytes are there.
class HeaderReader {
 public:
  HeaderReader(std::ifstream& in, const std::string& path, uint64_t file_bytes) : in_(in), path_(path), size_(file_bytes) {}

  void bytes(void* dst, uint64_t n, const std::string& what) {
    if (n > size_ - pos_) fail(fmt::format("{}: the file ends inside it (truncated?)", what));
    if (!in_.read(static_cast<char*>(dst), static_cast<std::streamsize>(n))) fail(fmt::format("{}: read error", what));
    pos_ += n;
  }
  template <class T>
  T scalar(const std::string& what) {
    T v;
    bytes(&v, sizeof v, what);  // GGUF is little-endian, as is every machine we build for
    return v;
  }
  std::string string(const std::string& what) {
    const uint64_t n = scalar<uint64_t>(what + " (its length)");
    if (n > size_ - pos_) fail(fmt::format("{}: a string of {} bytes runs past the end of the file", what, n));
    std::string s(static_cast<size_t>(n), '\0');
    bytes(s.data(), n, what);
    return s;
  }
  uint64_t remaining() const { return size_ - pos_; }
  uint64_t position() const { return pos_; }
  [[noreturn]] void fail(const std::string& msg) const { throw InputError(fmt::format("{}: {}", path_, msg)); }

 private:
  std::ifstream& in_;
  const std::string& path_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

uint64_t scalar_bytes(ValueType t) {
  switch (t) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::Bool:
      return 1;
    case ValueType::U16:
    case ValueType::I16:
      return 2;
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::F32:
      return 4;
    case ValueType::U64:
    case ValueType::I64:
    case ValueType::F64:
      return 8;
    default:
      return 0;
  }
}

double read_number(HeaderReader& r, ValueType t, const std::string& what) {
  switch (t) {
    case ValueType::U8:
      return r.scalar<uint8_t>(what);
    case ValueType::I8:
      return r.scalar<int8_t>(what);
    case ValueType::U16:
      return r.scalar<uint16_t>(what);
    case ValueType::I16:
      return r.scalar<int16_t>(what);
    case ValueType::U32:
      return r.scalar<uint32_t>(what);
    case ValueType::I32:
      return r.scalar<int32_t>(what);
    case ValueType::F32:
      return r.scalar<float>(what);
    case ValueType::Bool: {
      const uint8_t b = r.scalar<uint8_t>(what);
      if (b > 1) r.fail(fmt::format("{}: a bool of value {}", what, b));
      return b;
    }
    case ValueType::U64:
      return static_cast<double>(r.scalar<uint64_t>(what));
    case ValueType::I64:
      return static_cast<double>(r.scalar<int64_t>(what));
    case ValueType::F64:
      return r.scalar<double>(what);
    default:
      r.fail(fmt::format("{}: not a number type", what));
  }
}

bool known_value_type(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::F64); }

}  // namespace

File::File(std::string path) : path_(std::move(path)) {
  std::error_code ec;
  file_bytes_ = std::filesystem::file_size(path_, ec);
  if (ec) throw InputError(fmt::format("{}: cannot read ({})", path_, ec.message()));
  std::ifstream in(path_, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open", path_));
  HeaderReader r(in, path_, file_bytes_);
  char magic[4];
  r.bytes(magic, 4, "the magic");
  if (std::memcmp(magic, "GGUF", 4) != 0) r.fail("not a GGUF file (it does not start with 'GGUF')");
  version_ = r.scalar<uint32_t>("the version");
  if (version_ != 2 && version_ != 3) r.fail(fmt::format("GGUF version {} is not read (2 and 3 are)", version_));
  const uint64_t n_tensors = r.scalar<uint64_t>("the tensor count");
  const uint64_t n_kv = r.scalar<uint64_t>("the metadata count");
  // Each entry takes at least 8 bytes of header: counts past that are a hostile or damaged file.
  if (n_kv > r.remaining() / 8 || n_tensors > r.remaining() / 8)
    r.fail(fmt::format("{} metadata entries and {} tensors cannot fit in the file's {} bytes", n_kv, n_tensors, file_bytes_));

  for (uint64_t i = 0; i < n_kv; ++i) {
    const std::string key = r.string(fmt::format("metadata entry {}'s key", i));
    const std::string what = "key '" + key + "'";
    const uint32_t raw = r.scalar<uint32_t>(what + " (its type)");
    if (!known_value_type(raw)) r.fail(fmt::format("{}: unknown value type {}", what, raw));
    Value v;
    v.type = static_cast<ValueType>(raw);
    if (v.type == ValueType::String) {
      v.string = r.string(what);
    } else if (v.type == ValueType::Array) {
      const uint32_t et = r.scalar<uint32_t>(what + " (its element type)");
      if (!known_value_type(et) || et == static_cast<uint32_t>(ValueType::Array))
        r.fail(fmt::format("{}: an array of element type {} is not read", what, et));
      v.element_type = static_cast<ValueType>(et);
      const uint64_t n = r.scalar<uint64_t>(what + " (its length)");
      const uint64_t min_bytes = v.element_type == ValueType::String ? 8 : scalar_bytes(v.element_type);
      if (n > r.remaining() / min_bytes)
        r.fail(fmt::format("{}: an array of {} elements runs past the end of the file", what, n));
      if (v.element_type == ValueType::String) {
        v.strings.reserve(static_cast<size_t>(n));
        for (uint64_t k = 0; k < n; ++k) v.strings.push_back(r.string(what));
      } else {
        v.numbers.reserve(static_cast<size_t>(n));
        for (uint64_t k = 0; k < n; ++k) v.numbers.push_back(read_number(r, v.element_type, what));
      }
    } else {
      v.number = read_number(r, v.type, what);
    }
    if (!metadata_.emplace(key, std::move(v)).second) r.fail(fmt::format("{} appears twice", what));
  }

  uint64_t alignment = 32;
  if (const Value* a = find("general.alignment")) {
    if (!a->is_integer() || a->number < 1 || a->number > 1 << 20 ||
        (static_cast<uint64_t>(a->number) & (static_cast<uint64_t>(a->number) - 1)) != 0)
      r.fail("key 'general.alignment': not a power of two up to 1 MiB");
    alignment = static_cast<uint64_t>(a->number);
  }

  tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t;
    t.name = r.string(fmt::format("tensor {}'s name", i));
    const std::string what = "tensor '" + t.name + "'";
    const uint32_t n_dims = r.scalar<uint32_t>(what + " (its dimension count)");
    if (n_dims < 1 || n_dims > 4) r.fail(fmt::format("{}: {} dimensions (ggml has 1 to 4)", what, n_dims));
    uint64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim = r.scalar<uint64_t>(what + " (its dimensions)");
      if (dim == 0 || dim > (uint64_t{1} << 40) || elements > (uint64_t{1} << 40) / dim)
        r.fail(fmt::format("{}: dimension {} of size {} is not a tensor this reader takes", what, d, dim));
      elements *= dim;
      t.dims.push_back(static_cast<int64_t>(dim));
    }
    const uint32_t type = r.scalar<uint32_t>(what + " (its type)");
    const auto type_name = tensor_type_name(type);
    if (!type_name)
      r.fail(
          fmt::format("{}: ggml type {} is not one this reader dequantizes (F32, F16, BF16, Q8_0, Q4_0, Q4_1, "
                      "Q4_K, Q5_K, Q6_K)",
                      what, type));
    t.type = static_cast<TensorType>(type);
    const auto be = static_cast<uint64_t>(block_elements(t.type));
    if (static_cast<uint64_t>(t.dims[0]) % be != 0)
      r.fail(fmt::format("{}: {} rows of {} elements are not whole blocks of {}", what, *type_name, t.dims[0], be));
    t.bytes = elements / be * static_cast<uint64_t>(block_bytes(t.type));
    t.offset = r.scalar<uint64_t>(what + " (its offset)");
    if (t.offset % alignment != 0) r.fail(fmt::format("{}: offset {} is not aligned to {}", what, t.offset, alignment));
    if (!tensor_index_.emplace(t.name, tensors_.size()).second) r.fail(fmt::format("{} appears twice", what));
    tensors_.push_back(std::move(t));
  }
  data_start_ = (r.position() + alignment - 1) / alignment * alignment;
  for (const TensorInfo& t : tensors_) {
    if (data_start_ > file_bytes_ || t.offset > file_bytes_ - data_start_ || t.bytes > file_bytes_ - data_start_ - t.offset)
      r.fail(fmt::format("tensor '{}': its {} bytes at offset {} run past the end of the file ({} bytes; truncated?)", t.name,
                         t.bytes, t.offset, file_bytes_));
  }
}

const Value* File::find(const std::string& key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

namespace {
[[noreturn]] void wrong_type(const std::string& path, const std::string& key, const Value& v, const char* wanted) {
  throw InputError(fmt::format("{}: key '{}': expected {}, found {}", path, key, wanted, value_type_name(v.type)));
}
}  // namespace

std::string File::get_string(const std::string& key) const {
  auto v = opt_string(key);
  if (!v) throw InputError(fmt::format("{}: key '{}' is missing", path_, key));
  return *v;
}

int64_t File::get_int(const std::string& key) const {
  auto v = opt_int(key);
  if (!v) throw InputError(fmt::format("{}: key '{}' is missing", path_, key));
  return *v;
}

double File::get_float(const std::string& key) const {
  auto v = opt_float(key);
  if (!v) throw InputError(fmt::format("{}: key '{}' is missing", path_, key));
  return *v;
}

std::optional<int64_t> File::opt_int(const std::string& key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_integer()) wrong_type(path_, key, *v, "an integer");
  return static_cast<int64_t>(v->number);
}

std::optional<double> File::opt_float(const std::string& key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_integer() && !v->is_float()) wrong_type(path_, key, *v, "a number");
  return v->number;
}

std::optional<std::string> File::opt_string(const std::string& key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != ValueType::String) wrong_type(path_, key, *v, "a string");
  return v->string;
}

bool File::opt_bool(const std::string& key, bool fallback) const {
  const Value* v = find(key);
  if (!v) return fallback;
  if (v->type != ValueType::Bool) wrong_type(path_, key, *v, "a bool");
  return v->number != 0;
}

const std::vector<std::string>& File::get_strings(const std::string& key) const {
  const Value* v = find(key);
  if (!v) throw InputError(fmt::format("{}: key '{}' is missing", path_, key));
  if (v->type != ValueType::Array || v->element_type != ValueType::String) wrong_type(path_, key, *v, "an array of strings");
  return v->strings;
}

const std::vector<double>& File::get_numbers(const std::string& key) const {
  const Value* v = find(key);
  if (!v) throw InputError(fmt::format("{}: key '{}' is missing", path_, key));
  if (v->type != ValueType::Array || v->element_type == ValueType::String) wrong_type(path_, key, *v, "an array of numbers");
  return v->numbers;
}

const TensorInfo* File::tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::vector<uint8_t> File::raw(const TensorInfo& t) const {
  std::ifstream in(path_, std::ios::binary);
  std::vector<uint8_t> bytes(static_cast<size_t>(t.bytes));
  if (!in || !in.seekg(static_cast<std::streamoff>(data_start_ + t.offset)) ||
      !in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size())))
    throw InputError(fmt::format("{}: tensor '{}': cannot read its {} bytes", path_, t.name, t.bytes));
  return bytes;
}

void File::read(const TensorInfo& t, float* dst) const { dequantize(t.type, raw(t).data(), t.elements(), dst); }

std::shared_ptr<const File> open_file(const std::string& path) {
  struct Entry {
    uintmax_t bytes = 0;
    std::filesystem::file_time_type modified;
    std::shared_ptr<const File> file;
    uint64_t used = 0;
  };
  static std::mutex mu;
  static std::map<std::string, Entry> cache;
  static uint64_t clock = 0;
  constexpr size_t kKept = 4;
  std::error_code size_ec, time_ec;
  const uintmax_t bytes = std::filesystem::file_size(path, size_ec);
  const auto modified = std::filesystem::last_write_time(path, time_ec);
  if (size_ec || time_ec) return std::make_shared<const File>(path);  // File's own error names the path
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(path);
    if (it != cache.end() && it->second.bytes == bytes && it->second.modified == modified) {
      it->second.used = ++clock;
      return it->second.file;
    }
  }
  auto file = std::make_shared<const File>(path);  // parsed outside the lock
  std::lock_guard<std::mutex> lock(mu);
  if (cache.size() >= kKept && !cache.count(path)) {
    auto oldest = cache.begin();
    for (auto e = cache.begin(); e != cache.end(); ++e)
      if (e->second.used < oldest->second.used) oldest = e;
    cache.erase(oldest);
  }
  cache[path] = {bytes, modified, file, ++clock};
  return file;
}

bool is_gguf(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in && in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

}  // namespace ib::gguf
