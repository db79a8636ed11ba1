// How the CPU backend runs a graph: its nodes grouped into fused steps. Every thread of the pool
// runs every step on its share of the work, with one barrier between steps, so fewer steps means
// fewer barriers per token. The planner recognises patterns; it never needs to know the model.
#pragma once
#include <string>
#include <vector>

#include "core/graph.h"

namespace hearth::cpu {

// MatMuls sharing one input, run as one pass over all their weight rows (q/k/v; gate/up), with the
// RmsNorm that produced the input folded in and an epilogue folding in the op that consumes them.
struct LinearStep {
  enum class Epilogue : uint8_t {
    Store,        // each part writes its own output
    AddResidual,  // one part: out = residual + x W^T (MatMul then Add)
    SiluMul,      // two parts: out = silu(x Wa^T) * (x Wb^T) (gate/up then SiluMul)
  };
  struct Part {
    int w = -1;    // weight tensor
    int out = -1;  // output tensor (Store); otherwise only the epilogue's output is written
  };
  int x = -1;       // input activation
  int norm_w = -1;  // weight of an RmsNorm applied to x first (-1: none)
  float eps = 0.f;
  std::vector<Part> parts;
  Epilogue epi = Epilogue::Store;
  int residual = -1;    // AddResidual
  int out = -1;         // AddResidual, SiluMul
  bool logits = false;  // the single part writes the graph's output (argmax may replace it)
};

// HeadRmsNorm and RoPE on q and k folded into the attention that reads them: during decode each
// thread owns whole KV heads, normalises and rotates their q and k heads, appends k and v to the
// cache and attends, with no barrier in between.
struct AttentionStep {
  int q = -1, k = -1, v = -1, out = -1;
  int q_norm = -1, k_norm = -1;  // HeadRmsNorm weights (-1: none)
  float eps = 0.f;
  bool rope_q = false, rope_k = false;
  NodeParams p;  // heads, KV heads, head_dim, layer
};

struct Step {
  enum class Kind : uint8_t { Node, Linear, Attention };
  Kind kind = Kind::Node;
  int node = -1;  // Node: index into the graph's nodes, run by the reference code
  LinearStep lin;
  AttentionStep att;
};

std::vector<Step> plan_steps(const Graph& g);
// One line per step, for debugging and tests: "linear[norm](q_proj,k_proj,v_proj)".
std::string describe_steps(const Graph& g, const std::vector<Step>& steps);

}  // namespace hearth::cpu
