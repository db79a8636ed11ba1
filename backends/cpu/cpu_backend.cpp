#include "backends/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>

#include "backends/cpu/ops.h"
#include "core/error.h"

namespace hearth::cpu {

namespace {

constexpr size_t kAlign = 64;

void* aligned_alloc_or_throw(size_t bytes, const char* what) {
  void* p = std::aligned_alloc(kAlign, std::max(kAlign, (bytes + kAlign - 1) / kAlign * kAlign));
  if (!p) fail("out of memory allocating ", bytes, " bytes for ", what);
  return p;
}

struct Buffer {
  std::unique_ptr<uint8_t[], void (*)(void*)> p{nullptr, std::free};
  void alloc(size_t bytes, const char* what) {
    p.reset(static_cast<uint8_t*>(aligned_alloc_or_throw(bytes, what)));
  }
  float* f() const { return reinterpret_cast<float*>(p.get()); }
};

struct CpuCompiled : CompiledGraph {
  const Graph* graph = nullptr;
  std::vector<size_t> offset;         // per tensor: byte offset into arena (activations)
  std::vector<const float*> norm_w;   // per tensor: f32 copy of norm weights (else null)
  std::vector<std::vector<float>> norm_store;
  Buffer arena;
  Buffer scratch;                     // per thread: matmul row widening
  size_t scratch_per_thread = 0;
  Buffer rope_cos, rope_sin;          // [max_tokens, head_dim/2], rebuilt each step
  int rope_head_dim = 0;
  double rope_theta = 0;
  std::vector<float*> ptr;            // per tensor, set each run
};

bool is_norm_weight_use(const Node& n, int slot) {
  return (n.op == Op::RmsNorm || n.op == Op::HeadRmsNorm) && slot == 1;
}

}  // namespace

uint8_t* CpuKVCache::k(int layer, int head) const {
  return mem.get() + (size_t(layer) * 2 * spec.n_kv_heads + head) * head_stride();
}
uint8_t* CpuKVCache::v(int layer, int head) const {
  return mem.get() + ((size_t(layer) * 2 + 1) * spec.n_kv_heads + head) * head_stride();
}

int default_thread_count() {
  unsigned n = std::thread::hardware_concurrency();
  return n ? int(n) : 1;
}

CpuBackend::CpuBackend(const BackendOptions& opt)
    : kernels_(make_kernel_table(choose_isa(detect_cpu_features(), opt.isa))),
      pool_(opt.threads > 0 ? opt.threads : default_thread_count()),
      kv_dtype_(opt.kv_dtype) {
  if (kv_dtype_ != DType::F32 && kv_dtype_ != DType::F16 && kv_dtype_ != DType::BF16)
    fail("cpu backend: KV cache type ", dtype_name(kv_dtype_), " is not supported");
}

std::string CpuBackend::describe() const {
  return std::string("cpu ") + isa_name(kernels_.isa) + ", " + std::to_string(pool_.size()) +
         " threads";
}

bool CpuBackend::supports_op(const Graph& g, const Node& n) const {
  switch (n.op) {
    case Op::MatMul: {
      const auto& w = g.tensor(n.in[1]);
      return w.kind == TensorKind::Weight &&
             (w.weight.dtype == DType::F32 || w.weight.dtype == DType::F16 ||
              w.weight.dtype == DType::BF16);
    }
    case Op::Embed: {
      auto t = g.tensor(n.in[0]).weight.dtype;
      return t == DType::F32 || t == DType::F16 || t == DType::BF16;
    }
    case Op::kCount: return false;
    default: return true;
  }
}

std::unique_ptr<CompiledGraph> CpuBackend::compile(const Graph& g, int max_tokens,
                                                   int max_outputs) {
  auto cg = std::make_unique<CpuCompiled>();
  cg->graph = &g;
  cg->max_tokens = max_tokens;
  cg->max_outputs = max_outputs;
  const auto& ts = g.tensors();
  const auto& nodes = g.nodes();
  cg->offset.assign(ts.size(), SIZE_MAX);
  cg->norm_w.assign(ts.size(), nullptr);
  cg->ptr.assign(ts.size(), nullptr);

  int64_t max_k = 0;
  for (const Node& n : nodes) {
    if (!supports_op(g, n)) fail("cpu backend: op ", op_name(n.op), " is not supported");
    for (int s = 0; s < 3; ++s) {
      int id = n.in[s];
      if (id < 0) continue;
      const auto& t = ts[size_t(id)];
      if (is_norm_weight_use(n, s) && !cg->norm_w[size_t(id)]) {
        cg->norm_store.emplace_back(size_t(t.weight.numel()));
        to_f32(t.weight.dtype, t.weight.data, cg->norm_store.back().data(),
               size_t(t.weight.numel()));
        cg->norm_w[size_t(id)] = cg->norm_store.back().data();
      }
    }
    if (n.op == Op::MatMul) max_k = std::max(max_k, ts[size_t(n.in[1])].weight.cols());
    if (n.op == Op::Rope) {
      if (cg->rope_head_dim && (cg->rope_head_dim != n.p.head_dim || cg->rope_theta != n.p.rope_theta))
        fail("cpu backend: every rope node must share head_dim and theta");
      cg->rope_head_dim = n.p.head_dim;
      cg->rope_theta = n.p.rope_theta;
    }
  }

  // Place activations with reuse: a tensor's block is free again after its last reader runs.
  std::vector<int> last_use(ts.size(), -1);
  for (size_t i = 0; i < nodes.size(); ++i)
    for (int id : nodes[i].in)
      if (id >= 0) last_use[size_t(id)] = int(i);
  auto bytes_of = [&](const GraphTensor& t) {
    size_t rows = size_t(t.rows == Rows::Tokens ? max_tokens : max_outputs);
    return (rows * size_t(t.cols) * 4 + kAlign - 1) / kAlign * kAlign;
  };
  std::multimap<size_t, size_t> free_blocks;  // size -> offset
  size_t top = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const int out = nodes[i].out;
    if (out != g.output && ts[size_t(out)].kind == TensorKind::Activation &&
        cg->offset[size_t(out)] == SIZE_MAX) {
      size_t need = bytes_of(ts[size_t(out)]);
      auto it = free_blocks.lower_bound(need);
      if (it != free_blocks.end()) {
        cg->offset[size_t(out)] = it->second;
        if (it->first > need) free_blocks.emplace(it->first - need, it->second + need);
        free_blocks.erase(it);
      } else {
        cg->offset[size_t(out)] = top;
        top += need;
      }
      if (last_use[size_t(out)] < 0) last_use[size_t(out)] = int(i);  // written, never read
    }
    for (int id : nodes[i].in) {
      if (id < 0 || last_use[size_t(id)] != int(i) || cg->offset[size_t(id)] == SIZE_MAX ||
          id == out)
        continue;
      free_blocks.emplace(bytes_of(ts[size_t(id)]), cg->offset[size_t(id)]);
      last_use[size_t(id)] = -2;  // freed once
    }
  }
  cg->arena.alloc(top, "activations");

  cg->scratch_per_thread = size_t((max_k + 15) / 16 * 16);
  cg->scratch.alloc(cg->scratch_per_thread * 4 * size_t(pool_.size()), "scratch");
  if (cg->rope_head_dim) {
    size_t n = size_t(max_tokens) * size_t(cg->rope_head_dim / 2) * 4;
    cg->rope_cos.alloc(n, "rope");
    cg->rope_sin.alloc(n, "rope");
  }
  return cg;
}

std::unique_ptr<KVCache> CpuBackend::alloc_kv(const KVSpec& spec, int capacity) {
  auto kv = std::make_unique<CpuKVCache>();
  kv->spec = spec;
  kv->capacity = capacity;
  kv->dtype = kv_dtype_;
  kv->mem = {static_cast<uint8_t*>(aligned_alloc_or_throw(kv->bytes(), "the KV cache")), std::free};
  return kv;
}

void CpuBackend::copy_kv(const KVCache& from_base, KVCache& to_base, int n) {
  auto& from = static_cast<const CpuKVCache&>(from_base);
  auto& to = static_cast<CpuKVCache&>(to_base);
  if (from.dtype != to.dtype || n > to.capacity || n > from.capacity)
    fail("cpu backend: incompatible KV caches");
  const size_t bytes = size_t(n) * from.spec.head_dim * dtype_size(from.dtype);
  for (int l = 0; l < from.spec.n_layers; ++l)
    for (int h = 0; h < from.spec.n_kv_heads; ++h) {
      std::memcpy(to.k(l, h), from.k(l, h), bytes);
      std::memcpy(to.v(l, h), from.v(l, h), bytes);
    }
}

void CpuBackend::run(CompiledGraph& base, const StepInputs& in) {
  auto& cg = static_cast<CpuCompiled&>(base);
  const Graph& g = *cg.graph;
  const auto& ts = g.tensors();
  if (in.n_tokens <= 0 || in.n_tokens > cg.max_tokens)
    fail("cpu backend: step of ", in.n_tokens, " tokens (compiled for at most ", cg.max_tokens,
         ")");
  if (in.n_out < 0 || in.n_out > cg.max_outputs)
    fail("cpu backend: ", in.n_out, " output rows (compiled for at most ", cg.max_outputs, ")");
  auto* kv = static_cast<CpuKVCache*>(in.kv);
  if (!kv || in.pos0 + in.n_tokens > kv->capacity)
    fail("cpu backend: KV cache too small for position ", in.pos0 + in.n_tokens);

  for (size_t i = 0; i < ts.size(); ++i) {
    if (ts[i].kind == TensorKind::Weight) cg.ptr[i] = nullptr;
    else if (int(i) == g.output) cg.ptr[i] = in.logits;
    else if (cg.offset[i] != SIZE_MAX) cg.ptr[i] = reinterpret_cast<float*>(cg.arena.p.get() + cg.offset[i]);
  }
  // RoPE angles in double: positions reach 40k and theta 1e6, where f32 angles lose digits.
  if (cg.rope_head_dim) {
    const int half = cg.rope_head_dim / 2;
    for (int t = 0; t < in.n_tokens; ++t) {
      for (int i = 0; i < half; ++i) {
        double inv_freq = std::pow(cg.rope_theta, -2.0 * i / cg.rope_head_dim);
        double a = double(in.pos0 + t) * inv_freq;
        cg.rope_cos.f()[t * half + i] = float(std::cos(a));
        cg.rope_sin.f()[t * half + i] = float(std::sin(a));
      }
    }
  }

  auto rows_of = [&](int id) {
    return int64_t(ts[size_t(id)].rows == Rows::Tokens ? in.n_tokens : in.n_out);
  };
  SpinBarrier barrier(pool_.size());
  const KernelTable& kt = kernels_;

  pool_.run([&](int tid, int nth) {
    float* scratch = cg.scratch.f() + size_t(tid) * cg.scratch_per_thread;
    int64_t b, e;
    for (const Node& n : g.nodes()) {
      float* out = cg.ptr[size_t(n.out)];
      const int64_t cols = ts[size_t(n.out)].cols;
      const int64_t rows = rows_of(n.out);
      auto in_ptr = [&](int s) { return cg.ptr[size_t(n.in[s])]; };
      switch (n.op) {
        case Op::Embed:
          ThreadPool::split(rows, tid, nth, 1, &b, &e);
          embed_rows(ts[size_t(n.in[0])].weight, in.tokens, out, b, e);
          break;
        case Op::GatherRows:
          ThreadPool::split(rows, tid, nth, 1, &b, &e);
          for (int64_t r = b; r < e; ++r)
            std::memcpy(out + r * cols, in_ptr(0) + int64_t(in.out_rows[r]) * cols,
                        size_t(cols) * 4);
          break;
        case Op::RmsNorm:
          ThreadPool::split(rows, tid, nth, 1, &b, &e);
          rms_norm_rows(in_ptr(0), cg.norm_w[size_t(n.in[1])], cols, n.p.eps, out, b, e);
          break;
        case Op::HeadRmsNorm:
          ThreadPool::split(rows * n.p.n_heads, tid, nth, 1, &b, &e);
          rms_norm_rows(in_ptr(0), cg.norm_w[size_t(n.in[1])], n.p.head_dim, n.p.eps, out, b, e);
          break;
        case Op::Rope:
          if (out != in_ptr(0) && tid == 0)
            std::memcpy(out, in_ptr(0), size_t(rows * cols) * 4);
          if (out != in_ptr(0)) barrier.wait();
          ThreadPool::split(rows * n.p.n_heads, tid, nth, 1, &b, &e);
          rope_heads(out, n.p.n_heads, n.p.head_dim, cg.rope_cos.f(), cg.rope_sin.f(), b, e);
          break;
        case Op::MatMul: {
          const Tensor& w = ts[size_t(n.in[1])].weight;
          ThreadPool::split(w.rows(), tid, nth, 16, &b, &e);
          MatmulArgs a{w.data, w.cols(), in_ptr(0), w.cols(), int(rows), out, cols, b, e, scratch};
          if (b < e) kt.matmul[weight_slot(w.dtype)](a);
          break;
        }
        case Op::Attention: {
          const int hd = n.p.head_dim, nkv = n.p.n_kv_heads, nh = n.p.n_heads;
          const float* q = in_ptr(0);
          const float* k = in_ptr(1);
          const float* v = in_ptr(2);
          const size_t esz = dtype_size(kv->dtype);
          // Phase 1: append this step's keys and values at positions pos0 + t.
          ThreadPool::split(rows * nkv, tid, nth, 1, &b, &e);
          for (int64_t p = b; p < e; ++p) {
            const int64_t t = p / nkv, h = p % nkv;
            const size_t off = size_t(in.pos0 + t) * size_t(hd) * esz;
            store_as(kv->dtype, k + t * nkv * hd + h * hd, kv->k(n.p.layer, int(h)) + off, hd);
            store_as(kv->dtype, v + t * nkv * hd + h * hd, kv->v(n.p.layer, int(h)) + off, hd);
          }
          barrier.wait();
          // Phase 2: each (token, head) attends causally over positions [0, pos0 + t].
          const float scale = 1.f / std::sqrt(float(hd));
          const int group = nh / nkv;
          ThreadPool::split(rows * nh, tid, nth, 1, &b, &e);
          for (int64_t p = b; p < e; ++p) {
            const int64_t t = p / nh, h = p % nh;
            const int kvh = int(h / group);
            attend_one(q + t * nh * hd + h * hd, kv->k(n.p.layer, kvh), kv->v(n.p.layer, kvh),
                       kv->dtype, in.pos0 + int(t) + 1, hd, scale, out + t * nh * hd + h * hd);
          }
          break;
        }
        case Op::SiluMul:
          ThreadPool::split(rows * cols, tid, nth, 16, &b, &e);
          silu_mul(in_ptr(0), in_ptr(1), out, b, e);
          break;
        case Op::Add:
          ThreadPool::split(rows * cols, tid, nth, 16, &b, &e);
          add(in_ptr(0), in_ptr(1), out, b, e);
          break;
        case Op::kCount: break;
      }
      barrier.wait();
    }
  });
}

namespace {
const bool registered = register_backend({"cpu", 10, [] { return true; },
                                          [](const BackendOptions& o) {
                                            return std::unique_ptr<Backend>(new CpuBackend(o));
                                          }});
}  // namespace

}  // namespace hearth::cpu
