#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "core/error.h"
#include "core/sampler.h"

using hearth::Sampler;
using hearth::SamplingParams;

namespace {

// Test data comes from mt19937 (fully specified by the standard) mapped by hand, so the inputs are
// the same everywhere and share nothing with the sampler's own generator.
std::vector<float> random_logits(int n, uint32_t seed, float scale) {
  std::mt19937 g(seed);
  std::vector<float> v(static_cast<size_t>(n), 0.f);
  for (auto& x : v) x = scale * (float(g() % 100000) / 50000.f - 1.f);
  return v;
}

std::vector<float> log_probs(const std::vector<double>& p) {
  std::vector<float> v;
  for (double x : p) v.push_back(float(std::log(x)));
  return v;
}

// Draws `draws` tokens, each from a fresh copy of `logits` (sample() may modify its input).
std::map<int, int> histogram(Sampler& s, const std::vector<float>& logits, int draws) {
  std::map<int, int> h;
  std::vector<float> work;
  for (int i = 0; i < draws; ++i) {
    work = logits;
    ++h[s.sample(work.data(), int(work.size()), nullptr, 0)];
  }
  return h;
}

std::set<int> keys(const std::map<int, int>& h) {
  std::set<int> k;
  for (auto& [t, c] : h) k.insert(t);
  return k;
}

// Reference for the sampling pipeline in double precision with a full sort: the expected
// probability of every token after temperature, top-k, top-p and min-p.
std::map<int, double> reference_distribution(const std::vector<float>& logits, float temperature,
                                             int top_k, double top_p, double min_p) {
  int n = int(logits.size());
  std::vector<int> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return logits[size_t(a)] > logits[size_t(b)]; });
  if (top_k > 0 && top_k < n) order.resize(size_t(top_k));
  double mx = logits[size_t(order[0])] / double(temperature);
  std::vector<double> p;
  double z = 0;
  for (int t : order) {
    p.push_back(std::exp(logits[size_t(t)] / double(temperature) - mx));
    z += p.back();
  }
  for (auto& x : p) x /= z;
  size_t keep = p.size();
  double cum = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    cum += p[i];
    if (cum >= top_p) {
      keep = i + 1;
      break;
    }
  }
  std::map<int, double> out;
  double z2 = 0;
  for (size_t i = 0; i < keep; ++i) {
    if (p[i] < min_p * p[0]) continue;
    out[order[i]] = p[i];
    z2 += p[i];
  }
  for (auto& [t, q] : out) q /= z2;
  return out;
}

// Pearson chi-square of observed counts against expected probabilities.
double chi_square(const std::map<int, int>& h, const std::map<int, double>& p, int draws) {
  double chi = 0;
  for (auto& [t, q] : p) {
    double e = q * draws;
    auto it = h.find(t);
    double o = it == h.end() ? 0 : it->second;
    chi += (o - e) * (o - e) / e;
  }
  return chi;
}

}  // namespace

TEST_SUITE("sampler") {
  TEST_CASE("same seed gives the same tokens, another seed other tokens") {
    auto logits = random_logits(1000, 7, 3.f);
    SamplingParams p;
    p.temperature = 1.f;
    p.seed = 42;
    auto run = [&](SamplingParams q) {
      Sampler s(q, 1000);
      std::vector<int> out;
      std::vector<float> work;
      for (int i = 0; i < 200; ++i) {
        work = logits;
        out.push_back(s.sample(work.data(), 1000, nullptr, 0));
      }
      return out;
    };
    auto a = run(p);
    auto b = run(p);
    CHECK(a == b);
    p.seed = 43;
    auto c = run(p);
    CHECK(a != c);
    CHECK(keys([&] {
            std::map<int, int> h;
            for (int t : a) ++h[t];
            return h;
          }())
              .size() > 20);  // it really samples, not a constant
  }

  TEST_CASE("greedy picks the argmax and the first index on ties") {
    Sampler s(SamplingParams{}, 8);
    std::vector<float> l = {1.f, 3.f, 3.f, 2.f};
    CHECK(s.sample(l.data(), 4, nullptr, 0) == 1);
    l = {-5.f, -1.f, -7.f, -1.f, -1.f};
    CHECK(s.sample(l.data(), 5, nullptr, 0) == 1);
    float nan = std::numeric_limits<float>::quiet_NaN();
    l = {nan, 1.f, 2.f, nan};
    CHECK(s.sample(l.data(), 4, nullptr, 0) == 2);

    SamplingParams neg;
    neg.temperature = -1.f;
    Sampler s2(neg, 8);
    l = {0.f, 0.f, 0.5f, 0.5f};
    CHECK(s2.sample(l.data(), 4, nullptr, 0) == 2);

    float inf = std::numeric_limits<float>::infinity();
    l = {-inf, nan, -inf};
    CHECK_THROWS_AS(s.sample(l.data(), 3, nullptr, 0), hearth::Error);
  }

  TEST_CASE("top-p keeps exactly the smallest prefix reaching p") {
    // Probabilities 0.5, 0.3, 0.15, 0.05 placed at shuffled ids so the order is not the id order.
    std::vector<double> probs = {0.15, 0.05, 0.5, 0.3};
    auto logits = log_probs(probs);
    SamplingParams p;
    p.temperature = 1.f;
    p.seed = 1;
    p.top_p = 0.8f;
    Sampler s(p, 4);
    CHECK(keys(histogram(s, logits, 5000)) == std::set<int>{2, 3});

    p.top_p = 0.81f;
    Sampler s2(p, 4);
    CHECK(keys(histogram(s2, logits, 5000)) == std::set<int>{0, 2, 3});

    p.top_p = 0.4f;  // the top token alone already reaches p
    Sampler s3(p, 4);
    CHECK(keys(histogram(s3, logits, 500)) == std::set<int>{2});
  }

  TEST_CASE("top-p over a large vocabulary matches a full-sort reference") {
    // A nucleus of hundreds of tokens exercises the block-wise ranking past its first block.
    auto logits = random_logits(5000, 11, 2.f);
    SamplingParams p;
    p.temperature = 0.8f;
    p.top_p = 0.5f;
    p.seed = 5;
    Sampler s(p, 5000);
    auto ref = reference_distribution(logits, p.temperature, 0, p.top_p, 0);
    REQUIRE(ref.size() > 300);
    const int draws = 6000;
    auto h = histogram(s, logits, draws);
    for (auto& kv : h)
      CHECK_MESSAGE(ref.count(kv.first), "token ", kv.first, " outside the nucleus");
    // The nucleus' least likely member must be in (~10 expected draws).
    int last = std::min_element(ref.begin(), ref.end(), [](auto& a, auto& b) {
                 return a.second < b.second;
               })->first;
    CHECK(h.count(last));
    // Normal approximation: df + 4 sd is far in the tail for df in the hundreds.
    double df = double(ref.size() - 1);
    CHECK(chi_square(h, ref, draws) < df + 4 * std::sqrt(2 * df));
  }

  TEST_CASE("top-k keeps exactly k, lowest ids first on ties") {
    std::vector<float> l = {1.f, 5.f, 3.f, 3.f, 3.f, 0.f};
    SamplingParams p;
    p.temperature = 1.f;
    p.top_k = 2;
    Sampler s(p, 6);
    CHECK(keys(histogram(s, l, 3000)) == std::set<int>{1, 2});

    l = {3.f, 2.9f, 2.8f, 2.7f};
    Sampler s2(p, 4);
    CHECK(keys(histogram(s2, l, 3000)) == std::set<int>{0, 1});

    p.top_k = 1;
    Sampler s3(p, 6);
    l = {0.f, 2.f, 2.f, 1.f};
    CHECK(keys(histogram(s3, l, 200)) == std::set<int>{1});

    p.top_k = 10;  // k >= n keeps everything
    Sampler s4(p, 6);
    l = {0.f, 0.f, 0.f};
    CHECK(keys(histogram(s4, l, 500)) == std::set<int>{0, 1, 2});
  }

  TEST_CASE("top-k with all logits tied keeps the k lowest ids, both selection paths") {
    for (int k : {100, 1500}) {  // below and above the heap/nth_element switch
      CAPTURE(k);
      std::vector<float> l(3000, 0.25f);
      SamplingParams p;
      p.temperature = 1.f;
      p.top_k = k;
      p.seed = 3;
      Sampler s(p, 3000);
      auto h = histogram(s, l, 12000);
      CHECK(h.begin()->first >= 0);
      CHECK(h.rbegin()->first == k - 1);
      CHECK(int(h.size()) > k * 9 / 10);
    }
  }

  TEST_CASE("top-k with ties at the boundary matches the stable-sort reference") {
    // Logits on a coarse grid, so the k-th place falls inside a large group of equal logits.
    std::mt19937 g(99);
    std::vector<float> l(4000);
    for (auto& x : l) x = float(g() % 8);
    for (int k : {300, 2000}) {
      CAPTURE(k);
      SamplingParams p;
      p.temperature = 0.5f;
      p.top_k = k;
      p.seed = 8;
      Sampler s(p, 4000);
      auto ref = reference_distribution(l, p.temperature, k, 1.0, 0);
      REQUIRE(int(ref.size()) == k);
      auto h = histogram(s, l, 3000);
      for (auto& kv : h)
        CHECK_MESSAGE(ref.count(kv.first), "token ", kv.first, " not in the top ", k);
    }
  }

  TEST_CASE("min-p drops tokens below min_p times the top probability") {
    std::vector<double> probs = {0.05, 0.5, 0.15, 0.3};
    auto logits = log_probs(probs);
    SamplingParams p;
    p.temperature = 1.f;
    p.seed = 2;
    p.min_p = 0.29f;  // threshold 0.145: keeps 0.5, 0.3, 0.15
    Sampler s(p, 4);
    CHECK(keys(histogram(s, logits, 5000)) == std::set<int>{1, 2, 3});
    p.min_p = 0.31f;  // threshold 0.155: drops 0.15
    Sampler s2(p, 4);
    CHECK(keys(histogram(s2, logits, 5000)) == std::set<int>{1, 3});
    p.min_p = 0.09f;  // threshold 0.045: keeps all
    Sampler s3(p, 4);
    CHECK(keys(histogram(s3, logits, 5000)) == std::set<int>{0, 1, 2, 3});

    // Applied after temperature: at T = 2 the ratio 0.15 / 0.5 becomes sqrt(0.3) = 0.548.
    p.temperature = 2.f;
    p.min_p = 0.5f;
    Sampler s4(p, 4);
    CHECK(keys(histogram(s4, logits, 5000)) == std::set<int>{1, 2, 3});
  }

  TEST_CASE("repetition, presence and frequency penalties, exact arithmetic") {
    SamplingParams p;
    p.repetition_penalty = 2.f;
    Sampler s(p, 8);
    std::vector<int32_t> hist = {0, 1, 1, 3, -1, 99};  // out-of-range ids are ignored
    std::vector<float> l = {2.f, -2.f, 1.f, 0.5f, 3.f};
    CHECK(s.sample(l.data(), 5, hist.data(), int(hist.size())) == 4);
    CHECK(l == std::vector<float>{1.f, -4.f, 1.f, 0.25f, 3.f});

    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    Sampler s2(p, 8);
    for (int round = 0; round < 2; ++round) {  // counts must not leak into the next call
      l = {2.f, -2.f, 1.f, 0.5f, 3.f};
      s2.sample(l.data(), 5, hist.data(), int(hist.size()));
      // token 0: 2/2 - (0.5 + 0.25); token 1: -2*2 - (0.5 + 0.5); token 3: 0.5/2 - (0.5 + 0.25)
      CHECK(l == std::vector<float>{0.25f, -5.f, 1.f, -0.5f, 3.f});
    }

    SamplingParams q;
    q.repetition_penalty = 2.f;
    Sampler s3(q, 2);
    l = {5.f, 4.f};
    int32_t h0 = 0;
    CHECK(s3.sample(l.data(), 2, &h0, 1) == 1);  // 5 / 2 < 4
  }

  TEST_CASE("sampling frequencies follow the softmax") {
    const int draws = 20000;
    // df = 9, chi-square 99.9th percentile is 27.9.
    auto logits = random_logits(10, 3, 2.f);
    SamplingParams p;
    p.temperature = 0.7f;
    p.seed = 11;
    Sampler s(p, 10);
    auto ref = reference_distribution(logits, p.temperature, 0, 1.0, 0);
    auto h = histogram(s, logits, draws);
    CHECK(chi_square(h, ref, draws) < 27.9);
  }

  TEST_CASE("Qwen3 defaults at full vocabulary match the reference distribution") {
    const int n = 151936, draws = 5000;
    auto logits = random_logits(n, 21, 6.f);
    SamplingParams p;
    p.temperature = 0.6f;
    p.top_k = 20;
    p.top_p = 0.95f;
    p.min_p = 0.02f;
    p.seed = 123;
    Sampler s(p, n);
    auto ref = reference_distribution(logits, p.temperature, p.top_k, p.top_p, p.min_p);
    REQUIRE(ref.size() >= 5);
    auto h = histogram(s, logits, draws);
    for (auto& kv : h)
      CHECK_MESSAGE(ref.count(kv.first), "token ", kv.first, " should have been filtered");
    // df = |ref| - 1 <= 19; the 99.9th percentile at df 19 is 43.8.
    CHECK(chi_square(h, ref, draws) < 43.8);
  }

  TEST_CASE("invalid parameters and sizes are rejected") {
    auto bad = [](auto edit) {
      SamplingParams p;
      edit(p);
      return p;
    };
    CHECK_THROWS_AS(Sampler(bad([](SamplingParams& p) { p.top_k = -1; }), 10), hearth::Error);
    CHECK_THROWS_AS(Sampler(bad([](SamplingParams& p) { p.top_p = 0.f; }), 10), hearth::Error);
    CHECK_THROWS_AS(Sampler(bad([](SamplingParams& p) { p.top_p = 1.5f; }), 10), hearth::Error);
    CHECK_THROWS_AS(Sampler(bad([](SamplingParams& p) { p.min_p = 2.f; }), 10), hearth::Error);
    CHECK_THROWS_AS(Sampler(bad([](SamplingParams& p) { p.repetition_penalty = 0.f; }), 10),
                    hearth::Error);
    CHECK_THROWS_AS(Sampler(SamplingParams{}, 0), hearth::Error);
    Sampler s(SamplingParams{}, 4);
    std::vector<float> l(5, 0.f);
    CHECK_THROWS_AS(s.sample(l.data(), 5, nullptr, 0), hearth::Error);
    CHECK(s.params().temperature == 0.f);
  }
}
