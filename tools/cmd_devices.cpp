// `hearth devices`: every backend this build has and the devices it can run on, with their limits.
#include <cstdio>

#include "core/backend.h"
#include "tools/args.h"
#include "tools/commands.h"

namespace hearth::cli {

int cmd_devices(int argc, char** argv) {
  Args args(argc, argv, {});
  for (const BackendFactory& f : backend_list()) {
    const auto lines = f.devices ? f.devices() : std::vector<std::string>{};
    if (lines.empty()) std::printf("%s: no device found\n", f.name.c_str());
    for (const auto& l : lines) std::printf("%s\n", l.c_str());
  }
  return 0;
}

}  // namespace hearth::cli
