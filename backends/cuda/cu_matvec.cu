// Mat-vec for decode: out[t, n] = sum_k x[t, k] W[n, k], W [n_rows, K] in its stored type, x f32
// [rows, K] row-major. A warp per output row: its lanes read the row in 16-byte pieces (one
// 128-bit load each, the next one in flight while the current is multiplied; cu_math.h says which
// columns a piece holds), each piece against up to NT token rows, then a warp-shuffle sum. Q8 and
// Q4 weights may instead meet int8 activations (quant_act, matvec_i8): one dp4a per run of four.
#include <type_traits>

#include "backends/cuda/cu_check.h"
#include "backends/cuda/cu_kernels.h"

namespace hearth::HEARTH_CUDA_NS {

namespace {

constexpr int kWarpsPerBlock = 8;

template <int NT>
__device__ void piece_fma(const WeightView& w, int64_t row, int64_t j, const uint4& u,
                          const float* x, int nt, float acc[NT]) {
  const uint32_t words[4] = {u.x, u.y, u.z, u.w};
  const int runs = runs_per_piece(w);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    if (i >= runs) break;
    float v[4];
    run_values(w, words, i, v);
    const int64_t c = run_col(w, j, i);
    const float sc = w.type >= kQ8 ? scale_at(w, row, c) : 1.f;
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t >= nt) break;
      const float4 xv = __ldg(reinterpret_cast<const float4*>(x + t * w.cols + c));
      acc[t] += sc * (v[0] * xv.x + v[1] * xv.y + v[2] * xv.z + v[3] * xv.w);
    }
  }
}

// TYPE fixes the weight type at compile time (the view's own field is overwritten with it, so
// every switch on it folds away); PIECES: rows of whole 16-byte pieces (cu_math.h piecewise).
template <uint32_t TYPE, int NT, bool PIECES>
__global__ void matvec_kernel(WeightView w, int64_t n_rows, const float* x, int rows, float* out,
                              int64_t ldo) {
  w.type = TYPE;
  const int64_t n = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32, nt = rows < NT ? rows : NT;
  if (n >= n_rows) return;  // the whole warp leaves together
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.f;
  if (PIECES) {
    const uint4* row = reinterpret_cast<const uint4*>(w.codes + n * row_bytes(w));
    const int64_t pieces = pieces_per_row(w);
    int64_t j = lane;
    uint4 u = j < pieces ? __ldg(row + j) : make_uint4(0, 0, 0, 0);
    while (j < pieces) {
      const int64_t next = j + 32;
      const uint4 un = next < pieces ? __ldg(row + next) : make_uint4(0, 0, 0, 0);
      piece_fma<NT>(w, n, j, u, x, nt, acc);
      u = un;
      j = next;
    }
  } else {
    for (int64_t c = lane; c < w.cols; c += 32) {
      const float wv = weight_at(w, n, c);
#pragma unroll
      for (int t = 0; t < NT; ++t)
        if (t < nt) acc[t] += wv * x[t * w.cols + c];
    }
  }
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    float s = acc[t];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0 && t < nt) out[t * ldo + n] = s;
  }
}

// matvec_kernel's whole-piece loop on int8 activations (matvec_i8): each run of four codes is one
// dot4_i8 against the four activation codes of its columns, times the weight's group scale and
// the activations' block scale.
template <uint32_t TYPE, int NT>
__global__ void matvec_i8_kernel(WeightView w, int64_t n_rows, const uint32_t* xq, const float* xd,
                                 int rows, float* out, int64_t ldo) {
  w.type = TYPE;
  const int64_t n = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32, nt = rows < NT ? rows : NT;
  if (n >= n_rows) return;  // the whole warp leaves together
  const int64_t words_per_row = w.cols / 4, blocks_per_row = w.cols / 32;
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.f;
  const uint4* row = reinterpret_cast<const uint4*>(w.codes + n * row_bytes(w));
  const int64_t pieces = pieces_per_row(w);
  for (int64_t j = lane; j < pieces; j += 32) {
    const uint4 u = __ldg(row + j);
    const uint32_t words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < runs_per_piece(w); ++i) {
      const uint32_t codes = run_codes_i8(w, words, i);
      const int64_t c = run_col(w, j, i);
      const float sc = scale_at(w, n, c);
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if (t >= nt) break;
        const int32_t d = dot4_i8(codes, __ldg(xq + t * words_per_row + c / 4));
        acc[t] += sc * __ldg(xd + t * blocks_per_row + c / 32) * float(d);
      }
    }
  }
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    float s = acc[t];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0 && t < nt) out[t * ldo + n] = s;
  }
}

// A thread per block of 32 of each row: its int8 codes and scale (quantize_block_i8).
__global__ void quant_act_kernel(const float* x, int rows, int64_t cols, uint32_t* codes,
                                 float* scales) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, nb = cols / 32;
  if (i >= rows * nb) return;
  const int64_t r = i / nb, b = i % nb;
  uint32_t words[8];
  scales[i] = quantize_block_i8(x + r * cols + 32 * b, words);
  for (int w = 0; w < 8; ++w) codes[(r * cols + 32 * b) / 4 + w] = words[w];
}

template <uint32_t TYPE, int NT>
void launch_i8(const WeightView& w, int64_t n_rows, const uint32_t* xq, const float* xd, int rows,
               float* out, int64_t ldo, cudaStream_t s) {
  HEARTH_LAUNCH(blocks_for(n_rows, kWarpsPerBlock), 32 * kWarpsPerBlock, s,
                matvec_i8_kernel<TYPE, NT>)
  (w, n_rows, xq, xd, rows, out, ldo);
}

// Calls launch(t0, nt, tag) for each block of up to 8 of the step's rows, tag an
// std::integral_constant<int, NT> of the smallest NT in 1, 2, 4, 8 that holds the block's nt.
template <class Launch>
void for_row_blocks(int rows, Launch launch) {
  for (int t0 = 0; t0 < rows; t0 += 8) {
    const int nt = rows - t0 < 8 ? rows - t0 : 8;
    if (nt == 1)
      launch(t0, nt, std::integral_constant<int, 1>());
    else if (nt == 2)
      launch(t0, nt, std::integral_constant<int, 2>());
    else if (nt <= 4)
      launch(t0, nt, std::integral_constant<int, 4>());
    else
      launch(t0, nt, std::integral_constant<int, 8>());
  }
}

template <uint32_t TYPE>
void launch_rows_i8(const WeightView& w, int64_t n_rows, const uint32_t* xq, const float* xd,
                    int rows, float* out, int64_t ldo, cudaStream_t s) {
  for_row_blocks(rows, [&](int t0, int nt, auto tag) {
    launch_i8<TYPE, decltype(tag)::value>(w, n_rows, xq + int64_t(t0) * (w.cols / 4),
                                          xd + int64_t(t0) * (w.cols / 32), nt,
                                          out + int64_t(t0) * ldo, ldo, s);
  });
}

template <uint32_t TYPE, int NT>
void launch(const WeightView& w, int64_t n_rows, const float* x, int rows, float* out, int64_t ldo,
            cudaStream_t s) {
  const unsigned grid = blocks_for(n_rows, kWarpsPerBlock);
  const bool pieces = piecewise(w) && reinterpret_cast<uintptr_t>(w.codes) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(x) % 16 == 0;
  if (pieces) HEARTH_LAUNCH(grid, 32 * kWarpsPerBlock, s, matvec_kernel<TYPE, NT, true>)
  (w, n_rows, x, rows, out, ldo);
  else HEARTH_LAUNCH(grid, 32 * kWarpsPerBlock, s, matvec_kernel<TYPE, NT, false>)(w, n_rows, x,
                                                                                   rows, out, ldo);
}

template <uint32_t TYPE>
void launch_rows(const WeightView& w, int64_t n_rows, const float* x, int rows, float* out,
                 int64_t ldo, cudaStream_t s) {
  for_row_blocks(rows, [&](int t0, int nt, auto tag) {
    launch<TYPE, decltype(tag)::value>(w, n_rows, x + int64_t(t0) * w.cols, nt,
                                       out + int64_t(t0) * ldo, ldo, s);
  });
}

}  // namespace

void matvec(const WeightView& w, int64_t n_rows, const float* x, int rows, float* out, int64_t ldo,
            cudaStream_t s) {
  switch (w.type) {
    case kF32:
      launch_rows<kF32>(w, n_rows, x, rows, out, ldo, s);
      break;
    case kF16:
      launch_rows<kF16>(w, n_rows, x, rows, out, ldo, s);
      break;
    case kBF16:
      launch_rows<kBF16>(w, n_rows, x, rows, out, ldo, s);
      break;
    case kQ8:
      launch_rows<kQ8>(w, n_rows, x, rows, out, ldo, s);
      break;
    case kQ4:
      launch_rows<kQ4>(w, n_rows, x, rows, out, ldo, s);
      break;
    default:
      launch_rows<kQ4Codebook>(w, n_rows, x, rows, out, ldo, s);
      break;
  }
  launched("matvec");
}

void quant_act(const float* x, int rows, int64_t cols, uint32_t* codes, float* scales,
               cudaStream_t s) {
  const int64_t n = int64_t(rows) * (cols / 32);
  HEARTH_LAUNCH(unsigned((n + 255) / 256), 256, s, quant_act_kernel)(x, rows, cols, codes, scales);
  launched("quant_act");
}

void matvec_i8(const WeightView& w, int64_t n_rows, const uint32_t* xq, const float* xd, int rows,
               float* out, int64_t ldo, cudaStream_t s) {
  if (w.type == kQ8)
    launch_rows_i8<kQ8>(w, n_rows, xq, xd, rows, out, ldo, s);
  else
    launch_rows_i8<kQ4>(w, n_rows, xq, xd, rows, out, ldo, s);
  launched("matvec_i8");
}

}  // namespace hearth::HEARTH_CUDA_NS
