// oneDNN matmul on one pool thread's block: x [M, K] f32 or bf16 row-major (row stride ldx), W
// [N, K] row-major given to oneDNN as the transposed [K, N] ("ba"), y [M, N] f32 (row stride ldy).
#if defined(HEARTH_HAVE_DNNL)
#include <omp.h>

#include <array>
#include <cstdlib>
#include <map>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

#include "backends/cpu/gemm.h"
#include "core/error.h"

namespace hearth::cpu {

namespace {

using dt = dnnl::memory::data_type;

// oneDNN here runs on OpenMP and sizes its work by the calling thread's OpenMP thread count; each
// pool thread asks for one for the duration of a call and then restores what its caller had.
class OneOmpThread {
 public:
  OneOmpThread() : saved_(omp_get_max_threads()) {
    if (saved_ != 1) omp_set_num_threads(1);
  }
  ~OneOmpThread() {
    if (saved_ != 1) omp_set_num_threads(saved_);
  }
  OneOmpThread(const OneOmpThread&) = delete;
  OneOmpThread& operator=(const OneOmpThread&) = delete;

 private:
  int saved_;
};

class DnnlGemm : public Gemm {
 public:
  DnnlGemm(bool bf16, int n_threads) : bf16_(bf16), engine_(dnnl::engine::kind::cpu, 0) {
    for (int t = 0; t < n_threads; ++t) streams_.emplace_back(engine_);
    cache_.resize(size_t(n_threads));
    scratch_.resize(size_t(n_threads));
  }

  void f32(int tid, int M, int64_t N, int64_t K, const float* x, int64_t ldx, const float* w,
           float* y, int64_t ldy) override {
    run(tid, dt::f32, M, N, K, x, ldx, w, y, ldy);
  }
  void bf16(int tid, int M, int64_t N, int64_t K, const uint16_t* x, int64_t ldx, const uint16_t* w,
            float* y, int64_t ldy) override {
    if (!bf16_) return Gemm::bf16(tid, M, N, K, x, ldx, w, y, ldy);
    run(tid, dt::bf16, M, N, K, x, ldx, w, y, ldy);
  }

 private:
  using Key = std::array<int64_t, 6>;

  void run(int tid, dt type, int M, int64_t N, int64_t K, const void* x, int64_t ldx, const void* w,
           float* y, int64_t ldy) {
    OneOmpThread one;
    const dnnl::memory::desc xd({M, K}, type, {ldx, 1});
    const dnnl::memory::desc wd({K, N}, type, {1, K});
    const dnnl::memory::desc yd({M, N}, dt::f32, {ldy, 1});
    // Primitives are made once per shape and thread; a prefill sees only a handful of shapes.
    auto& cache = cache_[size_t(tid)];
    const Key key{M, N, K, ldx, ldy, int64_t(type)};
    auto it = cache.find(key);
    if (it == cache.end()) {
      // The primitive's scratchpad (packed weight panels) comes from us: left to the library, it
      // is allocated and freed on every call, and the fresh pages the kernel zeroes each time
      // cost more than the multiplication (measured: a third of a 512-token prefill).
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(xd, wd, yd), attr, engine_);
      Scratch& sc = scratch_[size_t(tid)];
      const size_t need = pd.scratchpad_desc().get_size();
      if (need > sc.bytes) {
        sc.mem.reset(static_cast<uint8_t*>(std::aligned_alloc(64, (need + 63) / 64 * 64)));
        if (!sc.mem) fail("oneDNN: cannot allocate a ", need, "-byte scratchpad");
        sc.bytes = need;
      }
      it = cache.emplace(key, Prim{dnnl::matmul(pd), pd.scratchpad_desc()}).first;
    }
    dnnl::memory xm(xd, engine_, const_cast<void*>(x));
    dnnl::memory wm(wd, engine_, const_cast<void*>(w));
    dnnl::memory ym(yd, engine_, y);
    dnnl::memory sm(it->second.scratch, engine_, scratch_[size_t(tid)].mem.get());
    auto& s = streams_[size_t(tid)];
    it->second.prim.execute(s, {{DNNL_ARG_SRC, xm},
                                {DNNL_ARG_WEIGHTS, wm},
                                {DNNL_ARG_DST, ym},
                                {DNNL_ARG_SCRATCHPAD, sm}});
    s.wait();
  }

  struct Prim {
    dnnl::matmul prim;
    dnnl::memory::desc scratch;
  };
  struct Scratch {
    std::unique_ptr<uint8_t, void (*)(void*)> mem{nullptr, std::free};
    size_t bytes = 0;
  };

  bool bf16_;
  dnnl::engine engine_;
  std::vector<dnnl::stream> streams_;
  std::vector<std::map<Key, Prim>> cache_;
  std::vector<Scratch> scratch_;  // per thread, the largest scratchpad of its primitives
};

}  // namespace

std::unique_ptr<Gemm> make_dnnl_gemm(bool bf16, int n_threads) {
  try {
    return std::make_unique<DnnlGemm>(bf16, n_threads);
  } catch (const dnnl::error& e) {
    fail("oneDNN: ", e.what());
  }
}

}  // namespace hearth::cpu
#endif
