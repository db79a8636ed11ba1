#include "backends/cpu/plan.h"

namespace hearth::cpu {

namespace {

struct Planner {
  const Graph& g;
  const std::vector<Node>& nodes;
  std::vector<std::vector<int>> readers;  // per tensor: nodes reading it

  explicit Planner(const Graph& graph) : g(graph), nodes(graph.nodes()) {
    readers.resize(g.tensors().size());
    for (size_t i = 0; i < nodes.size(); ++i)
      for (int id : nodes[i].in)
        if (id >= 0) readers[size_t(id)].push_back(int(i));
  }

  const Node* at(size_t i) const { return i < nodes.size() ? &nodes[i] : nullptr; }

  // A tensor an epilogue may keep to itself: read only by node `reader` and not the graph output.
  bool private_to(int tensor, int reader) const {
    const auto& r = readers[size_t(tensor)];
    return tensor != g.output && r.size() == 1 && r[0] == reader;
  }

  // Consecutive MatMuls from node i that all read x; returns how many.
  size_t matmuls_reading(size_t i, int x) const {
    size_t n = 0;
    while (at(i + n) && at(i + n)->op == Op::MatMul && at(i + n)->in[0] == x) ++n;
    return n;
  }

  // MatMul parts from nodes [i, i + n) and whatever epilogue follows; returns the next node.
  size_t linear(size_t i, size_t n, LinearStep& s) const {
    for (size_t j = i; j < i + n; ++j) {
      s.parts.push_back({nodes[j].in[1], nodes[j].out});
      if (nodes[j].out == g.output) s.logits = n == 1;
    }
    const size_t next = i + n;
    const Node* e = at(next);
    if (!e || s.logits) return next;
    if (n == 2 && e->op == Op::SiluMul && e->in[0] == s.parts[0].out &&
        e->in[1] == s.parts[1].out && private_to(e->in[0], int(next)) &&
        private_to(e->in[1], int(next))) {
      s.epi = LinearStep::Epilogue::SiluMul;
      s.out = e->out;
      return next + 1;
    }
    if (n == 1 && e->op == Op::Add && private_to(s.parts[0].out, int(next))) {
      const int y = s.parts[0].out;
      const int other = e->in[0] == y ? e->in[1] : e->in[0];
      // An in-place add (out == residual) would see its input overwritten by the matmul.
      if (other != y && e->out != other && (e->in[0] == y || e->in[1] == y)) {
        s.epi = LinearStep::Epilogue::AddResidual;
        s.residual = other;
        s.out = e->out;
        return next + 1;
      }
    }
    return next;
  }

  // HeadRmsNorm / Rope nodes from i, in place on q or k, ending in the Attention reading them.
  // Returns the node after the attention, or i when the pattern does not hold.
  size_t attention(size_t i, AttentionStep& s) const {
    size_t j = i;
    while (at(j) && (at(j)->op == Op::HeadRmsNorm || at(j)->op == Op::Rope) && j - i < 4) ++j;
    const Node* a = at(j);
    if (!a || a->op != Op::Attention) return i;
    s.q = a->in[0], s.k = a->in[1], s.v = a->in[2], s.out = a->out;
    s.p = a->p;
    if (s.q == s.k || s.q == s.v || s.k == s.v) return i;
    for (size_t n = i; n < j; ++n) {
      const Node& x = nodes[n];
      const int t = x.in[0];
      if (x.out != t || (t != s.q && t != s.k) || x.p.head_dim != s.p.head_dim) return i;
      const int heads = t == s.q ? s.p.n_heads : s.p.n_kv_heads;
      if (x.p.n_heads != heads) return i;
      bool& roped = t == s.q ? s.rope_q : s.rope_k;
      if (x.op == Op::Rope) {
        if (roped) return i;
        roped = true;
        s.p.rope_theta = x.p.rope_theta;
      } else {
        int& norm = t == s.q ? s.q_norm : s.k_norm;
        if (norm >= 0 || roped) return i;  // a norm after RoPE is another computation
        if (s.q_norm >= 0 || s.k_norm >= 0) {
          if (x.p.eps != s.eps) return i;  // one eps for both norms
        }
        norm = x.in[1];
        s.eps = x.p.eps;
      }
    }
    // The fused step leaves q and k normalised and rotated in place, as the nodes did, but for
    // long steps only after the attention has started; keep later readers out of it.
    for (int t : {s.q, s.k, s.v}) {
      if (t == g.output) return i;
      for (int r : readers[size_t(t)])
        if (r > int(j)) return i;
    }
    return j + 1;
  }

  std::vector<Step> run() const {
    std::vector<Step> steps;
    for (size_t i = 0; i < nodes.size();) {
      const Node& n = nodes[i];
      Step s;
      if (n.op == Op::RmsNorm && n.out != g.output) {
        const size_t m = matmuls_reading(i + 1, n.out);
        if (m > 0 && m == readers[size_t(n.out)].size()) {
          s.kind = Step::Kind::Linear;
          s.lin.x = n.in[0];
          s.lin.norm_w = n.in[1];
          s.lin.eps = n.p.eps;
          i = linear(i + 1, m, s.lin);
          steps.push_back(s);
          continue;
        }
      }
      if (n.op == Op::MatMul) {
        s.kind = Step::Kind::Linear;
        s.lin.x = n.in[0];
        i = linear(i, matmuls_reading(i, n.in[0]), s.lin);
        steps.push_back(s);
        continue;
      }
      if (n.op == Op::HeadRmsNorm || n.op == Op::Rope || n.op == Op::Attention) {
        const size_t next = attention(i, s.att);
        if (next != i) {
          s.kind = Step::Kind::Attention;
          steps.push_back(s);
          i = next;
          continue;
        }
        s.att = {};
      }
      s.kind = Step::Kind::Node;
      s.node = int(i++);
      steps.push_back(s);
    }
    return steps;
  }
};

}  // namespace

std::vector<Step> plan_steps(const Graph& g) {
  return Planner(g).run();
}

std::string describe_steps(const Graph& g, const std::vector<Step>& steps) {
  std::string out;
  for (const Step& s : steps) {
    switch (s.kind) {
      case Step::Kind::Node:
        out += op_name(g.nodes()[size_t(s.node)].op);
        break;
      case Step::Kind::Linear: {
        out += "linear";
        if (s.lin.norm_w >= 0) out += "[norm]";
        out += "(";
        for (size_t i = 0; i < s.lin.parts.size(); ++i)
          out += (i ? "," : "") + g.tensor(s.lin.parts[i].w).name;
        out += ")";
        if (s.lin.epi == LinearStep::Epilogue::AddResidual) out += "+residual";
        if (s.lin.epi == LinearStep::Epilogue::SiluMul) out += "+silu_mul";
        if (s.lin.logits) out += "->logits";
        break;
      }
      case Step::Kind::Attention:
        out += "attention";
        if (s.att.q_norm >= 0 || s.att.k_norm >= 0) out += "[qk_norm]";
        if (s.att.rope_q || s.att.rope_k) out += "[rope]";
        break;
    }
    out += "\n";
  }
  return out;
}

}  // namespace hearth::cpu
