// Feeds the input, split at NUL bytes, as a quantization_config object's text to
// parse_quant_config, a `hearth.quant` metadata value to parse_tensor_schemes and a
// `hearth.codebook` value to parse_codebook_json. What is accepted must say what the text said
// (no integer silently narrowed) and survive writing and reading back unchanged.
#include <cstdint>

#include "core/error.h"
#include "models/json_value.h"
#include "models/quant_config.h"
#include "tests/fuzz/fuzz_util.h"

using namespace hearth;
using namespace hearth::quant;

namespace {

// The integer KEY of object O as the JSON text has it, if it is one.
bool json_int(const Json& o, const char* key, int64_t* v) {
  const Json* f = o.is_object() ? o.find(key) : nullptr;
  if (!f || !f->is_int()) return false;
  *v = f->as_int();
  return true;
}

// An accepted scheme object must hold exactly the numbers it was read from.
void check_scheme(const Json& o, const Scheme& s) {
  int64_t v;
  if (json_int(o, "bits", &v)) FUZZ_CHECK(v == s.bits);
  if (s.quantized() && json_int(o, "group_size", &v)) FUZZ_CHECK(v == s.group);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = fuzz::split_nul(data, size, 3);
  try {
    QuantConfig c = parse_quant_config(parts[0], "config.json");
    const Json o = Json::parse(parts[0]);
    int64_t v;
    if (json_int(o, "format_version", &v)) FUZZ_CHECK(v == kFormatVersion);
    check_scheme(o, c.main);
    QuantConfig back = parse_quant_config(quant_config_json(c), "written");
    FUZZ_CHECK(back.main == c.main && back.overrides == c.overrides);
    FUZZ_CHECK(back.has_codebook == c.has_codebook);
    if (c.has_codebook) FUZZ_CHECK(back.codebook == c.codebook);
    FUZZ_CHECK(back.calibration == c.calibration);
    for (const auto& [name, s] : c.overrides) FUZZ_CHECK(&c.scheme_for(name) != &c.main);
  } catch (const Error& e) {
    fuzz::refused(e);
  }
  try {
    auto schemes = parse_tensor_schemes(parts[1], "model.safetensors");
    const Json o = Json::parse(parts[1]);
    for (const auto& [name, s] : schemes)
      if (const Json* e = o.find(name)) check_scheme(*e, s);
    FUZZ_CHECK(parse_tensor_schemes(tensor_schemes_json(schemes), "written") == schemes);
  } catch (const Error& e) {
    fuzz::refused(e);
  }
  try {
    Codebook cb = parse_codebook_json(parts[2], "model.safetensors");
    const Json a = Json::parse(parts[2]);
    FUZZ_CHECK(a.is_array() && a.size() == cb.size());
    for (size_t i = 0; i < cb.size(); ++i) FUZZ_CHECK(a.at(i).as_int() == cb[i]);
    FUZZ_CHECK(parse_codebook_json(codebook_json(cb), "written") == cb);
  } catch (const Error& e) {
    fuzz::refused(e);
  }
  return 0;
}
