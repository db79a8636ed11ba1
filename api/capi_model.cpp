// The C API's model functions: loading with progress and cancellation, info, tokenization and
// chat templates.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "api/capi_internal.h"
#include "core/threadpool.h"

namespace fs = std::filesystem;

namespace hearth::capi {

namespace {

// Turns load steps into a monotonic fraction for the caller's callback, and a 0 return into a
// cancellation that unwinds (and so frees) whatever was loaded.
class Progress {
 public:
  Progress(const hearth_model_params& p, std::string path) : p_(p), path_(std::move(path)) {}

  void report(float fraction, const char* stage) {
    fraction = std::clamp(std::max(fraction, last_), 0.f, 1.f);
    last_ = fraction;
    if (p_.progress && p_.progress(fraction, stage, p_.progress_user_data) == 0)
      api_fail(HEARTH_ERR_CANCELLED, path_, ": loading was cancelled by the progress callback");
  }
  // Fixed steps: with prefault, reading the weights dominates, so the other steps get little of
  // the bar.
  void step(const char* stage) {
    static const struct {
      const char* stage;
      float lazy, prefault;
    } kSteps[] = {{"config", .10f, .02f}, {"checkpoint", .20f, .04f}, {"weights", .30f, .06f},
                  {"graph", .40f, .08f},  {"tokenizer", .60f, .10f},  {"backend", .95f, .97f},
                  {"done", 1.f, 1.f}};
    for (const auto& s : kSteps)
      if (std::strcmp(s.stage, stage) == 0) return report(p_.prefault ? s.prefault : s.lazy, stage);
    report(last_, stage);
  }
  // Prefault covers [0.10, 0.95] of the bar.
  void prefault(double done) { report(float(.10 + .85 * done), "prefault"); }

 private:
  const hearth_model_params& p_;
  std::string path_;
  float last_ = 0.f;
};

// Something is there (a symlink loop or a FIFO too: loading then says what is wrong with it).
bool file_exists(const fs::path& p) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(p, ec));
}

// Reads one byte per page of every weight file, so page faults happen during the load (with a
// moving progress bar) rather than during the first reply. Chunks keep the callback frequent.
void prefault_weights(const Checkpoint& ck, Progress& prog) {
  const size_t page = size_t(std::max(4096L, ::sysconf(_SC_PAGESIZE)));
  const size_t chunk = size_t(32) << 20;
  size_t total = 0, done = 0;
  for (const auto& s : ck.shards()) total += s->file().size();
  for (const auto& s : ck.shards()) {
    const uint8_t* base = s->file().data();
    const size_t size = s->file().size();
    for (size_t off = 0; off < size; off += chunk) {
      const size_t n = std::min(chunk, size - off);
      // Tell the kernel the whole chunk is wanted, so it reads ahead in large requests.
      const size_t aligned = off / page * page;
      (void)::madvise(const_cast<uint8_t*>(base + aligned), n + (off - aligned), MADV_WILLNEED);
      unsigned sum = 0;
      for (size_t i = 0; i < n; i += page)
        sum += static_cast<const volatile uint8_t*>(base)[off + i];
      // The loads must happen; feeding the sum to an asm barrier keeps them.
      asm volatile("" : : "r"(sum));
      done += n;
      prog.prefault(total ? double(done) / double(total) : 1.0);
    }
  }
}

// The architecture's parameters (embeddings counted once when tied); with active, only those a
// token runs through (top_k of a sparse layer's experts).
uint64_t count_params(const Qwen3Config& c, bool active = false) {
  const uint64_t h = uint64_t(c.hidden_size), hd = uint64_t(c.head_dim);
  const uint64_t q = uint64_t(c.num_attention_heads) * hd,
                 kv = uint64_t(c.num_key_value_heads) * hd;
  const uint64_t attn = h * q + 2 * h * kv + q * h  // q, k, v, o projections
                        + 2 * h + 2 * hd;           // input/post-attention norms, q/k norms
  const uint64_t dense_mlp = 3 * h * uint64_t(c.intermediate_size);  // gate, up, down
  const uint64_t expert = 3 * h * uint64_t(c.moe_intermediate_size);
  const uint64_t experts = uint64_t(active ? c.num_experts_per_tok : c.num_experts);
  uint64_t layers = 0;
  for (int i = 0; i < c.num_hidden_layers; ++i)
    layers +=
        attn + (c.sparse_layer(i) ? h * uint64_t(c.num_experts) + experts * expert : dense_mlp);
  const uint64_t embed = uint64_t(c.vocab_size) * h;
  return embed * (c.tie_word_embeddings ? 1 : 2) + h + layers;
}

DType kv_dtype(const hearth_kv_type& field) {
  // A C caller may store any int in an enum field, and loading an out-of-range value as the C++
  // enum type is undefined; read the int the field holds instead.
  const int t = enum_value(field);
  switch (t) {
    case HEARTH_KV_F32:
      return DType::F32;
    case HEARTH_KV_F16:
      return DType::F16;
    case HEARTH_KV_BF16:
      return DType::BF16;
    case HEARTH_KV_INT8:
      return DType::I8;
  }
  api_fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_model_params.kv_type ", t,
           " is not a hearth_kv_type");
}

}  // namespace

std::unique_ptr<Runner> ModelCore::make_runner() const {
  std::unique_ptr<Backend> backend;
  try {
    backend = create_backend(backend_name, backend_options);
  } catch (const hearth::Error& e) {
    throw ApiError(HEARTH_ERR_UNSUPPORTED, e.what());
  }
  const auto& c = model->config();
  // Without a KV budget the pool holds one whole context: as long as the backend has room for.
  const int positions =
      runner_options.kv_budget_bytes
          ? c.max_position_embeddings
          : fitting_positions(*backend, model->graph(), c.max_position_embeddings);
  return std::make_unique<Runner>(std::move(backend), model->graph(), c.vocab_size, positions,
                                  runner_options);
}

std::vector<int32_t> ModelCore::encode(const char* text, size_t len) const {
  if (len == HEARTH_STRLEN) len = std::strlen(text);
  return this->text->tokenizer.encode(std::string_view(text, len));
}

Json message_json(const std::string& role, const std::string& content) {
  return Json(Json::Object{{"role", Json(role)}, {"content", Json(content)}});
}

ChatOptions chat_options(const hearth_chat_params* params) {
  const hearth_chat_params p =
      read_struct("hearth_chat_params", params, hearth_chat_params_default(),
                  HEARTH_FIELD_END(hearth_chat_params, extra_json));
  ChatOptions o;
  o.add_generation_prompt = p.add_generation_prompt != 0;
  if (p.thinking != HEARTH_THINKING_DEFAULT) {
    HEARTH_CHECK_ARG(p.thinking == 0 || p.thinking == 1, "hearth_chat_params.thinking is ",
                     p.thinking, "; expected HEARTH_THINKING_DEFAULT, 0 or 1");
    o.enable_thinking = p.thinking == 1;
  }
  auto parse = [](const char* json, const char* field) {
    try {
      return Json::parse(json);
    } catch (const hearth::Error& e) {
      api_fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_chat_params.", field, ": ", e.what());
    }
  };
  if (p.tools_json) {
    o.tools = parse(p.tools_json, "tools_json");
    HEARTH_CHECK_ARG(o.tools.is_array() || o.tools.is_null(),
                     "hearth_chat_params.tools_json must be a JSON array");
  }
  if (p.extra_json) {
    o.extra = parse(p.extra_json, "extra_json");
    HEARTH_CHECK_ARG(o.extra.is_object() || o.extra.is_null(),
                     "hearth_chat_params.extra_json must be a JSON object");
  }
  return o;
}

}  // namespace hearth::capi

using namespace hearth;
using namespace hearth::capi;

extern "C" {

hearth_status hearth_model_load(const char* path, const hearth_model_params* params,
                                hearth_model** out_model) {
  if (out_model) *out_model = nullptr;
  return guard(HEARTH_ERR_MODEL, [&] {
    HEARTH_CHECK_ARG(out_model, "hearth_model_load: out_model is NULL");
    HEARTH_CHECK_ARG(path, "hearth_model_load: path is NULL");
    HEARTH_CHECK_ARG(*path, "hearth_model_load: path is empty");
    const hearth_model_params p =
        read_struct("hearth_model_params", params, hearth_model_params_default(),
                    HEARTH_FIELD_END(hearth_model_params, progress_user_data));
    // Hundreds of spinning workers on a few cores only thrash: more than 4 per CPU is refused.
    const int max_threads = 4 * int(std::max(1u, std::thread::hardware_concurrency()));
    HEARTH_CHECK_ARG(p.n_threads >= 0 && p.n_threads <= max_threads,
                     "hearth_model_params.n_threads is ", p.n_threads,
                     "; expected 0 (automatic) or up to ", max_threads,
                     " (4x this machine's CPUs)");
    HEARTH_CHECK_ARG(p.prefill_chunk >= 0, "hearth_model_params.prefill_chunk is ", p.prefill_chunk,
                     "; expected 0 (automatic) or a positive count");
    HEARTH_CHECK_ARG(p.kv_budget_mib >= 0, "hearth_model_params.kv_budget_mib is ", p.kv_budget_mib,
                     "; expected 0 (automatic) or a positive count of MiB");
    HEARTH_CHECK_ARG(p.device >= 0, "hearth_model_params.device is ", p.device,
                     "; expected a device index (0: the first)");
    const bool cache = p.hugepages && p.weight_cache_dir && *p.weight_cache_dir;
    if (cache) {
      std::error_code dir_ec;
      HEARTH_CHECK_ARG(fs::is_directory(p.weight_cache_dir, dir_ec),
                       "hearth_model_params.weight_cache_dir '", p.weight_cache_dir,
                       "' is not a folder");
    }

    const fs::path dir(path);
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
      if (!fs::exists(dir, ec))
        api_fail(HEARTH_ERR_NOT_FOUND, path, ": model folder does not exist or is not a folder");
      try {
        check_checkpoint_folder(path);  // says what it is instead (a GGUF file, ...)
      } catch (const hearth::Error& e) {
        api_fail(HEARTH_ERR_UNSUPPORTED, e.what());
      }
    }
    for (const char* f : {"config.json", "tokenizer.json"})
      if (!file_exists(dir / f))
        api_fail(HEARTH_ERR_NOT_FOUND, path, ": no ", f, " in the model folder");
    if (!file_exists(dir / "model.safetensors") &&
        !file_exists(dir / "model.safetensors.index.json"))
      api_fail(HEARTH_ERR_NOT_FOUND, path,
               ": no model.safetensors or model.safetensors.index.json in the model folder");

    Progress prog(p, path);
    prog.report(0.f, "start");
    auto core = std::make_shared<ModelCore>();
    core->model = Qwen3Model::load(path, [&](const char* stage) { prog.step(stage); });
    auto text = std::make_unique<TextFrontEnd>(TextFrontEnd{Tokenizer::load(path), {}, -1, -1});
    if (!text->tokenizer.chat_template().empty()) {
      text->chat = ChatTemplate(text->tokenizer.chat_template(), text->tokenizer.bos_token(),
                                text->tokenizer.eos_token());
      core->has_template = true;
    }
    text->think_open = text->tokenizer.token_id("<think>");
    text->think_close = text->tokenizer.token_id("</think>");
    core->text = std::move(text);
    prog.step("tokenizer");
    // A weight cache holds the copies: the checkpoint is read only where one has to be written.
    if (p.prefault && !cache) prefault_weights(core->model->checkpoint(), prog);

    core->backend_name = p.backend ? p.backend : "";
    core->backend_options.cpu.isa = p.isa ? p.isa : "";
    core->backend_options.kv_dtype = kv_dtype(p.kv_type);
    core->backend_options.device = p.device;
    // Huge pages: every session's backend shares one set of private copies of the matmul weights,
    // in the layouts its kernels read fastest, and KV caches in huge pages.
    if (p.hugepages) {
      core->backend_options.cpu.weight_copies = std::make_shared<WeightStore>();
      core->model->checkpoint().lend_mappings(*core->backend_options.cpu.weight_copies);
      if (cache)
        core->model->checkpoint().cache_weights(*core->backend_options.cpu.weight_copies,
                                                p.weight_cache_dir, p.isa ? p.isa : "");
      core->backend_options.cpu.kv_huge_pages = true;
    }
    // Resolving "automatic" here gives every session the same count, which is what lets sessions
    // reuse runners.
    core->backend_options.threads = p.n_threads > 0 ? p.n_threads : default_thread_count();
    core->runner_options.prefill_chunk = p.prefill_chunk > 0 ? p.prefill_chunk : 256;
    core->runner_options.kv_budget_bytes = size_t(p.kv_budget_mib) << 20;
    // The model's one runner and engine, shared by all its sessions.
    core->runner = core->make_runner();
    core->runner->prepare();  // the weight copies, made now rather than in the first reply
    if (cache) core->backend_options.cpu.weight_copies->commit_cache();
    core->engine = std::make_unique<Engine>(*core->runner);
    core->backend_desc = core->runner->backend().describe();
    core->dtype = core->model->weight_dtypes();
    core->n_params = count_params(core->model->config());
    core->n_active_params = count_params(core->model->config(), /*active=*/true);
    prog.step("backend");
    prog.step("done");
    *out_model = new hearth_model{std::move(core)};
    return HEARTH_OK;
  });
}

void hearth_model_free(hearth_model* model) {
  delete model;
}

hearth_status hearth_model_get_info(const hearth_model* model, hearth_model_info* info) {
  return guard(HEARTH_ERR_INTERNAL, [&] {
    HEARTH_CHECK_ARG(model, "hearth_model_get_info: model is NULL");
    const ModelCore& m = *model->core;
    const Qwen3Config& c = m.model->config();
    hearth_model_info v{};
    v.n_layers = c.num_hidden_layers;
    v.vocab_size = c.vocab_size;
    v.context_length = c.max_position_embeddings;
    v.hidden_size = c.hidden_size;
    v.n_heads = c.num_attention_heads;
    v.n_kv_heads = c.num_key_value_heads;
    v.head_dim = c.head_dim;
    v.n_params = m.n_params;
    v.dtype = m.dtype.c_str();
    v.backend = m.backend_desc.c_str();
    v.path = m.model->dir().c_str();
    v.has_chat_template = m.has_template;
    v.n_threads = m.backend_options.threads;
    v.random_weights = m.model->config().random_weights ? 1 : 0;
    v.n_experts = c.num_experts;
    v.n_experts_per_tok = c.num_experts_per_tok;
    v.n_active_params = m.n_active_params;
    // Callers built before random_weights and the experts were added get the fields they have.
    write_struct("hearth_model_info", info, v, HEARTH_FIELD_END(hearth_model_info, n_threads));
    return HEARTH_OK;
  });
}

hearth_status hearth_tokenize(const hearth_model* model, const char* text, size_t text_len,
                              int32_t** out_tokens, size_t* out_count) {
  if (out_tokens) *out_tokens = nullptr;
  if (out_count) *out_count = 0;
  return guard(HEARTH_ERR_INTERNAL, [&] {
    HEARTH_CHECK_ARG(model, "hearth_tokenize: model is NULL");
    HEARTH_CHECK_ARG(text || text_len == 0, "hearth_tokenize: text is NULL");
    HEARTH_CHECK_ARG(out_tokens && out_count, "hearth_tokenize: an output pointer is NULL");
    if (!text) return HEARTH_OK;
    const std::vector<int32_t> ids = model->core->encode(text, text_len);
    if (ids.empty()) return HEARTH_OK;
    auto* p = static_cast<int32_t*>(std::malloc(ids.size() * sizeof(int32_t)));
    if (!p) throw std::bad_alloc();
    std::memcpy(p, ids.data(), ids.size() * sizeof(int32_t));
    *out_tokens = p;
    *out_count = ids.size();
    return HEARTH_OK;
  });
}

hearth_status hearth_detokenize(const hearth_model* model, const int32_t* tokens, size_t count,
                                int skip_special, char** out_text, size_t* out_len) {
  if (out_text) *out_text = nullptr;
  if (out_len) *out_len = 0;
  return guard(HEARTH_ERR_INTERNAL, [&] {
    HEARTH_CHECK_ARG(model, "hearth_detokenize: model is NULL");
    HEARTH_CHECK_ARG(tokens || count == 0, "hearth_detokenize: tokens is NULL");
    HEARTH_CHECK_ARG(out_text, "hearth_detokenize: out_text is NULL");
    std::vector<int32_t> ids(tokens, tokens + count);
    const std::string s = model->core->text->tokenizer.decode(ids, skip_special != 0);
    *out_text = dup_string(s);
    if (out_len) *out_len = s.size();
    return HEARTH_OK;
  });
}

hearth_status hearth_apply_chat_template(const hearth_model* model, const hearth_message* messages,
                                         size_t n_messages, const hearth_chat_params* params,
                                         char** out_prompt) {
  if (out_prompt) *out_prompt = nullptr;
  return guard(HEARTH_ERR_MODEL, [&] {
    HEARTH_CHECK_ARG(model, "hearth_apply_chat_template: model is NULL");
    HEARTH_CHECK_ARG(messages || n_messages == 0, "hearth_apply_chat_template: messages is NULL");
    HEARTH_CHECK_ARG(out_prompt, "hearth_apply_chat_template: out_prompt is NULL");
    Json list = Json::array();
    for (size_t i = 0; i < n_messages; ++i) {
      HEARTH_CHECK_ARG(messages[i].role && messages[i].content,
                       "hearth_apply_chat_template: messages[", i, "] has a NULL role or content");
      list.push_back(message_json(messages[i].role, messages[i].content));
    }
    const ChatOptions opt = chat_options(params);
    if (!model->core->has_template)
      api_fail(HEARTH_ERR_UNSUPPORTED, model->core->model->dir(),
               ": the model has no chat template (tokenizer_config.json: chat_template)");
    *out_prompt = dup_string(model->core->text->chat.render(list, opt));
    return HEARTH_OK;
  });
}

hearth_status hearth_apply_chat_template_json(const hearth_model* model, const char* messages_json,
                                              const hearth_chat_params* params, char** out_prompt) {
  if (out_prompt) *out_prompt = nullptr;
  return guard(HEARTH_ERR_MODEL, [&] {
    HEARTH_CHECK_ARG(model, "hearth_apply_chat_template_json: model is NULL");
    HEARTH_CHECK_ARG(messages_json, "hearth_apply_chat_template_json: messages_json is NULL");
    HEARTH_CHECK_ARG(out_prompt, "hearth_apply_chat_template_json: out_prompt is NULL");
    Json list;
    try {
      list = Json::parse(messages_json);
    } catch (const hearth::Error& e) {
      api_fail(HEARTH_ERR_INVALID_ARGUMENT,
               "hearth_apply_chat_template_json: messages_json: ", e.what());
    }
    HEARTH_CHECK_ARG(list.is_array(),
                     "hearth_apply_chat_template_json: messages_json must be a JSON array");
    const ChatOptions opt = chat_options(params);
    if (!model->core->has_template)
      api_fail(HEARTH_ERR_UNSUPPORTED, model->core->model->dir(),
               ": the model has no chat template (tokenizer_config.json: chat_template)");
    *out_prompt = dup_string(model->core->text->chat.render(list, opt));
    return HEARTH_OK;
  });
}

hearth_status hearth_model_sampling_defaults(const hearth_model* model,
                                             hearth_generate_params* params) {
  return guard(HEARTH_ERR_INTERNAL, [&] {
    HEARTH_CHECK_ARG(model, "hearth_model_sampling_defaults: model is NULL");
    HEARTH_CHECK_ARG(params, "hearth_model_sampling_defaults: params is NULL");
    check_struct_size("hearth_generate_params", params, params->struct_size,
                      HEARTH_FIELD_END(hearth_generate_params, user_data),
                      sizeof(hearth_generate_params));
    // generation_config.json's values apply only when it asks for sampling, as in transformers.
    const GenerationConfig& gc = model->core->model->generation_config();
    const bool sample = gc.do_sample.value_or(false);
    params->temperature = float(sample ? gc.temperature.value_or(1.0) : 0.0);
    params->top_k = sample ? gc.top_k.value_or(0) : 0;
    params->top_p = float(sample ? gc.top_p.value_or(1.0) : 1.0);
    params->min_p = float(sample ? gc.min_p.value_or(0.0) : 0.0);
    params->repetition_penalty = float(gc.repetition_penalty.value_or(1.0));
    return HEARTH_OK;
  });
}

}  // extern "C"
