// Quantization: the Q8/Q4 layout against an independent scalar quantizer, every ISA's kernels
// against dequantize-then-multiply in double, and whole checkpoints: quantize, load, generate,
// determinism, strict refusal of corrupted files, eval, calibration.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/q8_panel.h"
#include "core/error.h"
#include "core/quant_format.h"
#include "core/session.h"
#include "core/weight_store.h"
#include "models/quant_config.h"
#include "models/qwen3_model.h"
#include "models/safetensors.h"
#include "models/safetensors_writer.h"
#include "models/standin.h"
#include "quant/eval.h"
#include "quant/quantize.h"
#include "quant/quantizer.h"
#include "tests/quant_placement.h"
#include "tests/random_data.h"

namespace fs = std::filesystem;
using namespace hearth;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    static std::atomic<int> counter{0};
    path = fs::temp_directory_path() /
           ("hearth_quant_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string str(const std::string& sub = "") const { return (path / sub).string(); }
};

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  REQUIRE_MESSAGE(f.good(), "cannot read ", p.string());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void spit(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
}

using test::randn;

std::vector<std::string> isas_here() {
  std::vector<std::string> v = {"scalar"};
  auto best = cpu::detect_cpu_features().best();
  if (best == cpu::Isa::Avx2 || best == cpu::Isa::Avx512) v.push_back("avx2");
  if (best == cpu::Isa::Avx512) v.push_back("avx512");
  return v;
}

#define CHECK_THROWS_CONTAINING(expr, needle)      \
  do {                                             \
    std::string msg_;                              \
    try {                                          \
      expr;                                        \
    } catch (const std::exception& e) {            \
      msg_ = e.what();                             \
    }                                              \
    CAPTURE(msg_);                                 \
    CHECK(msg_.find(needle) != std::string::npos); \
  } while (0)

// --- an independent reference quantizer, written from quant/FORMAT.md ----------------------------

uint16_t ref_f16(float f) {
  return f32_to_f16(f);
}
float ref_f16f(uint16_t h) {
  return f16_to_f32(h);
}

// Round to nearest: Q8 scale amax/127 symmetric; Q4 scale (signed max)/-8, codes clamped to
// [-8, 7]; codes rounded against the F16-rounded scale.
void ref_quantize(const std::vector<float>& w, int bits, int group, std::vector<int>& q,
                  std::vector<uint16_t>& s) {
  q.assign(w.size(), 0);
  s.assign(w.size() / size_t(group), 0);
  for (size_t g = 0; g < s.size(); ++g) {
    float amax = 0, m = 0;
    for (int i = 0; i < group; ++i) {
      const float v = w[g * size_t(group) + size_t(i)];
      if (std::fabs(v) > amax) amax = std::fabs(v), m = v;
    }
    s[g] = ref_f16(bits == 8 ? amax / 127.f : m / -8.f);
    const float d = ref_f16f(s[g]);
    for (int i = 0; i < group; ++i) {
      const size_t j = g * size_t(group) + size_t(i);
      int v = d == 0 ? 0 : int(std::nearbyint(w[j] / d));
      v = std::max(bits == 8 ? -127 : -8, std::min(bits == 8 ? 127 : 7, v));
      q[j] = v;
    }
  }
}

// A fixed non-uniform codebook for the tests: no zero level, asymmetric, denser near zero.
const int8_t kTestCodebook[16] = {-127, -96, -70, -50, -34, -21, -10, -3,
                                  3,    10,  21,  34,  50,  70,  96,  120};

// Codebook round to nearest, from FORMAT.md: scale (signed max) / level 0 (the level of largest
// magnitude here), F16-rounded; each weight takes the nearest level, the lower one on a tie.
// idx gets level indices (the nibble values).
void ref_quantize_cb(const std::vector<float>& w, int group, const int8_t* cb,
                     std::vector<int>& idx, std::vector<uint16_t>& s) {
  idx.assign(w.size(), 0);
  s.assign(w.size() / size_t(group), 0);
  for (size_t g = 0; g < s.size(); ++g) {
    float amax = 0, m = 0;
    for (int i = 0; i < group; ++i) {
      const float v = w[g * size_t(group) + size_t(i)];
      if (std::fabs(v) > amax) amax = std::fabs(v), m = v;
    }
    s[g] = ref_f16(m / float(cb[0]));
    const double d = ref_f16f(s[g]);
    for (int i = 0; i < group; ++i) {
      const size_t j = g * size_t(group) + size_t(i);
      const double v = d == 0 ? 0.0 : double(w[j]) / d;
      int best = 0;
      for (int k = 1; k < 16; ++k)
        if (std::fabs(v - cb[k]) < std::fabs(v - cb[best])) best = k;
      idx[j] = best;
    }
  }
}

// A Q8/Q4 weight built with the reference quantizer, plus its exact dequantized values; Q4 with
// a codebook when cb is set.
struct QWeight {
  int bits, group;
  int64_t rows, cols;
  std::vector<uint8_t> codes;
  std::vector<uint16_t> scales;
  std::vector<double> deq;  // [rows, cols]
  const int8_t* cb = nullptr;
  Tensor view() const {
    return test::quantized_view(bits, rows, cols, codes, scales, DType::F16, group, cb);
  }
};

QWeight make_qweight(int bits, int group, int64_t rows, int64_t cols, uint32_t seed,
                     const int8_t* cb = nullptr) {
  QWeight w{bits, group, rows, cols, {}, {}, {}, cb};
  const int64_t rb = bits == 8 ? cols : cols / 2;
  w.codes.assign(size_t(rows * rb), 0);
  w.deq.assign(size_t(rows * cols), 0);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> row = randn(size_t(cols), seed + uint32_t(r), 0.05f);
    row[size_t(r % cols)] *= 12.f;  // an outlier per row, so groups differ in scale
    std::vector<int> q;
    std::vector<uint16_t> s;
    if (cb) {
      ref_quantize_cb(row, group, cb, q, s);
      for (int& v : q) v -= 8;  // stored as the nibble, v + 8
    } else {
      ref_quantize(row, bits, group, q, s);
    }
    w.scales.insert(w.scales.end(), s.begin(), s.end());
    for (int64_t i = 0; i < cols; ++i) {
      const int level = cb ? cb[q[size_t(i)] + 8] : q[size_t(i)];
      w.deq[size_t(r * cols + i)] = double(level) * ref_f16f(s[size_t(i / group)]);
      bool hi;
      const int64_t b = test::q_place(bits, i, cols, &hi);
      if (bits == 8)
        w.codes[size_t(r * rb + b)] = uint8_t(int8_t(q[size_t(i)]));
      else
        w.codes[size_t(r * rb + b)] |= uint8_t((q[size_t(i)] + 8) << (hi ? 4 : 0));
    }
  }
  return w;
}

double nerr(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// A small custom stand-in: dimensions multiple of 128 so every group size applies.
StandinSpec small_spec(bool outliers = false) {
  StandinSpec s;
  s.preset = "";
  s.hidden = 128;
  s.intermediate = 256;
  s.layers = 2;
  s.heads = 4;
  s.kv_heads = 2;
  s.head_dim = 32;
  s.vocab = 512;
  s.max_position = 512;
  s.seed = 7;
  if (outliers) {
    s.heavy_tailed = true;
    s.outlier_channels = 4;
  }
  return s;
}

std::vector<int32_t> some_ids(int n, int vocab, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = int32_t(g() % uint32_t(vocab));
  return v;
}

const std::string kTokenizerDir = std::string(HEARTH_SHARED_DIR) + "/qwen3-tokenizer";

quant::QuantizeOptions qopts(int bits, int threads = 1) {
  quant::QuantizeOptions o;
  o.main = {bits, 32, DType::F16};
  o.head = {8, 32, DType::F16};
  o.threads = threads;
  return o;
}

// A tied LM head kept in a layout of its own where an ISA has the kernel that reads it (a BF16
// head coded, a Q8 head as its screen and low bits: head_screen.h): the logits of one-row steps
// (prefill's last row, then decode, through the tied table's rows too) are those of the model's
// mapping, and those of a batched step (every row, from the copy it then makes, `later` bytes)
// agree with them, within 1e-5 of the largest logit.
template <class Fn>
void check_tied_head(const Qwen3Model& m, Fn cpu::KernelTable::*split_kernel, size_t later) {
  REQUIRE(m.weights().lm_head.data == m.weights().embed.data);
  const int V = m.config().vocab_size;
  const std::vector<int32_t> ids = some_ids(24, V, 5);
  for (const std::string& isa : isas_here()) {
    CAPTURE(isa);
    const bool split = cpu::make_kernel_table(cpu::parse_isa(isa)).*split_kernel != nullptr;
    auto run = [&](std::shared_ptr<WeightStore> store, bool batched) {
      BackendOptions bo;
      bo.cpu.isa = isa;
      bo.threads = 2;
      bo.cpu.weight_copies = store;
      Runner r(create_backend("cpu", bo), m.graph(), V, 512, 32);
      auto kv = r.new_kv(int(ids.size()));
      std::vector<float> logits(static_cast<size_t>(V)), all;
      if (batched) {
        all.resize(ids.size() * size_t(V));
        r.forward(*kv, ids.data(), int(ids.size()), 0, all.data(), nullptr);
        return all;
      }
      r.forward(*kv, ids.data(), 16, 0, nullptr, logits.data());
      all.insert(all.end(), logits.begin(), logits.end());
      for (int i = 16; i < int(ids.size()); ++i) {
        r.forward(*kv, ids.data() + i, 1, i, nullptr, logits.data());
        all.insert(all.end(), logits.begin(), logits.end());
      }
      return all;
    };
    auto store = std::make_shared<WeightStore>();
    const std::vector<float> plain = run(nullptr, false), copied = run(store, false);
    const size_t before = store->bytes();
    const std::vector<float> batched = run(store, true);
    if (split) CHECK(store->bytes() - before == later);  // no other copy of the head until then
    // Rows 15 .. 23 of the batched step are the one-row steps' rows.
    double worst = 0, worst_batched = 0, top = 0;
    for (size_t i = 0; i < plain.size(); ++i) top = std::max(top, std::fabs(double(plain[i])));
    for (size_t i = 0; i < plain.size(); ++i) {
      worst = std::max(worst, std::fabs(double(plain[i]) - copied[i]) / top);
      worst_batched =
          std::max(worst_batched, std::fabs(double(copied[i]) - batched[15 * size_t(V) + i]) / top);
    }
    CAPTURE(worst);
    CAPTURE(worst_batched);
    CHECK(worst < 1e-5);
    CHECK(worst_batched < 1e-5);
  }
}

}  // namespace

TEST_SUITE("quant") {
  TEST_CASE("RTN codes and scales match an independent quantizer; placement follows FORMAT.md") {
    for (int bits : {8, 4})
      for (int group : {32, 64, 128})
        for (int64_t n : {128, 256, 384, 160, 96, 32}) {
          if (n % group) continue;
          CAPTURE(bits);
          CAPTURE(group);
          CAPTURE(n);
          std::vector<float> w = randn(size_t(n), uint32_t(n + bits + group), 0.02f);
          w[3] = 0.5f;  // a dominant positive weight: Q4 must map it onto -8 with a negative scale
          std::vector<int> rq;
          std::vector<uint16_t> rs;
          ref_quantize(w, bits, group, rq, rs);
          std::vector<int8_t> q(static_cast<size_t>(n));
          std::vector<uint16_t> s(static_cast<size_t>(n / group));
          quant::quantize_row(w.data(), n, {bits, group, DType::F16}, quant::Method::Rtn, nullptr,
                              q.data(), s.data());
          CHECK(s == rs);
          bool same = true;
          for (int64_t i = 0; i < n; ++i) same &= q[size_t(i)] == rq[size_t(i)];
          CHECK(same);
          if (bits == 4) CHECK(q[3] == -8);
          std::vector<uint8_t> packed(static_cast<size_t>(bits == 8 ? n : n / 2));
          quant::pack_row(bits, q.data(), n, packed.data());
          bool placed = true;
          for (int64_t i = 0; i < n; ++i) {
            bool hi;
            const uint8_t byte = packed[size_t(test::q_place(bits, i, n, &hi))];
            const int code = bits == 8 ? int(int8_t(byte)) : (hi ? byte >> 4 : byte & 15) - 8;
            placed &= code == q[size_t(i)];
          }
          CHECK(placed);
          std::vector<int8_t> back(static_cast<size_t>(n));
          quant::unpack_row(bits, packed.data(), n, back.data());
          CHECK(back == q);
        }
  }

  TEST_CASE("the clipping search never loses to RTN on the error it minimises") {
    for (int bits : {4, 8}) {
      std::vector<float> w = randn(4096, 11, 0.02f);
      for (size_t i = 0; i < w.size(); i += 97) w[i] *= 15.f;
      std::vector<float> h = randn(4096, 12, 1.f);
      for (auto& x : h) x = x * x + 0.01f;
      double e_rtn = 0, e_s = 0;
      for (quant::Method m : {quant::Method::Rtn, quant::Method::Search}) {
        std::vector<int8_t> q(4096);
        std::vector<uint16_t> s(4096 / 32);
        quant::quantize_row(w.data(), 4096, {bits, 32, DType::BF16}, m, h.data(), q.data(),
                            s.data());
        double e = 0;
        for (size_t i = 0; i < w.size(); ++i) {
          const double d = w[i] - double(q[i]) * bf16_to_f32(s[i / 32]);
          e += h[i] * d * d;
        }
        (m == quant::Method::Rtn ? e_rtn : e_s) = e;
      }
      CAPTURE(bits);
      CHECK(e_s <= e_rtn);
      if (bits == 4) CHECK(e_s < 0.9 * e_rtn);
    }
  }

  TEST_CASE("dequantize_row matches the independent dequantization") {
    for (int bits : {8, 4, 0}) {  // 0: Q4 with a codebook
      QWeight w = make_qweight(bits ? bits : 4, 64, 5, 192, 3, bits ? nullptr : kTestCodebook);
      std::vector<float> out(192);
      for (int64_t r = 0; r < 5; ++r) {
        quant::dequantize_row(w.view(), r, out.data());
        bool ok = true;
        for (int64_t i = 0; i < 192; ++i) ok &= out[size_t(i)] == float(w.deq[size_t(r * 192 + i)]);
        CHECK(ok);
      }
    }
  }

  TEST_CASE("Q8/Q4 matmul kernels match dequantize-then-multiply on every ISA") {
    struct Shape {
      int64_t rows, cols;
    };
    for (const std::string& isa : isas_here()) {
      const cpu::KernelTable kt = cpu::make_kernel_table(cpu::parse_isa(isa));
      for (int variant : {8, 4, 0})  // 0: Q4 with a codebook
        for (int group : {32, 64, 128})
          for (Shape sh : {Shape{37, 128}, Shape{21, 1024}, Shape{19, 160}, Shape{9, 96},
                           Shape{40, 3072}, Shape{5, 32}})
            for (int T : {1, 3, 8, 37}) {
              if (sh.cols % group) continue;
              CAPTURE(isa);
              CAPTURE(variant);
              CAPTURE(group);
              CAPTURE(sh.rows);
              CAPTURE(sh.cols);
              CAPTURE(T);
              const int bits = variant ? variant : 4;
              const int8_t* cb = variant ? nullptr : kTestCodebook;
              QWeight w = make_qweight(bits, group, sh.rows, sh.cols, uint32_t(sh.cols + T), cb);
              std::vector<float> x = randn(size_t(T * sh.cols), uint32_t(T), 1.f);
              // An activation outlier; a 32-element row with one would measure nothing but the
              // int8 rounding of its block (about 3%).
              if (sh.cols >= 96) x[5] = 9.f;
              // A sub-range of rows, written from y's start, as the backend calls it.
              const int64_t r0 = sh.rows > 4 ? 2 : 0, r1 = sh.rows;
              const int64_t ldy = r1 - r0 + 3;
              std::vector<float> y(size_t(T * ldy), -1234.f);
              std::vector<float> scratch(size_t(cpu::quant_matmul_scratch_floats(sh.cols, T)));
              cpu::QuantMatmulArgs a = test::quant_args(
                  {w.codes.data(), w.scales.data(), DType::F16, group, cb, sh.cols}, x.data(),
                  sh.cols, T, y.data(), ldy, r0, r1, scratch.data());
              const cpu::QuantMatmulFn fn = bits == 8 ? kt.matmul_q8
                                            : cb      ? kt.matmul_q4cb
                                                      : kt.matmul_q4;
              fn(a);
              // Again over the same rows, told x is unchanged since this call (reuse_x, as the
              // backend's block loops do): whatever the kernel kept must give the same result.
              std::vector<float> again(y.size(), -1234.f);
              a.y = again.data();
              a.reuse_x = true;
              fn(a);
              CHECK(again == y);
              std::vector<float> got;
              std::vector<double> want;
              bool untouched = true, bounded = true;
              for (int t = 0; t < T; ++t) {
                const float* xt = x.data() + t * sh.cols;
                for (int64_t r = r0; r < r1; ++r) {
                  // The exact dot, and a rigorous bound on what the SIMD paths may add: half an
                  // int8 step of each activation block (decode), or two bf16 roundings (prefill).
                  double s = 0, bound = 0;
                  for (int64_t i = 0; i < sh.cols; ++i) {
                    const double wi = w.deq[size_t(r * sh.cols + i)];
                    s += wi * xt[i];
                    float amax = 0;
                    for (int64_t j = i / 32 * 32; j < i / 32 * 32 + 32; ++j)
                      amax = std::max(amax, std::fabs(xt[j]));
                    bound += std::fabs(wi) * (amax / 127.0 / 2 + std::fabs(xt[i]) / 128.0);
                  }
                  want.push_back(s);
                  got.push_back(y[size_t(t * ldy + (r - r0))]);
                  if (isa != "scalar") bounded &= std::fabs(got.back() - s) <= bound * 1.01 + 1e-6;
                }
                for (int64_t j = r1 - r0; j < ldy; ++j)
                  untouched &= y[size_t(t * ldy + j)] == -1234.f;
              }
              CHECK(untouched);
              CHECK(bounded);
              // Scalar is float math on the exact weights; SIMD paths round activations to int8
              // (decode) or bf16 (prefill), a few parts per thousand overall, while a layout slip
              // costs O(1). One 32-element block is too few terms for that average to settle.
              if (isa == "scalar")
                CHECK(nerr(got, want) < 1e-5);
              else if (sh.cols >= 96)
                CHECK(nerr(got, want) < 1.5e-2);
            }
    }
  }

  TEST_CASE("quantized stand-ins load and generate, on every ISA") {
    TempDir d;
    write_standin(d.str("f"), small_spec(), "", 1);
    for (int variant : {8, 4, 0}) {  // 0: Q4 with a codebook
      const int bits = variant ? variant : 4;
      auto o = qopts(bits);
      o.codebook = variant == 0;
      quant::quantize_checkpoint(d.str("f"), d.str("q" + std::to_string(variant)), o);
      auto m = Qwen3Model::load(d.str("q" + std::to_string(variant)));
      CHECK(m->weights().layers[0].q_proj.dtype == (bits == 8 ? DType::Q8 : DType::Q4));
      CHECK((m->weights().layers[0].q_proj.codebook != nullptr) == o.codebook);
      CHECK(m->weights().embed.codebook == nullptr);  // int8
      CHECK(m->weights().embed.dtype == DType::Q8);
      CHECK(m->weights().lm_head.data == m->weights().embed.data);  // still tied
      CHECK(m->weights().layers[0].input_norm.dtype == DType::BF16);
      for (const std::string& isa : isas_here()) {
        CAPTURE(variant);
        CAPTURE(isa);
        BackendOptions bo;
        bo.cpu.isa = isa;
        bo.threads = 2;
        Runner r(create_backend("cpu", bo), m->graph(), m->config().vocab_size, 512, 16);
        Engine e(r);
        Session s(e);
        GenerateOptions go;
        go.max_new_tokens = 20;
        go.ignore_eos = true;
        // 40 prompt tokens: a prefill in chunks of 16 (the tile path) then decode (the int8 path).
        GenerationResult res = s.generate(some_ids(40, 512, 1), go);
        CHECK(res.tokens.size() == 20);
        for (int32_t t : res.tokens) CHECK((t >= 0 && t < 512));
      }
    }
  }

  TEST_CASE("a tied BF16 head, coded, gives the head's logits") {
    // Where a kernel reads BF16 coded (bf16_coded.h), the head's one coded copy serves one-row
    // steps, batched ones and the tied table's rows: no other copy of it.
    TempDir d;
    write_standin(d.str("f"), small_spec(), "", 1);
    auto m = Qwen3Model::load(d.str("f"));
    REQUIRE(m->weights().lm_head.dtype == DType::BF16);
    check_tied_head(*m, &cpu::KernelTable::matmul_bf16_coded, 0);
  }

  TEST_CASE("a tied Q8 head read from its screen and low bits gives its codes' logits") {
    // Where a kernel reads a Q8 head as its screen and the low bits of its codes (head_screen.h),
    // weight copies hold no other copy of it until a step asks for several rows of logits (its
    // panels then).
    TempDir d;
    write_standin(d.str("f"), small_spec(), "", 1);
    quant::quantize_checkpoint(d.str("f"), d.str("q"), qopts(4));
    auto m = Qwen3Model::load(d.str("q"));
    const Tensor& head = m->weights().lm_head;
    REQUIRE(head.dtype == DType::Q8);
    check_tied_head(*m, &cpu::KernelTable::matmul_q8_split,
                    size_t(cpu::q8_panel_bytes(head.rows(), head.cols(), head.group_size)));
  }

  TEST_CASE("head schemes and untied heads: int4, bf16, int8") {
    TempDir d;
    StandinSpec spec = small_spec();
    spec.tied = false;
    write_standin(d.str("f"), spec, "", 1);
    auto f = Qwen3Model::load(d.str("f"));
    const std::vector<int32_t> ids = some_ids(64, 512, 4);
    quant::EvalOptions eo;
    eo.ctx = 64;
    for (int head_bits : {4, 8, 16}) {
      CAPTURE(head_bits);
      auto o = qopts(8);
      o.head.bits = head_bits;
      const std::string q = d.str("h" + std::to_string(head_bits));
      quant::quantize_checkpoint(d.str("f"), q, o);
      auto m = Qwen3Model::load(q);
      const DType want = head_bits == 4 ? DType::Q4 : head_bits == 8 ? DType::Q8 : DType::BF16;
      CHECK(m->weights().embed.dtype == want);
      CHECK(m->weights().lm_head.dtype == want);
      CHECK(m->weights().lm_head.data != m->weights().embed.data);
      // The head scheme shows in the KL: an int8 body with a float head is nearly exact.
      const double kl = quant::evaluate(*m, *f, ids, eo).kl_mean;
      CHECK(kl < (head_bits == 4 ? 0.5 : 0.02));
    }
  }

  TEST_CASE("quantized prefill through every path agrees with exact dequantized math") {
    TempDir d;
    write_standin(d.str("f"), small_spec(), "", 1);
    const std::vector<int32_t> ids = some_ids(48, 512, 3);
    for (int variant : {8, 4, 0}) {  // 0: Q4 with a codebook
      const int bits = variant ? variant : 4;
      auto o = qopts(bits);
      o.codebook = variant == 0;
      const std::string q = d.str("q" + std::to_string(variant));
      quant::quantize_checkpoint(d.str("f"), q, o);
      auto m = Qwen3Model::load(q);
      const int V = m->config().vocab_size;
      auto logits = [&](const std::string& isa, const std::string& gemm, int chunk, bool copies) {
        BackendOptions bo;
        bo.cpu.isa = isa;
        bo.cpu.gemm = gemm;
        // Weight copies: the kernels of AVX-512 and AVX2 read their packed copies, and the
        // library's steps must unpack those too.
        if (copies) bo.cpu.weight_copies = std::make_shared<WeightStore>();
        bo.cpu.gemm_min_tokens = 32;  // the 48-token step goes to the library, when there is one
        bo.threads = 2;
        Runner r(create_backend("cpu", bo), m->graph(), V, 512, 64);
        auto kv = r.new_kv(64);
        std::vector<float> out(ids.size() * size_t(V));
        r.forward(*kv, ids.data(), int(ids.size()), 0, out.data(), nullptr, chunk);
        return out;
      };
      // Scalar kernels, no library: dequantize then multiply in f32, the reference.
      const std::vector<float> ref = logits("scalar", "native", 64, false);
      std::vector<double> want(ref.begin(), ref.end());
      struct Path {
        std::string isa, gemm;
        int chunk;
        double tol;
        bool copies = false;
      };
      // Rounding activations (and dequantized weights) to bf16 or int8 moves these random
      // models' logits by 1-2% (the float model's paths agree to 1e-6); a misplaced code by O(1).
      const bool int8_gemm =
          cpu::make_kernel_table(cpu::detect_cpu_features().best()).quant_prefill;
      std::vector<Path> paths = {
          // the int8 GEMM of the kernels (AVX-512, AVX-VNNI), else the library's f32 GEMM
          {"", "auto", 64, int8_gemm ? 3e-2 : 1e-4},
          {"", "native", 64, 3e-2},  // int8 activations: the GEMM, or token tiles
          {"", "native", 1, 4e-2}};  // decode: int8 activations
      const cpu::GemmKind lib = cpu::choose_gemm("auto", false);  // the f32 library
      if (lib != cpu::GemmKind::Native) {  // named, the library gets the step: f32 on
        paths.push_back({"", cpu::gemm_name(lib), 64, 1e-4});        // dequantized rows
        paths.push_back({"", cpu::gemm_name(lib), 64, 1e-4, true});  // of the packed copy
        if (cpu::detect_cpu_features().best() == cpu::Isa::Avx512) {
          // AVX2's default: the int8 GEMM where the CPU has AVX-VNNI, else the library.
          const bool vnni = cpu::make_kernel_table(cpu::Isa::Avx2).quant_prefill;
          paths.push_back({"avx2", "auto", 64, vnni ? 3e-2 : 1e-4, true});
        }
      }
      if (cpu::detect_cpu_features().best() == cpu::Isa::Avx512)
        paths.push_back({"", "dnnl-bf16", 64, 3e-2});  // library bf16 GEMM on dequantized rows
      for (const std::string& isa :
           isas_here())  // each lower ISA's own kernels, decode and prefill
        if (isa != "scalar" && cpu::parse_isa(isa) != cpu::detect_cpu_features().best()) {
          paths.push_back({isa, "native", 64, 3e-2});
          paths.push_back({isa, "native", 1, 4e-2});
          paths.push_back({isa, "native", 1, 4e-2, true});  // decode from the packed copy
        }
      for (const Path& p : paths) {
        CAPTURE(variant);
        CAPTURE(p.isa);
        CAPTURE(p.gemm);
        CAPTURE(p.chunk);
        CAPTURE(p.copies);
        CHECK(nerr(logits(p.isa, p.gemm, p.chunk, p.copies), want) < p.tol);
      }
    }
  }

  TEST_CASE("quantizing is deterministic whatever the thread count") {
    TempDir d;
    write_standin(d.str("f"), small_spec(true), "", 1);
    for (int bits : {4, 8}) {
      quant::quantize_checkpoint(d.str("f"), d.str("a"), qopts(bits, 1));
      quant::quantize_checkpoint(d.str("f"), d.str("b"), qopts(bits, 2));
      CHECK(slurp(d.path / "a" / "model.safetensors") == slurp(d.path / "b" / "model.safetensors"));
      CHECK(slurp(d.path / "a" / "config.json") == slurp(d.path / "b" / "config.json"));
      fs::remove_all(d.path / "a");
      fs::remove_all(d.path / "b");
    }
  }

  TEST_CASE("a stand-in quantized as it is generated is the stand-in, then quantized") {
    // hearth standin --bits writes no 16-bit checkpoint; its output must be byte for byte what
    // quantizing the written stand-in gives (tensor order, config, side files), dense and MoE,
    // untied, every scheme and method.
    StandinSpec moe = standin_preset("moe-tiny");
    moe.tied = false;
    moe.outlier_channels = 2;
    for (const StandinSpec& spec : {small_spec(true), moe}) {
      TempDir d;
      write_standin(d.str("f"), spec, kTokenizerDir, 2);
      for (int bits : {4, 8})
        for (int head : {16, 4})
          for (auto method : {quant::Method::Rtn, quant::Method::Search}) {
            CAPTURE(spec.experts);
            CAPTURE(bits);
            CAPTURE(head);
            auto o = qopts(bits, 2);
            o.head.bits = head;
            o.method = method;
            o.force = true;
            const auto a = quant::quantize_checkpoint(d.str("f"), d.str("a"), o);
            const auto b = quant::quantize_standin(spec, kTokenizerDir, d.str("b"), o);
            CHECK(a.output_bytes == b.output_bytes);
            CHECK(a.params == b.params);
            for (const char* f : {"model.safetensors", "config.json", "generation_config.json",
                                  "tokenizer.json", "tokenizer_config.json"}) {
              CAPTURE(f);
              CHECK(slurp(d.path / "a" / f) == slurp(d.path / "b" / f));
            }
          }
      auto o = qopts(4);
      o.codebook = true;
      CHECK_THROWS_CONTAINING(quant::quantize_standin(spec, "", d.str("c"), o), "codebook");
      CHECK(!fs::exists(d.path / "c"));
      CHECK_THROWS_CONTAINING(quant::quantize_standin(spec, "", d.str("b"), qopts(4)),
                              "already exists");
    }
  }

  TEST_CASE("quantize refuses to overwrite without force, and leaves no partial output") {
    TempDir d;
    write_standin(d.str("f"), small_spec(), "", 1);
    fs::create_directories(d.path / "out");
    spit(d.path / "out" / "keep.txt", "x");
    CHECK_THROWS_CONTAINING(quant::quantize_checkpoint(d.str("f"), d.str("out"), qopts(4)),
                            "already exists");
    CHECK(fs::exists(d.path / "out" / "keep.txt"));
    auto o = qopts(4);
    o.force = true;
    quant::quantize_checkpoint(d.str("f"), d.str("out"), o);
    CHECK(!fs::exists(d.path / "out" / "keep.txt"));
    CHECK(fs::exists(d.path / "out" / "model.safetensors"));
    for (const auto& e : fs::directory_iterator(d.path))
      CHECK(e.path().filename().string().find("partial") == std::string::npos);
    CHECK_THROWS_CONTAINING(quant::quantize_checkpoint(d.str("out"), d.str("again"), qopts(4)),
                            "already quantized");
  }

  TEST_CASE("corrupted scales and wrong bit counts are refused with the tensor named") {
    TempDir d;
    write_standin(d.str("f"), small_spec(), "", 1);
    quant::quantize_checkpoint(d.str("f"), d.str("q"), qopts(4));
    const std::string st = slurp(d.path / "q" / "model.safetensors");
    const std::string cfg = slurp(d.path / "q" / "config.json");
    auto sf = SafetensorsFile::open(d.str("q/model.safetensors"));
    const std::string victim = "model.layers.1.mlp.down_proj.weight";

    // Rewrites the checkpoint into folder `name` with `edit` applied to the tensors and metadata.
    auto rewrite = [&](const std::string& name,
                       const std::function<void(std::vector<TensorToWrite>&,
                                                std::map<std::string, std::string>&)>& edit) {
      fs::create_directories(d.path / name);
      spit(d.path / name / "config.json", cfg);
      std::vector<TensorToWrite> tw;
      for (const TensorRef& r : sf->tensors()) {
        TensorToWrite t;
        t.name = r.name;
        t.dtype = r.dtype_str;
        t.shape = r.shape;
        t.nbytes = r.nbytes;
        const uint8_t* src = r.data;
        t.fill = [src, n = r.nbytes](uint8_t* dst) { std::memcpy(dst, src, n); };
        tw.push_back(t);
      }
      auto meta = sf->metadata();
      edit(tw, meta);
      write_safetensors(d.str(name + "/model.safetensors"), tw, meta);
      return d.str(name);
    };

    SUBCASE("a NaN scale") {
      std::string dir = rewrite("nan", [&](auto& tw, auto&) {
        for (auto& t : tw)
          if (t.name == victim + "_scale") {
            auto inner = t.fill;
            t.fill = [inner](uint8_t* dst) {
              inner(dst);
              dst[7 * 2] = 0x00, dst[7 * 2 + 1] = 0x7e;  // F16 NaN as scale 7
            };
          }
      });
      CHECK_THROWS_CONTAINING(Qwen3Model::load(dir), "'" + victim + "_scale': scale 7");
      CHECK_THROWS_CONTAINING(Qwen3Model::load(dir), "not finite");
    }
    SUBCASE("a scale tensor of the wrong shape") {
      std::string dir = rewrite("shape", [&](auto& tw, auto&) {
        for (auto& t : tw)
          if (t.name == victim + "_scale") t.shape = {t.shape[1], t.shape[0]};
      });
      CHECK_THROWS_CONTAINING(Qwen3Model::load(dir), victim + "_scale");
    }
    SUBCASE("a missing scale tensor") {
      std::string dir = rewrite("missing", [&](auto& tw, auto&) {
        tw.erase(
            std::remove_if(tw.begin(), tw.end(),
                           [&](const TensorToWrite& t) { return t.name == victim + "_scale"; }),
            tw.end());
      });
      CHECK_THROWS_CONTAINING(Qwen3Model::load(dir), "'" + victim + "_scale' is missing");
    }
    SUBCASE("4-bit codes declared as 8-bit everywhere") {
      std::string dir = rewrite("bits", [&](auto&, auto& meta) {
        auto schemes = quant::parse_tensor_schemes(meta["hearth.quant"], "x");
        schemes[victim].bits = 8;
        meta["hearth.quant"] = quant::tensor_schemes_json(schemes);
      });
      std::string c = cfg;
      const std::string ov = "\"overrides\":{";
      c.insert(c.find(ov) + ov.size(),
               "\"" + victim + "\":{\"bits\":8,\"group_size\":32,\"scale_dtype\":\"F16\"},");
      spit(fs::path(dir) / "config.json", c);
      CHECK_THROWS_CONTAINING(Qwen3Model::load(dir), "'" + victim + "': codes are U8");
      CHECK_THROWS_CONTAINING(Qwen3Model::load(dir), "wrong bit count");
    }
    SUBCASE("config and file disagree on the bits") {
      std::string c = cfg;
      const size_t at = c.find("\"bits\":4");
      REQUIRE(at != std::string::npos);
      c.replace(at, 8, "\"bits\":8");
      fs::create_directories(d.path / "cfg");
      fs::copy_file(d.path / "q" / "model.safetensors", d.path / "cfg" / "model.safetensors");
      spit(d.path / "cfg" / "config.json", c);
      CHECK_THROWS_CONTAINING(Qwen3Model::load(d.str("cfg")),
                              "stored as int4 g32 F16 but config.json says int8 g32 F16");
    }
    SUBCASE("an unsupported bit count in the config") {
      std::string c = cfg;
      c.replace(c.find("\"bits\":4"), 8, "\"bits\":3");
      fs::create_directories(d.path / "b3");
      fs::copy_file(d.path / "q" / "model.safetensors", d.path / "b3" / "model.safetensors");
      spit(d.path / "b3" / "config.json", c);
      CHECK_THROWS_CONTAINING(Qwen3Model::load(d.str("b3")), "bits is 3");
    }
  }

  TEST_CASE("eval of a model against itself: KL 0, top-1 agreement 1") {
    TempDir d;
    write_standin(d.str("f"), small_spec(), "", 1);
    quant::quantize_checkpoint(d.str("f"), d.str("q"), qopts(4));
    auto f = Qwen3Model::load(d.str("f"));
    auto q = Qwen3Model::load(d.str("q"));
    const std::vector<int32_t> ids = some_ids(100, 512, 5);
    quant::EvalOptions o;
    o.ctx = 48;
    for (const Qwen3Model* m : {f.get(), q.get()}) {
      quant::EvalReport r = quant::evaluate(*m, *m, ids, o);
      CHECK(r.windows == 3);
      CHECK(r.positions == 47 + 47 + 3);
      CHECK(r.kl_mean == 0.0);
      CHECK(r.kl_max == 0.0);
      CHECK(r.top1 == 1.0);
      CHECK(r.ppl_model == r.ppl_ref);
    }
    quant::EvalReport r = quant::evaluate(*q, *f, ids, o);
    CHECK(r.kl_mean > 0.0);
    CHECK(r.bpw_ref == doctest::Approx(16.0));
    // int4 g32 F16 linears (4.5 bits) and an int8 g32 embedding (8.5 bits), norms in BF16.
    CHECK(r.bpw_model > 4.5);
    CHECK(r.bpw_model < 8.5);
  }

  TEST_CASE("calibration lowers KL against round-to-nearest on an outlier stand-in") {
    TempDir d;
    StandinSpec s = small_spec(true);
    s.hidden = 256;
    s.intermediate = 512;
    write_standin(d.str("f"), s, "", 1);
    const std::vector<int32_t> calib = some_ids(256, 512, 9), test = some_ids(256, 512, 10);
    auto o = qopts(4, 2);
    o.method = quant::Method::Rtn;
    quant::quantize_checkpoint(d.str("f"), d.str("rtn"), o);
    o.method = quant::Method::Search;
    o.calibration_ids = calib;
    o.calibration_ctx = 128;
    const quant::QuantizeReport rep = quant::quantize_checkpoint(d.str("f"), d.str("cal"), o);
    CHECK(rep.calibration == "awq+clip");
    CHECK(rep.calibration_error_ratio < 1.0);
    auto f = Qwen3Model::load(d.str("f"));
    auto rtn = Qwen3Model::load(d.str("rtn"));
    auto cal = Qwen3Model::load(d.str("cal"));
    quant::EvalOptions eo;
    eo.ctx = 128;
    const double kl_rtn = quant::evaluate(*rtn, *f, test, eo).kl_mean;
    const double kl_cal = quant::evaluate(*cal, *f, test, eo).kl_mean;
    CAPTURE(kl_rtn);
    CAPTURE(kl_cal);
    CHECK(kl_cal < kl_rtn);
  }

  TEST_CASE("the quantize and eval commands") {
    TempDir d;
    write_standin(d.str("f"), small_spec(), "", 1);
    auto run = [&](const std::string& args, std::string* out) {
      const std::string cmd =
          std::string(HEARTH_BINARY) + " " + args + " >" + d.str("out") + " 2>" + d.str("err");
      const int st = std::system(cmd.c_str());
      *out = slurp(d.path / "out") + slurp(d.path / "err");
      return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    };
    std::string out;
    const std::string q = d.str("q");
    REQUIRE(run("quantize --model " + d.str("f") + " --out " + q + " --bits 4 --group 64 --json",
                &out) == 0);
    CHECK(out.find("\"bits_per_weight\":") != std::string::npos);
    CHECK(out.find("int4 g64 F16") != std::string::npos);
    CHECK(run("quantize --model " + d.str("f") + " --out " + q, &out) == 1);
    CHECK(out.find("error: ") == 0);
    CHECK(out.find("--force") != std::string::npos);
    CHECK(run("quantize --model " + d.str("f") + " --out " + q + " --bits 3", &out) == 1);
    CHECK(out.find("--bits must be 4 or 8") != std::string::npos);
    CHECK(run("quantize --model " + d.str("f") + " --out " + d.str("c") + " --bits 8 --codebook",
              &out) == 1);
    CHECK(out.find("--codebook needs --bits 4") != std::string::npos);
    REQUIRE(run("quantize --model " + d.str("f") + " --out " + d.str("c") + " --codebook --json",
                &out) == 0);
    CHECK(out.find("\"codebook\":[-127,") != std::string::npos);
    spit(d.path / "ids.txt", "1, 2, 3, 4, 5, 6, 7, 8, 9, 10\n11 12 13 14 15 16 17 18 19 20\n");
    REQUIRE(run("eval --model " + q + " --reference " + q + " --ids-file " + d.str("ids.txt") +
                    " --ctx 8 --json",
                &out) == 0);
    CHECK(out.find("\"kl_mean\":0,") != std::string::npos);
    CHECK(out.find("\"top1_agreement\":1,") != std::string::npos);
    CHECK(out.find("\"windows\":3,") != std::string::npos);
  }

  TEST_CASE("quantization_config parsing names what is wrong") {
    CHECK_THROWS_CONTAINING(quant::parse_quant_config(R"({"quant_method":"gptq"})", "c.json"),
                            "quant_method is \"gptq\"");
    // Integers are checked as the 64-bit values JSON gives (found by fuzz_quant_config).
    CHECK_THROWS_CONTAINING(
        quant::parse_quant_config(
            R"({"quant_method":"hearth","format_version":4294967297,"bits":4})", "c.json"),
        "format_version' is 4294967297, out of range");
    CHECK_THROWS_CONTAINING(
        quant::parse_quant_config(
            R"({"quant_method":"hearth","format_version":1,"bits":4294967300})", "c.json"),
        "bits' is 4294967300, out of range");
    CHECK_THROWS_CONTAINING(
        quant::parse_quant_config(R"({"quant_method":"hearth","format_version":2})", "c.json"),
        "format_version 2");
    CHECK_THROWS_CONTAINING(quant::parse_quant_config(
                                R"({"quant_method":"hearth","format_version":1,"bits":4,
                                    "group_size":48})",
                                "c.json"),
                            "group_size is 48");
    quant::QuantConfig c = quant::parse_quant_config(
        R"({"quant_method":"hearth","format_version":1,"bits":4,"group_size":64,
            "scale_dtype":"BF16","overrides":{"model.embed_tokens.weight":{"bits":16}}})",
        "c.json");
    CHECK(c.main.group == 64);
    CHECK(c.main.scale_dtype == DType::BF16);
    CHECK(!c.scheme_for("model.embed_tokens.weight").quantized());
    CHECK(c.scheme_for("x").bits == 4);
    // What the writer writes, the parser reads back.
    quant::QuantConfig back = quant::parse_quant_config(quant::quant_config_json(c), "again");
    CHECK(back.main == c.main);
    CHECK(back.overrides.size() == 1);
  }
  // --- the 4-bit codebook variant
  // -----------------------------------------------------------------

  TEST_CASE("codebook codes, scales and placement match an independent quantizer") {
    for (int group : {32, 64, 128})
      for (int64_t n : {128, 256, 384, 160, 96, 32}) {
        if (n % group) continue;
        CAPTURE(group);
        CAPTURE(n);
        std::vector<float> w = randn(size_t(n), uint32_t(n + group), 0.02f);
        w[3] = 0.5f;  // a dominant positive weight: it must land on level 0 (-127), scale < 0
        std::vector<int> ridx;
        std::vector<uint16_t> rs;
        ref_quantize_cb(w, group, kTestCodebook, ridx, rs);
        std::vector<int8_t> q(static_cast<size_t>(n));
        std::vector<uint16_t> s(static_cast<size_t>(n / group));
        quant::quantize_row(w.data(), n, {4, group, DType::F16}, quant::Method::Rtn, nullptr,
                            q.data(), s.data(), kTestCodebook);
        CHECK(s == rs);
        bool same = true;
        for (int64_t i = 0; i < n; ++i) same &= q[size_t(i)] + 8 == ridx[size_t(i)];
        CHECK(same);
        CHECK(q[3] == -8);
        CHECK(f16_to_f32(s[0]) < 0.f);
        // The nibble is the level's index, in the Q4 places.
        std::vector<uint8_t> packed(static_cast<size_t>(n / 2));
        quant::pack_row(4, q.data(), n, packed.data());
        bool placed = true;
        for (int64_t i = 0; i < n; ++i) {
          bool hi;
          const uint8_t byte = packed[size_t(test::q_place(4, i, n, &hi))];
          placed &= (hi ? byte >> 4 : byte & 15) == ridx[size_t(i)];
        }
        CHECK(placed);
        // dequantize_row: codebook[nibble] times the scale.
        Tensor t;
        t.dtype = DType::Q4;
        t.ndim = 2;
        t.shape = {1, n, 0, 0};
        t.data = packed.data();
        t.nbytes = packed.size();
        t.scales = s.data();
        t.group_size = group;
        t.codebook = kTestCodebook;
        std::vector<float> out(static_cast<size_t>(n));
        quant::dequantize_row(t, 0, out.data());
        bool deq = true;
        for (int64_t i = 0; i < n; ++i)
          deq &= out[size_t(i)] ==
                 float(kTestCodebook[ridx[size_t(i)]]) * ref_f16f(rs[size_t(i / group)]);
        CHECK(deq);
      }
  }

  TEST_CASE("codebook: the clipping search never loses to RTN; a fitted codebook beats the grid") {
    // Heavy-tailed weights (Student-t, 4 degrees of freedom), as trained models' are.
    std::mt19937 g(5);
    std::student_t_distribution<float> t4(4.f);
    std::vector<float> w(1 << 16);
    for (auto& x : w) x = 0.02f * t4(g);
    int8_t cb[16];
    quant::fit_codebook(w.data(), int64_t(w.size()), 32, cb);
    bool increasing = true;
    for (int i = 1; i < 16; ++i) increasing &= cb[i] > cb[i - 1];
    CHECK(increasing);
    CHECK(cb[0] == -127);
    CHECK(cb[15] <= 127);
    int8_t again[16];
    quant::fit_codebook(w.data(), int64_t(w.size()), 32, again);
    CHECK(std::memcmp(cb, again, 16) == 0);
    auto err = [&](quant::Method m, const int8_t* book) {
      std::vector<int8_t> q(w.size());
      std::vector<uint16_t> s(w.size() / 32);
      quant::quantize_row(w.data(), int64_t(w.size()), {4, 32, DType::F16}, m, nullptr, q.data(),
                          s.data(), book);
      double e = 0;
      for (size_t i = 0; i < w.size(); ++i) {
        const double l = book ? book[q[i] + 8] : q[i];
        const double d = w[i] - l * f16_to_f32(s[i / 32]);
        e += d * d;
      }
      return e;
    };
    const double grid_rtn = err(quant::Method::Rtn, nullptr);
    const double cb_rtn = err(quant::Method::Rtn, cb), cb_search = err(quant::Method::Search, cb);
    CAPTURE(grid_rtn);
    CAPTURE(cb_rtn);
    CAPTURE(cb_search);
    CHECK(cb_search <= cb_rtn);
    CHECK(cb_rtn < 0.8 * grid_rtn);
    CHECK(cb_search < err(quant::Method::Search, nullptr));
  }

  TEST_CASE("codebook dequantization kernels match the independent dequantization on every ISA") {
    for (const std::string& isa : isas_here()) {
      const cpu::KernelTable kt = cpu::make_kernel_table(cpu::parse_isa(isa));
      for (int group : {32, 64, 128})
        for (int64_t cols : {128, 160, 96, 384, 1024}) {
          if (cols % group) continue;
          CAPTURE(isa);
          CAPTURE(group);
          CAPTURE(cols);
          QWeight w = make_qweight(4, group, 7, cols, uint32_t(cols), kTestCodebook);
          std::vector<float> f(size_t(5 * cols));
          std::vector<uint16_t> b(size_t(5 * cols));
          kt.dequant_q4cb(w.view(), 2, 5, f.data(), false);
          kt.dequant_q4cb(w.view(), 2, 5, b.data(), true);
          bool exact = true, rounded = true;
          for (int64_t i = 0; i < 5 * cols; ++i) {
            const double want = w.deq[size_t(2 * cols + i)];
            exact &= f[size_t(i)] == float(want);
            rounded &= b[size_t(i)] == f32_to_bf16(float(want));
          }
          CHECK(exact);
          CHECK(rounded);
        }
    }
  }

  TEST_CASE("codebook checkpoints: the tiny fixtures quantize, load and generate on every ISA") {
    TempDir d;
    for (const char* name : {"tiny-tied-bf16", "tiny-untied-sharded-f32"}) {
      CAPTURE(name);
      const std::string src = std::string(HEARTH_SHARED_DIR) + "/fixtures/models/" + name;
      auto o = qopts(4, 2);
      o.codebook = true;
      o.force = true;
      const quant::QuantizeReport rep = quant::quantize_checkpoint(src, d.str("q"), o);
      CHECK(rep.has_codebook);
      const std::string cfg = slurp(d.path / "q" / "config.json");
      std::string levels;
      for (int8_t v : rep.codebook) levels += (levels.empty() ? "" : ",") + std::to_string(int(v));
      CHECK(cfg.find("\"codebook\":[" + levels + "]") != std::string::npos);
      auto m = Qwen3Model::load(d.str("q"));
      const Tensor& up = m->weights().layers[1].up_proj;
      REQUIRE(up.codebook != nullptr);
      CHECK(std::memcmp(up.codebook, rep.codebook.data(), 16) == 0);
      CHECK(m->weights().embed.dtype == DType::Q8);
      const int V = m->config().vocab_size;
      std::vector<float> ref;
      for (const std::string& isa : isas_here()) {
        CAPTURE(isa);
        BackendOptions bo;
        bo.cpu.isa = isa;
        bo.threads = 2;
        Runner r(create_backend("cpu", bo), m->graph(), V, 64, 16);
        Engine e(r);
        Session s(e);
        GenerateOptions go;
        go.max_new_tokens = 8;
        go.ignore_eos = true;
        GenerationResult res = s.generate(some_ids(20, 1000, 2), go);
        CHECK(res.tokens.size() == 8);
        for (int32_t t : res.tokens) CHECK((t >= 0 && t < V));
        // One decode step's logits agree across ISAs up to int8 activation rounding.
        auto kv = r.new_kv(64);
        std::vector<float> out(static_cast<size_t>(V));
        const std::vector<int32_t> one = some_ids(1, 1000, 3);
        r.forward(*kv, one.data(), 1, 0, out.data(), nullptr, 1);
        if (ref.empty()) {
          ref = out;
        } else {
          CHECK(nerr(out, std::vector<double>(ref.begin(), ref.end())) < 4e-2);
        }
      }
    }
  }

  TEST_CASE("codebook RTN lowers KL against uniform RTN on an outlier stand-in") {
    TempDir d;
    StandinSpec s = small_spec(true);
    s.hidden = 256;
    s.intermediate = 512;
    write_standin(d.str("f"), s, "", 1);
    auto o = qopts(4, 2);
    o.method = quant::Method::Rtn;
    quant::quantize_checkpoint(d.str("f"), d.str("u"), o);
    o.codebook = true;
    quant::quantize_checkpoint(d.str("f"), d.str("c"), o);
    // Same bytes: the codebook lives in the JSON only.
    auto data_bytes = [&](const char* sub) {
      size_t n = 0;
      const auto file = SafetensorsFile::open(d.str(std::string(sub) + "/model.safetensors"));
      for (const TensorRef& r : file->tensors()) n += r.nbytes;
      return n;
    };
    CHECK(data_bytes("u") == data_bytes("c"));
    auto f = Qwen3Model::load(d.str("f"));
    auto u = Qwen3Model::load(d.str("u"));
    auto c = Qwen3Model::load(d.str("c"));
    CHECK(quant::weight_bytes(c->weights().layers[0].up_proj) ==
          quant::weight_bytes(u->weights().layers[0].up_proj));
    quant::EvalOptions eo;
    eo.ctx = 128;
    const std::vector<int32_t> test = some_ids(256, 512, 10);
    const double kl_u = quant::evaluate(*u, *f, test, eo).kl_mean;
    const double kl_c = quant::evaluate(*c, *f, test, eo).kl_mean;
    CAPTURE(kl_u);
    CAPTURE(kl_c);
    CHECK(kl_c < kl_u);
  }

  TEST_CASE("a corrupted or mismatched codebook is refused with a clear error") {
    TempDir d;
    write_standin(d.str("f"), small_spec(), "", 1);
    auto o = qopts(4);
    o.codebook = true;
    const quant::QuantizeReport rep = quant::quantize_checkpoint(d.str("f"), d.str("q"), o);
    const std::string cfg = slurp(d.path / "q" / "config.json");
    std::string levels;
    for (int8_t v : rep.codebook) levels += (levels.empty() ? "" : ",") + std::to_string(int(v));
    const std::string field = "\"codebook\":[" + levels + "]";
    REQUIRE(cfg.find(field) != std::string::npos);
    auto with_config = [&](const std::string& name, const std::string& new_field) {
      std::string c = cfg;
      c.replace(c.find(field), field.size(), new_field);
      fs::create_directories(d.path / name);
      fs::copy_file(d.path / "q" / "model.safetensors", d.path / name / "model.safetensors");
      spit(d.path / name / "config.json", c);
      return d.str(name);
    };
    std::vector<int> v(rep.codebook.begin(), rep.codebook.end());
    auto json = [](const std::vector<int>& l) {
      std::string j;
      for (int x : l) j += (j.empty() ? "" : ",") + std::to_string(x);
      return "\"codebook\":[" + j + "]";
    };
    SUBCASE("an entry outside the int8 range") {
      std::vector<int> bad = v;
      bad[15] = 200;
      CHECK_THROWS_CONTAINING(Qwen3Model::load(with_config("range", json(bad))),
                              "codebook entry 15 is 200, outside the int8 range");
    }
    SUBCASE("15 entries") {
      std::vector<int> bad(v.begin(), v.end() - 1);
      CHECK_THROWS_CONTAINING(Qwen3Model::load(with_config("short", json(bad))),
                              "the codebook has 15 entries");
    }
    SUBCASE("entries out of order") {
      std::vector<int> bad = v;
      std::swap(bad[3], bad[4]);
      CHECK_THROWS_CONTAINING(Qwen3Model::load(with_config("order", json(bad))),
                              "must increase strictly");
    }
    SUBCASE("not integers") {
      CHECK_THROWS_CONTAINING(Qwen3Model::load(with_config("type", "\"codebook\":\"nf4\"")),
                              "'codebook' must be an array of 16 integers");
    }
    SUBCASE("config and file disagree on the levels") {
      std::vector<int> other = v;
      other[1] += 1;
      if (other[1] == other[2]) other[1] -= 2;
      CHECK_THROWS_CONTAINING(Qwen3Model::load(with_config("differ", json(other))),
                              "differs from config.json's codebook");
    }
    SUBCASE("a codebook in the file but not in the config") {
      std::string dir = with_config("nocfg", "\"nothing\":0");
      CHECK_THROWS_CONTAINING(Qwen3Model::load(dir), "has no 'codebook'");
    }
    SUBCASE("a codebook in the config of a uniform file") {
      quant::quantize_checkpoint(d.str("f"), d.str("u"), qopts(4));
      std::string c = slurp(d.path / "u" / "config.json");
      const std::string key = "\"scale_dtype\":\"F16\",";
      c.insert(c.find(key) + key.size(), field + ",");
      spit(d.path / "u" / "config.json", c);
      CHECK_THROWS_CONTAINING(Qwen3Model::load(d.str("u")), "has no 'hearth.codebook'");
    }
    SUBCASE("a codebook without any 4-bit tensor") {
      CHECK_THROWS_CONTAINING(
          quant::parse_quant_config(R"({"quant_method":"hearth","format_version":1,"bits":8,
              "codebook":[-127,-100,-80,-60,-40,-30,-20,-10,0,10,20,30,40,60,80,100]})",
                                    "c.json"),
          "no tensor is stored in 4 bits");
    }
    SUBCASE("the writer's codebook reads back") {
      quant::QuantConfig c = quant::parse_quant_config(
          R"({"quant_method":"hearth","format_version":1,"bits":4,
              "codebook":[-127,-100,-80,-60,-40,-30,-20,-10,0,10,20,30,40,60,80,100]})",
          "c.json");
      REQUIRE(c.has_codebook);
      CHECK(c.codebook[1] == -100);
      quant::QuantConfig back = quant::parse_quant_config(quant::quant_config_json(c), "again");
      CHECK(back.has_codebook);
      CHECK(back.codebook == c.codebook);
    }
  }

  TEST_CASE("a Qwen3-MoE checkpoint quantizes with its routers kept, and stays close to it") {
    TempDir d;
    const std::string src = std::string(HEARTH_SHARED_DIR) + "/fixtures/models/moe-tiny-bf16";
    auto f = Qwen3Model::load(src);
    const std::vector<int32_t> ids = some_ids(100, 1000, 7);
    quant::EvalOptions eo;
    eo.ctx = 48;
    for (int bits : {8, 4}) {
      CAPTURE(bits);
      const std::string out = d.str("q" + std::to_string(bits));
      quant::quantize_checkpoint(src, out, qopts(bits));
      auto q = Qwen3Model::load(out);
      const Qwen3LayerWeights& l0 = q->weights().layers[0];
      REQUIRE(l0.sparse());
      CHECK(l0.router.dtype == DType::BF16);  // kept as it was
      CHECK(l0.expert_gate[3].dtype == (bits == 8 ? DType::Q8 : DType::Q4));
      CHECK(l0.expert_down[7].dtype == (bits == 8 ? DType::Q8 : DType::Q4));
      CHECK(!q->weights().layers[1].sparse());  // mlp_only_layers [1]
      CHECK(q->weights().layers[1].gate_proj.dtype == (bits == 8 ? DType::Q8 : DType::Q4));
      // INT8 barely moves the logits; INT4 more, but it is the same model.
      const quant::EvalReport r = quant::evaluate(*q, *f, ids, eo);
      CHECK(r.kl_mean < (bits == 8 ? 0.002 : 0.05));
      CHECK(r.top1 > (bits == 8 ? 0.9 : 0.5));
      CHECK(q->decode_weight_bytes() < f->decode_weight_bytes());
    }
  }
}
