// The CUDA backend: weights uploaded once per backend (one per model) with cudaMalloc in their
// checkpoint bytes (F32, F16, BF16, hearth's Q8/Q4), the paged KV cache on the device, every
// activation in one arena allocated when a graph is compiled. A step is the graph's nodes as
// kernel launches on one stream (cu_kernels.h): mat-vecs for steps of up to 8 rows (Q8/Q4 on
// int8 activations), cuBLAS for longer ones; each step shape's launches are captured once in a
// CUDA graph and re-launched, what changes per step (tokens, positions, block tables, RoPE angles)
// copied in before the launch.
#pragma once
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "backends/cuda/cu_blas.h"
#include "backends/cuda/cu_buffer.h"
#include "backends/cuda/cu_kernels.h"
#include "core/backend.h"
#include "core/gpu_readback.h"

namespace hearth::HEARTH_CUDA_NS {

// Devices the CUDA runtime sees; 0 with the reason in *why when none (no driver, no GPU).
int device_count(std::string* why);

// Layer l's keys in k[l] and values in v[l], [block][kv head][block_size][head_dim].
struct CuKVStorage : KVStorage {
  std::vector<DeviceBuffer> k, v;
  uint64_t serial = 0;  // tells compiled graphs which storage their captured launches name
};

// Steps of more rows than this multiply through cuBLAS (CudaOptions::cublas).
constexpr int kMatvecRows = 8;

struct CuCompiled : CompiledGraph {
  ~CuCompiled() override;
  const Graph* graph = nullptr;  // must outlive this (as the runner's graph does)
  int64_t vocab = 0;
  DeviceBuffer acts, logits;  // every activation but the logits at act_offset[id]; the logits
  std::vector<size_t> act_offset;
  // The step's integers (tokens, positions, block-table offsets: max_tokens each, then the output
  // rows), RoPE angles (per row head_dim / 2 pairs of cos, sin) and block tables, with their
  // page-locked host copies.
  // After them, per output row the k of the sampler's top-k (0: none). The argmax, and the
  // top-k entries of core/gpu_readback.h with their page-locked copy.
  DeviceBuffer step, rope, blocks, argmax, top_k;
  PinnedBuffer host_step, host_rope, host_blocks, host_top_k;
  size_t blocks_capacity = 0;  // entries
  std::vector<double> inv_freq;
  // Scratch: attention's partial softmaxes; for cuBLAS steps, activations and (quantized
  // weights) weight rows widened to 16 bits.
  DeviceBuffer partials, half_acts, half_weights;
  // For CudaOptions::int8_dots: the mat-vec's int8 activations (codes, then block scales).
  DeviceBuffer act_i8;
  size_t act_i8_scales = 0;  // the byte offset of the scales in act_i8
  // While a step is enqueued: the activation act_i8 holds (q, k and v share one quantization).
  int i8_input = -1;
  size_t half_weight_rows = 0;  // rows of the widest quantized weight half_weights holds at once
  std::map<std::tuple<int, int, GpuReadback>, cudaGraphExec_t> graphs;  // by step shape
  const CuKVStorage* kv = nullptr;
  uint64_t kv_serial = 0;
  void drop_graphs();
};

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(const BackendOptions& opt);
  ~CudaBackend() override;
  std::string name() const override { return "cuda"; }
  std::string describe() const override;
  bool supports_op(const Graph& g, const Node& n) const override;
  std::unique_ptr<CompiledGraph> compile(const Graph& g, int max_tokens, int max_outputs) override;
  DType kv_dtype() const override { return kv_dtype_; }
  // The device's free memory less the graph's weights.
  KVRoom kv_room(const Graph& g) const override;
  std::unique_ptr<KVStorage> alloc_kv(const KVSpec& spec, int n_blocks, int block_size) override;
  void copy_kv_block(KVStorage& kv, int from, int to) override;
  void run(CompiledGraph& cg, const StepInputs& in) override;
  MachinePeaks measure_peaks(bool compute) const override;

 private:
  void place_weights(const Graph& g);                                 // cu_weights.cpp
  WeightView weight(const Tensor& t, const std::string& name) const;  // cu_weights.cpp
  void allocate(const Graph& g, CuCompiled& c) const;                 // cu_compile.cpp
  void fill_step(CuCompiled& c, const StepInputs& in) const;          // cu_step.cpp
  void enqueue(CuCompiled& c, int n_tokens, int n_out, GpuReadback what) const;
  void launch_step(CuCompiled& c, int n_tokens, int n_out, GpuReadback what) const;
  void read_back(CuCompiled& c, const StepInputs& in, GpuReadback what) const;
  void enqueue_node(CuCompiled& c, const Node& n, int n_tokens, int n_out) const;
  void matmul(CuCompiled& c, const Node& n, int rows) const;
  void gemm(CuCompiled& c, const WeightView& w, int64_t n_rows, const float* x, int rows,
            float* out) const;
  float* act(const CuCompiled& c, int id) const;

  DType kv_dtype_;
  int device_ = 0;
  CudaOptions opt_;
  cudaDeviceProp props_{};
  cudaStream_t stream_ = nullptr;
  Cublas blas_;  // opened with cuBLAS prefill (CudaOptions::cublas), else empty
  cublasHandle_t cublas_ = nullptr;
  DeviceBuffer cublas_workspace_;
  // Weights are placed once, keyed by their host address: a backend serves one model's graphs.
  std::map<const void*, DeviceBuffer> weights_;
  uint64_t next_kv_serial_ = 1;
};

}  // namespace hearth::HEARTH_CUDA_NS
