// The backend interface. A backend says which ops it supports, compiles a graph once (placing
// every activation in memory it owns), allocates KV caches, and runs a compiled graph per step.
// The backends a build has are listed in core/backend_list.cpp; the runner picks one by name or by
// priority.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/graph.h"
#include "core/weight_store.h"

namespace hearth {

// What the CPU backend alone reads.
struct CpuOptions {
  std::string isa;  // force a lower ISA ("avx2", "scalar"); empty: best available
  // The GEMM library for long steps ("auto", "dnnl", "dnnl-bf16", "openblas", "native"); empty:
  // auto: the bf16 one for BF16 weights where bf16 dot products are fast (AMD Zen 4/5, Intel
  // with AMX), which rounds the activations of such steps to bf16, else an FP32-exact one (on
  // AVX-512 with weight copies, the kernels themselves for BF16 weights).
  std::string gemm;
  int gemm_min_tokens = 0;  // steps of at least this many tokens use the GEMM; 0: the default
  // Where the backend keeps private huge-page copies of the weights its matmuls read, in the
  // layouts its kernels read fastest; null: the weights are used where the model mapped them.
  std::shared_ptr<WeightStore> weight_copies;
  // KV blocks in transparent huge pages. Decode reads 2 x layers x KV heads short streams of the
  // cache per token, and their 4 KiB pages cost TLB misses. Off unless asked for: each 2 MiB page
  // a request touches is resident at once.
  bool kv_huge_pages = false;
  // The LM head screen of one-token steps (with weight copies; backends/cpu/head_screen.h): Timed
  // takes whichever of the screened and the whole head is faster here, timing both in turns (the
  // logits are the same); Always and Never are for tests and measurements.
  enum class Screen { Timed, Always, Never };
  Screen screen = Screen::Timed;
};

// What the Vulkan backend alone reads.
struct VulkanOptions {
  // Run under the Khronos validation layer and count its errors and warnings (the tests do; it
  // slows every call).
  bool validation = false;
  // Bytes one storage-buffer binding may span, below the device's own limit (0: the device's),
  // so that tests split weights and logits across bindings as a small device would.
  uint64_t max_binding_bytes = 0;
  // Use subgroup arithmetic (subgroupAdd) in reductions where the device has it; off: the shared-
  // memory fallbacks, which every device runs (the tests run both).
  bool subgroups = true;
  // Read and write 16-bit weights, scales and KV caches with 16-bit storage (storageBuffer16Bit-
  // Access and shaderInt16) where the device has it; off: as halves of 32-bit words, which every
  // device runs (the tests run both).
  bool storage16 = true;
  // Multiply Q8 and Q4 weights in decode steps on integer dot products of int8 activations
  // (VK_KHR_shader_integer_dot_product) where the device has them, as the CPU's SIMD kernels do;
  // off: dequantized to f32 in the shader, which every device runs (the tests run both).
  bool integer_dot = true;
};

// What the CUDA backend alone reads.
struct CudaOptions {
  // Capture each step shape's kernel launches once in a CUDA graph and re-launch it; off: launch
  // every kernel every step (to measure what the graphs save).
  bool graphs = true;
  // Steps of more than 8 rows multiply through cuBLAS: F32 weights in f32, F16/BF16 ones in their
  // own type and quantized ones widened to bf16, with the activations rounded to that type; off:
  // the mat-vec once per 8 rows, f32 throughout (the tests run both).
  bool cublas = true;
  // Q8 and Q4 weights in the mat-vec meet int8 activations on dp4a, rounded per block of 32 as the
  // CPU's kernels round them; off: the codes widened to f32 (the tests run both).
  bool int8_dots = true;
};

// Options for creating a model's backend: the generic ones, then one set per backend kind. The
// memory budget of the KV cache and the step sizes are the runner's (RunnerOptions).
struct BackendOptions {
  int threads = 0;  // 0: one per physical core
  DType kv_dtype = DType::F32;
  int device = 0;  // GPU backends: which device
  CpuOptions cpu;
  VulkanOptions vulkan;
  CudaOptions cuda;
};

// A model's KV memory, owned by the backend: n_blocks blocks of block_size positions, each with
// every layer's keys and values for those positions (the layout is the backend's). KVPool does the
// bookkeeping; a step's SeqRows name the blocks each sequence reads and writes.
struct KVStorage {
  virtual ~KVStorage() = default;
  KVSpec spec;
  DType dtype = DType::F32;
  int n_blocks = 0, block_size = 0;
  // Blocks the backend lays out together (a power of two): the pool hands a growing sequence the
  // next block of its extent where it can, since the CPU reads a head's rows of an extent's
  // consecutive blocks as one run.
  int extent_blocks = 1;
  // An I8 cache also keeps one f32 scale per position, head and K/V.
  static size_t position_bytes(const KVSpec& spec, DType dtype) {
    const size_t per_row = size_t(spec.head_dim) * dtype_size(dtype) + (dtype == DType::I8 ? 4 : 0);
    return size_t(spec.n_layers) * 2 * size_t(spec.n_kv_heads) * per_row;
  }
  size_t bytes() const {
    return position_bytes(spec, dtype) * size_t(n_blocks) * size_t(block_size);
  }
};

// The kinds of arithmetic a backend multiplies with, each with its own peak (MachinePeaks): a
// step's speed is only comparable with the peak of the arithmetic it ran on.
enum class Arithmetic : uint8_t {
  F32Fma,    // f32 fused multiply-adds
  Int8Dot,   // int8 dot products with int32 sums (x86 vpdpbusd and kin, Arm sdot)
  Bf16Dot,   // bf16 pair dot products with f32 sums (vdpbf16ps)
  Bf16Tile,  // bf16 tile products with f32 sums (Intel AMX tdpbf16ps)
};
inline const char* arithmetic_name(Arithmetic a) {
  switch (a) {
    case Arithmetic::F32Fma:
      return "f32 FMA";
    case Arithmetic::Int8Dot:
      return "int8 dot";
    case Arithmetic::Bf16Dot:
      return "bf16 dot";
    case Arithmetic::Bf16Tile:
      return "bf16 tile (AMX)";
  }
  return "?";
}

// Ceilings of the machine as a backend uses it (its threads and kernels), to quote measured speed
// against (`hearth bench`); 0 where not measured or where the backend has no such kernel. Each
// counts 2 operations per multiply-add, as a matmul's FLOP count does.
struct MachinePeaks {
  double read_gbs = 0;          // memory read bandwidth, GB/s
  double fma_gflops = 0;        // independent f32 FMAs from registers at the widest vectors
                                // the backend's code may use (a library's own), GFLOP/s
  double int8_gops = 0;         // int8 dot products, G ops/s
  double bf16_gflops = 0;       // bf16 pair dot products, GFLOP/s
  double bf16_tile_gflops = 0;  // bf16 tile products, GFLOP/s
  double of(Arithmetic a) const {
    switch (a) {
      case Arithmetic::F32Fma:
        return fma_gflops;
      case Arithmetic::Int8Dot:
        return int8_gops;
      case Arithmetic::Bf16Dot:
        return bf16_gflops;
      case Arithmetic::Bf16Tile:
        return bf16_tile_gflops;
    }
    return 0;
  }
};

// Room for a KV cache: bytes the whole pool may take (0: no limit known) and the most one layer's
// keys (or values) may span, where the backend keeps each layer in one buffer.
struct KVRoom {
  size_t total_bytes = 0;
  size_t layer_bytes = SIZE_MAX;
};

struct CompiledGraph {
  virtual ~CompiledGraph() = default;
  int max_tokens = 0;
  int max_outputs = 0;
  bool argmax_fused = false;  // honours StepInputs::argmax (else the caller reduces the logits)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // A one-line description for manifests and banners (under 80 characters for one kind of
  // weights): ISA, threads, and what multiplies the weights of the graphs it was given.
  virtual std::string describe() const = 0;
  // Told by the runner which graph it will compile, before it compiles any, so that describe()
  // speaks of that graph's weights from the start. Default: ignored.
  virtual void expect(const Graph&) {}
  virtual int threads() const { return 1; }
  virtual bool supports_op(const Graph& g, const Node& n) const = 0;
  // Allocates everything the graph needs for steps of up to max_tokens tokens and max_outputs rows
  // of logits. Throws if an op is not supported.
  virtual std::unique_ptr<CompiledGraph> compile(const Graph& g, int max_tokens,
                                                 int max_outputs) = 0;
  virtual DType kv_dtype() const = 0;
  // Memory for n_blocks KV blocks of block_size positions; pages are committed as blocks are first
  // written, so a generous pool costs only what is used.
  virtual std::unique_ptr<KVStorage> alloc_kv(const KVSpec& spec, int n_blocks, int block_size) = 0;
  // How large a KV cache for `g` this backend can hold, asked before `g`'s weights are placed (a
  // backend that allocates its pool up front leaves room for them). Default: no limit known.
  virtual KVRoom kv_room(const Graph& /*g*/) const { return {}; }
  // Copies block `from` of kv into block `to` (copy on write of a shared block).
  virtual void copy_kv_block(KVStorage& kv, int from, int to) = 0;
  virtual void run(CompiledGraph& cg, const StepInputs& in) = 0;
  // Mean weight bytes per greedy (argmax) step that the backend did not read because it proved
  // them unneeded (the CPU backend's screened LM head), since it was created; 0 when it reads
  // every weight.
  virtual double argmax_bytes_saved() const { return 0; }
  // Weight bytes a decode step reads fewer than the model's tensors hold, by the layout the backend
  // keeps them in (the CPU's BF16 matrices coded in 12 bits a weight, losslessly); 0 by default.
  virtual double layout_bytes_saved() const { return 0; }
  // Measures the machine with this backend's threads and kernels: read bandwidth, and with
  // `compute` the compute peaks too; takes a second or two. Default: nothing measured (all 0).
  virtual MachinePeaks measure_peaks(bool compute) const { return {}; }
  // The arithmetic that steps of n_tokens rows run on in the graphs given so far (expect, compile):
  // their matmuls over the step's token rows and attention; output-row matmuls (a prefill's one
  // LM head row) are left out. Every FLOP of those runs at most at the fastest one's peak. Empty
  // where the backend does not say.
  virtual std::vector<Arithmetic> step_arithmetic(int /*n_tokens*/) const { return {}; }
};

struct BackendFactory {
  std::string name;
  int priority = 0;  // higher wins when the user does not choose
  std::function<bool()> available;
  std::function<std::unique_ptr<Backend>(const BackendOptions&)> create;
  // One line per device this backend can run on (`hearth devices`); empty when none.
  std::function<std::vector<std::string>()> devices;
};

// Every backend this build has, one entry each (core/backend_list.cpp).
const std::vector<BackendFactory>& backend_list();
std::vector<std::string> backend_names();
// Throws, naming the first node of g that `be` does not support: a mixture of experts, a weight
// type it cannot read (`weights_it_reads` says which it can), or the op.
void check_supported(const Backend& be, const Graph& g, const std::string& display_name,
                     const std::string& weights_it_reads);

// name empty: the available backend with the highest priority.
std::unique_ptr<Backend> create_backend(const std::string& name, const BackendOptions& opt);

}  // namespace hearth
