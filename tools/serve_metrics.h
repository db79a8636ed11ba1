// The counters and latency histograms behind `hearth serve`'s GET /metrics, in Prometheus' text
// format. Counters are atomics and histograms take a lock, so any request thread may record.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "core/engine.h"

namespace hearth::serve {

class Histogram {
 public:
  static constexpr std::array<double, 14> kBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                     0.25,  0.5,    1,     2.5,  5,     10,   30};
  void observe(double seconds);
  // Appends name_bucket{le=...}, name_sum and name_count.
  void render(std::string& out, const std::string& name, const std::string& help) const;

 private:
  mutable std::mutex mu_;
  std::array<uint64_t, kBounds.size() + 1> counts_{};  // last: above every bound (+Inf)
  double sum_ = 0;
  uint64_t n_ = 0;
};

struct Metrics {
  std::atomic<int64_t> requests{0};       // generation requests answered, any status
  std::atomic<int64_t> errors{0};         // of those, answered with an error status
  std::atomic<int64_t> active{0};         // generation requests in flight
  std::atomic<int64_t> prompt_tokens{0};  // prompt tokens of finished requests
  std::atomic<int64_t> cached_tokens{0};  // of those, taken from the prefix cache
  std::atomic<int64_t> generated_tokens{0};
  std::atomic<int64_t> cancelled{0};  // requests whose client went away, or shut down
  Histogram ttft, tpot;

  std::string render(const Engine::Stats& engine) const;
};

}  // namespace hearth::serve
