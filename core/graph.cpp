#include "core/graph.h"

#include <set>

#include "core/error.h"
#include "core/quant_format.h"

namespace hearth {

const char* op_name(Op op) {
  switch (op) {
    case Op::Embed:
      return "embed";
    case Op::RmsNorm:
      return "rms_norm";
    case Op::HeadRmsNorm:
      return "head_rms_norm";
    case Op::MatMul:
      return "matmul";
    case Op::Rope:
      return "rope";
    case Op::Attention:
      return "attention";
    case Op::SiluMul:
      return "silu_mul";
    case Op::Add:
      return "add";
    case Op::GatherRows:
      return "gather_rows";
    case Op::MoE:
      return "moe";
    case Op::kCount:
      break;
  }
  return "?";
}

int Graph::weight(const std::string& name, const Tensor& t) {
  GraphTensor g;
  g.name = name;
  g.kind = TensorKind::Weight;
  g.weight = t;
  g.cols = t.cols();
  tensors_.push_back(g);
  return int(tensors_.size() - 1);
}

int Graph::activation(const std::string& name, int64_t cols, Rows rows) {
  GraphTensor g;
  g.name = name;
  g.kind = TensorKind::Activation;
  g.rows = rows;
  g.cols = cols;
  tensors_.push_back(g);
  return int(tensors_.size() - 1);
}

int Graph::add(Op op, int out, std::initializer_list<int> in, NodeParams p) {
  Node n;
  n.op = op;
  n.out = out;
  int i = 0;
  for (int id : in) {
    if (i == 3) fail("graph: too many inputs to ", op_name(op));
    if (id < 0 || id >= int(tensors_.size())) fail("graph: bad input to ", op_name(op));
    n.in[i++] = id;
  }
  n.p = p;
  nodes_.push_back(n);
  return out;
}

size_t Graph::weight_bytes() const {
  std::set<const void*> seen;
  size_t bytes = 0;
  for (const GraphTensor& t : tensors_)
    if (t.kind == TensorKind::Weight && seen.insert(t.weight.data).second)
      bytes += quant::weight_bytes(t.weight);
  return bytes;
}

}  // namespace hearth
