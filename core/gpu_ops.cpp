#include "core/gpu_ops.h"

#include <algorithm>

#include "core/backend.h"
#include "core/error.h"
#include "core/quant_format.h"

namespace hearth {

namespace {

bool float_dtype(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16;
}

// Quantized weights as FORMAT.md has them: the kernels index scales per group, codes per row.
bool quantized_ok(const Tensor& t) {
  return t.quantized() && t.ndim == 2 && t.scales && quant::valid_group(t.group_size) &&
         t.cols() % 32 == 0 && quant::valid_scale_dtype(t.scale_dtype);
}

}  // namespace

bool gpu_supports_op(const Graph& g, const Node& n) {
  auto weight_ok = [&](int id, bool quantized) {
    const GraphTensor& t = g.tensor(id);
    return t.kind == TensorKind::Weight &&
           (float_dtype(t.weight.dtype) || (quantized && quantized_ok(t.weight)));
  };
  switch (n.op) {
    case Op::Embed:
      return weight_ok(n.in[0], true);
    case Op::MatMul:
      return weight_ok(n.in[1], true);
    case Op::RmsNorm:
    case Op::HeadRmsNorm:
      return weight_ok(n.in[1], false);
    case Op::Rope:
      return n.p.head_dim % 2 == 0;
    case Op::Attention:
      return n.p.head_dim <= 256 && n.p.head_dim % 2 == 0 && n.p.n_kv_heads > 0 &&
             n.p.n_heads % n.p.n_kv_heads == 0;
    case Op::SiluMul:
    case Op::Add:
    case Op::GatherRows:
      return true;
    case Op::MoE:
    case Op::kCount:
      break;
  }
  return false;
}

void check_gpu_graph(const Backend& be, const Graph& g, const std::string& backend, int max_tokens,
                     int max_outputs) {
  check_supported(be, g, backend,
                  "F32, F16, BF16 and, in matmuls and embeddings, hearth's INT8/INT4");
  if (max_tokens < 1 || max_tokens > 65535 || max_outputs < 1 || max_outputs > 65535)
    fail(backend, ": steps of 1 to 65535 tokens and outputs, asked for ", max_tokens, " and ",
         max_outputs);
}

void check_gpu_kv_dtype(DType kv, const std::string& backend) {
  if (!float_dtype(kv))
    fail("the ", backend, " backend keeps f32, f16 or bf16 KV caches, not ", dtype_name(kv),
         " (use --kv f32, f16 or bf16)");
}

bool gpu_int8_dot_weight(const Tensor& w) {
  return (w.dtype == DType::Q8 || w.dtype == DType::Q4) && !w.codebook;
}

int gpu_attention_splits(int n_tokens, int heads) {
  return std::clamp(4096 / std::max(1, n_tokens * heads), 1, 64);
}

size_t gpu_attention_partials(int max_tokens, int heads, int head_dim) {
  size_t most = 0;
  for (int t = 1; t <= max_tokens; ++t)
    most = std::max(most, size_t(t) * size_t(gpu_attention_splits(t, heads)));
  return most * size_t(heads) * size_t(head_dim + 2);
}

KVRoom gpu_kv_room(const Graph& g, size_t device_bytes, size_t layer_bytes) {
  const size_t weights = g.weight_bytes();
  const size_t usable = device_bytes - device_bytes / 8;
  // Weights that leave no room give a room of one byte, so that the caller says so.
  return {usable > weights ? usable - weights : 1, layer_bytes ? layer_bytes : SIZE_MAX};
}

}  // namespace hearth
