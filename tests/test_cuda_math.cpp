// The CUDA kernels' index and number math (backends/cuda/cu_math.h), run here on the CPU, so that
// a build without a GPU (CI) still catches layout and indexing mistakes: the columns and values of
// every 16-byte weight piece against codes packed straight from quant/FORMAT.md
// (tests/quant_placement.h), the int8 runs, dot products and activation rounding of the int8
// mat-vec, the 16-bit conversions against core/dtype.h, the split of attention
// over positions and the merge of partial softmaxes against float64, the argmax order.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "backends/cuda/cu_math.h"
#include "core/dtype.h"
#include "tests/cuda_test_weights.h"

using namespace hearth;
namespace cu = hearth::cuda;

TEST_SUITE("cuda_math") {
  TEST_CASE("weight pieces hold the columns and values the layout puts there, every type") {
    struct Shape {
      uint32_t type;
      int64_t K;
      int group;
    };
    std::vector<Shape> shapes;
    for (uint32_t t : {cu::kF32, cu::kF16, cu::kBF16})
      for (int64_t K : {8, 40, 1024}) shapes.push_back({t, K, 32});
    // 96: one chunk of three blocks; 160: a chunk and one block; 416: three chunks and one block.
    for (uint32_t t : {cu::kQ8, cu::kQ4, cu::kQ4Codebook})
      for (auto [K, g] :
           {std::pair{32, 32}, {96, 32}, {160, 32}, {256, 64}, {384, 128}, {416, 32}, {1024, 128}})
        shapes.push_back({t, K, g});
    int checked = 0;
    for (const Shape& sh : shapes)
      for (bool bf16_scales : {false, true}) {
        CAPTURE(sh.type);
        CAPTURE(sh.K);
        CAPTURE(sh.group);
        const int64_t rows = 3;
        const cu::testing::TestWeight w = cu::testing::make_weight(
            sh.type, rows, sh.K, sh.group, bf16_scales, uint32_t(sh.type * 7919 + sh.K));
        REQUIRE(cu::piecewise(w.view));
        REQUIRE(cu::row_bytes(w.view) * rows == int64_t(w.codes.size()));
        for (int64_t r = 0; r < rows; ++r) {
          std::vector<int> seen(size_t(sh.K), 0);
          const uint8_t* row = w.view.codes + r * cu::row_bytes(w.view);
          for (int64_t j = 0; j < cu::pieces_per_row(w.view); ++j) {
            uint32_t words[4];
            std::memcpy(words, row + 16 * j, 16);
            for (int i = 0; i < cu::runs_per_piece(w.view); ++i) {
              const int64_t c = cu::run_col(w.view, j, i);
              REQUIRE(c >= 0);
              REQUIRE(c + 4 <= sh.K);
              REQUIRE(c % 4 == 0);
              float v[4];
              cu::run_values(w.view, words, i, v);
              const double sc = sh.type >= cu::kQ8 ? cu::scale_at(w.view, r, c) : 1.0;
              for (int e = 0; e < 4; ++e) {
                ++seen[size_t(c + e)];
                CHECK(double(v[e]) * sc == w.want[size_t(r * sh.K + c + e)]);
              }
            }
          }
          for (int64_t k = 0; k < sh.K; ++k) {
            CHECK(seen[size_t(k)] == 1);
            CHECK(double(cu::weight_at(w.view, r, k)) == w.want[size_t(r * sh.K + k)]);
          }
          ++checked;
        }
      }
    CHECK(checked == int(shapes.size()) * 2 * 3);
  }

  TEST_CASE("int8 runs: codes, dot products and activations as the layout and FORMAT.md say") {
    // Every Q8/Q4 run's four codes as signed bytes are the run's levels (run_values).
    for (uint32_t t : {cu::kQ8, cu::kQ4})
      for (int64_t K : {96, 160, 416}) {
        CAPTURE(t);
        CAPTURE(K);
        const auto w = cu::testing::make_weight(t, 2, K, 32, false, uint32_t(t + K));
        for (int64_t j = 0; j < 2 * cu::pieces_per_row(w.view); ++j) {
          uint32_t words[4];
          std::memcpy(words, w.view.codes + 16 * j, 16);
          for (int i = 0; i < cu::runs_per_piece(w.view); ++i) {
            float v[4];
            cu::run_values(w.view, words, i, v);
            const uint32_t codes = cu::run_codes_i8(w.view, words, i);
            for (int e = 0; e < 4; ++e) CHECK(float(int8_t(codes >> (8 * e))) == v[e]);
          }
        }
      }
    // q4_centered on every nibble in every byte position; dot4_i8 against plain products.
    for (uint32_t n = 0; n < 16; ++n)
      for (int e = 0; e < 4; ++e) {
        const uint32_t word = (n << (8 * e)) | (uint32_t(15 - n) << (8 * ((e + 1) % 4)));
        const uint32_t c = cu::q4_centered(word);
        CHECK(int8_t(c >> (8 * e)) == int(n) - 8);
        CHECK(int8_t(c >> (8 * ((e + 1) % 4))) == 7 - int(n));
      }
    std::mt19937 rng(3);
    for (int i = 0; i < 1000; ++i) {
      const uint32_t a = rng(), b = rng();
      int want = 0;
      for (int e = 0; e < 4; ++e) want += int(int8_t(a >> (8 * e))) * int(int8_t(b >> (8 * e)));
      CHECK(cu::dot4_i8(a, b) == want);
    }
    // A block's codes and scale: x * (127 / amax) to nearest even (ties included), amax / 127.
    std::vector<float> x(32);
    for (int k = 0; k < 32; ++k) x[size_t(k)] = float((k * 37) % 100) * 0.93f - 46.f;
    x[31] = -127.f;  // amax 127: 127 / amax is 1, so the ties below stay ties
    x[5] = 63.5f;    // rounds to 64
    x[6] = -62.5f;   // and to -62
    uint32_t codes[8];
    const float d = cu::quantize_block_i8(x.data(), codes);
    const float amax = 127.f;
    CHECK(d == amax / 127.f);
    for (int k = 0; k < 32; ++k) {
      const int q = int8_t(codes[k / 4] >> (8 * (k % 4)));
      CHECK(q == int(std::nearbyint(x[size_t(k)] * (127.f / amax))));
    }
    CHECK(int8_t(codes[1] >> 8) == 64);
    CHECK(int8_t(codes[1] >> 16) == -62);
    x[9] = std::numeric_limits<float>::infinity();
    CHECK(std::isnan(cu::quantize_block_i8(x.data(), codes)));
    for (uint32_t c : codes) CHECK(c == 0u);
    std::vector<float> tiny(32, 1e-38f);
    CHECK(cu::quantize_block_i8(tiny.data(), codes) == 1e-38f / 127.f);
    for (uint32_t c : codes) CHECK(c == 0u);
  }

  TEST_CASE("rows that are not whole pieces take the element path") {
    cu::WeightView w;
    w.type = cu::kBF16;
    w.cols = 36;  // 72 bytes a row
    CHECK_FALSE(cu::piecewise(w));
    w.type = cu::kF32;
    w.cols = 6;
    CHECK_FALSE(cu::piecewise(w));
    w.cols = 8;
    CHECK(cu::piecewise(w));
  }

  TEST_CASE("16-bit conversions round as core/dtype.h does") {
    for (uint32_t h = 0; h < 0x10000; ++h) {
      const float a = cu::f16_to_f32(h), b = f16_to_f32(uint16_t(h));
      if (std::isnan(b))
        CHECK(std::isnan(a));
      else
        CHECK(a == b);
      const float c = cu::bf16_to_f32(h), d = bf16_to_f32(uint16_t(h));
      const bool same = c == d || (std::isnan(c) && std::isnan(d));
      CHECK(same);
    }
    std::mt19937 rng(5);
    std::vector<float> xs = {0.f,
                             -0.f,
                             65504.f,
                             65520.f,
                             1e-8f,
                             6e-8f,
                             3e-5f,
                             -2.5f,
                             std::numeric_limits<float>::infinity(),
                             std::numeric_limits<float>::quiet_NaN()};
    for (int i = 0; i < 200000; ++i) {
      uint32_t u = rng();
      float f;
      std::memcpy(&f, &u, 4);
      xs.push_back(f);
      xs.push_back(std::ldexp(float(rng() % 4096), -int(rng() % 40)));  // near the f16 range
    }
    for (float f : xs) {
      CAPTURE(f);
      CHECK(cu::f32_to_f16(f) == f32_to_f16(f));
      CHECK(cu::f32_to_bf16(f) == f32_to_bf16(f));
    }
  }

  TEST_CASE("attention's parts cover each row's positions once") {
    for (int n = 1; n <= 700; n += 3)
      for (int splits : {1, 2, 7, 64}) {
        int next = 0;
        for (int s = 0; s < splits; ++s) {
          int b, e;
          cu::split_range(n, splits, s, &b, &e);
          CHECK(b == next);
          CHECK(e >= b);
          next = e;
        }
        CHECK(next == n);
      }
  }

  TEST_CASE("partial softmaxes merge to the whole one (float64), empty parts included") {
    std::mt19937 rng(11);
    std::normal_distribution<float> nd(0.f, 3.f);
    for (int trial = 0; trial < 200; ++trial) {
      const int n = 1 + int(rng() % 300), splits = 1 + int(rng() % 40);
      std::vector<float> score(static_cast<size_t>(n)), value(static_cast<size_t>(n));
      for (int p = 0; p < n; ++p) score[size_t(p)] = nd(rng), value[size_t(p)] = nd(rng);
      double mx = -1e300, den = 0, num = 0;
      for (float s : score) mx = std::max(mx, double(s));
      for (int p = 0; p < n; ++p) {
        den += std::exp(double(score[size_t(p)]) - mx);
        num += std::exp(double(score[size_t(p)]) - mx) * value[size_t(p)];
      }
      // Each part as the kernel keeps it (one position at a time), then the parts merged in order.
      cu::SoftmaxPart all = {cu::neg_inf(), 0.f};
      float acc_all = 0.f;
      for (int s = 0; s < splits; ++s) {
        int b, e;
        cu::split_range(n, splits, s, &b, &e);
        cu::SoftmaxPart part = {cu::neg_inf(), 0.f};
        float acc = 0.f;
        for (int p = b; p < e; ++p) {
          float fa, fb;
          cu::merge_factors(part, {score[size_t(p)], 1.f}, &fa, &fb, &part);
          acc = acc * fa + fb * value[size_t(p)];
        }
        float fa, fb;
        cu::merge_factors(all, part, &fa, &fb, &all);
        acc_all = acc_all * fa + acc * fb;
      }
      CAPTURE(n);
      CAPTURE(splits);
      CHECK(std::abs(double(all.m) - mx) == 0);
      CHECK(std::abs(double(acc_all / all.l) - num / den) < 1e-5 * (1 + std::abs(num / den)));
    }
  }

  TEST_CASE("argmax: first index on ties, NaN ignored, -1 when nothing is above -inf") {
    const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
    std::mt19937 rng(3);
    for (int trial = 0; trial < 500; ++trial) {
      const int n = 1 + int(rng() % 200);
      std::vector<float> v(static_cast<size_t>(n));
      for (auto& x : v) {
        const int k = int(rng() % 10);
        x = k == 0 ? nan : k == 1 ? -inf : float(int(rng() % 5));
      }
      if (trial % 50 == 0) std::fill(v.begin(), v.end(), trial % 100 ? nan : -inf);
      int want = -1;
      for (int i = 0; i < n; ++i)
        if (!std::isnan(v[size_t(i)]) && v[size_t(i)] > -inf &&
            (want < 0 || v[size_t(i)] > v[size_t(want)]))
          want = i;
      // The kernel's order: strided scans of `threads` lanes, then a pairwise tree.
      const int threads = 16;
      std::vector<float> bv(threads, 0.f);
      std::vector<int> bi(threads, -1);
      for (int t = 0; t < threads; ++t)
        for (int i = t; i < n; i += threads)
          if (cu::argmax_beats(v[size_t(i)], i, bv[size_t(t)], bi[size_t(t)]))
            bv[size_t(t)] = v[size_t(i)], bi[size_t(t)] = i;
      for (int s = threads / 2; s > 0; s /= 2)
        for (int t = 0; t < s; ++t)
          if (cu::argmax_beats(bv[size_t(t + s)], bi[size_t(t + s)], bv[size_t(t)], bi[size_t(t)]))
            bv[size_t(t)] = bv[size_t(t + s)], bi[size_t(t)] = bi[size_t(t + s)];
      CHECK(bi[0] == want);
    }
  }

  TEST_CASE(
      "top-k keys order as the floats do (NaN as -inf, -0 as +0); a radix pass picks the k-th") {
    const float inf = std::numeric_limits<float>::infinity();
    const float denorm = std::numeric_limits<float>::denorm_min();
    const std::vector<float> up = {-inf,   -3e38f, -1.f, -denorm, 0.f,
                                   denorm, 1e-30f, 1.f,  3e38f,   inf};
    for (size_t i = 0; i + 1 < up.size(); ++i)
      CHECK(cu::top_k_key(up[i]) < cu::top_k_key(up[i + 1]));
    CHECK(cu::top_k_key(-0.f) == cu::top_k_key(0.f));
    CHECK(cu::top_k_key(std::nanf("")) == cu::top_k_key(-inf));
    CHECK(cu::top_k_key(-std::nanf("")) == cu::top_k_key(-inf));
    // Random floats: the key order is the float order, pair by pair.
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0.f, 10.f);
    for (int i = 0; i < 10000; ++i) {
      const float a = nd(rng), b = nd(rng);
      CHECK((a < b) == (cu::top_k_key(a) < cu::top_k_key(b)));
    }
    // Digits 255, 200, 7 hold 3, 4 and 10 keys: the 2nd largest is in 255, the 5th in 200 (2 more
    // to find there), the 8th and the 17th in 7 (1 and 10 more).
    std::vector<uint32_t> hist(256, 0);
    hist[255] = 3, hist[200] = 4, hist[7] = 10;
    for (auto [k, digit, left] : std::vector<std::tuple<uint32_t, int, uint32_t>>{
             {2, 255, 2}, {3, 255, 3}, {5, 200, 2}, {7, 200, 4}, {8, 7, 1}, {17, 7, 10}}) {
      CAPTURE(k);
      uint32_t need = k;
      CHECK(cu::radix_pick(hist.data(), &need) == digit);
      CHECK(need == left);
    }
  }

  TEST_CASE("paged KV addresses are distinct and within the cache") {
    const int blocks = 5, heads = 3, bs = 4, hd = 6;
    std::vector<int> hits(size_t(blocks * heads * bs * hd), 0);
    for (int b = 0; b < blocks; ++b)
      for (int h = 0; h < heads; ++h)
        for (int p = 0; p < bs; ++p)
          for (int d = 0; d < hd; ++d) {
            const int64_t at = cu::kv_index(b, h, heads, p, bs, hd) + d;
            REQUIRE(at >= 0);
            REQUIRE(at < int64_t(hits.size()));
            ++hits[size_t(at)];
          }
    for (int x : hits) CHECK(x == 1);
  }
}
