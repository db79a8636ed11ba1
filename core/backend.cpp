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
      // Asked for by name: its constructor says why it cannot run here (no device, no driver).
      if (f.name == name) return f.create(opt);
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

void check_supported(const Backend& be, const Graph& g, const std::string& display_name,
                     const std::string& weights_it_reads) {
  for (const Node& n : g.nodes()) {
    if (be.supports_op(g, n)) continue;
    if (n.op == Op::MoE)
      fail("the ", display_name,
           " backend does not run Qwen3-MoE's mixture-of-experts layers yet (",
           g.tensor(n.out).name, "); use --backend cpu");
    for (int id : n.in)
      if (id >= 0 && g.tensor(id).kind == TensorKind::Weight)
        fail("the ", display_name, " backend does not support ",
             dtype_name(g.tensor(id).weight.dtype), " weights in a ", op_name(n.op), " (",
             g.tensor(id).name, "; it runs ", weights_it_reads, "); use --backend cpu");
    fail("the ", display_name, " backend does not support this ", op_name(n.op), " node (",
         g.tensor(n.out).name, ")");
  }
}

}  // namespace hearth
