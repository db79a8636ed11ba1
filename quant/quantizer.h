// Writing a hearth quantized checkpoint (quant/FORMAT.md) from a float Qwen3 checkpoint, tensor by
// tensor: peak memory is the output of the largest tensor plus a few rows per thread, never the
// model. The output is a pure function of the input and the options (threads only split rows).
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "models/standin.h"
#include "quant/quantize.h"

namespace hearth::quant {

struct QuantizeOptions {
  Scheme main{4, 32, DType::F16};  // linear weights
  Scheme head{8, 32, DType::F16};  // embedding and LM head; bits 16 keeps them as they are
  Method method = Method::Search;
  // 4-bit tensors use a 16-level codebook fitted to this checkpoint's linear weights instead of
  // the uniform grid (same bytes; quant/FORMAT.md).
  bool codebook = false;
  // Calibration tokens; empty: none (then the clipping search minimises plain weight error).
  std::vector<int32_t> calibration_ids;
  int calibration_ctx = 512;
  bool force = false;  // replace an existing output folder
  int threads = 0;     // 0: one per hardware thread
  // Progress: bytes of source weights done of the total, and the tensor being written.
  std::function<void(size_t done, size_t total, const std::string& tensor)> progress;
  std::function<void(const std::string&)> log;  // informational lines (calibration)
};

struct QuantizeReport {
  double bits_per_weight = 0;  // all tensors, scales included, per logical weight
  size_t source_bytes = 0, output_bytes = 0;
  int64_t params = 0;
  std::string calibration;             // "rtn", "mse-clip" or "awq+clip"
  double calibration_error_ratio = 0;  // scaled / plain output error in the search, when calibrated
  bool has_codebook = false;
  std::array<int8_t, 16> codebook{};  // the fitted levels, with QuantizeOptions::codebook
};

QuantizeReport quantize_checkpoint(const std::string& in_dir, const std::string& out_dir,
                                   const QuantizeOptions& opt);

// Writes the quantized checkpoint of the stand-in spec describes, generating each tensor as the
// writer reaches it (peak memory: the largest tensor), so a stand-in too large for the disk or the
// memory at 16 bits can still be had at 4 or 8. The same bytes as write_standin, then
// quantize_checkpoint, with the same options (no codebook or calibration: those need the model).
QuantizeReport quantize_standin(const StandinSpec& spec, const std::string& tokenizer_dir,
                                const std::string& out_dir, const QuantizeOptions& opt);

}  // namespace hearth::quant
