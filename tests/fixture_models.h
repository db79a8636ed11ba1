// The shared fixtures' tiny checkpoints (../shared/fixtures/models) and their expected.json
// sequences, and the ISAs this machine can run, for the suites that run models.
#pragma once
#include <doctest/doctest.h>
#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "backends/cpu/cpu_features.h"
#include "core/runner.h"

namespace hearth::test {

inline const std::string kModels = std::string(HEARTH_SHARED_DIR) + "/fixtures/models/";
// The dense ones first (tests that need one model take kFixtures[0] or [1]), then Qwen3-MoE.
inline const char* const kFixtures[] = {"tiny-tied-bf16", "tiny-untied-sharded-f32",
                                        "moe-tiny-bf16", "moe-tiny-f32-sharded"};

struct Sequence {
  std::string name;
  std::vector<int32_t> ids;
  std::vector<int32_t> greedy;
  std::string logits_file;
};

inline std::vector<Sequence> load_sequences(const std::string& dir) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(dir + "/expected.json");
  std::vector<Sequence> out;
  for (simdjson::dom::element s : doc["sequences"].get_array()) {
    Sequence q;
    q.name = std::string(std::string_view(s["name"]));
    for (int64_t v : s["input_ids"].get_array()) q.ids.push_back(int32_t(v));
    for (int64_t v : s["greedy"]["tokens"].get_array()) q.greedy.push_back(int32_t(v));
    q.logits_file = std::string(std::string_view(s["logits_file"]));
    out.push_back(q);
  }
  return out;
}

// A fixture's float64 reference logits, as f32.
inline std::vector<float> read_f32(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  REQUIRE(f.good());
  std::vector<float> v(size_t(f.tellg()) / 4);
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * 4));
  return v;
}

// Returns the number of elements outside |got - want| <= 1e-4 + 1e-4 |want|.
inline size_t count_mismatches(const std::vector<float>& got, const std::vector<float>& want,
                               double* max_err) {
  size_t bad = 0;
  *max_err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    double d = std::fabs(double(got[i]) - want[i]);
    *max_err = std::max(*max_err, d);
    if (!(d <= 1e-4 + 1e-4 * std::fabs(want[i]))) ++bad;
  }
  return bad;
}

// KL(want || got) of the next-token distributions of two rows of V logits.
inline double kl_divergence(const float* want, const float* got, size_t V) {
  double mw = -1e300, mg = -1e300;
  for (size_t i = 0; i < V; ++i)
    mw = std::max(mw, double(want[i])), mg = std::max(mg, double(got[i]));
  double zw = 0, zg = 0;
  for (size_t i = 0; i < V; ++i) zw += std::exp(want[i] - mw), zg += std::exp(got[i] - mg);
  double d = 0;
  for (size_t i = 0; i < V; ++i) {
    const double lw = want[i] - mw - std::log(zw), lg = got[i] - mg - std::log(zg);
    d += std::exp(lw) * (lw - lg);
  }
  return d;
}

// Runs sequence s through runner in one forward pass and returns the largest KL divergence of its
// positions' logits from `want` (rows of V, the fixture's reference).
inline double worst_kl_of_forward(Runner& runner, const Sequence& s, const std::vector<float>& want,
                                  size_t V) {
  std::vector<float> got(want.size());
  auto kv = runner.new_kv(int(s.ids.size()));
  runner.forward(*kv, s.ids.data(), int(s.ids.size()), 0, got.data(), nullptr);
  double worst = 0;
  for (size_t t = 0; t < s.ids.size(); ++t)
    worst = std::max(worst, kl_divergence(want.data() + t * V, got.data() + t * V, V));
  return worst;
}

inline std::vector<std::string> isas_here() {
  std::vector<std::string> v = {"scalar"};
  auto best = cpu::detect_cpu_features().best();
  if (best >= cpu::Isa::Avx2 && best != cpu::Isa::Neon) v.push_back("avx2");
  if (best == cpu::Isa::Avx512) v.push_back("avx512");
  if (best == cpu::Isa::Neon) v.push_back("neon");
  return v;
}

}  // namespace hearth::test
