// Calibration: run the float model on sample text, record per-input-channel activation statistics
// at every linear layer's input, and choose AWQ-style per-channel scales that minimise each
// layer's output error once quantized. A scale s moves magnitude from activations into weights:
// W' = W diag(s) is quantized, and x' = x / s is obtained for free by folding 1/s into what
// produces x (the preceding RMSNorm weight, the rows of v_proj for o_proj, the rows of up_proj for
// down_proj), so inference runs the unmodified graph.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "models/qwen3_model.h"
#include "quant/quantize.h"

namespace hearth::quant {

struct CalibrationOptions {
  Scheme scheme;                     // the scheme the linear weights will be stored in
  const int8_t* codebook = nullptr;  // its 4-bit codebook (16 levels), or null for the uniform grid
  int ctx = 512;                     // tokens per window; each window starts from an empty KV cache
  int max_samples = 64;  // activation rows kept per layer input for scoring the scale search
  int max_rows = 256;    // weight rows per linear scored in the search
  int threads = 0;       // 0: one per hardware thread
  std::function<void(const std::string&)> log;  // one line per layer; may be empty
};

struct Calibration {
  int tokens = 0;
  // By checkpoint tensor name; absent means 1.
  std::map<std::string, std::vector<float>> col_scale;  // W[:, j] *= s[j] before quantizing
  std::map<std::string, std::vector<float>> row_div;    // W[i, :] /= d[i] before quantizing
  std::map<std::string, std::vector<float>> norm_div;   // norm weight w[j] /= s[j]
  // E[x_j^2] of each linear's (scaled) input channel: the weight of element j's squared error.
  std::map<std::string, std::vector<float>> importance;
  // Output error of the chosen scales relative to unscaled quantization, summed over layers.
  double err_scaled = 0, err_plain = 0;
};

// ids: the calibration tokens (at least one window's worth is best). The model must be a float
// checkpoint.
Calibration calibrate(const Qwen3Model& model, const std::vector<int32_t>& ids,
                      const CalibrationOptions& opt);

}  // namespace hearth::quant
