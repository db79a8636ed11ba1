#include "core/backend.h"

#include <algorithm>

#include "core/error.h"

namespace hearth {

std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  for (auto& f : backend_list()) names.push_back(f.name);
  return names;
}

std::unique_ptr<Backend> create_backend(const std::string& name, const BackendOptions& opt) {
  const BackendFactory* best = nullptr;
  for (auto& f : backend_list()) {
    if (!name.empty()) {
      if (f.name == name) {
        if (f.available && !f.available()) fail("backend '", name, "' is not available here");
        return f.create(opt);
      }
      continue;
    }
    // Priority first: asking a GPU backend whether it is available starts its driver.
    if ((!best || f.priority > best->priority) && (!f.available || f.available())) best = &f;
  }
  if (!name.empty()) {
    std::string all;
    for (auto& n : backend_names()) all += (all.empty() ? "" : ", ") + n;
    fail("unknown backend '", name, "' (available: ", all, ")");
  }
  if (!best) fail("no backend available");
  return best->create(opt);
}

}  // namespace hearth
