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
// --parallel N1,N2,...: batched decode (bench_parallel.cpp).
#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/session.h"
#include "models/qwen3_model.h"
#include "tools/args.h"
#include "tools/bench_common.h"
#include "tools/bench_plot.h"
#include "tools/commands.h"
#include "tools/loaded.h"

namespace hearth::cli {

namespace {

// One model's bench: rates are medians over the rounds.
struct SingleResult {
  std::vector<double> prefill_tps, decode_tps, bw;
  MachinePeaks peaks;  // the best of each compute probe
  double pf = 0, dc = 0, pf_gflops = 0, weight_bytes = 0, saved = 0, layout_saved = 0, kv_bytes = 0,
         bytes = 0;
  double best_bw = 0, pf_share = 0, dc_share = 0, load_ms = 0;
  const char* weight_cache = "none";
  ArithmeticBound bound;
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
  bound_json(w, "prefill", r.bound, r.pf_gflops);
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
  res.bound = arithmetic_bound(b.runner.backend(), res.peaks, b.prompt, b.runner.prefill_chunk());
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
