// A Jinja2 interpreter for Hugging Face chat templates. It reproduces what transformers renders:
// a jinja2 ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, the loopcontrols
// extension, a `tojson` filter that is Python's json.dumps (ensure_ascii=False, no HTML escaping),
// and the globals raise_exception and strftime_now. Values behave as their Python counterparts
// (str/int/float/list/dict), because templates print and compare them the Python way.
#pragma once
#include <memory>
#include <string>

#include "models/json_value.h"

namespace hearth {
namespace jinja {

namespace detail {
struct Program;
}

class Template {
 public:
  // An empty template; renders "".
  Template();
  // Syntax errors throw hearth::Error "template line L column C: ...".
  static Template parse(const std::string& source);
  // `context` is an object whose members become template variables. Runtime errors throw
  // hearth::Error "template line L column C: ..."; raise_exception(msg) throws one containing msg.
  std::string render(const Json& context) const;

 private:
  std::shared_ptr<const detail::Program> program_;
};

}  // namespace jinja
}  // namespace hearth
