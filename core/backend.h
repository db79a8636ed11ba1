// The backend interface. A backend says which ops it supports, compiles a graph once (placing
// every activation in memory it owns), allocates KV caches, and runs a compiled graph per step.
// Backends register themselves in the registry; the runner picks one by name or by priority.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/graph.h"
#include "core/weight_store.h"

namespace hearth {

struct BackendOptions {
  int threads = 0;  // 0: one per physical core
  std::string isa;  // CPU: force a lower ISA ("avx2", "scalar"); empty: best available
  DType kv_dtype = DType::F32;
  // CPU: the GEMM library for long steps ("auto", "dnnl", "dnnl-bf16", "openblas", "native");
  // empty: $HEARTH_GEMM, else auto (an FP32-exact one).
  std::string gemm;
  // CPU: steps of at least this many tokens use the GEMM; 0: $HEARTH_GEMM_MIN_TOKENS, else the
  // backend's default.
  int gemm_min_tokens = 0;
  // Where the backend keeps private huge-page copies of the weights its matmuls read, in the
  // layouts its kernels read fastest, shared with the other backends of the same model; null: the
  // weights are used where the model mapped them.
  std::shared_ptr<WeightStore> weight_copies;
  // CPU: KV caches in transparent huge pages. Decode reads 2 x layers x KV heads short streams of
  // the cache per token, and their 4 KiB pages cost TLB misses (0.6B decode on Zen 5: INT4 77-79
  // -> 80-81 t/s, INT8 53-54 -> 55, BF16 30.6-31.0 -> 31.5-31.9). Off unless asked for: a cache
  // is sized for the longest request, and each 2 MiB page it touches is resident at once.
  bool kv_huge_pages = false;
};

// The KV cache of one request. The backend owns the memory layout.
struct KVCache {
  virtual ~KVCache() = default;
  KVSpec spec;
  int capacity = 0;  // positions it can hold
  DType dtype = DType::F32;
  size_t bytes() const {
    // An I8 cache also keeps one f32 scale per position, head and K/V.
    const size_t per_row = size_t(spec.head_dim) * dtype_size(dtype) + (dtype == DType::I8 ? 4 : 0);
    return size_t(spec.n_layers) * 2 * spec.n_kv_heads * size_t(capacity) * per_row;
  }
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
  // A one-line description for manifests: ISA, threads, libraries.
  virtual std::string describe() const = 0;
  virtual int threads() const { return 1; }
  virtual bool supports_op(const Graph& g, const Node& n) const = 0;
  // Allocates everything the graph needs for steps of up to max_tokens tokens and max_outputs rows
  // of logits. Throws if an op is not supported.
  virtual std::unique_ptr<CompiledGraph> compile(const Graph& g, int max_tokens,
                                                 int max_outputs) = 0;
  virtual std::unique_ptr<KVCache> alloc_kv(const KVSpec& spec, int capacity) = 0;
  // Copies the first n positions of every layer and head (to.capacity >= n).
  virtual void copy_kv(const KVCache& from, KVCache& to, int n) = 0;
  virtual void run(CompiledGraph& cg, const StepInputs& in) = 0;
  // Mean weight bytes per greedy (argmax) step that the backend did not read because it proved
  // them unneeded (the CPU backend's screened LM head), since it was created; 0 when it reads
  // every weight.
  virtual double argmax_bytes_saved() const { return 0; }
};

struct BackendFactory {
  std::string name;
  int priority = 0;  // higher wins when the user does not choose
  std::function<bool()> available;
  std::function<std::unique_ptr<Backend>(const BackendOptions&)> create;
};

// Backends call this from a static initializer in their own folder. The table is written only
// before main() and read-only afterwards.
bool register_backend(BackendFactory f);
std::vector<std::string> backend_names();
// name empty: the available backend with the highest priority.
std::unique_ptr<Backend> create_backend(const std::string& name, const BackendOptions& opt);

}  // namespace hearth
