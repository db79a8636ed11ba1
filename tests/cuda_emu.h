// Just enough of CUDA to run the backend's kernel files (backends/cuda/*.cu) on the CPU in the
// tests, where no GPU is: each block's threads are coroutines (ucontext) of one OS thread, run in
// turns; __syncthreads waits for the block, __shfl_xor_sync for the warp (both by yielding until
// every thread of the group has arrived); __shared__ variables are statics, shared by the block
// being run (blocks run one after another). Streams are ignored: a launch runs to completion.
// Memory is host memory. It checks the kernels' logic and indexing, not the GPU's memory model
// or speed. Included through backends/cuda/cu_check.h when HEARTH_CUDA_EMU is defined.
#pragma once
#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <tuple>
#include <vector>

#define __global__
#define __launch_bounds__(...)
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct uint4 {
  uint32_t x, y, z, w;
};
struct float4 {
  float x, y, z, w;
};
inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) {
  return {x, y, z, w};
}
template <typename T>
T __ldg(const T* p) {
  return *p;
}
inline float rsqrtf(float x) {
  return 1.f / std::sqrt(x);
}

using cudaStream_t = struct CUstream_st*;
enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorInvalidConfiguration = 9 };
namespace hearth::cuda_emulation {
// What a launch with a grid or block the GPU refuses leaves, as the runtime's last error does.
inline cudaError_t& last_error() {
  thread_local cudaError_t e = cudaSuccess;
  return e;
}
}  // namespace hearth::cuda_emulation
inline cudaError_t cudaPeekAtLastError() {
  return hearth::cuda_emulation::last_error();
}
inline cudaError_t cudaGetLastError() {
  const cudaError_t e = hearth::cuda_emulation::last_error();
  hearth::cuda_emulation::last_error() = cudaSuccess;
  return e;
}
inline const char* cudaGetErrorString(cudaError_t e) {
  return e == cudaSuccess                     ? "no error"
         : e == cudaErrorInvalidConfiguration ? "invalid configuration argument"
                                              : "invalid value";
}

namespace hearth::cuda_emulation {

// While a stream is captured (cudaStreamBeginCapture), launches are recorded here instead of run.
inline std::vector<std::function<void()>>*& capture() {
  thread_local std::vector<std::function<void()>>* c = nullptr;
  return c;
}

struct Thread {
  ucontext_t ctx;
  std::unique_ptr<char[]> stack;
  dim3 tid;
  int waiting = 0;  // 0 running, 1 at the block barrier, 2 at its warp's barrier
  bool done = false;
};

struct Block {
  std::vector<Thread> threads;
  ucontext_t sched;
  int current = 0;
  dim3 bid, bdim, gdim;
  std::function<void()> body;
  float shfl[1024];
};

inline Block*& block() {
  thread_local Block* b = nullptr;
  return b;
}

inline void yield_to_scheduler() {
  Block& b = *block();
  swapcontext(&b.threads[size_t(b.current)].ctx, &b.sched);
}

inline void trampoline() {
  Block& b = *block();
  b.body();
  b.threads[size_t(b.current)].done = true;
}

// Runs every thread until all are done, releasing a barrier once each thread of its group
// (the block, or the warp) waits there; a thread that ends while others wait at a barrier it
// skipped is a kernel bug, reported.
inline void run_block(Block& b) {
  const int n = int(b.threads.size());
  for (;;) {
    bool progress = false, all_done = true;
    for (int i = 0; i < n; ++i) {
      Thread& t = b.threads[size_t(i)];
      if (t.done || t.waiting) continue;
      b.current = i;
      swapcontext(&b.sched, &t.ctx);
      progress = true;
    }
    for (auto& t : b.threads) all_done = all_done && t.done;
    if (all_done) return;
    // Release whole warps waiting at a shuffle, then the block if every thread is at its barrier.
    // Threads that have ended no longer take part (as on the GPU).
    auto release = [&](int lo, int hi, int kind) {
      bool all = true, any = false;
      for (int i = lo; i < hi; ++i) {
        const Thread& t = b.threads[size_t(i)];
        all = all && (t.done || t.waiting == kind);
        any = any || t.waiting == kind;
      }
      if (!all || !any) return false;
      for (int i = lo; i < hi; ++i) b.threads[size_t(i)].waiting = 0;
      return true;
    };
    bool released = false;
    for (int w = 0; w * 32 < n; ++w) released |= release(w * 32, std::min(n, w * 32 + 32), 2);
    released |= release(0, n, 1);
    if (!released && !progress)
      throw std::runtime_error("cuda_emu: threads wait at barriers that not all of them reach");
  }
}

template <typename... Args>
struct Launch {
  dim3 grid, blk;
  void (*kernel)(Args...);
  template <typename... Given>
  void operator()(Given&&... given) const {
    // The GPU's limits: no empty grid or block, grid y and z up to 65535, 1024 threads a block.
    const unsigned n = blk.x * blk.y * blk.z;
    if (!grid.x || !grid.y || !grid.z || grid.y > 65535 || grid.z > 65535 || n == 0 || n > 1024 ||
        blk.z > 64) {
      last_error() = cudaErrorInvalidConfiguration;
      return;
    }
    if (capture()) {
      auto run = [copy = *this, args = std::make_tuple(Args(given)...)] {
        std::apply([&](const Args&... a) { copy.now(a...); }, args);
      };
      capture()->push_back(run);
      return;
    }
    now(Args(given)...);
  }
  void now(Args... given) const {
    Block b;
    block() = &b;
    b.gdim = grid;
    b.bdim = blk;
    const unsigned n = blk.x * blk.y * blk.z;
    if (n == 0 || n > 1024) throw std::runtime_error("cuda_emu: bad block size");
    b.threads.resize(n);
    auto args = std::make_tuple(given...);
    b.body = [&] { std::apply(kernel, args); };
    for (unsigned z = 0; z < grid.z; ++z)
      for (unsigned y = 0; y < grid.y; ++y)
        for (unsigned x = 0; x < grid.x; ++x) {
          b.bid = dim3(x, y, z);
          for (unsigned i = 0; i < n; ++i) {
            Thread& t = b.threads[i];
            t.tid = dim3(i % blk.x, i / blk.x % blk.y, i / (blk.x * blk.y));
            t.done = false;
            t.waiting = 0;
            if (!t.stack) t.stack.reset(new char[kStack]);
            getcontext(&t.ctx);
            t.ctx.uc_stack.ss_sp = t.stack.get();
            t.ctx.uc_stack.ss_size = kStack;
            t.ctx.uc_link = &b.sched;
            makecontext(&t.ctx, trampoline, 0);
          }
          run_block(b);
        }
    block() = nullptr;
  }
  static constexpr size_t kStack = 64 << 10;
};

template <typename... Args>
Launch<Args...> launch(dim3 grid, dim3 blk, void (*kernel)(Args...)) {
  return {grid, blk, kernel};
}

inline unsigned linear_tid() {
  const Block& b = *block();
  const dim3 t = b.threads[size_t(b.current)].tid;
  return t.x + b.bdim.x * (t.y + b.bdim.y * t.z);
}

inline void syncthreads() {
  block()->threads[size_t(block()->current)].waiting = 1;
  yield_to_scheduler();
}

inline float shfl_xor(float v, int lane_mask) {
  Block& b = *block();
  const unsigned me = linear_tid();
  b.threads[size_t(b.current)].waiting = 2;
  b.shfl[me] = v;
  yield_to_scheduler();  // every lane of the warp has written
  const float got = b.shfl[(me & ~31u) | ((me & 31u) ^ unsigned(lane_mask))];
  b.threads[size_t(b.current)].waiting = 2;
  yield_to_scheduler();  // every lane has read before the next shuffle writes
  return got;
}

}  // namespace hearth::cuda_emulation

// A block's threads switch only at barriers and shuffles, so a plain add is atomic here.
inline unsigned atomicAdd(unsigned* p, unsigned v) {
  const unsigned old = *p;
  *p = old + v;
  return old;
}

#define threadIdx                                                    \
  (::hearth::cuda_emulation::block()                                 \
       ->threads[size_t(::hearth::cuda_emulation::block()->current)] \
       .tid)
#define blockIdx (::hearth::cuda_emulation::block()->bid)
#define blockDim (::hearth::cuda_emulation::block()->bdim)
#define gridDim (::hearth::cuda_emulation::block()->gdim)
#define __syncthreads() ::hearth::cuda_emulation::syncthreads()
#define __shfl_xor_sync(mask, v, o) ::hearth::cuda_emulation::shfl_xor(v, o)
#define HEARTH_LAUNCH(grid, block, stream, ...) \
  ::hearth::cuda_emulation::launch(grid, block, __VA_ARGS__)

// The runtime and cuBLAS calls of the host side, after the launches they may record.
#include "tests/cuda_emu_runtime.h"
