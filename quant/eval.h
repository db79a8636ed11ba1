// Measuring what quantization costs: a model against a reference on the same tokens, over
// non-overlapping windows each starting from an empty cache, position by position.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/backend.h"
#include "models/qwen3_model.h"

namespace hearth::quant {

struct EvalOptions {
  int ctx = 512;           // tokens per window
  BackendOptions backend;  // the model's; the reference runs with the same, except an F32 cache
};

struct EvalReport {
  int tokens = 0, windows = 0;
  int64_t positions = 0;  // predictions scored: every position that has a next token
  double ppl_model = 0, ppl_ref = 0;
  double kl_mean = 0, kl_p99 = 0, kl_max = 0;  // KL(ref || model) per position, nats
  double top1 = 0;                             // fraction of positions whose argmax agrees
  double bpw_model = 0, bpw_ref = 0;
};

EvalReport evaluate(const Qwen3Model& model, const Qwen3Model& ref, const std::vector<int32_t>& ids,
                    const EvalOptions& opt);

// Token ids from a text file: integers separated by commas and/or whitespace.
std::vector<int32_t> read_token_ids(const std::string& path);

// Stored bits per logical weight over the whole checkpoint: codes, scales and float tensors.
double bits_per_weight(const Qwen3Model& m);

}  // namespace hearth::quant
