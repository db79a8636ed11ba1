// hearth run: one prompt through the chat template, the answer streamed to stdout as it is
// generated, metrics on stderr at the end (or one JSON record on stdout with --json).
#include <cstdio>

#include "core/json_writer.h"
#include "tools/commands.h"
#include "tools/loaded.h"
#include "tools/text.h"

namespace hearth::cli {

std::string metrics_json(const GenerationMetrics& m);  // cmd_generate.cpp

void print_metrics(const GenerationResult& r) {
  const auto& m = r.metrics;
  std::fprintf(
      stderr,
      "\n[%s] prompt %d tokens (%d computed) in %.0f ms (%.1f tok/s), first token %.0f ms, "
      "%d new tokens at %.2f ms/token (%.2f tok/s)\n",
      r.finish_reason.c_str(), m.prompt_tokens, m.prefill_tokens, m.prefill_ms,
      m.prefill_tokens_per_s, m.ttft_ms, m.new_tokens, m.ms_per_token, m.tokens_per_s);
}

int cmd_run(int argc, char** argv) {
  auto spec = kEngineOptions;
  auto so = sampling_options();
  spec.insert(spec.end(), so.begin(), so.end());
  spec.insert(spec.end(), {"--prompt=", "--system=", "--thinking", "--no-thinking",
                           "--hide-thinking", "--json"});
  Args args(argc, argv, spec);
  const std::string prompt = args.required("--prompt");
  Loaded l = load_engine(args);
  TextFrontEnd text = TextFrontEnd::load(l.model->dir());

  Json messages = Json::array();
  if (args.has("--system"))
    messages.as_array().push_back(
        Json(Json::Object{{"role", Json("system")}, {"content", Json(args.str("--system"))}}));
  messages.as_array().push_back(
      Json(Json::Object{{"role", Json("user")}, {"content", Json(prompt)}}));
  ChatOptions co;
  if (args.has("--thinking")) co.enable_thinking = true;
  if (args.has("--no-thinking")) co.enable_thinking = false;
  const std::vector<int32_t> ids = text.tokenizer.encode(text.chat.render(messages, co));

  GenerateOptions opt = generate_options(args, *l.model, /*model_defaults=*/true);
  if (!args.has("--max-new-tokens")) opt.max_new_tokens = 256;
  opt.stop_ids = text.stop_ids(opt.stop_ids);
  Session session(*l.engine);

  if (args.has("--json")) {
    GenerationResult r = session.generate(ids, opt);
    JsonWriter w;
    w.begin_object();
    w.field("text", text.tokenizer.decode(r.tokens, true));
    w.key("tokens").array(r.tokens);
    w.field("finish_reason", r.finish_reason);
    w.key("metrics").raw(metrics_json(r.metrics));
    w.key("manifest").raw(manifest_json(l, ids, opt));
    w.end_object();
    std::printf("%s\n", w.str().c_str());
    return 0;
  }
  AnswerPrinter printer(text, args.has("--hide-thinking"));
  GenerationResult r = session.generate(ids, opt, [&](int32_t id) {
    printer.token(id);
    return true;
  });
  printer.finish();
  std::printf("\n");
  print_metrics(r);
  return 0;
}

}  // namespace hearth::cli
