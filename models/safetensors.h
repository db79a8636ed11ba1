// Safetensors reader: the header is validated in full before any tensor is exposed, and tensors are
// views into the file's memory map, so opening a checkpoint reads only its headers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "models/mapped_file.h"

namespace hearth {

struct TensorRef {
  std::string name;
  std::string dtype_str;     // as spelled in the file: "F32", "F16", "BF16", "I32", "U8", "I8"
  DType dtype = DType::F32;  // meaningful only when plain_dtype
  bool plain_dtype = false;  // false for U8/I8 (packed quantized codes have no hearth DType)
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // into the owning SafetensorsFile's map; never copied
  size_t nbytes = 0;
  std::string file;  // path of the file holding it, for error messages

  // Throws (naming file and tensor) unless plain_dtype and at most 4 dimensions.
  Tensor view() const;
};

class SafetensorsFile {
 public:
  // Maps and validates PATH; every error names PATH and the tensor or field at fault.
  static std::shared_ptr<SafetensorsFile> open(const std::string& path,
                                               MapMode mode = MapMode::Shared);

  // In data-offset order, i.e. the order they lie in the file.
  const std::vector<TensorRef>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const MappedFile& file() const { return file_; }
  const std::string& path() const { return file_.path(); }

 private:
  SafetensorsFile() = default;
  MappedFile file_;
  std::vector<TensorRef> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Bytes per element for a safetensors dtype spelling this reader accepts; 0 if unknown.
size_t safetensors_dtype_size(const std::string& dtype);

}  // namespace hearth
