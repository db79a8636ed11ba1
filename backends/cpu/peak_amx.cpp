// The AMX peak probe of `hearth bench` (KernelTable::dot_bf16_tile_loop): tdpbf16ps on 16 x 32
// bf16 tiles already in tile registers, accumulating into 16 x 16 f32 tiles. oneDNN's bf16
// matmul runs on these tiles wherever a CPU has them, so a BF16 prefill on the bf16 GEMM is bound
// by their rate, not by vdpbf16ps's (Xeon VM: ~2 TFLOP/s a core against ~85 GFLOP/s). Compiled for
// AMX through function attributes, so no other file needs AMX flags; filled in only where the CPU
// has AMX-BF16 and the kernel enabled tile state.
#include "backends/cpu/kernels.h"

#if defined(__x86_64__) && defined(__linux__) && \
    ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && __GNUC__ >= 11))
#define HEARTH_AMX_PROBE 1
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace hearth::cpu {

#if defined(HEARTH_AMX_PROBE)
namespace {

// Whether the kernel enabled tile state (XCR0 bits 17 and 18: XTILECFG, XTILEDATA).
bool os_enables_tiles() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1), "c"(0));
  if (!((c >> 27) & 1)) return false;  // no OSXSAVE: xgetbv would fault
  unsigned lo = 0, hi = 0;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & (3u << 17)) == (3u << 17);
}

// Linux hands out tile data per process on request (arch_prctl ARCH_REQ_XCOMP_PERM, 0x1023, for
// XFEATURE_XTILEDATA, 18); without it the first tile instruction faults.
bool request_tiles() {
  return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
}

struct TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Four accumulators from two A and two B tiles, as a GEMM's register block: independent chains
// hide tdpbf16ps's latency (Xeon VM: two already reach the peak, ~1000 FLOPs a cycle). Each tile
// product is 16 x 16 outputs x 32 bf16 products (16 pairs); `iters` counts groups of 16 rounds,
// so a call takes about as long as the same `iters` of the vector loops. Every A and B element is
// 0.5: each product adds 32 x 0.25 = 8 to every accumulator element.
__attribute__((target("amx-tile,amx-bf16"))) float dot_bf16_tile_loop_amx(int64_t iters,
                                                                          double* flops) {
  *flops = 0;
  if (!request_tiles()) return 0;
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  alignas(64) uint16_t half[16 * 32];
  for (uint16_t& h : half) h = 0x3F00;  // bf16 0.5
  alignas(64) float out[4][16 * 16];
  _tile_loadconfig(&cfg);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, half, 64);
  _tile_loadd(5, half, 64);
  _tile_loadd(6, half, 64);
  _tile_loadd(7, half, 64);
  const int64_t n = iters / 16 > 0 ? iters / 16 : 1;
  for (int64_t i = 0; i < n; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, out[0], 64);
  _tile_stored(1, out[1], 64);
  _tile_stored(2, out[2], 64);
  _tile_stored(3, out[3], 64);
  _tile_release();
  *flops = double(n) * 4 * 16 * 16 * 32 * 2;
  return out[0][0] + out[1][0] + out[2][0] + out[3][0];
}

}  // namespace

void fill_peak_amx(KernelTable& k) {
  if (os_enables_tiles()) k.dot_bf16_tile_loop = dot_bf16_tile_loop_amx;
}
#else
void fill_peak_amx(KernelTable&) {}
#endif

}  // namespace hearth::cpu
