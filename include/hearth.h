/* hearth.h: the C API of libhearth, a CPU-first inference engine for Qwen3 models.
 *
 * This is the only public header. It is C99 (usable from C++), and the library behind it is
 * versioned by its SONAME: everything declared here keeps its meaning and binary layout for the
 * life of libhearth.so.0. New features arrive as new functions or as fields appended to the end of
 * the option structs; that is why every option and output struct starts with `struct_size`.
 *
 * A minimal program:
 *
 *   hearth_model* model = NULL;
 *   if (hearth_model_load("/models/Qwen3-0.6B", NULL, &model) != HEARTH_OK) {
 *     fprintf(stderr, "%s\n", hearth_last_error());
 *     return 1;
 *   }
 *   hearth_session* session = NULL;
 *   hearth_session_new(model, NULL, &session);
 *   hearth_generate_params gp = hearth_generate_params_default();
 *   gp.on_text = print_piece;               // streams the reply as it is generated
 *   char* reply = NULL;
 *   hearth_session_chat(session, "Hello!", NULL, &gp, &reply);
 *   hearth_free(reply);
 *   hearth_session_free(session);
 *   hearth_model_free(model);
 *
 * Conventions
 * - Every function that can fail returns a hearth_status. On failure it also sets a readable
 *   message, read with hearth_last_error() on the same thread, and sets its output pointers to
 *   NULL (or 0). A successful call clears the message.
 * - Option structs: get a filled-in copy from the matching hearth_*_default() function, change the
 *   fields you care about, pass a pointer (or NULL for all defaults). Output structs: set
 *   struct_size to sizeof(the struct) before the call. struct_size lets programs and libraries of
 *   different versions work together: fields are only ever appended, an older program's smaller
 *   struct gets defaults for the fields it lacks, and a newer program's larger struct is accepted
 *   by an older library as long as the fields it does not know are zero (the default of every
 *   field added later is 0). Anything else is refused with HEARTH_ERR_INVALID_ARGUMENT.
 *   The hearth_*_default() functions are inline wrappers around exported hearth_*_init(ptr,
 *   size) functions, so the library never writes more than the caller's sizeof.
 * - Strings are UTF-8 and, unless a length is passed with them, NUL-terminated. Invalid UTF-8 in
 *   input text is replaced by U+FFFD.
 * - Memory the library hands out (char*, int32_t* results) is released with hearth_free();
 *   handles with their own hearth_*_free(). Every free function accepts NULL.
 * - No C++ exception ever leaves the library; out of memory is reported as
 *   HEARTH_ERR_OUT_OF_MEMORY.
 *
 * Thread safety
 * - A hearth_model is immutable once loaded. Any number of threads may use one model at once
 *   (tokenize, templates, info, creating sessions).
 * - A hearth_session belongs to one thread at a time: its functions must not be called
 *   concurrently (a second concurrent call is refused with HEARTH_ERR_BUSY rather than corrupting
 *   the cache). The exception is hearth_session_cancel(), which may be called from any thread at
 *   any time while the session exists.
 * - Sessions of the same model run in parallel on the model's one engine: its thread pool
 *   (n_threads), compiled graph and paged KV cache (kv_budget_mib) are shared, and sessions
 *   generating at the same time are batched into the same steps, which read every weight once for
 *   all of them. KV blocks of a common prefix (a system prompt, the earlier turns of a chat) are
 *   computed once and shared.
 * - hearth_model_free() may be called while sessions of the model still exist: the weights are
 *   released when the last session is freed.
 * - Callbacks run on the thread that called the function they were passed to. From inside a
 *   streaming callback, the only call allowed on the generating session is
 *   hearth_session_cancel() (others return HEARTH_ERR_BUSY); the model may be used freely.
 * - hearth_last_error() is per thread.
 */
#ifndef HEARTH_H
#define HEARTH_H

#include <stddef.h>
#include <stdint.h>

#define HEARTH_VERSION_MAJOR 0
#define HEARTH_VERSION_MINOR 1
#define HEARTH_VERSION_PATCH 0

#if defined(_WIN32)
#if defined(HEARTH_BUILDING_LIBRARY)
#define HEARTH_API __declspec(dllexport)
#else
#define HEARTH_API
#endif
#elif defined(__GNUC__)
/* The library is built with hidden visibility; only functions marked here are exported. */
#define HEARTH_API __attribute__((visibility("default")))
#else
#define HEARTH_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Status codes, errors, version, memory
 */

typedef enum hearth_status {
  HEARTH_OK = 0,
  HEARTH_ERR_INVALID_ARGUMENT = 1, /* NULL pointer, bad struct_size, out-of-range value */
  HEARTH_ERR_NOT_FOUND = 2,        /* model folder or a required file does not exist */
  HEARTH_ERR_MODEL = 3,            /* malformed or unsupported checkpoint, tokenizer or template */
  HEARTH_ERR_OUT_OF_MEMORY = 4,
  HEARTH_ERR_CANCELLED = 5,    /* the load progress callback asked to stop */
  HEARTH_ERR_CONTEXT_FULL = 6, /* the prompt does not fit the session's context length */
  HEARTH_ERR_BUSY = 7,         /* the session is in use by another call on another thread */
  HEARTH_ERR_UNSUPPORTED = 8,  /* unknown or unavailable backend, or a feature the model lacks */
  HEARTH_ERR_INTERNAL = 9      /* anything else; the message says what */
} hearth_status;

/* A short constant name for a status ("HEARTH_ERR_NOT_FOUND"); never NULL. */
HEARTH_API const char* hearth_status_name(hearth_status status);

/* The message of the last failed call on this thread, "" after a successful call. The pointer is
 * valid until the next hearth_ call on this thread. Never NULL. */
HEARTH_API const char* hearth_last_error(void);

/* The library's version as "MAJOR.MINOR.PATCH"; the numbers go to the non-NULL pointers. Compare
 * with the HEARTH_VERSION_* macros to detect a header/library mismatch. */
HEARTH_API const char* hearth_version(int* major, int* minor, int* patch);

/* Releases a string or array returned by the library. NULL is allowed. */
HEARTH_API void hearth_free(void* ptr);

/* Pass as a text length to mean "up to the terminating NUL". */
#define HEARTH_STRLEN ((size_t)-1)

/* ---------------------------------------------------------------------------------------------
 * Models
 */

typedef struct hearth_model hearth_model;

typedef enum hearth_kv_type {
  HEARTH_KV_F32 = 0,
  HEARTH_KV_F16 = 1,
  HEARTH_KV_BF16 = 2,
  HEARTH_KV_INT8 = 3 /* int8 codes, a scale per position; about 0.27x the F32 cache */
} hearth_kv_type;

/* Called during hearth_model_load with the fraction done (0..1, never decreasing) and a stage
 * name: "start" (0.0, before anything is read), "config" (config.json parsed), "checkpoint"
 * (safetensors opened and validated), "weights" (tensors bound), "graph" (compute graph built),
 * "tokenizer", "prefault" (weight pages being read in; called repeatedly), "backend" (graph
 * compiled for the backend, weight copies made), "done" (1.0). Return 0 to cancel the load (it then
 * fails with HEARTH_ERR_CANCELLED and frees everything), nonzero to go on. */
typedef int (*hearth_progress_fn)(float fraction, const char* stage, void* user_data);

typedef struct hearth_model_params {
  size_t struct_size;  /* sizeof(hearth_model_params) */
  int32_t n_threads;   /* compute threads of the model, shared by its sessions; 0: physical cores */
  const char* backend; /* "cpu", "vulkan" where built; NULL or "": the best available (the CPU) */
  const char* isa;     /* CPU: force a lower ISA ("avx2", "scalar"); NULL or "": best */
  /* hearth_model_params_init's default: HEARTH_KV_F16 (half the F32 cache's bytes, which decode
   * at long context reads more of than weights; HEARTH_KV_F32 is exact). */
  hearth_kv_type kv_type;
  int32_t prefill_chunk; /* prompt tokens per prefill step; 0: 256 */
  /* Nonzero: read every weight page during the load (with "prefault" progress), so the first
   * reply does not stall on disk reads. 0: pages are read lazily on first use. */
  int32_t prefault;
  hearth_progress_fn progress; /* may be NULL */
  void* progress_user_data;
  /* Nonzero (hearth_model_params_init's default): keep private copies of the matmul weights in
   * memory backed by transparent huge pages, in the layouts the kernels read fastest, shared by
   * the model's sessions and made when the model first runs, and hand the mapped file's pages back:
   * faster decode (fewer TLB misses, one stream per block of rows, a screened LM head), the weights
   * in memory once. KV caches go into huge pages too. 0: the weights are read in place from the
   * mapped files, whose pages several processes share. Added in 0.1; older callers get 1. */
  int32_t hugepages;
  /* KV cache memory shared by all sessions of the model, in MiB; 0: the model's whole context
   * once. Pages are committed as they are used. Added in 0.1; older callers get 0. */
  int32_t kv_budget_mib;
  /* GPU backends: which device (`hearth devices` lists them); 0: the first. Added in 0.1; older
   * callers get 0. */
  int32_t device;
  /* With hugepages: a folder (which must exist) where the weight copies are kept in a file too,
   * one per model folder, written by the first load and mapped by later ones from the page cache,
   * so they are not made again: a load allocates no fresh memory. The file is written again when
   * the checkpoint or the library changes. NULL or "": no file. Added in 0.1; older callers get
   * NULL. */
  const char* weight_cache_dir;
} hearth_model_params;

HEARTH_API hearth_status hearth_model_params_init(hearth_model_params* params, size_t struct_size);
static inline hearth_model_params hearth_model_params_default(void) {
  hearth_model_params p;
  hearth_model_params_init(&p, sizeof p);
  return p;
}

/* Loads a Hugging Face Qwen3 checkpoint folder (config.json, *.safetensors, tokenizer.json and
 * tokenizer_config.json). params may be NULL for defaults. Weights are memory-mapped (see
 * hugepages). On success *out_model is the new model; on failure it is NULL. */
HEARTH_API hearth_status hearth_model_load(const char* path, const hearth_model_params* params,
                                           hearth_model** out_model);

/* NULL is allowed. See "Thread safety" for freeing a model that still has sessions. */
HEARTH_API void hearth_model_free(hearth_model* model);

typedef struct hearth_model_info {
  size_t struct_size; /* set to sizeof(hearth_model_info) before the call */
  int32_t n_layers;
  int32_t vocab_size;
  int32_t context_length; /* max_position_embeddings */
  int32_t hidden_size;
  int32_t n_heads;
  int32_t n_kv_heads;
  int32_t head_dim;
  uint64_t n_params; /* parameters of the architecture (embeddings counted once when tied) */
  /* The strings below are owned by the model and valid until it is destroyed. */
  const char* dtype;   /* stored weight types, e.g. "BF16" or "BF16+F32" */
  const char* backend; /* backend description: name, ISA, threads */
  const char* path;    /* the folder it was loaded from */
  int32_t has_chat_template;
  int32_t n_threads; /* compute threads of the model, shared by its sessions */
  /* Nonzero for a `hearth standin` checkpoint (config.json has "hearth_standin"): random weights,
   * whose text is noise; an app should say so. Added in 0.1; older callers do not get it. */
  int32_t random_weights;
  /* Qwen3-MoE: experts per sparse layer and experts each token uses (0 and 0 for a dense model),
   * and the parameters a token runs through (n_params less the experts it does not use). Added in
   * 0.1; older callers do not get them. */
  int32_t n_experts;
  int32_t n_experts_per_tok;
  uint64_t n_active_params;
} hearth_model_info;

HEARTH_API hearth_status hearth_model_get_info(const hearth_model* model, hearth_model_info* info);

/* Token ids for text[0..text_len) (text_len HEARTH_STRLEN: up to the NUL). Special-token strings in
 * the text ("<|im_start|>") become their ids; nothing is added. *out_tokens is released with
 * hearth_free (NULL when the text is empty). */
HEARTH_API hearth_status hearth_tokenize(const hearth_model* model, const char* text,
                                         size_t text_len, int32_t** out_tokens, size_t* out_count);

/* The text of tokens, NUL-terminated, released with hearth_free. skip_special nonzero drops
 * special tokens such as <|im_end|>. out_len may be NULL. Unknown ids are dropped. */
HEARTH_API hearth_status hearth_detokenize(const hearth_model* model, const int32_t* tokens,
                                           size_t count, int skip_special, char** out_text,
                                           size_t* out_len);

/* ---------------------------------------------------------------------------------------------
 * Chat templates
 */

/* One chat message. The layout of this struct is fixed (it is passed in arrays); messages with
 * more fields (tool calls) go through hearth_apply_chat_template_json. */
typedef struct hearth_message {
  const char* role; /* "system", "user", "assistant" or "tool" */
  const char* content;
} hearth_message;

#define HEARTH_THINKING_DEFAULT (-1) /* leave enable_thinking to the template (Qwen3: on) */

typedef struct hearth_chat_params {
  size_t struct_size;            /* sizeof(hearth_chat_params) */
  int32_t add_generation_prompt; /* default 1: end with the assistant turn's opening */
  int32_t thinking;              /* HEARTH_THINKING_DEFAULT, 0 (off) or 1 (on) */
  const char* tools_json;        /* NULL, or a JSON array of tool (function) schemas */
  const char* extra_json;        /* NULL, or a JSON object of further template variables */
} hearth_chat_params;

HEARTH_API hearth_status hearth_chat_params_init(hearth_chat_params* params, size_t struct_size);
static inline hearth_chat_params hearth_chat_params_default(void) {
  hearth_chat_params p;
  hearth_chat_params_init(&p, sizeof p);
  return p;
}

/* Renders messages with the model's chat template, as transformers' apply_chat_template(
 * tokenize=False) does. params may be NULL. *out_prompt is released with hearth_free. */
HEARTH_API hearth_status hearth_apply_chat_template(const hearth_model* model,
                                                    const hearth_message* messages,
                                                    size_t n_messages,
                                                    const hearth_chat_params* params,
                                                    char** out_prompt);

/* Same with the messages as a JSON array of message objects (any fields the template reads). */
HEARTH_API hearth_status hearth_apply_chat_template_json(const hearth_model* model,
                                                         const char* messages_json,
                                                         const hearth_chat_params* params,
                                                         char** out_prompt);

/* ---------------------------------------------------------------------------------------------
 * Sessions and generation
 */

typedef struct hearth_session hearth_session;

typedef struct hearth_session_params {
  size_t struct_size;        /* sizeof(hearth_session_params) */
  int32_t n_threads;         /* ignored: sessions share the model's threads */
  int32_t context_length;    /* most positions the cache may hold; 0: the model's context length */
  const char* system_prompt; /* NULL, or the first message of the conversation (role "system") */
} hearth_session_params;

HEARTH_API hearth_status hearth_session_params_init(hearth_session_params* params,
                                                    size_t struct_size);
static inline hearth_session_params hearth_session_params_default(void) {
  hearth_session_params p;
  hearth_session_params_init(&p, sizeof p);
  return p;
}

/* A conversation: the chat messages so far and the tokens its last reply left in the model's KV
 * cache, which the next turn reuses. params may be NULL. The session keeps the model alive. */
HEARTH_API hearth_status hearth_session_new(hearth_model* model,
                                            const hearth_session_params* params,
                                            hearth_session** out_session);

/* NULL is allowed. Must not run concurrently with another call on the session, cancel included. */
HEARTH_API void hearth_session_free(hearth_session* session);

/* Forgets the messages (keeping the system prompt) and the cached tokens. */
HEARTH_API hearth_status hearth_session_reset(hearth_session* session);

#define HEARTH_TOKEN_NONE (-1)

/* Streaming callback: called once per generated token with the text that became complete with it
 * (possibly empty: UTF-8 sequences split across tokens, and text that might start a stop string,
 * are held back until they are complete; special tokens have no text), and once more at the end
 * with token HEARTH_TOKEN_NONE if held-back text remains. text is not NUL-terminated and is valid
 * only during the call. Concatenating every piece gives exactly the generated text. Return nonzero
 * to go on, 0 to stop (finish reason HEARTH_FINISH_CALLBACK; the return of the final call is
 * ignored). */
typedef int (*hearth_text_fn)(const char* text, size_t len, int32_t token, void* user_data);

typedef struct hearth_generate_params {
  size_t struct_size;     /* sizeof(hearth_generate_params) */
  int32_t max_new_tokens; /* default 512; clipped to what the context length leaves */
  /* Sampling, with Hugging Face transformers' semantics. temperature <= 0 is greedy. */
  float temperature;        /* default 0 (greedy); see hearth_model_sampling_defaults */
  int32_t top_k;            /* 0: off */
  float top_p;              /* 1: off */
  float min_p;              /* 0: off */
  float repetition_penalty; /* 1: off */
  float presence_penalty;   /* 0: off */
  float frequency_penalty;  /* 0: off */
  uint64_t seed;
  /* Generation ends after one of these tokens, and also after the model's own end tokens (its
   * EOS ids, <|im_end|>, <|endoftext|>) unless ignore_eos is nonzero. */
  const int32_t* stop_ids;
  size_t n_stop_ids;
  int32_t ignore_eos;
  /* Generation ends when the text contains one of these; the text returned and streamed stops
   * just before it. */
  const char* const* stop_strings;
  size_t n_stop_strings;
  hearth_text_fn on_text; /* may be NULL */
  void* user_data;
} hearth_generate_params;

/* Greedy decoding, 512 new tokens, the model's end tokens. */
HEARTH_API hearth_status hearth_generate_params_init(hearth_generate_params* params,
                                                     size_t struct_size);
static inline hearth_generate_params hearth_generate_params_default(void) {
  hearth_generate_params p;
  hearth_generate_params_init(&p, sizeof p);
  return p;
}

/* Sets the sampling fields of *params to the model's generation_config.json recommendations
 * (Qwen3: temperature 0.6, top_k 20, top_p 0.95), leaving other fields alone. */
HEARTH_API hearth_status hearth_model_sampling_defaults(const hearth_model* model,
                                                        hearth_generate_params* params);

/* Generates a continuation of prompt (raw text, no chat template applied; special-token strings
 * in it are parsed) and stores the generated text in *out_text (released with hearth_free; pass
 * NULL if you only stream). The cache keeps whatever prefix of the prompt it already holds, so
 * a prompt that extends the previous one costs only its new tokens. params may be NULL. A
 * cancelled or stopped generation still returns HEARTH_OK with the text so far; see
 * hearth_session_get_metrics for why it ended. Does not touch the session's chat messages. */
HEARTH_API hearth_status hearth_session_generate(hearth_session* session, const char* prompt,
                                                 const hearth_generate_params* params,
                                                 char** out_text);

/* Same from token ids. */
HEARTH_API hearth_status hearth_session_generate_tokens(hearth_session* session,
                                                        const int32_t* prompt, size_t n_prompt,
                                                        const hearth_generate_params* params,
                                                        char** out_text);

/* One chat turn: appends {"user", user_text} to the session's messages, renders them with the
 * chat template (chat may be NULL), generates the reply, and appends it as the assistant message
 * (also when cancelled or stopped, so the conversation stays consistent with the cache). Only the
 * tokens of the new turn are computed when the cache holds the earlier ones: the turn continues
 * the exact tokens of the conversation so far, whatever the template would make of its history.
 * When the conversation no longer fits the session's context with room for the reply
 * (max_new_tokens, at most a quarter of the context), its oldest turns are dropped, keeping the
 * system prompt (hearth_metrics.dropped_messages counts them); HEARTH_ERR_CONTEXT_FULL only when
 * the new message alone does not fit. On failure the conversation is left as it was. */
HEARTH_API hearth_status hearth_session_chat(hearth_session* session, const char* user_text,
                                             const hearth_chat_params* chat,
                                             const hearth_generate_params* params,
                                             char** out_reply);

/* Appends a message without generating (to restore a saved conversation, or add a tool result). */
HEARTH_API hearth_status hearth_session_add_message(hearth_session* session, const char* role,
                                                    const char* content);

/* The number of messages, and message i (pointers valid until the session's messages change). */
HEARTH_API hearth_status hearth_session_message_count(const hearth_session* session,
                                                      size_t* out_count);
HEARTH_API hearth_status hearth_session_get_message(const hearth_session* session, size_t index,
                                                    hearth_message* out_message);

/* Asks the session's generation in progress to stop; it does within one decode step, and the
 * generating call returns HEARTH_OK with finish reason HEARTH_FINISH_CANCELLED. Safe from any
 * thread and from callbacks. A cancel while no generation runs has no effect (each generation
 * starts uncancelled). */
HEARTH_API hearth_status hearth_session_cancel(hearth_session* session);

typedef enum hearth_finish_reason {
  HEARTH_FINISH_NONE = 0,        /* nothing generated yet */
  HEARTH_FINISH_STOP_TOKEN = 1,  /* an end token or one of stop_ids */
  HEARTH_FINISH_STOP_STRING = 2, /* one of stop_strings */
  HEARTH_FINISH_LENGTH = 3,      /* max_new_tokens or the context length */
  HEARTH_FINISH_CANCELLED = 4,   /* hearth_session_cancel */
  HEARTH_FINISH_CALLBACK = 5     /* the streaming callback returned 0 */
} hearth_finish_reason;

/* Of the session's last generation. */
typedef struct hearth_metrics {
  size_t struct_size; /* set to sizeof(hearth_metrics) before the call */
  hearth_finish_reason finish_reason;
  int32_t prompt_tokens;  /* tokens in the prompt */
  int32_t prefill_tokens; /* of those, the ones computed (the rest came from the cache) */
  int32_t new_tokens;     /* tokens generated */
  double prefill_ms;      /* prompt processing */
  double ttft_ms;         /* call start to first token */
  double decode_ms;       /* first token to last */
  double ms_per_token;    /* decode_ms / (new_tokens - 1) */
  double tokens_per_s;    /* decode speed */
  double prefill_tokens_per_s;
  int32_t cached_tokens; /* tokens the cache holds now */
  uint64_t kv_bytes;     /* memory of the session's KV cache */
  /* Messages the last hearth_session_chat dropped, oldest first, to fit the context (they are
   * gone from the session's messages too). Added in 0.1; older callers do not get it. */
  int32_t dropped_messages;
} hearth_metrics;

HEARTH_API hearth_status hearth_session_get_metrics(const hearth_session* session,
                                                    hearth_metrics* out_metrics);

#ifdef __cplusplus
}
#endif

#endif /* HEARTH_H */
