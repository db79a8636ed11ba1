#include "quant/calibrate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <thread>

#include "core/backend.h"
#include "core/error.h"
#include "core/quant_format.h"
#include "core/threadpool.h"

namespace hearth::quant {

namespace {

// Running statistics of one layer input (shared by every linear that reads it).
struct InputStats {
  int64_t cols = 0;
  int64_t n = 0;
  std::vector<double> sum_abs, sum_sq;
  std::vector<float> samples;  // [n_samples, cols]
  int n_samples = 0;
};

// One place where a per-channel scale can be applied and folded away.
struct Site {
  std::vector<std::string> linears;           // all read the same input
  std::string fold_norm;                      // RMSNorm weight producing the input, or
  std::string fold_rows;                      // linear whose output rows produce it
  int heads = 0, kv_heads = 0, head_dim = 0;  // o_proj: channels must agree within a KV group
};

std::vector<float> rows_f32(const TensorRef& r, int64_t row0, int64_t n_rows) {
  const int64_t cols = r.shape.back();
  std::vector<float> out(size_t(n_rows * cols));
  const size_t esz = dtype_size(r.dtype);
  to_f32(r.dtype, r.data + size_t(row0 * cols) * esz, out.data(), size_t(n_rows * cols));
  return out;
}

// 16 independent partial sums, so the compiler vectorises without reassociating.
float dot(const float* a, const float* b, int64_t n) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += a[i + j] * b[i + j];
  float s = 0.f;
  for (; i < n; ++i) s += a[i] * b[i];
  for (float v : acc) s += v;
  return s;
}

class SiteSearch {
 public:
  SiteSearch(const Qwen3Model& m, const CalibrationOptions& o, ThreadPool& pool)
      : m_(m), o_(o), pool_(pool) {}

  // Returns the chosen per-channel scale (empty when no scaling beats plain quantization).
  std::vector<float> run(const Site& site, const InputStats& st, double* err_scaled,
                         double* err_plain, float* alpha_out) {
    const int64_t k = st.cols;
    std::vector<float> mean_abs(static_cast<size_t>(k)), ex2(static_cast<size_t>(k));
    for (int64_t j = 0; j < k; ++j) {
      mean_abs[size_t(j)] = float(st.sum_abs[size_t(j)] / double(st.n));
      ex2[size_t(j)] = float(st.sum_sq[size_t(j)] / double(st.n));
    }
    if (site.heads) {  // o_proj: one scale per KV-head channel, shared by the heads that use it
      const int group = site.heads / site.kv_heads, hd = site.head_dim;
      for (int kvh = 0; kvh < site.kv_heads; ++kvh)
        for (int d = 0; d < hd; ++d) {
          double a = 0;
          for (int h = kvh * group; h < (kvh + 1) * group; ++h) a += mean_abs[size_t(h * hd + d)];
          for (int h = kvh * group; h < (kvh + 1) * group; ++h)
            mean_abs[size_t(h * hd + d)] = float(a / group);
        }
    }
    // The weight rows scored: an even spread over each linear.
    std::vector<std::vector<float>> rows;
    for (const std::string& name : site.linears) {
      const TensorRef* r = m_.checkpoint().find(name);
      const int64_t n_rows = r->shape[0];
      const int64_t stride = std::max<int64_t>(1, n_rows / o_.max_rows);
      for (int64_t i = 0; i < n_rows; i += stride) rows.push_back(rows_f32(*r, i, 1));
    }
    const int8_t* cb = o_.scheme.bits == 4 ? o_.codebook : nullptr;
    auto score = [&](const std::vector<float>& s) {
      std::vector<float> imp(static_cast<size_t>(k));
      for (int64_t j = 0; j < k; ++j)
        imp[size_t(j)] = ex2[size_t(j)] / (s[size_t(j)] * s[size_t(j)]);
      std::vector<double> err(rows.size());
      pool_.run([&](int tid, int nth) {
        int64_t b, e;
        ThreadPool::split(int64_t(rows.size()), tid, nth, 1, &b, &e);
        std::vector<float> ws(static_cast<size_t>(k)), delta(static_cast<size_t>(k));
        std::vector<int8_t> q(static_cast<size_t>(k));
        std::vector<uint16_t> sc(static_cast<size_t>(k / o_.scheme.group));
        for (int64_t i = b; i < e; ++i) {
          const std::vector<float>& w = rows[size_t(i)];
          for (int64_t j = 0; j < k; ++j) ws[size_t(j)] = w[size_t(j)] * s[size_t(j)];
          quantize_row(ws.data(), k, o_.scheme, Method::Search, imp.data(), q.data(), sc.data(),
                       cb);
          for (int64_t j = 0; j < k; ++j) {
            const int8_t c = q[size_t(j)];
            delta[size_t(j)] = w[size_t(j)] - float(cb ? cb[c + 8] : c) *
                                                  scale_to_f32(o_.scheme.scale_dtype,
                                                               sc[size_t(j / o_.scheme.group)]) /
                                                  s[size_t(j)];
          }
          double acc = 0;
          for (int n = 0; n < st.n_samples; ++n) {
            const double y = dot(st.samples.data() + size_t(n) * size_t(k), delta.data(), k);
            acc += y * y;
          }
          err[size_t(i)] = acc;
        }
      });
      double total = 0;
      for (double v : err) total += v;
      return total;
    };

    std::vector<float> ones(size_t(k), 1.f), best = ones, s(static_cast<size_t>(k));
    const double plain = score(ones);
    double best_err = plain;
    float best_alpha = 0.f;
    for (int step = 1; step <= 10; ++step) {
      const float alpha = 0.1f * float(step);
      float lo = INFINITY, hi = 0.f;
      for (int64_t j = 0; j < k; ++j) {
        s[size_t(j)] = std::pow(std::max(mean_abs[size_t(j)], 1e-6f), alpha);
        lo = std::min(lo, s[size_t(j)]);
        hi = std::max(hi, s[size_t(j)]);
      }
      // Centre the scales so weights neither grow nor shrink overall (their float range matters
      // for F16 scales), as AWQ does.
      const float mid = std::sqrt(lo * hi);
      for (float& v : s) v /= mid;
      const double e = score(s);
      if (e < best_err) {
        best_err = e;
        best = s;
        best_alpha = alpha;
      }
    }
    *err_scaled += best_err;
    *err_plain += plain;
    *alpha_out = best_alpha;
    return best_alpha > 0.f ? best : std::vector<float>();
  }

 private:
  const Qwen3Model& m_;
  const CalibrationOptions& o_;
  ThreadPool& pool_;
};

}  // namespace

Calibration calibrate(const Qwen3Model& model, const std::vector<int32_t>& ids,
                      const CalibrationOptions& opt) {
  const Qwen3Config& c = model.config();
  const Graph& g = model.graph();
  if (ids.empty()) fail("calibration: no tokens");
  for (int32_t id : ids)
    if (id < 0 || id >= c.vocab_size)
      fail("calibration: token id ", id, " is outside the model's vocabulary (", c.vocab_size, ")");
  const int ctx = std::max(1, std::min({opt.ctx, int(ids.size()), c.max_position_embeddings}));

  // Which graph tensor feeds each checkpoint linear: match the MatMul's weight view to the
  // checkpoint tensor by address, so this does not depend on graph naming.
  std::map<const void*, std::string> name_of;
  for (const TensorRef* r : model.checkpoint().all()) name_of[r->data] = r->name;
  std::map<std::string, int> input_of;  // checkpoint linear -> graph input tensor
  std::map<int, int> input_of_weight;   // graph weight tensor -> graph input tensor
  for (const Node& n : g.nodes())
    if (n.op == Op::MatMul && g.tensor(n.in[0]).rows == Rows::Tokens) {
      input_of_weight[n.in[1]] = n.in[0];
      auto it = name_of.find(g.tensor(n.in[1]).weight.data);
      if (it != name_of.end()) input_of[it->second] = n.in[0];
    }

  // Pass 1: activation statistics, one observer call per distinct input per step.
  std::map<int, InputStats> stats;
  const int64_t stride = std::max<int64_t>(1, int64_t(ids.size()) / opt.max_samples);
  int64_t base = 0;
  std::set<int> seen;
  std::function<void(int, const float*, int64_t, int64_t)> observe =
      [&](int weight, const float* x, int64_t rows, int64_t cols) {
        auto in = input_of_weight.find(weight);
        if (in == input_of_weight.end() || !seen.insert(in->second).second) return;
        const int id = in->second;
        InputStats& s = stats[id];
        if (!s.cols) {
          s.cols = cols;
          s.sum_abs.assign(size_t(cols), 0.0);
          s.sum_sq.assign(size_t(cols), 0.0);
          s.samples.reserve(size_t(opt.max_samples * cols));
        }
        for (int64_t r = 0; r < rows; ++r) {
          const float* xr = x + r * cols;
          for (int64_t j = 0; j < cols; ++j) {
            s.sum_abs[size_t(j)] += std::fabs(xr[j]);
            s.sum_sq[size_t(j)] += double(xr[j]) * xr[j];
          }
          if ((base + r) % stride == 0 && s.n_samples < opt.max_samples) {
            s.samples.insert(s.samples.end(), xr, xr + cols);
            ++s.n_samples;
          }
        }
        s.n += rows;
      };
  BackendOptions bo;
  bo.threads = opt.threads;
  auto backend = create_backend("cpu", bo);
  auto cg = backend->compile(g, ctx, 1);
  // One window at a time in one KV block of the window's length.
  auto kv = backend->alloc_kv(g.kv, 1, ctx);
  const int32_t block = 0;
  std::vector<float> logits(size_t(c.vocab_size));
  for (size_t w0 = 0; w0 < ids.size(); w0 += size_t(ctx)) {
    const int n = int(std::min(ids.size() - w0, size_t(ctx)));
    int32_t last = n - 1;
    SeqRows seq;
    seq.n_rows = n;
    seq.blocks = &block;
    seq.n_blocks = 1;
    StepInputs in;
    in.tokens = ids.data() + w0;
    in.n_tokens = n;
    in.seqs = &seq;
    in.n_seqs = 1;
    in.out_rows = &last;
    in.n_out = 1;
    in.kv = kv.get();
    in.logits = logits.data();
    in.observe_matmul = &observe;
    seen.clear();
    base = int64_t(w0);
    backend->run(*cg, in);
  }

  // Pass 2: per layer and site, the scale exponent that minimises the quantized output error.
  Calibration cal;
  cal.tokens = int(ids.size());
  ThreadPool pool(opt.threads > 0 ? opt.threads
                                  : int(std::max(1u, std::thread::hardware_concurrency())));
  SiteSearch search(model, opt, pool);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    std::vector<Site> sites(4);
    sites[0].linears = {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight",
                        p + "self_attn.v_proj.weight"};
    sites[0].fold_norm = p + "input_layernorm.weight";
    sites[1].linears = {p + "self_attn.o_proj.weight"};
    sites[1].fold_rows = p + "self_attn.v_proj.weight";
    sites[1].heads = c.num_attention_heads;
    sites[1].kv_heads = c.num_key_value_heads;
    sites[1].head_dim = c.head_dim;
    sites[2].linears = {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"};
    sites[2].fold_norm = p + "post_attention_layernorm.weight";
    sites[3].linears = {p + "mlp.down_proj.weight"};
    sites[3].fold_rows = p + "mlp.up_proj.weight";
    std::string line = "layer " + std::to_string(l) + ": alpha";
    for (const Site& site : sites) {
      auto it = input_of.find(site.linears[0]);
      if (it == input_of.end() || !stats.count(it->second))
        fail("calibration: no activations were observed for ", site.linears[0]);
      const InputStats& st = stats.at(it->second);
      float alpha = 0.f;
      std::vector<float> s = search.run(site, st, &cal.err_scaled, &cal.err_plain, &alpha);
      char buf[16];
      std::snprintf(buf, sizeof buf, " %.1f", double(alpha));
      line += buf;
      std::vector<float> imp(static_cast<size_t>(st.cols));
      for (int64_t j = 0; j < st.cols; ++j) {
        const float sj = s.empty() ? 1.f : s[size_t(j)];
        imp[size_t(j)] = float(st.sum_sq[size_t(j)] / double(st.n)) / (sj * sj);
      }
      for (const std::string& name : site.linears) {
        cal.importance[name] = imp;
        if (!s.empty()) cal.col_scale[name] = s;
      }
      if (s.empty()) continue;
      if (!site.fold_norm.empty()) {
        cal.norm_div[site.fold_norm] = s;
      } else if (site.heads) {  // v_proj row (kvh, d) feeds o_proj channels (h, d), h in its group
        const int hd = site.head_dim, group = site.heads / site.kv_heads;
        std::vector<float> d(static_cast<size_t>(site.kv_heads * hd));
        for (int kvh = 0; kvh < site.kv_heads; ++kvh)
          for (int j = 0; j < hd; ++j) d[size_t(kvh * hd + j)] = s[size_t(kvh * group * hd + j)];
        cal.row_div[site.fold_rows] = d;
      } else {
        cal.row_div[site.fold_rows] = s;
      }
    }
    if (opt.log) opt.log(line);
  }
  return cal;
}

}  // namespace hearth::quant
