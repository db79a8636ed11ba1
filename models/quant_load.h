// Binding quantized weights from a hearth checkpoint as Tensor views (codes and scales in place
// in the mmap), validated as strictly as the float loader: dtypes, shapes, group sizes, finite
// scales, and agreement between config.json and the file's own metadata.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/checkpoint.h"
#include "models/quant_config.h"

namespace hearth::quant {

class QuantBinder {
 public:
  QuantBinder(const Checkpoint& ck, QuantConfig config);

  const QuantConfig& config() const { return config_; }
  // The scheme config.json assigns to weight NAME (a 2-D weight; norms are never quantized).
  const Scheme& scheme_for(const std::string& name) const { return config_.scheme_for(name); }
  // NAME as a Q8/Q4 view of logical shape [rows, cols]; throws naming file and tensor on any
  // mismatch. The scale tensor's name is scale_name(NAME).
  Tensor bind(const std::string& name, int64_t rows, int64_t cols);
  // The codebook bound 4-bit views point into (null without one): keep it as long as they live.
  std::shared_ptr<const Codebook> codebook() const { return codebook_; }

 private:
  const std::map<std::string, Scheme>& file_schemes(const TensorRef& r);

  const Checkpoint& ck_;
  QuantConfig config_;
  std::shared_ptr<const Codebook> codebook_;
  std::map<std::string, std::map<std::string, Scheme>> by_file_;
};

}  // namespace hearth::quant
