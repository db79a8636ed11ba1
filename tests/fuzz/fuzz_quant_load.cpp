// Feeds the input, split at its first NUL byte, as config.json (text) and model.safetensors (the
// rest, bytes) of a checkpoint folder in /dev/shm, then loads it as a model does:
// parse_qwen3_config, Checkpoint::open and bind_qwen3_weights, which for a quantized config binds
// Q8/Q4 views through QuantBinder (quantization_config, __metadata__ hearth.quant and
// hearth.codebook, code and scale shapes, finite scales). Every view it returns must lie inside the
// file's map.
#include <cstdint>

#include "core/error.h"
#include "models/checkpoint.h"
#include "models/qwen3_config.h"
#include "models/qwen3_weights.h"
#include "tests/fuzz/fuzz_util.h"

using namespace hearth;

namespace {

void check_view(const Tensor& t, const MappedFile& f) {
  if (t.empty()) return;
  const auto* p = static_cast<const uint8_t*>(t.data);
  FUZZ_CHECK(p >= f.data() && t.nbytes <= f.size() && p + t.nbytes <= f.data() + f.size());
  if (t.scales) {
    const auto* s = static_cast<const uint8_t*>(t.scales);
    FUZZ_CHECK(t.group_size > 0);
    const size_t scale_bytes = size_t(t.rows()) * size_t(t.cols() / t.group_size) * 2;
    FUZZ_CHECK(s >= f.data() && s + scale_bytes <= f.data() + f.size());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = fuzz::scratch_dir() + "/quant";
  static const bool made = std::filesystem::create_directories(dir);
  (void)made;
  const auto parts = fuzz::split_nul(data, size, 2);
  fuzz::write_file(dir + "/model.safetensors", parts[1]);
  try {
    const Qwen3Config config = parse_qwen3_config(parts[0], dir + "/config.json");
    // A fuzzed config can ask for a model of any size; only the file's bytes bound what binding
    // touches, so that is fine, but keep the number of layers from making one run take seconds.
    if (config.num_hidden_layers > 64) return 0;
    Checkpoint ck = Checkpoint::open(dir);
    Qwen3Weights w = bind_qwen3_weights(ck, config);
    const MappedFile& f = ck.shards()[0]->file();
    check_view(w.embed, f);
    check_view(w.final_norm, f);
    check_view(w.lm_head, f);
    for (const Qwen3LayerWeights& l : w.layers)
      for (const Tensor* t :
           {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.q_norm, &l.k_norm, &l.gate_proj,
            &l.up_proj, &l.down_proj, &l.input_norm, &l.post_attn_norm})
        check_view(*t, f);
  } catch (const Error& e) {
    fuzz::refused(e);
  }
  return 0;
}
