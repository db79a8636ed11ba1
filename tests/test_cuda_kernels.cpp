// The CUDA backend's kernels themselves (backends/cuda/*.cu), run on the CPU through the
// emulation in tests/cuda_emu.h (threads as coroutines; barriers and warp shuffles as on the
// GPU), against float64: the mat-vec for every weight type on both its paths, the int8 mat-vec,
// attention over a
// paged cache written by kv_store (every KV type, head sizes 16 to 128, any split), and the small
// kernels. Every build runs them, a GPU or not; what they cannot check is the GPU's memory model
// and speed (bench/cuda_device.sh on a lent GPU does).
#include "tests/cuda_emu_prelude.h"

// After the prelude, which names the emulated backend's namespace.
#include "backends/cuda/cu_kernels.h"
#include "tests/cuda_test_weights.h"
#include "tests/random_data.h"

using namespace hearth;
namespace cu = hearth::HEARTH_CUDA_NS;

namespace {

using test::randn;

double max_rel_err(const std::vector<float>& got, const std::vector<double>& want) {
  double worst = 0, scale = 1e-30;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(double(got[i]) - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return worst / scale;
}

}  // namespace

TEST_SUITE("cuda_math") {
  TEST_CASE("emulated mat-vec: every weight type, both paths, 1 to 11 token rows") {
    struct Case {
      uint32_t type;
      int64_t K;
      int group;
    };
    // K = 36 BF16 (72-byte rows) and K = 6 F32 take the element path; the rest whole pieces, and
    // F32 256, Q8 1024 and Q4 2048 more than one piece per lane (the next one loaded ahead).
    const std::vector<Case> cases = {
        {cu::kF32, 40, 32},  {cu::kF32, 6, 32},   {cu::kF16, 64, 32},         {cu::kBF16, 256, 32},
        {cu::kBF16, 36, 32}, {cu::kQ8, 160, 32},  {cu::kQ8, 256, 64},         {cu::kQ4, 96, 32},
        {cu::kQ4, 384, 128}, {cu::kQ4, 1024, 32}, {cu::kQ4Codebook, 416, 32}, {cu::kF32, 256, 32},
        {cu::kQ8, 1056, 32}, {cu::kQ4, 2048, 64}};
    for (const Case& c : cases)
      for (int rows : {1, 3, 8, 11}) {
        CAPTURE(c.type);
        CAPTURE(c.K);
        CAPTURE(rows);
        const int64_t N = 19;  // not a whole number of 8-warp blocks
        const auto w = cu::testing::make_weight(c.type, N, c.K, c.group, c.K % 64 == 0,
                                                uint32_t(c.type * 31 + c.K));
        const auto x = randn(size_t(rows * c.K), 7);
        std::vector<float> out(size_t(rows * N) + 5, -1.f);
        cu::matvec(w.view, N, x.data(), rows, out.data(), N, nullptr);
        std::vector<double> want(size_t(rows * N));
        for (int t = 0; t < rows; ++t)
          for (int64_t n = 0; n < N; ++n) {
            double s = 0;
            for (int64_t k = 0; k < c.K; ++k)
              s += double(x[size_t(t * c.K + k)]) * w.want[size_t(n * c.K + k)];
            want[size_t(t * N + n)] = s;
          }
        CHECK(max_rel_err(out, want) < 1e-5);
        CHECK(out[size_t(rows * N)] == -1.f);  // nothing written past the output
      }
  }

  TEST_CASE("emulated int8 mat-vec: Q8 and Q4, 1 to 11 token rows, against the rounded product") {
    // quant_act then matvec_i8, against float64 of the weights and of the activations rounded to
    // int8 per block of 32 as quant/FORMAT.md says (an independent rounding here).
    struct Case {
      uint32_t type;
      int64_t K;
      int group;
    };
    const std::vector<Case> cases = {{cu::kQ8, 160, 32},
                                     {cu::kQ8, 1088, 64},
                                     {cu::kQ4, 96, 32},
                                     {cu::kQ4, 416, 32},
                                     {cu::kQ4, 2048, 128}};
    for (const Case& c : cases)
      for (int rows : {1, 3, 8, 11}) {
        CAPTURE(c.type);
        CAPTURE(c.K);
        CAPTURE(rows);
        const int64_t N = 19;
        const auto w = cu::testing::make_weight(c.type, N, c.K, c.group, c.K % 64 == 0,
                                                uint32_t(c.type * 17 + c.K));
        const auto x = randn(size_t(rows * c.K), 9);
        std::vector<uint32_t> codes(size_t(rows * c.K / 4));
        std::vector<float> scales(size_t(rows * c.K / 32));
        cu::quant_act(x.data(), rows, c.K, codes.data(), scales.data(), nullptr);
        std::vector<float> out(size_t(rows * N) + 5, -1.f);
        cu::matvec_i8(w.view, N, codes.data(), scales.data(), rows, out.data(), N, nullptr);
        std::vector<double> want(size_t(rows * N)), xr(size_t(rows * c.K));
        for (int64_t b = 0; b < rows * c.K; b += 32) {
          float amax = 0.f;
          for (int64_t i = b; i < b + 32; ++i) amax = std::max(amax, std::fabs(x[size_t(i)]));
          for (int64_t i = b; i < b + 32; ++i)
            xr[size_t(i)] = std::nearbyint(x[size_t(i)] * (127.f / amax)) * double(amax / 127.f);
        }
        for (int t = 0; t < rows; ++t)
          for (int64_t n = 0; n < N; ++n) {
            double s = 0;
            for (int64_t k = 0; k < c.K; ++k)
              s += xr[size_t(t * c.K + k)] * w.want[size_t(n * c.K + k)];
            want[size_t(t * N + n)] = s;
          }
        CHECK(max_rel_err(out, want) < 1e-5);
        CHECK(out[size_t(rows * N)] == -1.f);
      }
  }

  TEST_CASE("emulated attention over a paged cache written by kv_store, any split") {
    for (uint32_t kvt : {cu::kF32, cu::kF16, cu::kBF16})
      for (int hd : {16, 32, 128})
        for (int splits : {1, 3, 64}) {
          CAPTURE(kvt);
          CAPTURE(hd);
          CAPTURE(splits);
          const int heads = 4, nkv = 2, bs = 4, n_blocks = 24;
          // Two sequences in one step: one decode row at position 70, five prefill rows from 9.
          const std::vector<int> seq_pos0 = {70, 9}, seq_rows = {1, 5};
          std::vector<int32_t> table = {/* seq 0 */ 23,
                                        5,
                                        17,
                                        0,
                                        9,
                                        12,
                                        3,
                                        21,
                                        14,
                                        7,
                                        1,
                                        19,
                                        10,
                                        6,
                                        15,
                                        2,
                                        22,
                                        8,
                                        /* seq 1 */ 4,
                                        18,
                                        11,
                                        20,
                                        13,
                                        16};
          const int seq1_table = 18;
          const int rows = 6;
          // Every position's keys and values: the earlier ones written by steps before this one.
          const int width = nkv * hd;
          std::vector<int> pos(static_cast<size_t>(rows)), tab(static_cast<size_t>(rows));
          pos[0] = 70, tab[0] = 0;
          for (int i = 0; i < 5; ++i) pos[size_t(1 + i)] = 9 + i, tab[size_t(1 + i)] = seq1_table;
          const size_t esize = kvt == cu::kF32 ? 4 : 2;
          std::vector<uint8_t> kc(size_t(n_blocks * nkv * bs * hd) * esize), vc(kc.size());
          cu::KVLayer kv{kc.data(), vc.data(), kvt, nkv, hd, bs};
          // Write all positions 0..70 of seq 0 and 0..13 of seq 1 through kv_store, one row each.
          std::vector<std::vector<float>> K(2), V(2);
          for (int s = 0; s < 2; ++s) {
            const int n = seq_pos0[size_t(s)] + seq_rows[size_t(s)];
            K[size_t(s)] = randn(size_t(n * width), uint32_t(100 + s));
            V[size_t(s)] = randn(size_t(n * width), uint32_t(200 + s));
            for (int p = 0; p < n; ++p) {
              const int32_t tok = 0, pp = p, tb = s == 0 ? 0 : seq1_table;
              cu::StepDev st;
              st.tokens = &tok;
              st.pos = &pp;
              st.table = &tb;
              st.blocks = table.data();
              cu::kv_store(&K[size_t(s)][size_t(p * width)], &V[size_t(s)][size_t(p * width)], st,
                           1, kv, nullptr);
            }
          }
          // What the cache holds, as the kernel will read it.
          auto stored = [&](float f) {
            return kvt == cu::kF32   ? double(f)
                   : kvt == cu::kF16 ? double(f16_to_f32(f32_to_f16(f)))
                                     : double(bf16_to_f32(f32_to_bf16(f)));
          };
          const auto q = randn(size_t(rows * heads * hd), 300);
          std::vector<int32_t> tokens(static_cast<size_t>(rows), 0);
          cu::StepDev st;
          st.tokens = tokens.data();
          st.pos = pos.data();
          st.table = tab.data();
          st.blocks = table.data();
          std::vector<float> partials(size_t(rows * heads * splits * (hd + 2)));
          std::vector<float> out(size_t(rows * heads * hd));
          const float scale = float(1.0 / std::sqrt(double(hd)));
          cu::attention(q.data(), st, rows, heads, kv, scale, splits, partials.data(), out.data(),
                        nullptr);
          std::vector<double> want(out.size());
          for (int r = 0; r < rows; ++r) {
            const int s = r == 0 ? 0 : 1;
            for (int h = 0; h < heads; ++h) {
              const int kh = h / (heads / nkv), n = pos[size_t(r)] + 1;
              std::vector<double> sc(static_cast<size_t>(n));
              double mx = -1e300;
              for (int p = 0; p < n; ++p) {
                double d = 0;
                for (int i = 0; i < hd; ++i)
                  d += double(q[size_t((r * heads + h) * hd + i)] * scale) *
                       stored(K[size_t(s)][size_t(p * width + kh * hd + i)]);
                sc[size_t(p)] = d;
                mx = std::max(mx, d);
              }
              double den = 0;
              for (auto& v : sc) den += (v = std::exp(v - mx));
              for (int i = 0; i < hd; ++i) {
                double a = 0;
                for (int p = 0; p < n; ++p)
                  a += sc[size_t(p)] * stored(V[size_t(s)][size_t(p * width + kh * hd + i)]);
                want[size_t((r * heads + h) * hd + i)] = a / den;
              }
            }
          }
          CHECK(max_rel_err(out, want) < 1e-5);
        }
  }

  TEST_CASE("emulated norms, RoPE, elementwise, gather, embedding, argmax, 16-bit copies") {
    const int rows = 3, cols = 96;
    const auto x = randn(size_t(rows * cols), 1), y = randn(size_t(rows * cols), 2);
    const auto wt = cu::testing::make_weight(cu::kBF16, 1, cols, 32, false, 9);
    std::vector<float> out(x.size());
    cu::rms_norm(x.data(), wt.view, 1e-6f, rows, cols, out.data(), nullptr);
    std::vector<double> want(x.size());
    for (int r = 0; r < rows; ++r) {
      double ss = 0;
      for (int c = 0; c < cols; ++c)
        ss += double(x[size_t(r * cols + c)]) * x[size_t(r * cols + c)];
      const double inv = 1 / std::sqrt(ss / cols + 1e-6);
      for (int c = 0; c < cols; ++c)
        want[size_t(r * cols + c)] = x[size_t(r * cols + c)] * inv * wt.want[size_t(c)];
    }
    CHECK(max_rel_err(out, want) < 1e-5);

    // RoPE: 2 heads of 48 (24 pairs), angles as given.
    const int half = 24;
    std::vector<float> cs(size_t(rows * half * 2));
    for (size_t i = 0; i < cs.size() / 2; ++i)
      cs[2 * i] = float(std::cos(0.1 * double(i))),
             cs[2 * i + 1] = float(std::sin(0.1 * double(i)));
    cu::rope(x.data(), cs.data(), rows, 2, half, out.data(), nullptr);
    for (int r = 0; r < rows; ++r)
      for (int h = 0; h < 2; ++h)
        for (int k = 0; k < half; ++k) {
          const size_t b = size_t((r * 2 + h) * 2 * half), a = size_t(r * half + k) * 2;
          want[b + size_t(k)] =
              double(x[b + size_t(k)]) * cs[a] - double(x[b + size_t(k + half)]) * cs[a + 1];
          want[b + size_t(k + half)] =
              double(x[b + size_t(k + half)]) * cs[a] + double(x[b + size_t(k)]) * cs[a + 1];
        }
    CHECK(max_rel_err(out, want) < 1e-6);

    cu::binary(x.data(), y.data(), true, int64_t(x.size()), out.data(), nullptr);
    for (size_t i = 0; i < x.size(); ++i) want[i] = x[i] / (1 + std::exp(-double(x[i]))) * y[i];
    CHECK(max_rel_err(out, want) < 1e-6);
    cu::binary(x.data(), y.data(), false, int64_t(x.size()), out.data(), nullptr);
    for (size_t i = 0; i < x.size(); ++i) want[i] = double(x[i]) + y[i];
    CHECK(max_rel_err(out, want) < 1e-7);

    const std::vector<int32_t> picks = {2, 0};
    std::vector<float> g(size_t(2 * cols));
    cu::gather_rows(x.data(), picks.data(), 2, cols, g.data(), nullptr);
    CHECK(std::memcmp(g.data(), x.data() + 2 * cols, cols * 4) == 0);
    CHECK(std::memcmp(g.data() + cols, x.data(), cols * 4) == 0);

    const auto table = cu::testing::make_weight(cu::kQ4, 7, 160, 32, true, 4);
    const std::vector<int32_t> ids = {6, 0, 7, 3};  // 7: past the vocabulary, zeros
    std::vector<float> e(size_t(4 * 160));
    cu::embed(table.view, 7, ids.data(), 4, e.data(), nullptr);
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 160; ++c)
        CHECK(double(e[size_t(r * 160 + c)]) ==
              (ids[size_t(r)] < 7 ? table.want[size_t(ids[size_t(r)] * 160 + c)] : 0.0));

    std::vector<uint16_t> h(size_t(7 * 160));
    cu::dequant_rows(table.view, 2, 3, false, h.data(), nullptr);
    for (int i = 0; i < 3 * 160; ++i)
      CHECK(h[size_t(i)] == f32_to_bf16(float(table.want[size_t(2 * 160 + i)])));
    cu::to_half(x.data(), 10, true, h.data(), nullptr);
    for (int i = 0; i < 10; ++i) CHECK(h[size_t(i)] == f32_to_f16(x[size_t(i)]));

    // Argmax over 3000 columns: a tie (first index wins), NaN ignored, a row of -inf only.
    const int V = 3000;
    std::vector<float> logits(size_t(3 * V), 0.f);
    logits[10] = logits[2000] = 5.f;
    logits[V + 7] = std::nanf("");
    logits[V + 2999] = 1.f;
    for (int i = 0; i < V; ++i) logits[size_t(2 * V + i)] = -std::numeric_limits<float>::infinity();
    std::vector<int32_t> am(3, 99);
    cu::argmax(logits.data(), 3, V, am.data(), nullptr);
    CHECK(am == std::vector<int32_t>{10, 2999, -1});
  }
}
