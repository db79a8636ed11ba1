// hearth standin: writes a random-weight Qwen3 checkpoint in exact Hugging Face layout, for tests,
// demos and benchmarks when no real weights are at hand.
#include <cstdio>

#include "core/error.h"
#include "models/standin.h"
#include "quant/quantizer.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/progress_bar.h"

namespace hearth::cli {

int cmd_standin(int argc, char** argv) {
  Args args(argc, argv,
            {"--out=",
             "--preset=",
             "--dtype=",
             "--seed=",
             "--heavy-tailed",
             "--outliers=",
             "--key-outliers=",
             "--shards=",
             "--tokenizer=",
             "--hidden=",
             "--intermediate=",
             "--layers=",
             "--heads=",
             "--kv-heads=",
             "--head-dim=",
             "--vocab=",
             "--untied",
             "--rope-theta=",
             "--experts=",
             "--experts-per-tok=",
             "--moe-intermediate=",
             "--bits=",
             "--group=",
             "--head=",
             "--scale-dtype=",
             "--rtn",
             "--force"});
  StandinSpec s = standin_preset(args.str("--preset", "0.6b"));
  s.hidden = args.integer("--hidden", s.hidden);
  s.intermediate = args.integer("--intermediate", s.intermediate);
  s.layers = args.integer("--layers", s.layers);
  s.heads = args.integer("--heads", s.heads);
  s.kv_heads = args.integer("--kv-heads", s.kv_heads);
  s.head_dim = args.integer("--head-dim", s.head_dim);
  s.vocab = args.integer("--vocab", s.vocab);
  s.rope_theta = args.number("--rope-theta", s.rope_theta);
  if (args.has("--untied")) s.tied = false;
  s.experts = args.integer("--experts", s.experts);
  s.experts_per_tok = args.integer("--experts-per-tok", s.experts_per_tok);
  s.moe_intermediate = args.integer("--moe-intermediate", s.moe_intermediate);
  std::string dt = args.str("--dtype", "bf16");
  for (auto& c : dt) c = char(std::toupper(static_cast<unsigned char>(c)));
  s.dtype = dt;
  s.seed = uint64_t(args.integer("--seed", 1));
  s.heavy_tailed = args.has("--heavy-tailed");
  s.outlier_channels = args.integer("--outliers", s.heavy_tailed ? 4 : 0);
  s.key_outlier_channels = args.integer("--key-outliers", 0);
  s.shards = args.integer("--shards", 1);
  const std::string tok = args.str("--tokenizer", HEARTH_SOURCE_DIR "/../shared/qwen3-tokenizer");
  const std::string out = args.required("--out");
  if (args.has("--bits")) {
    // Quantized as it is generated: the 16-bit stand-in is never written (30B-A3B: 61 GB).
    if (s.shards != 1) fail("--shards: a quantized stand-in is one file");
    quant::QuantizeOptions o;
    parse_quant_scheme(args, &o);
    o.force = args.has("--force");
    ProgressBar bar;
    o.progress = [&](size_t done, size_t total, const std::string& t) {
      bar.update(done, total, t);
    };
    const quant::QuantizeReport r = quant::quantize_standin(s, tok, out, o);
    bar.done();
    std::fprintf(stderr,
                 "wrote a random-weight stand-in checkpoint (not a trained model) to %s: %s, "
                 "head %s, %.3f bits/weight, %.1f MB\n",
                 out.c_str(), quant::scheme_str(o.main).c_str(), quant::scheme_str(o.head).c_str(),
                 r.bits_per_weight, double(r.output_bytes) / 1e6);
    return 0;
  }
  for (const char* flag : {"--group", "--head", "--scale-dtype", "--rtn", "--force"})
    if (args.has(flag)) fail(flag, " is for a quantized stand-in (--bits 4 or 8)");
  write_standin(out, s, tok);
  std::fprintf(stderr, "wrote a random-weight stand-in checkpoint (not a trained model) to %s\n",
               out.c_str());
  return 0;
}

}  // namespace hearth::cli
