// One safetensors file read as Hugging Face writes it: an 8-byte little-endian header length,
// a JSON header (tensor -> dtype, shape, byte range in the data section), then the data. Shared by
// the checkpoint reader (weights.cpp) and the LoRA adapter reader (lora.cpp); only they include it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ib::model {

class SafetensorsFile {
 public:
  // Reads and checks the header; a file that is not safetensors is an InputError naming it.
  explicit SafetensorsFile(std::string path);

  const std::string& path() const { return path_; }
  bool contains(const std::string& tensor) const { return header_.contains(tensor); }
  // Every tensor's name, "__metadata__" left out.
  std::vector<std::string> names() const;
  // The tensor's header entry with every field checked (dtype BF16/F16/F32, shape, byte range
  // inside the file); `shape`, when not empty, is the shape the reader needs. Errors name the
  // file and the tensor.
  const nlohmann::json& entry(const std::string& tensor, const std::vector<int64_t>& shape = {}) const;
  std::vector<int64_t> shape(const std::string& tensor) const;
  // The tensor's values converted to float (exact for all three dtypes), into dst[elements].
  void read(const std::string& tensor, float* dst) const;

 private:
  std::string path_;
  nlohmann::json header_;
  uint64_t data_start_ = 0;
  uint64_t file_bytes_ = 0;
};

}  // namespace ib::model
