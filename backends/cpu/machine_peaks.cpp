// The CPU backend's machine probes (Backend::measure_peaks): memory read bandwidth over a 1 GiB
// buffer and the register-only FMA/dot/tile loops of its own kernel table, run on as many threads
// as its pool, in a forked child so that the buffer and the threads never touch the caller's
// process (its peak RSS included). The best of a few passes is the ceiling.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"

namespace hearth::cpu {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

MachinePeaks probe(const KernelTable& table, int n_threads, bool compute) {
  MachinePeaks p;
  const size_t bytes = size_t(1) << 30, huge = size_t(2) << 20;
  void* raw =
      mmap(nullptr, bytes + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw != MAP_FAILED) {
    auto* buf = reinterpret_cast<float*>((uintptr_t(raw) + huge - 1) & ~uintptr_t(huge - 1));
    madvise(buf, bytes, MADV_HUGEPAGE);
    const int64_t n = int64_t(bytes / 4);
    std::fill(buf, buf + n, 1.f);
    const int64_t per = n / n_threads / 64 * 64;
    std::vector<float> sink(static_cast<size_t>(n_threads));
    // The ceiling is the fastest read loop the machine has, not only the table's own: on Zen 4
    // the AVX2 loop's 256-bit loads read 33-36 GB/s on one thread where 512-bit ones read 30-33.
    std::vector<ReadSumFn> reads = {table.read_sum};
#if defined(__x86_64__)
    if (table.isa == Isa::Avx512) reads.push_back(make_kernel_table(Isa::Avx2).read_sum);
#endif
    for (ReadSumFn read : reads)
      for (int pass = 0; pass < 5; ++pass) {
        const auto t0 = Clock::now();
        std::vector<std::thread> th;
        for (int t = 0; t < n_threads; ++t)
          th.emplace_back([&, t] { sink[size_t(t)] = read(buf + t * per, per); });
        for (auto& t : th) t.join();
        p.read_gbs = std::max(p.read_gbs, double(per) * 4 * n_threads / seconds_since(t0) / 1e9);
      }
  }
  // The best of three runs of n_threads copies of a register-only loop, in G ops/s.
  auto peak_of = [&](FmaLoopFn loop) {
    double best = 0;
    std::vector<double> ops(static_cast<size_t>(n_threads));
    std::vector<float> sink(static_cast<size_t>(n_threads));
    for (int pass = 0; pass < 3; ++pass) {
      const auto t0 = Clock::now();
      std::vector<std::thread> th;
      for (int t = 0; t < n_threads; ++t)
        th.emplace_back([&, t] { sink[size_t(t)] = loop(20'000'000, &ops[size_t(t)]); });
      for (auto& t : th) t.join();
      double total = 0;
      for (double f : ops) total += f;
      best = std::max(best, total / seconds_since(t0) / 1e9);
    }
    return best;
  };
  if (compute) {
    p.fma_gflops = peak_of(table.fma_loop);
    if (table.dot_i8_loop) p.int8_gops = peak_of(table.dot_i8_loop);
    if (table.dot_bf16_loop) p.bf16_gflops = peak_of(table.dot_bf16_loop);
    if (table.dot_bf16_tile_loop) p.bf16_tile_gflops = peak_of(table.dot_bf16_tile_loop);
  }
  return p;
}

// probe() in a forked child; false if it died before answering.
bool probe_in_child(const KernelTable& table, int n_threads, bool compute, MachinePeaks* out) {
  int fds[2];
  if (pipe(fds) != 0) fail("cpu backend: the machine probe's pipe failed");
  const pid_t pid = fork();
  if (pid < 0) fail("cpu backend: the machine probe's fork failed");
  if (pid == 0) {
    close(fds[0]);
    const MachinePeaks p = probe(table, n_threads, compute);
    (void)!write(fds[1], &p, sizeof p);
    _exit(0);
  }
  close(fds[1]);
  const bool ok = read(fds[0], out, sizeof *out) == ssize_t(sizeof *out);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return ok;
}

}  // namespace

MachinePeaks CpuBackend::measure_peaks(bool compute) const {
  // A GEMM library picks its own vector width whatever ISA the kernels were held to (oneDNN ran a
  // BF16 prefill at 99% of the AVX2 FMA peak under --isa avx2), so the FMA peak is then the CPU's
  // widest.
  KernelTable t = kernels_;
  if (gemm_) t.fma_loop = make_kernel_table(detect_cpu_features().best()).fma_loop;
  MachinePeaks p;
  if (probe_in_child(t, pool_.size(), compute, &p)) return p;
  // A VM may list AMX yet fault on the first tile instruction (bench/RESULTS.md: SIGILL on
  // tilezero on an Emerald Rapids VM); the other peaks are still worth having.
  t.dot_bf16_tile_loop = nullptr;
  if (compute && kernels_.dot_bf16_tile_loop && probe_in_child(t, pool_.size(), compute, &p))
    return p;
  fail("cpu backend: the machine probe failed");
}

}  // namespace hearth::cpu
