#include "tools/serve_metrics.h"

#include "models/json_value.h"

namespace hearth::serve {

void Histogram::observe(double seconds) {
  std::lock_guard<std::mutex> lk(mu_);
  size_t i = 0;
  while (i < kBounds.size() && seconds > kBounds[i]) ++i;
  ++counts_[i];
  sum_ += seconds;
  ++n_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
  std::lock_guard<std::mutex> lk(mu_);
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= kBounds.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < kBounds.size() ? pyfmt::float_repr(kBounds[i]) : "+Inf";
    out += name + "_bucket{le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_sum " + pyfmt::float_repr(sum_) + "\n";
  out += name + "_count " + std::to_string(n_) + "\n";
}

namespace {

void metric(std::string& out, const char* name, const char* type, const char* help, int64_t value) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" +
         name + " " + std::to_string(value) + "\n";
}

}  // namespace

std::string Metrics::render(const Engine::Stats& e) const {
  std::string out;
  metric(out, "hearth_requests_total", "counter", "Generation requests answered.", requests);
  metric(out, "hearth_requests_errors_total", "counter",
         "Generation requests answered with an error.", errors);
  metric(out, "hearth_requests_cancelled_total", "counter",
         "Requests cancelled because the client went away or the server shut down.", cancelled);
  metric(out, "hearth_requests_active", "gauge", "Generation requests in flight.", active);
  metric(out, "hearth_prompt_tokens_total", "counter", "Prompt tokens of finished requests.",
         prompt_tokens);
  metric(out, "hearth_prompt_tokens_cached_total", "counter",
         "Prompt tokens taken from the prefix cache instead of computed.", cached_tokens);
  metric(out, "hearth_generated_tokens_total", "counter", "Tokens generated.", generated_tokens);
  metric(out, "hearth_queue_depth", "gauge", "Sequences waiting for a place in the batch.",
         e.waiting);
  metric(out, "hearth_running_sequences", "gauge", "Sequences in the batch.", e.running);
  metric(out, "hearth_held_sequences", "gauge",
         "Sequences the scheduler holds: waiting, running, finished or parked.", e.held);
  metric(out, "hearth_kv_blocks_total", "gauge", "KV cache blocks.", e.kv_blocks);
  metric(out, "hearth_kv_blocks_used", "gauge", "KV blocks held by a sequence.", e.kv_used);
  metric(out, "hearth_kv_blocks_cached", "gauge",
         "KV blocks free but still holding a shareable prefix.", e.kv_cached);
  metric(out, "hearth_kv_prefix_hits_total", "counter",
         "KV blocks a new sequence took from the prefix cache.", e.prefix_hits);
  ttft.render(out, "hearth_ttft_seconds", "Time from request to first token.");
  tpot.render(out, "hearth_tpot_seconds", "Time per output token after the first.");
  return out;
}

}  // namespace hearth::serve
