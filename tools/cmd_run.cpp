// hearth run: one prompt through the chat template, the answer streamed to stdout as it is
// generated, metrics on stderr at the end (or one JSON record on stdout with --json). Ctrl-C stops
// the answer: what came so far stays, then the metrics line, and exit status 130.
#include <cstdio>

#include "core/error.h"
#include "core/json_writer.h"
#include "tools/commands.h"
#include "tools/loaded.h"
#include "tools/text.h"

namespace hearth::cli {

std::string metrics_json(const GenerationMetrics& m);  // cmd_generate.cpp

// The decode rate also as the memory read rate it took (weights and KV per token), the figure a
// machine's bandwidth bounds.
void print_metrics(const Loaded& l, const GenerationResult& r) {
  const auto& m = r.metrics;
  const double gbs =
      decode_bytes_per_token(l, m.prompt_tokens, m.new_tokens) * m.tokens_per_s / 1e9;
  std::fprintf(
      stderr,
      "\n[%s] prompt %d tokens (%d computed) in %.0f ms (%.1f tok/s), first token %.0f ms, "
      "%d new tokens at %.2f ms/token (%.2f tok/s, reading %.1f GB/s)\n",
      r.finish_reason.c_str(), m.prompt_tokens, m.prefill_tokens, m.prefill_ms,
      m.prefill_tokens_per_s, m.ttft_ms, m.new_tokens, m.ms_per_token, m.tokens_per_s, gbs);
}

namespace {

constexpr int kExitInterrupted = 130;  // 128 + SIGINT, as a shell reports a Ctrl-C

std::vector<std::string> run_spec() {
  auto spec = kEngineOptions;
  auto so = sampling_options();
  spec.insert(spec.end(), so.begin(), so.end());
  spec.insert(spec.end(), {"PROMPT", "--prompt=", "--prompt-file=", "--system=", "--system-file=",
                           "--thinking", "--no-thinking", "--hide-thinking", "--stop=*", "--json"});
  return spec;
}

// The answer's limit: what the user asked, else a default that leaves thinking room to finish
// (see `hearth run --help`), clipped to what the context leaves after the prompt.
int answer_limit(const Args& args, const Loaded& l, int prompt_tokens, bool thinking) {
  const int ctx = context_positions(l);
  const int room = ctx - prompt_tokens;
  if (room <= 0)
    fail("the prompt has ", prompt_tokens, " tokens; the context holds ", ctx,
         " (--ctx, at most the model's max_position_embeddings)");
  const int want = args.integer("--max-new-tokens", default_answer_tokens(thinking));
  if (want > room)
    std::fprintf(stderr,
                 "note: the answer is limited to %d tokens, what the context of %d leaves "
                 "after the %d-token prompt\n",
                 room, ctx, prompt_tokens);
  return std::min(want, room);
}

void print_json(const Loaded& l, const TextFrontEnd& text, const std::vector<int32_t>& ids,
                const GenerateOptions& opt, const GenerationResult& r, const std::string& reply,
                const std::string& finish) {
  const SplitReply sr = split_reasoning(reply);
  JsonWriter w;
  w.begin_object();
  w.field("text", sr.content);
  w.field("reasoning", sr.reasoning);
  w.key("tokens").array(r.tokens);
  w.field("finish_reason", finish);
  w.key("metrics").raw(metrics_json(r.metrics));
  w.key("manifest").raw(manifest_json(l, ids, opt));
  w.end_object();
  write_stdout(w.str() + "\n");
}

}  // namespace

int cmd_run(int argc, char** argv) {
  Args args(argc, argv, run_spec());
  const std::string prompt = read_prompt(args);
  const std::optional<std::string> system = read_system_prompt(args);
  ChatOptions co;
  co.enable_thinking = thinking_flag(args);
  TextFrontEnd text = load_text(args);
  Loaded l = load_engine(args);
  note_random_weights(*l.model);

  Json messages = Json::array();
  if (system)
    messages.push_back(Json(Json::Object{{"role", Json("system")}, {"content", Json(*system)}}));
  messages.push_back(Json(Json::Object{{"role", Json("user")}, {"content", Json(prompt)}}));
  const std::vector<int32_t> ids = text.tokenizer.encode(text.chat.render(messages, co));

  GenerateOptions opt = generate_options(args, *l.model, /*model_defaults=*/true);
  opt.max_new_tokens = answer_limit(args, l, int(ids.size()), co.enable_thinking.value_or(true));
  opt.stop_ids = text.stop_ids(opt.stop_ids);
  Session session(*l.engine);
  std::atomic<bool>& interrupted = catch_ctrl_c();

  const bool json = args.has("--json");
  FILE* sink = json ? nullptr : stdout;
  AnswerPrinter printer(text, args.has("--hide-thinking"), args.all("--stop"), sink);
  GenerationResult r = session.generate(
      ids, opt, [&](int32_t id) { return printer.token(id); }, &interrupted);
  printer.finish();
  const std::string finish = printer.stopped_by_string() ? "stop" : r.finish_reason;
  if (json) {
    print_json(l, text, ids, opt, r, printer.answer(), finish);
  } else {
    write_stdout("\n");
    r.finish_reason = finish;
    print_metrics(l, r);
  }
  return r.finish_reason == "cancelled" ? kExitInterrupted : 0;
}

}  // namespace hearth::cli
