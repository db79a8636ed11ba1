// A minimal streaming JSON writer for machine-readable output (manifests, metrics, CLI records).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace hearth {

class JsonWriter {
 public:
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(const std::string& k);
  JsonWriter& value(const std::string& s);
  JsonWriter& value(const char* s) { return value(std::string(s)); }
  JsonWriter& value(double d);
  JsonWriter& value(
      float f);  // shortest form that reads back to the same float: 0.6, not 0.60000002
  JsonWriter& value(int64_t i);
  JsonWriter& value(int i) { return value(int64_t(i)); }
  JsonWriter& value(size_t i) { return value(int64_t(i)); }
  JsonWriter& value(bool b);
  JsonWriter& null();
  JsonWriter& raw(const std::string& json);  // an already-serialised value
  template <typename T>
  JsonWriter& array(const std::vector<T>& v) {
    begin_array();
    for (const auto& x : v) value(x);
    return end_array();
  }
  template <typename T>
  JsonWriter& field(const std::string& k, const T& v) {
    key(k);
    return value(v);
  }
  const std::string& str() const { return out_; }

 private:
  void sep();
  std::string out_;
  std::vector<bool> first_;
  bool after_key_ = false;
};

// JSON string literal with quotes; non-ASCII passes through as UTF-8.
std::string json_quote(const std::string& s);

}  // namespace hearth
