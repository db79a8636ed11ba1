// Python str semantics over UTF-8 std::string: templates index, strip, split and case-map by code
// point, and Python's notion of whitespace is wider than C's isspace.
#include <cstdio>

#include <utf8proc.h>

#include "models/jinja_internal.h"

namespace hearth::jinja::detail {

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    if (len == 0 || i + len > s.size()) {
      out += char32_t(0xFFFD);
      ++i;
      continue;
    }
    char32_t cp = len == 1 ? c : c & (0x3F >> (len - 1));
    for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out += cp;
    i += len;
  }
  return out;
}

void utf8_append(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += char(c);
  } else if (c < 0x800) {
    out += char(0xC0 | (c >> 6));
    out += char(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += char(0xE0 | (c >> 12));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  } else {
    out += char(0xF0 | (c >> 18));
    out += char(0x80 | ((c >> 12) & 0x3F));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  }
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) utf8_append(out, c);
  return out;
}

int64_t utf8_length(std::string_view s) {
  int64_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

bool py_isspace(char32_t c) {
  if (c < 0x80) return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20);
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

namespace {

utf8proc_category_t category(char32_t c) {
  return utf8proc_category(utf8proc_int32_t(c));
}

// Characters Python's repr() escapes: controls, separators and format characters (the common
// ones; unassigned code points are not tracked).
bool py_printable(char32_t c) {
  if (c == ' ') return true;
  switch (category(c)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
      return false;
    default:
      return true;
  }
}

}  // namespace

char32_t to_upper_cp(char32_t c) {
  return char32_t(utf8proc_toupper(utf8proc_int32_t(c)));
}
char32_t to_lower_cp(char32_t c) {
  return char32_t(utf8proc_tolower(utf8proc_int32_t(c)));
}
char32_t to_title_cp(char32_t c) {
  return char32_t(utf8proc_totitle(utf8proc_int32_t(c)));
}
bool is_cased_cp(char32_t c) {
  auto k = category(c);
  return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}
bool is_alpha_cp(char32_t c) {
  auto k = category(c);
  return k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
}
bool is_digit_cp(char32_t c) {
  return category(c) == UTF8PROC_CATEGORY_ND;
}
bool is_alnum_cp(char32_t c) {
  auto k = category(c);
  return is_alpha_cp(c) || (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
}

std::string py_repr_str(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  char buf[16];
  for (char32_t c : utf8_decode(s)) {
    if (c == char32_t(quote) || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(c));
      out += buf;
    } else if (c < 0x80 || py_printable(c)) {
      utf8_append(out, c);
    } else {
      if (c < 0x100)
        std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(c));
      else if (c < 0x10000)
        std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
      else
        std::snprintf(buf, sizeof buf, "\\U%08x", unsigned(c));
      out += buf;
    }
  }
  out += quote;
  return out;
}

// Python's full case mappings differ from the simple ones for a few characters templates might
// meet; those are spelled out here.
std::string py_upper(std::string_view s) {
  std::string out;
  for (char32_t c : utf8_decode(s)) {
    if (c == 0xDF)
      out += "SS";
    else
      utf8_append(out, to_upper_cp(c));
  }
  return out;
}

std::string py_lower(std::string_view s) {
  std::string out;
  for (char32_t c : utf8_decode(s)) {
    if (c == 0x130)
      out += "i\xCC\x87";
    else
      utf8_append(out, to_lower_cp(c));
  }
  return out;
}

std::string py_title(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (char32_t c : utf8_decode(s)) {
    utf8_append(out, prev_cased ? to_lower_cp(c) : to_title_cp(c));
    prev_cased = is_cased_cp(c);
  }
  return out;
}

std::string py_capitalize(std::string_view s) {
  std::string out;
  bool first = true;
  for (char32_t c : utf8_decode(s)) {
    utf8_append(out, first ? to_title_cp(c) : to_lower_cp(c));
    first = false;
  }
  return out;
}

std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right) {
  std::u32string set = chars ? utf8_decode(*chars) : std::u32string();
  auto strip_it = [&](char32_t c) {
    return chars ? set.find(c) != std::u32string::npos : py_isspace(c);
  };
  std::u32string u = utf8_decode(s);
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip_it(u[b])) ++b;
  if (right)
    while (e > b && strip_it(u[e - 1])) --e;
  return utf8_encode(std::u32string_view(u).substr(b, e - b));
}

std::vector<std::string> py_split(std::string_view s, const std::string* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) rt_fail("ValueError: empty separator");
    size_t start = 0;
    while (maxsplit < 0 || int64_t(out.size()) < maxsplit) {
      size_t pos = s.find(*sep, start);
      if (pos == std::string_view::npos) break;
      out.emplace_back(s.substr(start, pos - start));
      start = pos + sep->size();
    }
    out.emplace_back(s.substr(start));
    return out;
  }
  std::u32string u = utf8_decode(s);
  size_t i = 0, n = u.size();
  while (maxsplit < 0 || int64_t(out.size()) < maxsplit) {
    while (i < n && py_isspace(u[i])) ++i;
    if (i == n) break;
    size_t j = i;
    while (i < n && !py_isspace(u[i])) ++i;
    out.push_back(utf8_encode(std::u32string_view(u).substr(j, i - j)));
  }
  while (i < n && py_isspace(u[i])) ++i;
  if (i < n) out.push_back(utf8_encode(std::u32string_view(u).substr(i)));
  return out;
}

std::vector<std::string> py_splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> out;
  std::u32string u = utf8_decode(s);
  size_t start = 0, i = 0;
  while (i < u.size()) {
    char32_t c = u[i];
    bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) ||
               c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) {
      ++i;
      continue;
    }
    size_t eol = i;
    i += (c == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ? 2 : 1;
    out.push_back(utf8_encode(std::u32string_view(u).substr(start, (keepends ? i : eol) - start)));
    start = i;
  }
  if (start < u.size()) out.push_back(utf8_encode(std::u32string_view(u).substr(start)));
  return out;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view repl,
                       int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts the replacement before every character and at the end.
    std::u32string u = utf8_decode(s);
    int64_t done = 0;
    for (char32_t c : u) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      utf8_append(out, c);
    }
    if (count < 0 || done < count) out += repl;
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t pos = s.find(old, start);
    if (pos == std::string_view::npos) break;
    out += s.substr(start, pos - start);
    out += repl;
    start = pos + old.size();
    ++done;
  }
  out += s.substr(start);
  return out;
}

namespace {

template <typename T>
std::string cformat(const std::string& spec, T arg) {
  int n = std::snprintf(nullptr, 0, spec.c_str(), arg);
  std::string out(size_t(n > 0 ? n : 0), '\0');
  std::snprintf(out.data(), out.size() + 1, spec.c_str(), arg);
  return out;
}

// One printf-style conversion as Python's `%` operator does it.
std::string percent_one(char conv, const std::string& flags, const Value& v) {
  int64_t n = 0;  // each digit run (width, precision) must stay within the limit
  for (char ch : flags) n = ch >= '0' && ch <= '9' ? width_digit(n, ch) : 0;
  std::string spec = "%" + flags;
  std::string c(1, conv);
  switch (conv) {
    case 's': {
      std::string s = to_str(v);
      return flags.empty() ? s : cformat(spec + "s", s.c_str());
    }
    case 'r':
      return repr(v);
    case 'd':
    case 'i':
    case 'u':
      if (!v.is_number())
        rt_fail("TypeError: %", c, " format: a real number is required, not ", type_name(v));
      return cformat(spec + "lld",
                     (long long)(v.kind == Value::Kind::Float ? int64_t(v.f) : v.as_int()));
    case 'x':
    case 'X':
    case 'o':
      if (!v.is_int())
        rt_fail("TypeError: %", c, " format: an integer is required, not ", type_name(v));
      return cformat(spec + "ll" + c, (long long)v.as_int());
    case 'f':
    case 'F':
    case 'e':
    case 'E':
    case 'g':
    case 'G':
      if (!v.is_number()) rt_fail("TypeError: must be real number, not ", type_name(v));
      return cformat(spec + c, v.as_float());
    default:
      rt_fail("ValueError: unsupported format character '", c, "'");
  }
}

}  // namespace

std::string percent_format(const std::string& fmt, const Value& args) {
  List positional;
  const DictBox* mapping = nullptr;
  if (args.kind == Value::Kind::Tuple)
    positional = args.items();
  else if (args.kind == Value::Kind::Dict)
    mapping = &args.dict();
  else
    positional.push_back(args);
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) rt_fail("ValueError: incomplete format");
    if (fmt[i] == '%') {
      out += '%';
      continue;
    }
    const Value* arg = nullptr;
    Value keyed;
    if (fmt[i] == '(') {
      size_t close = fmt.find(')', i);
      if (close == std::string::npos || !mapping) rt_fail("TypeError: format requires a mapping");
      const Value* found = mapping->find(std::string_view(fmt).substr(i + 1, close - i - 1));
      if (!found) rt_fail("KeyError: ", fmt.substr(i + 1, close - i - 1));
      keyed = *found;
      arg = &keyed;
      i = close + 1;
    }
    size_t fstart = i;
    while (i < fmt.size() &&
           std::string_view("-+ #0123456789.").find(fmt[i]) != std::string_view::npos)
      ++i;
    if (i >= fmt.size()) rt_fail("ValueError: incomplete format");
    if (!arg) {
      if (next >= positional.size()) rt_fail("TypeError: not enough arguments for format string");
      arg = &positional[next++];
    }
    out += percent_one(fmt[i], fmt.substr(fstart, i - fstart), *arg);
  }
  if (!mapping && next < positional.size())
    rt_fail("TypeError: not all arguments converted during string formatting");
  return out;
}

}  // namespace hearth::jinja::detail
