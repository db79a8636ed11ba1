// hearth bench --parallel N1,N2,... (batched decode, as llama-batched-bench -npp/-ntg/-npl): for
// each N, N sequences, each with its own --prompt random tokens (default 128 in this mode) and
// --gen tokens after its first (default 128; ignore_eos), are submitted at once to one Scheduler
// over one Runner (max_seqs = the largest N, --prefill-chunk rows per step, default 512, and a KV
// budget for every sequence's positions) and stepped until idle. The prefill phase runs until the
// step in which the last sequence got its first token; sequences whose prompt finished in an
// earlier step already decode during it (chunked prefill mixes them), and those tokens count in
// neither phase. The decode phase is every step after it. After a warm-up (a lone sequence, then
// the largest N with short prompts), each of --reps rounds (default 1 here) runs every N in the
// list, each preceded by a bandwidth probe. New random prompts every run, so the KV pool's prefix
// cache never hits. JSON (--json): model_dir, weight_dtypes, backend_detail, threads, kv_dtype,
// kv_block, prompt_tokens, gen_tokens, reps, prefill_chunk, peak_gflops, peak_int8_gops,
// peak_bf16_gflops, peak_bf16_tile_gflops, mem_bw_gbs (best probe), mem_bw_runs, peak_rss_mb,
// load_ms, and "parallel": one object per N (rates are medians over the rounds):
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
//   decode_flops_per_step           N x a decode token's model FLOPs (prefill_flops of one token),
//                                   averaged over the decode's positions
//   decode_gflops                   decode_flops_per_step * steps/s / 1e9
//   decode_arithmetic               what steps of N tokens run on (Backend::step_arithmetic)
//   decode_peak_arithmetic, decode_peak_gops   the one of those with the highest measured peak,
//                                   and that peak (the bench's best probe of it); "" and 0 where
//                                   one of them has no probe
//   decode_peak_fraction            decode_gflops / decode_peak_gops
//   decode_ceiling_tokens_per_s     the most the machine's limits measured in this run allow: N
//                                   tokens a step, a step taking the longer of its bytes at
//                                   mem_bw_gbs and its FLOPs at decode_peak_gops (as if each hid
//                                   the other wholly; 0 with neither measured): whether N streams
//                                   could decode N times as fast as one on this machine, and
//                                   which limit holds them
//   decode_ceiling_fraction         decode_tokens_per_s / decode_ceiling_tokens_per_s
//   mem_bw_gbs                      the probe just before this N's runs (best over the rounds)
//   prefill_cpu_share, decode_cpu_share     CPU time / (wall time * threads) in each phase: well
//                                   below 1 means other work shared the cores
//   decode_tokens_per_s_runs        every round
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/scheduler.h"
#include "models/qwen3_model.h"
#include "tools/args.h"
#include "tools/bench_common.h"
#include "tools/loaded.h"

namespace hearth::cli {

namespace {

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
// What a decode step of n sequences costs: the bytes it reads (weights + n x KV) and its model
// FLOPs, and what it runs on.
struct StepCost {
  double bytes, flops;
  ArithmeticBound bound;
};

struct ParallelRow {
  int n;
  double pf, dc, per_stream, total, pf_ms, dc_ms, ms_step, tokens, steps, frac, bw;
  StepCost cost;
  double gflops, ceiling;
  double pf_share, dc_share;
};

// The most tokens a second a step of n tokens allows at `bw` GB/s and the bound's peak: the longer
// of its bytes' time and its FLOPs' time, as if each hid the other wholly.
double ceiling_tokens_per_s(int n, const StepCost& c, double bw) {
  const double mem_s = bw > 0 ? c.bytes / (bw * 1e9) : 0.0;
  const double ops_s = c.bound.peak > 0 ? c.flops / (c.bound.peak * 1e9) : 0.0;
  const double s = std::max(mem_s, ops_s);
  return s > 0 ? n / s : 0.0;
}

ParallelRow summarise(const ParallelRounds& q, int n, const StepCost& cost, int threads) {
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
  x.bw = q.bw;
  x.frac = x.ms_step > 0 && x.bw > 0 ? cost.bytes / (x.ms_step * 1e-3) / (x.bw * 1e9) : 0.0;
  x.cost = cost;
  x.gflops = x.ms_step > 0 ? cost.flops / (x.ms_step * 1e-3) / 1e9 : 0.0;
  x.ceiling = ceiling_tokens_per_s(n, cost, x.bw);
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
  w.field("decode_bytes_per_step", x.cost.bytes).field("decode_bw_fraction", x.frac);
  w.field("decode_flops_per_step", x.cost.flops).field("decode_gflops", x.gflops);
  bound_json(w, "decode", x.cost.bound, x.gflops);
  w.field("decode_ceiling_tokens_per_s", x.ceiling);
  w.field("decode_ceiling_fraction", x.ceiling > 0 ? x.dc / x.ceiling : 0.0);
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
  std::printf("%5s %16s %16s %16s %10s %10s %7s %12s %6s\n", "N", "prefill tokens/s",
              "decode tokens/s", "tokens/s/stream", "ms/step", "% read bw", "% peak", "ceiling t/s",
              "cpu %");
  // "-" where the backend measured no such limit (a GPU's, so far).
  auto cell = [](bool measured, const char* fmt, double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, fmt, v);
    return measured ? std::string(buf) : std::string("-");
  };
  for (const ParallelRow& x : rows)
    std::printf("%5d %16.1f %16.2f %16.2f %10.2f %10s %7s %12s %5.0f%%\n", x.n, x.pf, x.dc,
                x.per_stream, x.ms_step, cell(x.bw > 0, "%.0f%%", 100 * x.frac).c_str(),
                cell(x.cost.bound.peak > 0, "%.0f%%", 100 * x.gflops / x.cost.bound.peak).c_str(),
                cell(x.ceiling > 0, "%.1f", x.ceiling).c_str(),
                100 * std::min(x.pf_share, x.dc_share));
  std::printf(
      "%% peak: decode FLOPs against the highest peak of the arithmetic its steps ran on; ceiling: "
      "N tokens a step at the longer of its bytes at the read bandwidth and its FLOPs at that "
      "peak\n");
  std::printf("peak RSS %.0f MiB, load %.0f ms\n", peak_rss_mb(), load_ms);
}

// A decode token's model FLOPs, averaged over the positions of `gen` tokens after `prompt`.
double decode_token_flops(const Qwen3Config& cfg, int prompt, int gen) {
  double sum = 0;
  for (int i = 1; i <= gen; ++i) sum += prefill_flops(cfg, 1, prompt + i - 1);
  return sum / gen;
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

}  // namespace

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
  const double token_flops = decode_token_flops(cfg, prompt, gen);

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
    const int n = ns[k];
    const StepCost cost{weight_bytes + kv_tok * n, token_flops * n,
                        arithmetic_bound(runner.backend(), peaks, n, runner.prefill_chunk())};
    rows.push_back(summarise(per[k], n, cost, threads));
    row_json(w, rows.back(), per[k]);
  }
  w.end_array();
  w.end_object();
  progress.say("");
  if (print_json_or_title(args, w, *model, runner)) return 0;
  const std::string peak_list = peaks_text(peaks);
  char read[48] = "read bandwidth not measured by this backend";
  if (best_bw > 0) std::snprintf(read, sizeof read, "read %.1f GB/s", best_bw);
  std::printf("%s, prompt %d + gen %d tokens per sequence (%s), %d round(s); %s; peaks %s\n",
              threads_text(threads).c_str(), prompt, gen, sampling_text(sampling).c_str(), reps,
              read, peak_list.empty() ? "not measured by this backend" : peak_list.c_str());
  print_parallel_rows(rows, load_ms);
  return 0;
}

}  // namespace hearth::cli
