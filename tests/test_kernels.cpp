// The CPU kernels, each against an independent float64 computation, on every ISA this machine has
// (forcing the lower ones). The first half needs only the kernel table, so it also builds for
// aarch64 and runs under qemu (scripts/test-neon.sh, HEARTH_KERNELS_ONLY); the second half checks
// what the backend builds from the kernels: fusion, the greedy argmax, the GEMM libraries.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cpu/cpu_features.h"
#include "backends/cpu/head_screen.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/ops.h"
#include "backends/cpu/q4_panel.h"
#include "backends/cpu/q8_panel.h"
#include "core/quant_format.h"
#include "tests/quant_placement.h"
#include "tests/random_data.h"

using namespace hearth;
using namespace hearth::cpu;

namespace {

using test::randn;

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
  std::vector<int8_t> c;             // I8: codes,
  std::vector<float> scale, factor;  // a scale per row, a factor per column (keys only)
  const void* data(DType t) const {
    if (t == DType::I8) return c.data();
    return t == DType::F32 ? static_cast<const void*>(f.data()) : h.data();
  }
};
// An I8 KV cache's rows of width hd, quantized here independently of the backend: per row,
// scale = max|x / factor| / 127; f holds code * scale * factor.
Stored store_i8(std::vector<float> v, int hd, bool factors) {
  Stored s;
  const size_t rows = v.size() / size_t(hd);
  s.factor.assign(size_t(hd), 1.f);
  if (factors)  // outlier channels, as k_norm gains make them
    for (int d = 0; d < hd; ++d) s.factor[size_t(d)] = d % 7 == 3 ? 12.f : 0.5f + 0.01f * d;
  s.c.resize(v.size());
  s.scale.resize(rows);
  for (size_t r = 0; r < rows; ++r) {
    double amax = 0;
    for (int d = 0; d < hd; ++d) {
      v[r * hd + d] *= s.factor[size_t(d)];
      amax = std::max(amax, std::fabs(double(v[r * hd + d]) / s.factor[size_t(d)]));
    }
    s.scale[r] = float(amax / 127);
    for (int d = 0; d < hd; ++d) {
      const size_t i = r * size_t(hd) + size_t(d);
      s.c[i] = int8_t(std::nearbyint(double(v[i]) / s.factor[size_t(d)] / s.scale[r]));
      v[i] = float(s.c[i]) * s.scale[r] * s.factor[size_t(d)];
    }
  }
  s.f = std::move(v);
  if (!factors) s.factor.clear();
  return s;
}
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

// --- Q8/Q4 weights, built here from quant/FORMAT.md (independent of quant/) --------------------

// Random codes over the whole range and random signed scales of scale type st, with the exact
// values they stand for (q times an F16/BF16 scale is exact in f32). With a codebook (Q4 only)
// the nibble is a level's index and the value is that level times the scale.
struct QWeights {
  int bits, group;
  DType st;
  int64_t rows, cols;
  const int8_t* codebook;
  std::vector<uint8_t> codes;
  std::vector<uint16_t> scales;
  std::vector<float> deq;  // [rows, cols]
  Tensor view() const {
    return test::quantized_view(bits, rows, cols, codes, scales, st, group, codebook);
  }
};

QWeights make_qweights(int bits, int group, DType st, int64_t rows, int64_t cols, uint32_t seed,
                       const int8_t* codebook = nullptr) {
  QWeights w{bits, group, st, rows, cols, codebook, {}, {}, {}};
  std::mt19937 g(seed);
  const int lo = bits == 8 ? -127 : -8, hi = bits == 8 ? 127 : 7;
  std::uniform_int_distribution<int> code(lo, hi), expo(-3, 3), sign(0, 1);
  std::uniform_real_distribution<float> mant(1.f, 2.f);
  for (int64_t i = 0; i < rows * cols / group; ++i) {
    const float v = (sign(g) ? -1.f : 1.f) * mant(g) * std::ldexp(1e-3f, expo(g));
    w.scales.push_back(st == DType::BF16 ? f32_to_bf16(v) : f32_to_f16(v));
  }
  const int64_t rb = bits == 8 ? cols : cols / 2;
  w.codes.assign(size_t(rows * rb), 0);
  w.deq.assign(size_t(rows * cols), 0.f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < cols; ++i) {
      const int q = code(g);  // with a codebook, q + 8 is the level's index
      const int v = codebook ? codebook[q + 8] : q;
      const uint16_t sc = w.scales[size_t((r * cols + i) / group)];
      w.deq[size_t(r * cols + i)] =
          float(v) * (st == DType::BF16 ? bf16_to_f32(sc) : f16_to_f32(sc));
      bool high;
      uint8_t& byte = w.codes[size_t(r * rb + test::q_place(bits, i, cols, &high))];
      if (bits == 8)
        byte = uint8_t(int8_t(q));
      else
        byte |= uint8_t((q + 8) << (high ? 4 : 0));
    }
  return w;
}

// Sets a Q8 row's low bits (those a Q8 head's screen drops) to all ones where its scale times x is
// positive and to 0 elsewhere, so that the screen's estimate of the row is off by all but the
// rounding margin of its bound (w.deq is left as it was).
void set_worst_low_bits(QWeights& w, int64_t row, const std::vector<float>& x) {
  const int low = (1 << (8 - kScreenQ8Bits)) - 1;
  for (int64_t i = 0; i < w.cols; ++i) {
    bool high;
    auto& c = w.codes[size_t(row * w.cols + test::q_place(8, i, w.cols, &high))];
    const uint16_t sc = w.scales[size_t((row * w.cols + i) / w.group)];
    const float s = w.st == DType::BF16 ? bf16_to_f32(sc) : f16_to_f32(sc);
    c = uint8_t((int8_t(c) & ~low) | (s * x[size_t(i)] > 0 ? low : 0));
  }
}

// Row ranges of the Q8 head tests' 44-row heads: the whole head, an even and an odd number of
// 4-row groups, and a range after another on the same activations (reuse_x).
constexpr std::tuple<int64_t, int64_t, bool> kHeadRanges[] = {
    {0, 44, false}, {4, 40, false}, {8, 20, false}, {24, 44, true}};

// fn(K, group, st) for each width K in ks, groups of 32 and 128, F16 and BF16 scales: the Q8 head
// tests' cases, each captured.
template <class Fn>
void each_q8_head_case(std::initializer_list<int64_t> ks, Fn&& fn) {
  for (const int64_t K : ks)
    for (const int group : {32, 128})
      for (const DType st : {DType::F16, DType::BF16}) {
        CAPTURE(K);
        CAPTURE(group);
        CAPTURE(int(st));
        fn(K, group, st);
      }
}

// The int8 activation rounding of the quantized kernels (scale amax / 127, codes x * (127 / amax)
// rounded to nearest even), in element order.
void quantize_act_ref(const float* x, int64_t k, std::vector<int>& q, std::vector<float>& d) {
  q.assign(size_t(k), 0);
  d.assign(size_t(k / 32), 0.f);
  for (int64_t b = 0; b < k / 32; ++b) {
    float amax = 0.f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[32 * b + i]));
    const float inv = amax > 0.f ? 127.f / amax : 0.f;
    d[size_t(b)] = amax / 127.f;
    for (int i = 0; i < 32; ++i) {
      const float v = x[32 * b + i] * inv;
      q[size_t(32 * b + i)] = int(std::nearbyint(v));
    }
  }
}

// The tables the quantized kernels are checked on: every ISA here, and on NEON also the table
// without dotprod (the plain-NEON fallback), whatever this CPU has.
struct QuantTable {
  std::string name;
  KernelTable kt;
  bool int8_always;  // int8 activations on every path (NEON), so also checked against those
};
std::vector<QuantTable> quant_tables() {
  std::vector<QuantTable> v;
  for (Isa isa : isas_here()) {
    v.push_back({isa_name(isa), make_kernel_table(isa), isa == Isa::Neon});
    // An extension within the level (AVX2's AVX-VNNI, NEON's dotprod) is used where the CPU has
    // it; the table without it is checked too, and with it the two must hold different kernels.
    bool CpuFeatures::*ext = isa == Isa::Avx2   ? &CpuFeatures::avxvnni
                             : isa == Isa::Neon ? &CpuFeatures::neon_dotprod
                                                : nullptr;
    if (!ext) continue;
    CpuFeatures f = detect_cpu_features();
    const bool has = f.*ext;
    const std::string ext_name = isa == Isa::Avx2 ? "avx-vnni" : "dotprod";
    if (has) v.back().name += " " + ext_name;
    f.*ext = false;
    v.push_back({std::string(isa_name(isa)) + " without " + ext_name, make_kernel_table(isa, f),
                 isa == Isa::Neon});
    const KernelTable &a = v[v.size() - 2].kt, &b = v.back().kt;
    CHECK((a.matmul_q8 != b.matmul_q8) == has);
    CHECK((a.matmul_q4 != b.matmul_q4) == has);
    if (isa == Isa::Avx2) CHECK((a.screen_q8 != b.screen_q8) == has);
    if (isa == Isa::Neon) CHECK((a.matmul_q4cb != b.matmul_q4cb) == has);
  }
  return v;
}

// An N x K BF16 matrix over w's values.
Tensor bf16_matrix(const std::vector<uint16_t>& w, int64_t N, int64_t K) {
  Tensor t;
  t.dtype = DType::BF16;
  t.ndim = 2;
  t.shape = {N, K, 0, 0};
  t.data = w.data();
  t.nbytes = w.size() * 2;
  return t;
}

// The quant tables holding a kernel (a KernelTable member), by name; says which, or that none does.
template <class Fn>
std::vector<std::pair<std::string, KernelTable>> tables_with(Fn KernelTable::*kernel,
                                                             const std::string& what) {
  std::vector<std::pair<std::string, KernelTable>> v;
  for (const QuantTable& qt : quant_tables())
    if (qt.kt.*kernel) v.push_back({qt.name, qt.kt});
  if (v.empty()) MESSAGE("no ", what, " kernel on this CPU: the reference only");
  for (const auto& t : v) MESSAGE(what, " checked on: ", t.first);
  return v;
}

}  // namespace

TEST_SUITE("kernels") {
  TEST_CASE("matmul: every type, ISA, row range and token count against float64") {
    for (Isa isa : isas_here()) {
      const KernelTable kt = make_kernel_table(isa);
      for (DType wt : {DType::F32, DType::F16, DType::BF16})
        for (int64_t K : {1, 15, 16, 17, 64, 100, 1024})
          for (int T : {1, 2, 3, 4, 5, 9}) {
            CAPTURE(std::string(isa_name(isa)));
            CAPTURE(std::string(dtype_name(wt)));
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

  TEST_CASE("BF16 rows packed in groups of 16: the products of the copy, against float64") {
    // N = 48 rows (3 groups) against row ranges that start and end inside a group, and 1-12
    // tokens (the packed kernel takes 8 at a time, in pairs of groups).
    const int64_t N = 48;
    for (int64_t K : {32, 96, 1024}) {
      const Stored w = store(DType::BF16, randn(size_t(N * K), 21, 0.1f));
      const auto* rows = static_cast<const uint16_t*>(w.data(DType::BF16));
      std::vector<uint16_t> packed(size_t(N * K)), back(size_t(N * K));
      pack_rows(rows, N, 2 * K, kPackBf16, packed.data());
      std::vector<uint16_t> twice(rows, rows + N * K), packed2(size_t(N * K));
      for (auto& v : twice) v = f32_to_bf16(2 * bf16_to_f32(v));
      pack_rows(twice.data(), N, 2 * K, kPackBf16, packed2.data());
      // A line holds 16 rows' pair of columns: row j's columns (2c, 2c + 1) at 2 (16 c + j).
      CHECK(std::equal(packed.begin(), packed.begin() + 2, rows));            // row 0, pair 0
      CHECK(std::equal(packed.begin() + 2, packed.begin() + 4, rows + K));    // row 1, pair 0
      CHECK(std::equal(packed.begin() + 32, packed.begin() + 34, rows + 2));  // row 0, pair 1
      CHECK(std::equal(packed.begin() + 16 * K, packed.begin() + 16 * K + 2, rows + 16 * K));
      unpack_rows(packed.data(), 3, N - 5, 2 * K, kPackBf16, back.data());
      CHECK(std::equal(back.begin(), back.begin() + (N - 5) * K, rows + 3 * K));
      for (Isa isa : isas_here()) {
        const KernelTable kt = make_kernel_table(isa);
        if (kt.pack_bf16) {  // the same copy by the transposes
          std::vector<uint16_t> p2(size_t(N * K), 0);
          kt.pack_bf16(rows, N, K, p2.data());
          CHECK(p2 == packed);
        }
        if (kt.unpack_bf16)  // whole groups by the transpose; else as unpack_rows
          for (auto [r0, n] : {std::pair<int64_t, int64_t>{16, 32}, {0, N}, {3, N - 5}}) {
            CAPTURE(r0);
            std::vector<uint16_t> un(size_t(n * K), 0);
            kt.unpack_bf16(packed.data(), r0, n, K, un.data());
            CHECK(std::equal(un.begin(), un.end(), rows + r0 * K));
          }
        for (int T : {1, 2, 3, 5, 8, 9, 12}) {
          for (auto [r0, r1] :
               {std::pair<int64_t, int64_t>{0, N}, {3, 45}, {5, 7}, {16, 32}, {0, 32}, {16, 48}}) {
            CAPTURE(std::string(isa_name(isa)));
            CAPTURE(K);
            CAPTURE(T);
            CAPTURE(r0);
            CAPTURE(r1);
            const auto x = randn(size_t(T * K), 22);
            std::vector<float> plain(size_t(T * N), NAN), from_copy(size_t(T * N), NAN);
            std::vector<float> scratch(size_t(K * T) + 16);
            MatmulArgs a{rows, K, x.data(), K, T, plain.data(), N, r0, r1, scratch.data()};
            kt.matmul[type_slot(DType::BF16)](a);
            a.y = from_copy.data();
            a.w_il = packed.data();
            kt.matmul[type_slot(DType::BF16)](a);
            // Both against float64 (the packed kernel sums in another order than the plain one).
            std::vector<double> want;
            std::vector<float> got_plain, got_copy;
            for (int t = 0; t < T; ++t)
              for (int64_t r = r0; r < r1; ++r) {
                double sum = 0;
                for (int64_t i = 0; i < K; ++i)
                  sum += double(x[size_t(t * K + i)]) * bf16_to_f32(rows[r * K + i]);
                want.push_back(sum);
                got_plain.push_back(plain[size_t(t * N + (r - r0))]);
                got_copy.push_back(from_copy[size_t(t * N + (r - r0))]);
              }
            CHECK(nerr(got_plain.data(), want) < 1e-6);
            CHECK(nerr(got_copy.data(), want) < 1e-6);
            // The copy is what the AVX-512 and AVX2 kernels read for whole groups: with every
            // packed weight doubled (exact in bf16) those rows double, the others are the plain
            // ones.
            std::vector<float> doubled(size_t(T * N), NAN);
            a.y = doubled.data();
            a.w_il = packed2.data();
            kt.matmul[type_slot(DType::BF16)](a);
            bool ok = true;
            for (int t = 0; t < T; ++t)
              for (int64_t r = r0; r < r1; ++r) {
                const bool whole = (isa == Isa::Avx512 || isa == Isa::Avx2) && r / 16 * 16 >= r0 &&
                                   r / 16 * 16 + 16 <= r1;
                const size_t i = size_t(t * N + (r - r0));
                ok &= whole ? doubled[i] == 2 * from_copy[i]
                            : std::memcmp(&doubled[i], &plain[i], 4) == 0 &&
                                  std::memcmp(&from_copy[i], &plain[i], 4) == 0;
              }
            CHECK(ok);
            // Nothing outside [r0, r1) is written.
            bool untouched = true;
            for (int t = 0; t < T && r1 - r0 < N; ++t)
              untouched &= std::isnan(from_copy[size_t(t * N + (r1 - r0))]);
            CHECK(untouched);
          }
        }
      }
    }
  }

  TEST_CASE("BF16 coded in 12 bits: its groups decode to the packed copy; its products") {
    // 64 rows (4 groups) of heavy-tailed weights with zeros of both signs, subnormals and tiny
    // values (the exceptions) and, in the last group, one large row that makes its 4 rows'
    // smaller weights exceptions; every ISA's coded kernel against the portable contract bit for
    // bit, and with its exceptions against float64 and the packed kernel.
    const int64_t N = 64;
    for (int64_t K : {32, 96, 1024}) {
      CAPTURE(K);
      std::vector<float> f = randn(size_t(N * K), 31, 0.05f);
      std::mt19937 rng(32);
      for (size_t i = 0; i < f.size(); ++i) {
        const uint32_t pick = rng() % 256;
        if (pick == 0) f[i] = 0.f;
        if (pick == 1) f[i] = -0.f;
        if (pick == 2) f[i] *= 1e-6f;                    // 2^-20 of the others: an exception
        if (pick == 3) f[i] = i % 2 ? 1e-39f : -3e-40f;  // subnormal
        if (pick == 4) f[i] *= 40.f;                     // heavy tail
      }
      for (int64_t c = 0; c < K; ++c) f[size_t(50 * K + c)] = 60.f;
      std::vector<uint16_t> rows(f.size());
      for (size_t i = 0; i < f.size(); ++i) rows[i] = f32_to_bf16(f[i]);
      std::vector<uint16_t> packed(rows.size());
      pack_rows(rows.data(), N, 2 * K, kPackBf16, packed.data());
      std::vector<uint8_t> coded(size_t(coded_bf16_bytes(N, K)));
      code_bf16_groups(rows.data(), N, K, 0, 2, coded.data());  // two calls, as threads split it
      code_bf16_groups(rows.data(), N, K, 2, N / 16, coded.data());
      std::vector<uint8_t> exc(size_t(coded_exceptions_bytes(coded.data(), N, K)));
      code_bf16_exceptions(rows.data(), N, K, coded.data(), 0, 3, exc.data());
      code_bf16_exceptions(rows.data(), N, K, coded.data(), 3, N / 16, exc.data());
      const CodedBf16 view = coded_bf16_view(coded.data(), exc.data(), N);
      const int64_t n_exc = view.exc_off[N / 16];
      CHECK(n_exc > 0);
      CHECK(n_exc < N * K / 32);
      if (K == 1024) CHECK(double(coded.size()) + double(exc.size()) < 0.85 * double(N * K * 2));
      CHECK_FALSE(coded_too_irregular(coded.data(), N, K));
      // Rebuilt with the exceptions: the packed copy bit for bit.
      std::vector<uint16_t> back(rows.size(), 0xFFFF);
      decode_bf16_rows(decode_bf16_coded_scalar, view, K, 0, N, back.data());
      CHECK(back == packed);
      for (Isa isa : isas_here()) {
        const KernelTable kt = make_kernel_table(isa);
        CAPTURE(std::string(isa_name(isa)));
        std::vector<uint16_t> back2(rows.size(), 0xFFFF);
        decode_bf16_rows(kt.decode_bf16_coded, view, K, 16, N - 16, back2.data());
        CHECK(std::equal(back2.begin(), back2.begin() + (N - 16) * K, packed.begin() + 16 * K));
        // An Embed step's rows from a coded table (a tied LM head): the weights bit for bit.
        const std::vector<int32_t> ids{50, 0, 63, 17, 50};
        std::vector<float> emb(ids.size() * size_t(K), NAN);
        embed_coded_rows(bf16_matrix(rows, N, K), view, kt.decode_bf16_coded, ids.data(),
                         emb.data(), 1, int64_t(ids.size()));
        int bad_rows = 0;
        for (size_t j = 1; j < ids.size(); ++j)
          for (int64_t c = 0; c < K; ++c) {
            const float wv = bf16_to_f32(rows[size_t(ids[j] * K + c)]);
            bad_rows += std::memcmp(&wv, &emb[j * size_t(K) + size_t(c)], 4) != 0;
          }
        CHECK(bad_rows == 0);
        CHECK(std::all_of(emb.begin(), emb.begin() + K, [](float v) { return std::isnan(v); }));
        if (!kt.matmul_bf16_coded) continue;
        for (int T : {1, 2, 3, 5, 8, 9, 17}) {
          for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, N}, {16, 48}, {48, 64}, {0, 48}}) {
            CAPTURE(T);
            CAPTURE(r0);
            CAPTURE(r1);
            const auto x = randn(size_t(T * K), 33);
            std::vector<float> got(size_t(T * N), NAN), want(size_t(T * N), NAN);
            std::vector<float> scratch(size_t(8 * K * T) + 16);
            MatmulArgs a{nullptr, K, x.data(), K, T, got.data(), N, r0, r1, scratch.data()};
            a.w_il = coded.data();
            kt.matmul_bf16_coded(a);
            a.y = want.data();
            matmul_bf16_coded_scalar(a);
            CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
            add_coded_exceptions(view, r0, r1, x.data(), K, T, got.data(), N);
            // Against the packed kernel: the same sums where a group has no exceptions.
            std::vector<float> pk(size_t(T * N), NAN);
            MatmulArgs p{rows.data(), K, x.data(), K, T, pk.data(), N, r0, r1, scratch.data()};
            p.w_il = packed.data();
            kt.matmul[type_slot(DType::BF16)](p);
            std::vector<double> ref;
            std::vector<float> mine;
            double worst = 0;
            bool same = true;
            for (int t = 0; t < T; ++t)
              for (int64_t r = r0; r < r1; ++r) {
                double sum = 0, mag = 0;
                for (int64_t i = 0; i < K; ++i) {
                  const double v = double(x[size_t(t * K + i)]) * bf16_to_f32(rows[r * K + i]);
                  sum += v, mag += std::fabs(v);
                }
                const float g = got[size_t(t * N + r - r0)];
                worst = std::max(worst, std::fabs(g - sum) / std::max(mag, 1e-30));
                if (view.exc_off[r / 16] == view.exc_off[r / 16 + 1])
                  same &= std::memcmp(&g, &pk[size_t(t * N + r - r0)], 4) == 0;
              }
            CHECK(worst < 1e-6);
            CHECK(same);
          }
        }
      }
    }
    // A matrix whose rows span more than the codes do almost everywhere is left packed.
    std::vector<uint16_t> wild(16 * 64);
    for (size_t i = 0; i < wild.size(); ++i) wild[i] = f32_to_bf16(i % 2 ? 1e30f : 1e-30f);
    std::vector<uint8_t> coded(size_t(coded_bf16_bytes(16, 64)));
    code_bf16_groups(wild.data(), 16, 64, 0, 1, coded.data());
    CHECK(coded_too_irregular(coded.data(), 16, 64));
  }

  TEST_CASE("the bf16 prefill GEMM on packed rows, against float64 of the bf16 inputs") {
    // 80 rows (5 groups: pairs and a last one alone) against tiles of 12 tokens and every shorter
    // tail, whole-group ranges; k from one line to a few thousand.
    const int64_t N = 80;
    for (int64_t K : {2, 160, 2048})
      for (Isa isa : isas_here()) {
        const KernelTable kt = make_kernel_table(isa);
        if (!kt.gemm_bf16_packed) continue;
        const Stored w = store(DType::BF16, randn(size_t(N * K), 31, 0.1f));
        const auto* rows = static_cast<const uint16_t*>(w.data(DType::BF16));
        std::vector<uint16_t> packed(size_t(N * K));
        pack_rows(rows, N, 2 * K, kPackBf16, packed.data());
        for (int T : {1, 5, 11, 12, 13, 30}) {
          const auto xf = randn(size_t(T * K), uint32_t(32 + T));
          std::vector<uint16_t> x(xf.size());
          for (size_t i = 0; i < x.size(); ++i) x[i] = f32_to_bf16(xf[i]);
          for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, N}, {16, 64}, {32, 48}, {48, 80}}) {
            CAPTURE(std::string(isa_name(isa)));
            CAPTURE(K);
            CAPTURE(T);
            CAPTURE(r0);
            const int64_t ldy = r1 - r0 + 3;
            std::vector<float> y(size_t(T * ldy), NAN);
            kt.gemm_bf16_packed(packed.data(), K, r0, r1, x.data(), K, T, y.data(), ldy);
            // Products of bf16 values are exact in f32: only the sums' rounding differs.
            bool ok = true, untouched = true;
            for (int t = 0; t < T; ++t) {
              for (int64_t r = r0; r < r1; ++r) {
                double sum = 0, mag = 0;
                for (int64_t i = 0; i < K; ++i) {
                  const double p =
                      double(bf16_to_f32(x[size_t(t * K + i)])) * bf16_to_f32(rows[r * K + i]);
                  sum += p, mag += std::fabs(p);
                }
                ok &= std::fabs(y[size_t(t * ldy + (r - r0))] - sum) <= 1e-6 * mag + 1e-30;
              }
              for (int64_t i = r1 - r0; i < ldy; ++i)
                untouched &= std::isnan(y[size_t(t * ldy + i)]);
            }
            CHECK(ok);
            CHECK(untouched);
          }
        }
      }
  }

  // AVX-512 rounds an I8 cache's decode rows' query and softmax weights to 16 bits (round_query16;
  // "I8 decode rows on integer dots" below checks that rule itself): up to ~1e-4 of an output here.
  constexpr double kI8DecodeErr = 3e-4;

  // A kernel call over n_tok tokens' query rows (q and out alike q_stride apart) and one KV head.
  AttentionArgs attention_args(const float* q, int64_t q_stride, float* out, int n_tok, int group,
                               int pos0, const void* k, const void* v, int hd, float* scratch) {
    return {
        q,      q_stride, out, q_stride, n_tok, group, pos0, k, v, hd, 1.f / std::sqrt(float(hd)),
        scratch};
  }

  // Causal GQA attention in float64 over the values the kernel sees (k, v: [position][hd]): token
  // t's query heads j (rows of q, q_stride apart) see positions [0, pos0 + t]; out [t][j][hd].
  std::vector<double> attention_f64(const std::vector<float>& q, int64_t q_stride, int n_tok,
                                    int group, int pos0, const std::vector<float>& k,
                                    const std::vector<float>& v, int hd) {
    std::vector<double> want;
    for (int t = 0; t < n_tok; ++t)
      for (int j = 0; j < group; ++j) {
        const float* qr = q.data() + t * q_stride + j * hd;
        const int n = pos0 + t + 1;
        std::vector<double> s(static_cast<size_t>(n));
        double mx = -1e300, sum = 0;
        for (int p = 0; p < n; ++p) {
          double d = 0;
          for (int i = 0; i < hd; ++i) d += double(qr[i]) * k[size_t(p * hd + i)];
          s[size_t(p)] = d / std::sqrt(double(hd));
          mx = std::max(mx, s[size_t(p)]);
        }
        for (auto& e : s) sum += (e = std::exp(e - mx));
        for (int i = 0; i < hd; ++i) {
          double acc = 0;
          for (int p = 0; p < n; ++p) acc += s[size_t(p)] / sum * v[size_t(p * hd + i)];
          want.push_back(acc);
        }
      }
    return want;
  }

  TEST_CASE("attention: causal GQA over the cache, tiles and row blocks, every KV type") {
    for (Isa isa : isas_here()) {
      const KernelTable kt = make_kernel_table(isa);
      for (DType kvt : {DType::F32, DType::F16, DType::BF16, DType::I8})
        for (int hd : {16, 24, 32, 128})
          for (int group : {1, 2, 5})
            for (auto [n_tok, pos0] : {std::pair{1, 0}, {1, 130}, {7, 3}, {40, 100}}) {
              CAPTURE(std::string(isa_name(isa)));
              CAPTURE(std::string(dtype_name(kvt)));
              CAPTURE(hd);
              CAPTURE(group);
              CAPTURE(n_tok);
              CAPTURE(pos0);
              const int cap = pos0 + n_tok + 3;
              const bool i8 = kvt == DType::I8;
              const Stored k = i8 ? store_i8(randn(size_t(cap * hd), 21), hd, true)
                                  : store(kvt, randn(size_t(cap * hd), 21));
              const Stored v = i8 ? store_i8(randn(size_t(cap * hd), 22), hd, false)
                                  : store(kvt, randn(size_t(cap * hd), 22));
              const int64_t q_stride = int64_t(group) * hd + 8;
              const auto q = randn(size_t(n_tok * q_stride), 23, 0.5f);
              std::vector<float> out(size_t(n_tok * q_stride), NAN);
              std::vector<float> scratch(size_t(attention_scratch_floats(hd)));
              AttentionArgs a = attention_args(q.data(), q_stride, out.data(), n_tok, group, pos0,
                                               k.data(kvt), v.data(kvt), hd, scratch.data());
              if (i8) {
                a.k_scale = k.scale.data();
                a.v_scale = v.scale.data();
                a.k_factor = k.factor.data();
              }
              kt.attention[type_slot(kvt)](a);
              const auto want = attention_f64(q, q_stride, n_tok, group, pos0, k.f, v.f, hd);
              std::vector<float> got;
              for (int t = 0; t < n_tok; ++t)
                for (int j = 0; j < group; ++j)
                  for (int i = 0; i < hd; ++i)
                    got.push_back(out[size_t(t * q_stride + j * hd + i)]);
              CHECK(nerr(got.data(), want) < (i8 ? kI8DecodeErr : 1e-5));
            }
    }
  }

  TEST_CASE("attention over a paged cache: blocks in any order, every KV type") {
    // Blocks laid out as CpuKVStorage's: each holds a head's key rows, its value rows and (I8)
    // their scales, block_stride bytes apart within an extent of 2^shift blocks (extents a
    // further extent_skip apart), the sequence's blocks in a shuffled order; decode rows read
    // them in place and prefetch the next call's rows (next_k, next_v).
    const int hd = 128, group = 2;
    for (Isa isa : isas_here()) {
      const KernelTable kt = make_kernel_table(isa);
      for (DType kvt : {DType::F32, DType::F16, DType::BF16, DType::I8})
        for (int bs : {16, 32})
          for (int shift : {0, 1})
            for (auto [n_tok, pos0] : {std::pair{1, 0}, {1, 31}, {1, 150}, {5, 70}, {20, 40}}) {
              CAPTURE(std::string(isa_name(isa)));
              CAPTURE(std::string(dtype_name(kvt)));
              CAPTURE(bs);
              CAPTURE(shift);
              CAPTURE(n_tok);
              CAPTURE(pos0);
              const bool i8 = kvt == DType::I8;
              const int n_pos = pos0 + n_tok, nb = (n_pos + bs - 1) / bs, cap = nb * bs;
              const Stored k = i8 ? store_i8(randn(size_t(cap * hd), 31), hd, true)
                                  : store(kvt, randn(size_t(cap * hd), 31));
              const Stored v = i8 ? store_i8(randn(size_t(cap * hd), 32), hd, false)
                                  : store(kvt, randn(size_t(cap * hd), 32));
              const size_t esz = dtype_size(kvt), rows = size_t(bs) * hd * esz;
              const size_t stride = (2 * rows + 2 * size_t(bs) * 4 + 63) / 64 * 64;
              std::vector<int32_t> table(static_cast<size_t>(nb));
              for (int b = 0; b < nb; ++b)
                table[size_t(b)] = 2 * (nb - b) - 1;       // backwards, with gaps
              const size_t skip = shift ? 3 * stride : 0;  // extents apart by three more blocks
              auto at_block = [&](int b) { return size_t(b) * stride + size_t(b >> shift) * skip; };
              std::vector<uint8_t> mem(at_block(2 * nb) + stride, 0xFF);
              for (int p = 0; p < cap; ++p) {
                uint8_t* blk = mem.data() + at_block(table[size_t(p / bs)]);
                const size_t at = size_t(p % bs);
                std::memcpy(blk + at * hd * esz,
                            static_cast<const uint8_t*>(k.data(kvt)) + size_t(p) * hd * esz,
                            hd * esz);
                std::memcpy(blk + rows + at * hd * esz,
                            static_cast<const uint8_t*>(v.data(kvt)) + size_t(p) * hd * esz,
                            hd * esz);
                if (i8) {
                  std::memcpy(blk + 2 * rows + at * 4, &k.scale[size_t(p)], 4);
                  std::memcpy(blk + 2 * rows + size_t(bs) * 4 + at * 4, &v.scale[size_t(p)], 4);
                }
              }
              const int64_t q_stride = int64_t(group) * hd;
              const auto q = randn(size_t(n_tok * q_stride), 33, 0.5f);
              std::vector<float> out(size_t(n_tok * q_stride), NAN);
              std::vector<float> scratch(size_t(attention_scratch_floats(hd)));
              AttentionArgs a = attention_args(q.data(), q_stride, out.data(), n_tok, group, pos0,
                                               mem.data(), mem.data() + rows, hd, scratch.data());
              a.paging = {table.data(), bs, int64_t(stride), shift, int64_t(skip)};
              a.next_k = mem.data() + stride;
              a.next_v = mem.data() + stride + rows;
              if (i8) {
                a.k_scale = reinterpret_cast<const float*>(mem.data() + 2 * rows);
                a.v_scale = reinterpret_cast<const float*>(mem.data() + 2 * rows + size_t(bs) * 4);
                a.k_factor = k.factor.data();
              }
              kt.attention[type_slot(kvt)](a);
              const auto want = attention_f64(q, q_stride, n_tok, group, pos0, k.f, v.f, hd);
              CHECK(nerr(out.data(), want) < (i8 ? kI8DecodeErr : 1e-5));
            }
    }
  }

  TEST_CASE("I8 decode rows on integer dots, against float64 over the rounded query") {
    // AVX-512 takes an I8 cache's decode rows in integers: the query times the key factors rounded
    // by round_query16, the softmax weights times the value scales to 16 bits of their tile's
    // largest. The scores alone make the maximum m and the sum l of exp(s - m) (AttentionArgs::ml):
    // those must match float64 over the rounded query to f32 rounding, ~30x closer than the exact
    // query's (which the other ISAs match instead). The outputs carry the weights' rounding too.
    double apart = 0;  // how far the rounded rows' sums land from the exact query's
    for (Isa isa : isas_here()) {
      const KernelTable kt = make_kernel_table(isa);
      const bool rounds = isa == Isa::Avx512;
      for (int hd : {64, 128, 256})
        for (int group : {1, 2, 4, 5, 6, 8})  // Qwen3 has 2, 4 and 8; odd ones end on a single row
          for (int pos0 : {0, 37, 200}) {
            CAPTURE(std::string(isa_name(isa)));
            CAPTURE(hd);
            CAPTURE(group);
            CAPTURE(pos0);
            const int n = pos0 + 1;
            const Stored k = store_i8(randn(size_t(n * hd), 41), hd, true);
            const Stored v = store_i8(randn(size_t(n * hd), 42), hd, false);
            const int64_t q_stride = int64_t(group) * hd;
            const auto q = randn(size_t(q_stride), 43, 0.5f);
            std::vector<float> out(size_t(q_stride), NAN), ml(size_t(2 * group), NAN);
            std::vector<float> scratch(size_t(attention_scratch_floats(hd)));
            AttentionArgs a =
                attention_args(q.data(), q_stride, out.data(), 1, group, pos0, k.data(DType::I8),
                               v.data(DType::I8), hd, scratch.data());
            a.k_scale = k.scale.data();
            a.v_scale = v.scale.data();
            a.k_factor = k.factor.data();
            a.ml = ml.data();
            kt.attention[type_slot(DType::I8)](a);
            for (int j = 0; j < group; ++j) {
              // Row j's query as the kernel rounds it, and as it is.
              std::vector<float> x(static_cast<size_t>(hd));
              std::vector<int16_t> c(static_cast<size_t>(hd));
              for (int d = 0; d < hd; ++d)
                x[size_t(d)] = q[size_t(j * hd + d)] * k.factor[size_t(d)];
              const float qs = round_query16(x.data(), hd, c.data());
              // Scores in float64 (over k.f, which carries the factors), their max and sum.
              auto stats = [&](bool rounded, std::vector<double>* e) {
                double m = -1e300, l = 0, mag = 0;  // mag: the largest sum of |products|
                std::vector<double> sc(static_cast<size_t>(n));
                for (int p = 0; p < n; ++p) {
                  double dot = 0, abs = 0;
                  for (int d = 0; d < hd; ++d) {
                    const double qd = rounded ? double(c[size_t(d)]) * qs / k.factor[size_t(d)]
                                              : q[size_t(j * hd + d)];
                    dot += qd * k.f[size_t(p * hd + d)];
                    abs += std::fabs(qd * k.f[size_t(p * hd + d)]);
                  }
                  sc[size_t(p)] = dot * a.scale;
                  m = std::max(m, sc[size_t(p)]);
                  mag = std::max(mag, abs * a.scale);
                }
                e->assign(size_t(n), 0.);
                for (int p = 0; p < n; ++p) l += ((*e)[size_t(p)] = std::exp(sc[size_t(p)] - m));
                return std::tuple{m, l, mag};
              };
              std::vector<double> e_round, e_exact;
              const auto [m_r, l_r, mag] = stats(true, &e_round);
              const auto exact = stats(false, &e_exact);
              const double m_e = std::get<0>(exact), l_e = std::get<1>(exact);
              const double m_want = rounds ? m_r : m_e, l_want = rounds ? l_r : l_e;
              const float m_got = ml[size_t(2 * j)], l_got = ml[size_t(2 * j + 1)];
              CHECK(std::fabs(m_got - m_want) <= 2e-7 * mag);
              CHECK(std::fabs(l_got - l_want) <= 4e-6 * l_want);
              if (rounds) apart = std::max(apart, std::fabs(l_got - l_e) / l_e);
              // out = sum exp(s - m) v, unnormalised; against the reference's weights.
              const auto& e = rounds ? e_round : e_exact;
              std::vector<double> want(static_cast<size_t>(hd), 0.);
              for (int p = 0; p < n; ++p)
                for (int d = 0; d < hd; ++d)
                  want[size_t(d)] += e[size_t(p)] * v.f[size_t(p * hd + d)];
              CHECK(nerr(out.data() + j * hd, want) < (rounds ? 1e-4 : 1e-5));
            }
          }
    }
    if (detect_cpu_features().best() == Isa::Avx512) CHECK(apart > 25 * 4e-6);
  }

  TEST_CASE("KV rows: to_f16, to_bf16 and quantize_kv_row of every ISA as the scalar reference") {
    // Magnitudes from f16 subnormals to past its range (inf), head sizes with and without a tail
    // of a vector, a row of zeros and rows holding an inf or a NaN.
    std::vector<std::vector<float>> rows;
    for (int n : {8, 64, 72, 100, 128, 256})
      for (float mag : {1e-6f, 3.f, 3e4f}) rows.push_back(randn(size_t(n), uint32_t(n + mag), mag));
    rows.push_back(std::vector<float>(128, 0.f));
    // Exact ties of both roundings, to an even and to an odd neighbour: bf16's at bit 15, f16's at
    // bit 12 (random values almost never hit them).
    rows.emplace_back();
    for (uint32_t k = 0; k < 32; ++k)
      for (uint32_t low : {0x8000u, 0x1000u | (k & 1) << 13}) {
        const uint32_t u = (0x3F800000u + (k << 16)) | low;
        float f;
        std::memcpy(&f, &u, 4);
        rows.back().push_back(f);
      }
    rows.push_back(randn(128, 5, 2.f));
    rows.back()[17] = INFINITY;
    rows.push_back(randn(72, 6, 2.f));
    rows.back()[70] = NAN;
    std::vector<float> factor(256);
    for (size_t d = 0; d < factor.size(); ++d) factor[d] = d % 9 == 4 ? 12.f : 0.5f + 0.01f * d;
    for (Isa isa : isas_here()) {
      CAPTURE(isa_name(isa));
      const KernelTable kt = make_kernel_table(isa);
      for (size_t r = 0; r < rows.size(); ++r) {
        CAPTURE(r);
        const std::vector<float>& x = rows[r];
        const int64_t n = int64_t(x.size());
        std::vector<uint16_t> h(x.size()), b(x.size());
        kt.to_f16(x.data(), h.data(), n);
        kt.to_bf16(x.data(), b.data(), n);
        for (size_t i = 0; i < x.size(); ++i) {
          if (std::isnan(x[i])) {
            CHECK(std::isnan(f16_to_f32(h[i])));
            continue;
          }
          CHECK(h[i] == f32_to_f16(x[i]));
          if (std::fabs(x[i]) >= 1.2e-38f) CHECK(b[i] == f32_to_bf16(x[i]));  // subnormals: zero
        }
        for (const float* f : std::initializer_list<const float*>{nullptr, factor.data()}) {
          std::vector<int8_t> want(x.size()), got(x.size() + 16, 99);
          float want_scale = -1, got_scale = -2;
          quantize_kv_row(x.data(), f, n, want.data(), &want_scale);
          kt.quantize_kv_row(x.data(), f, n, got.data(), &got_scale);
          CHECK(std::memcmp(&want_scale, &got_scale, 4) == 0);
          CHECK(std::equal(want.begin(), want.end(), got.begin()));
          CHECK(std::all_of(got.begin() + n, got.end(), [](int8_t c) { return c == 99; }));
        }
      }
    }
  }

  TEST_CASE("I8 KV rows: quantize_kv_row and the key factors") {
    const int hd = 128;
    const auto x = randn(size_t(hd), 71, 3.f);
    std::vector<float> factor(static_cast<size_t>(hd));
    for (int d = 0; d < hd; ++d) factor[size_t(d)] = d == 5 ? 20.f : 1.f + 0.01f * d;
    for (bool with_factor : {false, true}) {
      CAPTURE(with_factor);
      const float* f = with_factor ? factor.data() : nullptr;
      std::vector<int8_t> codes(static_cast<size_t>(hd));
      float scale = -1;
      quantize_kv_row(x.data(), f, hd, codes.data(), &scale);
      double amax = 0;
      for (int d = 0; d < hd; ++d)
        amax = std::max(amax, std::fabs(double(x[size_t(d)]) / (f ? f[d] : 1)));
      CHECK(scale == doctest::Approx(amax / 127).epsilon(1e-6));
      int at_max = 0;
      for (int d = 0; d < hd; ++d) {
        const double y = double(x[size_t(d)]) / (f ? f[d] : 1) / scale;
        CHECK(std::fabs(y - codes[size_t(d)]) <= 0.5 + 1e-4);  // rounded to nearest
        at_max += std::abs(codes[size_t(d)]) == 127;
      }
      CHECK(at_max >= 1);
    }
    std::vector<int8_t> codes(static_cast<size_t>(hd), 1);
    std::vector<float> zeros(static_cast<size_t>(hd), 0.f);
    float scale = -1;
    quantize_kv_row(zeros.data(), nullptr, hd, codes.data(), &scale);
    CHECK(scale == 0.f);
    CHECK(std::all_of(codes.begin(), codes.end(), [](int8_t c) { return c == 0; }));

    // RoPE rotates channel d with d + hd/2, so both get the larger gain; a zero gain is floored.
    std::vector<float> w(8, 1.f);
    w[1] = -6.f;
    w[6] = 0.f;
    w[2] = 0.f;
    const std::vector<float> kf = kv_key_factors(w.data(), 8);
    CHECK(kf == std::vector<float>{1.f, 6.f, 6.f * 1e-3f, 1.f, 1.f, 6.f, 6.f * 1e-3f, 1.f});
  }

  TEST_CASE("attention over position ranges merges to the whole") {
    const int hd = 128, group = 2, n_pos = 300;
    for (Isa isa : isas_here())
      for (DType kvt : {DType::F32, DType::BF16, DType::I8})
        for (int n_tok : {1, 8, 16}) {  // whole blocks of 16 and 32 query rows
          CAPTURE(std::string(isa_name(isa)));
          CAPTURE(std::string(dtype_name(kvt)));
          CAPTURE(n_tok);
          const KernelTable kt = make_kernel_table(isa);
          const int rows = n_tok * group;
          const bool i8 = kvt == DType::I8;
          const Stored k = i8 ? store_i8(randn(size_t(n_pos * hd), 61), hd, true)
                              : store(kvt, randn(size_t(n_pos * hd), 61));
          const Stored v = i8 ? store_i8(randn(size_t(n_pos * hd), 62), hd, false)
                              : store(kvt, randn(size_t(n_pos * hd), 62));
          const auto q = randn(size_t(rows * hd), 63);
          std::vector<float> scratch(size_t(attention_scratch_floats(hd)));
          AttentionArgs a =
              attention_args(q.data(), group * hd, nullptr, n_tok, group, n_pos - n_tok,
                             k.data(kvt), v.data(kvt), hd, scratch.data());
          if (i8) {
            a.k_scale = k.scale.data();
            a.v_scale = v.scale.data();
            a.k_factor = k.factor.data();
          }
          std::vector<float> whole(size_t(rows * hd));
          a.out = whole.data();
          kt.attention[type_slot(kvt)](a);
          // Three ranges, one of them not tile-aligned, merged by their {max, sum} statistics.
          const int cuts[] = {0, 70, 200, n_pos};
          std::vector<float> merged(size_t(rows * hd), 0.f), part(size_t(rows * hd));
          std::vector<float> m(static_cast<size_t>(rows), -INFINITY),
              l(static_cast<size_t>(rows), 0.f);
          std::vector<float> ml(size_t(2 * rows));
          for (int p = 0; p < 3; ++p) {
            a.out = part.data();
            a.kv_begin = cuts[p];
            a.kv_end = cuts[p + 1];
            a.ml = ml.data();
            kt.attention[type_slot(kvt)](a);
            for (int j = 0; j < rows; ++j) {
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
          for (int j = 0; j < rows; ++j)
            for (int d = 0; d < hd; ++d) merged[size_t(j * hd + d)] /= l[size_t(j)];
          // An I8 cache's decode rows round each tile's weights to 16 bits of the tile's
          // largest, and the ranges cut the tiles elsewhere.
          CHECK(nerr(merged.data(), want) < (i8 ? 1e-4 : 1e-6));
        }
  }

  TEST_CASE("silu_mul, to_bf16 and read_sum against float64") {
    std::vector<float> a = randn(1000, 31, 4.f), b = randn(1000, 32);
    a[3] = -100.f, a[4] = 100.f, a[5] = -87.5f, a[6] = 88.5f, a[7] = 0.f;  // exp's clamps
    for (Isa isa : isas_here()) {
      const KernelTable kt = make_kernel_table(isa);
      CAPTURE(std::string(isa_name(isa)));
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
      // The int8 peak loop exists where an int8 GEMM does; its 16 chains of 16 lanes (AVX-512)
      // or 8 (AVX-VNNI) start at 0..15 and each step adds 4 products of 3 and -2 to every lane.
      CHECK((kt.dot_i8_loop != nullptr) == kt.quant_prefill);
      if (kt.dot_i8_loop) {
        const int lanes = isa == Isa::Avx512 ? 16 : 8;
        double ops = 0;
        CHECK(kt.dot_i8_loop(1000, &ops) == float(lanes * 120 - 16 * lanes * 24 * 1000));
        CHECK(ops == 1000.0 * 16 * lanes * 4 * 2);
      }
      // The bf16 one with every AVX-512 table; each step adds 2 x 0.5 x 0.5 to every lane.
      CHECK((kt.dot_bf16_loop != nullptr) == (isa == Isa::Avx512));
      if (kt.dot_bf16_loop) {
        double flops = 0;
        CHECK(kt.dot_bf16_loop(1000, &flops) == float(16 * 120 + 256 * 500));
        CHECK(flops == 1000.0 * 16 * 32 * 2);
      }
    }
  }

  TEST_CASE("screen_select: the 4-row groups that reach the bound, on every ISA") {
    // NaN estimates and bounds, a short last group, a bound no row reaches.
    std::mt19937 g(3);
    std::normal_distribution<float> nd;
    for (const int64_t n : {4096, 100, 36, 7, 4}) {
      std::vector<float> est(static_cast<size_t>(n)), hw(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) est[size_t(i)] = nd(g), hw[size_t(i)] = 0.5f + 0.1f * nd(g);
      est[size_t(n / 2)] = NAN;
      hw[size_t(n - 1)] = NAN;
      for (const float start : {-INFINITY, 1.f, 10.f}) {
        // The reference: the largest est - hw (NaNs skipped), then each group's largest upper
        // bound (NaNs skipped).
        float lower = start;
        for (int64_t i = 0; i < n; ++i)
          if (est[size_t(i)] - hw[size_t(i)] > lower) lower = est[size_t(i)] - hw[size_t(i)];
        std::vector<ScreenCandidate> want;
        for (int64_t g0 = 0; g0 < n; g0 += 4) {
          float up = -INFINITY;
          for (int64_t i = g0; i < std::min(n, g0 + 4); ++i)
            if (est[size_t(i)] + hw[size_t(i)] > up) up = est[size_t(i)] + hw[size_t(i)];
          if (up >= lower) want.push_back({int32_t(8 + g0), up});
        }
        for (Isa isa : isas_here()) {
          CAPTURE(n);
          CAPTURE(start);
          CAPTURE(std::string(isa_name(isa)));
          const KernelTable kt = make_kernel_table(isa);
          std::vector<ScreenCandidate> got(size_t(n + 16));
          float got_lower = start;
          got.resize(size_t(kt.screen_select(est.data(), hw.data(), n, 8, &got_lower, got.data())));
          CHECK(got_lower == lower);
          bool same = got.size() == want.size();
          for (size_t i = 0; same && i < got.size(); ++i)
            same = got[i].row == want[i].row && got[i].upper == want[i].upper;
          CHECK(same);
        }
      }
    }
  }

  TEST_CASE("rms_norm and widen against float64") {
    for (Isa isa : isas_here()) {
      const KernelTable kt = make_kernel_table(isa);
      CAPTURE(std::string(isa_name(isa)));
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
      CAPTURE(std::string(isa_name(isa)));
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

  TEST_CASE("Q8/Q4 panels of another matrix: decode and the int8 GEMM read whole groups from it") {
    // The panel copy holds other codes and scales: rows the kernel takes from it give that
    // matrix's products, the others (outside whole 16-row groups) the true one's.
    const int8_t cb[16] = {-127, -91, -66, -46, -31, -19, -10, -4, 0, 5, 12, 22, 35, 52, 75, 105};
    const int64_t N = 48, k = 256;
    for (int variant : {8, 4, 0}) {  // 0: Q4 with a codebook
      const int bits = variant ? variant : 4;
      const int8_t* codebook = variant ? nullptr : cb;
      const QWeights w = make_qweights(bits, 32, DType::F16, N, k, 77, codebook);
      const QWeights other = make_qweights(bits, 32, DType::F16, N, k, 78, codebook);
      std::vector<uint8_t> panel(size_t((bits == 8 ? q8_panel_bytes : q4_panel_bytes)(N, k, 32)));
      (bits == 8 ? pack_q8_panel : pack_q4_panel)(other.codes.data(), other.scales.data(), k, 32, 0,
                                                  N, panel.data());
      for (const QuantTable& qt : quant_tables())
        for (int T : {1, 3, 8, 20, 37})
          // Whole groups are read two at a time: {0, 48} leaves a third one alone.
          for (auto [r0, r1] :
               {std::pair<int64_t, int64_t>{0, N}, {2, 46}, {8, 40}, {4, 16}, {16, 48}}) {
            CAPTURE(qt.name);
            CAPTURE(variant);
            CAPTURE(T);
            CAPTURE(r0);
            const bool reads = bits == 8 ? qt.kt.q8_panel : qt.kt.q4_panel;
            const auto x = randn(size_t(T * k), uint32_t(90 + T));
            std::vector<float> scratch(size_t(quant_matmul_scratch_floats(k, T)));
            auto run = [&](const QWeights& m, const void* il) {
              std::vector<float> y(size_t(T * N), NAN);
              QuantMatmulArgs a =
                  test::quant_args({m.codes.data(), m.scales.data(), DType::F16, 32, codebook, k},
                                   x.data(), k, T, y.data(), N, r0, r1, scratch.data());
              a.w_il = il;
              (bits == 8 ? qt.kt.matmul_q8 : codebook ? qt.kt.matmul_q4cb : qt.kt.matmul_q4)(a);
              return y;
            };
            const auto mine = run(w, nullptr);
            const auto theirs = run(other, nullptr);
            const auto got = run(w, panel.data());
            bool ok = true;
            for (int t = 0; t < T; ++t)
              for (int64_t r = r0; r < r1; ++r) {
                const size_t i = size_t(t * N + (r - r0));
                const int64_t g = r / kQ4PanelRows * kQ4PanelRows;
                const bool whole = reads && g >= r0 && g + kQ4PanelRows <= r1;
                const float want = whole ? theirs[i] : mine[i];
                ok &= std::fabs(got[i] - want) <= 1e-5f * (1 + std::fabs(want));
              }
            CHECK(ok);
          }
    }
  }

  TEST_CASE("Q4 and Q8 panels: the copy unpacks to its rows, and the kernels read it as the rows") {
    const int8_t cb[16] = {-127, -90, -66, -46, -31, -19, -10, -4, 0, 5, 12, 22, 35, 52, 75, 127};
    const int64_t N = 64, k = 384;
    for (const int variant : {4, 8, 0})  // 0: Q4 with a codebook
      for (auto [group, st] : {std::pair{32, DType::F16}, {64, DType::BF16}, {128, DType::F16}}) {
        CAPTURE(variant);
        CAPTURE(group);
        const int bits = variant ? variant : 4;
        const int8_t* codebook = variant ? nullptr : cb;
        const bool q8 = bits == 8;
        const int64_t row_bytes = k * bits / 8;
        const QWeights w = make_qweights(bits, group, st, N, k, 83, codebook);
        std::vector<uint8_t> panel(size_t((q8 ? q8_panel_bytes : q4_panel_bytes)(N, k, group)));
        for (int64_t r = 0; r < N; r += 16)  // in slices, as the backend's threads make it
          (q8 ? pack_q8_panel : pack_q4_panel)(w.codes.data(), w.scales.data(), k, group, r, r + 16,
                                               panel.data());
        std::vector<uint8_t> codes(size_t(16 * row_bytes));
        std::vector<uint16_t> scales(size_t(16 * k / group));
        (q8 ? unpack_q8_panel : unpack_q4_panel)(panel.data(), k, group, 32, 16, codes.data(),
                                                 scales.data());
        CHECK(std::equal(codes.begin(), codes.end(), w.codes.begin() + 32 * row_bytes));
        CHECK(std::equal(scales.begin(), scales.end(), w.scales.begin() + 32 * (k / group)));
        // The panel run gets zero codes and scales as w: every row must come from the panel.
        const std::vector<uint8_t> zero_codes(w.codes.size(), 0);
        const std::vector<uint16_t> zero_scales(w.scales.size(), 0);
        for (const QuantTable& qt : quant_tables()) {
          if (!(q8 ? qt.kt.q8_panel : qt.kt.q4_panel)) continue;
          // 1 (pairs of groups and a last one alone), 2-31 (tiles of 8 and a tail), 32+ (GEMM).
          for (int T : {1, 2, 3, 4, 5, 8, 9, 15, 31, 32, 45})
            for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, N}, {16, 64}, {0, 48}, {32, 48}}) {
              CAPTURE(T);
              CAPTURE(r0);
              CAPTURE(r1);
              const auto x = randn(size_t(T * k), uint32_t(200 + T));
              std::vector<float> scratch(size_t(quant_matmul_scratch_floats(k, T)));
              auto run = [&](const uint8_t* c, const uint16_t* sc, const void* il) {
                std::vector<float> y(size_t(T * N), NAN);
                QuantMatmulArgs a = test::quant_args({c, sc, st, group, codebook, k}, x.data(), k,
                                                     T, y.data(), N, r0, r1, scratch.data());
                a.w_il = il;
                (q8 ? qt.kt.matmul_q8 : codebook ? qt.kt.matmul_q4cb : qt.kt.matmul_q4)(a);
                return y;
              };
              const auto want = run(w.codes.data(), w.scales.data(), nullptr);
              const auto got = run(zero_codes.data(), zero_scales.data(), panel.data());
              bool ok = true;
              for (int t = 0; t < T; ++t)
                for (int64_t r = r0; r < r1; ++r) {
                  const size_t i = size_t(t * N + (r - r0));
                  ok &= std::fabs(got[i] - want[i]) <= 1e-5f * (1 + std::fabs(want[i]));
                }
              CHECK(ok);
            }
        }
      }
  }

  TEST_CASE("embedding rows from a packed copy (a tied LM head's) are the table's rows") {
    const int8_t cb[16] = {-127, -91, -66, -46, -31, -19, -10, -4, 0, 5, 12, 22, 35, 52, 75, 105};
    const int64_t N = 32, k = 384;
    // Q4, Q8 and Q4 with a codebook (0), as panels.
    for (int variant : {4, 8, 0}) {
      CAPTURE(variant);
      const int bits = variant == 8 ? 8 : 4;
      const QWeights w = make_qweights(bits, 64, DType::BF16, N, k, 81, variant ? nullptr : cb);
      Tensor t = w.view();
      std::vector<uint8_t> packed(size_t((bits == 8 ? q8_panel_bytes : q4_panel_bytes)(N, k, 64)));
      (bits == 8 ? pack_q8_panel : pack_q4_panel)(w.codes.data(), w.scales.data(), k, 64, 0, N,
                                                  packed.data());
      t.scales = nullptr;  // the panel's own scales are read (the backend hands w's back)
      const std::vector<int32_t> ids = {11, 0, 5, 4, 11, 31, 16};
      const int64_t T = int64_t(ids.size());
      std::vector<float> got(size_t(T * k), NAN), plain(size_t(T * k), NAN);
      embed_rows(t, packed.data(), true, ids.data(), got.data(), 1, T);  // rows 1.. only
      embed_rows(w.view(), nullptr, false, ids.data(), plain.data(), 1, T);
      bool ok = true;
      for (int64_t c = 0; c < k; ++c) ok &= std::isnan(got[size_t(c)]);  // row 0 untouched
      for (int64_t i = 1; i < T; ++i)
        for (int64_t c = 0; c < k; ++c) {
          const float want = w.deq[size_t(ids[size_t(i)] * k + c)];  // independent dequantization
          ok &= got[size_t(i * k + c)] == want && plain[size_t(i * k + c)] == want;
        }
      CHECK(ok);
    }
  }

  TEST_CASE("quant_act: the int8 GEMM's activations against a float reference") {
    // Element order, amax / 127 per block, nearest even; a block of zeros has scale 0 and a block
    // with a NaN a NaN scale (so every dot it enters is NaN) and no codes.
    const int64_t k = 160;
    std::vector<float> x = randn(size_t(k), 5, 3.f);
    x[3] = 12.7f, x[4] = -0.5f * x[3] / 127.f * 3.f;  // a tie: 1.5 steps rounds to 2
    for (int i = 32; i < 64; ++i) x[size_t(i)] = 0.f;
    x[70] = NAN;
    std::vector<int> want_q;
    std::vector<float> want_d;
    quantize_act_ref(x.data(), k, want_q, want_d);
    for (const QuantTable& qt : quant_tables()) {
      if (!qt.kt.quant_act) continue;
      CAPTURE(qt.name);
      std::vector<int8_t> q(size_t(k), 99);
      std::vector<float> d(size_t(k / 32));
      std::vector<int32_t> sum(size_t(k / 32));
      qt.kt.quant_act(x.data(), k, q.data(), d.data(), sum.data());
      for (int64_t b = 0; b < k / 32; ++b) {
        CAPTURE(b);
        int32_t want_sum = 0;
        bool codes_ok = true;
        for (int i = 0; i < 32; ++i) {
          const int w = b == 2 ? 0 : want_q[size_t(32 * b + i)];
          codes_ok &= q[size_t(32 * b + i)] == w;
          want_sum += w;
        }
        CHECK(codes_ok);
        CHECK(sum[size_t(b)] == want_sum);
        if (b == 2)
          CHECK(std::isnan(d[size_t(b)]));
        else
          CHECK(d[size_t(b)] == want_d[size_t(b)]);
      }
    }
  }

  TEST_CASE("Q8/Q4 matmul and dequant: groups, scale types, short chunks, row ranges, tokens") {
    // Q4 with a codebook: non-uniform, asymmetric, both extremes of the int8 range and a zero.
    const int8_t cb[16] = {-127, -91, -66, -46, -31, -19, -10, -4, 0, 5, 12, 22, 35, 52, 75, 105};
    struct Shape {
      int64_t rows, cols;  // cols % 128 / 32: the blocks of the short last chunk
    };
    // {21, 224}: more rows than the AVX-VNNI GEMM's 16-row panels, with a short last chunk.
    const Shape shapes[] = {{11, 128}, {11, 160}, {9, 96},   {10, 320},
                            {13, 224}, {7, 32},   {9, 1024}, {21, 224}};
    for (const QuantTable& qt : quant_tables()) {
      MESSAGE("Q8/Q4 kernels checked on: ", qt.name);
      for (int variant : {8, 4, 0})  // 0: Q4 with a codebook
        for (int group : {32, 64, 128})
          for (DType st : {DType::F16, DType::BF16})
            for (Shape sh : shapes) {
              if (sh.cols % group) continue;
              const int64_t k = sh.cols, r0 = 2, r1 = sh.rows - 1;
              const int bits = variant ? variant : 4;
              const int8_t* codebook = variant ? nullptr : cb;
              CAPTURE(qt.name);
              CAPTURE(variant);
              CAPTURE(group);
              const std::string scale_type = dtype_name(st);
              CAPTURE(scale_type);
              CAPTURE(k);
              const QWeights w = make_qweights(bits, group, st, sh.rows, k,
                                               uint32_t(variant * 1000 + group * 10 + k), codebook);
              // Dequantized rows [r0, r1): exactly the weights' values, or their bf16 rounding.
              const QuantDequantFn deq = variant == 8   ? qt.kt.dequant_q8
                                         : variant == 4 ? qt.kt.dequant_q4
                                                        : qt.kt.dequant_q4cb;
              std::vector<float> f32(size_t((r1 - r0) * k));
              std::vector<uint16_t> b16(size_t((r1 - r0) * k));
              deq(w.view(), r0, r1 - r0, f32.data(), false);
              deq(w.view(), r0, r1 - r0, b16.data(), true);
              bool deq_ok = true, bf16_ok = true;
              for (size_t i = 0; i < f32.size(); ++i) {
                deq_ok &= f32[i] == w.deq[size_t(r0 * k) + i];
                bf16_ok &= b16[i] == f32_to_bf16(w.deq[size_t(r0 * k) + i]);
              }
              CHECK(deq_ok);
              CHECK(bf16_ok);

              for (int T : {1, 2, 3, 4, 5, 6, 7, 9, 15, 16, 31, 40}) {
                CAPTURE(T);
                const int64_t ldx = k + 5, ldy = r1 - r0 + 3;
                std::vector<float> x = randn(size_t(T * ldx), uint32_t(T + k));
                x[5] = 9.f;  // an outlier: its block's other codes get coarse
                if (T > 1)   // a block of zeros: scale 0
                  for (int i = 0; i < 32; ++i) x[size_t(ldx + i)] = 0.f;
                std::vector<float> y(size_t(T * ldy), NAN);
                std::vector<float> scratch(size_t(quant_matmul_scratch_floats(k, T)));
                QuantMatmulArgs a = test::quant_args(
                    {w.codes.data(), w.scales.data(), st, group, codebook, k}, x.data(), ldx, T,
                    y.data() + 1, ldy, r0, r1, scratch.data());  // y + 1: row r0's output
                (variant == 8   ? qt.kt.matmul_q8
                 : variant == 4 ? qt.kt.matmul_q4
                                : qt.kt.matmul_q4cb)(a);
                std::vector<float> got;
                std::vector<double> want;
                bool bounded = true, int8_ok = true, untouched = true;
                std::vector<int> xq;
                std::vector<float> xd;
                for (int t = 0; t < T; ++t) {
                  const float* xt = x.data() + t * ldx;
                  quantize_act_ref(xt, k, xq, xd);
                  for (int64_t r = r0; r < r1; ++r) {
                    const float* wr = w.deq.data() + r * k;
                    // The exact dot; a rigorous bound on what rounding activations to int8 (half
                    // a step of each block) or weights and activations to bf16 may add; and the
                    // dot with the int8 activations themselves, with its magnitude.
                    double s = 0, bound = 0, s8 = 0, mag8 = 0;
                    for (int64_t i = 0; i < k; ++i) {
                      s += double(wr[i]) * xt[i];
                      bound += std::fabs(wr[i]) *
                               (double(xd[size_t(i / 32)]) / 2 + std::fabs(xt[i]) / 128.0);
                      const double p = double(wr[i]) * xq[size_t(i)] * xd[size_t(i / 32)];
                      s8 += p;
                      mag8 += std::fabs(p);
                    }
                    const float yv = y[size_t(t * ldy + 1 + (r - r0))];
                    want.push_back(s);
                    got.push_back(yv);
                    if (qt.kt.isa != Isa::Scalar)
                      bounded &= std::fabs(yv - s) <= bound * 1.01 + 1e-6;
                    if (qt.int8_always) int8_ok &= std::fabs(yv - s8) <= 1e-5 * mag8 + 1e-9;
                  }
                  untouched &= std::isnan(y[size_t(t * ldy)]);
                  for (int64_t j = 1 + r1 - r0; j < ldy; ++j)
                    untouched &= std::isnan(y[size_t(t * ldy + j)]);
                }
                CHECK(untouched);
                CHECK(bounded);
                CHECK(int8_ok);
                // Scalar is float math on the exact weights; the others round activations to int8
                // (or bf16): a few parts per thousand overall, up to 4% here where the outlier's
                // block is a third of the row, while a layout slip costs O(1). One 32-element
                // block is too few terms for that average to settle.
                if (qt.kt.isa == Isa::Scalar)
                  CHECK(nerr(got.data(), want) < 1e-5);
                else if (k >= 96)
                  CHECK(nerr(got.data(), want) < 6e-2);
              }
            }
    }
  }

  TEST_CASE("Q8 head screen: every estimate within its bound of the Q8 kernel's logit") {
    // Codes over the whole int8 range and signed scales of 7 binades. Row 6's low bits (those the
    // screen drops) are all ones where its scale times x is positive and 0 elsewhere, so its
    // estimate is off by all but the rounding margin of the bound: a bound any tighter fails there.
    // Every SIMD screen this CPU runs (AVX2 with and without AVX-VNNI, AVX-512), each against
    // the Q8 kernel of its own ISA.
    const auto simds = tables_with(&KernelTable::screen_q8, "Q8 head screen");
    each_q8_head_case({256, 1024}, [&](int64_t K, int group, DType st) {
      const int64_t N = 44;
      QWeights w = make_qweights(8, group, st, N, K, uint32_t(K + group));
      const auto x = randn(size_t(K), 7);
      set_worst_low_bits(w, 6, x);
      const Tensor t = w.view();
      std::vector<uint8_t> screen(head_screen_bytes(t));
      build_head_screen(t, ScreenLayout::kRows, screen.data(), 0, N);
      std::vector<float> scratch(size_t(quant_matmul_scratch_floats(K, 1)));
      auto screen_run = [&](ScreenQ8Fn fn, int64_t r0, int64_t r1, bool reuse,
                            std::vector<float>& est, std::vector<float>& hw) {
        est.assign(size_t(N), NAN);
        hw.assign(size_t(N), NAN);
        ScreenQ8Args a{
            screen.data(),  w.scales.data(), st,   group, x.data(), K, r0, r1, est.data() + r0,
            hw.data() + r0, scratch.data(),  reuse};
        fn(a);
      };
      std::vector<float> ref_est, ref_hw, est, hw;
      screen_run(screen_q8_scalar, 0, N, false, ref_est, ref_hw);
      for (const auto& [simd_name, simd] : simds) {
        CAPTURE(simd_name);
        // A 44-row head has no panel copy (q8_panel.h): the kernel reads it as it is.
        std::vector<float> exact(static_cast<size_t>(N));
        QuantMatmulArgs a =
            test::quant_args({w.codes.data(), w.scales.data(), st, group, nullptr, K}, x.data(), K,
                             1, exact.data(), N, 0, N, scratch.data());
        simd.matmul_q8(a);
        for (auto [r0, r1, reuse] : kHeadRanges) {
          CAPTURE(r0);
          CAPTURE(reuse);
          screen_run(simd.screen_q8, r0, r1, reuse, est, hw);
          bool within = true, agree = true;
          double slack = 0;
          for (int64_t r = r0; r < r1; ++r) {
            const size_t i = size_t(r);
            within &= std::fabs(exact[i] - est[i]) <= hw[i];
            within &= std::fabs(exact[i] - ref_est[i]) <= ref_hw[i];
            agree &= std::fabs(est[i] - ref_est[i]) <= 1e-3f * hw[i];
            agree &= std::fabs(hw[i] - ref_hw[i]) <= 1e-5f * hw[i];
            if (r != 6) slack += std::fabs(exact[i] - est[i]) / hw[i] / double(r1 - r0);
          }
          CHECK(within);
          CHECK(agree);
          CHECK(slack < 0.25);  // a bound of some use
          if (r0 <= 6 && 6 < r1) CHECK(std::fabs(exact[6] - est[6]) >= 0.999f * hw[6]);
        }
      }
    });
  }

  TEST_CASE("Q8 head kept as its screen and low bits: the same codes, rows and logits") {
    // Codes over the whole int8 range and signed scales of 7 binades (make_qweights). The rebuilt
    // codes and embedding rows must be the stored ones bit for bit; logits are the same integer
    // dots summed in another order, so each SIMD kernel is checked against the double reference and
    // against its own ISA's Q8 kernel on the row-major codes.
    const auto simds = tables_with(&KernelTable::matmul_q8_split, "split Q8 head");
    each_q8_head_case({128, 1024}, [&](int64_t K, int group, DType st) {
      const int64_t N = 44;
      const QWeights w = make_qweights(8, group, st, N, K, uint32_t(3 * K + group));
      const Tensor t = w.view();
      std::vector<uint8_t> mem(head_screen_bytes(t, true) + 64);
      uint8_t* base = mem.data() + (64 - reinterpret_cast<uintptr_t>(mem.data()) % 64) % 64;
      // In two ranges, as threads build it.
      build_head_screen(t, ScreenLayout::kRows, base, 0, 16, true);
      build_head_screen(t, ScreenLayout::kRows, base, 16, N, true);
      const HeadScreen hs = head_screen_view(t, ScreenLayout::kRows, base, true);
      REQUIRE(hs.lo != nullptr);
      std::vector<int8_t> row(static_cast<size_t>(K));
      bool same_codes = true;
      for (int64_t r = 0; r < N; ++r) {
        split_row_codes(hs, K, r, row.data());
        same_codes &= std::memcmp(row.data(), w.codes.data() + r * K, size_t(K)) == 0;
      }
      CHECK(same_codes);
      const std::vector<int32_t> ids{43, 0, 7, 43};
      std::vector<float> emb(ids.size() * size_t(K)), want(ids.size() * size_t(K));
      embed_split_rows(t, hs, ids.data(), emb.data(), 0, int64_t(ids.size()));
      for (size_t i = 0; i < ids.size(); ++i)
        quant::dequantize_row(t, ids[i], &want[i * size_t(K)]);
      CHECK(emb == want);

      const int T = 3;
      const auto x = randn(size_t(T * K), 11);
      std::vector<float> scratch(size_t(quant_matmul_scratch_floats(K, T)));
      auto run = [&](QuantMatmulFn fn, bool split, int64_t r0, int64_t r1, bool reuse) {
        std::vector<float> y(size_t(T * N), NAN);
        QuantMatmulArgs a = test::quant_args(
            {split ? hs.hi : w.codes.data(), w.scales.data(), st, group, nullptr, K}, x.data(), K,
            T, y.data() + r0, N, r0, r1, scratch.data());
        if (split) a.w_il = hs.lo;
        a.reuse_x = reuse;
        fn(a);
        return y;
      };
      const std::vector<float> ref = run(matmul_q8_split_scalar, true, 0, N, false);
      // The largest difference from the reference, relative to the token's largest logit (a
      // logit that cancels to near zero has the rounding of its large terms).
      auto close = [&](const std::vector<float>& y, int64_t r0, int64_t r1) {
        double worst = 0;
        for (int tk = 0; tk < T; ++tk) {
          double top = 0;
          for (int64_t r = 0; r < N; ++r)
            top = std::max(top, std::fabs(double(ref[size_t(tk * N + r)])));
          for (int64_t r = r0; r < r1; ++r)
            worst =
                std::max(worst, std::fabs(ref[size_t(tk * N + r)] - y[size_t(tk * N + r)]) / top);
        }
        return worst;
      };
      for (const auto& [name, kt] : simds) {
        CAPTURE(name);
        const std::vector<float> plain = run(kt.matmul_q8, false, 0, N, false);
        CHECK(close(plain, 0, N) < 1e-5);  // the reference is the Q8 kernel's product
        for (auto [r0, r1, reuse] : kHeadRanges) {
          CAPTURE(r0);
          CAPTURE(reuse);
          const std::vector<float> y = run(kt.matmul_q8_split, true, r0, r1, reuse);
          CHECK(close(y, r0, r1) < 1e-5);
          // A row's logit does not depend on the range it is computed in (the screened head
          // computes scattered groups, the whole head every row).
          const std::vector<float> whole = run(kt.matmul_q8_split, true, 0, N, false);
          bool same = true;
          for (int tk = 0; tk < T; ++tk)
            for (int64_t r = r0; r < r1; ++r)
              same &= y[size_t(tk * N + r)] == whole[size_t(tk * N + r)];
          CHECK(same);
        }
      }
    });
  }

  TEST_CASE("Q8 head screen refined by its low bits: within refined_bound of the head's logit") {
    // Row 6's low bits are all ones where its scale times x is positive and 0 elsewhere, so its
    // screen estimate is off by nearly its whole bound; refined, every row must be within the
    // rounding bound of the split kernel's logit (a low bit read from the wrong place moves a
    // logit by a fair part of the screen's bound, thousands of times the refined one).
    const auto simds = tables_with(&KernelTable::refine_q8_split, "refined Q8 head screen");
    each_q8_head_case({128, 1024}, [&](int64_t K, int group, DType st) {
      const int64_t N = 44;
      QWeights w = make_qweights(8, group, st, N, K, uint32_t(5 * K + group));
      const auto x = randn(size_t(K), 13);
      set_worst_low_bits(w, 6, x);
      const Tensor t = w.view();
      std::vector<uint8_t> mem(head_screen_bytes(t, true) + 64);
      uint8_t* base = mem.data() + (64 - reinterpret_cast<uintptr_t>(mem.data()) % 64) % 64;
      build_head_screen(t, ScreenLayout::kRows, base, 0, N, true);
      const HeadScreen hs = head_screen_view(t, ScreenLayout::kRows, base, true);
      REQUIRE(hs.lo != nullptr);
      std::vector<float> scratch(size_t(quant_matmul_scratch_floats(K, 1)));
      std::vector<float> mm_scratch(scratch.size());
      for (const auto& [name, kt] : simds) {
        CAPTURE(name);
        std::vector<float> exact(size_t(N), NAN), est(size_t(N), NAN), hw(size_t(N), NAN);
        QuantMatmulArgs m =
            test::quant_args({hs.hi, w.scales.data(), st, group, nullptr, K}, x.data(), K, 1,
                             exact.data(), N, 0, N, mm_scratch.data());
        m.w_il = hs.lo;
        kt.matmul_q8_split(m);
        ScreenQ8Args a{hs.hi, w.scales.data(), st,        group,          x.data(), K, 0,
                       N,     est.data(),      hw.data(), scratch.data(), false};
        kt.screen_q8(a);
        bool within = true, tight = true;
        double worst = 0;
        for (int64_t g = 0; g < N; g += 4) {
          float corr[4];
          kt.refine_q8_split({hs.lo, w.scales.data(), st, group, K, g, scratch.data(), corr});
          for (int64_t r = g; r < g + 4; ++r) {
            const size_t i = size_t(r);
            const float bound = refined_bound(hw[i], K / 128);
            const double err = std::fabs(double(exact[i]) - double(est[i] + corr[r - g]));
            within &= err <= bound;
            tight &= bound < 1e-3f * hw[i];
            worst = std::max(worst, err / bound);
          }
        }
        CAPTURE(worst);
        CHECK(within);
        CHECK(tight);
        CHECK(std::fabs(exact[6] - est[6]) >= 0.99f * hw[6]);  // the screen alone was far off
      }
    });
  }

  TEST_CASE("BF16 head screen: the quantizer's codes and scales in rows and panels, bounds") {
    // Each ISA's screen_row_bf16 against the quantizer (quant::quantize_row_rtn, quant::pack_row)
    // row by row, and its bounds against long double; its panels unpack to the same rows; a zero
    // group, and weights over 20 binades.
    const int64_t N = 48, K = 256;
    std::vector<uint16_t> w(size_t(N * K));
    std::mt19937 rng(11);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::uniform_int_distribution<int> binade(-10, 10);
    for (auto& v : w) v = f32_to_bf16(nd(rng) * std::ldexp(1.f, binade(rng)));
    for (int64_t i = 0; i < 32; ++i) w[size_t(5 * K + 64 + i)] = 0;
    const Tensor t = bf16_matrix(w, N, K);
    for (const QuantTable& qt : quant_tables()) {
      CAPTURE(qt.name);
      const ScreenRowFn fn = qt.kt.screen_row_bf16;
      std::vector<uint8_t> rows(head_screen_bytes(t)), panels(head_screen_bytes(t));
      build_head_screen(t, ScreenLayout::kRows, rows.data(), 0, N, false, fn);
      build_head_screen(t, ScreenLayout::kPanel, panels.data(), 0, 16, false, fn);
      build_head_screen(t, ScreenLayout::kPanel, panels.data(), 16, N, false, fn);
      const HeadScreen hr = head_screen_view(t, ScreenLayout::kRows, rows.data());
      const HeadScreen hp = head_screen_view(t, ScreenLayout::kPanel, panels.data());
      std::vector<uint8_t> pcodes(size_t(N * K));
      std::vector<uint16_t> pscales(size_t(N * K / 32));
      unpack_q8_panel(static_cast<const uint8_t*>(hp.w_il), K, 32, 0, N, pcodes.data(),
                      pscales.data());
      const auto* rcodes = static_cast<const uint8_t*>(hr.q8.data);
      const auto* rscales = static_cast<const uint16_t*>(hr.q8.scales);
      int bad_codes = 0, bad_scales = 0, bad_bounds = 0;
      for (int64_t r = 0; r < N; ++r) {
        std::vector<float> row(static_cast<size_t>(K));
        for (int64_t i = 0; i < K; ++i) row[size_t(i)] = bf16_to_f32(w[size_t(r * K + i)]);
        std::vector<int8_t> q(static_cast<size_t>(K));
        std::vector<uint16_t> sc(static_cast<size_t>(K / 32));
        quant::quantize_row_rtn(row.data(), K, quant::Scheme{8, 32, DType::F16}, q.data(),
                                sc.data());
        std::vector<uint8_t> packed(static_cast<size_t>(K));
        quant::pack_row(8, q.data(), K, packed.data());
        for (int64_t i = 0; i < K; ++i)
          bad_codes += (rcodes[r * K + i] != packed[size_t(i)]) +
                       (pcodes[size_t(r * K + i)] != packed[size_t(i)]);
        for (int64_t b = 0; b < K / 32; ++b)
          bad_scales += (rscales[r * K / 32 + b] != sc[size_t(b)]) +
                        (pscales[size_t(r * K / 32 + b)] != sc[size_t(b)]);
        // {M, E, N}: the largest block norm of w and of w - w', and |w|, from above, within 1e-6.
        long double m = 0, e = 0, n = 0;
        for (int64_t b = 0; b < K / 32; ++b) {
          const long double d = f16_to_f32(sc[size_t(b)]);
          long double wb = 0, eb = 0;
          for (int64_t i = 32 * b; i < 32 * b + 32; ++i) {
            const long double x = row[size_t(i)], diff = x - q[size_t(i)] * d;
            wb += x * x;
            eb += diff * diff;
          }
          m = std::max(m, wb);
          e = std::max(e, eb);
          n += wb;
        }
        const long double want[3] = {std::sqrt(m), std::sqrt(e), std::sqrt(n)};
        for (int j = 0; j < kScreenBounds; ++j) {
          const float got = hr.bounds[r * kScreenBounds + j];
          bad_bounds += !(got >= want[j] && got <= want[j] * (1 + 1e-6L)) +
                        (hp.bounds[r * kScreenBounds + j] != got);
        }
      }
      CHECK(bad_codes == 0);
      CHECK(bad_scales == 0);
      CHECK(bad_bounds == 0);
    }
  }
}

#ifndef HEARTH_KERNELS_ONLY
#include <simdjson.h>

#include <fstream>

#include "backends/cpu/cpu_backend.h"
#include "core/backend.h"
#include "core/huge_pages.h"
#include "core/runner.h"
#include "core/sampler.h"
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
                                 int gemm_min_tokens = 0, bool copies = false) {
  BackendOptions o;
  o.cpu.isa = isa;
  o.threads = threads;
  o.cpu.gemm = gemm;
  o.cpu.gemm_min_tokens = gemm_min_tokens;
  if (copies) o.cpu.weight_copies = std::make_shared<WeightStore>();
  return create_backend("cpu", o);
}

// Runs graph g (output rows = all T step rows) and returns the output, or the argmax per row.
std::vector<float> run(Backend& be, const Graph& g, int T, std::vector<int32_t>* argmax = nullptr) {
  auto cg = be.compile(g, T, T);
  auto kv = be.alloc_kv({1, 1, 16}, 1, T);
  const int32_t block = 0;
  SeqRows seq;
  seq.n_rows = T;
  seq.blocks = &block;
  seq.n_blocks = 1;
  std::vector<int32_t> tokens(static_cast<size_t>(T)), rows(static_cast<size_t>(T));
  for (int i = 0; i < T; ++i) tokens[size_t(i)] = rows[size_t(i)] = i;
  std::vector<float> out(size_t(T) * size_t(g.tensor(g.output).cols));
  StepInputs in;
  in.tokens = tokens.data();
  in.n_tokens = T;
  in.seqs = &seq;
  in.n_seqs = 1;
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

// Two CPU backends over one graph g (an Embed of x rows, then an LM head): `full` without weight
// copies, `screened` keeping them in `store` (so its head is screened); step() runs token t
// through one of them.
struct ScreenPair {
  ScreenPair(const Graph& g, const std::string& isa, int threads,
             std::shared_ptr<WeightStore> store) {
    // Both read the head as placed in the store (a BF16 head of whole 16-row groups coded on
    // AVX-512 and AVX2, whose rows round as its kernel sums them): one whole, one through the
    // screen.
    BackendOptions o;
    o.cpu.isa = isa;
    o.threads = threads;
    o.cpu.weight_copies = std::move(store);
    o.cpu.screen = CpuOptions::Screen::Never;
    full = create_backend("cpu", o);
    o.cpu.screen = CpuOptions::Screen::Always;  // every step through the screen, not the faster
    screened = create_backend("cpu", o);
    cg_full = full->compile(g, 1, 1);
    cg_screened = screened->compile(g, 1, 1);
    kv = full->alloc_kv({1, 1, 16}, 1, 1);
    seq.n_rows = 1;
    seq.blocks = &block;
    seq.n_blocks = 1;
  }
  void step(bool use_screened, int32_t t, float* logits, int32_t* argmax = nullptr,
            const int32_t* top_k = nullptr) {
    StepInputs in;
    in.tokens = &t;
    in.n_tokens = 1;
    in.seqs = &seq;
    in.n_seqs = 1;
    in.out_rows = &row;
    in.n_out = 1;
    in.kv = kv.get();
    in.logits = logits;
    in.argmax = argmax;
    in.top_k = top_k;
    Backend& be = use_screened ? *screened : *full;
    be.run(use_screened ? *cg_screened : *cg_full, in);
  }

  std::unique_ptr<Backend> full, screened;
  std::unique_ptr<CompiledGraph> cg_full, cg_screened;
  std::unique_ptr<KVStorage> kv;
  const int32_t block = 0, row = 0;
  SeqRows seq;
};

// Greedy decoding of tokens 0 .. n_x - 1 of g (an Embed of x rows, then an LM head of N rows) on
// a backend keeping weight copies in `store` (so its head is screened) against the full logits of
// one without: the screened argmax must be the first index of their maximum, which is returned
// per token; *saved gets the head bytes the screen did not read.
std::vector<int32_t> screened_argmax(const Graph& g, int64_t N, int n_x, const std::string& isa,
                                     int threads, std::shared_ptr<WeightStore> store,
                                     double* saved) {
  ScreenPair pair(g, isa, threads, std::move(store));
  std::vector<int32_t> wants;
  for (int32_t t = 0; t < n_x; ++t) {
    CAPTURE(t);
    int32_t arg = -2;
    std::vector<float> logits(static_cast<size_t>(N));
    pair.step(false, t, logits.data());
    pair.step(true, t, nullptr, &arg);
    int32_t want = -1;
    for (int32_t r = 0; r < N; ++r)
      if (logits[size_t(r)] > (want < 0 ? -INFINITY : logits[size_t(want)])) want = r;
    CHECK(arg == want);
    wants.push_back(want);
  }
  *saved = pair.screened->argmax_bytes_saved();
  return wants;
}

// A BF16 head of N rows (K columns) behind an Embed of n_x tokens, with exact ties (rows equal to
// row 5) and near ties (one bf16 step away), and a row the screen alone would misjudge. K 256 takes
// the packed screen on AVX-512, K 96 the row-major one with a short last chunk. N 4100 is not a
// multiple of 16, so threads' ranges end off the 16-row grid and the head stays row-major; N 4112
// is, and the AVX-512, AVX2 and NEON backends read the head coded, its screen computing whole
// 16-row groups.
struct TestHead {
  TestHead(int64_t K, int64_t N);
  const int64_t N;
  const int n_x = 9;
  std::vector<uint16_t> w;
  std::vector<float> x;
  Graph g;
};

TestHead::TestHead(int64_t K, int64_t rows) : N(rows) {
  TestHead* h = this;
  const int64_t N = h->N;
  auto wf = randn(size_t(N * K), 51, 0.05f);
  std::vector<uint16_t>& w = h->w;
  w.resize(wf.size());
  for (size_t i = 0; i < w.size(); ++i) w[i] = f32_to_bf16(wf[i]);
  // Row 50's screen misses 31 of its weights (an outlier sets its group's scale and they round
  // to 0), so the screen ranks row 10 above it where the head does not: only the bound keeps
  // row 50 in. Columns 1-31 are 0 elsewhere.
  for (int64_t r = 0; r < N; ++r)
    for (int64_t k = 1; k < 32; ++k) w[size_t(r * K + k)] = 0;
  std::fill(w.begin() + 10 * K, w.begin() + 11 * K, uint16_t(0));
  std::fill(w.begin() + 50 * K, w.begin() + 51 * K, uint16_t(0));
  w[size_t(50 * K)] = f32_to_bf16(1.f);
  for (int64_t k = 1; k < 32; ++k)
    w[size_t(50 * K + k)] = f32_to_bf16(0.0039f), w[size_t(10 * K + k)] = f32_to_bf16(0.0038f);
  for (int64_t r : {700, 2900, 4099})
    std::copy(w.begin() + 5 * K, w.begin() + 6 * K, w.begin() + r * K);
  std::copy(w.begin() + 5 * K, w.begin() + 6 * K, w.begin() + 1234 * K);
  w[size_t(1234 * K + 7)] += 1;  // one ulp up or down, depending on x[7]
  std::copy(w.begin() + 5 * K, w.begin() + 6 * K, w.begin() + 3000 * K);
  w[size_t(3000 * K + 7)] -= 1;
  // Token 0: x along row 5 (the tie and near ties decide); 1 to 6: random; 7: NaN; 8: ones on
  // columns 1-31 (rows 50 and 10).
  const int n_x = h->n_x;
  std::vector<float>& x = h->x;
  x = randn(size_t(n_x * K), 52);
  for (int64_t k = 0; k < K; ++k) x[size_t(k)] = bf16_to_f32(w[size_t(5 * K + k)]) * 20.f;
  for (int64_t k = 0; k < K; ++k) x[size_t(7 * K + k)] = NAN;
  for (int64_t k = 0; k < K; ++k) x[size_t(8 * K + k)] = k >= 1 && k < 32 ? 1.f : 0.f;
  Graph& g = h->g;
  int xi =
      g.add(Op::Embed, g.activation("x", K), {g.weight("x", view(DType::F32, {n_x, K}, x.data()))});
  g.output = g.add(Op::MatMul, g.activation("logits", N, Rows::Outputs),
                   {xi, g.weight("lm_head", view(DType::BF16, {N, K}, w.data()))});
}

// Top-k sampling of tokens 0 .. n_x - 1 of g through a backend keeping weight copies in `store`
// (so its head is screened) against the whole head of one without, for several k: every logit the
// screened head keeps is the whole head's, bit for bit, every one at or above the k-th largest is
// kept, the rest are -inf, and samplers with one seed draw the same token from both. Returns the
// head bytes the screen did not read.
double check_screened_top_k(const Graph& g, int64_t N, int n_x, const std::string& isa, int threads,
                            std::shared_ptr<WeightStore> store) {
  ScreenPair pair(g, isa, threads, std::move(store));
  for (int32_t t = 0; t < n_x; ++t)
    for (const int32_t k : {1, 3, 20, 64}) {
      CAPTURE(t);
      CAPTURE(k);
      std::vector<float> logits(static_cast<size_t>(N)), kept(static_cast<size_t>(N), NAN);
      pair.step(false, t, logits.data());
      pair.step(true, t, kept.data(), nullptr, &k);
      std::vector<float> sorted(logits);
      for (float& v : sorted) v = v == v ? v : -INFINITY;
      std::sort(sorted.begin(), sorted.end(), std::greater<float>());
      const float kth = sorted[size_t(k - 1)];
      bool same = true, all = true;
      for (size_t r = 0; r < size_t(N); ++r) {
        if (kept[r] == -INFINITY)
          all &= !(logits[r] >= kth) || logits[r] == -INFINITY;
        else
          same &= std::memcmp(&kept[r], &logits[r], sizeof(float)) == 0;
      }
      CHECK(same);
      CHECK(all);
      if (!(kth > -INFINITY)) continue;  // no finite logit (NaN inputs): both samplers refuse
      for (const uint64_t seed : {1, 2, 3}) {
        SamplingParams p;
        p.temperature = 0.6f;
        p.top_k = k;
        p.top_p = 0.95f;
        p.seed = seed;
        std::vector<float> a(logits), b(kept);
        CHECK(Sampler(p, int(N)).sample(a.data(), int(N), nullptr, 0) ==
              Sampler(p, int(N)).sample(b.data(), int(N), nullptr, 0));
      }
    }
  return pair.screened->argmax_bytes_saved();
}

std::string fixture(const char* name) {
  return std::string(HEARTH_SHARED_DIR) + "/fixtures/models/" + name;
}

// The bytes of every dense layer's seven matrices (a weight store holds each once).
// The layers' matrices' bytes as the model holds them, or as the copies hold them where `coded`:
// BF16 ones coded in 12 bits a weight with their exceptions (bf16_coded.h).
// The bytes of t's copy: coded (bf16_coded.h, coded here independently of the backend) where
// `coded` and it fits, else as many as its rows'.
size_t copy_bytes(const Tensor& t, bool coded) {
  const int64_t rows = t.rows(), k = t.cols();
  if (!coded || t.dtype != DType::BF16 || !coded_fits(rows, k)) return t.nbytes;
  std::vector<uint8_t> copy(size_t(coded_bf16_bytes(rows, k)));
  code_bf16_groups(static_cast<const uint16_t*>(t.data), rows, k, 0, rows / 16, copy.data());
  return copy.size() + size_t(coded_exceptions_bytes(copy.data(), rows, k));
}

size_t layer_matrix_bytes(const Qwen3Weights& w, bool coded = false) {
  size_t n = 0;
  for (const auto& l : w.layers)
    for (const Tensor* t :
         {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj})
      n += copy_bytes(*t, coded);
  return n;
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

  TEST_CASE("ScreenPolicy: times the screened and the whole head in turns, holds the faster") {
    using P = ScreenPolicy;
    // Steps of `mode` for which use() says screened, each recorded as taking `screened_ns`
    // screened and `whole_ns` whole; returns how many of `n` steps were screened.
    auto run = [](P& p, int mode, int n, int64_t screened_ns, int64_t whole_ns) {
      int screened = 0;
      for (int i = 0; i < n; ++i) {
        const bool use = p.use(mode);
        screened += use;
        p.record(mode, use ? screened_ns : whole_ns);
      }
      return screened;
    };
    P p;
    // Whole faster: a window of each, then whole for the hold, then both timed again.
    CHECK(run(p, 1, P::kWindow, 300, 100) == P::kWindow);
    CHECK(run(p, 1, P::kWindow, 300, 100) == 0);
    CHECK(run(p, 1, P::kHold, 300, 100) == 0);
    CHECK(run(p, 1, P::kWindow, 300, 100) == P::kWindow);
    // The other mode has its own timing: greedy with a screen that pays stays screened, but for
    // its window of whole steps.
    CHECK(run(p, 0, 2 * P::kWindow + P::kHold, 100, 300) == P::kWindow + P::kHold);
    // Medians: a few outliers (an interrupted step) do not flip the choice.
    P q;
    for (int i = 0; i < P::kWindow; ++i) q.record(0, i < 2 ? 10'000 : 100);
    for (int i = 0; i < P::kWindow; ++i) q.record(0, 200);
    CHECK(q.use(0));
    P always(P::Rule::Always), never(P::Rule::Never);
    CHECK(run(always, 0, 3 * P::kWindow, 300, 100) == 3 * P::kWindow);
    CHECK(run(never, 1, 3 * P::kWindow, 100, 300) == 0);
  }

  TEST_CASE("screened LM head (weight copies): the whole head's first argmax on every ISA") {
    // TestHead read with the Q8 screen of head_screen.h; the answer must be the first index of the
    // maximum of the logits the whole head gives.
    for (const auto& [K, rows] :
         {std::pair<int64_t, int64_t>{256, 4100}, {96, 4100}, {256, 4112}}) {
      TestHead h(K, rows);
      const Graph& g = h.g;
      const int64_t N = h.N;
      const int n_x = h.n_x;
      // One store for all the backends, as a model's contexts share one through the C API: each
      // ISA must find the screen in its own layout (AVX-512 reads it packed).
      auto store = std::make_shared<WeightStore>();
      for (const Isa isa_kind : isas_here()) {
        const std::string isa = isa_name(isa_kind);
        for (int threads : {1, 2, 3}) {
          CAPTURE(K);
          CAPTURE(rows);
          CAPTURE(isa);
          CAPTURE(threads);
          double saved = 0;
          const auto want = screened_argmax(g, N, n_x, isa, threads, store, &saved);
          CHECK((want[0] == 5 || want[0] == 1234));
          CHECK(want[8] == 50);
          // The screen let most of what it could save go unread (on a head this small, each
          // thread's own groups are a sizeable part; a coded head leaves the screen 0.44 bytes a
          // weight to save, against which its 16-row groups weigh more, and with several threads
          // how many groups each computes depends on when the others raise the shared floor).
          const bool coded = make_kernel_table(parse_isa(isa)).matmul_bf16_coded && N % 16 == 0;
          const Tensor head = view(DType::BF16, {N, K}, h.w.data());
          const double whole = double(copy_bytes(head, coded)), screen = double(N * K * 17 / 16);
          CHECK(saved > (coded && threads > 1 ? 0.1 : 0.4) * (whole - screen));
        }
      }
    }
  }

  TEST_CASE("screened LM head, top-k sampling: the whole head's top-k logits on every ISA") {
    // TestHead's ties and near ties, and token 8, whose logits are 0 on all but two rows (so
    // every row ties with the k-th for k >= 3 and all must be kept); then a Q8 head, whose
    // screen is its codes' high bits where a kernel reads them (AVX2, AVX-512).
    for (const auto& [K, rows] :
         {std::pair<int64_t, int64_t>{256, 4100}, {96, 4100}, {256, 4112}}) {
      TestHead h(K, rows);
      auto store = std::make_shared<WeightStore>();
      for (const Isa isa_kind : isas_here())
        for (int threads : {1, 3}) {
          const std::string isa = isa_name(isa_kind);
          CAPTURE(K);
          CAPTURE(rows);
          CAPTURE(isa);
          CAPTURE(threads);
          const double saved = check_screened_top_k(h.g, h.N, h.n_x, isa, threads, store);
          // Unless the head is read in 16-row groups, of which k = 64 takes 1024 rows at once:
          // each of 3 threads' ~1370 rows then, and a coded head's 1.5 bytes a weight are hardly
          // more than the screen's 1.06 and those rows on a head this small (ScreenPolicy then
          // reads it whole).
          const bool coded = make_kernel_table(parse_isa(isa)).matmul_bf16_coded;
          if (rows % 16 != 0 || (threads == 1 && !coded)) CHECK(saved > 0);
        }
    }
    const int64_t N = 2000, K = 256;
    QWeights w = make_qweights(8, 32, DType::F16, N, K, 61);
    const int n_x = 4;
    const auto x = randn(size_t(n_x * K), 62);
    Graph g;
    int xi = g.add(Op::Embed, g.activation("x", K),
                   {g.weight("x", view(DType::F32, {n_x, K}, x.data()))});
    g.output = g.add(Op::MatMul, g.activation("logits", N, Rows::Outputs),
                     {xi, g.weight("lm_head", w.view())});
    auto store = std::make_shared<WeightStore>();
    for (const Isa isa_kind : isas_here())
      for (int threads : {1, 2}) {
        CAPTURE(std::string(isa_name(isa_kind)));
        CAPTURE(threads);
        const double saved = check_screened_top_k(g, N, n_x, isa_name(isa_kind), threads, store);
        // A head of Q8 panels computes 16-row groups: of 2 threads' 1000 rows, k = 64 alone
        // takes 1024.
        const KernelTable kt = make_kernel_table(isa_kind);
        if (kt.screen_q8 && (threads == 1 || !kt.q8_panel)) CHECK(saved > 0);
      }
  }

  TEST_CASE("screened Q8 LM head (weight copies): the whole head's first argmax") {
    // Exact ties (rows equal to row 5), near ties (one code step away), and rows 10 and 50 on
    // block 0 alone, where the screen ranks row 10 far above row 50 and the head does not: row 50's
    // codes are the largest low part (high part 0), row 10's the smallest code of high part 1 on
    // 20 of the 32 elements.
    const int64_t N = 4104, K = 256;
    QWeights w = make_qweights(8, 32, DType::F16, N, K, 61);
    auto code = [&](int64_t r, int64_t i) -> uint8_t& {
      bool high;
      return w.codes[size_t(r * K + test::q_place(8, i, K, &high))];
    };
    for (int64_t r = 0; r < N; ++r)
      for (int64_t i = 0; i < 32; ++i) code(r, i) = 0;
    const int step = 1 << (8 - kScreenQ8Bits);
    for (int64_t i = 0; i < 32; ++i)
      code(50, i) = uint8_t(step - 1), code(10, i) = uint8_t(i < 20 ? step : 0);
    w.scales[size_t(50 * K / 32)] = w.scales[size_t(10 * K / 32)] = f32_to_f16(1.f);
    auto copy_row = [&](int64_t from, int64_t to) {
      std::copy(w.codes.begin() + from * K, w.codes.begin() + (from + 1) * K,
                w.codes.begin() + to * K);
      std::copy(w.scales.begin() + from * K / 32, w.scales.begin() + (from + 1) * K / 32,
                w.scales.begin() + to * K / 32);
    };
    // Row 5's scales above all others (at most 1.6e-2), so that token 0 picks it or a near tie.
    for (int64_t b = 0; b < K / 32; ++b) w.scales[size_t(5 * K / 32 + b)] = f32_to_f16(0.05f);
    for (int64_t r : {700, 2900, 4100, 1234, 3000}) copy_row(5, r);
    code(1234, 40) = uint8_t(int8_t(code(1234, 40)) == 127 ? 126 : int8_t(code(1234, 40)) + 1);
    code(3000, 40) = uint8_t(int8_t(code(3000, 40)) == -127 ? -126 : int8_t(code(3000, 40)) - 1);
    // Token 0: x along row 5; 1 to 6: random; 7: NaN; 8: ones on block 0 (rows 50 and 10).
    const int n_x = 9;
    auto x = randn(size_t(n_x * K), 62);
    for (int64_t k = 0; k < K; ++k) {
      const uint16_t sc = w.scales[size_t((5 * K + k) / 32)];
      x[size_t(k)] = float(int8_t(code(5, k))) * f16_to_f32(sc) * 20.f;
      x[size_t(7 * K + k)] = NAN;
      x[size_t(8 * K + k)] = k < 32 ? 1.f : 0.f;
    }
    Graph g;
    int xi = g.add(Op::Embed, g.activation("x", K),
                   {g.weight("x", view(DType::F32, {n_x, K}, x.data()))});
    g.output = g.add(Op::MatMul, g.activation("logits", N, Rows::Outputs),
                     {xi, g.weight("lm_head", w.view())});
    for (const Isa isa_kind : isas_here()) {
      const std::string isa = isa_name(isa_kind);
      const bool screens = make_kernel_table(isa_kind).screen_q8 != nullptr;
      for (int threads : {1, 2, 3}) {
        CAPTURE(isa);
        CAPTURE(threads);
        double saved = 0;
        const auto want =
            screened_argmax(g, N, n_x, isa, threads, std::make_shared<WeightStore>(), &saved);
        CHECK((want[0] == 5 || want[0] == 1234 || want[0] == 3000));
        CHECK(want[8] == 50);
        // The screen left much of the head's low bits unread (at most 3/8 of the codes).
        if (screens) CHECK(saved > 0.12 * double(N * K));
      }
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

  TEST_CASE(
      "private weight copies and a huge-page KV cache (--hugepages): the same logits, one copy for "
      "all backends") {
    auto model = Qwen3Model::load(fixture("tiny-tied-bf16"));
    const auto& c = model->config();
    std::vector<int32_t> ids(80);  // a prefill long enough for the GEMM, then decode steps
    std::mt19937 g(11);
    for (auto& t : ids) t = int32_t(g() % 150000);
    auto store = std::make_shared<WeightStore>();
    // The library's GEMM too: coded BF16 copies are rebuilt for it block by block.
    std::vector<std::string> gemms = {"", "native"};
#if defined(HEARTH_HAVE_DNNL)
    gemms.push_back("dnnl");
#endif
    for (const std::string& gemm : gemms) {
      std::vector<std::vector<float>> runs;
      for (bool copies : {false, true}) {
        BackendOptions o;
        o.threads = 2;
        o.cpu.gemm = gemm;
        if (copies) o.cpu.weight_copies = store, o.cpu.kv_huge_pages = true;
        Runner r(create_backend("cpu", o), model->graph(), c.vocab_size, c.max_position_embeddings);
        auto kv = r.new_kv(int(ids.size()));
        std::vector<float> out(size_t(c.vocab_size)), all;
        r.forward(*kv, ids.data(), 72, 0, nullptr, out.data());
        all = out;
        for (int i = 72; i < 80; ++i) {
          r.forward(*kv, ids.data() + i, 1, i, nullptr, out.data());
          all.insert(all.end(), out.begin(), out.end());
        }
        runs.push_back(all);
      }
      CAPTURE(gemm);
      // Not bit for bit: the packed copies' kernel sums each row in column order, the plain one
      // in 16 lanes; both are f32 sums of the same exact products.
      size_t bad = 0;
      double worst = 0;
      for (size_t i = 0; i < runs[0].size(); ++i) {
        const double d = std::fabs(double(runs[0][i]) - runs[1][i]);
        worst = std::max(worst, d);
        bad += !(d <= 1e-5 + 1e-5 * std::fabs(runs[0][i]));
      }
      CAPTURE(worst);
      CHECK(bad == 0);
    }
    // Every linear weight once (BF16: coded where a kernel reads it so, else packed, row for row
    // the same bytes), for both backends, the tied LM head too (the Embed step reads its copy),
    // and its Q8 screen for greedy and top-k decoding.
    const auto& w = model->weights();
    const bool coded = make_kernel_table(detect_cpu_features().best()).matmul_bf16_coded;
    const size_t want =
        copy_bytes(w.embed, coded) + cpu::head_screen_bytes(w.embed) + layer_matrix_bytes(w, coded);
    CHECK(store->bytes() == want);
  }

  TEST_CASE("an untied embedding table is copied with the weights and reads the same rows") {
    auto model = Qwen3Model::load(fixture("tiny-untied-sharded-f32"));
    const auto& c = model->config();
    const auto& w = model->weights();
    REQUIRE(w.embed.data != w.lm_head.data);
    const std::vector<int32_t> ids{9, 151643, 0, 77777, 9, 12};  // ids at both ends, one twice
    auto store = std::make_shared<WeightStore>();
    std::vector<std::vector<float>> runs;
    for (bool copies : {false, true}) {
      BackendOptions o;
      o.threads = 2;
      if (copies) o.cpu.weight_copies = store;
      Runner r(create_backend("cpu", o), model->graph(), c.vocab_size, c.max_position_embeddings);
      auto kv = r.new_kv(int(ids.size()));
      std::vector<float> out(size_t(c.vocab_size)), all;
      for (int i = 0; i < int(ids.size()); ++i) {  // one token per step: the decode path
        r.forward(*kv, ids.data() + i, 1, i, nullptr, out.data());
        all.insert(all.end(), out.begin(), out.end());
      }
      runs.push_back(all);
    }
    // F32 weights are copied as they are and multiplied by the same kernels: the same floats.
    CHECK(runs[0] == runs[1]);
    size_t want = w.embed.nbytes + w.lm_head.nbytes + layer_matrix_bytes(w);
    if (cpu::screenable(w.lm_head)) want += cpu::head_screen_bytes(w.lm_head);
    CHECK(store->bytes() == want);
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

  TEST_CASE("auto GEMM: bf16 only where the CPU's identity says bf16 dot products are fast") {
    CpuFeatures f = detect_cpu_features();
    f.amd = f.amx_bf16 = false;
    CHECK(!f.fast_bf16_dot());
    f.avx512bf16 = false, f.amd = true;
    CHECK(!f.fast_bf16_dot());
    if (detect_cpu_features().best() != Isa::Avx512) return;
    BackendOptions o;
    o.threads = 1;
    auto kind = [&](const CpuFeatures& cf) { return cpu::CpuBackend(o, cf).gemm_kind(); };
    f = detect_cpu_features();
    f.amd = f.amx_bf16 = false;
    const cpu::GemmKind f32 = cpu::choose_gemm("auto");
    CHECK(kind(f) == f32);
    f.amd = true;
    CHECK(kind(f) == cpu::choose_gemm("auto", true));
    f.amd = false, f.amx_bf16 = true;
    CHECK(kind(f) == cpu::choose_gemm("auto", true));
#if defined(HEARTH_HAVE_DNNL)
    CHECK(kind(f) == cpu::GemmKind::DnnlBf16);
#endif
    o.cpu.isa = "avx2";  // no AVX512_BF16 kernels: f32
    CHECK(kind(f) == f32);
    o.cpu.isa = "";
    o.cpu.gemm = "dnnl";  // named: as asked
    if (f32 == cpu::GemmKind::Dnnl) CHECK(kind(f) == cpu::GemmKind::Dnnl);

    // Without a fast bf16 dot, long all-BF16 steps stay on the kernels (f32 FMAs on the packed
    // copy); other steps, a named GEMM, --mmap (no copy) and AVX2 keep the library.
    auto route = [&](const CpuFeatures& cf, bool all_quantized, bool all_bf16) {
      const cpu::CpuBackend b(o, cf);
      return cpu::linear_route(b.kernels(), b.gemm_kind(), true, b.gemm_min_tokens(), 512,
                               all_quantized, all_bf16);
    };
    o.cpu.gemm = "";
    o.cpu.weight_copies = std::make_shared<WeightStore>();
    f.amd = f.amx_bf16 = false;
    CHECK(route(f, false, true) == cpu::LinearRoute::Kernels);
    CHECK(route(f, false, false) == cpu::LinearRoute::LibraryF32);
    f.amd = true;
    CHECK(route(f, false, true) == cpu::LinearRoute::LibraryBf16);
    f.amd = false;
    o.cpu.gemm = "dnnl";
    CHECK(route(f, false, true) == cpu::LinearRoute::LibraryF32);
    o.cpu.gemm = "";
    o.cpu.isa = "avx2";
    CHECK(route(f, false, true) == cpu::LinearRoute::LibraryF32);
    o.cpu.isa = "";
    o.cpu.weight_copies = nullptr;
    CHECK(route(f, false, true) == cpu::LinearRoute::LibraryF32);
  }

  TEST_CASE("GEMM libraries match the native kernels on long steps") {
    // 304 rows: 19 groups of 16 for the packed copies (kPackBf16), which the bf16 GEMM of the
    // kernels reads as they are where the GEMM is chosen (auto), not named.
    const int T = 40;
    const int64_t N = 304, K = 96;
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
      std::vector<std::string> gemms = {"native", "auto"};
#if defined(HEARTH_HAVE_DNNL)
      gemms.push_back("dnnl");
      if (detect_cpu_features().best() == Isa::Avx512) gemms.push_back("dnnl-bf16");
#endif
#if defined(HEARTH_HAVE_OPENBLAS)
      gemms.push_back("openblas");
#endif
      for (const auto& gemm : gemms)
        for (int threads : {1, 2})
          for (bool copies : {false, true}) {
            CAPTURE(std::string(dtype_name(wt)));
            CAPTURE(gemm);
            CAPTURE(threads);
            CAPTURE(copies);
            auto be = backend("", threads, gemm, 2, copies);
            CHECK(static_cast<cpu::CpuBackend&>(*be).gemm_kind() ==
                  cpu::choose_gemm(gemm, detect_cpu_features().fast_bf16_dot()));
            const auto got = run(*be, g, T);
            // bf16 inputs keep 8 bits: about 2^-9 relative per product, averaging out over K.
            const bool bf16 =
                static_cast<cpu::CpuBackend&>(*be).gemm_kind() == cpu::GemmKind::DnnlBf16 &&
                wt == DType::BF16;
            CHECK(nerr(got.data(), want) < (bf16 ? 1e-2 : 1e-6));
          }
    }
  }
}
#endif
