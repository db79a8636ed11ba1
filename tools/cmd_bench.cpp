// hearth bench: prefill and decode speed of a model next to the machine's own limits (memory read
// bandwidth, f32 FMA and int8 dot peaks), measured in the same run with the same thread count.
//
// After a warm-up (one full prefill and a short decode, which also pages the weights in and builds
// every GEMM primitive), each of --reps rounds runs a prefill of --prompt random tokens into an
// empty cache, then a greedy decode of --gen tokens from an empty cache (as llama-bench's tg test
// does), each preceded by a bandwidth probe. The probes run in a forked child, so their 1 GiB
// buffer never counts in this process's peak RSS.
//
// JSON fields (--json; rates are medians over the rounds, *_runs list every round):
//   model_dir, weight_dtypes, backend_detail, threads, kv_dtype, prompt_tokens, gen_tokens, reps
//   prefill_tokens_per_s       prompt tokens per second of one prefill (chunked as the runner does)
//   prefill_gflops             its model FLOPs per second: 2 per weight per token in the layers,
//                              attention's 4 * heads * head_dim per visible position, one LM head
//                              row
//   peak_gflops                the same threads running independent f32 FMAs from registers
//   prefill_peak_fraction      prefill_gflops / peak_gflops
//   peak_int8_gops             the same with int8 dot products (vpdpbusd), 0 where the ISA's
//                              kernels have none; INT8/INT4 weights' prefill runs on them
//   prefill_int8_peak_fraction prefill_gflops / peak_int8_gops (0 without)
//   peak_bf16_gflops           the same with bf16 pair dot products (vdpbf16ps), 0 where the ISA
//                              has none; BF16 weights prefill on them with `gemm dnnl-bf16`
//   prefill_bf16_peak_fraction prefill_gflops / peak_bf16_gflops (0 without)
//   decode_tokens_per_s        greedy decode tokens per second (LM head fused with the argmax)
//   decode_weight_bytes        weight bytes read per decoded token: decode_weight_bytes(), less
//                              what the backend proved it need not read (with --hugepages, a BF16
//                              LM head is screened by a Q8 copy: head_screen_saving_bytes)
//   head_screen_saving_bytes   that saving per token (Backend::argmax_bytes_saved), 0 without
//   decode_kv_bytes_per_token  KV cache bytes read per decoded token, averaged over the decode
//   decode_bytes_per_token     decode_weight_bytes + decode_kv_bytes_per_token
//   mem_bw_gbs                 memory read bandwidth, GB/s (1e9 bytes): the best probe of the
//                              run, each a vector read-only sum over 1 GiB split over the threads
//   mem_bw_runs                every probe
//   decode_bw_fraction         decode_bytes_per_token * decode_tokens_per_s / (mem_bw_gbs * 1e9)
//   prefill_cpu_share          CPU time / (wall time * threads) while prefilling, and the same
//   decode_cpu_share           while decoding: well below 1 means other work shared the cores
//   peak_rss_mb                this process's peak resident set, MiB (getrusage)
//   weights_hugepage_mb        mapped memory backed by huge pages, MiB (/proc/self/smaps_rollup)
//   load_ms                    model load and backend creation
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "backends/cpu/cpu_features.h"
#include "backends/cpu/kernels.h"
#include "core/error.h"
#include "core/json_writer.h"
#include "core/runner.h"
#include "core/session.h"
#include "models/qwen3_model.h"
#include "tools/args.h"
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

struct Probe {
  double bw_gbs = 0;
  double peak_gflops = 0;
  double peak_int8_gops = 0;    // 0 where no int8 dot kernel exists
  double peak_bf16_gflops = 0;  // 0 where no bf16 dot kernel exists
};

// Memory read bandwidth and FMA peak with n threads and the kernels of the ISA the run uses, in a
// forked child so that its 1 GiB buffer and threads never touch this process. The best of a few
// passes is the ceiling.
Probe probe_machine(int n_threads, cpu::Isa isa, bool with_peak) {
  const auto table = cpu::make_kernel_table(isa);
  int fds[2];
  if (pipe(fds) != 0) fail("bench: pipe failed");
  const pid_t pid = fork();
  if (pid < 0) fail("bench: fork failed");
  if (pid == 0) {
    close(fds[0]);
    Probe p;
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
      for (int pass = 0; pass < 5; ++pass) {
        const auto t0 = Clock::now();
        std::vector<std::thread> th;
        for (int t = 0; t < n_threads; ++t)
          th.emplace_back([&, t] { sink[size_t(t)] = table.read_sum(buf + t * per, per); });
        for (auto& t : th) t.join();
        p.bw_gbs = std::max(p.bw_gbs, double(per) * 4 * n_threads / seconds_since(t0) / 1e9);
      }
    }
    // The best of three runs of n_threads copies of a register-only loop, in G ops/s.
    auto peak_of = [&](cpu::FmaLoopFn loop) {
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
    if (with_peak) {
      p.peak_gflops = peak_of(table.fma_loop);
      if (table.dot_i8_loop) p.peak_int8_gops = peak_of(table.dot_i8_loop);
      if (table.dot_bf16_loop) p.peak_bf16_gflops = peak_of(table.dot_bf16_loop);
    }
    (void)!write(fds[1], &p, sizeof p);
    _exit(0);
  }
  close(fds[1]);
  Probe p;
  const bool ok = read(fds[0], &p, sizeof p) == ssize_t(sizeof p);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!ok) fail("bench: the machine probe failed");
  return p;
}

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

// Model FLOPs of a prefill of T tokens from an empty cache.
double prefill_flops(const Qwen3Config& c, int T) {
  const double H = c.hidden_size, I = c.intermediate_size, hd = c.head_dim;
  const double nh = c.num_attention_heads, nkv = c.num_key_value_heads;
  const double layer_weights = H * nh * hd * 2 + H * nkv * hd * 2 + 3 * H * I;
  const double attention = 4 * nh * hd * (double(T) * (T + 1) / 2);  // scores and values
  return c.num_hidden_layers * (2 * layer_weights * T + attention) + 2 * H * c.vocab_size;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  Args args(argc, argv,
            {"--model=", "--threads=", "--isa=", "--kv=", "--gemm=", "--prefill-chunk=",
             "--prompt=", "--gen=", "--reps=", "--json", "--hugepages"});
  const int prompt = args.integer("--prompt", 512);
  const int gen = args.integer("--gen", 128);
  const int reps = args.integer("--reps", 2);
  if (prompt < 1 || gen < 1 || reps < 1) fail("--prompt, --gen and --reps must be positive");
  Progress progress;

  progress.say("loading");
  const auto t_load = Clock::now();
  auto model = load_model(args);
  const Qwen3Config& cfg = model->config();
  const BackendOptions bo = backend_options(args);
  const cpu::Isa isa = cpu::choose_isa(cpu::detect_cpu_features(), bo.isa);  // as the backend
  // One 512-token chunk, as llama-bench's default ubatch processes pp512.
  const int chunk = args.integer("--prefill-chunk", 512);
  if (chunk <= 0) fail("--prefill-chunk must be positive");
  Runner runner(create_backend("cpu", bo), model->graph(), cfg.vocab_size,
                cfg.max_position_embeddings, chunk);
  const int threads = runner.backend().threads();
  const double load_ms = seconds_since(t_load) * 1e3;
  if (prompt + 1 > cfg.max_position_embeddings || gen + 1 > cfg.max_position_embeddings)
    fail("--prompt and --gen must stay below max_position_embeddings");

  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> any_token(0, cfg.vocab_size - 1);
  std::vector<int32_t> tokens(static_cast<size_t>(prompt));
  for (auto& t : tokens) t = any_token(rng);

  // CPU time over wall time x threads in the timed sections: below 1 when the machine is busy
  // with other work, which makes every rate here lower than the hardware allows.
  double prefill_cpu = 0, prefill_wall = 0, decode_cpu = 0, decode_wall = 0;
  // One cache for every prefill, as an application keeps its session's (and llama-bench its
  // context's): a fresh one per run would time the kernel faulting its pages in (~230 ms of a
  // 512-token 0.6B prefill on one Zen 5 core with huge pages, 20% of it).
  auto cache = runner.new_kv(prompt);
  auto prefill_once = [&] {
    const double c0 = cpu_seconds();
    const auto t0 = Clock::now();
    runner.forward_argmax(*cache, tokens.data(), prompt, 0);
    const double wall = seconds_since(t0);
    prefill_cpu += cpu_seconds() - c0;
    prefill_wall += wall;
    return wall;
  };
  GenerateOptions go;
  go.max_new_tokens = gen + 1;  // the first token comes from the prompt's step
  go.ignore_eos = true;
  auto decode_once = [&] {
    Session s(runner);
    const double c0 = cpu_seconds();
    const auto t0 = Clock::now();
    const double tps = s.generate({tokens[0]}, go).metrics.tokens_per_s;
    decode_cpu += cpu_seconds() - c0;
    decode_wall += seconds_since(t0);
    return tps;
  };

  progress.say("warm-up");
  prefill_once();
  {
    GenerateOptions w = go;
    w.max_new_tokens = 8;
    Session(runner).generate({tokens[0]}, w);
  }

  std::vector<double> prefill_tps, decode_tps, bw;
  double peak = 0, peak_i8 = 0, peak_bf16 = 0;
  for (int r = 0; r < reps; ++r) {
    progress.say("probe " + std::to_string(r + 1) + "/" + std::to_string(reps));
    const Probe p = probe_machine(threads, isa, r == 0);
    bw.push_back(p.bw_gbs);
    peak = std::max(peak, p.peak_gflops);
    peak_i8 = std::max(peak_i8, p.peak_int8_gops);
    peak_bf16 = std::max(peak_bf16, p.peak_bf16_gflops);
    progress.say("prefill " + std::to_string(r + 1) + "/" + std::to_string(reps));
    prefill_tps.push_back(prompt / prefill_once());
    progress.say("decode " + std::to_string(r + 1) + "/" + std::to_string(reps));
    decode_tps.push_back(decode_once());
  }
  progress.say("probe");
  bw.push_back(probe_machine(threads, isa, false).bw_gbs);

  // Decode step i (1..gen) feeds position i and attends over positions 0..i.
  // (An int8 cache also reads one f32 scale per row.)
  const double kv_per_pos =
      double(cfg.num_hidden_layers) * 2 * cfg.num_key_value_heads *
      (cfg.head_dim * double(dtype_size(bo.kv_dtype)) + (bo.kv_dtype == DType::I8 ? 4 : 0));
  double kv_bytes = 0;
  for (int i = 1; i <= gen; ++i) kv_bytes += kv_per_pos * (i + 1);
  kv_bytes /= gen;
  const double saved = runner.backend().argmax_bytes_saved();
  const double weight_bytes = double(model->decode_weight_bytes()) - saved;
  const double bytes = weight_bytes + kv_bytes;
  const double best_bw = *std::max_element(bw.begin(), bw.end());
  const double pf = median(prefill_tps), dc = median(decode_tps);
  const double pf_gflops = prefill_flops(cfg, prompt) / (prompt / pf) / 1e9;
  const double pf_share = prefill_cpu / (prefill_wall * threads);
  const double dc_share = decode_cpu / (decode_wall * threads);

  JsonWriter w;
  w.begin_object();
  w.field("model_dir", model->dir()).field("weight_dtypes", model->weight_dtypes());
  w.field("backend_detail", runner.backend().describe()).field("threads", threads);
  w.field("kv_dtype", dtype_name(bo.kv_dtype))
      .field("prompt_tokens", prompt)
      .field("gen_tokens", gen);
  w.field("reps", reps);
  w.field("prefill_tokens_per_s", pf);
  w.key("prefill_runs").array(prefill_tps);
  w.field("prefill_gflops", pf_gflops).field("peak_gflops", peak);
  w.field("prefill_peak_fraction", peak > 0 ? pf_gflops / peak : 0.0);
  w.field("peak_int8_gops", peak_i8);
  w.field("prefill_int8_peak_fraction", peak_i8 > 0 ? pf_gflops / peak_i8 : 0.0);
  w.field("peak_bf16_gflops", peak_bf16);
  w.field("prefill_bf16_peak_fraction", peak_bf16 > 0 ? pf_gflops / peak_bf16 : 0.0);
  w.field("decode_tokens_per_s", dc);
  w.key("decode_runs").array(decode_tps);
  w.field("decode_weight_bytes", weight_bytes).field("head_screen_saving_bytes", saved);
  w.field("decode_kv_bytes_per_token", kv_bytes);
  w.field("decode_bytes_per_token", bytes);
  w.field("mem_bw_gbs", best_bw);
  w.key("mem_bw_runs").array(bw);
  w.field("decode_bw_fraction", best_bw > 0 ? bytes * dc / (best_bw * 1e9) : 0.0);
  w.field("peak_rss_mb", peak_rss_mb()).field("weights_hugepage_mb", hugepage_mb());
  w.field("prefill_cpu_share", pf_share).field("decode_cpu_share", dc_share);
  w.field("load_ms", load_ms);
  w.end_object();
  progress.say("");
  if (args.has("--json")) {
    std::printf("%s\n", w.str().c_str());
    return 0;
  }
  std::printf("%s, %s, %s\n", model->dir().c_str(), model->weight_dtypes().c_str(),
              runner.backend().describe().c_str());
  std::printf("prefill %d: %8.1f tokens/s  %6.1f GFLOP/s (%.0f%% of %.0f measured FMA peak", prompt,
              pf, pf_gflops, peak > 0 ? 100 * pf_gflops / peak : 0.0, peak);
  // INT8/INT4 weights multiply int8 activations where the kernels have an int8 GEMM.
  if (peak_i8 > 0 && model->weight_dtypes().find('Q') != std::string::npos)
    std::printf("; %.0f%% of %.0f int8 dot peak", 100 * pf_gflops / peak_i8, peak_i8);
  // BF16 weights multiply bf16 activations when the GEMM is dnnl-bf16.
  else if (peak_bf16 > 0 && runner.backend().describe().find("dnnl-bf16") != std::string::npos)
    std::printf("; %.0f%% of %.0f bf16 dot peak", 100 * pf_gflops / peak_bf16, peak_bf16);
  std::printf(")\n");
  std::printf("decode %d:  %8.2f tokens/s  %6.1f MB/token, %.1f GB/s = %.0f%% of %.1f GB/s read\n",
              gen, dc, bytes / 1e6, bytes * dc / 1e9, 100 * bytes * dc / (best_bw * 1e9), best_bw);
  std::printf("peak RSS %.0f MiB, %.0f MiB in huge pages, load %.0f ms\n", peak_rss_mb(),
              hugepage_mb(), load_ms);
  if (pf_share < 0.9 || dc_share < 0.9)
    std::printf(
        "warning: the threads got %.0f%% (prefill) and %.0f%% (decode) of their CPU time; "
        "the machine is busy and these rates are below what it can do\n",
        100 * pf_share, 100 * dc_share);
  return 0;
}

}  // namespace hearth::cli
