// Each op, run through a backend on small random shapes, against an independent float64
// computation written here: the CPU backend on every ISA the machine has, and the Vulkan backend
// (under the validation layer, which must stay silent) and the CUDA backend where this build has
// them and a device is found (tests/vulkan_target.h, tests/cuda_target.h).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/backend.h"
#include "core/quant_format.h"
#include "core/weight_store.h"
#include "tests/cuda_target.h"
#include "tests/quant_placement.h"
#include "tests/random_data.h"
#include "tests/vulkan_target.h"

using namespace hearth;

namespace {

using test::randn;

std::vector<std::string> isas_here() {
  std::vector<std::string> v = {"scalar"};
  auto best = cpu::detect_cpu_features().best();
  if (best == cpu::Isa::Avx2 || best == cpu::Isa::Avx512) v.push_back("avx2");
  if (best == cpu::Isa::Avx512) v.push_back("avx512");
  if (best == cpu::Isa::Neon) v.push_back("neon");
  return v;
}

// The CPU ISAs, then "vulkan" (with subgroup arithmetic, 16-bit storage and integer dot products
// where the device has them) and "vulkan-nosubgroup", "vulkan-no16bit" and "vulkan-nodot" (the
// fallbacks) where there is a device, then "cuda" and
// "cuda-exact" where there is a CUDA device: what a Harness can run on.
std::vector<std::string> targets_here() {
  auto v = isas_here();
  if (test::vulkan_device_here())
    v.insert(v.end(), {"vulkan", "vulkan-nosubgroup", "vulkan-no16bit", "vulkan-nodot"});
  if (test::cuda_device_here()) v.insert(v.end(), {"cuda", "cuda-exact"});
  // The CUDA backend's code run on the CPU (tests/cuda_emu.h), with cuBLAS and graphs, and with
  // neither: everywhere.
  v.insert(v.end(), {"cuda-emu", "cuda-emu-exact"});
  return v;
}

std::unique_ptr<Backend> make_backend(const std::string& target, int threads,
                                      DType kv = DType::F32) {
  BackendOptions o;
  o.threads = threads;
  o.kv_dtype = kv;
  if (target == "vulkan") return test::vulkan_backend(kv);
  // cuBLAS multiplies steps of over 8 rows in 16 bits; cuda-exact keeps the f32 mat-vec.
  if (target == "cuda") return test::cuda_backend(kv);
  if (target == "cuda-exact") return test::cuda_backend(kv, false);
  if (target == "cuda-emu") return test::cuda_emulated(kv);
  if (target == "cuda-emu-exact") return test::cuda_emulated(kv, false, false);
  if (target == "cuda-emu-i8") {  // no cuBLAS, the int8 mat-vec on
    BackendOptions e = test::cuda_options(kv, false, true);
    e.cuda.int8_dots = true;
    return cuda_emu::make_emulated_backend(e);
  }
  if (target == "vulkan-nosubgroup") return test::vulkan_backend(kv, 0, false);
  if (target == "vulkan-no16bit") return test::vulkan_backend(kv, 0, true, false);
  if (target == "vulkan-nodot") return test::vulkan_backend(kv, 0, true, true, false);
  // Bindings of at most 80 KiB (or 32): the weights and logits of the parts test below are split.
  if (target == "vulkan-small") return test::vulkan_backend(kv, 80 << 10);
  if (target == "vulkan-32k") return test::vulkan_backend(kv, 32 << 10);
  o.cpu.isa = target;
  return create_backend("cpu", o);
}

Tensor view(DType t, std::vector<int64_t> shape, const void* data) {
  Tensor x;
  x.dtype = t;
  x.ndim = int(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) x.shape[i] = shape[i];
  x.data = data;
  x.nbytes = size_t(x.numel()) * dtype_size(t);
  return x;
}

// Normalised error: ||got - want|| / ||want||.
double nerr(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// Qwen3-MoE's block in float64: router logits from wf[0] ([E, H]), softmax, the top K (ties to
// the lower index), renormalised when norm, and the weighted SwiGLU of experts e at wf[1 + 3 e]
// (gate, up [mi, H]) and wf[3 + 3 e] (down [H, mi]). min_gap: the smallest gap between a token's
// K-th and (K+1)-th logits seen.
struct MoeShape {
  int T, H, mi, E, K;  // tokens, hidden, expert width, experts, experts per token
  bool norm;           // renormalise the top K's weights
};

std::vector<double> moe_reference(const std::vector<float>& x, const MoeShape& sh,
                                  const std::vector<std::vector<float>>& wf, double* min_gap) {
  const int T = sh.T, H = sh.H, mi = sh.mi, E = sh.E, K = sh.K;
  const bool norm = sh.norm;
  std::vector<double> want(size_t(T * H), 0.0);
  for (int t = 0; t < T; ++t) {
    const float* xt = x.data() + t * H;
    auto dot = [&](const std::vector<float>& w, int64_t row, const double* v, int64_t n) {
      double s = 0;
      for (int64_t k = 0; k < n; ++k) s += double(w[size_t(row * n + k)]) * v[k];
      return s;
    };
    std::vector<double> xd(xt, xt + H);
    std::vector<double> logit(static_cast<size_t>(E));
    for (int e = 0; e < E; ++e) logit[size_t(e)] = dot(wf[0], e, xd.data(), H);
    std::vector<int> order(static_cast<size_t>(E));
    for (int e = 0; e < E; ++e) order[size_t(e)] = e;
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return logit[size_t(a)] > logit[size_t(b)]; });
    *min_gap =
        std::min(*min_gap, logit[size_t(order[size_t(K - 1)])] - logit[size_t(order[size_t(K)])]);
    double mx = logit[size_t(order[0])], sum = 0, kept = 0;
    for (int e = 0; e < E; ++e) sum += std::exp(logit[size_t(e)] - mx);
    for (int j = 0; j < K; ++j) kept += std::exp(logit[size_t(order[size_t(j)])] - mx) / sum;
    for (int j = 0; j < K; ++j) {
      const int e = order[size_t(j)];
      double w = std::exp(logit[size_t(e)] - mx) / sum;
      if (norm) w /= kept;
      const size_t b = size_t(1 + 3 * e);
      std::vector<double> act(static_cast<size_t>(mi));
      for (int r = 0; r < mi; ++r) {
        const double gv = dot(wf[b], r, xd.data(), H), uv = dot(wf[b + 1], r, xd.data(), H);
        act[size_t(r)] = gv / (1 + std::exp(-gv)) * uv;
      }
      for (int r = 0; r < H; ++r) want[size_t(t * H + r)] += w * dot(wf[b + 2], r, act.data(), mi);
    }
  }
  return want;
}

// Runs a graph whose output rows are all step rows: embed -> op under test -> gather everything.
// The KV cache is paged in blocks of 4 positions, its table in reverse block order, so attention
// crosses blocks that are not adjacent in memory.
struct Harness {
  std::unique_ptr<Backend> be;
  std::unique_ptr<KVStorage> kv;
  std::vector<int32_t> table;
  // target: a CPU ISA ("" the best), "vulkan", "vulkan-nosubgroup" or "vulkan-small".
  Harness(const std::string& target, int threads, KVSpec spec = {1, 1, 2}, int cap = 64,
          DType kv_dtype = DType::F32) {
    be = make_backend(target, threads, kv_dtype);
    alloc(spec, cap);
  }
  ~Harness() { test::check_validation_silent(*be); }
  void alloc(KVSpec spec, int cap) {
    const int n = (cap + 3) / 4;
    kv = be->alloc_kv(spec, n, 4);
    table.resize(size_t(n));
    for (int i = 0; i < n; ++i) table[size_t(i)] = n - 1 - i;
  }
  // top_k: StepInputs::top_k, one per token (every row is an output row).
  std::vector<float> run(Graph& g, const std::vector<int32_t>& tokens, int pos0 = 0,
                         const std::vector<int32_t>* top_k = nullptr) {
    const int T = int(tokens.size());
    auto cg = be->compile(g, T, T);
    std::vector<int32_t> rows(static_cast<size_t>(T));
    for (int i = 0; i < T; ++i) rows[size_t(i)] = i;
    std::vector<float> out(size_t(T) * size_t(g.tensor(g.output).cols));
    SeqRows seq;
    seq.n_rows = T;
    seq.pos0 = pos0;
    seq.blocks = table.data();
    seq.n_blocks = int(table.size());
    StepInputs in;
    in.tokens = tokens.data();
    in.n_tokens = T;
    in.seqs = &seq;
    in.n_seqs = 1;
    in.out_rows = rows.data();
    in.n_out = T;
    in.kv = kv.get();
    in.logits = out.data();
    if (top_k) in.top_k = top_k->data();
    be->run(*cg, in);
    return out;
  }
};

// Inputs come from an F32 "embedding table" whose row t is the t-th input row.
int input(Graph& g, const std::vector<float>& table, int64_t rows, int64_t cols, const char* name) {
  int w = g.weight(name, view(DType::F32, {rows, cols}, table.data()));
  return g.add(Op::Embed, g.activation(name, cols), {w});
}

// x rounded to int8 per block of 32 as FORMAT.md says decode kernels do (scale amax / 127, codes
// x * (127 / amax) rounded to nearest even, in f32), back as code x scale in float64.
std::vector<double> int8_blocks(const float* x, int64_t k) {
  std::vector<double> out(static_cast<size_t>(k));
  for (int64_t b = 0; b < k; b += 32) {
    float amax = 0.f;
    for (int64_t i = b; i < b + 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float inv = amax > 0.f ? 127.f / amax : 0.f, d = amax / 127.f;
    for (int64_t i = b; i < b + 32; ++i) out[size_t(i)] = double(std::nearbyint(x[i] * inv)) * d;
  }
  return out;
}

int finish(Graph& g, int x) {
  g.output = g.add(Op::GatherRows, g.activation("out", g.tensor(x).cols, Rows::Outputs), {x});
  return g.output;
}

// One MoE node over the rows of x: the router, then expert(e, which) for the gate (which 0) and up
// (1) [mi, H] and down (2) [H, mi] of each expert e in turn.
void moe_graph(Graph& g, const std::vector<float>& x, const MoeShape& sh, const Tensor& router,
               const std::function<Tensor(int, int)>& expert) {
  const int xi = input(g, x, sh.T, sh.H, "x");
  const int r = g.weight("router", router);
  int first = -1;
  for (int e = 0; e < sh.E; ++e)
    for (int which = 0; which < 3; ++which) {
      static const char* const kNames[] = {"gate", "up", "down"};
      const int id = g.weight(kNames[which] + std::to_string(e), expert(e, which));
      if (first < 0) first = id;
    }
  NodeParams mp;
  mp.n_experts = sh.E;
  mp.top_k = sh.K;
  mp.norm_topk = sh.norm;
  finish(g, g.add(Op::MoE, g.activation("moe", sh.H), {xi, r, first}, mp));
}

// Checks logits read back with StepInputs::top_k = ks against the whole rows: each logit is the
// whole row's bit for bit, or -inf where the whole row's is below its k-th largest (NaN ranked as
// -inf). Returns how many rows came back cut to exactly the logits at or above the k-th (the GPU
// backends' device top-k).
int check_top_k(const std::vector<float>& whole, const std::vector<float>& got,
                const std::vector<int32_t>& ks, int64_t V) {
  const float inf = std::numeric_limits<float>::infinity();
  auto bits = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
  };
  int cut_rows = 0;
  for (size_t t = 0; t < ks.size(); ++t) {
    CAPTURE(t);
    const float* x = &whole[t * size_t(V)];
    const float* y = &got[t * size_t(V)];
    std::vector<float> sorted(x, x + V);
    for (float& v : sorted)
      if (std::isnan(v)) v = -inf;
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    const int k = ks[t];
    const float kth = k >= 1 ? sorted[size_t(std::min<int64_t>(k, V) - 1)] : -inf;
    int cut = 0, wrong = 0, kept_below = 0;
    for (int64_t i = 0; i < V; ++i) {
      const float v = std::isnan(x[i]) ? -inf : x[i];
      kept_below += k >= 1 && v < kth && y[i] != -inf;
      if (bits(y[i]) == bits(x[i])) continue;
      if (k >= 1 && v < kth && y[i] == -inf) {
        ++cut;
        continue;
      }
      ++wrong;
    }
    CHECK(wrong == 0);
    cut_rows += cut > 0 && kept_below == 0;
  }
  return cut_rows;
}

// Q8 and Q4 heads [300, 256] of a short step under 32 KiB bindings: the weight in parts of 128 or
// 256 rows, 30 rows of logits in two parts, each part's integer-dot matmul reading its own rows of
// the int8 activations (or the dequantizing matmul without integer dot products).
void check_quantized_head_in_parts(const std::vector<float>& x_all,
                                   const std::vector<int32_t>& toks) {
  const int64_t N = 300, K = 256;
  const int T = 30;
  const std::vector<float> x(x_all.begin(), x_all.begin() + T * K);
  const std::vector<int32_t> ids(toks.begin(), toks.begin() + T);
  for (int bits : {8, 4}) {
    CAPTURE(bits);
    // A backend per weight: it serves one model, its uploads known by their host addresses.
    Harness h("vulkan-32k", 1, {1, 1, 2}, 256);
#ifdef HEARTH_HAVE_VULKAN
    // A device whose storage offsets align to more than 64 bytes keeps the logits' parts at
    // multiples of 64 rows, more than 32 KiB holds.
    auto* vk = dynamic_cast<vulkan::VulkanBackend*>(h.be.get());
    if (vk->context().info().min_storage_offset_alignment > 64) {
      MESSAGE("quantized head in parts not checked: storage offsets align to more than 64 bytes");
      return;
    }
#endif
    const bool dots = test::vulkan_integer_dot(*h.be);
    std::mt19937 rng(static_cast<unsigned>(bits));
    std::vector<int8_t> q(size_t(N * K));
    for (auto& c : q) c = int8_t(bits == 8 ? int(rng() % 255) - 127 : int(rng() % 16) - 8);
    std::vector<uint16_t> scales(size_t(N * K / 32));
    for (auto& sc : scales) sc = f32_to_f16(0.001f + 0.02f * float(rng() % 1000) / 1000.f);
    const std::vector<uint8_t> codes = test::pack_codes(bits, q.data(), N, K);
    Graph g;
    int xi = input(g, x, T, K, "x");
    int sel = g.add(Op::GatherRows, g.activation("sel", K, Rows::Outputs), {xi});
    g.output = g.add(
        Op::MatMul, g.activation("logits", N, Rows::Outputs),
        {sel, g.weight("w", test::quantized_view(bits, N, K, codes, scales, DType::F16, 32))});
    std::vector<double> want(size_t(T * N));
    for (int t = 0; t < T; ++t) {
      const std::vector<double> xr =
          dots ? int8_blocks(&x[size_t(t * K)], K)
               : std::vector<double>(x.begin() + t * K, x.begin() + (t + 1) * K);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k)
          want[size_t(t * N + n)] += xr[size_t(k)] * q[size_t(n * K + k)] *
                                     f16_to_f32(scales[size_t(n * K / 32 + k / 32)]);
    }
#ifdef HEARTH_HAVE_VULKAN
    const auto kernel = dots ? vulkan::Kernel::MatMulDot : vulkan::Kernel::MatMul;
    // Weight parts (Q8: 3 of up to 128 rows, Q4: 2 of up to 256) x 2 parts of the logits' rows.
    CHECK(vulkan::count_dispatches(*h.be->compile(g, T, T), kernel) == (bits == 8 ? 6 : 4));
#endif
    CHECK(nerr(h.run(g, ids), want) < (dots ? 1e-3 : 1e-6));
  }
}

}  // namespace

TEST_SUITE("ops") {
  TEST_CASE("matmul in F32, F16 and BF16 against float64") {
    for (const auto& isa : targets_here())
      for (DType wt : {DType::F32, DType::F16, DType::BF16})
        for (int T : {1, 3, 9, 40})
          for (int64_t K : {8, 37, 256}) {
            // 40 rows: the Vulkan shaders' tiles of 32 (a whole tile and a ragged one).
            if (T == 40 && isa.rfind("vulkan", 0) != 0) continue;
            const int64_t N = 35;
            CAPTURE(isa);
            CAPTURE(std::string(dtype_name(wt)));
            CAPTURE(T);
            CAPTURE(K);
            auto x = randn(size_t(T * K), 1);
            auto wf = randn(size_t(N * K), 2, 0.1f);
            std::vector<uint16_t> wh(wf.size());
            for (size_t i = 0; i < wf.size(); ++i) {
              if (wt == DType::F16) wh[i] = f32_to_f16(wf[i]), wf[i] = f16_to_f32(wh[i]);
              if (wt == DType::BF16) wh[i] = f32_to_bf16(wf[i]), wf[i] = bf16_to_f32(wh[i]);
            }
            const void* wp = wt == DType::F32 ? static_cast<const void*>(wf.data()) : wh.data();
            Graph g;
            int xi = input(g, x, T, K, "x");
            int y =
                g.add(Op::MatMul, g.activation("y", N), {xi, g.weight("w", view(wt, {N, K}, wp))});
            finish(g, y);
            std::vector<int32_t> toks(static_cast<size_t>(T));
            for (int t = 0; t < T; ++t) toks[size_t(t)] = t;
            for (int threads : {1, 2}) {
              Harness h(isa, threads);
              auto got = h.run(g, toks);
              std::vector<double> want(size_t(T * N));
              for (int t = 0; t < T; ++t)
                for (int64_t n = 0; n < N; ++n) {
                  double s = 0;
                  for (int64_t k = 0; k < K; ++k)
                    s += double(x[size_t(t * K + k)]) * wf[size_t(n * K + k)];
                  want[size_t(t * N + n)] = s;
                }
              // cuBLAS rounds a long step's activations to the weight's 16-bit type (F32: f32).
              const bool half = (isa == "cuda" || isa == "cuda-emu") && T > 8 && wt != DType::F32;
              CHECK(nerr(got, want) < (half ? 1e-2 : 1e-6));
            }
          }
  }

  TEST_CASE("quantized matmul and embedding (INT8, INT4, INT4 codebook) against float64") {
    // Codes and scales drawn at random and packed as quant/FORMAT.md places them (by
    // tests/quant_placement.h, not quant/); the reference
    // multiplies code x scale (or codebook level x scale) in float64. K = 160 ends its rows with a
    // chunk of one block, K = 96 is a chunk of three, K = 352 two whole chunks and one of three
    // (past 256: Vulkan's integer-dot shader); groups of 32, 64 (K = 256) and 128 (K = 512).
    const quant::Codebook cb = {-127, -90, -66, -47, -31, -18, -8, -1,
                                4,    11,  21,  34,  50,  70,  95, 126};
    for (const auto& target : targets_here())
      for (int kind : {8, 4, 5})  // 5: INT4 with the codebook
        for (int64_t K : {96, 160, 256, 352, 512})
          for (DType st : {DType::F16, DType::BF16}) {
            const int bits = kind == 8 ? 8 : 4, group = K % 64 ? 32 : K == 512 ? 128 : 64;
            const int64_t N = 37;
            const int T = 3;
            CAPTURE(target);
            CAPTURE(kind);
            CAPTURE(K);
            std::mt19937 rng(unsigned(kind * 1000 + K));
            std::vector<int8_t> q(size_t(N * K));
            for (auto& c : q)
              c = int8_t(int(rng() % (bits == 8 ? 255 : 16)) - (bits == 8 ? 127 : 8));
            std::vector<uint16_t> scales(size_t(N * K / group));
            std::vector<double> sd(scales.size());
            for (size_t i = 0; i < scales.size(); ++i) {
              const float f = 0.001f + 0.02f * float(rng() % 1000) / 1000.f * (i % 3 ? 1 : -1);
              scales[i] = st == DType::F16 ? f32_to_f16(f) : f32_to_bf16(f);
              sd[i] = st == DType::F16 ? f16_to_f32(scales[i]) : bf16_to_f32(scales[i]);
            }
            const std::vector<uint8_t> codes = test::pack_codes(bits, q.data(), N, K);
            const Tensor w = test::quantized_view(bits, N, K, codes, scales, st, group,
                                                  kind == 5 ? cb.data() : nullptr);
            auto wd = [&](int64_t n, int64_t k) {
              const int c = q[size_t(n * K + k)];
              const double level = kind == 5 ? cb[size_t(c + 8)] : c;
              return level * sd[size_t(n * (K / group) + k / group)];
            };
            auto x = randn(size_t(T * K), 12);
            // The matmul x W^T, and the embedding of rows 5, 0, 36 of W as a table.
            Graph g;
            int xi = input(g, x, T, K, "x");
            finish(g, g.add(Op::MatMul, g.activation("y", N), {xi, g.weight("w", w)}));
            Graph ge;
            finish(ge, ge.add(Op::Embed, ge.activation("e", K), {ge.weight("table", w)}));
            std::vector<double> want(size_t(T * N)), want_e(size_t(T * K));
            const std::vector<int32_t> toks = {0, 1, 2}, ids = {5, 0, 36};
            for (int t = 0; t < T; ++t) {
              for (int64_t n = 0; n < N; ++n) {
                double s = 0;
                for (int64_t k = 0; k < K; ++k) s += double(x[size_t(t * K + k)]) * wd(n, k);
                want[size_t(t * N + n)] = s;
              }
              for (int64_t k = 0; k < K; ++k) want_e[size_t(t * K + k)] = wd(ids[size_t(t)], k);
            }
            Harness h(target, 2);
            // The SIMD kernels, Vulkan's integer-dot shader (rows of 256 and more) and CUDA's int8
            // mat-vec round the activations to int8 per block of 32 (FORMAT.md, about 0.5% here),
            // so they are held to the product with the activations so rounded (want_i8) too; the
            // scalar kernels, the other Vulkan shaders and CUDA's exact targets multiply in f32.
            const bool vulkan = target.rfind("vulkan", 0) == 0;
            const bool cuda_target = target.rfind("cuda", 0) == 0;
            const bool int8_dots = vulkan ? kind != 5 && K >= 256 && test::vulkan_integer_dot(*h.be)
                                   : cuda_target
                                       ? kind != 5 && target.find("exact") == std::string::npos
                                       : target != "scalar";
            const auto got = h.run(g, toks);
            CHECK(nerr(got, want) < (int8_dots ? 1e-2 : 1e-6));
            // x W^T in float64 with x's rows rounded to int8 per block of 32 (int8_blocks).
            auto product_i8 = [&](const std::vector<float>& xs, int rows) {
              std::vector<double> out(size_t(rows * N));
              for (int t = 0; t < rows; ++t) {
                const std::vector<double> xq = int8_blocks(&xs[size_t(t * K)], K);
                for (int64_t n = 0; n < N; ++n)
                  for (int64_t k = 0; k < K; ++k)
                    out[size_t(t * N + n)] += xq[size_t(k)] * wd(n, k);
              }
              return out;
            };
            // A GPU's division may round 127 / amax differently and move a code by one.
            if (int8_dots) CHECK(nerr(got, product_i8(x, T)) < (vulkan ? 1e-3 : 1e-5));
            CHECK(nerr(h.run(ge, ids), want_e) < 1e-7);
            const bool cuda = target.rfind("cuda", 0) == 0;
            if (!cuda && target.rfind("vulkan", 0) != 0) continue;
            // Long steps. CUDA, eleven rows: through cuBLAS, the weight widened to bf16 rows (the
            // -exact targets: the mat-vec, 8 rows and then 3). Vulkan, 40: the tiled shader.
            const int TL = cuda ? 11 : 40;
            auto xl = randn(size_t(TL * K), 13);
            Graph gl;
            finish(gl, gl.add(Op::MatMul, gl.activation("y", N),
                              {input(gl, xl, TL, K, "x"), gl.weight("w", w)}));
            std::vector<double> want_l(size_t(TL * N));
            std::vector<int32_t> toks_l;
            for (int t = 0; t < TL; ++t) {
              toks_l.push_back(t);
              for (int64_t n = 0; n < N; ++n)
                for (int64_t k = 0; k < K; ++k)
                  want_l[size_t(t * N + n)] += double(xl[size_t(t * K + k)]) * wd(n, k);
            }
            const bool exact = !cuda || target.find("exact") != std::string::npos;
            CHECK(nerr(h.run(gl, toks_l), want_l) < (exact ? 1e-6 : 1e-2));
            if (target != "cuda-emu" || kind == 5) continue;
            // Without cuBLAS, int8 on: the int8 mat-vec over all eleven rows (8, then 3).
            Harness hi8("cuda-emu-i8", 2);
            CHECK(nerr(hi8.run(gl, toks_l), product_i8(xl, TL)) < 1e-5);
          }
  }

  TEST_CASE(
      "INT4 and INT8 weights as 16-row panels: a tied table's rows and logits, short and long") {
    // With weight copies, Q4 (with or without a codebook) and Q8 matrices of whole 16-row groups
    // are placed as panels (q4_panel.h, q8_panel.h) where the kernel table reads them (x86), and a
    // tied table is read from the head's panel: logits of embedded rows, x = table[id], y = x W^T,
    // against float64 (each row's activations rounded to int8 as the kernels do). 3 and 40 tokens:
    // decode and the int8 GEMM. 52 rows are not whole groups: that matrix must not be read as
    // panels (its copy is the rows as they are), and a tied table neither.
    const int64_t K = 256;
    const int8_t cb[16] = {-127, -90, -66, -46, -31, -19, -10, -4, 0, 5, 12, 22, 35, 52, 75, 127};
    for (const int variant : {4, 8, 0})  // 0: Q4 with a codebook
      for (const int64_t N : {int64_t(48), int64_t(52)}) {
        const int bits = variant ? variant : 4;
        const int8_t* codebook = variant ? nullptr : cb;
        const int group = 64;
        std::mt19937 rng(7);
        std::vector<int8_t> q(size_t(N * K));
        for (auto& c : q) c = int8_t(bits == 4 ? int(rng() % 16) - 8 : int(rng() % 255) - 127);
        std::vector<uint16_t> scales(size_t(N * K / group));
        std::vector<double> sd(scales.size());
        for (size_t i = 0; i < scales.size(); ++i) {
          scales[i] = f32_to_bf16(0.01f + 0.05f * float(rng() % 1000) / 1000.f * (i % 3 ? 1 : -1));
          sd[i] = bf16_to_f32(scales[i]);
        }
        const std::vector<uint8_t> codes = test::pack_codes(bits, q.data(), N, K);
        const Tensor w =
            test::quantized_view(bits, N, K, codes, scales, DType::BF16, group, codebook);
        auto wd = [&](int64_t n, int64_t k) {
          const int c = q[size_t(n * K + k)];
          return double(codebook ? codebook[c + 8] : c) * sd[size_t(n * (K / group) + k / group)];
        };
        for (int T : {3, 40}) {
          std::vector<int32_t> ids;
          for (int t = 0; t < T; ++t) ids.push_back(int32_t((t * 7 + 5) % N));
          Graph g;
          const int table = g.weight("table", w);
          const int e = g.add(Op::Embed, g.activation("e", K), {table});
          finish(g, g.add(Op::MatMul, g.activation("y", N), {e, g.weight("head", w)}));
          std::vector<double> want(size_t(T * N));
          for (int t = 0; t < T; ++t) {
            std::vector<float> row(static_cast<size_t>(K));
            for (int64_t k = 0; k < K; ++k) row[size_t(k)] = float(wd(ids[size_t(t)], k));
            const std::vector<double> xq = int8_blocks(row.data(), K);
            for (int64_t n = 0; n < N; ++n)
              for (int64_t k = 0; k < K; ++k) want[size_t(t * N + n)] += xq[size_t(k)] * wd(n, k);
          }
          for (const auto& isa : isas_here())
            for (int threads : {1, 2}) {
              if (isa == "scalar") continue;  // f32 products, not int8 ones
              CAPTURE(variant);
              CAPTURE(N);
              CAPTURE(T);
              CAPTURE(isa);
              CAPTURE(threads);
              BackendOptions o;
              o.threads = threads;
              o.cpu.isa = isa;
              o.cpu.weight_copies = std::make_shared<WeightStore>();
              Harness h(isa, threads);
              h.be = create_backend("cpu", o);
              h.alloc({1, 1, 2}, 64);
              CHECK(nerr(h.run(g, ids), want) < 1e-5);
            }
        }
      }
  }

  TEST_CASE("weights and logits past one binding's range run in parts (Vulkan)") {
    if (!test::vulkan_device_here()) return;
    // W [300, 128] F32 is 150 KiB: three parts of 128 rows under an 80 KiB binding; 130 rows of
    // 300 logits are 152 KiB: parts of whole rows too.
    const int64_t N = 300, K = 128;
    const int T = 130;
    auto x = randn(size_t(T * K), 13);
    auto w = randn(size_t(N * K), 14, 0.1f);
    std::vector<int32_t> toks(static_cast<size_t>(T)), ids(static_cast<size_t>(T));
    for (int t = 0; t < T; ++t) toks[size_t(t)] = t, ids[size_t(t)] = int32_t((t * 37) % N);
    // x -> the output rows -> x W^T as the logits, as a model's LM head reads them.
    Graph g;
    int xi = input(g, x, T, K, "x");
    int sel = g.add(Op::GatherRows, g.activation("sel", K, Rows::Outputs), {xi});
    g.output = g.add(Op::MatMul, g.activation("logits", N, Rows::Outputs),
                     {sel, g.weight("w", view(DType::F32, {N, K}, w.data()))});
    Graph ge;
    finish(ge, ge.add(Op::Embed, ge.activation("e", K),
                      {ge.weight("table", view(DType::F32, {N, K}, w.data()))}));
    std::vector<double> want(size_t(T * N)), want_e(size_t(T * K));
    for (int t = 0; t < T; ++t) {
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += double(x[size_t(t * K + k)]) * w[size_t(n * K + k)];
        want[size_t(t * N + n)] = s;
      }
      for (int64_t k = 0; k < K; ++k) want_e[size_t(t * K + k)] = w[size_t(ids[size_t(t)] * K + k)];
    }
    Harness h("vulkan-small", 1, {1, 1, 2}, 256);
#ifdef HEARTH_HAVE_VULKAN
    // 3 weight parts x at least 2 row parts (at most 68 rows of 300 logits fit 80 KiB).
    CHECK(vulkan::count_dispatches(*h.be->compile(g, T, T), vulkan::Kernel::MatMulRows) >= 6);
    CHECK(vulkan::count_dispatches(*h.be->compile(ge, T, T), vulkan::Kernel::Embed) == 3);
#endif
    const auto whole = h.run(g, toks);
    CHECK(nerr(whole, want) < 1e-6);
    CHECK(nerr(h.run(ge, ids), want_e) == 0);
    // The top-k of logits in parts: each part's entries land at its own rows.
    std::vector<int32_t> ks(static_cast<size_t>(T));
    for (int t = 0; t < T; ++t) ks[size_t(t)] = 1 + t % 9;
    CHECK(check_top_k(whole, h.run(g, toks, 0, &ks), ks, N) == T);

    check_quantized_head_in_parts(x, toks);
  }

  TEST_CASE("top-k readback: every logit at or above the k-th kept bit for bit, ties included") {
    // Rows of crafted logits (ties at the k-th, NaN, -inf, -0 beside +0, more ties than the GPU
    // entries hold) pass through an embedding unchanged; a backend may write -inf only below
    // the k-th largest (NaN ranked as -inf), as StepInputs::top_k allows.
    const int64_t V = 1000;
    const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
    std::vector<std::vector<float>> rows;
    std::vector<int32_t> ks;
    auto add = [&](std::vector<float> r, int k) { rows.push_back(std::move(r)), ks.push_back(k); };
    for (int rep = 0; rep < 2; ++rep) {
      add(randn(size_t(V), 10 + rep), 20);  // distinct values
      std::vector<float> tied(size_t(V), -3.f);
      for (int i = 0; i < 10; ++i) tied[size_t(97 * i % V)] = 1.f;  // 3 above, 10 tied at the 5th
      for (int i = 0; i < 3; ++i) tied[size_t(500 + i)] = 2.f;
      add(tied, 5);
      std::vector<float> odd = randn(size_t(V), 20 + rep);
      odd[3] = nan, odd[4] = inf, odd[5] = -inf, odd[6] = nan;
      add(odd, 1);  // +inf alone
      add(odd, 12);
      std::vector<float> zeros(size_t(V), -1.f);
      for (int i = 0; i < 5; ++i) zeros[size_t(i * 31)] = 0.5f;
      for (int i = 0; i < 6; ++i) zeros[size_t(i * 37 + 1)] = (i % 2) ? -0.f : 0.f;
      add(zeros, 7);  // -0 ties +0 at the k-th
      std::vector<float> dup_max(size_t(V), 0.f);
      dup_max[7] = dup_max[900] = 4.f;
      add(dup_max, 1);  // two tied maxima
      std::vector<float> cap(size_t(V), -2.f);
      for (int i = 0; i < 256; ++i) cap[size_t(i * 3)] = 1.f;
      add(cap, 10);  // ties fill the entries exactly
      cap[999] = 1.f;
      add(cap, 10);  // one tie too many: read whole
      std::vector<float> few(size_t(V), -inf);
      few[10] = 1.f, few[20] = nan;
      add(few, 5);                           // the k-th is -inf: all tie
      add(randn(size_t(V), 30 + rep), 0);    // no top-k
      add(randn(size_t(V), 40 + rep), 300);  // k past what the GPU serves
      add(randn(size_t(V), 50 + rep), int(V));
    }
    // The crafted values rounded to BF16 first, so that a BF16 embedding passes them on exactly.
    const int T = int(rows.size());
    std::vector<uint16_t> table;
    for (auto& r : rows)
      for (float& v : r) table.push_back(f32_to_bf16(v)), v = bf16_to_f32(table.back());
    Graph g;
    int w = g.weight("x", view(DType::BF16, {T, V}, table.data()));
    finish(g, g.add(Op::Embed, g.activation("x", V), {w}));
    std::vector<int32_t> toks(static_cast<size_t>(T));
    for (int t = 0; t < T; ++t) toks[size_t(t)] = t;
    std::vector<float> whole;
    for (const auto& r : rows) whole.insert(whole.end(), r.begin(), r.end());
    for (const auto& target : targets_here()) {
      CAPTURE(target);
      Harness h(target, 1, {1, 1, 2}, 64);
      const int cut_rows = check_top_k(whole, h.run(g, toks, 0, &ks), ks, V);
      // The GPU backends compute the top-k on the device: rows with k in 1..256 whose ties fit
      // come back cut: seven per repetition (the other five are read whole).
      if (target.rfind("vulkan", 0) == 0 || target.rfind("cuda", 0) == 0) CHECK(cut_rows == 14);
    }
  }

  TEST_CASE("rms_norm, head_rms_norm, silu_mul and add against float64") {
    const int T = 5, H = 48, hd = 16;
    auto x = randn(size_t(T * H), 3);
    auto y = randn(size_t(T * H), 4);
    auto w = randn(size_t(H), 5);
    std::vector<uint16_t> wb(w.size());
    for (size_t i = 0; i < w.size(); ++i) wb[i] = f32_to_bf16(w[i]), w[i] = bf16_to_f32(wb[i]);
    std::vector<int32_t> toks = {0, 1, 2, 3, 4};
    for (const auto& isa : targets_here()) {
      CAPTURE(isa);
      Harness h(isa, 2);
      {
        Graph g;
        int xi = input(g, x, T, H, "x");
        NodeParams p;
        p.eps = 1e-6f;
        finish(g, g.add(Op::RmsNorm, g.activation("n", H),
                        {xi, g.weight("w", view(DType::BF16, {H}, wb.data()))}, p));
        auto got = h.run(g, toks);
        std::vector<double> want(x.size());
        for (int t = 0; t < T; ++t) {
          double ss = 0;
          for (int i = 0; i < H; ++i) ss += double(x[size_t(t * H + i)]) * x[size_t(t * H + i)];
          double inv = 1 / std::sqrt(ss / H + 1e-6);
          for (int i = 0; i < H; ++i)
            want[size_t(t * H + i)] = x[size_t(t * H + i)] * inv * w[size_t(i)];
        }
        CHECK(nerr(got, want) < 1e-6);
      }
      {
        Graph g;
        int xi = input(g, x, T, H, "x");
        NodeParams p;
        p.eps = 1e-6f;
        p.n_heads = H / hd;
        p.head_dim = hd;
        finish(g, g.add(Op::HeadRmsNorm, g.activation("n", H),
                        {xi, g.weight("w", view(DType::BF16, {hd}, wb.data()))}, p));
        auto got = h.run(g, toks);
        std::vector<double> want(x.size());
        for (int r = 0; r < T * H / hd; ++r) {
          double ss = 0;
          for (int i = 0; i < hd; ++i) ss += double(x[size_t(r * hd + i)]) * x[size_t(r * hd + i)];
          double inv = 1 / std::sqrt(ss / hd + 1e-6);
          for (int i = 0; i < hd; ++i)
            want[size_t(r * hd + i)] = x[size_t(r * hd + i)] * inv * w[size_t(i)];
        }
        CHECK(nerr(got, want) < 1e-6);
      }
      for (Op op : {Op::SiluMul, Op::Add}) {
        Graph g;
        int xi = input(g, x, T, H, "x");
        int yi = input(g, y, T, H, "y");
        finish(g, g.add(op, g.activation("o", H), {xi, yi}));
        auto got = h.run(g, toks);
        std::vector<double> want(x.size());
        for (size_t i = 0; i < x.size(); ++i) {
          double a = x[i], b = y[i];
          want[i] = op == Op::Add ? a + b : a / (1 + std::exp(-a)) * b;
        }
        CHECK(nerr(got, want) < 1e-6);
      }
    }
  }

  TEST_CASE("rope rotates half pairs at pos0 + t with the given theta") {
    const int T = 3, nh = 2, hd = 8, pos0 = 1000;
    const double theta = 10000.0;
    auto x = randn(size_t(T * nh * hd), 6);
    std::vector<int32_t> toks = {0, 1, 2};
    Graph g;
    int xi = input(g, x, T, nh * hd, "x");
    NodeParams p;
    p.n_heads = nh;
    p.head_dim = hd;
    p.rope_theta = theta;
    finish(g, g.add(Op::Rope, xi, {xi}, p));
    std::vector<double> want(x.size());
    for (int t = 0; t < T; ++t)
      for (int hh = 0; hh < nh; ++hh)
        for (int i = 0; i < hd / 2; ++i) {
          double a = (pos0 + t) * std::pow(theta, -2.0 * i / hd);
          size_t b = size_t((t * nh + hh) * hd);
          double x0 = x[b + size_t(i)], x1 = x[b + size_t(i + hd / 2)];
          want[b + size_t(i)] = x0 * std::cos(a) - x1 * std::sin(a);
          want[b + size_t(i + hd / 2)] = x1 * std::cos(a) + x0 * std::sin(a);
        }
    for (const std::string& target : {std::string(""), std::string("vulkan")}) {
      if (target == "vulkan" && !test::vulkan_device_here()) continue;
      CAPTURE(target);
      Harness h(target, 2, {1, 1, 2}, 2048);
      CHECK(nerr(h.run(g, toks, pos0), want) < 1e-6);
    }
  }

  TEST_CASE("causal GQA attention over the cache, across two steps") {
    // Longer steps: 40 and 300 rows go through the GPU backends' tiled prefill attention (a
    // ragged tile of eight rows for 300), the next 2 rows split their positions over 64 parts
    // (2 and 10 of 32 positions, the rest empty) and merge them.
    for (auto [T1, T2] : {std::pair{5, 3}, {40, 2}, {300, 2}})
      for (const auto& isa : targets_here())
        for (DType kvt : {DType::F32, DType::BF16}) {
          const int nh = 4, nkv = 2, hd = 16, T = T1 + T2;
          auto q = randn(size_t(T * nh * hd), 7);
          auto k = randn(size_t(T * nkv * hd), 8);
          auto v = randn(size_t(T * nkv * hd), 9);
          CAPTURE(isa);
          CAPTURE(T1);
          // The emulated CUDA kernels' parts are tested in test_cuda_kernels.cpp (this many
          // blocks of coroutines would take minutes).
          if (T1 > 40 && isa.rfind("cuda-emu", 0) == 0) continue;
          Graph g;
          int qi = input(g, q, T, nh * hd, "q");
          int ki = input(g, k, T, nkv * hd, "k");
          int vi = input(g, v, T, nkv * hd, "v");
          NodeParams p;
          p.n_heads = nh;
          p.n_kv_heads = nkv;
          p.head_dim = hd;
          p.layer = 0;
          finish(g, g.add(Op::Attention, g.activation("a", nh * hd), {qi, ki, vi}, p));
          Harness h(isa, 2, {1, nkv, hd}, T, kvt);
          std::vector<int32_t> s1, s2;
          for (int t = 0; t < T; ++t) (t < T1 ? s1 : s2).push_back(t);
          auto a1 = h.run(g, s1, 0);
          auto a2 = h.run(g, s2, T1);
          std::vector<float> got(a1);
          got.insert(got.end(), a2.begin(), a2.end());
          std::vector<double> want(size_t(T * nh * hd));
          auto kvq = [&](float f) {
            return kvt == DType::BF16 ? double(bf16_to_f32(f32_to_bf16(f))) : double(f);
          };
          for (int t = 0; t < T; ++t)
            for (int hh = 0; hh < nh; ++hh) {
              int kh = hh / (nh / nkv);
              std::vector<double> s(size_t(t + 1));
              double mx = -1e300, sum = 0;
              for (int p2 = 0; p2 <= t; ++p2) {
                double d = 0;
                for (int i = 0; i < hd; ++i)
                  d += double(q[size_t((t * nh + hh) * hd + i)]) *
                       kvq(k[size_t((p2 * nkv + kh) * hd + i)]);
                s[size_t(p2)] = d / std::sqrt(double(hd));
                mx = std::max(mx, s[size_t(p2)]);
              }
              for (auto& e : s) sum += (e = std::exp(e - mx));
              for (int i = 0; i < hd; ++i) {
                double acc = 0;
                for (int p2 = 0; p2 <= t; ++p2)
                  acc += s[size_t(p2)] / sum * kvq(v[size_t((p2 * nkv + kh) * hd + i)]);
                want[size_t((t * nh + hh) * hd + i)] = acc;
              }
            }
          CHECK(nerr(got, want) < 1e-5);
        }
  }

  TEST_CASE("moe: router top-k and weighted SwiGLU experts against float64") {
    for (const MoeShape sh : {MoeShape{1, 32, 16, 8, 2, true}, MoeShape{5, 64, 32, 6, 3, false},
                              MoeShape{17, 32, 48, 16, 4, true}})
      for (DType wt : {DType::F32, DType::F16, DType::BF16}) {
        const int T = sh.T, H = sh.H, mi = sh.mi, E = sh.E, K = sh.K;
        CAPTURE(T);
        CAPTURE(E);
        CAPTURE(K);
        CAPTURE(std::string(dtype_name(wt)));
        auto x = randn(size_t(T * H), 11);
        // Weights rounded to their type first, so the reference sees what the kernels read.
        std::vector<std::vector<float>> wf;
        std::vector<std::vector<uint16_t>> wh;
        auto make = [&](int64_t rows, int64_t cols, unsigned seed) {
          wf.push_back(randn(size_t(rows * cols), seed, 0.2f));
          wh.emplace_back(wf.back().size());
          for (size_t i = 0; i < wf.back().size(); ++i) {
            float& v = wf.back()[i];
            if (wt == DType::F16) wh.back()[i] = f32_to_f16(v), v = f16_to_f32(wh.back()[i]);
            if (wt == DType::BF16) wh.back()[i] = f32_to_bf16(v), v = bf16_to_f32(wh.back()[i]);
          }
        };
        wf.reserve(size_t(1 + 3 * E));
        wh.reserve(size_t(1 + 3 * E));
        make(E, H, 20);
        for (int e = 0; e < E; ++e) {
          make(mi, H, unsigned(30 + 3 * e));
          make(mi, H, unsigned(31 + 3 * e));
          make(H, mi, unsigned(32 + 3 * e));
        }
        auto data = [&](size_t i) {
          return wt == DType::F32 ? static_cast<const void*>(wf[i].data()) : wh[i].data();
        };
        Graph g;
        moe_graph(g, x, sh, view(wt, {E, H}, data(0)), [&](int e, int which) {
          return view(wt, which < 2 ? std::vector<int64_t>{mi, H} : std::vector<int64_t>{H, mi},
                      data(size_t(1 + 3 * e + which)));
        });

        double min_gap = 1e9;
        const std::vector<double> want = moe_reference(x, sh, wf, &min_gap);
        REQUIRE(min_gap > 1e-4);  // no near-ties: float32 routing must pick the same experts
        std::vector<int32_t> toks(static_cast<size_t>(T));
        for (int t = 0; t < T; ++t) toks[size_t(t)] = t;
        for (const auto& isa : isas_here())
          for (int threads : {1, 2}) {
            CAPTURE(isa);
            CAPTURE(threads);
            Harness h(isa, threads);
            CHECK(nerr(h.run(g, toks), want) < 1e-5);
          }
      }
  }

  TEST_CASE("moe: INT8 and INT4 experts against float64, one token and many, packed or not") {
    // Random codes and F16 group scales (quant/FORMAT.md, placed by tests/quant_placement.h),
    // the router in F32 as hearth quantize keeps it; the reference multiplies code x scale in
    // float64. The SIMD kernels round the activations to int8 per block of 32 (~0.5% each time),
    // a stale or foreign activation reused for another expert (reuse_x) errs by O(1). One token
    // over several experts per thread is the decode path that reuses them.
    for (const MoeShape sh : {MoeShape{1, 256, 128, 8, 3, true}, MoeShape{1, 128, 64, 6, 4, false},
                              MoeShape{6, 128, 96, 8, 2, true}})
      for (int bits : {8, 4}) {
        const int T = sh.T, H = sh.H, mi = sh.mi, E = sh.E;
        CAPTURE(T);
        CAPTURE(bits);
        auto x = randn(size_t(T * H), 13);
        std::vector<std::vector<float>> wf;  // the weights as the reference sees them
        std::vector<std::vector<uint8_t>> codes;
        std::vector<std::vector<uint16_t>> scales;
        wf.reserve(size_t(1 + 3 * E));
        codes.reserve(size_t(3 * E));
        scales.reserve(size_t(3 * E));
        std::mt19937 rng(unsigned(bits * 100 + T));
        auto make = [&](int64_t rows, int64_t cols) {
          std::vector<int8_t> q(size_t(rows * cols));
          for (auto& c : q) c = int8_t(int(rng() % (bits == 8 ? 255 : 16)) - (bits == 8 ? 127 : 8));
          scales.emplace_back(size_t(rows * cols / 32));
          wf.emplace_back(q.size());
          for (size_t i = 0; i < scales.back().size(); ++i) {
            const float f = (bits == 8 ? 0.0004f : 0.006f) * (1 + float(rng() % 1000) / 1000.f);
            scales.back()[i] = f32_to_f16(i % 3 ? f : -f);
          }
          for (size_t i = 0; i < q.size(); ++i)
            wf.back()[i] = float(q[i]) * f16_to_f32(scales.back()[i / 32]);  // exact in f32
          codes.push_back(test::pack_codes(bits, q.data(), rows, cols));
          return test::quantized_view(bits, rows, cols, codes.back(), scales.back(), DType::F16,
                                      32);
        };
        wf.push_back(randn(size_t(E * H), 21, 0.2f));
        Graph g;
        moe_graph(g, x, sh, view(DType::F32, {E, H}, wf[0].data()),
                  [&](int, int which) { return which < 2 ? make(mi, H) : make(H, mi); });
        double min_gap = 1e9;
        const std::vector<double> want = moe_reference(x, sh, wf, &min_gap);
        REQUIRE(min_gap > 1e-4);
        std::vector<int32_t> toks(static_cast<size_t>(T));
        for (int t = 0; t < T; ++t) toks[size_t(t)] = t;
        for (const auto& isa : isas_here())
          for (int threads : {1, 2})
            for (bool copies : {false, true}) {  // copies: the experts packed for decode
              CAPTURE(isa);
              CAPTURE(threads);
              CAPTURE(copies);
              Harness h(isa, threads);
              if (copies) {
                BackendOptions o;
                o.threads = threads;
                o.cpu.isa = isa;
                o.cpu.weight_copies = std::make_shared<WeightStore>();
                h.be = create_backend("cpu", o);
                h.alloc({1, 1, 2}, 64);
              }
              CHECK(nerr(h.run(g, toks), want) < (isa == "scalar" ? 1e-5 : 2e-2));
            }
      }
  }
}
