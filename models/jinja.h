// A Jinja2 interpreter for Hugging Face chat templates. It reproduces what transformers renders:
// a jinja2 ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, the loopcontrols
// extension, a `tojson` filter that is Python's json.dumps (ensure_ascii=False, no HTML escaping),
// and the globals raise_exception and strftime_now. Values behave as their Python counterparts
// (str/int/float/list/dict), because templates print and compare them the Python way.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "models/json_value.h"

namespace hearth {
namespace jinja {

namespace detail {
struct Program;
}

// What one render may spend. Chat templates come from the internet: each loop may be small and the
// whole still unbounded (nested loops), or a string may double each iteration, so the total is
// bounded too. A template over the limits fails with an error naming its line.
struct Limits {
  uint64_t max_steps = 5'000'000;        // statements and expressions evaluated (~2 s)
  size_t max_output = size_t(32) << 20;  // bytes of rendered text
  size_t max_value = size_t(16) << 20;   // bytes of one string, items of one list or dict
  uint64_t max_work = uint64_t(1) << 30;  // bytes and items of all values evaluated, summed
};

class Template {
 public:
  // An empty template; renders "".
  Template();
  // Syntax errors throw hearth::Error "template line L column C: ...".
  static Template parse(const std::string& source);
  // `context` is an object whose members become template variables. Runtime errors throw
  // hearth::Error "template line L column C: ..."; raise_exception(msg) throws one containing msg.
  std::string render(const Json& context, const Limits& limits = {}) const;

 private:
  std::shared_ptr<const detail::Program> program_;
};

}  // namespace jinja
}  // namespace hearth
