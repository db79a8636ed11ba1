#include "tools/args.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "core/error.h"

namespace hearth::cli {

namespace {

std::string option_name(const std::string& spec_entry) {
  const size_t eq = spec_entry.find('=');
  return eq == std::string::npos ? spec_entry : spec_entry.substr(0, eq);
}

bool is_positional_name(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= 'A' && c <= 'Z'; });
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string nearest_option(const std::string& option, const std::vector<std::string>& spec) {
  // Underscores for dashes and a missing dash are the usual slips; count them as one edit.
  std::string norm = option;
  std::replace(norm.begin(), norm.end(), '_', '-');
  if (norm.rfind("--", 0) != 0) norm = (norm.rfind('-', 0) == 0 ? "-" : "--") + norm;
  std::string best;
  size_t best_d = std::max<size_t>(2, norm.size() / 3) + 1;
  for (const auto& s : spec) {
    const std::string name = option_name(s);
    if (name.rfind("--", 0) != 0) continue;
    const size_t d = edit_distance(norm, name) + (norm != option ? 1 : 0);
    if (d < best_d) best_d = d, best = name;
  }
  return best;
}

Args::Args(int argc, char** argv, const std::vector<std::string>& spec) {
  std::string positional_name;
  for (const auto& s : spec)
    if (is_positional_name(s)) positional_name = s;
  bool options_done = false;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (!options_done && a == "--") {
      options_done = true;
      continue;
    }
    if (options_done || a == "-" || a.empty() || a[0] != '-') {
      if (positional_name.empty()) fail("unexpected argument '", a, "' (options start with --)");
      if (positional_)
        fail("more than one ", positional_name, " given ('", *positional_, "', '", a,
             "'); quote it as one argument");
      positional_ = a;
      continue;
    }
    std::string val;
    bool has_inline = false;
    if (auto eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      val = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_inline = true;
    }
    bool known = false, takes_value = false, repeatable = false;
    for (const auto& s : spec) {
      if (s == a + "=" || s == a + "=*")
        known = takes_value = true, repeatable = s.back() == '*';
      else if (s == a)
        known = true;
    }
    if (!known) {
      const std::string near = nearest_option(a, spec);
      if (!near.empty()) fail("unknown option '", a, "' (did you mean ", near, "?)");
      fail("unknown option '", a, "' (see --help)");
    }
    if (takes_value && !has_inline) {
      if (i + 1 >= argc) fail("option ", a, " needs a value");
      val = argv[++i];
    } else if (!takes_value && has_inline) {
      fail("option ", a, " takes no value");
    }
    auto& slot = values_[a];
    if (!repeatable) slot.clear();  // the last one wins, as in most tools
    slot.push_back(val);
  }
}

std::string Args::str(const std::string& name, const std::string& def) const {
  auto it = values_.find(name);
  return it == values_.end() ? def : it->second.back();
}

std::string Args::required(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end() || it->second.back().empty()) fail("missing required option ", name);
  return it->second.back();
}

std::vector<std::string> Args::all(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

namespace {

// A 32-bit integer option value; a wider one is refused as out of range, never wrapped.
int32_t parse_int32(const std::string& name, const std::string& s) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end) fail("option ", name, ": '", s, "' is not an integer");
  if (errno == ERANGE || v < INT32_MIN || v > INT32_MAX)
    fail("option ", name, ": ", s, " is out of range [", INT32_MIN, ", ", INT32_MAX, "]");
  return int32_t(v);
}

}  // namespace

std::optional<int> Args::opt_integer(const std::string& name) const {
  if (!has(name)) return std::nullopt;
  const std::string s = str(name);
  return parse_int32(name, s);
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
  if (!std::isfinite(v)) fail("option ", name, ": '", s, "' is not a finite number");
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
    out.push_back(parse_int32(name, s.substr(i, j - i)));
    i = j + 1;
  }
  return out;
}

}  // namespace hearth::cli
