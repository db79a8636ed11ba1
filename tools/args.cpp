#include "tools/args.h"

#include <cerrno>
#include <cstdlib>

#include "core/error.h"

namespace hearth::cli {

Args::Args(int argc, char** argv, const std::vector<std::string>& spec) {
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    std::string val;
    bool has_inline = false;
    if (auto eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      val = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_inline = true;
    }
    bool known = false, takes_value = false;
    for (const auto& s : spec) {
      if (s == a + "=")
        known = takes_value = true;
      else if (s == a)
        known = true;
    }
    if (!known) fail("unknown option '", a, "' (see hearth help)");
    if (takes_value && !has_inline) {
      if (i + 1 >= argc) fail("option ", a, " needs a value");
      val = argv[++i];
    } else if (!takes_value && has_inline) {
      fail("option ", a, " takes no value");
    }
    values_[a] = val;
  }
}

std::string Args::str(const std::string& name, const std::string& def) const {
  auto it = values_.find(name);
  return it == values_.end() ? def : it->second;
}

std::string Args::required(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end() || it->second.empty()) fail("missing required option ", name);
  return it->second;
}

std::optional<int> Args::opt_integer(const std::string& name) const {
  if (!has(name)) return std::nullopt;
  const std::string s = str(name);
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end || errno || v < INT32_MIN || v > INT32_MAX)
    fail("option ", name, ": '", s, "' is not an integer");
  return int(v);
}

int Args::integer(const std::string& name, int def) const {
  auto v = opt_integer(name);
  return v ? *v : def;
}

std::optional<double> Args::opt_number(const std::string& name) const {
  if (!has(name)) return std::nullopt;
  const std::string s = str(name);
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end) fail("option ", name, ": '", s, "' is not a number");
  return v;
}

double Args::number(const std::string& name, double def) const {
  auto v = opt_number(name);
  return v ? *v : def;
}

std::vector<int32_t> Args::int_list(const std::string& name) const {
  std::vector<int32_t> out;
  const std::string s = required(name);
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    std::string item = s.substr(i, j - i);
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end || errno || v < INT32_MIN || v > INT32_MAX)
      fail("option ", name, ": '", item, "' is not an integer");
    out.push_back(int32_t(v));
    i = j + 1;
  }
  return out;
}

}  // namespace hearth::cli
