// Building the LM head screens (head_screen.h): a Q8 g32 copy of a BF16 head made with the
// quantizer's round-to-nearest, laid out [codes][F16 scales][bounds], and the per-token sums; the
// high bits of a Q8 head's codes.
#include "backends/cpu/head_screen.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/q8_panel.h"
#include "backends/cpu/screen_row.h"
#include "core/error.h"
#include "core/quant_format.h"

namespace hearth::cpu {

namespace {

constexpr int kGroup = int(kScreenGroup);

size_t align64(size_t n) {
  return (n + 63) / 64 * 64;
}
size_t code_bytes(const Tensor& w) {
  return align64(size_t(w.rows() * w.cols()));
}
size_t scale_bytes(const Tensor& w) {
  return align64(size_t(w.rows() * (w.cols() / kGroup)) * 2);
}

}  // namespace

bool screenable(const Tensor& w) {
  if (w.ndim != 2 || w.rows() <= 0) return false;
  if (w.dtype == DType::Q8)
    return !w.codebook && w.cols() % 128 == 0 && w.rows() % 4 == 0 && w.group_size % 32 == 0;
  return w.dtype == DType::BF16 && w.cols() % kGroup == 0;
}

namespace {

size_t high_bytes(const Tensor& w) {
  return align64(size_t(w.rows() * (w.cols() / 128) * kScreenQ8ChunkBytes));
}
size_t low_bytes(const Tensor& w) {
  return align64(size_t(w.rows() * (w.cols() / 128) * kScreenLowChunkBytes));
}
}  // namespace

size_t head_screen_bytes(const Tensor& w, bool with_low) {
  if (w.dtype == DType::Q8) return high_bytes(w) + (with_low ? low_bytes(w) : 0);
  return code_bytes(w) + scale_bytes(w) + size_t(w.rows()) * kScreenBounds * 4;
}

size_t head_screen_read_bytes(const Tensor& w) {
  if (w.dtype != DType::Q8) return head_screen_bytes(w);
  return head_screen_bytes(w) + size_t(w.rows() * (w.cols() / w.group_size)) * 2;
}

namespace {

// Where head_screen.h's layouts put things: row r's chunk j, counted in chunks from the start of
// either the high or the low bits (4-row groups, then chunks, then rows); the bit of slot p of
// half h in a 16-byte bit plane (byte p % 16), and the shift of its pair (byte p % 32).
int64_t group_chunk(int64_t r, int64_t j, int64_t nc) {
  return (r / 4 * 4) * nc + 4 * j + r % 4;
}
int plane_bit(int h, int p) {
  return 4 * h + p / 16;
}
int pair_shift(int h, int p) {
  return 2 * (2 * h + p / 32);
}

// 16 codes or bytes a vector: positions 16t .. 16t + 15 of a half, so that lane m is byte m of a
// bit plane (plane_bit) and of a pair byte (pair_shift). Per byte in a scalar loop, these were
// most of an INT8 model's load.
using I8x16 = int8_t __attribute__((vector_size(16)));
using U8x16 = uint8_t __attribute__((vector_size(16)));

I8x16 load16(const int8_t* p) {
  I8x16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Rows [r0, r1) of a Q8 head's screen (head_screen.h's layout).
void build_hi(const Tensor& w, uint8_t* dst, int64_t r0, int64_t r1) {
  constexpr int B = kScreenQ8Bits;
  static_assert(B == 5 && kScreenQ8ChunkBytes == 16 * B, "a nibble and a bit per code");
  const int64_t k = w.cols(), nc = k / 128;
  const auto* codes = static_cast<const int8_t*>(w.data);
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t j = 0; j < nc; ++j) {
      const int8_t* q = codes + r * k + 128 * j;
      uint8_t* out = dst + group_chunk(r, j, nc) * kScreenQ8ChunkBytes;
      U8x16 high = {};
      for (int t = 0; t < 4; ++t) {
        // u = (q >> 3) + 16 in [0, 31] for both halves of positions 16t + m.
        const U8x16 u0 = U8x16((load16(q + 16 * t) >> (8 - B)) + (1 << (B - 1)));
        const U8x16 u1 = U8x16((load16(q + 64 + 16 * t) >> (8 - B)) + (1 << (B - 1)));
        const U8x16 nibbles = (u0 & 15) | ((u1 & 15) << 4);
        std::memcpy(out + 16 * t, &nibbles, 16);
        high |= ((u0 >> 4) << plane_bit(0, 16 * t)) | ((u1 >> 4) << plane_bit(1, 16 * t));
      }
      std::memcpy(out + 64, &high, 16);
    }
}

// Rows [r0, r1) of a Q8 head's low bits (head_screen.h's layout).
void build_lo(const Tensor& w, uint8_t* dst, int64_t r0, int64_t r1) {
  static_assert(kScreenQ8Bits == 5 && kScreenLowChunkBytes == 48, "two bits and one per code");
  const int64_t k = w.cols(), nc = k / 128;
  const auto* codes = static_cast<const int8_t*>(w.data);
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t j = 0; j < nc; ++j) {
      const int8_t* q = codes + r * k + 128 * j;
      U8x16 pairs[2] = {}, plane = {};  // bytes 0-15 and 16-31, then 32-47
      for (int h = 0; h < 2; ++h)
        for (int t = 0; t < 4; ++t) {
          const U8x16 l = U8x16(load16(q + 64 * h + 16 * t)) & (kScreenStep - 1);
          pairs[t % 2] |= (l & 3) << pair_shift(h, 16 * t);
          plane |= (l >> 2) << plane_bit(h, 16 * t);
        }
      uint8_t* out = dst + group_chunk(r, j, nc) * kScreenLowChunkBytes;
      std::memcpy(out, pairs, 32);
      std::memcpy(out + 32, &plane, 16);
    }
}

}  // namespace

void screen_row_bf16_baseline(const float* w, int64_t k, int8_t* q, uint16_t* scales,
                              float* bounds) {
  screen_row<16>(w, k, q, scales, bounds);
}

void build_head_screen(const Tensor& w, ScreenLayout layout, void* dst, int64_t r0, int64_t r1,
                       bool with_low, ScreenRowFn row_fn) {
  if (!row_fn) row_fn = screen_row_bf16_baseline;
  if (!screenable(w)) fail("head screen: a ", dtype_name(w.dtype), " head cannot be screened");
  if (w.dtype == DType::Q8) {
    build_hi(w, static_cast<uint8_t*>(dst), r0, r1);
    if (with_low) build_lo(w, static_cast<uint8_t*>(dst) + high_bytes(w), r0, r1);
    return;
  }
  const int64_t k = w.cols(), ng = k / kGroup;
  auto* base = static_cast<uint8_t*>(dst);
  auto* scales = reinterpret_cast<uint16_t*>(base + code_bytes(w));
  auto* bounds = reinterpret_cast<float*>(base + code_bytes(w) + scale_bytes(w));
  const bool panel = layout == ScreenLayout::kPanel;
  if (panel && !q8_panel_fits(w.rows(), k, kGroup)) fail("head screen: rows cannot be panels");
  if (with_low) fail("head screen: a BF16 head keeps no low bits");

  // Whole panels per call, so a range writes only its own bytes; a panel's scales are in it, so
  // they are kept aside until the group is packed.
  const int64_t step = panel ? kQ4PanelRows : 1;
  std::vector<float> row(static_cast<size_t>(k * step));
  std::vector<int8_t> q(static_cast<size_t>(k * step));
  std::vector<uint16_t> group_scales(panel ? size_t(step * ng) : 0);
  for (int64_t g = r0 / step * step; g < r1; g += step) {
    to_f32(w.dtype, static_cast<const uint16_t*>(w.data) + g * k, row.data(), size_t(k * step));
    for (int64_t i = 0; i < step; ++i) {
      uint16_t* sr = panel ? group_scales.data() + i * ng : scales + (g + i) * ng;
      row_fn(row.data() + i * k, k, q.data() + i * k, sr, bounds + (g + i) * kScreenBounds);
      if (!panel) quant::pack_row(8, q.data() + i * k, k, base + (g + i) * k);
    }
    if (panel)
      pack_q8_panel_elements(reinterpret_cast<const uint8_t*>(q.data()), group_scales.data(), k,
                             kGroup, base + g / step * q8_panel_group_bytes(k, kGroup));
  }
}

HeadScreen head_screen_view(const Tensor& w, ScreenLayout layout, const void* dst, bool with_low) {
  const auto* base = static_cast<const uint8_t*>(dst);
  HeadScreen s;
  if (w.dtype == DType::Q8) {
    s.hi = base;
    if (with_low) s.lo = base + high_bytes(w);
    return s;
  }
  s.q8.dtype = DType::Q8;
  s.q8.ndim = 2;
  s.q8.shape = {w.rows(), w.cols(), 0, 0};
  // With w_il the kernels read only panels (every call starts on one), never data.
  s.q8.data = base;
  s.q8.nbytes = size_t(w.rows() * w.cols());
  s.q8.scales = base + code_bytes(w);
  s.q8.scale_dtype = DType::F16;
  s.q8.group_size = kGroup;
  s.w_il = layout == ScreenLayout::kRows ? nullptr : base;
  s.bounds = reinterpret_cast<const float*>(base + code_bytes(w) + scale_bytes(w));
  return s;
}

void split_row_codes(const HeadScreen& s, int64_t k, int64_t row, int8_t* codes) {
  const int64_t nc = k / 128;
  for (int64_t j = 0; j < nc; ++j) {
    const uint8_t* c = s.hi + group_chunk(row, j, nc) * kScreenQ8ChunkBytes;
    const uint8_t* l = s.lo + group_chunk(row, j, nc) * kScreenLowChunkBytes;
    for (int h = 0; h < 2; ++h)
      for (int p = 0; p < 64; ++p) {
        const int u = ((c[p] >> (4 * h)) & 15) | ((c[64 + p % 16] >> plane_bit(h, p)) & 1) << 4;
        const int low =
            ((l[p % 32] >> pair_shift(h, p)) & 3) | ((l[32 + p % 16] >> plane_bit(h, p)) & 1) << 2;
        codes[128 * j + 64 * h + p] = int8_t(kScreenStep * (u - (1 << kScreenOffsetLog2)) + low);
      }
  }
}

void embed_split_rows(const Tensor& w, const HeadScreen& s, const int32_t* rows, float* out,
                      int64_t t0, int64_t t1) {
  const int64_t k = w.cols();
  const int64_t ng = k / w.group_size;
  std::vector<int8_t> codes(static_cast<size_t>(k));
  for (int64_t t = t0; t < t1; ++t) {
    split_row_codes(s, k, rows[t], codes.data());
    Tensor row = w;
    row.shape[0] = 1;
    row.data = codes.data();
    row.nbytes = size_t(k);
    row.scales = static_cast<const uint16_t*>(w.scales) + int64_t(rows[t]) * ng;
    quant::dequantize_row(row, 0, out + t * k);
  }
}

ScreenInput screen_input(const float* x, int64_t k) {
  // Per element |x - x'| <= d / 2, with a relative 2e-4 for the rounding of d and x / d.
  const float half = 0.5001f * std::sqrt(float(kGroup));
  double x1 = 0, x2 = 0, n = 0;
  for (int64_t b = 0; b < k; b += kGroup) {
    double amax = 0, sq = 0;
    for (int64_t j = b; j < b + kGroup; ++j) {
      amax = std::max(amax, double(std::fabs(x[j])));
      sq += double(x[j]) * x[j];
    }
    const double err = half * (amax / 127);  // >= |x_b - x'_b|
    x2 += err;
    x1 += std::sqrt(sq) + err;  // |x'_b| <= |x_b| + |x_b - x'_b|
    n += sq;
  }
  ScreenInput in;
  in.x1 = up(x1 * (1 + 1e-9));
  in.x2 = up(x2 * (1 + 1e-9));
  in.norm = up(std::sqrt(n) * (1 + 1e-9));
  return in;
}

void ScreenPolicy::record(int mode, int64_t ns) {
  Mode& m = modes_[mode];
  if (m.phase == 2) {
    if (++m.n >= kHold) m.phase = 0, m.n = 0;
    return;
  }
  m.ns[m.phase][m.n] = ns;
  if (++m.n < kWindow) return;
  m.n = 0;
  if (++m.phase < 2) return;
  auto median = [](int64_t* v) {
    std::nth_element(v, v + kWindow / 2, v + kWindow);
    return v[kWindow / 2];
  };
  m.screen = median(m.ns[0]) <= median(m.ns[1]);
}

}  // namespace hearth::cpu
