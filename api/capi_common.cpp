// The C API's plumbing: the per-thread error message, version, memory, and parameter defaults.
#include <cstdlib>

#include "api/capi_internal.h"

namespace hearth::capi {

namespace {

// The C API reports errors through a per-thread message (documented in hearth.h); this is the one
// piece of mutable state outside the objects a caller holds, and no thread sees another's.
thread_local std::string t_last_error;
// Set when the message could not be stored (no memory for it), so hearth_last_error still says
// something true.
thread_local bool t_error_lost = false;

}  // namespace

void set_last_error(const char* msg) noexcept {
  try {
    t_last_error = msg;
    t_error_lost = false;
  } catch (...) {
    t_last_error.clear();
    t_error_lost = true;
  }
}

void clear_last_error() noexcept {
  t_last_error.clear();
  t_error_lost = false;
}

void check_struct_size(const char* type, const void* p, size_t struct_size, size_t min_size,
                       size_t known_size) {
  if (struct_size < min_size)
    api_fail(HEARTH_ERR_INVALID_ARGUMENT, type, ".struct_size is ", struct_size,
             ", expected sizeof(", type, ") = ", known_size,
             " (initialize it with the matching _default() function)");
  // A newer program's larger struct is fine when this library's defaults hold for the fields it
  // does not know, i.e. they are zero.
  const unsigned char* bytes = static_cast<const unsigned char*>(p);
  for (size_t i = known_size; i < struct_size; ++i)
    if (bytes[i] != 0)
      api_fail(HEARTH_ERR_INVALID_ARGUMENT, type, ".struct_size is ", struct_size,
               " and sets a field at byte ", i, " that this library version (", HEARTH_VERSION,
               ", sizeof ", known_size, ") does not know");
}

char* dup_string(const std::string& s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (!p) throw std::bad_alloc();
  std::memcpy(p, s.data(), s.size());
  p[s.size()] = '\0';
  return p;
}

}  // namespace hearth::capi

using namespace hearth::capi;

extern "C" {

const char* hearth_status_name(hearth_status status) {
  switch (enum_value(status)) {
    case HEARTH_OK:
      return "HEARTH_OK";
    case HEARTH_ERR_INVALID_ARGUMENT:
      return "HEARTH_ERR_INVALID_ARGUMENT";
    case HEARTH_ERR_NOT_FOUND:
      return "HEARTH_ERR_NOT_FOUND";
    case HEARTH_ERR_MODEL:
      return "HEARTH_ERR_MODEL";
    case HEARTH_ERR_OUT_OF_MEMORY:
      return "HEARTH_ERR_OUT_OF_MEMORY";
    case HEARTH_ERR_CANCELLED:
      return "HEARTH_ERR_CANCELLED";
    case HEARTH_ERR_CONTEXT_FULL:
      return "HEARTH_ERR_CONTEXT_FULL";
    case HEARTH_ERR_BUSY:
      return "HEARTH_ERR_BUSY";
    case HEARTH_ERR_UNSUPPORTED:
      return "HEARTH_ERR_UNSUPPORTED";
    case HEARTH_ERR_INTERNAL:
      return "HEARTH_ERR_INTERNAL";
  }
  return "HEARTH_ERR_UNKNOWN";
}

const char* hearth_last_error(void) {
  if (t_error_lost) return "out of memory (while storing an error message)";
  return t_last_error.c_str();
}

const char* hearth_version(int* major, int* minor, int* patch) {
  if (major) *major = HEARTH_VERSION_MAJOR;
  if (minor) *minor = HEARTH_VERSION_MINOR;
  if (patch) *patch = HEARTH_VERSION_PATCH;
  return HEARTH_VERSION;
}

void hearth_free(void* ptr) {
  std::free(ptr);
}

hearth_status hearth_model_params_init(hearth_model_params* params, size_t struct_size) {
  hearth_model_params d{};
  d.struct_size = sizeof d;
  d.kv_type = HEARTH_KV_F16;
  d.prefault = 1;
  d.hugepages = 1;
  return init_struct("hearth_model_params", params, struct_size, d,
                     HEARTH_FIELD_END(hearth_model_params, progress_user_data));
}

hearth_status hearth_chat_params_init(hearth_chat_params* params, size_t struct_size) {
  hearth_chat_params d{};
  d.struct_size = sizeof d;
  d.add_generation_prompt = 1;
  d.thinking = HEARTH_THINKING_DEFAULT;
  return init_struct("hearth_chat_params", params, struct_size, d,
                     HEARTH_FIELD_END(hearth_chat_params, extra_json));
}

hearth_status hearth_session_params_init(hearth_session_params* params, size_t struct_size) {
  hearth_session_params d{};
  d.struct_size = sizeof d;
  return init_struct("hearth_session_params", params, struct_size, d,
                     HEARTH_FIELD_END(hearth_session_params, system_prompt));
}

hearth_status hearth_generate_params_init(hearth_generate_params* params, size_t struct_size) {
  hearth_generate_params d{};
  d.struct_size = sizeof d;
  d.max_new_tokens = 512;
  d.top_p = 1.f;
  d.repetition_penalty = 1.f;
  return init_struct("hearth_generate_params", params, struct_size, d,
                     HEARTH_FIELD_END(hearth_generate_params, user_data));
}

}  // extern "C"
