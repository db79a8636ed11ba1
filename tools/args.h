// Command-line options for one subcommand: each command lists the options it accepts ("--model="
// takes a value, "--stop=*" takes a value and may be repeated, "--json" is a flag, and a bare
// upper-case word such as "PROMPT" allows one positional argument of that name); anything else is
// an error naming the option and, when one is close, the option that was probably meant.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hearth::cli {

class Args {
 public:
  Args(int argc, char** argv, const std::vector<std::string>& spec);

  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::string str(const std::string& name, const std::string& def = "") const;
  std::string required(const std::string& name) const;
  // Every value of a repeatable option, in the order given.
  std::vector<std::string> all(const std::string& name) const;
  int integer(const std::string& name, int def) const;
  // A finite number (inf and nan are refused).
  double number(const std::string& name, double def) const;
  std::optional<double> opt_number(const std::string& name) const;
  std::optional<int> opt_integer(const std::string& name) const;
  // "1,2,3" -> {1, 2, 3}
  std::vector<int32_t> int_list(const std::string& name) const;
  // A command's own default for an option the shared code reads (e.g. logits' exact f32 KV
  // cache), when it was not given.
  void set_default(const std::string& name, const std::string& value) {
    if (!has(name)) values_[name] = {value};
  }
  // The positional argument, when the spec allows one and it was given.
  const std::optional<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::vector<std::string>> values_;
  std::optional<std::string> positional_;
};

// The spec entry closest to `option` by edit distance, or "" when none is plausibly meant.
std::string nearest_option(const std::string& option, const std::vector<std::string>& spec);

}  // namespace hearth::cli
