#include "tools/serve_run.h"

#include <chrono>
#include <random>

#include "models/stop_filter.h"

namespace hearth::serve {

std::string random_id(const char* prefix) {
  static constexpr char kAlnum[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  std::random_device rd;
  std::string id = prefix;
  for (int i = 0; i < 24; ++i) id += kAlnum[rd() % (sizeof(kAlnum) - 1)];
  return id;
}

namespace {

// Token ids in, deltas out, in the order the stages apply.
class ReplyPipeline {
 public:
  ReplyPipeline(const TextFrontEnd& text, const ApiRequest& req)
      : dec_(text.tokenizer, /*skip_special_tokens=*/true),
        stop_(req.stop),
        chat_(req.chat),
        parser_({/*reasoning=*/true, req.starts_in_reasoning, req.tools}) {}

  // False once a stop string has ended the reply.
  bool token(int32_t id, std::vector<ReplyDelta>& out) {
    feed(stop_.push(dec_.push(id)), out);
    return !stop_.matched();
  }
  void finish(std::vector<ReplyDelta>& out) {
    feed(stop_.push(dec_.flush()), out);
    feed(stop_.finish(), out);
    if (chat_) parser_.finish(out);
  }
  bool stopped() const { return stop_.matched(); }
  int tool_calls() const { return parser_.tool_calls(); }

 private:
  void feed(const std::string& s, std::vector<ReplyDelta>& out) {
    if (s.empty()) return;
    if (chat_)
      parser_.push(s, out);
    else
      out.push_back({ReplyDelta::Kind::Content, s, {}});
  }
  StreamDecoder dec_;
  StopFilter stop_;
  bool chat_;
  ReplyParser parser_;
};

}  // namespace

RunOutcome run_request(Engine& engine, const TextFrontEnd& text, const ApiRequest& req,
                       const std::vector<int32_t>& prompt,
                       const std::function<bool(std::vector<ReplyDelta>&)>& on_deltas,
                       const std::atomic<bool>* cancel) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto ms = [&] { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); };
  RunOutcome o;
  ReplyPipeline pipe(text, req);
  std::vector<ReplyDelta> deltas;
  auto deliver = [&] {
    for (ReplyDelta& d : deltas)
      if (d.kind == ReplyDelta::Kind::ToolCall) d.call.id = random_id("call_");
    const bool ok = deltas.empty() || on_deltas(deltas);
    deltas.clear();
    if (!ok) o.client_gone = true;
    return ok;
  };
  o.result = engine.generate(
      prompt, req.gen,
      [&](int32_t id) {
        if (o.first_token_ms < 0) o.first_token_ms = ms();
        o.last_token_ms = ms();
        const bool go_on = pipe.token(id, deltas);
        return deliver() && go_on;
      },
      cancel);
  if (!o.client_gone) {
    pipe.finish(deltas);
    deliver();
  }
  const std::string& r = o.result.finish_reason;
  if (o.client_gone || r == "cancelled")
    o.finish_reason = "cancelled";
  else if (pipe.stopped())
    o.finish_reason = "stop";
  else
    o.finish_reason = r;
  if (o.finish_reason == "stop" && pipe.tool_calls() > 0) o.finish_reason = "tool_calls";
  return o;
}

}  // namespace hearth::serve
