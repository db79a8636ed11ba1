// The C API's sessions: generation with streaming, stop strings and cancellation, and multi-turn
// chat on a cache the session owns.
#include <algorithm>
#include <limits>

#include "api/capi_internal.h"
#include "models/stop_filter.h"

namespace hearth::capi {

namespace {

// Marks a session in use for the duration of a call; a concurrent second call gets
// HEARTH_ERR_BUSY instead of a corrupted cache.
class BusyGuard {
 public:
  BusyGuard(const hearth_session* s, const char* fn) : s_(s) {
    bool expected = false;
    if (!s_->busy.compare_exchange_strong(expected, true))
      api_fail(HEARTH_ERR_BUSY, fn, ": the session is in use by another thread");
  }
  ~BusyGuard() { s_->busy.store(false); }
  BusyGuard(const BusyGuard&) = delete;
  BusyGuard& operator=(const BusyGuard&) = delete;

 private:
  const hearth_session* s_;
};

hearth_generate_params read_generate_params(const hearth_generate_params* params) {
  hearth_generate_params p =
      read_struct("hearth_generate_params", params, hearth_generate_params_default(),
                  HEARTH_FIELD_END(hearth_generate_params, user_data));
  HEARTH_CHECK_ARG(p.max_new_tokens >= 0, "hearth_generate_params.max_new_tokens is ",
                   p.max_new_tokens, "; it must not be negative");
  HEARTH_CHECK_ARG(p.stop_ids || p.n_stop_ids == 0,
                   "hearth_generate_params.stop_ids is NULL but n_stop_ids is ", p.n_stop_ids);
  HEARTH_CHECK_ARG(p.stop_strings || p.n_stop_strings == 0,
                   "hearth_generate_params.stop_strings is NULL but n_stop_strings is ",
                   p.n_stop_strings);
  for (size_t i = 0; i < p.n_stop_strings; ++i)
    HEARTH_CHECK_ARG(p.stop_strings[i] && *p.stop_strings[i],
                     "hearth_generate_params.stop_strings[", i, "] is NULL or empty");
  return p;
}

// The generation behind hearth_session_generate*, _chat: prompt ids in, text out (and the
// generated ids in *tokens when given), metrics kept.
std::string generate(hearth_session* s, const std::vector<int32_t>& prompt,
                     const hearth_generate_params& p, std::vector<int32_t>* tokens = nullptr) {
  ModelCore& m = *s->core;
  const int vocab = m.model->config().vocab_size;
  HEARTH_CHECK_ARG(!prompt.empty(), "the prompt is empty");
  for (size_t i = 0; i < prompt.size(); ++i)
    HEARTH_CHECK_ARG(prompt[i] >= 0 && prompt[i] < vocab, "prompt token ", i, " is ", prompt[i],
                     ", outside the vocabulary [0, ", vocab, ")");
  if (prompt.size() >= size_t(s->context_length))
    api_fail(HEARTH_ERR_CONTEXT_FULL, "the prompt has ", prompt.size(),
             " tokens; the session's context length is ", s->context_length);

  GenerateOptions opt;
  opt.max_new_tokens = std::min(p.max_new_tokens, s->context_length - int(prompt.size()));
  SamplingParams& sp = opt.sampling;
  sp.temperature = p.temperature;
  sp.top_k = p.top_k;
  sp.top_p = p.top_p;
  sp.min_p = p.min_p;
  sp.repetition_penalty = p.repetition_penalty;
  sp.presence_penalty = p.presence_penalty;
  sp.frequency_penalty = p.frequency_penalty;
  sp.seed = p.seed;
  try {
    Sampler check(sp, vocab);  // validates every field, naming the one at fault
  } catch (const hearth::Error& e) {
    api_fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_generate_params: ", e.what());
  }
  if (!p.ignore_eos) opt.stop_ids = m.text->stop_ids(m.model->generation_config().eos_token_ids);
  opt.stop_ids.insert(opt.stop_ids.end(), p.stop_ids, p.stop_ids + p.n_stop_ids);

  std::vector<std::string> stops;
  for (size_t i = 0; i < p.n_stop_strings; ++i) stops.emplace_back(p.stop_strings[i]);
  StopFilter filter(std::move(stops));
  StreamDecoder decoder(m.text->tokenizer, /*skip_special_tokens=*/true);
  std::string text;
  bool callback_stopped = false;
  auto on_token = [&](int32_t id) {
    const std::string piece = filter.push(decoder.push(id));
    text += piece;
    if (p.on_text && p.on_text(piece.data(), piece.size(), id, p.user_data) == 0) {
      callback_stopped = true;
      return false;
    }
    return !filter.matched();
  };

  // A cancel only applies to the generation running when it is requested.
  s->cancel.store(false);
  GenerationResult r;
  try {
    r = s->session->generate(prompt, opt, on_token, &s->cancel);
  } catch (const std::bad_alloc&) {
    api_fail(HEARTH_ERR_OUT_OF_MEMORY, "out of memory while generating (the session's cache was ",
             "dropped; the next call recomputes the prompt)");
  }
  if (!filter.matched()) {
    // The decoder's incomplete UTF-8 tail (as U+FFFD) and whatever the filter held back.
    std::string rest = filter.push(decoder.flush());
    rest += filter.finish();
    if (!rest.empty()) {
      text += rest;
      if (p.on_text) (void)p.on_text(rest.data(), rest.size(), HEARTH_TOKEN_NONE, p.user_data);
    }
  }

  hearth_metrics& mt = s->metrics;
  mt = hearth_metrics{};
  mt.struct_size = sizeof mt;
  if (filter.matched())
    mt.finish_reason = HEARTH_FINISH_STOP_STRING;
  else if (callback_stopped)
    mt.finish_reason = HEARTH_FINISH_CALLBACK;
  else if (r.finish_reason == "cancelled")
    mt.finish_reason = HEARTH_FINISH_CANCELLED;
  else if (r.finish_reason == "length")
    mt.finish_reason = HEARTH_FINISH_LENGTH;
  else
    mt.finish_reason = HEARTH_FINISH_STOP_TOKEN;
  const GenerationMetrics& g = r.metrics;
  mt.prompt_tokens = g.prompt_tokens;
  mt.prefill_tokens = g.prefill_tokens;
  mt.new_tokens = g.new_tokens;
  mt.prefill_ms = g.prefill_ms;
  mt.ttft_ms = g.ttft_ms;
  mt.decode_ms = g.decode_ms;
  mt.ms_per_token = g.ms_per_token;
  mt.tokens_per_s = g.tokens_per_s;
  mt.prefill_tokens_per_s = g.prefill_tokens_per_s;
  mt.cached_tokens = int32_t(s->session->cached_tokens().size());
  mt.kv_bytes = s->session->kv_bytes();
  if (tokens) *tokens = std::move(r.tokens);
  return text;
}

void give_text(const std::string& text, char** out) {
  if (out) *out = dup_string(text);
}

}  // namespace

}  // namespace hearth::capi

using namespace hearth;
using namespace hearth::capi;

extern "C" {

hearth_status hearth_session_new(hearth_model* model, const hearth_session_params* params,
                                 hearth_session** out_session) {
  if (out_session) *out_session = nullptr;
  return guard(HEARTH_ERR_INTERNAL, [&] {
    HEARTH_CHECK_ARG(model, "hearth_session_new: model is NULL");
    HEARTH_CHECK_ARG(out_session, "hearth_session_new: out_session is NULL");
    const hearth_session_params p =
        read_struct("hearth_session_params", params, hearth_session_params_default(),
                    HEARTH_FIELD_END(hearth_session_params, system_prompt));
    // The model's context, or less where the backend's memory holds less (fitting_positions).
    const int max_ctx = model->core->runner->max_positions();
    HEARTH_CHECK_ARG(p.n_threads >= 0 && p.n_threads <= 4096, "hearth_session_params.n_threads is ",
                     p.n_threads, "; expected 0 (the model's) or a positive count");
    HEARTH_CHECK_ARG(p.context_length >= 0 && p.context_length <= max_ctx,
                     "hearth_session_params.context_length is ", p.context_length,
                     "; expected 0 (the model's) up to ", max_ctx, " (the model's, or what the ",
                     model->core->runner->backend().name(), " backend's memory holds)");
    auto s = std::make_unique<hearth_session>();
    s->core = model->core;
    s->context_length = p.context_length > 0 ? p.context_length : max_ctx;
    s->conversation = std::make_unique<Conversation>(
        *s->core->text,
        p.system_prompt ? std::optional<std::string>(p.system_prompt) : std::nullopt);
    // n_threads is the model's: all sessions run on the model's one thread pool.
    s->session = std::make_unique<Session>(*s->core->engine);
    s->metrics.struct_size = sizeof s->metrics;
    *out_session = s.release();
    return HEARTH_OK;
  });
}

void hearth_session_free(hearth_session* session) {
  if (!session) return;
  delete session;
}

hearth_status hearth_session_reset(hearth_session* session) {
  return guard(HEARTH_ERR_INTERNAL, [&] {
    HEARTH_CHECK_ARG(session, "hearth_session_reset: session is NULL");
    BusyGuard busy(session, "hearth_session_reset");
    session->session->reset();
    session->conversation->reset();
    // The metrics describe the last generation, but the cache they count is gone now.
    session->metrics.cached_tokens = 0;
    session->metrics.kv_bytes = 0;
    return HEARTH_OK;
  });
}

hearth_status hearth_session_cancel(hearth_session* session) {
  if (!session) {
    set_last_error("hearth_session_cancel: session is NULL");
    return HEARTH_ERR_INVALID_ARGUMENT;
  }
  session->cancel.store(true);
  clear_last_error();
  return HEARTH_OK;
}

hearth_status hearth_session_generate(hearth_session* session, const char* prompt,
                                      const hearth_generate_params* params, char** out_text) {
  if (out_text) *out_text = nullptr;
  return guard(HEARTH_ERR_INTERNAL, [&] {
    HEARTH_CHECK_ARG(session, "hearth_session_generate: session is NULL");
    HEARTH_CHECK_ARG(prompt, "hearth_session_generate: prompt is NULL");
    BusyGuard busy(session, "hearth_session_generate");
    const hearth_generate_params p = read_generate_params(params);
    const std::vector<int32_t> ids = session->core->encode(prompt, HEARTH_STRLEN);
    give_text(generate(session, ids, p), out_text);
    return HEARTH_OK;
  });
}

hearth_status hearth_session_generate_tokens(hearth_session* session, const int32_t* prompt,
                                             size_t n_prompt, const hearth_generate_params* params,
                                             char** out_text) {
  if (out_text) *out_text = nullptr;
  return guard(HEARTH_ERR_INTERNAL, [&] {
    HEARTH_CHECK_ARG(session, "hearth_session_generate_tokens: session is NULL");
    HEARTH_CHECK_ARG(prompt || n_prompt == 0, "hearth_session_generate_tokens: prompt is NULL");
    BusyGuard busy(session, "hearth_session_generate_tokens");
    const hearth_generate_params p = read_generate_params(params);
    std::vector<int32_t> ids(prompt, prompt + n_prompt);
    give_text(generate(session, ids, p), out_text);
    return HEARTH_OK;
  });
}

hearth_status hearth_session_chat(hearth_session* session, const char* user_text,
                                  const hearth_chat_params* chat,
                                  const hearth_generate_params* params, char** out_reply) {
  if (out_reply) *out_reply = nullptr;
  return guard(HEARTH_ERR_INTERNAL, [&] {
    HEARTH_CHECK_ARG(session, "hearth_session_chat: session is NULL");
    HEARTH_CHECK_ARG(user_text, "hearth_session_chat: user_text is NULL");
    BusyGuard busy(session, "hearth_session_chat");
    const hearth_generate_params p = read_generate_params(params);
    const ChatOptions opt = chat_options(chat);
    ModelCore& m = *session->core;
    if (!m.has_template)
      api_fail(HEARTH_ERR_UNSUPPORTED, m.model->dir(),
               ": the model has no chat template (tokenizer_config.json: chat_template)");
    // Room for the reply before old turns must go: what it asks for, at most a quarter of the
    // context.
    const int reserve = std::min(p.max_new_tokens, session->context_length / 4);
    Conversation::Turn turn;
    try {
      turn = session->conversation->prepare(user_text, opt, session->context_length, reserve);
    } catch (const ContextFull& e) {
      api_fail(HEARTH_ERR_CONTEXT_FULL, e.what());
    } catch (const hearth::Error& e) {
      api_fail(HEARTH_ERR_MODEL, "chat template: ", e.what());
    }
    std::vector<int32_t> tokens;
    const std::string reply = generate(session, turn.prompt, p, &tokens);
    session->conversation->commit(turn, tokens, reply);
    session->metrics.dropped_messages = turn.dropped_messages;
    give_text(reply, out_reply);
    return HEARTH_OK;
  });
}

hearth_status hearth_session_add_message(hearth_session* session, const char* role,
                                         const char* content) {
  return guard(HEARTH_ERR_INTERNAL, [&] {
    HEARTH_CHECK_ARG(session, "hearth_session_add_message: session is NULL");
    HEARTH_CHECK_ARG(role && *role, "hearth_session_add_message: role is NULL or empty");
    HEARTH_CHECK_ARG(content, "hearth_session_add_message: content is NULL");
    BusyGuard busy(session, "hearth_session_add_message");
    session->conversation->add(role, content);
    return HEARTH_OK;
  });
}

hearth_status hearth_session_message_count(const hearth_session* session, size_t* out_count) {
  if (out_count) *out_count = 0;
  return guard(HEARTH_ERR_INTERNAL, [&] {
    HEARTH_CHECK_ARG(session, "hearth_session_message_count: session is NULL");
    HEARTH_CHECK_ARG(out_count, "hearth_session_message_count: out_count is NULL");
    BusyGuard busy(session, "hearth_session_message_count");
    *out_count = session->conversation->messages().size();
    return HEARTH_OK;
  });
}

hearth_status hearth_session_get_message(const hearth_session* session, size_t index,
                                         hearth_message* out_message) {
  if (out_message) *out_message = hearth_message{nullptr, nullptr};
  return guard(HEARTH_ERR_INTERNAL, [&] {
    HEARTH_CHECK_ARG(session, "hearth_session_get_message: session is NULL");
    HEARTH_CHECK_ARG(out_message, "hearth_session_get_message: out_message is NULL");
    BusyGuard busy(session, "hearth_session_get_message");
    const Json& messages = session->conversation->messages();
    HEARTH_CHECK_ARG(index < messages.size(), "hearth_session_get_message: index ", index,
                     " is out of range (", messages.size(), " messages)");
    const Json& msg = messages.at(index);
    out_message->role = msg.at("role").as_string().c_str();
    out_message->content = msg.at("content").as_string().c_str();
    return HEARTH_OK;
  });
}

hearth_status hearth_session_get_metrics(const hearth_session* session,
                                         hearth_metrics* out_metrics) {
  return guard(HEARTH_ERR_INTERNAL, [&] {
    HEARTH_CHECK_ARG(session, "hearth_session_get_metrics: session is NULL");
    BusyGuard busy(session, "hearth_session_get_metrics");
    // Callers built before dropped_messages was added get the fields they have.
    write_struct("hearth_metrics", out_metrics, session->metrics,
                 HEARTH_FIELD_END(hearth_metrics, kv_bytes));
    return HEARTH_OK;
  });
}

}  // extern "C"
