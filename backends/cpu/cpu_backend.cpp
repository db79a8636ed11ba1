#include "backends/cpu/cpu_backend.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <thread>

#include "backends/cpu/compiled.h"
#include "backends/cpu/ops.h"
#include "backends/cpu/place_weights.h"
#include "core/error.h"
#include "core/huge_pages.h"

namespace hearth::cpu {

namespace {

constexpr size_t kAlign = 64;
// Steps of at least this many tokens go to the GEMM library. Below it the native kernels, which
// read each weight once for all tokens and widen it in registers, are as fast as a library call
// on weights widened through memory (hearth bench, 0.6B shape, 8 to 64 prompt tokens). The bf16
// GEMM would pay from about 12 tokens (Zen 5: 16 tokens 183 vs 142 t/s) but stays at 64 too: below
// that, prompts keep exact f32 activations (the logits fixtures' sequences are all shorter).
constexpr int kDefaultGemmMinTokens = 64;

void* aligned_alloc_or_throw(size_t bytes, const char* what) {
  void* p = std::aligned_alloc(kAlign, std::max(kAlign, (bytes + kAlign - 1) / kAlign * kAlign));
  if (!p) fail("out of memory allocating ", bytes, " bytes for ", what);
  return p;
}

// The tensors a step reads and writes, for placing activations.
void step_io(const Graph& g, const Step& s, std::vector<int>& reads, std::vector<int>& writes) {
  reads.clear();
  writes.clear();
  switch (s.kind) {
    case Step::Kind::Node: {
      const Node& n = g.nodes()[size_t(s.node)];
      for (int id : n.in)
        if (id >= 0) reads.push_back(id);
      writes.push_back(n.out);
      break;
    }
    case Step::Kind::Linear:
      reads.push_back(s.lin.x);
      if (s.lin.residual >= 0) reads.push_back(s.lin.residual);
      if (s.lin.epi == LinearStep::Epilogue::Store) {
        for (const auto& p : s.lin.parts) writes.push_back(p.out);
      } else {
        writes.push_back(s.lin.out);
      }
      break;
    case Step::Kind::Attention:
      reads.insert(reads.end(), {s.att.q, s.att.k, s.att.v});
      writes.push_back(s.att.out);
      break;
  }
}

// The GEMM the user named; empty for none.
std::string requested_gemm(const BackendOptions& opt) {
  return opt.cpu.gemm;
}

// Weight kinds as describe() names them, one bit each in LinearKind::dtypes.
constexpr const char* kWeightKinds[] = {"f32", "f16", "bf16", "int8", "int4", "int4 codebook"};
unsigned weight_kind_bit(const Tensor& w) {
  const int i = w.dtype == DType::F32    ? 0
                : w.dtype == DType::F16  ? 1
                : w.dtype == DType::BF16 ? 2
                : w.dtype == DType::Q8   ? 3
                : w.codebook             ? 5
                                         : 4;
  return 1u << i;
}
std::string weight_kinds(unsigned bits) {
  std::string s;
  for (int i = 0; i < 6; ++i)
    if (bits & (1u << i)) s += (s.empty() ? "" : "+") + std::string(kWeightKinds[i]);
  return s;
}

std::string threads_phrase(int n) {
  return std::to_string(n) + (n == 1 ? " thread" : " threads");
}

}  // namespace

void Buffer::alloc(size_t n, const char* what) {
  p.reset(static_cast<uint8_t*>(aligned_alloc_or_throw(n, what)));
  bytes = n;
}

CpuKVStorage::~CpuKVStorage() {
  if (mem) munmap(mem, mapped);
}
uint8_t* CpuKVStorage::unit(int block, int layer, int head) const {
  const size_t in_extent = ((size_t(layer) * spec.n_kv_heads + size_t(head)) << extent_shift) +
                           size_t(block & (extent_blocks - 1));
  return mem + size_t(block >> extent_shift) * size_t(extent_bytes) +
         in_extent * size_t(unit_bytes);
}
KVPaging CpuKVStorage::paging(const SeqRows& s) const {
  return {s.blocks, block_size, unit_bytes, extent_shift,
          extent_bytes - int64_t(extent_blocks) * unit_bytes};
}

CpuBackend::CpuBackend(const BackendOptions& opt) : CpuBackend(opt, detect_cpu_features()) {}

CpuBackend::CpuBackend(const BackendOptions& opt, const CpuFeatures& cpu)
    : kernels_(make_kernel_table(choose_isa(cpu, opt.cpu.isa))),
      pool_(opt.threads > 0 ? opt.threads : default_thread_count()),
      kv_dtype_(opt.kv_dtype),
      gemm_kind_(
          choose_gemm(requested_gemm(opt), kernels_.isa == Isa::Avx512 && cpu.fast_bf16_dot())),
      gemm_(make_gemm(gemm_kind_, pool_.size())),
      gemm_min_tokens_(opt.cpu.gemm_min_tokens > 0 ? opt.cpu.gemm_min_tokens
                                                   : kDefaultGemmMinTokens),
      weight_copies_(opt.cpu.weight_copies),
      kv_huge_pages_(opt.cpu.kv_huge_pages),
      screen_rule_(opt.cpu.screen) {
  if (kv_dtype_ != DType::F32 && kv_dtype_ != DType::F16 && kv_dtype_ != DType::BF16 &&
      kv_dtype_ != DType::I8)
    fail("cpu backend: KV cache type ", dtype_name(kv_dtype_), " is not supported");
  if (gemm_kind_ == GemmKind::DnnlBf16 && kernels_.isa != Isa::Avx512)
    fail("cpu backend: GEMM dnnl-bf16 needs AVX512_BF16 (ISA avx512)");
  const std::string gemm = requested_gemm(opt);
  // The kernels' own prefill GEMMs unless a library was asked for by name; with AMX tiles
  // (dot_bf16_tile_loop) oneDNN's bf16 GEMM runs on them, far above vdpbf16ps.
  if (!gemm.empty() && gemm != "auto") kernels_.quant_prefill = false;
  if ((!gemm.empty() && gemm != "auto") || kernels_.dot_bf16_tile_loop || !weight_copies_)
    kernels_.gemm_bf16_packed = nullptr;
  kernels_.bf16_prefill_on_kernels = (gemm.empty() || gemm == "auto") && weight_copies_ &&
                                     kernels_.isa == Isa::Avx512 && !cpu.fast_bf16_dot();
}

void CpuBackend::note_linear_steps(const Graph& g, const std::vector<Step>& steps) {
  std::lock_guard<std::mutex> lock(kinds_mu_);
  for (const Step& s : steps) {
    if (s.kind != Step::Kind::Linear) continue;
    LinearKind k;
    k.all_quantized = k.all_bf16 = true;
    for (const auto& p : s.lin.parts) {
      const Tensor& w = g.tensor(p.w).weight;
      k.dtypes |= weight_kind_bit(w);
      k.all_quantized = k.all_quantized && w.quantized();
      k.any_quantized = k.any_quantized || w.quantized();
      k.all_bf16 = k.all_bf16 && (w.dtype == DType::BF16 || w.quantized());
    }
    k.token_rows = g.tensor(s.lin.x).rows == Rows::Tokens;
    if (std::find(kinds_.begin(), kinds_.end(), k) == kinds_.end()) kinds_.push_back(k);
  }
}

void CpuBackend::expect(const Graph& g) {
  note_linear_steps(g, plan_steps(g));
}

LinearRoute CpuBackend::route(const LinearKind& k, int64_t n_tokens) const {
  return linear_route(kernels_, gemm_kind_, gemm_ != nullptr, gemm_min_tokens_, n_tokens,
                      k.all_quantized, k.all_bf16);
}

// "bf16 weights: bf16 GEMM on the packed rows from 64 tokens" for each route a prefill's token-row
// steps take (the LM head runs on one row per sequence and is left out).
std::string CpuBackend::describe() const {
  std::string d =
      std::string("cpu ") + isa_name(kernels_.isa) + ", " + threads_phrase(pool_.size());
  const bool amx = kernels_.dot_bf16_tile_loop != nullptr;
  auto route_text = [&](LinearRoute r) -> std::string {
    const std::string from = " from " + std::to_string(gemm_min_tokens_) + " tokens";
    switch (r) {
      case LinearRoute::Kernels:
        return "native kernels";
      case LinearRoute::Int8Gemm:
        return "int8 GEMM from " + std::to_string(kQuantGemmMinTokens) + " tokens";
      case LinearRoute::LibraryF32:
        return (gemm_kind_ == GemmKind::OpenBlas ? "OpenBLAS sgemm" : "oneDNN f32 GEMM") + from;
      case LinearRoute::LibraryBf16:
        if (kernels_.gemm_bf16_packed) return "bf16 GEMM on the packed rows" + from;
        return std::string("oneDNN bf16 GEMM") + (amx ? " (AMX)" : "") + from;
    }
    return "?";
  };
  std::vector<std::pair<std::string, unsigned>> by_route;  // route text -> weight kinds
  {
    std::lock_guard<std::mutex> lock(kinds_mu_);
    for (const LinearKind& k : kinds_) {
      if (!k.token_rows) continue;
      const std::string text = route_text(route(k, int64_t(1) << 30));
      auto it = std::find_if(by_route.begin(), by_route.end(),
                             [&](const auto& e) { return e.first == text; });
      if (it == by_route.end()) it = by_route.insert(by_route.end(), {text, 0u});
      it->second |= k.dtypes;
    }
  }
  for (const auto& [text, kinds] : by_route) d += ", " + weight_kinds(kinds) + " weights: " + text;
  return d;
}

std::vector<Arithmetic> CpuBackend::step_arithmetic(int n_tokens) const {
  std::vector<Arithmetic> out{Arithmetic::F32Fma};  // attention, and the kernels' float weights
  auto add = [&](Arithmetic a) {
    if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
  };
  std::lock_guard<std::mutex> lock(kinds_mu_);
  for (const LinearKind& k : kinds_) {
    if (!k.token_rows) continue;
    switch (route(k, n_tokens)) {
      case LinearRoute::Kernels:  // the quantized kernels multiply int8 codes by int8 activations
        if (k.any_quantized) add(Arithmetic::Int8Dot);
        break;
      case LinearRoute::Int8Gemm:
        add(Arithmetic::Int8Dot);
        break;
      case LinearRoute::LibraryF32:
        break;
      case LinearRoute::LibraryBf16:
        add(kernels_.dot_bf16_tile_loop ? Arithmetic::Bf16Tile : Arithmetic::Bf16Dot);
        break;
    }
  }
  return out;
}

bool CpuBackend::supports_op(const Graph& g, const Node& n) const {
  auto plain = [](DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; };
  switch (n.op) {
    case Op::MatMul: {
      const auto& w = g.tensor(n.in[1]);
      return w.kind == TensorKind::Weight && (plain(w.weight.dtype) || w.weight.quantized());
    }
    case Op::Embed: {
      const Tensor& t = g.tensor(n.in[0]).weight;
      return plain(t.dtype) || t.quantized();
    }
    case Op::MoE:
      for (int id = n.in[1]; id < n.in[2] + 3 * n.p.n_experts;
           id = id == n.in[1] ? n.in[2] : id + 1) {
        const Tensor& t = g.tensor(id).weight;
        if (!(plain(t.dtype) || t.quantized())) return false;
      }
      return n.p.top_k >= 1 && n.p.top_k <= n.p.n_experts;
    case Op::kCount:
      return false;
    default:
      return true;
  }
}

namespace {

// Norm weights are widened to f32 once; they are small. Where the weights are copies, the norm's
// page of the mapping goes back at once: a checkpoint's page cache may hold 2 MiB pages, and
// reading one norm maps all of its page (a 0.6B's second graph held 170 MB more that way).
void widen_norm(const Graph& g, CpuCompiled& cg, int id, const WeightStore* copies) {
  if (id < 0 || cg.norm_w[size_t(id)]) return;
  const Tensor& w = g.tensors()[size_t(id)].weight;
  cg.norm_store.emplace_back(size_t(w.numel()));
  to_f32(w.dtype, w.data, cg.norm_store.back().data(), size_t(w.numel()));
  cg.norm_w[size_t(id)] = cg.norm_store.back().data();
  if (copies) copies->hand_back(w.data, w.nbytes);
}

// RoPE's inverse frequencies, one set for the whole graph (run() makes each row's angles).
void use_rope(CpuCompiled& cg, int head_dim, double theta) {
  std::vector<double> f(size_t(head_dim / 2));
  for (size_t i = 0; i < f.size(); ++i) f[i] = std::pow(theta, -2.0 * double(i) / head_dim);
  if (cg.rope_head_dim && (cg.rope_head_dim != head_dim || f != cg.inv_freq))
    fail("cpu backend: every rope node must share head_dim and theta");
  cg.rope_head_dim = head_dim;
  cg.inv_freq = f;
}

// Places activations with reuse: a tensor's block is free again after the last step reading it.
// Tensors that fusion keeps in registers (a norm's output, a matmul's output before its epilogue)
// are never written and get no memory.
void place_activations(const Graph& g, CpuCompiled& cg) {
  const auto& ts = g.tensors();
  cg.offset.assign(ts.size(), SIZE_MAX);
  std::vector<int> last_use(ts.size(), -1);
  std::vector<int> reads, writes;
  for (size_t i = 0; i < cg.steps.size(); ++i) {
    step_io(g, cg.steps[i], reads, writes);
    for (int id : reads) last_use[size_t(id)] = int(i);
  }
  auto bytes_of = [&](const GraphTensor& t) {
    size_t rows = size_t(t.rows == Rows::Tokens ? cg.max_tokens : cg.max_outputs);
    return (rows * size_t(t.cols) * 4 + kAlign - 1) / kAlign * kAlign;
  };
  std::multimap<size_t, size_t> free_blocks;  // size -> offset
  size_t top = 0;
  for (size_t i = 0; i < cg.steps.size(); ++i) {
    step_io(g, cg.steps[i], reads, writes);
    for (int out : writes) {
      if (out == g.output || ts[size_t(out)].kind != TensorKind::Activation ||
          cg.offset[size_t(out)] != SIZE_MAX)
        continue;
      const size_t need = bytes_of(ts[size_t(out)]);
      auto it = free_blocks.lower_bound(need);
      if (it != free_blocks.end()) {
        cg.offset[size_t(out)] = it->second;
        if (it->first > need) free_blocks.emplace(it->first - need, it->second + need);
        free_blocks.erase(it);
      } else {
        cg.offset[size_t(out)] = top;
        top += need;
      }
      if (last_use[size_t(out)] < 0) last_use[size_t(out)] = int(i);  // written, never read
    }
    for (int id : reads) {
      if (last_use[size_t(id)] != int(i) || cg.offset[size_t(id)] == SIZE_MAX ||
          std::find(writes.begin(), writes.end(), id) != writes.end())
        continue;
      free_blocks.emplace(bytes_of(ts[size_t(id)]), cg.offset[size_t(id)]);
      last_use[size_t(id)] = -2;  // freed once
    }
  }
  cg.arena.alloc(top, "activations");
}

}  // namespace

// What the steps' scratch must hold, learnt while their inputs are placed.
struct ScratchNeeds {
  int64_t max_k = 0, max_norm = 0, max_hd = 0, max_qmm = 0, max_group = 0;
  bool moe_native = false;  // an MoE step runs its experts on the matmul kernels
};

std::unique_ptr<CompiledGraph> CpuBackend::compile(const Graph& g, int max_tokens,
                                                   int max_outputs) {
  auto cg = std::make_unique<CpuCompiled>();
  cg->graph = &g;
  cg->max_tokens = max_tokens;
  cg->max_outputs = max_outputs;
  for (const Node& n : g.nodes())
    if (!supports_op(g, n)) fail("cpu backend: op ", op_name(n.op), " is not supported");
  cg->steps = plan_steps(g);
  cg->claims = std::make_unique<std::atomic<int64_t>[]>(cg->steps.size());
  note_linear_steps(g, cg->steps);
  const size_t n_tensors = g.tensors().size();
  cg->norm_w.assign(n_tensors, nullptr);
  cg->k_factor.assign(n_tensors, nullptr);
  cg->ptr.assign(n_tensors, nullptr);
  cg->weight.assign(n_tensors, Tensor());
  cg->w_il.assign(n_tensors, nullptr);
  cg->w_exc.assign(n_tensors, nullptr);
  WeightPlacer weights(g, *cg, pool_, weight_copies_.get(), kernels_, coded_saving_);
  const ScratchNeeds need = place_step_inputs(g, *cg, weights);
  weights.place_embed_tables();
  place_activations(g, *cg);
  alloc_step_buffers(*cg, need);
  return cg;
}

// Each step's weights, norm weights, key factors and rope tables, and the LM head's screen.
ScratchNeeds CpuBackend::place_step_inputs(const Graph& g, CpuCompiled& cg, WeightPlacer& weights) {
  const auto& ts = g.tensors();
  ScratchNeeds need;
  auto matmul_input = [&](const Tensor& w) {
    need.max_k = std::max(need.max_k, w.cols());
    if (w.quantized())
      need.max_qmm = std::max(need.max_qmm, quant_matmul_scratch_floats(w.cols(), cg.max_tokens));
  };
  auto widen = [&](int id) { widen_norm(g, cg, id, weight_copies_.get()); };
  for (const Step& s : cg.steps) {
    if (s.kind == Step::Kind::Node) {
      const Node& n = g.nodes()[size_t(s.node)];
      if (n.op == Op::RmsNorm || n.op == Op::HeadRmsNorm) widen(n.in[1]);
      if (n.op == Op::Attention) need.max_hd = std::max<int64_t>(need.max_hd, n.p.head_dim);
      if (n.op == Op::Rope) use_rope(cg, n.p.head_dim, n.p.rope_theta);
      if (n.op == Op::MoE) {
        alloc_moe_buffers(cg, n, cg.max_tokens);
        // Experts run on the matmul kernels for all of their rows (no GEMM library), from copies
        // placed as the linear steps' are (decode reads 8 of 128 experts' scattered matrices:
        // packed rows in huge pages, not the mapping's 4 KiB pages).
        need.moe_native = true;
        weights.place(n.in[1], false);
        for (int e = 0; e < 3 * n.p.n_experts; ++e) weights.place(n.in[2] + e, false);
        for (int id : {n.in[1], n.in[2], n.in[2] + 2}) matmul_input(ts[size_t(id)].weight);
      }
    } else if (s.kind == Step::Kind::Linear) {
      widen(s.lin.norm_w);
      for (const auto& p : s.lin.parts) {
        weights.place(p.w, s.lin.logits && s.lin.parts.size() == 1);  // a screened head
        matmul_input(ts[size_t(p.w)].weight);
      }
      if (s.lin.norm_w >= 0) need.max_norm = std::max(need.max_norm, ts[size_t(s.lin.x)].cols);
      if (s.lin.logits) cg.argmax_fused = true;
      if (s.lin.logits && s.lin.parts.size() == 1) place_head_screen(cg, weights, s);
    } else {
      const AttentionStep& a = s.att;
      widen(a.q_norm);
      widen(a.k_norm);
      if (a.k_norm >= 0 && !cg.k_factor[size_t(a.k_norm)]) {
        cg.k_factor_store.push_back(kv_key_factors(cg.norm_w[size_t(a.k_norm)], a.p.head_dim));
        cg.k_factor[size_t(a.k_norm)] = cg.k_factor_store.back().data();
      }
      need.max_hd = std::max<int64_t>(need.max_hd, a.p.head_dim);
      need.max_group = std::max<int64_t>(need.max_group, a.p.n_heads / a.p.n_kv_heads);
      if (a.rope_q || a.rope_k) use_rope(cg, a.p.head_dim, a.p.rope_theta);
    }
  }
  return need;
}

// The screen of linear step s's one LM head, and whether its step is timed (ScreenPolicy).
void CpuBackend::place_head_screen(CpuCompiled& cg, WeightPlacer& weights, const Step& s) {
  const int head = s.lin.parts[0].w;
  weights.place_screen(head, screen_rule_, screen_stats_);
  // Timed only where it is the last step (run() times it to the pool's return).
  const size_t i = size_t(&s - cg.steps.data());
  if (cg.screen_w == head && i + 1 == cg.steps.size()) cg.head_step = i;
  if (cg.screen_w >= 0 && cg.head_step == SIZE_MAX && screen_rule_ == ScreenPolicy::Rule::Timed)
    cg.screen_policy = ScreenPolicy(ScreenPolicy::Rule::Always);
}

// Shared buffers for long steps, then each thread's scratch.
void CpuBackend::alloc_step_buffers(CpuCompiled& cg, const ScratchNeeds& need) {
  const size_t max_rows = size_t(std::max(cg.max_tokens, cg.max_outputs));
  const size_t max_k = size_t(need.max_k), max_norm = size_t(need.max_norm);
  if (max_norm > 0) cg.normed.alloc(max_rows * max_norm * 4, "normalised activations");
  if (gemm_kind_ == GemmKind::DnnlBf16) cg.x_bf16.alloc(max_rows * max_k * 2, "bf16 input");
  if (kernels_.quant_prefill && need.max_qmm > 0)
    cg.x_i8.alloc(ActsI8::bytes(int64_t(max_rows), int64_t(max_k)), "int8 input");
  const size_t block = size_t(std::max(kBlockRows, gemm_ ? kGemmEpilogueRows : kBlockRows));
  auto round16 = [](size_t n) { return (n + 15) / 16 * 16; };
  cg.tmp_floats = round16(std::max(block * max_rows, size_t(kEpilogueFloats)));
  size_t at = 0;
  cg.off_xn = at, at += round16(size_t(kPrivateNormTokens) * max_norm);
  cg.off_tmp = at, at += 2 * cg.tmp_floats;
  cg.off_wide = at, at += gemm_ ? round16(size_t(kGemmBlockRows) * max_k) : 0;
  const bool packed = std::any_of(cg.w_il.begin(), cg.w_il.end(), [](auto p) { return p; });
  cg.off_unpack = at, at += gemm_ && packed ? round16(size_t(kUnpackRows) * max_k / 2) : 0;
  // The matmul kernels may reorder x for all the tokens of a step that does not reach the GEMM
  // library (short steps, and steps with quantized weights); the screen keeps its own activations
  // after the head kernel's (argmax_screened).
  const size_t native_rows = gemm_ && need.max_qmm == 0 && !need.moe_native
                                 ? std::min(max_rows, size_t(gemm_min_tokens_))
                                 : max_rows;
  const size_t screen = size_t(2 * cg.screen_scratch);
  cg.off_mm = at, at += round16(std::max({max_k * native_rows, size_t(need.max_qmm), screen}));
  cg.off_attn = at, at += need.max_hd ? round16(size_t(attention_scratch_floats(need.max_hd))) : 0;
  cg.per_thread = std::max<size_t>(at, 16);
  cg.scratch.alloc(cg.per_thread * 4 * size_t(pool_.size()), "scratch");
  if (cg.rope_head_dim) {
    size_t n = size_t(cg.max_tokens) * size_t(cg.rope_head_dim / 2) * 4;
    cg.rope_cos.alloc(n, "rope");
    cg.rope_sin.alloc(n, "rope");
  }
  if (need.max_group > 0) {
    cg.attn_part_floats = (need.max_group * (need.max_hd + 2) + 15) / 16 * 16;
    cg.attn_parts.alloc(size_t(cg.attn_part_floats) * 4 * size_t(pool_.size()), "attention");
  }
  cg.best_val.resize(size_t(pool_.size()) * size_t(cg.max_outputs));
  cg.best_idx.resize(size_t(pool_.size()) * size_t(cg.max_outputs));
}

KVRoom CpuBackend::kv_room(const Graph& /*g*/) const {
  std::ifstream f("/proc/meminfo");
  std::string key;
  size_t kb = 0;
  while (f >> key >> kb) {
    if (key == "MemAvailable:") return {(kb << 10) / 2, SIZE_MAX};
    f.ignore(1 << 10, '\n');
  }
  return {};  // no /proc/meminfo: no limit known
}

std::unique_ptr<KVStorage> CpuBackend::alloc_kv(const KVSpec& spec, int n_blocks, int block_size) {
  auto kv = std::make_unique<CpuKVStorage>();
  kv->spec = spec;
  kv->dtype = kv_dtype_;
  kv->n_blocks = n_blocks;
  kv->block_size = block_size;
  const size_t scales = kv_dtype_ == DType::I8 ? 2 * size_t(block_size) * 4 : 0;
  kv->unit_bytes = int64_t((2 * kv->rows_bytes() + scales + 63) / 64 * 64);
  while ((kv->unit_bytes << kv->extent_shift) < kKVRunBytes) ++kv->extent_shift;
  kv->extent_blocks = 1 << kv->extent_shift;
  kv->extent_bytes = (kv->unit_bytes << kv->extent_shift) * spec.n_layers * spec.n_kv_heads;
  // Reserved, not committed: a page costs memory once a step writes it, so the budget bounds the
  // pool without paying for it up front. With huge pages: decode reads a run per layer, KV head
  // and extent, where 4 KiB pages would cost a TLB miss every 4 KiB.
  const size_t extents = (size_t(n_blocks) + kv->extent_blocks - 1) >> kv->extent_shift;
  const size_t bytes = size_t(kv->extent_bytes) * extents;
  void* mem;
  if (kv_huge_pages_) {
    kv->mapped = huge_pages_size(bytes);
    mem = map_huge_pages(bytes);
  } else {
    kv->mapped = (bytes + 4095) / 4096 * 4096;
    mem = mmap(nullptr, kv->mapped, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mem == MAP_FAILED) mem = nullptr;
  }
  if (!mem) fail("out of address space reserving ", kv->mapped >> 20, " MiB for the KV cache");
  kv->mem = static_cast<uint8_t*>(mem);
  return kv;
}

void CpuBackend::copy_kv_block(KVStorage& base, int from, int to) {
  auto& kv = static_cast<CpuKVStorage&>(base);
  if (from < 0 || to < 0 || from >= kv.n_blocks || to >= kv.n_blocks)
    fail("cpu backend: KV block copy ", from, " -> ", to, " out of range");
  for (int l = 0; l < kv.spec.n_layers; ++l)
    for (int h = 0; h < kv.spec.n_kv_heads; ++h)
      std::memcpy(kv.unit(to, l, h), kv.unit(from, l, h), size_t(kv.unit_bytes));
}

double CpuBackend::layout_bytes_saved() const {
  return coded_saving_.total();
}

double CpuBackend::argmax_bytes_saved() const {
  const ScreenStats& s = screen_stats_;
  const int64_t steps = s.steps.load(), all = steps + s.whole_steps.load();
  if (all == 0) return 0;
  return (double(steps) * (s.head_bytes - s.screen_bytes) - double(s.exact_rows) * s.row_bytes -
          double(s.low_rows) * s.low_row_bytes) /
         double(all);
}

namespace {

// The step's activations in the arena, its output in the caller's logits; weights are resolved
// by the steps themselves (cg.weight).
void bind_activations(const Graph& g, CpuCompiled& cg, float* logits) {
  const auto& ts = g.tensors();
  for (size_t i = 0; i < ts.size(); ++i) {
    if (ts[i].kind == TensorKind::Weight)
      cg.ptr[i] = nullptr;
    else if (int(i) == g.output)
      cg.ptr[i] = logits;
    else if (cg.offset[i] != SIZE_MAX)
      cg.ptr[i] = reinterpret_cast<float*>(cg.arena.p.get() + cg.offset[i]);
  }
}

// Each row's rotation angles at its sequence's position, in double as the reference takes them.
void fill_rope(CpuCompiled& cg, const StepInputs& in) {
  const size_t half = cg.inv_freq.size();
  for (int s = 0; s < in.n_seqs; ++s)
    for (int r = 0; r < in.seqs[s].n_rows; ++r) {
      const size_t t = size_t(in.seqs[s].row0 + r);
      for (size_t i = 0; i < half; ++i) {
        const double a = double(in.seqs[s].pos0 + r) * cg.inv_freq[i];
        cg.rope_cos.f()[t * half + i] = float(std::cos(a));
        cg.rope_sin.f()[t * half + i] = float(std::sin(a));
      }
    }
}

// A one-token head step of `mode` (ScreenPolicy): its time for the policy, where it is the last
// step (it ended when the pool returned), and what it read for the bench's bytes per token.
void record_screened_head(CpuCompiled& cg, int mode, ScreenStats& stats) {
  if (cg.head_step != SIZE_MAX) {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::steady_clock::now() - cg.head_t0);
    cg.screen_policy.record(mode, int64_t(ns.count()));
  }
  if (cg.screen_ran) {
    ++stats.steps;
    stats.exact_rows += cg.screen_rows;
    stats.low_rows += cg.screen_low_rows;
  } else {
    ++stats.whole_steps;
  }
}

// Merges the threads' best logits in thread order: their row ranges ascend, so a strict > keeps
// the first index of the maximum.
void merge_argmax(const CpuCompiled& cg, int n_out, int threads, int32_t* argmax) {
  for (int t = 0; t < n_out; ++t) {
    float best = -INFINITY;
    int32_t idx = -1;
    for (int th = 0; th < threads; ++th) {
      const size_t i = size_t(th) * size_t(cg.max_outputs) + size_t(t);
      if (cg.best_val[i] > best) best = cg.best_val[i], idx = cg.best_idx[i];
    }
    argmax[t] = idx;
  }
}

}  // namespace

void CpuBackend::run(CompiledGraph& base, const StepInputs& in) {
  auto& cg = static_cast<CpuCompiled&>(base);
  const Graph& g = *cg.graph;
  if (in.n_tokens <= 0 || in.n_tokens > cg.max_tokens)
    fail("cpu backend: step of ", in.n_tokens, " tokens (compiled for at most ", cg.max_tokens,
         ")");
  if (in.n_out < 0 || in.n_out > cg.max_outputs)
    fail("cpu backend: ", in.n_out, " output rows (compiled for at most ", cg.max_outputs, ")");
  auto* kv = static_cast<CpuKVStorage*>(in.kv);
  if (!kv || !in.seqs || in.n_seqs <= 0) fail("cpu backend: a step without sequences or KV");
  const bool argmax = in.argmax && cg.argmax_fused;
  if (in.n_out > 0 && !argmax && !in.logits) fail("cpu backend: no logits buffer");

  bind_activations(g, cg, in.logits);
  if (cg.rope_head_dim) fill_rope(cg, in);
  if (argmax) {
    std::fill(cg.best_val.begin(), cg.best_val.end(), -INFINITY);
    std::fill(cg.best_idx.begin(), cg.best_idx.end(), -1);
  }
  cg.screen_best.store(-INFINITY, std::memory_order_relaxed);
  ++cg.run_no;

  // A one-token head step the screen can take: greedy (mode 0) or top-k (mode 1).
  const int screen_mode = cg.screen_w < 0 || in.n_out != 1 ? -1
                          : argmax                         ? 0
                          : in.top_k && in.top_k[0] > 0    ? 1
                                                           : -1;
  cg.screen_on = screen_mode >= 0 && cg.screen_policy.use(screen_mode);
  cg.screen_rows.store(0, std::memory_order_relaxed);
  cg.screen_low_rows.store(0, std::memory_order_relaxed);
  cg.screen_ran.store(false, std::memory_order_relaxed);

  for (size_t i = 0; i < cg.steps.size(); ++i) cg.claims[i].store(0, std::memory_order_relaxed);
  SpinBarrier barrier(pool_.size());
  StepInputs step_in = in;
  if (!argmax) step_in.argmax = nullptr;
  pool_.run([&](int tid, int nth) {
    const StepCtx c{cg, step_in, kernels_, gemm_.get(), gemm_kind_, gemm_min_tokens_,
                    kv, barrier, tid,      nth};
    for (size_t i = 0; i < cg.steps.size(); ++i) {
      const Step& s = cg.steps[i];
      if (i == cg.head_step && tid == 0) cg.head_t0 = std::chrono::steady_clock::now();
      switch (s.kind) {
        case Step::Kind::Node:
          run_node_step(c, g.nodes()[size_t(s.node)]);
          break;
        case Step::Kind::Linear:
          run_linear_step(c, s.lin, cg.claims[i]);
          break;
        case Step::Kind::Attention:
          run_attention_step(c, s.att, cg.claims[i]);
          break;
      }
      if (i + 1 < cg.steps.size()) barrier.wait();
    }
  });

  if (screen_mode >= 0) record_screened_head(cg, screen_mode, screen_stats_);
  if (argmax) merge_argmax(cg, in.n_out, pool_.size(), in.argmax);
}

std::string describe_compiled(const CompiledGraph& base) {
  const auto& cg = static_cast<const CpuCompiled&>(base);
  return describe_steps(*cg.graph, cg.steps);
}

}  // namespace hearth::cpu
