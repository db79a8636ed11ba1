// The compute graph: a list of nodes in execution order over numbered tensors. A model builds it
// once; a backend compiles it once (allocating every activation up front) and then runs it for each
// step with that step's token count, so nothing is allocated per decoded token.
//
// Activations are 2-D [rows, cols]. Their row count is a run-time quantity: the step's token count
// (`Rows::Tokens`) or the number of positions whose logits were asked for (`Rows::Outputs`).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace hearth {

enum class Op : uint8_t {
  Embed,        // out[t] = table[tokens[t]]                          in: table
  RmsNorm,      // out = x / rms(x) * w, per row                       in: x, w
  HeadRmsNorm,  // the same per head_dim slice (Qwen3 q_norm/k_norm)   in: x, w
  MatMul,       // out = x W^T, W stored [out, in] like torch Linear    in: x, W
  Rope,         // rotate-half RoPE at positions pos0 + t              in: x
  Attention,    // causal GQA; appends this step's k, v to the cache   in: q, k, v
  SiluMul,      // out = silu(a) * b                                   in: a, b
  Add,          // out = a + b                                         in: a, b
  GatherRows,   // out[i] = x[out_rows[i]]                             in: x
  // Mixture of experts (Qwen3-MoE's sparse MLP): router logits x R^T in f32, softmax over all
  // experts, the top_k (ties: lower index first), renormalised to sum 1 when norm_topk;
  // out = sum_j w_j * down_j(silu(gate_j x) * up_j x).             in: x, R, first expert weight
  // The experts' weights are 3 * n_experts consecutive graph tensors from in[2]: gate, up, down
  // of expert 0, then of expert 1, ... The routing depends on the data, so a backend runs the
  // whole op as one node.
  MoE,
  kCount
};
const char* op_name(Op op);

enum class TensorKind : uint8_t { Weight, Activation };
enum class Rows : uint8_t { Tokens, Outputs };

struct GraphTensor {
  std::string name;
  TensorKind kind = TensorKind::Activation;
  Tensor weight;             // Weight: a view into the checkpoint
  Rows rows = Rows::Tokens;  // Activation: F32 [rows, cols]
  int64_t cols = 0;
};

struct NodeParams {
  float eps = 0.f;          // RmsNorm, HeadRmsNorm
  int n_heads = 0;          // HeadRmsNorm, Rope, Attention (query heads)
  int n_kv_heads = 0;       // Attention
  int head_dim = 0;         // HeadRmsNorm, Rope, Attention
  double rope_theta = 0.0;  // Rope
  int layer = -1;           // Attention: which KV cache layer
  int n_experts = 0;        // MoE
  int top_k = 0;            // MoE: experts per token
  bool norm_topk = false;   // MoE: renormalise the top_k probabilities to sum 1
};

struct Node {
  Op op;
  int out = -1;
  int in[3] = {-1, -1, -1};
  NodeParams p;
};

// Shapes a backend needs to allocate a KV cache for this graph.
struct KVSpec {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
};

class Graph {
 public:
  int weight(const std::string& name, const Tensor& t);
  int activation(const std::string& name, int64_t cols, Rows rows = Rows::Tokens);
  int add(Op op, int out, std::initializer_list<int> in, NodeParams p = {});

  const std::vector<GraphTensor>& tensors() const { return tensors_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const GraphTensor& tensor(int id) const { return tensors_[size_t(id)]; }
  // The bytes of every distinct weight with its scales (a tied head and its embedding table are
  // one tensor's bytes, counted once).
  size_t weight_bytes() const;

  int output = -1;  // the logits tensor, Rows::Outputs
  KVSpec kv;

 private:
  std::vector<GraphTensor> tensors_;
  std::vector<Node> nodes_;
};

// One sequence's rows in a step: rows [row0, row0 + n_rows) are its positions pos0, pos0 + 1, ...
// in order. Its keys and values live in the KV blocks of its table: position p in
// blocks[p / block_size]; the step appends its rows' keys and values there, so the table must
// already cover pos0 + n_rows - 1, and no block the rows write may be shared (KVPool).
struct SeqRows {
  int row0 = 0, n_rows = 0;
  int pos0 = 0;
  const int32_t* blocks = nullptr;
  int n_blocks = 0;
};

// What changes from one step to the next: rows of one or many sequences (a batched step reads
// every weight once for all of them; attention runs per sequence over its own blocks).
struct KVStorage;
struct StepInputs {
  const int32_t* tokens = nullptr;  // one per row
  int n_tokens = 0;
  const SeqRows* seqs = nullptr;  // covering rows 0 .. n_tokens - 1 in order
  int n_seqs = 0;
  KVStorage* kv = nullptr;
  const int32_t* out_rows = nullptr;  // which of this step's rows need logits
  int n_out = 0;
  float* logits = nullptr;  // [n_out, vocab], written by the run
  // Greedy decoding: when set (and the compiled graph has argmax_fused), the run writes the index
  // of each output row's largest logit here (first index on ties, NaN ignored, -1 if no logit is
  // above -inf) instead of the logits, and `logits` may be null.
  int32_t* argmax = nullptr;
  // Top-k sampling: when set (and argmax is not), output row i needs only the top_k[i] largest of
  // its logits (0: all of them). A backend may then write -inf for logits it proves are below the
  // top_k[i]-th largest; every logit it keeps is the one the whole row gives, bit for bit, and so
  // is every logit equal to the k-th, so a sampler's top-k set, its weights and the argmax are the
  // whole row's (logits_needed in core/sampler.h says which k a sampler allows).
  const int32_t* top_k = nullptr;
  // Calibration hook (quantize --calibration): when set, the backend calls it for every MatMul
  // node with the graph id of its weight and its input rows [rows, cols] (after any fused norm),
  // one call at a time. It slows the step; inference leaves it null.
  const std::function<void(int weight, const float* x, int64_t rows, int64_t cols)>*
      observe_matmul = nullptr;
};

}  // namespace hearth
