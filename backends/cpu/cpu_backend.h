// The CPU backend: compiles a graph into fused steps (plan.h) and runs them on a persistent thread
// pool, one pool job per graph run with a barrier between steps. Kernels come from the table chosen
// for the detected ISA; long steps go to a GEMM library (gemm.h).
// BackendOptions::isa forces a lower ISA, ::gemm picks the GEMM (default: the first FP32-exact one
// built in), ::gemm_min_tokens sets the step size from which it is used (default 64); the CLI fills
// them from HEARTH_ISA, HEARTH_GEMM and HEARTH_GEMM_MIN_TOKENS.
#pragma once
#include <memory>
#include <mutex>
#include <vector>

#include "backends/cpu/gemm.h"
#include "backends/cpu/head_screen.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/plan.h"
#include "core/backend.h"
#include "core/threadpool.h"

namespace hearth::cpu {

struct CpuCompiled;
class WeightPlacer;
struct ScratchNeeds;

// Host KV blocks in extents of consecutive blocks (KVStorage::extent_blocks, a power of two): an
// extent holds, per layer and KV head, a unit per block (its K rows [block_size][head_dim], its V
// rows, and for I8 one f32 scale per K row and per V row), so decode attention reads a head's keys
// and values of a sequence's consecutive blocks as one run (from memory ~1.4x faster than a run
// per block: bench/RESULTS.md). An extent has as many blocks as make a head's run kKVRunBytes or
// just more. Pages are committed when first written, so a short sequence commits about one
// extent (with huge pages: 14-15 MB for the 0.6B at any KV type).
constexpr int64_t kKVRunBytes = 64 << 10;
struct CpuKVStorage : KVStorage {
  ~CpuKVStorage() override;
  uint8_t* mem = nullptr;
  size_t mapped = 0;
  int64_t unit_bytes = 0;    // one head's unit in one block
  int extent_shift = 0;      // log2 of extent_blocks
  int64_t extent_bytes = 0;  // units of every layer, head and block of an extent
  size_t rows_bytes() const { return size_t(block_size) * spec.head_dim * dtype_size(dtype); }
  // A head's unit in `block` (block 0: the base KVPaging addresses from).
  uint8_t* unit(int block, int layer, int head) const;
  uint8_t* k(int block, int layer, int head) const { return unit(block, layer, head); }
  uint8_t* v(int block, int layer, int head) const { return k(block, layer, head) + rows_bytes(); }
  float* k_scale(int block, int layer, int head) const {  // [block_size], I8 only
    return reinterpret_cast<float*>(k(block, layer, head) + 2 * rows_bytes());
  }
  float* v_scale(int block, int layer, int head) const {
    return k_scale(block, layer, head) + block_size;
  }
  KVPaging paging(const SeqRows& s) const;
};

// How a linear step of n_tokens rows multiplies its weights: the ISA's matmul kernels (quantized
// weights on int8 dot products, others widened to f32 FMAs), the kernels' int8 GEMM, or the GEMM
// library in f32 or bf16. run_linear_step runs what this says; describe() and step_arithmetic()
// report it. all_bf16 counts quantized weights too (gemm_rows dequantizes them to bf16).
enum class LinearRoute : uint8_t { Kernels, Int8Gemm, LibraryF32, LibraryBf16 };
LinearRoute linear_route(const KernelTable& kt, GemmKind kind, bool have_gemm, int gemm_min_tokens,
                         int64_t n_tokens, bool all_quantized, bool all_bf16);

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(const BackendOptions& opt);
  // With the CPU's features given (tests vary them).
  CpuBackend(const BackendOptions& opt, const CpuFeatures& cpu);
  std::string name() const override { return "cpu"; }
  // ISA and threads; then, once a graph was given (expect, compile), what multiplies its weights
  // in prefill-sized steps: "cpu avx512, 2 threads, int4 weights: int8 GEMM from 32 tokens".
  std::string describe() const override;
  void expect(const Graph& g) override;
  int threads() const override { return pool_.size(); }
  bool supports_op(const Graph& g, const Node& n) const override;
  std::unique_ptr<CompiledGraph> compile(const Graph& g, int max_tokens, int max_outputs) override;
  DType kv_dtype() const override { return kv_dtype_; }
  std::unique_ptr<KVStorage> alloc_kv(const KVSpec& spec, int n_blocks, int block_size) override;
  // Half the memory available now: the pool's pages are committed as they fill, so this bounds
  // what a long conversation can grow to, not what is taken up front.
  KVRoom kv_room(const Graph& g) const override;
  void copy_kv_block(KVStorage& kv, int from, int to) override;
  void run(CompiledGraph& cg, const StepInputs& in) override;
  double argmax_bytes_saved() const override;
  double layout_bytes_saved() const override;
  MachinePeaks measure_peaks(bool compute) const override;  // machine_peaks.cpp
  std::vector<Arithmetic> step_arithmetic(int n_tokens) const override;

  Isa isa() const { return kernels_.isa; }
  const KernelTable& kernels() const { return kernels_; }
  ThreadPool& pool() { return pool_; }
  GemmKind gemm_kind() const { return gemm_kind_; }
  int gemm_min_tokens() const { return gemm_min_tokens_; }

 private:
  KernelTable kernels_;
  ThreadPool pool_;
  DType kv_dtype_;
  GemmKind gemm_kind_;
  std::unique_ptr<Gemm> gemm_;
  int gemm_min_tokens_;
  std::shared_ptr<WeightStore> weight_copies_;  // BackendOptions::weight_copies
  bool kv_huge_pages_;                          // BackendOptions::kv_huge_pages
  CpuOptions::Screen screen_rule_;              // CpuOptions::screen
  ScreenStats screen_stats_;                    // of every compiled graph's screened LM head
  CodedSaving coded_saving_;                    // of the coded BF16 copies (bf16_coded.h)

  // The kinds of linear step in the graphs given so far, for describe() and step_arithmetic().
  struct LinearKind {
    unsigned dtypes = 0;  // bit per weight kind (weight_kind_bit in cpu_backend.cpp)
    bool all_quantized = false, all_bf16 = false;  // as linear_route takes them
    bool any_quantized = false;
    bool token_rows = false;  // over the step's tokens (not output rows)
    bool operator==(const LinearKind& o) const {
      return dtypes == o.dtypes && all_quantized == o.all_quantized && all_bf16 == o.all_bf16 &&
             any_quantized == o.any_quantized && token_rows == o.token_rows;
    }
  };
  void note_linear_steps(const Graph& g, const std::vector<Step>& steps);
  // compile()'s parts, in order.
  ScratchNeeds place_step_inputs(const Graph& g, CpuCompiled& cg, WeightPlacer& weights);
  void place_head_screen(CpuCompiled& cg, WeightPlacer& weights, const Step& s);
  void alloc_step_buffers(CpuCompiled& cg, const ScratchNeeds& need);
  LinearRoute route(const LinearKind& k, int64_t n_tokens) const;
  mutable std::mutex kinds_mu_;  // compile() may run in a step while another thread describes
  std::vector<LinearKind> kinds_;
};

// The fused steps a compiled graph runs, one per line (see describe_steps), for tests and tools.
std::string describe_compiled(const CompiledGraph& cg);

}  // namespace hearth::cpu
