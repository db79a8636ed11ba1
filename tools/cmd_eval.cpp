// hearth eval: how far a (quantized) model is from a reference on the same text: perplexity of
// both, KL(reference || model) per position, top-1 agreement and bits per weight.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/json_writer.h"
#include "models/tokenizer.h"
#include "quant/eval.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/loaded.h"

namespace hearth::cli {

int cmd_eval(int argc, char** argv) {
  Args args(argc, argv,
            {"--model=", "--reference=", "--text=", "--ids-file=", "--ctx=", "--json",
             "--threads=", "--isa=", "--kv=", "--gemm="});
  const std::string mdir = args.required("--model"), rdir = args.required("--reference");
  if (args.has("--text") == args.has("--ids-file")) fail("give exactly one of --text, --ids-file");
  quant::EvalOptions o;
  o.ctx = args.integer("--ctx", 512);
  if (o.ctx < 2) fail("--ctx must be at least 2");
  // --kv is the model's cache; the reference's stays F32, and so does the model's without --kv,
  // so that a comparison measures the weights alone.
  args.set_default("--kv", "f32");
  o.backend = backend_options(args);

  std::vector<int32_t> ids;
  if (args.has("--text")) {
    const std::string path = args.required("--text");
    std::ifstream f(path, std::ios::binary);
    if (!f) fail(path, ": cannot read");
    std::stringstream ss;
    ss << f.rdbuf();
    ids = Tokenizer::load(rdir).encode(ss.str());
  } else {
    ids = quant::read_token_ids(args.required("--ids-file"));
  }
  auto model = Qwen3Model::load(mdir);
  auto ref = Qwen3Model::load(rdir);
  const quant::EvalReport r = quant::evaluate(*model, *ref, ids, o);
  if (args.has("--json")) {
    JsonWriter w;
    w.begin_object();
    w.field("model", mdir).field("reference", rdir);
    w.field("tokens", r.tokens).field("windows", r.windows).field("ctx", o.ctx);
    w.field("positions", r.positions);
    w.field("ppl_model", r.ppl_model).field("ppl_reference", r.ppl_ref);
    w.field("kl_mean", r.kl_mean).field("kl_p99", r.kl_p99).field("kl_max", r.kl_max);
    w.field("top1_agreement", r.top1);
    w.field("bits_per_weight", r.bpw_model).field("bits_per_weight_reference", r.bpw_ref);
    w.end_object();
    std::printf("%s\n", w.str().c_str());
  } else {
    std::printf(
        "tokens %d in %d windows of <= %d (%lld scored)\n"
        "perplexity  model %.4f  reference %.4f\n"
        "KL(ref||model) per token  mean %.6f  p99 %.6f  max %.6f nats\n"
        "top-1 agreement %.4f\n"
        "bits/weight  model %.3f  reference %.3f\n",
        r.tokens, r.windows, o.ctx, static_cast<long long>(r.positions), r.ppl_model, r.ppl_ref,
        r.kl_mean, r.kl_p99, r.kl_max, r.top1, r.bpw_model, r.bpw_ref);
  }
  return 0;
}

}  // namespace hearth::cli
