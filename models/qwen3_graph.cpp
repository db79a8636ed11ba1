#include "models/qwen3_graph.h"

#include <string>

namespace hearth {

Graph build_qwen3_graph(const Qwen3Config& c, const Qwen3Weights& w) {
  Graph g;
  const int H = c.hidden_size, hd = c.head_dim;
  const int nh = c.num_attention_heads, nkv = c.num_key_value_heads;
  const float eps = float(c.rms_norm_eps);
  g.kv = {c.num_hidden_layers, nkv, hd};

  NodeParams norm;
  norm.eps = eps;
  auto linear = [&](int x, const std::string& name, const Tensor& weight) {
    int y = g.activation(name, weight.shape[0]);
    return g.add(Op::MatMul, y, {x, g.weight(name + ".weight", weight)});
  };

  int x = g.add(Op::Embed, g.activation("embed", H), {g.weight("embed_tokens", w.embed)});

  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const Qwen3LayerWeights& L = w.layers[size_t(l)];
    const std::string p = "layers." + std::to_string(l) + ".";

    // Attention block: pre-norm, q/k/v projections, per-head q/k norm, RoPE, GQA, output proj.
    int h = g.add(Op::RmsNorm, g.activation(p + "attn_in", H),
                  {x, g.weight(p + "input_layernorm", L.input_norm)}, norm);
    int q = linear(h, p + "q_proj", L.q_proj);
    int k = linear(h, p + "k_proj", L.k_proj);
    int v = linear(h, p + "v_proj", L.v_proj);

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
    int o = linear(attn, p + "o_proj", L.o_proj);
    x = g.add(Op::Add, g.activation(p + "resid_attn", H), {x, o});

    // MLP block: pre-norm, SwiGLU, down proj, residual.
    h = g.add(Op::RmsNorm, g.activation(p + "mlp_in", H),
              {x, g.weight(p + "post_attention_layernorm", L.post_attn_norm)}, norm);
    int gate = linear(h, p + "gate_proj", L.gate_proj);
    int up = linear(h, p + "up_proj", L.up_proj);
    int act = g.add(Op::SiluMul, g.activation(p + "act", c.intermediate_size), {gate, up});
    int down = linear(act, p + "down_proj", L.down_proj);
    x = g.add(Op::Add, g.activation(p + "resid_mlp", H), {x, down});
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
