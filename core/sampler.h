// Token sampling with Hugging Face transformers' logits-processor semantics, applied in this order:
// repetition penalty, presence/frequency penalties, then greedy argmax (temperature <= 0) or
// temperature, top-k, top-p, min-p and a draw from the renormalised distribution.
#pragma once
#include <cstdint>
#include <vector>

namespace hearth {

struct SamplingParams {
  float temperature = 0.f;  // <= 0 means greedy
  int top_k = 0;            // 0 = off
  float top_p = 1.f;        // 1 = off
  float min_p = 0.f;        // 0 = off
  float repetition_penalty = 1.f;
  float presence_penalty = 0.f;
  float frequency_penalty = 0.f;
  uint64_t seed = 0;
};

// True when sampling reduces to the argmax of the raw logits (greedy, no penalties), which a
// backend can take inside the LM head.
bool argmax_only(const SamplingParams& p);
// How many of the largest logits Sampler::sample depends on (StepInputs::top_k): 1 for greedy
// without penalties (the first argmax), top_k for top-k sampling without penalties (temperature,
// top-p and min-p act within the top-k set, renormalised over it), 0 where every logit matters.
int logits_needed(const SamplingParams& p, int vocab_size);
// First index of the largest of x[0..n), NaN ignored; -1 if nothing is above -inf.
int32_t first_argmax(const float* x, int n);

class Sampler {
 public:
  // Throws hearth::Error naming the first invalid field.
  static void check(const SamplingParams& params, int vocab_size);
  // Validates the parameters (check) and allocates all scratch, so that sample() never allocates.
  Sampler(const SamplingParams& params, int vocab_size);

  // logits: n <= vocab_size floats, modified in place (penalties, NaN -> -inf). history: the
  // tokens seen so far in this request (prompt + generated), used only by the penalties; ids
  // outside [0, n) are ignored. Throws hearth::Error if no logit is finite.
  int32_t sample(float* logits, int n, const int32_t* history, int n_history);

  const SamplingParams& params() const { return params_; }

 private:
  void apply_penalties(float* logits, int n, const int32_t* history, int n_history);
  // sample()'s parts, lmax the largest logit and inv_t 1 / temperature.
  int32_t sample_whole(const float* logits, int n, float lmax, float inv_t);
  void select_top_k(const float* logits, int n, int k);
  int32_t sample_listed(const float* logits, int nc, float lmax, float inv_t);
  int32_t sample_listed_weighted(int nc);
  // Top-p over all n tokens (weights in weight_); leaves the nucleus in idx_, returns its size.
  int top_p_all(const float* logits, int n, double target);
  int32_t draw_all(int n);                             // from weight_[0..n)
  int32_t draw_listed(const int32_t* ids, int count);  // from weight_ at the listed ids
  double next_uniform();                               // [0, 1), 53 bits

  SamplingParams params_;
  int vocab_size_;
  uint64_t rng_[4];
  std::vector<int32_t> counts_;  // per token; all zero between calls
  std::vector<int32_t> idx_;     // candidate token ids
  std::vector<int32_t> edge_;    // the top-p boundary bucket
  std::vector<float> weight_;    // per token: exp((logit - max) / temperature), max -> 1
  std::vector<double> bucket_mass_;
  std::vector<double> block_sum_;
};

}  // namespace hearth
