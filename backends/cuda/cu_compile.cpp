// A graph's device memory, allocated once when it is compiled: the activation arena, the logits,
// the step's inputs (with page-locked host copies), attention's partials, cuBLAS's 16-bit scratch
// and the mat-vec's int8 activations.
#include <algorithm>

#include "backends/cuda/cuda_backend.h"
#include "core/error.h"
#include "core/gpu_ops.h"
#include "core/gpu_readback.h"
#include "core/step_rows.h"

namespace hearth::HEARTH_CUDA_NS {

namespace {

constexpr size_t kAlign = 256;
// Quantized weights widen to bf16 for cuBLAS this many rows at a time.
constexpr int64_t kHalfWeightRows = 8192;

size_t align_up(size_t v) {
  return (v + kAlign - 1) / kAlign * kAlign;
}

}  // namespace

void CuCompiled::drop_graphs() {
  for (auto& [key, exec] : graphs) cudaGraphExecDestroy(exec);
  graphs.clear();
}

CuCompiled::~CuCompiled() {
  drop_graphs();
}

void CudaBackend::allocate(const Graph& g, CuCompiled& c) const {
  const int T = c.max_tokens, O = c.max_outputs;
  c.vocab = g.tensor(g.output).cols;
  c.inv_freq = rope_frequencies(g);
  c.act_offset.assign(g.tensors().size(), 0);
  size_t total = 0;
  for (size_t id = 0; id < g.tensors().size(); ++id) {
    const GraphTensor& t = g.tensors()[id];
    if (t.kind != TensorKind::Activation || int(id) == g.output) continue;
    c.act_offset[id] = total;
    total = align_up(total + size_t(t.rows == Rows::Tokens ? T : O) * size_t(t.cols) * 4);
  }
  c.acts = DeviceBuffer(total, "activations (a smaller --prefill-chunk needs less)");
  c.logits = DeviceBuffer(size_t(O) * size_t(c.vocab) * 4, "logits");
  c.argmax = DeviceBuffer(size_t(O) * 4, "argmax");
  c.top_k = DeviceBuffer(size_t(O) * kGpuTopKWords * 4, "top-k entries");
  c.host_top_k = PinnedBuffer(size_t(O) * kGpuTopKWords * 4, "top-k entries");
  const size_t step_ints = size_t(3 * T + 2 * O) * 4;
  const size_t rope_bytes = size_t(T) * std::max<size_t>(c.inv_freq.size(), 1) * 8;
  c.step = DeviceBuffer(step_ints, "step inputs");
  c.host_step = PinnedBuffer(step_ints, "step inputs");
  c.rope = DeviceBuffer(rope_bytes, "RoPE angles");
  c.host_rope = PinnedBuffer(rope_bytes, "RoPE angles");
  c.blocks_capacity = 256;
  c.blocks = DeviceBuffer(c.blocks_capacity * 4, "block tables");
  c.host_blocks = PinnedBuffer(c.blocks_capacity * 4, "block tables");

  // Attention's partials: the most (rows x parts) of any step size, per head.
  size_t partial_floats = 0;
  int64_t max_k = 0, max_quant_rows = 0, max_i8_k = 0;
  for (const Node& n : g.nodes()) {
    if (n.op == Op::Attention)
      partial_floats =
          std::max(partial_floats, gpu_attention_partials(T, n.p.n_heads, n.p.head_dim));
    if (n.op == Op::MatMul) {
      const Tensor& w = g.tensor(n.in[1]).weight;
      max_k = std::max(max_k, w.cols());
      if (w.quantized()) max_quant_rows = std::max(max_quant_rows, w.rows());
      if (gpu_int8_dot_weight(w)) max_i8_k = std::max(max_i8_k, w.cols());
    }
  }
  c.partials = DeviceBuffer(partial_floats * 4, "attention's partial sums");
  if (opt_.int8_dots && max_i8_k) {  // rows the mat-vec may take (the head's: output rows)
    const int most = std::max(T, O);
    const size_t rows = size_t(opt_.cublas ? std::min(most, kMatvecRows) : most);
    c.act_i8_scales = align_up(rows * size_t(max_i8_k));
    c.act_i8 = DeviceBuffer(c.act_i8_scales + rows * size_t(max_i8_k / 32) * 4,
                            "int8 activations for the mat-vec");
  }
  if (opt_.cublas && T > 8) {  // steps of up to 8 rows never reach cuBLAS
    c.half_acts = DeviceBuffer(size_t(T) * size_t(max_k) * 2, "16-bit activations for cuBLAS");
    c.half_weight_rows = size_t(std::min(max_quant_rows, kHalfWeightRows));
    c.half_weights =
        DeviceBuffer(c.half_weight_rows * size_t(max_k) * 2, "16-bit weight rows for cuBLAS");
  }
}

}  // namespace hearth::HEARTH_CUDA_NS
