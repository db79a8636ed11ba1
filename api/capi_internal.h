// What the C API's opaque handles hold, and the error plumbing every entry point shares: each
// exported function runs its body inside guard(), which turns every C++ exception into a status
// code and a thread-local message, so no exception crosses the C boundary.
#pragma once
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include "core/engine.h"
#include "core/error.h"
#include "core/runner.h"
#include "core/session.h"
#include "hearth.h"
#include "models/json_value.h"
#include "models/qwen3_model.h"
#include "models/conversation.h"
#include "models/text_frontend.h"

namespace hearth::capi {

// An error with the status the caller should see.
class ApiError : public std::runtime_error {
 public:
  ApiError(hearth_status s, const std::string& msg) : std::runtime_error(msg), status(s) {}
  hearth_status status;
};

template <typename... Args>
[[noreturn]] void api_fail(hearth_status s, const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  throw ApiError(s, os.str());
}

void set_last_error(const char* msg) noexcept;
void clear_last_error() noexcept;

// Runs f (returning hearth_status) and maps exceptions: ApiError to its status, bad_alloc to
// HEARTH_ERR_OUT_OF_MEMORY, hearth::Error to `engine_status` (what a failure of the engine means
// for this call), anything else to HEARTH_ERR_INTERNAL.
template <typename F>
hearth_status guard(hearth_status engine_status, F&& f) noexcept {
  try {
    hearth_status s = f();
    if (s == HEARTH_OK) clear_last_error();
    return s;
  } catch (const ApiError& e) {
    set_last_error(e.what());
    return e.status;
  } catch (const std::bad_alloc&) {
    set_last_error("out of memory");
    return HEARTH_ERR_OUT_OF_MEMORY;
  } catch (const hearth::Error& e) {
    set_last_error(e.what());
    return engine_status;
  } catch (const std::exception& e) {
    set_last_error(e.what());
    return HEARTH_ERR_INTERNAL;
  } catch (...) {
    set_last_error("unknown error");
    return HEARTH_ERR_INTERNAL;
  }
}

#define HEARTH_CHECK_ARG(cond, ...)                                                  \
  do {                                                                               \
    if (!(cond)) ::hearth::capi::api_fail(HEARTH_ERR_INVALID_ARGUMENT, __VA_ARGS__); \
  } while (0)

// struct_size handling (see "Conventions" in hearth.h). `min_size` is where the struct ended in
// the first release; it stays fixed when fields are appended.
void check_struct_size(const char* type, const void* p, size_t struct_size, size_t min_size,
                       size_t known_size);

// An input struct: defaults, overwritten by what the caller's (possibly older or newer) struct
// holds.
template <typename T>
T read_struct(const char* type, const T* in, const T& defaults, size_t min_size) {
  T out = defaults;
  if (!in) return out;
  check_struct_size(type, in, in->struct_size, min_size, sizeof(T));
  std::memcpy(&out, in, std::min(in->struct_size, sizeof(T)));
  out.struct_size = sizeof(T);
  return out;
}

// An output struct: fills as much of the caller's struct as both sides know, zeroes the rest.
template <typename T>
void write_struct(const char* type, T* out, T value, size_t min_size) {
  HEARTH_CHECK_ARG(out, type, " pointer is NULL");
  const size_t n = out->struct_size;
  if (n < min_size)
    api_fail(HEARTH_ERR_INVALID_ARGUMENT, type, ".struct_size is ", n, ", expected sizeof(", type,
             ") = ", sizeof(T), " (set it before the call)");
  value.struct_size = n;
  std::memcpy(out, &value, std::min(n, sizeof(T)));
  if (n > sizeof(T)) std::memset(reinterpret_cast<char*>(out) + sizeof(T), 0, n - sizeof(T));
}

// Fills the caller's struct with defaults, as many bytes as the caller's struct has.
template <typename T>
hearth_status init_struct(const char* type, T* p, size_t struct_size, T defaults, size_t min_size) {
  return guard(HEARTH_ERR_INTERNAL, [&] {
    HEARTH_CHECK_ARG(p, type, " pointer is NULL");
    if (struct_size < min_size)
      api_fail(HEARTH_ERR_INVALID_ARGUMENT, type, " of ", struct_size,
               " bytes is smaller than any version of it (", min_size, ")");
    defaults.struct_size = struct_size;
    std::memcpy(p, &defaults, std::min(struct_size, sizeof(T)));
    if (struct_size > sizeof(T))
      std::memset(reinterpret_cast<char*>(p) + sizeof(T), 0, struct_size - sizeof(T));
    return HEARTH_OK;
  });
}

#define HEARTH_FIELD_END(T, f) (offsetof(T, f) + sizeof(((T*)nullptr)->f))

// The int a C enum object holds, read without loading it as the C++ enum type (undefined for
// values outside the enumerators' range, which a C caller can store).
template <typename E>
int enum_value(const E& e) {
  static_assert(sizeof(E) == sizeof(int), "C enums are int-sized on supported ABIs");
  int v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

// Copies into malloc'd memory that hearth_free releases.
char* dup_string(const std::string& s);

// The shared part of a model: the weights, tokenizer and template, and idle runners. Sessions hold
// a shared_ptr to it, so it outlives hearth_model_free while sessions remain.
struct ModelCore {
  std::unique_ptr<Qwen3Model> model;
  std::unique_ptr<TextFrontEnd> text;
  bool has_template = false;
  BackendOptions backend_options;
  std::string backend_name;
  RunnerOptions runner_options;
  std::string dtype, backend_desc;
  uint64_t n_params = 0, n_active_params = 0;

  // The model's one runner (backend, thread pool, KV pool) and the engine every session generates
  // through: sessions running at once share its steps. Declared last so they are destroyed before
  // the graph the runner points into.
  std::unique_ptr<Runner> runner;
  std::unique_ptr<Engine> engine;

  std::unique_ptr<Runner> make_runner() const;
  std::vector<int32_t> encode(const char* text, size_t len) const;
};

// Builds a message object as the chat template expects it.
Json message_json(const std::string& role, const std::string& content);
// Parses the chat options of a hearth_chat_params.
ChatOptions chat_options(const hearth_chat_params* params);

}  // namespace hearth::capi

struct hearth_model {
  std::shared_ptr<hearth::capi::ModelCore> core;
};

struct hearth_session {
  std::shared_ptr<hearth::capi::ModelCore> core;
  std::unique_ptr<hearth::Session> session;  // on core->engine
  std::unique_ptr<hearth::Conversation> conversation;  // the chat messages, on *core->text
  int context_length = 0;
  hearth_metrics metrics{};
  std::atomic<bool> cancel{false};
  // Set while a call uses the session; a second thread's call is refused instead of racing.
  mutable std::atomic<bool> busy{false};
};
