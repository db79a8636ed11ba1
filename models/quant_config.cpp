#include "models/quant_config.h"

#include <climits>

#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/json_writer.h"
#include "core/quant_format.h"
#include "models/json_value.h"

namespace hearth::quant {

namespace {

Json parse_object(const std::string& text, const std::string& source, const char* what) {
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Error& e) {
    fail(source, ": ", what, " is not valid JSON: ", e.what());
  }
  if (!j.is_object()) fail(source, ": ", what, " is not a JSON object");
  return j;
}

int int_field(const Json& o, const char* key, const std::string& where) {
  const Json* v = o.find(key);
  if (!v) fail(where, ": field '", key, "' is missing");
  if (!v->is_int()) fail(where, ": field '", key, "' must be an integer");
  // Checked as the 64-bit value JSON gives: 2^32 + 4 must not pass as 4.
  if (v->as_int() < INT_MIN || v->as_int() > INT_MAX)
    fail(where, ": field '", key, "' is ", v->as_int(), ", out of range");
  return int(v->as_int());
}

// A scheme object: {"bits": 4|8|16, "group_size": 32|64|128, "scale_dtype": "F16"|"BF16"}; group
// and scale type may be omitted and then come from `dflt`.
Scheme parse_scheme(const Json& o, const Scheme& dflt, const std::string& where) {
  if (!o.is_object()) fail(where, ": must be an object");
  Scheme s = dflt;
  s.bits = int_field(o, "bits", where);
  if (s.bits != 4 && s.bits != 8 && s.bits != 16)
    fail(where, ": bits is ", s.bits, "; hearth stores 4, 8 or 16 (float) bits");
  if (o.find("group_size")) s.group = int_field(o, "group_size", where);
  if (s.quantized() && !valid_group(s.group))
    fail(where, ": group_size is ", s.group, "; must be 32, 64 or 128");
  if (const Json* t = o.find("scale_dtype")) {
    if (!t->is_string()) fail(where, ": field 'scale_dtype' must be a string");
    if (t->as_string() == "F16")
      s.scale_dtype = DType::F16;
    else if (t->as_string() == "BF16")
      s.scale_dtype = DType::BF16;
    else
      fail(where, ": scale_dtype is \"", t->as_string(), "\"; must be \"F16\" or \"BF16\"");
  }
  return s;
}

Codebook codebook_field(const Json& v, const std::string& where) {
  if (!v.is_array()) fail(where, ": 'codebook' must be an array of 16 integers");
  std::vector<int64_t> levels;
  for (const Json& e : v.as_array()) {
    if (!e.is_int()) fail(where, ": 'codebook' must be an array of 16 integers");
    levels.push_back(e.as_int());
  }
  return codebook_from(levels, where);
}

void write_codebook(JsonWriter& w, const Codebook& c) {
  w.begin_array();
  for (int8_t v : c) w.value(int(v));
  w.end_array();
}

void write_scheme(JsonWriter& w, const Scheme& s) {
  w.begin_object();
  w.field("bits", s.bits);
  if (s.quantized()) {
    w.field("group_size", s.group);
    w.field("scale_dtype", dtype_name(s.scale_dtype));
  }
  w.end_object();
}

}  // namespace

QuantConfig parse_quant_config(const std::string& json, const std::string& source) {
  const std::string where = source + ": quantization_config";
  Json o = parse_object(json, source, "quantization_config");
  const Json* method = o.find("quant_method");
  if (!method || !method->is_string()) fail(where, ": 'quant_method' is missing or not a string");
  if (method->as_string() != "hearth")
    fail(where, ": quant_method is \"", method->as_string(),
         "\"; only hearth's own format (\"hearth\") is supported");
  const int version = int_field(o, "format_version", where);
  if (version != kFormatVersion)
    fail(where, ": format_version ", version, " is not supported (this build reads ",
         kFormatVersion, ")");
  QuantConfig c;
  c.main = parse_scheme(o, Scheme{}, where);
  if (!c.main.quantized()) fail(where, ": the default bits must be 4 or 8");
  if (const Json* ov = o.find("overrides")) {
    if (!ov->is_object()) fail(where, ": 'overrides' must be an object");
    for (const auto& [name, v] : ov->as_object())
      c.overrides[name] = parse_scheme(v, c.main, where + ": overrides['" + name + "']");
  }
  if (const Json* cb = o.find("codebook")) {
    c.codebook = codebook_field(*cb, where);
    c.has_codebook = true;
    bool any4 = c.main.bits == 4;
    for (const auto& [name, s] : c.overrides) any4 |= s.bits == 4;
    if (!any4) fail(where, ": a 'codebook' is given but no tensor is stored in 4 bits");
  }
  if (const Json* cal = o.find("calibration"); cal && cal->is_string())
    c.calibration = cal->as_string();
  if (const Json* b = o.find("bits_per_weight"); b && b->is_number())
    c.bits_per_weight = b->as_double();
  return c;
}

std::string quant_config_json(const QuantConfig& c) {
  JsonWriter w;
  w.begin_object();
  w.field("quant_method", "hearth");
  w.field("format_version", kFormatVersion);
  w.field("bits", c.main.bits);
  w.field("group_size", c.main.group);
  w.field("scale_dtype", dtype_name(c.main.scale_dtype));
  if (c.has_codebook) write_codebook(w.key("codebook"), c.codebook);
  w.key("overrides").begin_object();
  for (const auto& [name, s] : c.overrides) {
    w.key(name);
    write_scheme(w, s);
  }
  w.end_object();
  w.field("calibration", c.calibration);
  char bpw[32];
  std::snprintf(bpw, sizeof bpw, "%.4f", c.bits_per_weight);
  w.key("bits_per_weight").raw(bpw);
  w.end_object();
  return w.str();
}

std::string tensor_schemes_json(const std::map<std::string, Scheme>& schemes) {
  JsonWriter w;
  w.begin_object();
  for (const auto& [name, s] : schemes) {
    w.key(name);
    write_scheme(w, s);
  }
  w.end_object();
  return w.str();
}

std::string codebook_json(const Codebook& c) {
  JsonWriter w;
  write_codebook(w, c);
  return w.str();
}

Codebook parse_codebook_json(const std::string& json, const std::string& source) {
  const std::string where = source + ": __metadata__ 'hearth.codebook'";
  Json j;
  try {
    j = Json::parse(json);
  } catch (const Error& e) {
    fail(where, " is not valid JSON: ", e.what());
  }
  return codebook_field(j, where);
}

std::map<std::string, Scheme> parse_tensor_schemes(const std::string& json,
                                                   const std::string& source) {
  Json o = parse_object(json, source, "__metadata__ 'hearth.quant'");
  std::map<std::string, Scheme> out;
  for (const auto& [name, v] : o.as_object())
    out[name] =
        parse_scheme(v, Scheme{}, source + ": __metadata__ 'hearth.quant' entry '" + name + "'");
  return out;
}

}  // namespace hearth::quant
