#include "core/json_writer.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace hearth {

std::string json_quote(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        o += "\\\"";
        break;
      case '\\':
        o += "\\\\";
        break;
      case '\n':
        o += "\\n";
        break;
      case '\r':
        o += "\\r";
        break;
      case '\t':
        o += "\\t";
        break;
      case '\b':
        o += "\\b";
        break;
      case '\f':
        o += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          o += buf;
        } else {
          o += char(c);
        }
    }
  }
  return o + "\"";
}

void JsonWriter::sep() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_ += ',';
    first_.back() = false;
  }
}

JsonWriter& JsonWriter::begin_object() {
  sep();
  out_ += '{';
  first_.push_back(true);
  return *this;
}
JsonWriter& JsonWriter::end_object() {
  out_ += '}';
  first_.pop_back();
  return *this;
}
JsonWriter& JsonWriter::begin_array() {
  sep();
  out_ += '[';
  first_.push_back(true);
  return *this;
}
JsonWriter& JsonWriter::end_array() {
  out_ += ']';
  first_.pop_back();
  return *this;
}
JsonWriter& JsonWriter::key(const std::string& k) {
  sep();
  out_ += json_quote(k);
  out_ += ':';
  after_key_ = true;
  return *this;
}
JsonWriter& JsonWriter::value(const std::string& s) {
  sep();
  out_ += json_quote(s);
  return *this;
}
JsonWriter& JsonWriter::value(double d) {
  sep();
  if (!std::isfinite(d)) {
    out_ += "null";
    return *this;
  }
  // The shortest form that reads back to the same double.
  char buf[32];
  for (int prec = 6; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  out_ += buf;
  return *this;
}
JsonWriter& JsonWriter::value(float f) {
  sep();
  if (!std::isfinite(f)) {
    out_ += "null";
    return *this;
  }
  char buf[32];
  for (int prec = 1; prec <= 9; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, double(f));
    if (std::strtof(buf, nullptr) == f) break;
  }
  out_ += buf;
  return *this;
}

JsonWriter& JsonWriter::value(int64_t i) {
  sep();
  out_ += std::to_string(i);
  return *this;
}
JsonWriter& JsonWriter::value(bool b) {
  sep();
  out_ += b ? "true" : "false";
  return *this;
}
JsonWriter& JsonWriter::null() {
  sep();
  out_ += "null";
  return *this;
}
JsonWriter& JsonWriter::raw(const std::string& json) {
  sep();
  out_ += json;
  return *this;
}

}  // namespace hearth
