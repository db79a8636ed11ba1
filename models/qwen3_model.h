// A loaded Qwen3 checkpoint: config, weights bound in place from the mmap, and the graph built
// once from them. Immutable after load, so any number of sessions and threads may share it.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "core/graph.h"
#include "models/checkpoint.h"
#include "models/qwen3_config.h"
#include "models/qwen3_weights.h"

namespace hearth {

// Throws hearth::Error naming what `dir` is when it is not a folder (missing, a GGUF file, a
// .safetensors file, a FIFO), before any file inside it is looked for.
void check_checkpoint_folder(const std::string& dir);

class Qwen3Model {
 public:
  static std::unique_ptr<Qwen3Model> load(const std::string& dir);
  // Same, calling progress(stage) after each step ("config", "checkpoint", "weights", "graph") so
  // an embedding app can move a progress bar; progress may throw to abandon the load, which frees
  // everything loaded so far.
  // With MapMode::HugePageCopy the weights are read into huge-page memory first (faster decode, a
  // private copy instead of the shared page cache).
  static std::unique_ptr<Qwen3Model> load(const std::string& dir,
                                          const std::function<void(const char* stage)>& progress,
                                          MapMode mode = MapMode::Shared);

  const std::string& dir() const { return dir_; }
  const Qwen3Config& config() const { return config_; }
  const GenerationConfig& generation_config() const { return gen_; }
  const Checkpoint& checkpoint() const { return ckpt_; }
  const Qwen3Weights& weights() const { return weights_; }
  const Graph& graph() const { return graph_; }
  // The distinct stored weight types, e.g. "BF16" or "BF16+F32".
  std::string weight_dtypes() const;
  // Bytes of weights read per decoded token (every matrix once, plus one embedding row; of a
  // mixture of experts, the router and top_k experts).
  size_t decode_weight_bytes() const;

 private:
  std::string dir_;
  Qwen3Config config_;
  GenerationConfig gen_;
  Checkpoint ckpt_;
  Qwen3Weights weights_;
  Graph graph_;
};

}  // namespace hearth
