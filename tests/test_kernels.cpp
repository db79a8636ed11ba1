// The CPU kernels, each against an independent float64 computation, on every ISA this machine has
// (forcing the lower ones). The first half needs only the kernel table, so it also builds for
// aarch64 and runs under qemu (scripts/test-neon.sh, HEARTH_KERNELS_ONLY); the second half checks
// what the backend builds from the kernels: fusion, the greedy argmax, the GEMM libraries.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_features.h"
#include "backends/cpu/kernels.h"

using namespace hearth;
using namespace hearth::cpu;

namespace {

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

std::vector<Isa> isas_here() {
  const Isa best = detect_cpu_features().best();
  std::vector<Isa> v = {Isa::Scalar};
  if (best == Isa::Avx2 || best == Isa::Avx512) v.push_back(Isa::Avx2);
  if (best == Isa::Avx512) v.push_back(Isa::Avx512);
  if (best == Isa::Neon) v.push_back(Isa::Neon);
  return v;
}

// ||got - want|| / ||want||, with float64 references.
double nerr(const float* got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// Values stored as `t` (F32 as is), and their exact f32 meaning.
struct Stored {
  std::vector<float> f;  // the exact values the kernel sees
  std::vector<uint16_t> h;
  const void* data(DType t) const {
    return t == DType::F32 ? static_cast<const void*>(f.data()) : h.data();
  }
};
Stored store(DType t, std::vector<float> v) {
  Stored s;
  s.h.resize(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::F16) s.h[i] = f32_to_f16(v[i]), v[i] = f16_to_f32(s.h[i]);
    if (t == DType::BF16) s.h[i] = f32_to_bf16(v[i]), v[i] = bf16_to_f32(s.h[i]);
  }
  s.f = std::move(v);
  return s;
}

}  // namespace

TEST_SUITE("kernels") {
  TEST_CASE("matmul: every type, ISA, row range and token count against float64") {
    for (Isa isa : isas_here()) {
      const KernelTable kt = make_kernel_table(isa);
      for (DType wt : {DType::F32, DType::F16, DType::BF16})
        for (int64_t K : {1, 15, 16, 17, 64, 100, 1024})
          for (int T : {1, 2, 3, 4, 5, 9}) {
            CAPTURE(isa_name(isa));
            CAPTURE(dtype_name(wt));
            CAPTURE(K);
            CAPTURE(T);
            const int64_t N = 37, r0 = 3, r1 = 35;  // odd range: blocks of 8, 4 and single rows
            const Stored w = store(wt, randn(size_t(N * K), 11, 0.1f));
            const int64_t ldx = K + 3, ldy = N + 5;  // strides wider than the rows
            const auto x = randn(size_t(T * ldx), 12);
            std::vector<float> y(size_t(T * ldy), NAN);
            std::vector<float> scratch(size_t(K * T) + 16);
            MatmulArgs a{w.data(wt),   K,   x.data(), ldx, T,
                         y.data() + 2, ldy, r0,       r1,  scratch.data()};
            kt.matmul[type_slot(wt)](a);
            std::vector<double> want;
            std::vector<float> got;
            for (int t = 0; t < T; ++t)
              for (int64_t r = r0; r < r1; ++r) {
                double s = 0;
                for (int64_t k = 0; k < K; ++k)
                  s += double(x[size_t(t * ldx + k)]) * w.f[size_t(r * K + k)];
                want.push_back(s);
                got.push_back(y[size_t(t * ldy + 2 + (r - r0))]);
              }
            CHECK(nerr(got.data(), want) < 1e-6);
            // Nothing outside [r0, r1) is written.
            for (int t = 0; t < T; ++t) {
              CHECK(std::isnan(y[size_t(t * ldy + 1)]));
              CHECK(std::isnan(y[size_t(t * ldy + 2 + (r1 - r0))]));
            }
          }
    }
  }

  TEST_CASE("attention: causal GQA over the cache, tiles and row blocks, every KV type") {
    for (Isa isa : isas_here()) {
      const KernelTable kt = make_kernel_table(isa);
      for (DType kvt : {DType::F32, DType::F16, DType::BF16})
        for (int hd : {16, 24, 32, 128})
          for (int group : {1, 2, 5})
            for (auto [n_tok, pos0] : {std::pair{1, 0}, {1, 130}, {7, 3}, {40, 100}}) {
              CAPTURE(isa_name(isa));
              CAPTURE(dtype_name(kvt));
              CAPTURE(hd);
              CAPTURE(group);
              CAPTURE(n_tok);
              CAPTURE(pos0);
              const int cap = pos0 + n_tok + 3;
              const Stored k = store(kvt, randn(size_t(cap * hd), 21));
              const Stored v = store(kvt, randn(size_t(cap * hd), 22));
              const int64_t q_stride = int64_t(group) * hd + 8;
              const auto q = randn(size_t(n_tok * q_stride), 23, 0.5f);
              std::vector<float> out(size_t(n_tok * q_stride), NAN);
              std::vector<float> scratch(size_t(attention_scratch_floats(hd)));
              AttentionArgs a{q.data(),
                              q_stride,
                              out.data(),
                              q_stride,
                              n_tok,
                              group,
                              pos0,
                              k.data(kvt),
                              v.data(kvt),
                              hd,
                              1.f / std::sqrt(float(hd)),
                              scratch.data()};
              kt.attention[type_slot(kvt)](a);
              std::vector<double> want;
              std::vector<float> got;
              for (int t = 0; t < n_tok; ++t)
                for (int j = 0; j < group; ++j) {
                  const float* qr = q.data() + t * q_stride + j * hd;
                  const int n = pos0 + t + 1;
                  std::vector<double> s(static_cast<size_t>(n));
                  double mx = -1e300, sum = 0;
                  for (int p = 0; p < n; ++p) {
                    double d = 0;
                    for (int i = 0; i < hd; ++i) d += double(qr[i]) * k.f[size_t(p * hd + i)];
                    s[size_t(p)] = d / std::sqrt(double(hd));
                    mx = std::max(mx, s[size_t(p)]);
                  }
                  for (auto& e : s) sum += (e = std::exp(e - mx));
                  for (int i = 0; i < hd; ++i) {
                    double acc = 0;
                    for (int p = 0; p < n; ++p) acc += s[size_t(p)] / sum * v.f[size_t(p * hd + i)];
                    want.push_back(acc);
                    got.push_back(out[size_t(t * q_stride + j * hd + i)]);
                  }
                }
              CHECK(nerr(got.data(), want) < 1e-5);
            }
    }
  }

  TEST_CASE("attention over position ranges merges to the whole") {
    const int hd = 128, group = 2, n_pos = 300;
    for (Isa isa : isas_here())
      for (DType kvt : {DType::F32, DType::BF16}) {
        CAPTURE(isa_name(isa));
        CAPTURE(dtype_name(kvt));
        const KernelTable kt = make_kernel_table(isa);
        const Stored k = store(kvt, randn(size_t(n_pos * hd), 61));
        const Stored v = store(kvt, randn(size_t(n_pos * hd), 62));
        const auto q = randn(size_t(group * hd), 63);
        std::vector<float> scratch(size_t(attention_scratch_floats(hd)));
        AttentionArgs a{q.data(),
                        group * hd,
                        nullptr,
                        group * hd,
                        1,
                        group,
                        n_pos - 1,
                        k.data(kvt),
                        v.data(kvt),
                        hd,
                        1.f / std::sqrt(float(hd)),
                        scratch.data()};
        std::vector<float> whole(size_t(group * hd));
        a.out = whole.data();
        kt.attention[type_slot(kvt)](a);
        // Three ranges, one of them not tile-aligned, merged by their {max, sum} statistics.
        const int cuts[] = {0, 70, 200, n_pos};
        std::vector<float> merged(size_t(group * hd), 0.f), part(size_t(group * hd));
        std::vector<float> m(static_cast<size_t>(group), -INFINITY),
            l(static_cast<size_t>(group), 0.f);
        std::vector<float> ml(size_t(2 * group));
        for (int p = 0; p < 3; ++p) {
          a.out = part.data();
          a.kv_begin = cuts[p];
          a.kv_end = cuts[p + 1];
          a.ml = ml.data();
          kt.attention[type_slot(kvt)](a);
          for (int j = 0; j < group; ++j) {
            const float mn = std::max(m[size_t(j)], ml[size_t(2 * j)]);
            const float wa = std::exp(m[size_t(j)] - mn), wb = std::exp(ml[size_t(2 * j)] - mn);
            l[size_t(j)] = l[size_t(j)] * wa + ml[size_t(2 * j + 1)] * wb;
            for (int d = 0; d < hd; ++d) {
              float& o = merged[size_t(j * hd + d)];
              o = o * wa + part[size_t(j * hd + d)] * wb;
            }
            m[size_t(j)] = mn;
          }
        }
        std::vector<double> want(whole.begin(), whole.end());
        for (int j = 0; j < group; ++j)
          for (int d = 0; d < hd; ++d) merged[size_t(j * hd + d)] /= l[size_t(j)];
        CHECK(nerr(merged.data(), want) < 1e-6);
      }
  }

  TEST_CASE("silu_mul, to_bf16 and read_sum against float64") {
    std::vector<float> a = randn(1000, 31, 4.f), b = randn(1000, 32);
    a[3] = -100.f, a[4] = 100.f, a[5] = -87.5f, a[6] = 88.5f, a[7] = 0.f;  // exp's clamps
    for (Isa isa : isas_here()) {
      const KernelTable kt = make_kernel_table(isa);
      CAPTURE(isa_name(isa));
      for (int64_t n : {1, 7, 16, 33, 1000}) {
        std::vector<float> out(static_cast<size_t>(n));
        kt.silu_mul(a.data(), b.data(), out.data(), n);
        std::vector<double> want(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i)
          want[size_t(i)] =
              double(a[size_t(i)]) / (1 + std::exp(-double(a[size_t(i)]))) * b[size_t(i)];
        CHECK(nerr(out.data(), want) < 1e-6);
        std::vector<uint16_t> h(static_cast<size_t>(n));
        kt.to_bf16(a.data(), h.data(), n);
        for (int64_t i = 0; i < n; ++i) CHECK(h[size_t(i)] == f32_to_bf16(a[size_t(i)]));
      }
      std::vector<float> big(4096 + 64);
      float* x = big.data() + (16 - (reinterpret_cast<uintptr_t>(big.data()) / 4) % 16) % 16;
      double want = 0;
      for (int i = 0; i < 4096; ++i) want += (x[i] = float(i % 17) - 8.f);
      CHECK(std::fabs(kt.read_sum(x, 4096) - want) < 1e-3);
      double flops = 0;
      CHECK(std::isfinite(kt.fma_loop(1000, &flops)));
      CHECK(flops > 0);
    }
  }

  TEST_CASE("rms_norm and widen against float64") {
    for (Isa isa : isas_here()) {
      const KernelTable kt = make_kernel_table(isa);
      CAPTURE(isa_name(isa));
      for (int64_t n : {1, 16, 37, 128, 4096}) {
        CAPTURE(n);
        const auto x = randn(size_t(n), 33, 3.f);
        const auto w = randn(size_t(n), 34);
        std::vector<float> out(static_cast<size_t>(n));
        kt.rms_norm(x.data(), w.data(), n, 1e-6f, out.data());
        double ss = 0;
        for (float v : x) ss += double(v) * v;
        const double inv = 1 / std::sqrt(ss / double(n) + 1e-6);
        std::vector<double> want(static_cast<size_t>(n));
        for (size_t i = 0; i < want.size(); ++i) want[i] = x[i] * inv * w[i];
        CHECK(nerr(out.data(), want) < 1e-6);
        std::vector<float> inplace = x;
        kt.rms_norm(inplace.data(), w.data(), n, 1e-6f, inplace.data());
        CHECK(inplace == out);
        for (DType t : {DType::F32, DType::F16, DType::BF16}) {
          const Stored s = store(t, x);
          std::vector<float> wide(static_cast<size_t>(n) + 1, 7.f);
          kt.widen[type_slot(t)](s.data(t), wide.data(), n);
          CHECK(std::equal(s.f.begin(), s.f.end(), wide.begin()));
          CHECK(wide.back() == 7.f);
        }
      }
    }
  }

  TEST_CASE("bf16 rounding of specials") {
    const float specials[] = {0.f,
                              -0.f,
                              1.f,
                              -2.5f,
                              65504.f,
                              3.4e38f,
                              -3.4e38f,
                              std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(),
                              1.00390625f,
                              1.01171875f};
    for (Isa isa : isas_here()) {
      const KernelTable kt = make_kernel_table(isa);
      CAPTURE(isa_name(isa));
      const int n = int(sizeof specials / sizeof specials[0]);
      std::vector<uint16_t> h(static_cast<size_t>(n));
      kt.to_bf16(specials, h.data(), n);
      for (int i = 0; i < n; ++i) CHECK(h[size_t(i)] == f32_to_bf16(specials[i]));
      const float nan = std::numeric_limits<float>::quiet_NaN();
      uint16_t hn = 0;
      kt.to_bf16(&nan, &hn, 1);
      CHECK(std::isnan(bf16_to_f32(hn)));
    }
  }
}

#ifndef HEARTH_KERNELS_ONLY
#include <simdjson.h>

#include <fstream>

#include "backends/cpu/cpu_backend.h"
#include "core/backend.h"
#include "core/runner.h"
#include "core/session.h"
#include "models/qwen3_model.h"

namespace {

Tensor view(DType t, std::vector<int64_t> shape, const void* data) {
  Tensor x;
  x.dtype = t;
  x.ndim = int(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) x.shape[i] = shape[i];
  x.data = data;
  x.nbytes = size_t(x.numel()) * dtype_size(t);
  return x;
}

std::unique_ptr<Backend> backend(const std::string& isa, int threads, const std::string& gemm = "",
                                 int gemm_min_tokens = 0) {
  BackendOptions o;
  o.isa = isa;
  o.threads = threads;
  o.gemm = gemm;
  o.gemm_min_tokens = gemm_min_tokens;
  return create_backend("cpu", o);
}

// Runs graph g (output rows = all T step rows) and returns the output, or the argmax per row.
std::vector<float> run(Backend& be, const Graph& g, int T, std::vector<int32_t>* argmax = nullptr) {
  auto cg = be.compile(g, T, T);
  auto kv = be.alloc_kv({1, 1, 16}, T);
  std::vector<int32_t> tokens(static_cast<size_t>(T)), rows(static_cast<size_t>(T));
  for (int i = 0; i < T; ++i) tokens[size_t(i)] = rows[size_t(i)] = i;
  std::vector<float> out(size_t(T) * size_t(g.tensor(g.output).cols));
  StepInputs in;
  in.tokens = tokens.data();
  in.n_tokens = T;
  in.out_rows = rows.data();
  in.n_out = T;
  in.kv = kv.get();
  in.logits = out.data();
  if (argmax) {
    argmax->assign(size_t(T), -2);
    in.argmax = argmax->data();
    in.logits = nullptr;
  }
  be.run(*cg, in);
  return out;
}

std::string fixture(const char* name) {
  return std::string(HEARTH_SHARED_DIR) + "/fixtures/models/" + name;
}

}  // namespace

TEST_SUITE("kernels") {
  TEST_CASE("the planner fuses a Qwen3 layer into five steps") {
    auto model = Qwen3Model::load(fixture("tiny-tied-bf16"));
    auto be = backend("", 1);
    auto cg = be->compile(model->graph(), 1, 1);
    const std::string layer =
        "linear[norm](layers.0.q_proj.weight,layers.0.k_proj.weight,layers.0.v_proj.weight)\n"
        "attention[qk_norm][rope]\n"
        "linear(layers.0.o_proj.weight)+residual\n"
        "linear[norm](layers.0.gate_proj.weight,layers.0.up_proj.weight)+silu_mul\n"
        "linear(layers.0.down_proj.weight)+residual\n";
    const std::string plan = cpu::describe_compiled(*cg);
    CHECK(plan.rfind("embed\n" + layer, 0) == 0);
    CHECK(plan.find("gather_rows\nlinear[norm](lm_head.weight)->logits\n") != std::string::npos);
    size_t lines = 0;
    for (char ch : plan) lines += ch == '\n';
    CHECK(lines == 1 + 5 * size_t(model->config().num_hidden_layers) + 2);
    CHECK(cg->argmax_fused);
  }

  TEST_CASE("fused argmax: first index of the maximum, across threads, NaN ignored") {
    // An LM head whose rows repeat, so the maximum occurs several times, in both threads' halves.
    const int64_t N = 200, K = 8;
    auto base = randn(size_t(10 * K), 41);
    std::vector<float> w(size_t(N * K));
    for (int64_t r = 0; r < N; ++r)
      for (int64_t k = 0; k < K; ++k) w[size_t(r * K + k)] = base[size_t((r % 10) * K + k)];
    auto x = randn(size_t(3 * K), 42);
    for (int64_t k = 0; k < K; ++k) x[size_t(2 * K + k)] = NAN;  // row 2: every logit NaN
    Graph g;
    int xi =
        g.add(Op::Embed, g.activation("x", K), {g.weight("x", view(DType::F32, {3, K}, x.data()))});
    g.output = g.add(Op::MatMul, g.activation("logits", N, Rows::Outputs),
                     {xi, g.weight("lm_head", view(DType::F32, {N, K}, w.data()))});
    for (const std::string isa : {"scalar", ""})
      for (int threads : {1, 2}) {
        CAPTURE(isa);
        CAPTURE(threads);
        auto be = backend(isa, threads);
        const auto logits = run(*be, g, 3);
        std::vector<int32_t> arg;
        run(*be, g, 3, &arg);
        for (int t = 0; t < 2; ++t) {
          int32_t want = 0;
          for (int64_t r = 1; r < N; ++r)
            if (logits[size_t(t * N + r)] > logits[size_t(t * N + want)]) want = int32_t(r);
          CHECK(want < 10);
          CHECK(arg[size_t(t)] == want);
        }
        CHECK(arg[2] == -1);
      }
  }

  TEST_CASE("greedy decoding through the fused argmax equals sampling the full logits") {
    auto model = Qwen3Model::load(fixture("tiny-untied-sharded-f32"));
    const auto& c = model->config();
    for (int threads : {1, 2}) {
      Runner r(backend("", threads), model->graph(), c.vocab_size, c.max_position_embeddings);
      const std::vector<int32_t> ids = {151644, 872, 198, 9707, 11, 1879};
      auto kv = r.new_kv(16);
      std::vector<float> logits(size_t(c.vocab_size));
      r.forward(*kv, ids.data(), int(ids.size()), 0, nullptr, logits.data());
      int32_t want = 0;
      for (int i = 1; i < c.vocab_size; ++i)
        if (logits[size_t(i)] > logits[size_t(want)]) want = i;
      auto kv2 = r.new_kv(16);
      CHECK(r.forward_argmax(*kv2, ids.data(), int(ids.size()), 0) == want);
    }
  }

  TEST_CASE("every GEMM path reproduces the float64 fixture logits through the whole model") {
    const std::string dir = fixture("tiny-tied-bf16");
    auto model = Qwen3Model::load(dir);
    const auto& c = model->config();
    // The fixture's longest sequence, with its float64 reference logits.
    simdjson::dom::parser parser;
    simdjson::dom::element seq = parser.load(dir + "/expected.json")["sequences"].at(2);
    std::vector<int32_t> ids;
    for (int64_t v : seq["input_ids"].get_array()) ids.push_back(int32_t(v));
    std::ifstream f(dir + "/" + std::string(std::string_view(seq["logits_file"])),
                    std::ios::binary);
    std::vector<float> want(ids.size() * size_t(c.vocab_size));
    f.read(reinterpret_cast<char*>(want.data()), std::streamsize(want.size() * 4));
    REQUIRE(f.good());
    std::vector<std::string> gemms = {"native"};
#if defined(HEARTH_HAVE_DNNL)
    gemms.push_back("dnnl");
#endif
#if defined(HEARTH_HAVE_OPENBLAS)
    gemms.push_back("openblas");
#endif
    for (const auto& gemm : gemms) {
      CAPTURE(gemm);
      // Every step of two or more tokens goes through the GEMM.
      Runner r(backend("", 2, gemm, 2), model->graph(), c.vocab_size, c.max_position_embeddings);
      auto kv = r.new_kv(int(ids.size()));
      std::vector<float> got(want.size());
      r.forward(*kv, ids.data(), int(ids.size()), 0, got.data(), nullptr);
      size_t bad = 0;
      for (size_t i = 0; i < got.size(); ++i)
        bad += !(std::fabs(got[i] - want[i]) <= 1e-4 + 1e-4 * std::fabs(want[i]));
      CHECK(bad == 0);
    }
  }

  TEST_CASE("decode attention split over positions equals one thread per head") {
    // Two KV heads and four threads: at 600 positions each head is split in two ranges.
    auto model = Qwen3Model::load(fixture("tiny-untied-sharded-f32"));
    const auto& c = model->config();
    std::vector<int32_t> ids(600);
    std::mt19937 g(7);
    for (auto& t : ids) t = int32_t(g() % 150000);
    std::vector<std::vector<float>> logits;
    for (int threads : {1, 4}) {
      Runner r(backend("", threads), model->graph(), c.vocab_size, c.max_position_embeddings);
      auto kv = r.new_kv(int(ids.size()));
      std::vector<float> out(size_t(c.vocab_size));
      r.forward(*kv, ids.data(), int(ids.size()) - 1, 0, nullptr, out.data());
      r.forward(*kv, ids.data() + ids.size() - 1, 1, int(ids.size()) - 1, nullptr, out.data());
      logits.push_back(out);
    }
    size_t bad = 0;
    for (size_t i = 0; i < logits[0].size(); ++i)
      bad += !(std::fabs(logits[1][i] - logits[0][i]) <= 1e-5 + 1e-5 * std::fabs(logits[0][i]));
    CHECK(bad == 0);
  }

  TEST_CASE("GEMM libraries match the native kernels on long steps") {
    const int T = 40;
    const int64_t N = 300, K = 96;
    auto x = randn(size_t(T * K), 51);
    for (DType wt : {DType::F32, DType::BF16}) {
      const Stored w = store(wt, randn(size_t(N * K), 52, 0.1f));
      Graph g;
      int xi = g.add(Op::Embed, g.activation("x", K),
                     {g.weight("x", view(DType::F32, {T, K}, x.data()))});
      int y = g.add(Op::MatMul, g.activation("y", N),
                    {xi, g.weight("w", view(wt, {N, K}, w.data(wt)))});
      g.output = g.add(Op::GatherRows, g.activation("out", N, Rows::Outputs), {y});
      std::vector<double> want;
      for (int t = 0; t < T; ++t)
        for (int64_t n = 0; n < N; ++n) {
          double s = 0;
          for (int64_t k = 0; k < K; ++k)
            s += double(x[size_t(t * K + k)]) * w.f[size_t(n * K + k)];
          want.push_back(s);
        }
      std::vector<std::string> gemms = {"native"};
#if defined(HEARTH_HAVE_DNNL)
      gemms.push_back("dnnl");
      if (detect_cpu_features().best() == Isa::Avx512) gemms.push_back("dnnl-bf16");
#endif
#if defined(HEARTH_HAVE_OPENBLAS)
      gemms.push_back("openblas");
#endif
      for (const auto& gemm : gemms)
        for (int threads : {1, 2}) {
          CAPTURE(dtype_name(wt));
          CAPTURE(gemm);
          CAPTURE(threads);
          auto be = backend("", threads, gemm, 2);
          CHECK(static_cast<cpu::CpuBackend&>(*be).gemm_kind() == cpu::choose_gemm(gemm));
          const auto got = run(*be, g, T);
          // bf16 inputs keep 8 bits: about 2^-9 relative per product, averaging out over K.
          CHECK(nerr(got.data(), want) < (gemm == "dnnl-bf16" && wt == DType::BF16 ? 1e-2 : 1e-6));
        }
    }
  }
}
#endif
