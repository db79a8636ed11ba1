// hearth generate: token ids in, token ids out, one JSON record with metrics and the manifest.
#include <cstdio>

#include "core/json_writer.h"
#include "tools/commands.h"
#include "tools/loaded.h"

namespace hearth::cli {

std::string metrics_json(const GenerationMetrics& m) {
  JsonWriter w;
  w.begin_object();
  w.field("prompt_tokens", m.prompt_tokens).field("prefill_tokens", m.prefill_tokens);
  w.field("new_tokens", m.new_tokens);
  w.field("prefill_ms", m.prefill_ms).field("time_to_first_token_ms", m.ttft_ms);
  w.field("decode_ms", m.decode_ms).field("ms_per_output_token", m.ms_per_token);
  w.field("tokens_per_s", m.tokens_per_s).field("prefill_tokens_per_s", m.prefill_tokens_per_s);
  w.end_object();
  return w.str();
}

int cmd_generate(int argc, char** argv) {
  auto spec = kEngineOptions;
  auto so = sampling_options();
  spec.insert(spec.end(), so.begin(), so.end());
  spec.insert(spec.end(), {"--ids=", "--json"});
  Args args(argc, argv, spec);
  const std::vector<int32_t> ids = args.int_list("--ids");
  Loaded l = load_engine(args);
  GenerateOptions opt = generate_options(args, *l.model, /*model_defaults=*/false);
  Session session(*l.engine);
  GenerationResult res = session.generate(ids, opt);
  if (args.has("--json")) {
    JsonWriter w;
    w.begin_object();
    w.key("tokens").array(res.tokens);
    w.field("finish_reason", res.finish_reason);
    w.key("metrics").raw(metrics_json(res.metrics));
    w.key("manifest").raw(manifest_json(l, ids, opt));
    w.end_object();
    std::printf("%s\n", w.str().c_str());
  } else {
    for (size_t i = 0; i < res.tokens.size(); ++i) std::printf(i ? ",%d" : "%d", res.tokens[i]);
    std::printf("\n");
    std::fprintf(stderr, "finish: %s, %d prompt tokens, %d new, ttft %.1f ms, %.2f ms/token\n",
                 res.finish_reason.c_str(), res.metrics.prompt_tokens, res.metrics.new_tokens,
                 res.metrics.ttft_ms, res.metrics.ms_per_token);
  }
  return 0;
}

}  // namespace hearth::cli
