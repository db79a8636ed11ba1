#include "core/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"

namespace hearth {

namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

// Below this k a bounded heap beats nth_element: almost every logit is rejected by one compare
// against the current k-th best, so the scan costs about one pass over the logits.
constexpr int kHeapTopK = 1024;

// Top-p buckets: a weight in [0, 1] has float bits <= 0x3f800000; keeping the exponent and four
// mantissa bits gives buckets 2^(1/16) apart in weight, ordered like the weights.
constexpr int kBucketShift = 19;
constexpr int kBuckets = (0x3f800000 >> kBucketShift) + 1;

// The draw over the whole vocabulary first picks a block by its sum, then walks inside it.
constexpr int kBlock = 256;

// Logits are float, so probabilities that are exactly p on paper (0.5 + 0.3 = 0.8) can sum to a
// hair below p; without this slack top-p would keep one token more than the definition says.
constexpr double kTopPSlack = 1e-6;

inline int bucket_of(float w) {
  uint32_t u;
  std::memcpy(&u, &w, 4);
  return int(u >> kBucketShift);
}

// exp for x <= 0 from +, * and bit operations only (Cephes' expf polynomial, about 1 ulp): the
// vector and scalar versions give the same bits, and no platform's libm is involved. Below -87
// the result would be denormal relative to the top token, so it is 0; that also maps -inf to 0.
constexpr float kExpLo = -87.f;
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f,
                kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;

inline float exp_nonpositive(float x) {
  float xc = x < kExpLo ? kExpLo : x;
  int n = int(xc * kLog2e - 0.5f);  // round to nearest: t <= 0 and the cast truncates to zero
  float fn = float(n);
  float r = xc - fn * kLn2Hi - fn * kLn2Lo;
  float y = ((((kP0 * r + kP1) * r + kP2) * r + kP3) * r + kP4) * r + kP5;
  y = y * r * r + r + 1.f;
  uint32_t bits = uint32_t(n + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return x < kExpLo ? 0.f : y * scale;
}

inline float softmax_weight(float l, float lmax, float inv_t) {
  // Equality first: with lmax = +inf, (l - lmax) would be NaN.
  return l == lmax ? 1.f : exp_nonpositive((l - lmax) * inv_t);
}

#if defined(__GNUC__) || defined(__clang__)
// The passes over the whole vocabulary use GCC/Clang vector extensions: without -ffast-math the
// compilers will not vectorise NaN-aware max or select loops themselves, and these passes run for
// every generated token. Other compilers take the scalar loops, which give the same results.
#define HEARTH_SAMPLER_VEC 1
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

inline v4f load4(const float* p) {
  v4f v;
  std::memcpy(&v, p, 16);
  return v;
}
inline void store4(float* p, v4f v) {
  std::memcpy(p, &v, 16);
}
inline v4f splat4(float x) {
  return v4f{x, x, x, x};
}
inline v4f select4(v4i m, v4f a, v4f b) {
  return (v4f)(((v4i)a & m) | ((v4i)b & ~m));
}

inline v4f exp_nonpositive4(v4f x) {
  v4i under = x < kExpLo;
  v4f xc = select4(under, splat4(kExpLo), x);
  v4i n = __builtin_convertvector(xc * kLog2e - 0.5f, v4i);
  v4f fn = __builtin_convertvector(n, v4f);
  v4f r = xc - fn * kLn2Hi - fn * kLn2Lo;
  v4f y = ((((kP0 * r + kP1) * r + kP2) * r + kP3) * r + kP4) * r + kP5;
  y = y * r * r + r + 1.f;
  v4f scale = (v4f)((n + 127) << 23);
  return select4(under, splat4(0.f), y * scale);
}
#endif

// Returns the maximum and its first index (-1 if nothing beats -inf), ignoring NaN; replaces NaN
// by -inf in place, so it cannot break the strict ordering the selection algorithms rely on.
float sanitize_argmax(float* l, int n, int32_t* arg) {
  const float ninf = -std::numeric_limits<float>::infinity();
  float m = ninf;
  int32_t am = -1;
  bool nan = false;
  int i = 0;
#ifdef HEARTH_SAMPLER_VEC
  // Per-lane maxima with the index where each lane first reached it: NaN never compares greater,
  // the strict > keeps the first index within a lane, and the lane merge prefers the lower index.
  v4f m0 = splat4(ninf), m1 = m0;
  v4i a0 = {-1, -1, -1, -1}, a1 = a0, nan4 = {0, 0, 0, 0};
  v4i base = {0, 1, 2, 3};
  for (; i + 8 <= n; i += 8, base += 8) {
    v4f a = load4(l + i), b = load4(l + i + 4);
    nan4 |= (a != a) | (b != b);
    v4i ga = a > m0, gb = b > m1;
    m0 = select4(ga, a, m0);
    m1 = select4(gb, b, m1);
    a0 = (base & ga) | (a0 & ~ga);
    a1 = ((base + 4) & gb) | (a1 & ~gb);
  }
  nan = (nan4[0] | nan4[1] | nan4[2] | nan4[3]) != 0;
  for (int j = 0; j < 4; ++j) {
    const float vs[2] = {m0[j], m1[j]};
    const int32_t ixs[2] = {a0[j], a1[j]};
    for (int h = 0; h < 2; ++h) {
      if (vs[h] > m || (vs[h] == m && ixs[h] >= 0 && (am < 0 || ixs[h] < am))) {
        m = vs[h];
        am = ixs[h];
      }
    }
  }
#endif
  for (; i < n; ++i) {
    nan |= l[i] != l[i];
    if (l[i] > m) {
      m = l[i];
      am = i;
    }
  }
  if (nan)
    for (int j = 0; j < n; ++j) l[j] = l[j] == l[j] ? l[j] : ninf;
  *arg = am;
  return m;
}

void weights_all(const float* l, float* w, int n, float lmax, float inv_t) {
  int i = 0;
#ifdef HEARTH_SAMPLER_VEC
  for (; i + 4 <= n; i += 4) {
    v4f x = load4(l + i);
    v4f e = exp_nonpositive4((x - lmax) * inv_t);
    store4(w + i, select4(x == lmax, splat4(1.f), e));
  }
#endif
  for (; i < n; ++i) w[i] = softmax_weight(l[i], lmax, inv_t);
}

void zero_below(float* w, int n, float threshold) {
  int i = 0;
#ifdef HEARTH_SAMPLER_VEC
  for (; i + 4 <= n; i += 4) {
    v4f x = load4(w + i);
    store4(w + i, select4(x >= threshold, x, splat4(0.f)));
  }
#endif
  for (; i < n; ++i) w[i] = w[i] >= threshold ? w[i] : 0.f;
}

float block_sum(const float* w, int n) {
  float s = 0.f;
  int i = 0;
#ifdef HEARTH_SAMPLER_VEC
  v4f a = splat4(0.f), b = a;
  for (; i + 8 <= n; i += 8) {
    a += load4(w + i);
    b += load4(w + i + 4);
  }
  a += b;
  s = (a[0] + a[1]) + (a[2] + a[3]);
#endif
  for (; i < n; ++i) s += w[i];
  return s;
}

}  // namespace

void Sampler::check(const SamplingParams& params, int vocab_size) {
  if (vocab_size <= 0) fail("sampler: vocab_size must be > 0, got ", vocab_size);
  if (!std::isfinite(params.temperature))
    fail("sampler: temperature must be finite, got ", params.temperature);
  if (params.top_k < 0) fail("sampler: top_k must be >= 0 (0 = off), got ", params.top_k);
  if (!(params.top_p > 0.f && params.top_p <= 1.f))
    fail("sampler: top_p must be in (0, 1], got ", params.top_p);
  if (!(params.min_p >= 0.f && params.min_p <= 1.f))
    fail("sampler: min_p must be in [0, 1], got ", params.min_p);
  if (!(params.repetition_penalty > 0.f) || std::isinf(params.repetition_penalty))
    fail("sampler: repetition_penalty must be > 0, got ", params.repetition_penalty);
  if (!std::isfinite(params.presence_penalty))
    fail("sampler: presence_penalty must be finite, got ", params.presence_penalty);
  if (!std::isfinite(params.frequency_penalty))
    fail("sampler: frequency_penalty must be finite, got ", params.frequency_penalty);
}

bool argmax_only(const SamplingParams& p) {
  return p.temperature <= 0.f && p.repetition_penalty == 1.f && p.presence_penalty == 0.f &&
         p.frequency_penalty == 0.f;
}

int logits_needed(const SamplingParams& p, int vocab_size) {
  const bool penalties =
      p.repetition_penalty != 1.f || p.presence_penalty != 0.f || p.frequency_penalty != 0.f;
  if (penalties) return 0;
  if (p.temperature <= 0.f) return 1;
  return p.top_k > 0 && p.top_k < vocab_size ? p.top_k : 0;
}

int32_t first_argmax(const float* x, int n) {
  float best = -INFINITY;
  int32_t arg = -1;
  for (int i = 0; i < n; ++i)
    if (x[i] > best) best = x[i], arg = i;
  return arg;
}

Sampler::Sampler(const SamplingParams& params, int vocab_size)
    : params_(params), vocab_size_(vocab_size) {
  check(params, vocab_size);

  uint64_t s = params.seed;
  for (auto& r : rng_) r = splitmix64(s);
  counts_.assign(size_t(vocab_size), 0);
  idx_.resize(size_t(vocab_size));
  edge_.resize(size_t(vocab_size));
  weight_.resize(size_t(vocab_size));
  bucket_mass_.resize(kBuckets);
  block_sum_.resize(size_t((vocab_size + kBlock - 1) / kBlock));
}

double Sampler::next_uniform() {
  // xoshiro256**: fixed arithmetic, so a seed gives the same tokens on every platform.
  uint64_t* s = rng_;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return double(result >> 11) * 0x1.0p-53;
}

void Sampler::apply_penalties(float* logits, int n, const int32_t* history, int n_history) {
  const float rep = params_.repetition_penalty;
  const float pres = params_.presence_penalty;
  const float freq = params_.frequency_penalty;
  if ((rep == 1.f && pres == 0.f && freq == 0.f) || !history || n_history <= 0) return;
  for (int i = 0; i < n_history; ++i) {
    int32_t t = history[i];
    if (t >= 0 && t < n) ++counts_[size_t(t)];
  }
  // Second pass applies each distinct token once and clears its count, which leaves counts_ zero
  // for the next call without a list of touched tokens.
  for (int i = 0; i < n_history; ++i) {
    int32_t t = history[i];
    if (t < 0 || t >= n) continue;
    int32_t c = counts_[size_t(t)];
    if (c == 0) continue;
    counts_[size_t(t)] = 0;
    float& l = logits[t];
    if (rep != 1.f) l = l < 0.f ? l * rep : l / rep;
    l -= pres + freq * float(c);
  }
}

int32_t Sampler::sample(float* logits, int n, const int32_t* history, int n_history) {
  if (n <= 0 || n > vocab_size_)
    fail("sampler: got ", n, " logits, expected 1..", vocab_size_, " (the sampler's vocab_size)");
  apply_penalties(logits, n, history, n_history);
  int32_t arg = -1;
  const float lmax = sanitize_argmax(logits, n, &arg);
  if (arg < 0) fail("sampler: no finite logit among ", n, " (all NaN or -inf)");
  if (params_.temperature <= 0.f) return arg;
  const float inv_t = 1.f / params_.temperature;
  const int k = params_.top_k;
  if (k <= 0 || k >= n) return sample_whole(logits, n, lmax, inv_t);
  select_top_k(logits, n, k);
  return sample_listed(logits, k, lmax, inv_t);
}

// No top-k: every token is a candidate, handled in id order without an index list until top-p,
// if any, shrinks the set.
int32_t Sampler::sample_whole(const float* l, int n, float lmax, float inv_t) {
  float* w = weight_.data();
  weights_all(l, w, n, lmax, inv_t);
  if (params_.top_p < 1.f) {
    double total = 0;
    for (int b = 0; b * kBlock < n; ++b)
      total += block_sum(w + b * kBlock, std::min(kBlock, n - b * kBlock));
    return sample_listed_weighted(top_p_all(l, n, (double(params_.top_p) - kTopPSlack) * total));
  }
  // Weights are relative to the most likely token (weight 1), so the min-p threshold needs no
  // renormalisation and the most likely token always survives.
  if (params_.min_p > 0.f) zero_below(w, n, params_.min_p);
  return draw_all(n);
}

// The k best ids into idx_[0..k) in rank order: larger logit first, lower id first among equals;
// a strict total order, so the kept set and the walk order do not depend on the standard
// library's algorithms.
void Sampler::select_top_k(const float* l, int n, int k) {
  int32_t* idx = idx_.data();
  auto before = [l](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); };
  if (k > kHeapTopK) {
    for (int32_t i = 0; i < n; ++i) idx[i] = i;
    std::nth_element(idx, idx + k, idx + n, before);
    std::sort(idx, idx + k, before);
    return;
  }
  // Heap of the k best so far with the worst on top. Ids arrive in increasing order, so a
  // newcomer equal to the worst ranks after it and must not replace it.
  for (int32_t i = 0; i < k; ++i) idx[i] = i;
  std::make_heap(idx, idx + k, before);
  float worst = l[idx[0]];
  auto offer = [&](int32_t i) {
    if (l[i] > worst) {
      std::pop_heap(idx, idx + k, before);
      idx[k - 1] = i;
      std::push_heap(idx, idx + k, before);
      worst = l[idx[0]];
    }
  };
  int32_t i = k;
#ifdef HEARTH_SAMPLER_VEC
  // Nearly every block of eight loses to the current k-th best; test them eight at a time.
  for (; i + 8 <= n; i += 8) {
    v4i g = (load4(l + i) > worst) | (load4(l + i + 4) > worst);
    if (g[0] | g[1] | g[2] | g[3])
      for (int32_t j = i; j < i + 8; ++j) offer(j);
  }
#endif
  for (; i < n; ++i) offer(i);
  std::sort_heap(idx, idx + k, before);
}

// Top-p, then min-p, over the nc candidates in idx_ (in rank order), then a draw.
int32_t Sampler::sample_listed(const float* l, int nc, float lmax, float inv_t) {
  int32_t* idx = idx_.data();
  float* w = weight_.data();
  double total = 0;
  for (int i = 0; i < nc; ++i) {
    w[idx[i]] = softmax_weight(l[idx[i]], lmax, inv_t);
    total += w[idx[i]];
  }
  if (params_.top_p < 1.f) {
    const double target = (double(params_.top_p) - kTopPSlack) * total;
    double cum = 0;
    for (int i = 0; i < nc; ++i) {
      cum += w[idx[i]];
      if (cum >= target) {
        nc = i + 1;
        break;
      }
    }
  }
  return sample_listed_weighted(nc);
}

// Min-p over the nc weighted candidates in idx_, then a draw.
int32_t Sampler::sample_listed_weighted(int nc) {
  int32_t* idx = idx_.data();
  const float* w = weight_.data();
  if (params_.min_p > 0.f) {
    int m = 0;
    for (int i = 0; i < nc; ++i)
      if (w[idx[i]] >= params_.min_p) idx[m++] = idx[i];
    nc = m;
  }
  return draw_listed(idx, nc);
}

int Sampler::top_p_all(const float* l, int n, double target) {
  // Sorting the whole vocabulary costs milliseconds when the nucleus is wide. Instead bucket the
  // weights by their float bits: one pass finds the bucket where the mass counted from the top
  // crosses the target; everything above it is in, and only that bucket needs sorting.
  int32_t* idx = idx_.data();
  int32_t* edge = edge_.data();
  const float* w = weight_.data();
  double* mass = bucket_mass_.data();
  std::fill(bucket_mass_.begin(), bucket_mass_.end(), 0.0);
  for (int i = 0; i < n; ++i) mass[bucket_of(w[i])] += w[i];
  int b = kBuckets - 1;
  double above = 0;
  for (; b > 0 && above + mass[b] < target; --b) above += mass[b];
  int kept = 0, nb = 0;
  for (int32_t i = 0; i < n; ++i) {
    int bi = bucket_of(w[i]);
    if (bi > b)
      idx[kept++] = i;
    else if (bi == b)
      edge[nb++] = i;
  }
  auto before = [l](int32_t a, int32_t c) { return l[a] > l[c] || (l[a] == l[c] && a < c); };
  std::sort(edge, edge + nb, before);
  double cum = above;
  for (int i = 0; i < nb; ++i) {
    idx[kept++] = edge[i];
    cum += w[edge[i]];
    if (cum >= target) break;
  }
  return kept;
}

int32_t Sampler::draw_all(int n) {
  const float* w = weight_.data();
  double* bs = block_sum_.data();
  const int nblocks = (n + kBlock - 1) / kBlock;
  double total = 0;
  for (int b = 0; b < nblocks; ++b) {
    bs[b] = block_sum(w + b * kBlock, std::min(kBlock, n - b * kBlock));
    total += bs[b];
  }
  const double r = next_uniform() * total;
  double cum = 0;
  int b = 0;
  while (b + 1 < nblocks && cum + bs[b] <= r) cum += bs[b++];
  // Walk on from the chosen block; the walk runs past it only if rounding made the block sum
  // disagree with the element-wise sum.
  for (int i = b * kBlock; i < n; ++i) {
    cum += w[i];
    if (w[i] > 0.f && cum > r) return i;
  }
  int i = n - 1;
  while (i > 0 && !(w[i] > 0.f)) --i;
  return i;
}

int32_t Sampler::draw_listed(const int32_t* ids, int count) {
  const float* w = weight_.data();
  double total = 0;
  for (int i = 0; i < count; ++i) total += w[ids[i]];
  const double r = next_uniform() * total;
  double cum = 0;
  int32_t last = ids[0];
  for (int i = 0; i < count; ++i) {
    float wi = w[ids[i]];
    if (!(wi > 0.f)) continue;
    cum += wi;
    last = ids[i];
    if (cum > r) return ids[i];
  }
  return last;  // rounding left r at the very top of the mass
}

}  // namespace hearth
