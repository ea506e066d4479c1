// One GGUF file (llama.cpp's checkpoint format, version 2 and 3) read as ggml writes it: a header,
// typed metadata (key -> value), a tensor table (name, dimensions, ggml type, offset), then the
// aligned data section. Every read is bounded by the file's size, so a truncated or hostile file is
// an InputError naming the file and the key or tensor, never a crash or a huge allocation.
//
// Tensors are dequantized to float exactly as ggml defines its block formats (ggml-quants.c,
// dequantize_row_*): F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K. The shared bottom of the
// model loader (config and weights) and of the tokenizer loader (tokenizer.ggml.*).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ib::gguf {

// The metadata value types of the GGUF specification.
enum class ValueType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};
const char* value_type_name(ValueType t);

// One metadata value. Scalars keep their number in `number` (every integer of a real file, ids and
// counts, fits a double exactly); arrays keep their elements in `strings` or `numbers`.
struct Value {
  ValueType type = ValueType::U8;
  ValueType element_type = ValueType::U8;  // arrays only
  double number = 0;                       // integers, floats and bools
  std::string string;
  std::vector<std::string> strings;  // an array of strings
  std::vector<double> numbers;       // an array of numbers
  bool is_integer() const;
  bool is_float() const { return type == ValueType::F32 || type == ValueType::F64; }
};

// The ggml tensor types this reader dequantizes (ggml's numbering).
enum class TensorType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q8_0 = 8,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  BF16 = 30,
};
// "Q4_K"; nullopt for a number this reader does not know.
std::optional<std::string> tensor_type_name(uint32_t type);
// Elements per block and bytes per block of a known type.
int64_t block_elements(TensorType t);
int64_t block_bytes(TensorType t);
// Dequantizes `elements` values (a whole number of blocks) from `src` into dst[elements].
void dequantize(TensorType t, const uint8_t* src, int64_t elements, float* dst);

struct TensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // ggml's order: dims[0] is the contiguous one (a matrix's columns)
  TensorType type = TensorType::F32;
  uint64_t offset = 0;  // from the start of the data section
  uint64_t bytes = 0;
  int64_t elements() const;
};

class File {
 public:
  // Reads and checks the header, the metadata and the tensor table (each tensor's type known,
  // its byte range inside the file, aligned as the file says). Throws InputError naming `path`.
  explicit File(std::string path);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  const std::map<std::string, Value>& metadata() const { return metadata_; }
  const Value* find(const std::string& key) const;
  // Typed access: a missing key or one of another type is an InputError naming the file and key.
  std::string get_string(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;  // an integer value is accepted
  std::optional<int64_t> opt_int(const std::string& key) const;
  std::optional<double> opt_float(const std::string& key) const;
  std::optional<std::string> opt_string(const std::string& key) const;
  bool opt_bool(const std::string& key, bool fallback) const;
  const std::vector<std::string>& get_strings(const std::string& key) const;
  const std::vector<double>& get_numbers(const std::string& key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* tensor(const std::string& name) const;
  // The tensor's values as float into dst[elements()]; a read error names the tensor.
  void read(const TensorInfo& t, float* dst) const;
  // The tensor's bytes as stored (its blocks, for a consumer that streams them as they are).
  std::vector<uint8_t> raw(const TensorInfo& t) const;

 private:
  std::string path_;
  uint32_t version_ = 0;
  uint64_t file_bytes_ = 0;
  uint64_t data_start_ = 0;
  std::map<std::string, Value> metadata_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

// The file at `path` parsed once per process while it is unchanged (its size and modification time):
// a checkpoint's metadata (SmolLM2's 49,152 tokens and 48,900 merges) is read by its config, its
// weights, its tokenizer and its chat template, and again by every row that loads the model. A
// few files are kept; an error is thrown as File's constructor throws it, and not kept.
std::shared_ptr<const File> open_file(const std::string& path);

// True when the file starts with GGUF's magic (a cheap test for "is this path a GGUF checkpoint").
bool is_gguf(const std::string& path);

}  // namespace ib::gguf
