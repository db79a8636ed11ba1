// A small dynamic JSON value for chat messages, tool schemas and template data. Objects keep their
// keys in insertion order because Python dicts do, and the chat template prints them in that order.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hearth {

class Json {
 public:
  enum class Type { Null, Bool, Int, Float, String, Array, Object };
  using Array = std::vector<Json>;
  using Object = std::vector<std::pair<std::string, Json>>;

  Json() = default;
  Json(std::nullptr_t) {}
  Json(bool b) : type_(Type::Bool), b_(b) {}
  Json(int i) : type_(Type::Int), i_(i) {}
  Json(int64_t i) : type_(Type::Int), i_(i) {}
  Json(double d) : type_(Type::Float), d_(d) {}
  Json(const char* s) : type_(Type::String), s_(s) {}
  Json(std::string s) : type_(Type::String), s_(std::move(s)) {}
  Json(std::string_view s) : type_(Type::String), s_(s) {}
  Json(Array a) : type_(Type::Array), a_(std::move(a)) {}
  Json(Object o) : type_(Type::Object), o_(std::move(o)) {}
  static Json array() { return Json(Array{}); }
  static Json object() { return Json(Object{}); }

  // Throws hearth::Error naming the offset of the first syntax error.
  static Json parse(std::string_view text);

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::Null; }
  bool is_bool() const { return type_ == Type::Bool; }
  bool is_int() const { return type_ == Type::Int; }
  bool is_float() const { return type_ == Type::Float; }
  bool is_number() const { return type_ == Type::Int || type_ == Type::Float; }
  bool is_string() const { return type_ == Type::String; }
  bool is_array() const { return type_ == Type::Array; }
  bool is_object() const { return type_ == Type::Object; }

  // Accessors throw hearth::Error on a type mismatch; as_double accepts integers too.
  bool as_bool() const;
  int64_t as_int() const;
  double as_double() const;
  const std::string& as_string() const;
  const Array& as_array() const;
  Array& as_array();
  const Object& as_object() const;
  Object& as_object();

  // Elements of an array or members of an object; 0 for scalars.
  size_t size() const;
  // Object lookup; nullptr when absent or when this is not an object.
  const Json* find(std::string_view key) const;
  Json* find(std::string_view key);
  bool contains(std::string_view key) const { return find(key) != nullptr; }
  // Throws hearth::Error when the key or index is missing.
  const Json& at(std::string_view key) const;
  const Json& at(size_t index) const;
  // Replaces an existing key in place (keeping its position, as a Python dict does) or appends.
  Json& set(std::string key, Json value);
  void push_back(Json value);

  // json.dumps(self, ensure_ascii=False) byte for byte: separators ", " and ": ", floats as Python
  // repr. indent >= 0 gives json.dumps(indent=indent), whose item separator is "," instead.
  std::string dump_python(int indent = -1) const;

  friend bool operator==(const Json& a, const Json& b);
  friend bool operator!=(const Json& a, const Json& b) { return !(a == b); }

 private:
  Type type_ = Type::Null;
  bool b_ = false;
  int64_t i_ = 0;
  double d_ = 0;
  std::string s_;
  Array a_;
  Object o_;
};

namespace pyfmt {
// repr(float) as Python prints it: shortest round trip, "1.0", "1e+16", "1.5e-05", "inf", "nan".
std::string float_repr(double d);
// Appends a JSON string literal the way Python's json module writes it: ensure_ascii=false keeps
// every non-ASCII character (U+2028 included) raw; true writes \uXXXX with surrogate pairs.
void append_json_string(std::string& out, std::string_view s, bool ensure_ascii);
}  // namespace pyfmt

}  // namespace hearth
