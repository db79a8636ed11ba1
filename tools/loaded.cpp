#include "tools/loaded.h"

#include <malloc.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "core/error.h"
#include "core/json_writer.h"

namespace hearth::cli {

const std::vector<std::string> kEngineOptions = {
    "--model=", "--threads=",       "--backend=",      "--isa=",
    "--kv=",    "--prefill-chunk=", "--gemm=",         "--hugepages",
    "--mmap",   "--kv-budget=",     "--kv-block=",     "--max-batch=",
    "--ctx=",   "--device=",        "--weight-cache=", "--no-weight-cache"};

// The model maps the checkpoint; unless --mmap, the backend keeps private huge-page copies of the
// matmul weights in the layouts its kernels read fastest (BackendOptions::weight_copies) and hands
// the mapping's pages back, so the weights are in memory once either way.
std::unique_ptr<Qwen3Model> load_model(const Args& args) {
  return Qwen3Model::load(args.required("--model"));
}

namespace {

// The environment is read here, at the CLI's edge, and nowhere in the library.
std::string env_str(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

int env_positive(const char* name) {
  const std::string v = env_str(name);
  if (v.empty()) return 0;
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (*end || n <= 0 || n > 1 << 30) fail("$", name, ": '", v, "' is not a positive integer");
  return int(n);
}

// Where the weight copies are cached (WeightStore::use_cache): --weight-cache DIR; by default
// $XDG_CACHE_HOME/hearth or ~/.cache/hearth for checkpoints of 256 MiB or more (smaller ones load
// in well under a second anyway); none with --no-weight-cache or where no folder can be made.
std::string weight_cache_dir(const Args& args, const Qwen3Model& model) {
  if (args.has("--no-weight-cache")) {
    if (args.has("--weight-cache")) fail("--weight-cache and --no-weight-cache contradict");
    return "";
  }
  std::string dir = args.str("--weight-cache");
  if (dir.empty()) {
    if (model.checkpoint().total_bytes() < (size_t(256) << 20)) return "";
    const std::string xdg = env_str("XDG_CACHE_HOME"), home = env_str("HOME");
    if (!xdg.empty())
      dir = xdg + "/hearth";
    else if (!home.empty())
      dir = home + "/.cache/hearth";
    else
      return "";
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    if (args.has("--weight-cache")) fail("--weight-cache: cannot make ", dir, ": ", ec.message());
    std::fprintf(stderr, "note: no weight cache: cannot make %s: %s\n", dir.c_str(),
                 ec.message().c_str());
    return "";
  }
  return dir;
}

}  // namespace

const char* finish_weight_cache(const BackendOptions& bo) {
  if (!bo.cpu.weight_copies) return "none";
  const bool mapped = bo.cpu.weight_copies->cache_mapped();
  const std::string note = bo.cpu.weight_copies->commit_cache();
  if (!note.empty()) std::fprintf(stderr, "note: %s\n", note.c_str());
  return mapped ? "mapped" : note.rfind("wrote", 0) == 0 ? "written" : "none";
}

// Flags win; HEARTH_ISA, HEARTH_GEMM and HEARTH_GEMM_MIN_TOKENS stand in for them when absent, for
// tests and comparisons that drive the CLI from scripts; HEARTH_CUDA_GRAPHS=0, HEARTH_CUDA_CUBLAS=0
// and HEARTH_CUDA_DP4A=0 turn off the CUDA backend's graphs, cuBLAS prefill and int8 mat-vec
// (bench/cuda_device.sh measures what each buys), HEARTH_VULKAN_SUBGROUPS=0,
// HEARTH_VULKAN_STORAGE16=0 and HEARTH_VULKAN_INTEGER_DOT=0 the Vulkan backend's subgroup
// reductions, 16-bit storage and integer dot products (their fallbacks, to compare on a GPU).
BackendOptions backend_options(const Args& args, const Qwen3Model* model) {
  BackendOptions bo;
  bo.threads = args.integer("--threads", 0);
  // Hundreds of spinning workers on a few cores only thrash; more than 4 per CPU is a typo.
  const int cpus = int(std::max(1u, std::thread::hardware_concurrency()));
  if (args.has("--threads") && (bo.threads < 1 || bo.threads > 4 * cpus))
    fail("--threads must be in [1, ", 4 * cpus, "] (4x this machine's ", cpus, " CPUs), got ",
         bo.threads);
  bo.device = args.integer("--device", 0);
  if (bo.device < 0) fail("--device must be >= 0 (hearth devices lists them)");
  bo.cpu.isa = args.has("--isa") ? args.str("--isa") : env_str("HEARTH_ISA");
  bo.cpu.gemm = args.has("--gemm") ? args.str("--gemm") : env_str("HEARTH_GEMM");
  bo.cpu.gemm_min_tokens = env_positive("HEARTH_GEMM_MIN_TOKENS");
  bo.cuda.graphs = env_str("HEARTH_CUDA_GRAPHS") != "0";
  bo.cuda.cublas = env_str("HEARTH_CUDA_CUBLAS") != "0";
  bo.cuda.int8_dots = env_str("HEARTH_CUDA_DP4A") != "0";
  bo.vulkan.subgroups = env_str("HEARTH_VULKAN_SUBGROUPS") != "0";
  bo.vulkan.storage16 = env_str("HEARTH_VULKAN_STORAGE16") != "0";
  bo.vulkan.integer_dot = env_str("HEARTH_VULKAN_INTEGER_DOT") != "0";
  if (args.has("--mmap") && args.has("--hugepages"))
    fail(
        "--mmap and --hugepages contradict each other; give one (huge-page copies are the "
        "default)");
  if (!args.has("--mmap")) {
    bo.cpu.weight_copies = std::make_shared<WeightStore>();
    bo.cpu.kv_huge_pages = true;
    if (model) {
      model->checkpoint().lend_mappings(*bo.cpu.weight_copies);
      const std::string dir = weight_cache_dir(args, *model);
      if (!dir.empty()) model->checkpoint().cache_weights(*bo.cpu.weight_copies, dir, bo.cpu.isa);
    }
  } else if (args.has("--weight-cache")) {
    fail("--weight-cache caches the weight copies, which --mmap does without");
  }
  // f16 by default, as llama.cpp's: decode at depth reads the cache more than the weights, and f16
  // halves it at ~1e-8 KL on the fixtures (bench/RESULTS.md, "An f16 KV cache by default").
  const std::string kv = args.str("--kv", "f16");
  if (kv == "f32")
    bo.kv_dtype = DType::F32;
  else if (kv == "f16")
    bo.kv_dtype = DType::F16;
  else if (kv == "bf16")
    bo.kv_dtype = DType::BF16;
  else if (kv == "int8")
    bo.kv_dtype = DType::I8;
  else
    fail("--kv: unknown KV cache type '", kv, "' (expected f32, f16, bf16 or int8)");
  return bo;
}

RunnerOptions runner_options(const Args& args) {
  RunnerOptions ro;
  ro.prefill_chunk = args.integer("--prefill-chunk", 256);
  if (ro.prefill_chunk <= 0) fail("--prefill-chunk must be positive");
  ro.max_seqs = args.integer("--max-batch", ro.max_seqs);
  if (ro.max_seqs <= 0 || ro.max_seqs > 1024) fail("--max-batch must be in [1, 1024]");
  ro.block_size = args.integer("--kv-block", ro.block_size);
  if (ro.block_size <= 0 || ro.block_size > 4096) fail("--kv-block must be in [1, 4096]");
  const int mib = args.integer("--kv-budget", 0);
  if (mib < 0) fail("--kv-budget must be a positive number of MiB");
  ro.kv_budget_bytes = size_t(mib) << 20;
  return ro;
}

Loaded load_engine(const Args& args) {
  return load_engine(args, runner_options(args), SchedulerOptions{});
}

int context_length(const Args& args, const Qwen3Model& m, const Backend& backend) {
  const int max = m.config().max_position_embeddings;
  if (args.has("--ctx")) {
    const int n = args.integer("--ctx", 0);
    if (n < 16 || n > max)
      fail("--ctx must be in [16, ", max, "] (the model's max_position_embeddings), got ", n);
    return n;
  }
  if (args.has("--kv-budget")) return max;
  const int fit = fitting_positions(backend, m.graph(), max);
  if (fit < max)
    std::fprintf(stderr,
                 "note: a context of %d positions, what the %s backend's memory holds of the "
                 "model's %d (--ctx chooses)\n",
                 fit, backend.name().c_str(), max);
  return fit;
}

TextFrontEnd load_text(const Args& args) {
  const std::string dir = args.required("--model");
  check_checkpoint_folder(dir);  // a wrong --model is named as such, not as a missing tokenizer
  TextFrontEnd text = TextFrontEnd::load(dir);
#if defined(__GLIBC__)
  malloc_trim(0);  // the parse's freed heap too, not only its large blocks
#endif
  return text;
}

Loaded load_engine(const Args& args, const RunnerOptions& ro, const SchedulerOptions& so) {
  auto t0 = std::chrono::steady_clock::now();
  Loaded l;
  l.model = load_model(args);
  const BackendOptions bo = backend_options(args, l.model.get());
  const auto& c = l.model->config();
  auto backend = create_backend(args.str("--backend"), bo);
  const int ctx = context_length(args, *l.model, *backend);
  l.runner = std::make_unique<Runner>(std::move(backend), l.model->graph(), c.vocab_size, ctx, ro);
  l.runner->prepare();  // the weight copies, made now rather than in the first reply
  finish_weight_cache(bo);
  l.engine = std::make_unique<Engine>(*l.runner, so);
  l.load_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return l;
}

// KV bytes read per decoded token, averaged over decode steps 1..gen after a prompt of `prompt`
// positions: step i feeds position prompt + i - 1 and attends over positions 0..prompt + i - 1.
double kv_bytes_per_token(const Qwen3Config& cfg, DType kv, int prompt, int gen) {
  const double kv_per_pos = double(cfg.num_hidden_layers) * 2 * cfg.num_key_value_heads *
                            (cfg.head_dim * double(dtype_size(kv)) + (kv == DType::I8 ? 4 : 0));
  double bytes = 0;
  for (int i = 1; i <= gen; ++i) bytes += kv_per_pos * (prompt + i);
  return bytes / gen;
}

double decode_bytes_per_token(const Loaded& l, int prompt, int gen) {
  const Backend& b = l.runner->backend();
  if (gen <= 0) return 0;
  return double(l.model->decode_weight_bytes()) - b.argmax_bytes_saved() - b.layout_bytes_saved() +
         kv_bytes_per_token(l.model->config(), b.kv_dtype(), prompt, gen);
}

int context_positions(const Loaded& l) {
  const KVPool& pool = l.runner->kv_pool();
  return std::min(l.runner->max_positions(), pool.n_blocks() * pool.block_size());
}

int default_answer_tokens(bool thinking) {
  return thinking ? 4096 : 1024;
}

void note_random_weights(const Qwen3Model& m) {
  if (m.config().random_weights)
    std::fprintf(stderr,
                 "note: %s has random weights (a hearth standin checkpoint): its text is noise, "
                 "for tests and benchmarks only\n",
                 m.dir().c_str());
}

std::string manifest_json(const Loaded& l, const std::vector<int32_t>& prompt,
                          const GenerateOptions& opt) {
  const auto& c = l.model->config();
  JsonWriter w;
  w.begin_object();
  w.field("hearth_version", HEARTH_VERSION);
  w.field("model_dir", l.model->dir());
  w.field("config_hash", c.config_hash);
  w.field("weight_dtypes", l.model->weight_dtypes());
  w.field("backend", l.runner->backend().name());
  w.field("backend_detail", l.runner->backend().describe());
  w.field("threads", l.runner->backend().threads());
  w.key("shape").begin_object();
  w.field("hidden_size", c.hidden_size).field("intermediate_size", c.intermediate_size);
  w.field("num_hidden_layers", c.num_hidden_layers);
  w.field("num_attention_heads", c.num_attention_heads);
  w.field("num_key_value_heads", c.num_key_value_heads).field("head_dim", c.head_dim);
  w.field("vocab_size", c.vocab_size);
  w.end_object();
  w.key("prompt_ids").array(prompt);
  w.key("settings").begin_object();
  w.field("max_new_tokens", opt.max_new_tokens);
  w.field("temperature", opt.sampling.temperature);
  w.field("top_k", opt.sampling.top_k);
  w.field("top_p", opt.sampling.top_p);
  w.field("min_p", opt.sampling.min_p);
  w.field("repetition_penalty", opt.sampling.repetition_penalty);
  w.field("presence_penalty", opt.sampling.presence_penalty);
  w.field("frequency_penalty", opt.sampling.frequency_penalty);
  w.key("seed").raw(std::to_string(opt.sampling.seed));
  w.key("stop_ids").array(opt.stop_ids);
  w.field("ignore_eos", opt.ignore_eos);
  w.end_object();
  w.end_object();
  return w.str();
}

std::vector<std::string> sampling_options() {
  return {"--max-new-tokens=",
          "--temperature=",
          "--top-k=",
          "--top-p=",
          "--min-p=",
          "--seed=",
          "--repetition-penalty=",
          "--presence-penalty=",
          "--frequency-penalty=",
          "--ignore-eos",
          "--greedy"};
}

namespace {

// A value that would silently do something else (a negative temperature is not "colder") is an
// error naming the option.
void check_sampling(const Args& args, const SamplingParams& s) {
  if (s.temperature < 0) fail("--temperature must be >= 0 (0 is greedy), got ", s.temperature);
  if (s.top_k < 0) fail("--top-k must be >= 0 (0: off), got ", s.top_k);
  if (!(s.top_p > 0 && s.top_p <= 1)) fail("--top-p must be in (0, 1], got ", s.top_p);
  if (!(s.min_p >= 0 && s.min_p <= 1)) fail("--min-p must be in [0, 1], got ", s.min_p);
  if (!(s.repetition_penalty > 0))
    fail("--repetition-penalty must be > 0 (1: off), got ", s.repetition_penalty);
  if (s.presence_penalty < 0) fail("--presence-penalty must be >= 0, got ", s.presence_penalty);
  if (s.frequency_penalty < 0) fail("--frequency-penalty must be >= 0, got ", s.frequency_penalty);
  if (args.has("--greedy") && args.has("--temperature"))
    fail("--greedy and --temperature contradict each other; give one");
}

// A fresh seed per run, so sampled text differs between runs; 32 bits keep it exact in any JSON
// reader, and the manifest records it so a run can be repeated with --seed.
uint64_t fresh_seed() {
  std::random_device rd;
  return rd();
}

}  // namespace

GenerateOptions generate_options(const Args& args, const Qwen3Model& m, bool model_defaults) {
  const GenerationConfig& gc = m.generation_config();
  GenerateOptions o;
  o.max_new_tokens = args.integer("--max-new-tokens", 128);
  if (o.max_new_tokens < 0) fail("--max-new-tokens must not be negative");
  auto& s = o.sampling;
  // generation_config.json's defaults apply only when it asks for sampling.
  const bool sample = model_defaults && gc.do_sample.value_or(false);
  s.temperature = float(sample ? gc.temperature.value_or(1.0) : 0.0);
  s.top_k = sample ? gc.top_k.value_or(0) : 0;
  s.top_p = float(sample ? gc.top_p.value_or(1.0) : 1.0);
  s.min_p = float(sample ? gc.min_p.value_or(0.0) : 0.0);
  s.repetition_penalty = float(model_defaults ? gc.repetition_penalty.value_or(1.0) : 1.0);
  if (auto v = args.opt_number("--temperature")) s.temperature = float(*v);
  if (auto v = args.opt_integer("--top-k")) s.top_k = *v;
  if (auto v = args.opt_number("--top-p")) s.top_p = float(*v);
  if (auto v = args.opt_number("--min-p")) s.min_p = float(*v);
  if (auto v = args.opt_number("--repetition-penalty")) s.repetition_penalty = float(*v);
  if (auto v = args.opt_number("--presence-penalty")) s.presence_penalty = float(*v);
  if (auto v = args.opt_number("--frequency-penalty")) s.frequency_penalty = float(*v);
  check_sampling(args, s);
  if (args.has("--greedy")) s.temperature = 0.f;
  if (args.has("--seed")) {
    const std::string v = args.str("--seed");
    char* end = nullptr;
    errno = 0;
    unsigned long long seed = std::strtoull(v.c_str(), &end, 10);
    if (v.empty() || *end || errno || v[0] == '-')
      fail("--seed: '", v, "' is not a non-negative 64-bit integer");
    s.seed = seed;
  } else {
    s.seed = fresh_seed();
  }
  o.stop_ids = gc.eos_token_ids;
  o.ignore_eos = args.has("--ignore-eos");
  return o;
}

}  // namespace hearth::cli
