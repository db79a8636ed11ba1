#include "quant/eval.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/runner.h"

namespace hearth::quant {

namespace {

// log-softmax normaliser and argmax of one row of logits, in double.
void row_stats(const float* l, int64_t n, double* lse, int64_t* arg) {
  float mx = -INFINITY;
  int64_t a = 0;
  for (int64_t i = 0; i < n; ++i)
    if (l[i] > mx) mx = l[i], a = i;
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(double(l[i]) - mx);
  *lse = double(mx) + std::log(s);
  *arg = a;
}

}  // namespace

std::vector<int32_t> read_token_ids(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, ": cannot read");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string s = ss.str();
  std::vector<int32_t> ids;
  auto sep = [](char c) { return c == ',' || std::isspace(static_cast<unsigned char>(c)); };
  for (size_t i = 0; i < s.size();) {
    if (sep(s[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < s.size() && !sep(s[j])) ++j;
    const std::string tok = s.substr(i, j - i);
    char* end = nullptr;
    const long long v = std::strtoll(tok.c_str(), &end, 10);
    if (*end || v < 0 || v > INT32_MAX) fail(path, ": '", tok, "' is not a token id");
    ids.push_back(int32_t(v));
    i = j;
  }
  if (ids.empty()) fail(path, ": no token ids");
  return ids;
}

double bits_per_weight(const Qwen3Model& m) {
  double bits = 0, params = 0;
  for (const TensorRef* r : m.checkpoint().all()) {
    bits += 8.0 * double(r->nbytes);
    const bool scales = r->name.size() > 6 && r->name.compare(r->name.size() - 6, 6, "_scale") == 0;
    if (scales) continue;
    if (r->dtype_str == "U8")
      params += 2.0 * double(r->nbytes);  // packed 4-bit codes
    else if (r->dtype_str == "I8")
      params += double(r->nbytes);
    else
      params += double(r->nbytes) / double(dtype_size(r->dtype));
  }
  return params > 0 ? bits / params : 0;
}

EvalReport evaluate(const Qwen3Model& model, const Qwen3Model& ref, const std::vector<int32_t>& ids,
                    const EvalOptions& opt) {
  const int vocab = model.config().vocab_size;
  if (ref.config().vocab_size != vocab)
    fail("eval: vocabularies differ (", vocab, " vs reference ", ref.config().vocab_size, ")");
  if (ids.size() < 2) fail("eval: need at least 2 tokens");
  const int ctx = std::min({opt.ctx, model.config().max_position_embeddings,
                            ref.config().max_position_embeddings, int(ids.size())});
  if (ctx < 2) fail("eval: --ctx must be at least 2");
  Runner rm(create_backend("", opt.backend), model.graph(), vocab,
            model.config().max_position_embeddings, ctx);
  BackendOptions ref_backend = opt.backend;
  ref_backend.kv_dtype = DType::F32;  // --kv measures the model's cache against an exact one
  Runner rr(create_backend("", ref_backend), ref.graph(), vocab,
            ref.config().max_position_embeddings, ctx);
  auto kvm = rm.new_kv(ctx), kvr = rr.new_kv(ctx);
  std::vector<float> lm(size_t(ctx) * size_t(vocab)), lr(size_t(ctx) * size_t(vocab));

  EvalReport rep;
  rep.tokens = int(ids.size());
  std::vector<double> kls;
  double nll_m = 0, nll_r = 0;
  int64_t agree = 0;
  for (size_t w0 = 0; w0 + 1 < ids.size(); w0 += size_t(ctx)) {
    const int n = int(std::min(ids.size() - w0, size_t(ctx)));
    if (n < 2) break;
    ++rep.windows;
    rm.forward(*kvm, ids.data() + w0, n, 0, lm.data(), nullptr);
    rr.forward(*kvr, ids.data() + w0, n, 0, lr.data(), nullptr);
    for (int t = 0; t + 1 < n; ++t) {
      const float* a = lm.data() + size_t(t) * size_t(vocab);
      const float* b = lr.data() + size_t(t) * size_t(vocab);
      double lse_a, lse_b;
      int64_t arg_a, arg_b;
      row_stats(a, vocab, &lse_a, &arg_a);
      row_stats(b, vocab, &lse_b, &arg_b);
      const int32_t next = ids[w0 + size_t(t) + 1];
      nll_m += lse_a - a[next];
      nll_r += lse_b - b[next];
      double kl = 0;
      for (int i = 0; i < vocab; ++i) {
        const double lpb = double(b[i]) - lse_b, lpa = double(a[i]) - lse_a;
        kl += std::exp(lpb) * (lpb - lpa);
      }
      kls.push_back(std::max(0.0, kl));  // rounding can leave -1e-17 for identical rows
      agree += arg_a == arg_b;
    }
  }
  rep.positions = int64_t(kls.size());
  const double np = double(rep.positions);
  rep.ppl_model = std::exp(nll_m / np);
  rep.ppl_ref = std::exp(nll_r / np);
  double sum = 0;
  for (double k : kls) sum += k;
  rep.kl_mean = sum / np;
  std::sort(kls.begin(), kls.end());
  rep.kl_p99 = kls[size_t(std::floor(0.99 * (np - 1)))];
  rep.kl_max = kls.back();
  rep.top1 = double(agree) / np;
  rep.bpw_model = bits_per_weight(model);
  rep.bpw_ref = bits_per_weight(ref);
  return rep;
}

}  // namespace hearth::quant
