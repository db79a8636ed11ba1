// What most commands start from: a model loaded from --model, a backend built from --threads,
// --backend, --isa and --kv, and a runner over both; plus the run manifest describing all of it.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/engine.h"
#include "core/runner.h"
#include "core/session.h"
#include "models/qwen3_model.h"
#include "models/text_frontend.h"
#include "tools/args.h"

namespace hearth::cli {

// The options every model-running command accepts.
extern const std::vector<std::string> kEngineOptions;

struct Loaded {
  std::unique_ptr<Qwen3Model> model;
  std::unique_ptr<Runner> runner;
  std::unique_ptr<Engine> engine;  // the scheduler over `runner` that sessions share
  double load_ms = 0;
};

// The model's tokenizer and chat template (--model), loaded before the engine: parsing the
// tokenizer's JSON takes tens of MB for a moment, which go back to the OS before the weights
// arrive rather than adding to the peak RSS on top of them.
TextFrontEnd load_text(const Args& args);
Loaded load_engine(const Args& args);
// The same with runner and scheduler options the command has settled itself.
Loaded load_engine(const Args& args, const RunnerOptions& ro, const SchedulerOptions& so);
// The parts of it: the model (--model, --hugepages) and the backend options (--threads, --isa,
// --gemm, --kv).
// With the model, its weight copies' store knows the checkpoint's mappings (their pages go back to
// the page cache, not to disk: WeightStore::add_file_mapping).
std::unique_ptr<Qwen3Model> load_model(const Args& args);
// With the model, the copies are cached on disk too (--weight-cache, Checkpoint::cache_weights).
BackendOptions backend_options(const Args& args, const Qwen3Model* model = nullptr);
// After the backend placed the weights: publishes a weight cache file the load wrote, with a note
// on stderr saying so, or why none could be written. Returns where the copies came from:
// "mapped" (a weight cache file), "written" (to one) or "none".
const char* finish_weight_cache(const BackendOptions& bo);
// --ctx, else the model's max_position_embeddings or less where the backend's memory would not hold
// its KV cache (fitting_positions).
int context_length(const Args& args, const Qwen3Model& m, const Backend& backend);
// --prefill-chunk, --kv-budget (MiB), --kv-block and --max-batch (sequences per step).
RunnerOptions runner_options(const Args& args);

// KV bytes read per decoded token, averaged over decode steps 1..gen after a prompt of `prompt`
// positions: step i feeds position prompt + i - 1 and attends over positions 0..prompt + i - 1.
double kv_bytes_per_token(const Qwen3Config& cfg, DType kv, int prompt, int gen);
// What a decoded token read on average: the weights (less what the LM head's screen spared so far)
// and the KV cache at the answer's positions; 0 for no tokens.
double decode_bytes_per_token(const Loaded& l, int prompt, int gen);

// Positions one sequence may use: the runner's context, or less where the KV budget holds less.
int context_positions(const Loaded& l);
// The answer length `run` and `chat` allow when --max-new-tokens is not given: Qwen3 thinks for
// hundreds to thousands of tokens before it answers, so thinking gets a larger limit.
int default_answer_tokens(bool thinking);
// On stderr, one line when the model has random weights (a `hearth standin` checkpoint).
void note_random_weights(const Qwen3Model& m);

// The reproducibility record: model folder, config hash, dtypes, backend, ISA, threads, version,
// prompt ids and settings.
std::string manifest_json(const Loaded& l, const std::vector<int32_t>& prompt,
                          const GenerateOptions& opt);

// Sampling and stopping from the command line. Unset options come from generation_config.json when
// model_defaults is true (text commands), else mean greedy (the id-level `generate`, whose output
// must be reproducible without flags).
std::vector<std::string> sampling_options();
GenerateOptions generate_options(const Args& args, const Qwen3Model& m, bool model_defaults);

}  // namespace hearth::cli
