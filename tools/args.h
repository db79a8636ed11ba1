// Command-line options for one subcommand: each command lists the options it accepts ("--model="
// takes a value, "--json" is a flag); anything else is an error naming the option.
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
  int integer(const std::string& name, int def) const;
  double number(const std::string& name, double def) const;
  std::optional<double> opt_number(const std::string& name) const;
  std::optional<int> opt_integer(const std::string& name) const;
  // "1,2,3" -> {1, 2, 3}
  std::vector<int32_t> int_list(const std::string& name) const;

 private:
  std::map<std::string, std::string> values_;
};

}  // namespace hearth::cli
