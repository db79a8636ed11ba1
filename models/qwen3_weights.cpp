#include "models/qwen3_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/quant_format.h"
#include "models/quant_load.h"

namespace hearth {

namespace {

class Binder {
 public:
  explicit Binder(const Checkpoint& ck, quant::QuantBinder* q = nullptr) : ck_(ck), q_(q) {}

  Tensor bind(const std::string& name, std::vector<int64_t> shape) {
    expected_.insert(name);
    // Quantized checkpoints: 2-D weights follow the scheme config.json assigns them.
    if (q_ && shape.size() == 2 && q_->scheme_for(name).quantized()) {
      expected_.insert(quant::scale_name(name));
      return q_->bind(name, shape[0], shape[1]);
    }
    const TensorRef* r = ck_.find(name);
    if (!r)
      fail(ck_.dir(), ": tensor '", name, "' is missing (expected shape ", shape_str(shape), ")");
    return check(*r, shape);
  }

  Tensor check(const TensorRef& r, const std::vector<int64_t>& shape) const {
    if (r.shape != shape)
      fail(r.file, ": tensor '", r.name, "' has shape ", shape_str(r.shape), ", expected ",
           shape_str(shape));
    if (!r.plain_dtype ||
        !(r.dtype == DType::F32 || r.dtype == DType::F16 || r.dtype == DType::BF16))
      fail(r.file, ": tensor '", r.name, "' has dtype ", r.dtype_str,
           "; weights must be F32, F16 or BF16");
    return r.view();
  }

  void reject_unexpected(const std::string& also_allowed) const {
    for (const TensorRef* r : ck_.all())
      if (!expected_.count(r->name) && r->name != also_allowed)
        fail(r->file, ": unexpected tensor '", r->name, "' (not part of a Qwen3 model with this ",
             "config)");
  }

 private:
  const Checkpoint& ck_;
  quant::QuantBinder* q_;
  std::set<std::string> expected_;
};

// Tied checkpoints normally omit lm_head.weight; one that carries it must hold the same values,
// or the model would silently depend on which of the two we pick.
bool same_values(const Tensor& a, const Tensor& b) {
  if (a.dtype == b.dtype) return a.nbytes == b.nbytes && std::memcmp(a.data, b.data, a.nbytes) == 0;
  const size_t n = size_t(a.numel());
  constexpr size_t kChunk = 4096;
  std::vector<float> fa(kChunk), fb(kChunk);
  for (size_t i = 0; i < n; i += kChunk) {
    const size_t m = std::min(kChunk, n - i);
    to_f32(a.dtype, static_cast<const uint8_t*>(a.data) + i * dtype_size(a.dtype), fa.data(), m);
    to_f32(b.dtype, static_cast<const uint8_t*>(b.data) + i * dtype_size(b.dtype), fb.data(), m);
    for (size_t j = 0; j < m; ++j)
      if (fa[j] != fb[j] && !(std::isnan(fa[j]) && std::isnan(fb[j]))) return false;
  }
  return true;
}

}  // namespace

Qwen3Weights bind_qwen3_weights(const Checkpoint& ck, const Qwen3Config& c) {
  std::unique_ptr<quant::QuantBinder> qb;
  if (c.has_quantization_config)
    qb = std::make_unique<quant::QuantBinder>(
        ck, quant::parse_quant_config(c.quantization_config_json, c.source));
  const int64_t hidden = c.hidden_size, inter = c.intermediate_size, vocab = c.vocab_size;
  const int64_t hd = c.head_dim, q_dim = int64_t(c.num_attention_heads) * hd,
                kv_dim = int64_t(c.num_key_value_heads) * hd;

  Binder b(ck, qb.get());
  Qwen3Weights w;
  w.embed = b.bind("model.embed_tokens.weight", {vocab, hidden});
  w.layers.resize(size_t(c.num_hidden_layers));
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    Qwen3LayerWeights& l = w.layers[size_t(i)];
    l.q_proj = b.bind(p + "self_attn.q_proj.weight", {q_dim, hidden});
    l.k_proj = b.bind(p + "self_attn.k_proj.weight", {kv_dim, hidden});
    l.v_proj = b.bind(p + "self_attn.v_proj.weight", {kv_dim, hidden});
    l.o_proj = b.bind(p + "self_attn.o_proj.weight", {hidden, q_dim});
    l.q_norm = b.bind(p + "self_attn.q_norm.weight", {hd});
    l.k_norm = b.bind(p + "self_attn.k_norm.weight", {hd});
    if (c.sparse_layer(i)) {
      const int64_t mi = c.moe_intermediate_size;
      l.router = b.bind(p + "mlp.gate.weight", {int64_t(c.num_experts), hidden});
      for (int e = 0; e < c.num_experts; ++e) {
        const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
        l.expert_gate.push_back(b.bind(x + "gate_proj.weight", {mi, hidden}));
        l.expert_up.push_back(b.bind(x + "up_proj.weight", {mi, hidden}));
        l.expert_down.push_back(b.bind(x + "down_proj.weight", {hidden, mi}));
      }
    } else {
      l.gate_proj = b.bind(p + "mlp.gate_proj.weight", {inter, hidden});
      l.up_proj = b.bind(p + "mlp.up_proj.weight", {inter, hidden});
      l.down_proj = b.bind(p + "mlp.down_proj.weight", {hidden, inter});
    }
    l.input_norm = b.bind(p + "input_layernorm.weight", {hidden});
    l.post_attn_norm = b.bind(p + "post_attention_layernorm.weight", {hidden});
  }
  w.final_norm = b.bind("model.norm.weight", {hidden});
  // A quantized untied head is bound like the other quantized weights, scales included.
  const bool q_head = qb && !c.tie_word_embeddings && ck.find("lm_head.weight") &&
                      qb->scheme_for("lm_head.weight").quantized();
  if (q_head) w.lm_head = b.bind("lm_head.weight", {vocab, hidden});
  b.reject_unexpected("lm_head.weight");

  const TensorRef* head = ck.find("lm_head.weight");
  if (q_head) {
    // bound above, before unexpected tensors were rejected
  } else if (!head) {
    if (!c.tie_word_embeddings)
      fail(ck.dir(), ": lm_head.weight missing and tie_word_embeddings is false");
    w.lm_head = w.embed;
  } else {
    Tensor h = b.check(*head, {vocab, hidden});
    if (c.tie_word_embeddings) {
      if (!same_values(h, w.embed))
        fail(head->file,
             ": lm_head.weight differs from model.embed_tokens.weight but "
             "tie_word_embeddings is true");
      w.lm_head = w.embed;
    } else {
      w.lm_head = h;
    }
  }
  w.files = ck.shards();
  if (qb) w.codebook = qb->codebook();
  return w;
}

}  // namespace hearth
