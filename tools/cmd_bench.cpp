// hearth bench: prefill and decode speed of a model next to the machine's own limits (memory read
// bandwidth, and the peaks of each arithmetic the kernels use: f32 FMAs, int8 and bf16 dot
// products, AMX bf16 tiles), measured in the same run with the same thread count. The text report
// gives every figure with its unit; warnings (a busy machine) and notes go to stderr, with --json
// too.
//
// After a warm-up (one full prefill and a short decode, which also pages the weights in and builds
// every GEMM primitive), each of --reps rounds runs a prefill of --prompt random tokens into an
// empty cache, then a decode of --gen tokens from an empty cache (as llama-bench's tg test does,
// but sampled as decode_sampling says), each preceded by a bandwidth probe
// (Backend::measure_peaks). The CPU backend probes in a forked child, so its 1 GiB buffer never
// counts in this process's peak RSS.
//
// JSON fields (--json; rates are medians over the rounds, *_runs list every round):
//   hearth_version             the library's version (HEARTH_VERSION)
//   cpu_model                  /proc/cpuinfo's "model name" (Arm: "Hardware", else the implementer
//                              and part numbers), "unknown" without
//   model_dir, weight_dtypes, backend_detail, threads, kv_dtype, kv_block (positions per KV
//   block, --kv-block), prompt_tokens, gen_tokens, reps
//   depth                      --depth N (as llama-bench -d N): positions already in the cache
//                              before each prefill (N random tokens, filled once, untimed) and
//                              before each decode (a sequence of those N tokens, their blocks
//                              cached after the first run, so only its last token is recomputed)
//   prefill_tokens_per_s       prompt tokens per second of one prefill (chunked as the runner does)
//   prefill_gflops             its model FLOPs per second: 2 per weight per token in the layers
//                              (of a mixture of experts, the router and the top-k experts),
//                              attention's 4 * heads * head_dim per visible position, one LM head
//                              row
//   peak_gflops                the same threads running independent f32 FMAs from registers,
//                              GFLOP/s, at the CPU's widest vectors where a GEMM library runs
//                              (it picks its own, whatever --isa)
//   peak_int8_gops             the same with int8 dot products (vpdpbusd), G ops/s at 2 per
//                              multiply-add; 0 where the ISA's kernels have no probe for them
//   peak_bf16_gflops           the same with bf16 pair dot products (vdpbf16ps), 0 where the ISA
//                              has none
//   peak_bf16_tile_gflops      the same with AMX bf16 tile products (tdpbf16ps), 0 without AMX;
//                              oneDNN's bf16 GEMM (`dnnl-bf16`) runs on them where the CPU has them
//   prefill_arithmetic         what the prefill's token-row matmuls and attention ran on
//                              (Backend::step_arithmetic): "f32 FMA", "int8 dot", "bf16 dot",
//                              "bf16 tile (AMX)"
//   prefill_peak_arithmetic    the one of those with the highest measured peak, and
//   prefill_peak_gops          that peak. Every counted FLOP ran on one of them, so
//   prefill_peak_fraction      prefill_gflops / prefill_peak_gops is at most 1 but for noise (the
//                              probe and the prefill run at different moments) and the LM head's
//                              one row, whose arithmetic is not counted (0.3% of a 128-token 0.6B
//                              prefill's FLOPs); "", 0 and 0 where one of them has no probe
//   decode_sampling            how decode drew its tokens: the checkpoint's sampling
//                              (generation_config.json, as `hearth run` samples; Qwen3:
//                              "temperature 0.6, top-k 20, top-p 0.95"), or "greedy" with --greedy,
//                              or what the sampling options say; seed 1234 unless --seed
//   decode_tokens_per_s        decode tokens per second, sampling included
//   decode_weight_bytes        weight bytes read per decoded token: decode_weight_bytes(), less
//                              what the backend proved it need not read (a screened LM head, for
//                              greedy and top-k decoding: head_screen_saving_bytes)
//   head_screen_saving_bytes   that saving per token (Backend::argmax_bytes_saved), 0 without
//   layout_saving_bytes        weight bytes the backend's layout spares every token (BF16 matrices
//                              coded in 12 bits a weight, losslessly: Backend::layout_bytes_saved),
//                              also left out of decode_weight_bytes
//   decode_kv_bytes_per_token  KV cache bytes read per decoded token, averaged over the decode
//   decode_bytes_per_token     decode_weight_bytes + decode_kv_bytes_per_token
//   mem_bw_gbs                 memory read bandwidth, GB/s (1e9 bytes): the best probe of the
//                              run, each a vector read-only sum over 1 GiB split over the threads
//   mem_bw_runs                every probe
//   decode_bw_fraction         decode_bytes_per_token * decode_tokens_per_s / (mem_bw_gbs * 1e9):
//                              above 1 only where the weights fit in the CPU's caches
//   prefill_cpu_share          CPU time / (wall time * threads) while prefilling, and the same
//   decode_cpu_share           while decoding: well below 1 means other work shared the cores
//   peak_rss_mb                this process's peak resident set, MiB (getrusage)
//   weights_hugepage_mb        mapped memory backed by huge pages, MiB (/proc/self/smaps_rollup)
//   load_ms                    model load and backend creation
//   weight_cache               where the weight copies came from: "mapped" from a weight cache
//                              file, "written" to one by this load, "none" (made in memory)
//
// --parallel N1,N2,... (batched decode, as llama-batched-bench -npp/-ntg/-npl): for each N, N
// sequences, each with its own --prompt random tokens (default 128 in this mode) and --gen
// tokens after its first (default 128; ignore_eos), are submitted at once to one Scheduler over one
// Runner (max_seqs = the largest N, --prefill-chunk rows per step, default 512, and a KV budget
// for every sequence's positions) and stepped until idle. The prefill phase runs until the step
// in which the last sequence got its first token; sequences whose prompt finished in an earlier
// step already decode during it (chunked prefill mixes them), and those tokens count in neither
// phase. The decode phase is every step after it. After a warm-up (a lone sequence, then the
// largest N with short prompts), each of --reps rounds (default 1 here) runs every N in the list,
// each preceded by a bandwidth probe. New random prompts every run, so the KV pool's prefix cache
// never hits. JSON (--json): model_dir, weight_dtypes, backend_detail, threads, kv_dtype, kv_block,
// prompt_tokens, gen_tokens, reps, prefill_chunk, peak_gflops, peak_int8_gops, peak_bf16_gflops,
// peak_bf16_tile_gflops, mem_bw_gbs (best probe), mem_bw_runs, peak_rss_mb, load_ms, and
// "parallel": one object per N
// (rates are medians over the rounds):
//   n                               sequences
//   prefill_tokens_per_s            N * prompt_tokens / prefill phase wall time (aggregate)
//   prefill_ms                      the prefill phase's wall time
//   decode_tokens_per_s             tokens sampled in the decode phase, summed over the
//                                   sequences, / its wall time (aggregate)
//   decode_tokens_per_s_per_stream  decode_tokens_per_s / N
//   decode_ms, decode_tokens, decode_steps   the decode phase's wall time, tokens and steps
//   decode_ms_per_step              decode_ms / decode_steps
//   total_tokens_per_s              (N * prompt_tokens + decode_tokens) / (prefill + decode time),
//                                   like llama-batched-bench's S
//   decode_bytes_per_step           decode_weight_bytes() less layout_saving_bytes once per step
//                                   (the whole LM head: no screen saving counted) + each
//                                   sequence's KV reads, averaged
//   decode_bw_fraction              decode_bytes_per_step * steps/s / (mem_bw_gbs * 1e9): at N=1
//                                   the single-stream figure, far below 1 once compute-bound
//   mem_bw_gbs                      the probe just before this N's runs (best over the rounds)
//   prefill_cpu_share, decode_cpu_share     CPU time / (wall time * threads), as above
//   decode_tokens_per_s_runs        every round
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "core/json_writer.h"
#include "core/runner.h"
#include "core/scheduler.h"
#include "core/session.h"
#include "models/qwen3_model.h"
#include "tools/args.h"
#include "tools/bench_plot.h"
#include "tools/commands.h"
#include "tools/loaded.h"

namespace hearth::cli {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

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

// Bytes of mapped memory in huge pages, from the kernel's own accounting.
double hugepage_mb() {
  std::ifstream f("/proc/self/smaps_rollup");
  std::string line;
  double kb = 0;
  while (std::getline(f, line)) {
    if (line.rfind("AnonHugePages:", 0) == 0 || line.rfind("FilePmdMapped:", 0) == 0 ||
        line.rfind("ShmemPmdMapped:", 0) == 0) {
      std::istringstream in(line.substr(line.find(':') + 1));
      double v = 0;
      in >> v;
      kb += v;
    }
  }
  return kb / 1024;
}

// This process's CPU time (user + system), seconds.
double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         1e-6 * double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024;  // Linux reports KiB
}

// The CPU's name: x86 kernels list a "model name"; Arm ones give "Hardware" on some boards and
// otherwise only the implementer and part numbers.
std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::map<std::string, std::string> first;  // key -> its first value
  auto trim = [](const std::string& t) {
    const size_t b = t.find_first_not_of(" \t"), e = t.find_last_not_of(" \t");
    return b == std::string::npos ? std::string() : t.substr(b, e - b + 1);
  };
  std::string line;
  while (std::getline(f, line)) {
    const size_t colon = line.find(':');
    if (colon != std::string::npos)
      first.emplace(trim(line.substr(0, colon)), trim(line.substr(colon + 1)));
  }
  for (const char* k : {"model name", "Hardware"})
    if (!first[k].empty()) return first[k];
  if (!first["CPU part"].empty())
    return "CPU implementer " + first["CPU implementer"] + ", part " + first["CPU part"];
  return "unknown";
}

std::string threads_text(int n) {
  return std::to_string(n) + (n == 1 ? " thread" : " threads");
}

constexpr Arithmetic kArithmetic[] = {Arithmetic::F32Fma, Arithmetic::Int8Dot, Arithmetic::Bf16Dot,
                                      Arithmetic::Bf16Tile};
const char* peak_unit(Arithmetic a) {
  return a == Arithmetic::Int8Dot ? "G int8 ops/s" : "GFLOP/s";
}

// The best of every compute probe so far (bandwidth is kept per probe).
void keep_best(MachinePeaks& best, const MachinePeaks& p) {
  best.fma_gflops = std::max(best.fma_gflops, p.fma_gflops);
  best.int8_gops = std::max(best.int8_gops, p.int8_gops);
  best.bf16_gflops = std::max(best.bf16_gflops, p.bf16_gflops);
  best.bf16_tile_gflops = std::max(best.bf16_tile_gflops, p.bf16_tile_gflops);
}

void peaks_json(JsonWriter& w, const MachinePeaks& p) {
  w.field("peak_gflops", p.fma_gflops).field("peak_int8_gops", p.int8_gops);
  w.field("peak_bf16_gflops", p.bf16_gflops).field("peak_bf16_tile_gflops", p.bf16_tile_gflops);
}

// "f32 FMA 174 GFLOP/s, int8 dot 698 G int8 ops/s, ..." for the peaks measured.
std::string peaks_text(const MachinePeaks& p) {
  std::string s;
  char buf[96];
  for (Arithmetic a : kArithmetic) {
    if (p.of(a) <= 0) continue;
    std::snprintf(buf, sizeof buf, "%s%s %.0f %s", s.empty() ? "" : ", ", arithmetic_name(a),
                  p.of(a), peak_unit(a));
    s += buf;
  }
  return s;
}

// What a prefill of `prompt` tokens in chunks of `chunk` ran on, and the peak to quote it against:
// the highest measured among them, as every counted FLOP ran at most that fast. None (peak 0)
// where one of them has no probe, which could be the fastest.
struct PrefillBound {
  std::vector<Arithmetic> used;
  std::string unprobed;  // the first of them without a probe
  Arithmetic by = Arithmetic::F32Fma;
  double peak = 0;
};
PrefillBound prefill_bound(const Backend& be, const MachinePeaks& p, int prompt, int chunk) {
  PrefillBound b;
  b.used = be.step_arithmetic(std::min(prompt, chunk));
  if (prompt > chunk && prompt % chunk)  // the last, shorter chunk may take other kernels
    for (Arithmetic a : be.step_arithmetic(prompt % chunk))
      if (std::find(b.used.begin(), b.used.end(), a) == b.used.end()) b.used.push_back(a);
  for (Arithmetic a : b.used) {
    if (p.of(a) <= 0 && b.unprobed.empty()) b.unprobed = arithmetic_name(a);
    if (p.of(a) > b.peak) b.peak = p.of(a), b.by = a;
  }
  if (!b.unprobed.empty()) b.peak = 0;
  return b;
}

std::string names(const std::vector<Arithmetic>& v) {
  std::string s;
  for (Arithmetic a : v) s += (s.empty() ? "" : " + ") + std::string(arithmetic_name(a));
  return s;
}

// The decode's sampling: the checkpoint's (generation_config.json), as `hearth run` samples, unless
// --greedy or sampling options say otherwise; seed 1234 unless --seed, so reruns draw alike.
SamplingParams bench_sampling(const Args& args, const Qwen3Model& model) {
  SamplingParams s = generate_options(args, model, true).sampling;
  if (!args.has("--seed")) s.seed = 1234;
  return s;
}

// "greedy", or "temperature 0.6, top-k 20, top-p 0.95" with only the settings in effect.
std::string sampling_text(const SamplingParams& s) {
  if (s.temperature <= 0.f && s.repetition_penalty == 1.f && s.presence_penalty == 0.f &&
      s.frequency_penalty == 0.f)
    return "greedy";
  std::string t;
  char buf[64];
  auto add = [&](const char* name, double v) {
    std::snprintf(buf, sizeof buf, "%s%s %g", t.empty() ? "" : ", ", name, v);
    t += buf;
  };
  if (s.temperature <= 0.f)
    t = "greedy";
  else
    add("temperature", s.temperature);
  if (s.temperature > 0.f && s.top_k > 0) add("top-k", s.top_k);
  if (s.temperature > 0.f && s.top_p < 1.f) add("top-p", s.top_p);
  if (s.temperature > 0.f && s.min_p > 0.f) add("min-p", s.min_p);
  if (s.repetition_penalty != 1.f) add("repetition penalty", s.repetition_penalty);
  if (s.presence_penalty != 0.f) add("presence penalty", s.presence_penalty);
  if (s.frequency_penalty != 0.f) add("frequency penalty", s.frequency_penalty);
  return t;
}

// Opens the report with what every run records: model, backend, threads, KV type and sizes.
void begin_report(JsonWriter& w, const Qwen3Model& model, Runner& runner, DType kv, int prompt,
                  int gen, const SamplingParams& sampling) {
  w.begin_object();
  w.field("hearth_version", HEARTH_VERSION).field("cpu_model", cpu_model());
  w.field("model_dir", model.dir()).field("weight_dtypes", model.weight_dtypes());
  w.field("backend_detail", runner.backend().describe())
      .field("threads", runner.backend().threads());
  w.field("kv_dtype", dtype_name(kv)).field("kv_block", runner.kv_pool().block_size());
  w.field("prompt_tokens", prompt).field("gen_tokens", gen);
  w.field("decode_sampling", sampling_text(sampling));
}

// With --json prints the report and returns true; else prints the table's title line.
bool print_json_or_title(const Args& args, const JsonWriter& w, const Qwen3Model& model,
                         Runner& runner) {
  if (args.has("--json")) {
    std::printf("%s\n", w.str().c_str());
    return true;
  }
  std::printf("%s, %s, %s\n", model.dir().c_str(), model.weight_dtypes().c_str(),
              runner.backend().describe().c_str());
  return false;
}

// Model FLOPs of a prefill of T tokens after `depth` cached positions.
// A sparse (MoE) layer counts its router and the experts a token runs through.
double prefill_flops(const Qwen3Config& c, int T, int depth = 0) {
  const double H = c.hidden_size, I = c.intermediate_size, hd = c.head_dim;
  const double nh = c.num_attention_heads, nkv = c.num_key_value_heads;
  const double attn_weights = H * nh * hd * 2 + H * nkv * hd * 2;
  const double dense_mlp = 3 * H * I;
  const double sparse_mlp =
      H * c.num_experts + 3 * H * double(c.moe_intermediate_size) * c.num_experts_per_tok;
  const double attention =
      4 * nh * hd * (double(T) * depth + double(T) * (T + 1) / 2);  // scores and values
  double flops = 2 * H * c.vocab_size;
  for (int i = 0; i < c.num_hidden_layers; ++i)
    flops += 2 * (attn_weights + (c.sparse_layer(i) ? sparse_mlp : dense_mlp)) * T + attention;
  return flops;
}

struct ParallelRun {
  double prefill_s = 0, decode_s = 0;
  int64_t decode_tokens = 0, decode_steps = 0;
  double prefill_cpu = 0, decode_cpu = 0;
};

// N sequences of `prompt` fresh random tokens, each to gen + 1 tokens (sampled as decode_sampling
// says), submitted at once and stepped until idle.
ParallelRun run_parallel(Runner& runner, int n, int prompt, int gen, const SamplingParams& sampling,
                         std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> any_token(0, runner.vocab_size() - 1);
  Scheduler sched(runner);
  GenerateOptions go;
  go.sampling = sampling;
  go.max_new_tokens = gen + 1;  // the first token comes from the prompt's last step
  go.ignore_eos = true;
  std::map<Scheduler::Id, bool> started;  // id -> has its first token
  std::vector<int32_t> tokens(static_cast<size_t>(prompt));
  for (int i = 0; i < n; ++i) {
    for (auto& t : tokens) t = any_token(rng);
    started[sched.submit(tokens, go)] = false;
  }
  ParallelRun r;
  std::vector<Scheduler::Event> events;
  int first = 0;
  bool decoding = false;
  const double c0 = cpu_seconds();
  const auto t0 = Clock::now();
  while (!sched.idle()) {
    events.clear();
    sched.step(events);
    for (const auto& e : events) {
      if (e.token < 0) continue;
      bool& s = started.at(e.id);
      if (!s) {
        s = true;
        ++first;
      } else if (decoding) {
        ++r.decode_tokens;
      }
    }
    if (decoding) ++r.decode_steps;
    if (!decoding && first == n) {
      decoding = true;
      r.prefill_s = seconds_since(t0);
      r.prefill_cpu = cpu_seconds() - c0;
    }
  }
  r.decode_s = seconds_since(t0) - r.prefill_s;
  r.decode_cpu = cpu_seconds() - c0 - r.prefill_cpu;
  for (const auto& [id, s] : started) {
    const GenerationResult g = sched.take(id);
    if (g.finish_reason != "length" || int(g.tokens.size()) != gen + 1)
      fail("bench --parallel: sequence ended with '", g.finish_reason, "' after ", g.tokens.size(),
           " tokens", g.error.empty() ? "" : ": ", g.error);
  }
  return r;
}

// One N's rounds (bench --parallel), and what the report says of them (medians).
struct ParallelRounds {
  std::vector<double> prefill_tps, decode_tps, total_tps, prefill_ms, decode_ms, ms_step;
  std::vector<double> decode_tokens, decode_steps;
  double bw = 0, pf_cpu = 0, pf_wall = 0, dc_cpu = 0, dc_wall = 0;

  void add(const ParallelRun& run, int n, int prompt) {
    prefill_tps.push_back(double(n) * prompt / run.prefill_s);
    decode_tps.push_back(run.decode_s > 0 ? double(run.decode_tokens) / run.decode_s : 0.0);
    total_tps.push_back((double(n) * prompt + double(run.decode_tokens)) /
                        (run.prefill_s + run.decode_s));
    prefill_ms.push_back(run.prefill_s * 1e3);
    decode_ms.push_back(run.decode_s * 1e3);
    ms_step.push_back(run.decode_steps ? run.decode_s * 1e3 / double(run.decode_steps) : 0.0);
    decode_tokens.push_back(double(run.decode_tokens));
    decode_steps.push_back(double(run.decode_steps));
    pf_cpu += run.prefill_cpu;
    pf_wall += run.prefill_s;
    dc_cpu += run.decode_cpu;
    dc_wall += run.decode_s;
  }
};
struct ParallelRow {
  int n;
  double pf, dc, per_stream, total, pf_ms, dc_ms, ms_step, tokens, steps, bytes, frac, bw;
  double pf_share, dc_share;
};

// step_bytes: what a decode step of n sequences reads (weights + n x KV).
ParallelRow summarise(const ParallelRounds& q, int n, double step_bytes, int threads) {
  ParallelRow x{};
  x.n = n;
  x.pf = median(q.prefill_tps);
  x.dc = median(q.decode_tps);
  x.per_stream = x.dc / x.n;
  x.total = median(q.total_tps);
  x.pf_ms = median(q.prefill_ms);
  x.dc_ms = median(q.decode_ms);
  x.ms_step = median(q.ms_step);
  x.tokens = median(q.decode_tokens);
  x.steps = median(q.decode_steps);
  x.bytes = step_bytes;
  x.bw = q.bw;
  x.frac = x.ms_step > 0 && x.bw > 0 ? x.bytes / (x.ms_step * 1e-3) / (x.bw * 1e9) : 0.0;
  x.pf_share = q.pf_wall > 0 ? q.pf_cpu / (q.pf_wall * threads) : 0.0;
  x.dc_share = q.dc_wall > 0 ? q.dc_cpu / (q.dc_wall * threads) : 0.0;
  return x;
}

void row_json(JsonWriter& w, const ParallelRow& x, const ParallelRounds& q) {
  w.begin_object();
  w.field("n", x.n);
  w.field("prefill_tokens_per_s", x.pf).field("prefill_ms", x.pf_ms);
  w.field("decode_tokens_per_s", x.dc).field("decode_tokens_per_s_per_stream", x.per_stream);
  w.field("decode_ms", x.dc_ms)
      .field("decode_tokens", int64_t(x.tokens))
      .field("decode_steps", int64_t(x.steps));
  w.field("decode_ms_per_step", x.ms_step).field("total_tokens_per_s", x.total);
  w.field("decode_bytes_per_step", x.bytes).field("decode_bw_fraction", x.frac);
  w.field("mem_bw_gbs", x.bw);
  w.field("prefill_cpu_share", x.pf_share).field("decode_cpu_share", x.dc_share);
  w.key("decode_tokens_per_s_runs").array(q.decode_tps);
  w.end_object();
}

void print_parallel_rows(const std::vector<ParallelRow>& rows, double load_ms) {
  bool busy = false;
  for (const ParallelRow& x : rows) busy = busy || x.pf_share < 0.9 || x.dc_share < 0.9;
  if (busy)
    std::fprintf(stderr,
                 "warning: some runs' threads got under 90%% of their CPU time (cpu %% column); "
                 "the machine is busy and those rates are below what it can do\n");
  std::printf("%5s %16s %16s %16s %10s %10s %6s\n", "N", "prefill tokens/s", "decode tokens/s",
              "tokens/s/stream", "ms/step", "% read bw", "cpu %");
  for (const ParallelRow& x : rows)
    std::printf("%5d %16.1f %16.2f %16.2f %10.2f %9.0f%% %5.0f%%\n", x.n, x.pf, x.dc, x.per_stream,
                x.ms_step, 100 * x.frac, 100 * std::min(x.pf_share, x.dc_share));
  std::printf("peak RSS %.0f MiB, load %.0f ms\n", peak_rss_mb(), load_ms);
}

// The runner of bench --parallel: max_n sequences at once, a KV pool that holds every sequence's
// positions in whole blocks plus one block each of slack.
std::unique_ptr<Runner> parallel_runner(const Args& args, const Qwen3Model& model,
                                        const BackendOptions& bo, int max_n, int positions) {
  const Qwen3Config& cfg = model.config();
  RunnerOptions ro = runner_options(args);  // --kv-block; the rest is set below
  ro.prefill_chunk = args.integer("--prefill-chunk", 512);
  if (ro.prefill_chunk < max_n) fail("--prefill-chunk must be at least the largest --parallel N");
  ro.max_seqs = max_n;
  const size_t per_block =
      KVStorage::position_bytes(model.graph().kv, bo.kv_dtype) * size_t(ro.block_size);
  const size_t blocks_per_seq = size_t((positions + ro.block_size - 1) / ro.block_size) + 1;
  ro.kv_budget_bytes = per_block * blocks_per_seq * size_t(max_n);
  return std::make_unique<Runner>(create_backend(args.str("--backend", "cpu"), bo), model.graph(),
                                  cfg.vocab_size, cfg.max_position_embeddings, ro);
}

int bench_parallel(const Args& args) {
  const std::vector<int32_t> ns = args.int_list("--parallel");
  const int prompt = args.integer("--prompt", 128);
  const int gen = args.integer("--gen", 128);
  const int reps = args.integer("--reps", 1);
  if (prompt < 1 || gen < 1 || reps < 1) fail("--prompt, --gen and --reps must be positive");
  if (ns.empty()) fail("--parallel: give a list of sequence counts, e.g. 1,2,4,8,16");
  for (int n : ns)
    if (n < 1 || n > 1024) fail("--parallel: sequence counts must be in [1, 1024]");
  const int max_n = *std::max_element(ns.begin(), ns.end());
  Progress progress;

  progress.say("loading");
  const auto t_load = Clock::now();
  auto model = load_model(args);
  const Qwen3Config& cfg = model->config();
  if (prompt + gen + 1 > cfg.max_position_embeddings)
    fail("--prompt + --gen must stay below max_position_embeddings");
  const BackendOptions bo = backend_options(args, model.get());
  const SamplingParams sampling = bench_sampling(args, *model);
  const auto runner_ptr = parallel_runner(args, *model, bo, max_n, prompt + gen + 1);
  Runner& runner = *runner_ptr;
  runner.prepare();
  const char* cache = finish_weight_cache(bo);
  const int threads = runner.backend().threads();
  const double load_ms = seconds_since(t_load) * 1e3;

  std::mt19937 rng(1234);
  progress.say("warm-up");
  // Pages the weights in and compiles the step sizes: one row, max_n rows, a prefill chunk.
  run_parallel(runner, 1, std::min(prompt, 8), 4, sampling, rng);
  run_parallel(runner, max_n, std::max(1, std::min(prompt, runner.prefill_chunk() / max_n)), 4,
               sampling, rng);

  std::vector<ParallelRounds> per(ns.size());
  std::vector<double> bw;
  MachinePeaks peaks;
  for (int r = 0; r < reps; ++r) {
    for (size_t k = 0; k < ns.size(); ++k) {
      const int n = ns[k];
      progress.say("probe, N=" + std::to_string(n));
      const MachinePeaks p = runner.backend().measure_peaks(r == 0 && k == 0);
      bw.push_back(p.read_gbs);
      per[k].bw = std::max(per[k].bw, p.read_gbs);
      keep_best(peaks, p);
      progress.say("N=" + std::to_string(n) + " round " + std::to_string(r + 1) + "/" +
                   std::to_string(reps));
      per[k].add(run_parallel(runner, n, prompt, gen, sampling, rng), n, prompt);
    }
  }
  progress.say("probe");
  bw.push_back(runner.backend().measure_peaks(false).read_gbs);
  const double best_bw = *std::max_element(bw.begin(), bw.end());
  const double weight_bytes =
      double(model->decode_weight_bytes()) - runner.backend().layout_bytes_saved();
  const double kv_tok = kv_bytes_per_token(cfg, bo.kv_dtype, prompt, gen);

  JsonWriter w;
  begin_report(w, *model, runner, bo.kv_dtype, prompt, gen, sampling);
  w.field("reps", reps).field("prefill_chunk", runner.prefill_chunk());
  peaks_json(w, peaks);
  w.field("mem_bw_gbs", best_bw);
  w.key("mem_bw_runs").array(bw);
  w.field("peak_rss_mb", peak_rss_mb()).field("load_ms", load_ms).field("weight_cache", cache);
  std::vector<ParallelRow> rows;
  w.key("parallel").begin_array();
  for (size_t k = 0; k < ns.size(); ++k) {
    rows.push_back(summarise(per[k], ns[k], weight_bytes + kv_tok * ns[k], threads));
    row_json(w, rows.back(), per[k]);
  }
  w.end_array();
  w.end_object();
  progress.say("");
  if (print_json_or_title(args, w, *model, runner)) return 0;
  std::printf(
      "%s, prompt %d + gen %d tokens per sequence (%s), %d round(s); read %.1f GB/s; "
      "peaks %s\n",
      threads_text(threads).c_str(), prompt, gen, sampling_text(sampling).c_str(), reps, best_bw,
      peaks_text(peaks).c_str());
  print_parallel_rows(rows, load_ms);
  return 0;
}

// One model's bench: rates are medians over the rounds.
struct SingleResult {
  std::vector<double> prefill_tps, decode_tps, bw;
  MachinePeaks peaks;  // the best of each compute probe
  double pf = 0, dc = 0, pf_gflops = 0, weight_bytes = 0, saved = 0, layout_saved = 0, kv_bytes = 0,
         bytes = 0;
  double best_bw = 0, pf_share = 0, dc_share = 0, load_ms = 0;
  const char* weight_cache = "none";
  PrefillBound bound;
  int depth = 0;
};

// The first depth's figures at the top level; with several depths, every depth's in "depths".
void single_json(JsonWriter& w, const std::vector<SingleResult>& all, int reps) {
  const SingleResult& r = all[0];
  w.field("reps", reps);
  w.field("prefill_tokens_per_s", r.pf);
  w.key("prefill_runs").array(r.prefill_tps);
  w.field("prefill_gflops", r.pf_gflops);
  peaks_json(w, r.peaks);
  w.key("prefill_arithmetic").begin_array();
  for (Arithmetic a : r.bound.used) w.value(arithmetic_name(a));
  w.end_array();
  const bool bound = r.bound.peak > 0;
  w.field("prefill_peak_arithmetic", bound ? arithmetic_name(r.bound.by) : "");
  w.field("prefill_peak_gops", r.bound.peak);
  w.field("prefill_peak_fraction", bound ? r.pf_gflops / r.bound.peak : 0.0);
  w.field("decode_tokens_per_s", r.dc);
  w.key("decode_runs").array(r.decode_tps);
  w.field("decode_weight_bytes", r.weight_bytes).field("head_screen_saving_bytes", r.saved);
  w.field("layout_saving_bytes", r.layout_saved);
  w.field("decode_kv_bytes_per_token", r.kv_bytes);
  w.field("decode_bytes_per_token", r.bytes);
  w.field("mem_bw_gbs", r.best_bw);
  w.key("mem_bw_runs").array(r.bw);
  w.field("decode_bw_fraction", r.best_bw > 0 ? r.bytes * r.dc / (r.best_bw * 1e9) : 0.0);
  w.field("peak_rss_mb", peak_rss_mb()).field("weights_hugepage_mb", hugepage_mb());
  w.field("prefill_cpu_share", r.pf_share).field("decode_cpu_share", r.dc_share);
  w.field("load_ms", r.load_ms).field("weight_cache", r.weight_cache);
  if (all.size() > 1) {
    w.key("depths").begin_array();
    for (const SingleResult& d : all) {
      w.begin_object().field("depth", d.depth).field("prefill_tokens_per_s", d.pf);
      w.field("prefill_gflops", d.pf_gflops).field("decode_tokens_per_s", d.dc);
      w.field("decode_kv_bytes_per_token", d.kv_bytes);
      w.field("decode_bytes_per_token", d.bytes).field("mem_bw_gbs", d.best_bw);
      w.field("decode_bw_fraction", d.best_bw > 0 ? d.bytes * d.dc / (d.best_bw * 1e9) : 0.0);
      w.end_object();
    }
    w.end_array();
  }
  w.end_object();
}

// Warnings and notes, on stderr whatever the report's form.
void single_notes(const SingleResult& r) {
  if (!r.bound.unprobed.empty())
    std::fprintf(stderr,
                 "note: the prefill ran on %s, whose peak was not measured (no probe for this "
                 "ISA, or it failed): no fraction of a peak is given\n",
                 r.bound.unprobed.c_str());
  if (r.bound.peak > 0 && r.pf_gflops > r.bound.peak)
    std::fprintf(stderr,
                 "note: the prefill outran the measured %s peak, which can only be noise: the "
                 "machine was busier during the probe than during the prefill\n",
                 arithmetic_name(r.bound.by));
  if (r.best_bw > 0 && r.bytes * r.dc > r.best_bw * 1e9)
    std::fprintf(stderr,
                 "note: decode read faster than the measured memory bandwidth: its %.0f MB per "
                 "token fit in the CPU's caches\n",
                 r.bytes / 1e6);
  if (r.pf_share < 0.9 || r.dc_share < 0.9)
    std::fprintf(stderr,
                 "warning: the threads got %.0f%% (prefill) and %.0f%% (decode) of their CPU "
                 "time; the machine is busy and these rates are below what it can do\n",
                 100 * r.pf_share, 100 * r.dc_share);
}

// One depth's lines; the peaks before the first, memory after the last.
void single_text(const SingleResult& r, int threads, int prompt, int gen,
                 const SamplingParams& sampling, bool first, bool last) {
  const std::string at = r.depth ? " at depth " + std::to_string(r.depth) : "";
  // A backend that measures no peaks (a GPU's, so far) gets its rates without fractions.
  const std::string peaks = peaks_text(r.peaks);
  if (first)
    std::printf("%s; peaks %s\n", threads_text(threads).c_str(),
                peaks.empty() ? "not measured by this backend" : peaks.c_str());
  // Named by the arithmetic whose peak bounds it; JSON's prefill_arithmetic lists all it ran on.
  std::printf("prefill %d%s: %8.1f tokens/s, %6.1f GFLOP/s", prompt, at.c_str(), r.pf, r.pf_gflops);
  if (r.bound.peak > 0)
    std::printf(" = %.0f%% of the %s peak, %.0f %s\n", 100 * r.pf_gflops / r.bound.peak,
                arithmetic_name(r.bound.by), r.bound.peak, peak_unit(r.bound.by));
  else if (!r.bound.used.empty())
    std::printf(" on %s\n", names(r.bound.used).c_str());
  else
    std::printf("\n");
  std::printf("decode %d%s (%s):\n          %8.2f tokens/s, %6.1f MB/token, %.1f GB/s", gen,
              at.c_str(), sampling_text(sampling).c_str(), r.dc, r.bytes / 1e6,
              r.bytes * r.dc / 1e9);
  if (r.best_bw > 0)
    std::printf(" = %.0f%% of %.1f GB/s read\n", 100 * r.bytes * r.dc / (r.best_bw * 1e9),
                r.best_bw);
  else
    std::printf("\n");
  if (last)
    std::printf("peak RSS %.0f MiB, %.0f MiB in huge pages, load %.0f ms%s\n", peak_rss_mb(),
                hugepage_mb(), r.load_ms,
                std::string(r.weight_cache) == "mapped" ? " (weights from the weight cache)" : "");
}

std::vector<PlotPoint> plot_points(const std::vector<SingleResult>& all) {
  std::vector<PlotPoint> v;
  for (const SingleResult& r : all)
    v.push_back({r.depth, r.dc, r.best_bw > 0 ? r.best_bw * 1e9 / r.bytes : 0.0});
  return v;
}

std::string plot_title(const Qwen3Model& model, Runner& runner, const SamplingParams& sampling) {
  return model.dir() + ", " + model.weight_dtypes() + "; " + runner.backend().describe() + "; " +
         sampling_text(sampling) + "; " + cpu_model();
}

}  // namespace

std::vector<std::string> bench_options() {
  std::vector<std::string> o = {
      "--model=",         "--threads=", "--isa=",      "--kv=",           "--gemm=",
      "--prefill-chunk=", "--prompt=",  "--gen=",      "--reps=",         "--json",
      "--hugepages",      "--mmap",     "--parallel=", "--backend=",      "--device=",
      "--depth=",         "--plot=",    "--kv-block=", "--weight-cache=", "--no-weight-cache"};
  for (const std::string& s : sampling_options())
    if (s != "--max-new-tokens=" && s != "--ignore-eos") o.push_back(s);
  return o;
}

namespace {

// The single-sequence bench's state across depths: one cache for every prefill, as an
// application keeps its session's (and llama-bench its context's): a fresh one per run would time
// the kernel faulting its pages in (~230 ms of a 512-token 0.6B prefill on one Zen 5 core with
// huge pages, 20% of it). Its first `filled` positions hold the context's; the prefills write
// theirs after the depth measured. Its first `published` blocks, all context, are the prefix
// cache's too, so that the decode sessions share them rather than compute and hold the context
// a second time.
struct SingleBench {
  Runner& runner;
  Engine& engine;
  const Qwen3Model& model;
  DType kv;
  SamplingParams sampling;
  int prompt, gen, reps;
  std::vector<int32_t> tokens, context;  // the prompt; the deepest context
  std::unique_ptr<KVCache> cache;
  int filled = 0, published = 0;
  uint64_t parent = KVPool::kRootHash;  // the hash of the published blocks' tokens
  bool warm = false;
};

// Fills the context to `depth` positions and publishes its full blocks, as a conversation's are.
void fill_context(SingleBench& b, int depth, Progress& progress) {
  if (depth > b.filled) {
    progress.say("filling the context to " + std::to_string(depth));
    b.runner.forward_argmax(*b.cache, b.context.data() + b.filled, depth - b.filled, b.filled);
  }
  b.filled = depth;
  KVPool& pool = b.runner.kv_pool();
  const int bs = pool.block_size();
  for (; b.published < depth / bs; ++b.published)
    b.parent = pool.publish(b.cache->blocks[size_t(b.published)], b.parent,
                            b.context.data() + size_t(b.published) * size_t(bs));
}

// Prefill and decode rates with `depth` positions already in the context.
SingleResult measure_at(SingleBench& b, int depth, Progress& progress) {
  fill_context(b, depth, progress);
  // Decode starts from the context (its blocks shared with the prefill's cache), or from one
  // token.
  const std::vector<int32_t> decode_prompt =
      depth ? std::vector<int32_t>(b.context.begin(), b.context.begin() + depth)
            : std::vector<int32_t>{b.tokens[0]};
  // CPU time over wall time x threads in the timed sections: below 1 when the machine is busy
  // with other work, which makes every rate here lower than the hardware allows.
  double prefill_cpu = 0, prefill_wall = 0, decode_cpu = 0, decode_wall = 0;
  auto prefill_once = [&] {
    const double c0 = cpu_seconds();
    const auto t0 = Clock::now();
    b.runner.forward_argmax(*b.cache, b.tokens.data(), b.prompt, depth);
    const double wall = seconds_since(t0);
    prefill_cpu += cpu_seconds() - c0;
    prefill_wall += wall;
    return wall;
  };
  GenerateOptions go;
  go.max_new_tokens = b.gen + 1;  // the first token comes from the prompt's step
  go.ignore_eos = true;
  go.sampling = b.sampling;
  auto decode_once = [&] {
    Session s(b.engine);
    const double c0 = cpu_seconds();
    const auto t0 = Clock::now();
    const double tps = s.generate(decode_prompt, go).metrics.tokens_per_s;
    decode_cpu += cpu_seconds() - c0;
    decode_wall += seconds_since(t0);
    return tps;
  };
  progress.say("warm-up");
  if (!b.warm) prefill_once();
  GenerateOptions w = go;
  w.max_new_tokens = 8;
  Session(b.engine).generate(decode_prompt, w);
  b.warm = true;
  prefill_cpu = prefill_wall = decode_cpu = decode_wall = 0;

  SingleResult res;
  const std::string of = "/" + std::to_string(b.reps);
  for (int r = 0; r < b.reps; ++r) {
    progress.say("probe " + std::to_string(r + 1) + of);
    const MachinePeaks p = b.runner.backend().measure_peaks(r == 0);
    res.bw.push_back(p.read_gbs);
    keep_best(res.peaks, p);
    progress.say("prefill " + std::to_string(r + 1) + of);
    res.prefill_tps.push_back(b.prompt / prefill_once());
    progress.say("decode " + std::to_string(r + 1) + of);
    res.decode_tps.push_back(decode_once());
  }
  progress.say("probe");
  res.bw.push_back(b.runner.backend().measure_peaks(false).read_gbs);

  const Qwen3Config& cfg = b.model.config();
  const int threads = b.runner.backend().threads();
  res.kv_bytes = kv_bytes_per_token(cfg, b.kv, int(decode_prompt.size()), b.gen);
  res.saved = b.runner.backend().argmax_bytes_saved();
  res.layout_saved = b.runner.backend().layout_bytes_saved();
  res.weight_bytes = double(b.model.decode_weight_bytes()) - res.saved - res.layout_saved;
  res.bytes = res.weight_bytes + res.kv_bytes;
  res.best_bw = *std::max_element(res.bw.begin(), res.bw.end());
  res.pf = median(res.prefill_tps), res.dc = median(res.decode_tps);
  res.pf_gflops = prefill_flops(cfg, b.prompt, depth) / (b.prompt / res.pf) / 1e9;
  res.pf_share = prefill_cpu / (prefill_wall * threads);
  res.dc_share = decode_cpu / (decode_wall * threads);
  res.bound = prefill_bound(b.runner.backend(), res.peaks, b.prompt, b.runner.prefill_chunk());
  res.depth = depth;
  progress.say("");
  single_notes(res);
  return res;
}

// --depth: one depth or an ascending list (as llama-bench -d 0,4096,16384).
std::vector<int> depth_list(const Args& args) {
  std::vector<int> d;
  for (int32_t v : args.has("--depth") ? args.int_list("--depth") : std::vector<int32_t>{0}) {
    if (v < 0) fail("--depth must be >= 0, got ", v);
    if (!d.empty() && v <= d.back()) fail("--depth: list the depths in ascending order");
    d.push_back(v);
  }
  if (d.empty()) fail("--depth: give a depth or a list, e.g. 0,4096,16384");
  return d;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  Args args(argc, argv, bench_options());
  if (args.has("--parallel")) {
    if (args.has("--depth")) fail("--depth is for the single-sequence bench, not --parallel");
    if (args.has("--plot")) fail("--plot draws the single-sequence bench, not --parallel");
    return bench_parallel(args);
  }
  const int prompt = args.integer("--prompt", 512);
  const int gen = args.integer("--gen", 128);
  const int reps = args.integer("--reps", 2);
  const std::vector<int> depths = depth_list(args);
  const int deepest = depths.back();
  if (prompt < 1 || gen < 1 || reps < 1) fail("--prompt, --gen and --reps must be positive");
  Progress progress;

  progress.say("loading");
  const auto t_load = Clock::now();
  auto model = load_model(args);
  const Qwen3Config& cfg = model->config();
  const BackendOptions bo = backend_options(args, model.get());
  const SamplingParams sampling = bench_sampling(args, *model);
  // One 512-token chunk, as llama-bench's default ubatch processes pp512.
  const int chunk = args.integer("--prefill-chunk", 512);
  if (chunk <= 0) fail("--prefill-chunk must be positive");
  const int max_pos = cfg.max_position_embeddings;
  if (deepest + prompt + 1 > max_pos || deepest + gen + 1 > max_pos)
    fail("--depth + --prompt and --depth + --gen must stay below max_position_embeddings (",
         max_pos, ")");
  RunnerOptions ro = runner_options(args);  // --kv-block; the rest is set below
  ro.prefill_chunk = chunk;
  // The prefill's cache holds the context, which the decode's sequences share, and each depth's
  // decode its own last block of the context and what it generates (cached after it ends): the
  // pool holds that, not the model's whole context, which a GPU allocates up front (a 0.6B
  // model's 40,960 positions in f32 are 9.4 GB, and one layer's are more than a 128 MiB binding
  // holds).
  const int positions =
      2 * ro.block_size + deepest + prompt + int(depths.size()) * (gen + 1 + 3 * ro.block_size);
  ro.kv_budget_bytes =
      KVStorage::position_bytes(model->graph().kv, bo.kv_dtype) * size_t(positions);
  Runner runner(create_backend(args.str("--backend", "cpu"), bo), model->graph(), cfg.vocab_size,
                max_pos, ro);
  runner.prepare();
  const char* cache = finish_weight_cache(bo);
  Engine engine(runner);
  const double load_ms = seconds_since(t_load) * 1e3;

  SingleBench b{runner, engine, *model, bo.kv_dtype, sampling, prompt, gen, reps, {}, {}, {}};
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> any_token(0, cfg.vocab_size - 1);
  b.tokens.resize(size_t(prompt));
  b.context.resize(size_t(deepest));
  for (auto& t : b.tokens) t = any_token(rng);
  for (auto& t : b.context) t = any_token(rng);
  b.cache = runner.new_kv(deepest + prompt);
  std::vector<SingleResult> results;
  for (int d : depths) {
    results.push_back(measure_at(b, d, progress));
    results.back().load_ms = load_ms;
    results.back().weight_cache = cache;
  }

  if (args.has("--plot"))
    write_text_file(args.str("--plot"),
                    depth_plot_svg(plot_title(*model, runner, sampling), plot_points(results)));
  JsonWriter w;
  begin_report(w, *model, runner, bo.kv_dtype, prompt, gen, sampling);
  w.field("depth", depths[0]);
  single_json(w, results, reps);
  if (print_json_or_title(args, w, *model, runner)) return 0;
  for (size_t i = 0; i < results.size(); ++i)
    single_text(results[i], runner.backend().threads(), prompt, gen, sampling, i == 0,
                i + 1 == results.size());
  return 0;
}

}  // namespace hearth::cli
