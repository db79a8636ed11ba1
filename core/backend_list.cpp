// The backends this build has, one line each, best-first by priority when none is named. This is
// the one place in core/ that names a backend: adding one means a line here and its factory header.
#include "backends/cpu/cpu_factory.h"
#include "core/backend.h"

namespace hearth {

const std::vector<BackendFactory>& backend_list() {
  static const std::vector<BackendFactory> list = {
      {"cpu", 10, [] { return true; }, cpu::make_cpu_backend},
  };
  return list;
}

}  // namespace hearth
