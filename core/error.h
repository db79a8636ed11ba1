// Errors: one exception type inside the library, turned into an `error:` line by the CLI and into
// an error code by the C API. Messages name the file, tensor or field at fault.
#pragma once
#include <stdexcept>
#include <string>

namespace hearth {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

// Builds a message from pieces: fail("tensor ", name, ": expected shape ", ...).
template <typename... Args>
[[noreturn]] void fail(const Args&... args);

}  // namespace hearth

#include <sstream>
namespace hearth {
template <typename... Args>
[[noreturn]] void fail(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  throw Error(os.str());
}
}  // namespace hearth
