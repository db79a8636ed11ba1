// The `quantization_config` of a hearth checkpoint and the per-tensor schemes in its safetensors
// metadata (quant/FORMAT.md): parsing with errors that name the field, and writing.
#pragma once
#include <map>
#include <string>

#include "core/quant_format.h"

namespace hearth::quant {

constexpr int kFormatVersion = 1;

struct QuantConfig {
  Scheme main;                              // every linear weight not in overrides
  std::map<std::string, Scheme> overrides;  // by checkpoint tensor name
  std::string calibration = "rtn";          // "rtn", "mse-clip" or "awq+clip"
  // Every 4-bit tensor's levels when set (the "codebook" field); else the uniform grid.
  bool has_codebook = false;
  Codebook codebook{};
  double bits_per_weight = 0;  // whole checkpoint, scales included

  const Scheme& scheme_for(const std::string& name) const {
    auto it = overrides.find(name);
    return it == overrides.end() ? main : it->second;
  }
};

// `json` is the quantization_config object's text; errors name `source`.
QuantConfig parse_quant_config(const std::string& json, const std::string& source);
// The quantization_config object, indented to sit at the top level of config.json.
std::string quant_config_json(const QuantConfig& c);

// The `hearth.quant` metadata value: {"NAME": {"bits":..,"group_size":..,"scale_dtype":..}, ...}.
std::string tensor_schemes_json(const std::map<std::string, Scheme>& schemes);
// The `hearth.codebook` metadata value: the 16 levels as a JSON array.
std::string codebook_json(const Codebook& c);
Codebook parse_codebook_json(const std::string& json, const std::string& source);

std::map<std::string, Scheme> parse_tensor_schemes(const std::string& json,
                                                   const std::string& source);

}  // namespace hearth::quant
