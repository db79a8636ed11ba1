#include "models/json_value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include <simdjson.h>

#include "core/error.h"

namespace hearth {

namespace {

const char* type_name(Json::Type t) {
  switch (t) {
    case Json::Type::Null:
      return "null";
    case Json::Type::Bool:
      return "bool";
    case Json::Type::Int:
      return "integer";
    case Json::Type::Float:
      return "float";
    case Json::Type::String:
      return "string";
    case Json::Type::Array:
      return "array";
    case Json::Type::Object:
      return "object";
  }
  return "?";
}

[[noreturn]] void type_mismatch(Json::Type want, Json::Type have) {
  fail("json: expected ", type_name(want), ", found ", type_name(have));
}

Json from_dom(simdjson::dom::element e) {
  using simdjson::dom::element_type;
  switch (e.type()) {
    case element_type::ARRAY: {
      Json::Array a;
      simdjson::dom::array arr = e.get_array().value_unsafe();
      for (simdjson::dom::element child : arr) a.push_back(from_dom(child));
      return Json(std::move(a));
    }
    case element_type::OBJECT: {
      Json out = Json::object();
      simdjson::dom::object obj = e.get_object().value_unsafe();
      for (simdjson::dom::key_value_pair kv : obj) out.set(std::string(kv.key), from_dom(kv.value));
      return out;
    }
    case element_type::INT64:
      return Json(int64_t(e.get_int64().value_unsafe()));
    // Python keeps integers above 2^63 exact; we have no big integers, so they become floats.
    case element_type::UINT64:
      return Json(double(e.get_uint64().value_unsafe()));
    case element_type::DOUBLE:
      return Json(e.get_double().value_unsafe());
    case element_type::STRING:
      return Json(std::string(e.get_string().value_unsafe()));
    case element_type::BOOL:
      return Json(e.get_bool().value_unsafe());
    case element_type::NULL_VALUE:
      return Json();
  }
  return Json();
}

void dump(const Json& v, std::string& out, int indent, int depth) {
  auto newline = [&](int d) {
    out += '\n';
    out.append(size_t(indent) * size_t(d), ' ');
  };
  const char* item_sep = indent >= 0 ? "," : ", ";
  switch (v.type()) {
    case Json::Type::Null:
      out += "null";
      break;
    case Json::Type::Bool:
      out += v.as_bool() ? "true" : "false";
      break;
    case Json::Type::Int:
      out += std::to_string(v.as_int());
      break;
    case Json::Type::Float: {
      double d = v.as_double();
      if (std::isnan(d))
        out += "NaN";
      else if (std::isinf(d))
        out += d > 0 ? "Infinity" : "-Infinity";
      else
        out += pyfmt::float_repr(d);
      break;
    }
    case Json::Type::String:
      pyfmt::append_json_string(out, v.as_string(), false);
      break;
    case Json::Type::Array: {
      const auto& a = v.as_array();
      if (a.empty()) {
        out += "[]";
        break;
      }
      out += '[';
      for (size_t i = 0; i < a.size(); ++i) {
        if (i) out += item_sep;
        if (indent >= 0) newline(depth + 1);
        dump(a[i], out, indent, depth + 1);
      }
      if (indent >= 0) newline(depth);
      out += ']';
      break;
    }
    case Json::Type::Object: {
      const auto& o = v.as_object();
      if (o.empty()) {
        out += "{}";
        break;
      }
      out += '{';
      for (size_t i = 0; i < o.size(); ++i) {
        if (i) out += item_sep;
        if (indent >= 0) newline(depth + 1);
        pyfmt::append_json_string(out, o[i].first, false);
        out += ": ";
        dump(o[i].second, out, indent, depth + 1);
      }
      if (indent >= 0) newline(depth);
      out += '}';
      break;
    }
  }
}

}  // namespace

Json Json::parse(std::string_view text) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(text);
  simdjson::dom::element root;
  auto err = parser.parse(padded).get(root);
  if (err) fail("json: ", simdjson::error_message(err));
  return from_dom(root);
}

bool Json::as_bool() const {
  if (type_ != Type::Bool) type_mismatch(Type::Bool, type_);
  return b_;
}
int64_t Json::as_int() const {
  if (type_ != Type::Int) type_mismatch(Type::Int, type_);
  return i_;
}
double Json::as_double() const {
  if (type_ == Type::Int) return double(i_);
  if (type_ != Type::Float) type_mismatch(Type::Float, type_);
  return d_;
}
const std::string& Json::as_string() const {
  if (type_ != Type::String) type_mismatch(Type::String, type_);
  return s_;
}
const Json::Array& Json::as_array() const {
  if (type_ != Type::Array) type_mismatch(Type::Array, type_);
  return a_;
}
Json::Array& Json::as_array() {
  if (type_ != Type::Array) type_mismatch(Type::Array, type_);
  return a_;
}
const Json::Object& Json::as_object() const {
  if (type_ != Type::Object) type_mismatch(Type::Object, type_);
  return o_;
}
Json::Object& Json::as_object() {
  if (type_ != Type::Object) type_mismatch(Type::Object, type_);
  return o_;
}

size_t Json::size() const {
  if (type_ == Type::Array) return a_.size();
  if (type_ == Type::Object) return o_.size();
  return 0;
}

const Json* Json::find(std::string_view key) const {
  if (type_ != Type::Object) return nullptr;
  for (const auto& kv : o_)
    if (kv.first == key) return &kv.second;
  return nullptr;
}
Json* Json::find(std::string_view key) {
  return const_cast<Json*>(static_cast<const Json*>(this)->find(key));
}

const Json& Json::at(std::string_view key) const {
  const Json* v = find(key);
  if (!v) fail("json: missing key '", key, "'");
  return *v;
}
const Json& Json::at(size_t index) const {
  const auto& a = as_array();
  if (index >= a.size()) fail("json: index ", index, " out of range (size ", a.size(), ")");
  return a[index];
}

Json& Json::set(std::string key, Json value) {
  if (type_ == Type::Null) type_ = Type::Object;
  if (Json* v = find(key)) return *v = std::move(value);
  as_object().emplace_back(std::move(key), std::move(value));
  return o_.back().second;
}

void Json::push_back(Json value) {
  if (type_ == Type::Null) type_ = Type::Array;
  as_array().push_back(std::move(value));
}

std::string Json::dump_python(int indent) const {
  std::string out;
  dump(*this, out, indent, 0);
  return out;
}

bool operator==(const Json& a, const Json& b) {
  // Python compares 1 == 1.0 as equal; keep that so template-level comparisons agree.
  if (a.is_number() && b.is_number()) {
    if (a.is_int() && b.is_int()) return a.i_ == b.i_;
    return a.as_double() == b.as_double();
  }
  if (a.type_ != b.type_) return false;
  switch (a.type_) {
    case Json::Type::Null:
      return true;
    case Json::Type::Bool:
      return a.b_ == b.b_;
    case Json::Type::String:
      return a.s_ == b.s_;
    case Json::Type::Array:
      return a.a_ == b.a_;
    case Json::Type::Object: {
      if (a.o_.size() != b.o_.size()) return false;
      for (const auto& kv : a.o_) {
        const Json* other = b.find(kv.first);
        if (!other || *other != kv.second) return false;
      }
      return true;
    }
    default:
      return false;
  }
}

namespace pyfmt {

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Shortest round-trip digits in scientific form, then laid out with Python's repr rule:
  // positional when the decimal exponent is in [-4, 16), scientific otherwise.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t epos = sci.find('e');
  int exp = std::stoi(sci.substr(epos + 1));
  std::string digits;
  for (size_t i = 0; i < epos; ++i)
    if (sci[i] != '.') digits += sci[i];
  std::string out = neg ? "-" : "";
  if (exp < -4 || exp >= 16) {
    out += digits[0];
    if (digits.size() > 1) out += "." + digits.substr(1);
    char ebuf[16];
    std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += ebuf;
  } else if (exp < 0) {
    out += "0." + std::string(size_t(-exp - 1), '0') + digits;
  } else if (size_t(exp) + 1 >= digits.size()) {
    out += digits + std::string(size_t(exp) + 1 - digits.size(), '0') + ".0";
  } else {
    out += digits.substr(0, size_t(exp) + 1) + "." + digits.substr(size_t(exp) + 1);
  }
  return out;
}

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  static const char* hex = "0123456789abcdef";
  auto u_escape = [&](uint32_t u) {
    out += "\\u";
    for (int shift = 12; shift >= 0; shift -= 4) out += hex[(u >> shift) & 15];
  };
  out += '"';
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (c < 0x20) {
      u_escape(c);
    } else if (c < 0x80 || !ensure_ascii) {
      out += char(c);
    } else {
      // Decode one UTF-8 sequence; malformed bytes are written as U+FFFD like a lossy decode.
      uint32_t cp = 0xFFFD;
      size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
      if (len > 1 && i + len <= s.size()) {
        cp = c & (0x3F >> (len - 1));
        for (size_t k = 1; k < len; ++k)
          cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
        i += len - 1;
      }
      if (cp >= 0x10000) {
        cp -= 0x10000;
        u_escape(0xD800 + (cp >> 10));
        u_escape(0xDC00 + (cp & 0x3FF));
      } else {
        u_escape(cp);
      }
    }
  }
  out += '"';
}

}  // namespace pyfmt

}  // namespace hearth
