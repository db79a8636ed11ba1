#include "models/qwen3_graph.h"

#include <string>

namespace hearth {

namespace {

int linear(Graph& g, int x, const std::string& name, const Tensor& weight) {
  int y = g.activation(name, weight.shape[0]);
  return g.add(Op::MatMul, y, {x, g.weight(name + ".weight", weight)});
}

// down(silu(gate h) * up h)
int swiglu(Graph& g, const Qwen3Config& c, const Qwen3LayerWeights& L, const std::string& p,
           int h) {
  int gate = linear(g, h, p + "gate_proj", L.gate_proj);
  int up = linear(g, h, p + "up_proj", L.up_proj);
  int act = g.add(Op::SiluMul, g.activation(p + "act", c.intermediate_size), {gate, up});
  return linear(g, act, p + "down_proj", L.down_proj);
}

// The router picks top_k experts per token; their SwiGLU outputs, weighted, are summed.
int experts(Graph& g, const Qwen3Config& c, const Qwen3LayerWeights& L, const std::string& p,
            int h) {
  const int router = g.weight(p + "router.weight", L.router);
  int first = -1;
  for (int e = 0; e < c.num_experts; ++e) {
    const std::string x = p + "experts." + std::to_string(e) + ".";
    const int gate = g.weight(x + "gate_proj.weight", L.expert_gate[size_t(e)]);
    g.weight(x + "up_proj.weight", L.expert_up[size_t(e)]);
    g.weight(x + "down_proj.weight", L.expert_down[size_t(e)]);
    if (e == 0) first = gate;
  }
  NodeParams mp;
  mp.n_experts = c.num_experts;
  mp.top_k = c.num_experts_per_tok;
  mp.norm_topk = c.norm_topk_prob;
  return g.add(Op::MoE, g.activation(p + "moe", c.hidden_size), {h, router, first}, mp);
}

}  // namespace

Graph build_qwen3_graph(const Qwen3Config& c, const Qwen3Weights& w) {
  Graph g;
  const int H = c.hidden_size, hd = c.head_dim;
  const int nh = c.num_attention_heads, nkv = c.num_key_value_heads;
  const float eps = float(c.rms_norm_eps);
  g.kv = {c.num_hidden_layers, nkv, hd};

  NodeParams norm;
  norm.eps = eps;

  int x = g.add(Op::Embed, g.activation("embed", H), {g.weight("embed_tokens", w.embed)});

  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const Qwen3LayerWeights& L = w.layers[size_t(l)];
    const std::string p = "layers." + std::to_string(l) + ".";

    // Attention block: pre-norm, q/k/v projections, per-head q/k norm, RoPE, GQA, output proj.
    int h = g.add(Op::RmsNorm, g.activation(p + "attn_in", H),
                  {x, g.weight(p + "input_layernorm", L.input_norm)}, norm);
    int q = linear(g, h, p + "q_proj", L.q_proj);
    int k = linear(g, h, p + "k_proj", L.k_proj);
    int v = linear(g, h, p + "v_proj", L.v_proj);

    NodeParams qp;
    qp.eps = eps;
    qp.n_heads = nh;
    qp.head_dim = hd;
    qp.rope_theta = c.rope_theta;
    NodeParams kp = qp;
    kp.n_heads = nkv;
    g.add(Op::HeadRmsNorm, q, {q, g.weight(p + "q_norm", L.q_norm)}, qp);
    g.add(Op::HeadRmsNorm, k, {k, g.weight(p + "k_norm", L.k_norm)}, kp);
    g.add(Op::Rope, q, {q}, qp);
    g.add(Op::Rope, k, {k}, kp);

    NodeParams ap = qp;
    ap.n_kv_heads = nkv;
    ap.layer = l;
    int attn = g.add(Op::Attention, g.activation(p + "attn", int64_t(nh) * hd), {q, k, v}, ap);
    int o = linear(g, attn, p + "o_proj", L.o_proj);
    x = g.add(Op::Add, g.activation(p + "resid_attn", H), {x, o});

    // MLP block: pre-norm, SwiGLU (or a mixture of SwiGLU experts), down proj, residual.
    h = g.add(Op::RmsNorm, g.activation(p + "mlp_in", H),
              {x, g.weight(p + "post_attention_layernorm", L.post_attn_norm)}, norm);
    const int mlp = L.sparse() ? experts(g, c, L, p, h) : swiglu(g, c, L, p, h);
    x = g.add(Op::Add, g.activation(p + "resid_mlp", H), {x, mlp});
  }

  // Only the rows whose logits were asked for go through the final norm and the LM head.
  int last = g.add(Op::GatherRows, g.activation("selected", H, Rows::Outputs), {x});
  int fin = g.add(Op::RmsNorm, g.activation("final_norm", H, Rows::Outputs),
                  {last, g.weight("norm", w.final_norm)}, norm);
  int logits = g.activation("logits", c.vocab_size, Rows::Outputs);
  g.add(Op::MatMul, logits, {fin, g.weight("lm_head.weight", w.lm_head)});
  g.output = logits;
  return g;
}

}  // namespace hearth
