// Reference ops: f32 row-major activations; weights and KV entries widened from their stored type.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/ops.h"
#include "backends/cpu/q8_panel.h"
#include "core/quant_format.h"

namespace hearth::cpu {

namespace {

// One row of a table, or of its packed copy (unpacked into `buf`), as a one-row tensor.
Tensor table_row(const Tensor& table, const void* packed, bool panel, int64_t row,
                 std::vector<uint8_t>& buf) {
  const int64_t row_bytes = int64_t(table.nbytes) / table.rows();
  Tensor r = table;
  r.ndim = 2;
  r.shape = {1, table.cols(), 0, 0};
  r.nbytes = size_t(row_bytes);
  if (packed && panel) {  // the panel holds the row's scales too
    const int64_t ng = table.cols() / table.group_size;
    buf.resize(size_t(row_bytes + 2 * ng));
    auto* scales = reinterpret_cast<uint16_t*>(buf.data() + row_bytes);
    unpack_panel(table.dtype, static_cast<const uint8_t*>(packed), table.cols(), table.group_size,
                 row, 1, buf.data(), scales);
    r.data = buf.data(), r.scales = scales;
    return r;
  }
  if (table.quantized())  // F16/BF16 scales, cols / group_size per row
    r.scales = static_cast<const uint16_t*>(table.scales) + row * (table.cols() / table.group_size);
  if (packed) {
    buf.resize(size_t(row_bytes));
    unpack_rows(packed, row, 1, row_bytes, kPackBf16, buf.data());  // BF16: the one packed type
    r.data = buf.data();
  } else {
    r.data = static_cast<const uint8_t*>(table.data) + row * row_bytes;
  }
  return r;
}

}  // namespace

void embed_rows(const Tensor& table, const void* packed, bool panel, const int32_t* tokens,
                float* out, int64_t t0, int64_t t1) {
  const int64_t n = table.cols();
  std::vector<uint8_t> buf;
  for (int64_t t = t0; t < t1; ++t) {
    const Tensor row = table_row(table, packed, panel, tokens[t], buf);
    if (row.quantized())  // Q8/Q4 tables (the tied LM head shares them): dequantize the row
      quant::dequantize_row(row, 0, out + t * n);
    else
      to_f32(table.dtype, row.data, out + t * n, size_t(n));
  }
}

void embed_coded_rows(const Tensor& table, const CodedBf16& coded, DecodeCodedFn decode,
                      const int32_t* tokens, float* out, int64_t t0, int64_t t1) {
  const int64_t n = table.cols();
  std::vector<uint16_t> group(size_t(kCodedRows * n));
  std::vector<uint16_t> row(static_cast<size_t>(n));
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t g0 = tokens[t] / kCodedRows * kCodedRows;
    decode_bf16_rows(decode, coded, n, g0, kCodedRows, group.data());
    unpack_rows(group.data(), tokens[t] - g0, 1, n * 2, kPackBf16, row.data());
    to_f32(DType::BF16, row.data(), out + t * n, size_t(n));
  }
}

void rms_norm_rows(const float* x, const float* w, int64_t n, float eps, float* out, int64_t r0,
                   int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * n;
    float* o = out + r * n;
    // Sum of squares in double: the reference is float64 and n reaches 4096.
    double ss = 0.0;
    for (int64_t i = 0; i < n; ++i) ss += double(xr[i]) * xr[i];
    const float inv = float(1.0 / std::sqrt(ss / double(n) + double(eps)));
    for (int64_t i = 0; i < n; ++i) o[i] = xr[i] * inv * w[i];
  }
}

void rope_heads(float* x, int n_heads, int head_dim, const float* cos, const float* sin, int64_t p0,
                int64_t p1) {
  const int half = head_dim / 2;
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t t = p / n_heads;
    float* v = x + p * head_dim;
    const float* c = cos + t * half;
    const float* s = sin + t * half;
    for (int i = 0; i < half; ++i) {
      const float a = v[i], b = v[i + half];
      v[i] = a * c[i] - b * s[i];
      v[i + half] = b * c[i] + a * s[i];
    }
  }
}

float KVRows::at(int64_t p, int d, int head_dim) const {
  const void* row = paging.row(data, int(p), int64_t(head_dim) * int64_t(dtype_size(type)));
  switch (type) {
    case DType::F16:
      return f16_to_f32(static_cast<const uint16_t*>(row)[d]);
    case DType::BF16:
      return bf16_to_f32(static_cast<const uint16_t*>(row)[d]);
    case DType::I8:
      return float(static_cast<const int8_t*>(row)[d]) *
             *static_cast<const float*>(paging.row(row_scale, int(p), 4)) *
             (col_factor ? col_factor[d] : 1.f);
    default:
      return static_cast<const float*>(row)[d];
  }
}

void attend_one(const float* q, const KVRows& k, const KVRows& v, int n_pos, int head_dim,
                float scale, float* out) {
  attend_range(q, k, v, 0, n_pos, head_dim, scale, out, nullptr);
}

void attend_range(const float* q, const KVRows& k, const KVRows& v, int p_begin, int p_end,
                  int head_dim, float scale, float* out, float* ml) {
  // Online softmax: one pass over the positions, no score buffer, exact after the final divide.
  float m = -INFINITY, l = 0.f;
  for (int d = 0; d < head_dim; ++d) out[d] = 0.f;
  for (int p = p_begin; p < p_end; ++p) {
    float s = 0.f;
    for (int d = 0; d < head_dim; ++d) s += q[d] * k.at(p, d, head_dim);
    s *= scale;
    if (s > m) {
      const float c = std::exp(m - s);
      l *= c;
      for (int d = 0; d < head_dim; ++d) out[d] *= c;
      m = s;
    }
    const float e = std::exp(s - m);
    l += e;
    for (int d = 0; d < head_dim; ++d) out[d] += e * v.at(p, d, head_dim);
  }
  if (ml) {
    ml[0] = m, ml[1] = l;
    return;
  }
  const float inv = 1.f / l;
  for (int d = 0; d < head_dim; ++d) out[d] *= inv;
}

void silu_mul(const float* a, const float* b, float* out, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; ++i) out[i] = a[i] / (1.f + std::exp(-a[i])) * b[i];
}

void add(const float* a, const float* b, float* out, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; ++i) out[i] = a[i] + b[i];
}

void quantize_kv_row(const float* x, const float* factor, int64_t n, int8_t* codes, float* scale) {
  float amax = 0.f;
  for (int64_t d = 0; d < n; ++d)
    amax = std::max(amax, std::fabs(factor ? x[d] / factor[d] : x[d]));
  *scale = amax / 127.f;
  const float inv = amax > 0.f ? 127.f / amax : 0.f;
  for (int64_t d = 0; d < n; ++d) {
    const float y = factor ? x[d] / factor[d] : x[d];
    codes[d] = int8_t(std::lrint(std::clamp(y * inv, -127.f, 127.f)));
  }
}

void store_kv_row(const KernelTable& kt, DType t, const float* x, const float* factor, int64_t n,
                  void* row, float* scale) {
  switch (t) {
    case DType::I8:
      return kt.quantize_kv_row(x, factor, n, static_cast<int8_t*>(row), scale);
    case DType::F16:
      return kt.to_f16(x, static_cast<uint16_t*>(row), n);
    case DType::BF16:
      return kt.to_bf16(x, static_cast<uint16_t*>(row), n);
    default:
      std::memcpy(row, x, size_t(n) * 4);
  }
}

float round_query16(const float* x, int64_t n, int16_t* q) {
  float amax = 0.f;
  bool finite = true;
  for (int64_t d = 0; d < n; ++d) {
    finite &= std::isfinite(x[d]);
    amax = std::max(amax, std::fabs(x[d]));
  }
  const float inv = finite && amax > 0.f ? 32767.f / amax : 0.f;
  for (int64_t d = 0; d < n; ++d)
    q[d] = finite ? int16_t(std::lrint(std::clamp(x[d] * inv, -32767.f, 32767.f))) : 0;
  return finite ? amax / 32767.f : NAN;
}

std::vector<float> kv_key_factors(const float* w, int head_dim) {
  std::vector<float> f(size_t(head_dim), 1.f);
  const int half = head_dim / 2;
  float top = 0.f;
  for (int d = 0; d < head_dim; ++d) {
    const int pair = head_dim % 2 == 0 ? (d < half ? d + half : d - half) : d;
    f[size_t(d)] = std::max(std::fabs(w[d]), std::fabs(w[pair]));
    top = std::max(top, f[size_t(d)]);
  }
  // A zero (or denormal) gain would divide by zero; such channels are near zero anyway.
  for (float& v : f) v = top > 0.f ? std::max(v, top * 1e-3f) : 1.f;
  return f;
}

}  // namespace hearth::cpu
