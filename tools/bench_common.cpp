// The helpers both forms of hearth bench share (bench_common.h).
#include "tools/bench_common.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "models/qwen3_model.h"
#include "tools/args.h"
#include "tools/loaded.h"

namespace hearth::cli {

namespace {
constexpr Arithmetic kArithmetic[] = {Arithmetic::F32Fma, Arithmetic::Int8Dot, Arithmetic::Bf16Dot,
                                      Arithmetic::Bf16Tile};
}  // namespace

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
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

ArithmeticBound arithmetic_bound(const Backend& be, const MachinePeaks& p, int tokens, int chunk) {
  ArithmeticBound b;
  b.used = be.step_arithmetic(std::min(tokens, chunk));
  if (tokens > chunk && tokens % chunk)  // the last, shorter chunk may take other kernels
    for (Arithmetic a : be.step_arithmetic(tokens % chunk))
      if (std::find(b.used.begin(), b.used.end(), a) == b.used.end()) b.used.push_back(a);
  for (Arithmetic a : b.used) {
    if (p.of(a) <= 0 && b.unprobed.empty()) b.unprobed = arithmetic_name(a);
    if (p.of(a) > b.peak) b.peak = p.of(a), b.by = a;
  }
  if (!b.unprobed.empty()) b.peak = 0;
  return b;
}

void bound_json(JsonWriter& w, const std::string& prefix, const ArithmeticBound& b, double gflops) {
  w.key(prefix + "_arithmetic").begin_array();
  for (Arithmetic a : b.used) w.value(arithmetic_name(a));
  w.end_array();
  const bool bound = b.peak > 0;
  w.field(prefix + "_peak_arithmetic", bound ? arithmetic_name(b.by) : "");
  w.field(prefix + "_peak_gops", b.peak);
  w.field(prefix + "_peak_fraction", bound ? gflops / b.peak : 0.0);
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
double prefill_flops(const Qwen3Config& c, int T, int depth) {
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

}  // namespace hearth::cli
