// What both forms of hearth bench (cmd_bench.cpp: one sequence, bench_parallel.cpp: --parallel)
// share: clocks and medians, the machine's name and peaks, the report's opening fields, and the
// model's arithmetic per token.
#pragma once
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/json_writer.h"
#include "core/runner.h"
#include "core/sampler.h"

namespace hearth {
class Qwen3Model;
struct Qwen3Config;
}  // namespace hearth

namespace hearth::cli {

class Args;

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
double median(std::vector<double> v);

// One status line on stderr, rewritten in place; only on a terminal.
class Progress {
 public:
  Progress() : tty_(isatty(STDERR_FILENO)) {}
  void say(const std::string& s) const {
    if (tty_) std::fprintf(stderr, "\r\033[K[bench] %s", s.c_str());
  }
  ~Progress() {
    if (tty_) std::fprintf(stderr, "\r\033[K");
  }

 private:
  bool tty_;
};

double hugepage_mb();  // mapped memory in huge pages, MiB
double cpu_seconds();  // this process's CPU time (user + system)
double peak_rss_mb();  // this process's peak resident set, MiB
std::string cpu_model();
std::string threads_text(int n);  // "1 thread", "2 threads"

const char* peak_unit(Arithmetic a);
void keep_best(MachinePeaks& best, const MachinePeaks& p);
void peaks_json(JsonWriter& w, const MachinePeaks& p);
std::string peaks_text(const MachinePeaks& p);
std::string names(const std::vector<Arithmetic>& v);  // "f32 FMA + int8 dot"

// What steps of `tokens` tokens in chunks of `chunk` ran on, and the peak to quote them against:
// the highest measured among them, as every counted FLOP ran at most that fast. None (peak 0)
// where one of them has no probe, which could be the fastest.
struct ArithmeticBound {
  std::vector<Arithmetic> used;
  std::string unprobed;  // the first of them without a probe
  Arithmetic by = Arithmetic::F32Fma;
  double peak = 0;
};
ArithmeticBound arithmetic_bound(const Backend& be, const MachinePeaks& p, int tokens, int chunk);
// PREFIX_arithmetic (what ran), PREFIX_peak_arithmetic, PREFIX_peak_gops and
// PREFIX_peak_fraction (gflops against that peak; "", 0 and 0 without one).
void bound_json(JsonWriter& w, const std::string& prefix, const ArithmeticBound& b, double gflops);

SamplingParams bench_sampling(const Args& args, const Qwen3Model& model);
std::string sampling_text(const SamplingParams& s);
void begin_report(JsonWriter& w, const Qwen3Model& model, Runner& runner, DType kv, int prompt,
                  int gen, const SamplingParams& sampling);
bool print_json_or_title(const Args& args, const JsonWriter& w, const Qwen3Model& model,
                         Runner& runner);

// Model FLOPs of a prefill of T tokens after `depth` cached positions (a decode token: T = 1).
double prefill_flops(const Qwen3Config& c, int T, int depth = 0);

// bench --parallel (bench_parallel.cpp).
int bench_parallel(const Args& args);

}  // namespace hearth::cli
