// The CPU backend: compiles a graph into fused steps (plan.h) and runs them on a persistent thread
// pool, one pool job per graph run with a barrier between steps. Kernels come from the table chosen
// for the detected ISA; long steps go to a GEMM library (gemm.h).
//
// Environment, for tests and comparisons (BackendOptions fields win when set): HEARTH_ISA=avx2|
// scalar forces a lower ISA; HEARTH_GEMM=dnnl|dnnl-bf16|openblas|native picks the GEMM (default:
// the first FP32-exact one built in); HEARTH_GEMM_MIN_TOKENS=N sets the step size from which it is
// used (default 64).
#pragma once
#include <memory>

#include "backends/cpu/gemm.h"
#include "backends/cpu/head_screen.h"
#include "backends/cpu/kernels.h"
#include "core/backend.h"
#include "core/threadpool.h"

namespace hearth::cpu {

// Host KV cache: per layer, K then V, each [n_kv_heads, capacity, head_dim], so decode attention
// streams each head's keys contiguously. An I8 cache holds codes there and, after all of them, one
// f32 scale per (layer, K/V, head, position) in the same order (kv_quant.h).
struct CpuKVCache : KVCache {
  std::unique_ptr<uint8_t[], void (*)(void*)> mem{nullptr, nullptr};
  size_t head_stride() const { return size_t(capacity) * spec.head_dim * dtype_size(dtype); }
  size_t scales_offset() const;  // bytes from mem to the first scale (I8 only)
  uint8_t* k(int layer, int head) const;
  uint8_t* v(int layer, int head) const;
  float* k_scale(int layer, int head) const;  // [capacity], I8 only
  float* v_scale(int layer, int head) const;
};

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(const BackendOptions& opt);
  // With the CPU's features given (tests vary them).
  CpuBackend(const BackendOptions& opt, const CpuFeatures& cpu);
  std::string name() const override { return "cpu"; }
  std::string describe() const override;
  int threads() const override { return pool_.size(); }
  bool supports_op(const Graph& g, const Node& n) const override;
  std::unique_ptr<CompiledGraph> compile(const Graph& g, int max_tokens, int max_outputs) override;
  std::unique_ptr<KVCache> alloc_kv(const KVSpec& spec, int capacity) override;
  void copy_kv(const KVCache& from, KVCache& to, int n) override;
  void run(CompiledGraph& cg, const StepInputs& in) override;
  double argmax_bytes_saved() const override;

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
  ScreenStats screen_stats_;                    // of every compiled graph's screened LM head
};

// The fused steps a compiled graph runs, one per line (see describe_steps), for tests and tools.
std::string describe_compiled(const CompiledGraph& cg);

int default_thread_count();

}  // namespace hearth::cpu
