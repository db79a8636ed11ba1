// The CPU backend: runs a compiled graph on a persistent thread pool, one pool job per step, with
// a barrier between dependent nodes. Kernels come from the table chosen for the detected ISA.
#pragma once
#include <memory>

#include "backends/cpu/kernels.h"
#include "core/backend.h"
#include "core/threadpool.h"

namespace hearth::cpu {

// Host KV cache: per layer, K then V, each [n_kv_heads, capacity, head_dim], so decode attention
// streams each head's keys contiguously.
struct CpuKVCache : KVCache {
  std::unique_ptr<uint8_t[], void (*)(void*)> mem{nullptr, nullptr};
  size_t head_stride() const { return size_t(capacity) * spec.head_dim * dtype_size(dtype); }
  uint8_t* k(int layer, int head) const;
  uint8_t* v(int layer, int head) const;
};

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(const BackendOptions& opt);
  std::string name() const override { return "cpu"; }
  std::string describe() const override;
  int threads() const override { return pool_.size(); }
  bool supports_op(const Graph& g, const Node& n) const override;
  std::unique_ptr<CompiledGraph> compile(const Graph& g, int max_tokens, int max_outputs) override;
  std::unique_ptr<KVCache> alloc_kv(const KVSpec& spec, int capacity) override;
  void copy_kv(const KVCache& from, KVCache& to, int n) override;
  void run(CompiledGraph& cg, const StepInputs& in) override;

  Isa isa() const { return kernels_.isa; }
  const KernelTable& kernels() const { return kernels_; }
  ThreadPool& pool() { return pool_; }

 private:
  KernelTable kernels_;
  ThreadPool pool_;
  DType kv_dtype_;
};

int default_thread_count();

}  // namespace hearth::cpu
