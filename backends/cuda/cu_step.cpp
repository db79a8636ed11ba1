// One step: the step's integers, RoPE angles and block tables copied to the device, the graph's
// nodes as launches on the backend's stream (captured once per step shape in a CUDA graph and
// re-launched), then the logits or the argmax copied back.
#include <cmath>
#include <cstring>

#include "backends/cuda/cuda_backend.h"
#include "core/error.h"
#include "core/gpu_ops.h"
#include "core/gpu_readback.h"
#include "core/step_rows.h"

namespace hearth::HEARTH_CUDA_NS {

namespace {

// At most this many captured step shapes per compiled graph (a scheduler's steps, prompt chunks
// beside decode rows, come in many); then they are captured again as they come.
constexpr size_t kMaxGraphs = 64;
// Steps of at least this many rows (prefill) run attention in tiles of rows and positions; shorter
// ones (decode) split each row's positions over parts.
constexpr int kTiledAttentionRows = 32;

StepDev step_dev(const CuCompiled& c) {
  const int T = c.max_tokens;
  const auto* u = c.step.as<const int32_t>();
  StepDev s;
  s.tokens = u;
  s.pos = u + T;
  s.table = u + 2 * T;
  s.out_rows = u + 3 * T;
  s.blocks = c.blocks.as<const int32_t>();
  return s;
}

}  // namespace

float* CudaBackend::act(const CuCompiled& c, int id) const {
  if (id == c.graph->output) return c.logits.as<float>();
  return reinterpret_cast<float*>(c.acts.as<char>() + c.act_offset[size_t(id)]);
}

void CudaBackend::fill_step(CuCompiled& c, const StepInputs& in) const {
  const size_t entries = step_block_entries(in);
  if (entries > c.blocks_capacity) {  // grows rarely, by doubling; the captured graphs name it
    c.drop_graphs();
    while (c.blocks_capacity < entries) c.blocks_capacity *= 2;
    c.blocks = DeviceBuffer(c.blocks_capacity * 4, "block tables");
    c.host_blocks = PinnedBuffer(c.blocks_capacity * 4, "block tables");
  }
  fill_step_rows(in, c.max_tokens, c.inv_freq, c.host_step.as<uint32_t>(), c.host_rope.as<float>(),
                 c.host_blocks.as<uint32_t>());
  const size_t rope_bytes = size_t(in.n_tokens) * c.inv_freq.size() * 8;
  check(cudaMemcpyAsync(c.step.get(), c.host_step.as<void>(), c.step.bytes(),
                        cudaMemcpyHostToDevice, stream_),
        "copying the step's inputs");
  if (rope_bytes)
    check(cudaMemcpyAsync(c.rope.get(), c.host_rope.as<void>(), rope_bytes, cudaMemcpyHostToDevice,
                          stream_),
          "copying the step's inputs");
  if (entries)
    check(cudaMemcpyAsync(c.blocks.get(), c.host_blocks.as<void>(), entries * 4,
                          cudaMemcpyHostToDevice, stream_),
          "copying the step's inputs");
}

void CudaBackend::gemm(CuCompiled& c, const WeightView& w, int64_t n_rows, const float* x, int rows,
                       float* out) const {
  const int K = int(w.cols), N = int(n_rows);
  const float one = 1.f, zero = 0.f;
  // Row-major out [rows, N] = x [rows, K] W^T is column-major out^T = W^T^T x^T: A = W (K x N
  // column-major, transposed), B = x (K x rows).
  if (w.type == kF32) {
    blas_.check(blas_.sgemm(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, N, rows, K, &one,
                            reinterpret_cast<const float*>(w.codes), K, x, K, &zero, out, N),
                "an f32 matmul");
    return;
  }
  const bool f16 = w.type == kF16;
  const cudaDataType_t type = f16 ? CUDA_R_16F : CUDA_R_16BF;
  auto* xh = c.half_acts.as<uint16_t>();
  to_half(x, int64_t(rows) * K, f16, xh, stream_);
  auto run = [&](const void* a, int m, float* o) {
    blas_.check(
        blas_.gemm_ex(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, m, rows, K, &one, a, type, K, xh, type, K,
                      &zero, o, CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "a 16-bit matmul");
  };
  if (w.type <= kBF16) return run(w.codes, N, out);
  const int64_t per = int64_t(c.half_weight_rows);
  for (int64_t r0 = 0; r0 < n_rows; r0 += per) {
    const int m = int(std::min(per, n_rows - r0));
    dequant_rows(w, r0, m, false, c.half_weights.as<uint16_t>(), stream_);
    run(c.half_weights.get(), m, out + r0);
  }
}

void CudaBackend::matmul(CuCompiled& c, const Node& n, int rows) const {
  const GraphTensor& wt = c.graph->tensor(n.in[1]);
  const WeightView w = weight(wt.weight, wt.name);
  const int64_t n_rows = wt.weight.rows();
  if (rows > kMatvecRows && opt_.cublas)
    return gemm(c, w, n_rows, act(c, n.in[0]), rows, act(c, n.out));
  // The int8 mat-vec reads whole 16-byte pieces (device allocations are 256-byte aligned).
  if (!opt_.int8_dots || !gpu_int8_dot_weight(wt.weight) ||
      reinterpret_cast<uintptr_t>(w.codes) % 16 != 0)
    return matvec(w, n_rows, act(c, n.in[0]), rows, act(c, n.out), n_rows, stream_);
  auto* codes = c.act_i8.as<uint32_t>();
  auto* scales = reinterpret_cast<float*>(c.act_i8.as<char>() + c.act_i8_scales);
  if (c.i8_input != n.in[0]) quant_act(act(c, n.in[0]), rows, w.cols, codes, scales, stream_);
  c.i8_input = n.in[0];
  matvec_i8(w, n_rows, codes, scales, rows, act(c, n.out), n_rows, stream_);
}

void CudaBackend::enqueue_node(CuCompiled& c, const Node& n, int n_tokens, int n_out) const {
  const Graph& g = *c.graph;
  const GraphTensor& o = g.tensor(n.out);
  const int rows = o.rows == Rows::Tokens ? n_tokens : n_out;
  if (rows == 0) return;  // a prompt chunk that wants no logits: an empty grid is an error
  const StepDev step = step_dev(c);
  switch (n.op) {
    case Op::Embed: {
      const GraphTensor& t = g.tensor(n.in[0]);
      embed(weight(t.weight, t.name), t.weight.rows(), step.tokens, rows, act(c, n.out), stream_);
      return;
    }
    case Op::RmsNorm:
    case Op::HeadRmsNorm: {
      const GraphTensor& t = g.tensor(n.in[1]);
      const bool heads = n.op == Op::HeadRmsNorm;
      rms_norm(act(c, n.in[0]), weight(t.weight, t.name), n.p.eps,
               heads ? rows * n.p.n_heads : rows, heads ? n.p.head_dim : int(o.cols), act(c, n.out),
               stream_);
      return;
    }
    case Op::MatMul:
      return matmul(c, n, rows);
    case Op::Rope:
      rope(act(c, n.in[0]), c.rope.as<float>(), rows, n.p.n_heads, n.p.head_dim / 2, act(c, n.out),
           stream_);
      return;
    case Op::Attention: {
      KVLayer kv;
      kv.k = c.kv->k.at(size_t(n.p.layer)).get();
      kv.v = c.kv->v.at(size_t(n.p.layer)).get();
      kv.type = c.kv->dtype == DType::F32 ? kF32 : c.kv->dtype == DType::F16 ? kF16 : kBF16;
      kv.n_kv_heads = n.p.n_kv_heads;
      kv.head_dim = n.p.head_dim;
      kv.block_size = c.kv->block_size;
      kv_store(act(c, n.in[1]), act(c, n.in[2]), step, rows, kv, stream_);
      const float scale = float(1.0 / std::sqrt(double(n.p.head_dim)));
      if (rows >= kTiledAttentionRows)
        attention_tiled(act(c, n.in[0]), step, rows, n.p.n_heads, kv, scale, act(c, n.out),
                        stream_);
      else
        attention(act(c, n.in[0]), step, rows, n.p.n_heads, kv, scale,
                  gpu_attention_splits(rows, n.p.n_heads), c.partials.as<float>(), act(c, n.out),
                  stream_);
      return;
    }
    case Op::SiluMul:
    case Op::Add:
      binary(act(c, n.in[0]), act(c, n.in[1]), n.op == Op::SiluMul, int64_t(rows) * o.cols,
             act(c, n.out), stream_);
      return;
    case Op::GatherRows:
      gather_rows(act(c, n.in[0]), step.out_rows, rows, int(o.cols), act(c, n.out), stream_);
      return;
    case Op::MoE:
    case Op::kCount:
      break;
  }
  fail("CUDA: no kernel for ", op_name(n.op));
}

void CudaBackend::enqueue(CuCompiled& c, int n_tokens, int n_out, GpuReadback what) const {
  c.i8_input = -1;
  for (const Node& n : c.graph->nodes()) enqueue_node(c, n, n_tokens, n_out);
  if (n_out == 0) return;
  if (what == GpuReadback::Argmax)
    argmax(c.logits.as<float>(), n_out, c.vocab, c.argmax.as<int32_t>(), stream_);
  if (what == GpuReadback::TopK)
    top_k(c.logits.as<float>(), n_out, c.vocab,
          c.step.as<uint32_t>() + 3 * c.max_tokens + c.max_outputs, c.top_k.as<uint32_t>(),
          stream_);
}

// The step's launches: as they are, or through the graph captured for this shape.
void CudaBackend::launch_step(CuCompiled& c, int n_tokens, int n_out, GpuReadback what) const {
  if (!opt_.graphs) return enqueue(c, n_tokens, n_out, what);
  const auto key = std::make_tuple(n_tokens, n_out, what);
  auto it = c.graphs.find(key);
  if (it == c.graphs.end()) {
    if (c.graphs.size() >= kMaxGraphs) c.drop_graphs();
    check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "capturing a step");
    cudaGraph_t graph = nullptr;
    try {
      enqueue(c, n_tokens, n_out, what);
    } catch (...) {
      cudaStreamEndCapture(stream_, &graph);
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    check(cudaStreamEndCapture(stream_, &graph), "capturing a step");
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    check(e, "instantiating a captured step");
    it = c.graphs.emplace(key, exec).first;
  }
  check(cudaGraphLaunch(it->second, stream_), "launching a step");
}

// Copies what the step asked for to the caller and waits for it. Top-k rows come back as their
// entries; a row the device did not serve (or whose ties overflowed them) is copied whole.
void CudaBackend::read_back(CuCompiled& c, const StepInputs& in, GpuReadback what) const {
  const size_t row_bytes = size_t(c.vocab) * 4;
  if (what == GpuReadback::Argmax)
    check(cudaMemcpyAsync(in.argmax, c.argmax.get(), size_t(in.n_out) * 4, cudaMemcpyDeviceToHost,
                          stream_),
          "reading the argmax back");
  else if (what == GpuReadback::Logits && in.logits)
    check(cudaMemcpyAsync(in.logits, c.logits.get(), size_t(in.n_out) * row_bytes,
                          cudaMemcpyDeviceToHost, stream_),
          "reading the logits back");
  else if (what == GpuReadback::TopK)
    check(cudaMemcpyAsync(c.host_top_k.as<void>(), c.top_k.get(),
                          size_t(in.n_out) * kGpuTopKWords * 4, cudaMemcpyDeviceToHost, stream_),
          "reading the top-k back");
  check(cudaStreamSynchronize(stream_), "running a step");
  if (what != GpuReadback::TopK) return;
  const uint32_t* ks = c.host_step.as<uint32_t>() + 3 * c.max_tokens + c.max_outputs;
  for (int i = 0; i < in.n_out; ++i) {
    float* row = in.logits + size_t(i) * size_t(c.vocab);
    if (ks[i] &&
        expand_gpu_top_k(c.host_top_k.as<uint32_t>() + size_t(i) * kGpuTopKWords, c.vocab, row))
      continue;
    check(cudaMemcpy(row, c.logits.as<char>() + size_t(i) * row_bytes, row_bytes,
                     cudaMemcpyDeviceToHost),
          "reading the logits back");
  }
}

void CudaBackend::run(CompiledGraph& cg, const StepInputs& in) {
  auto& c = static_cast<CuCompiled&>(cg);
  if (in.observe_matmul) fail("calibration (quantize --calibration) runs on the CPU backend only");
  if (in.n_tokens < 1 || in.n_tokens > c.max_tokens || in.n_out > c.max_outputs || !in.kv)
    fail("CUDA: a step of ", in.n_tokens, " tokens and ", in.n_out,
         " outputs does not fit the compiled graph (", c.max_tokens, ", ", c.max_outputs, ")");
  check(cudaSetDevice(device_), "selecting the device");
  const auto& kv = static_cast<const CuKVStorage&>(*in.kv);
  if (c.kv_serial != kv.serial) {  // the captured launches name the old cache
    c.drop_graphs();
    c.kv = &kv;
    c.kv_serial = kv.serial;
  }
  const GpuReadback what =
      gpu_readback(in, c.host_step.as<uint32_t>() + 3 * c.max_tokens + c.max_outputs);
  fill_step(c, in);
  try {
    launch_step(c, in.n_tokens, in.n_out, what);
  } catch (...) {
    // The step's inputs may still be on their way from the page-locked copies the next step
    // rewrites.
    cudaStreamSynchronize(stream_);
    throw;
  }
  read_back(c, in, what);
}

}  // namespace hearth::HEARTH_CUDA_NS
