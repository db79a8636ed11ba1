/* The C API used from strict C99 (-std=c99 -pedantic -Wall -Wextra -Werror): the header must
 * compile as C, and the basic contract must hold when called from C through libhearth.so: status
 * codes and messages for bad arguments, struct_size checks, load progress and cancellation, model
 * info, tokenization, templates, streaming generation and chat. Prints one line per failed check
 * and exits non-zero if any failed. */
#include <hearth.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

/* The call fails with `status` and leaves a message. */
#define CHECK_FAILS(call, status)                                                             \
  do {                                                                                        \
    hearth_status s_ = (call);                                                                \
    if (s_ != (status) || hearth_last_error()[0] == '\0') {                                   \
      fprintf(stderr, "%s:%d: %s returned %s (%s), expected %s\n", __FILE__, __LINE__, #call, \
              hearth_status_name(s_), hearth_last_error(), #status);                          \
      ++failures;                                                                             \
    }                                                                                         \
  } while (0)

#define CHECK_OK(call)                                                          \
  do {                                                                          \
    hearth_status s_ = (call);                                                  \
    if (s_ != HEARTH_OK) {                                                      \
      fprintf(stderr, "%s:%d: %s returned %s: %s\n", __FILE__, __LINE__, #call, \
              hearth_status_name(s_), hearth_last_error());                     \
      ++failures;                                                               \
    }                                                                           \
  } while (0)

struct progress_log {
  float last;
  int calls, monotonic, cancel_at_stage; /* cancel_at_stage: 0 never, else when stage matches */
  const char* cancel_stage;
  char stages[256];
};

static int on_progress(float fraction, const char* stage, void* user_data) {
  struct progress_log* log = (struct progress_log*)user_data;
  if (fraction < log->last || fraction < 0.0f || fraction > 1.0f) log->monotonic = 0;
  log->last = fraction;
  ++log->calls;
  if (strstr(log->stages, stage) == NULL &&
      strlen(log->stages) + strlen(stage) + 2 < sizeof log->stages) {
    strcat(log->stages, stage);
    strcat(log->stages, " ");
  }
  return !(log->cancel_stage && strcmp(stage, log->cancel_stage) == 0);
}

struct stream {
  char text[8192];
  size_t len;
  int calls;
};

static int on_text(const char* text, size_t len, int32_t token, void* user_data) {
  struct stream* s = (struct stream*)user_data;
  (void)token;
  if (s->len + len < sizeof s->text) {
    memcpy(s->text + s->len, text, len);
    s->len += len;
    s->text[s->len] = '\0';
  }
  ++s->calls;
  return 1;
}

int main(void) {
  const char* tiny = HEARTH_SHARED_DIR "/fixtures/models/tiny-tied-bf16";
  int major = -1, minor = -1, patch = -1;
  char expected_version[32];
  hearth_model* model = NULL;
  hearth_session* session = NULL;
  hearth_model_params mp;
  hearth_generate_params gp;
  hearth_model_info info;
  struct progress_log log;
  struct stream st;
  int32_t* ids = NULL;
  size_t n_ids = 0, n_msgs = 0;
  char* text = NULL;
  char* reply = NULL;
  hearth_message msgs[2];
  hearth_metrics metrics;

  /* Version: header and library agree. */
  sprintf(expected_version, "%d.%d.%d", HEARTH_VERSION_MAJOR, HEARTH_VERSION_MINOR,
          HEARTH_VERSION_PATCH);
  CHECK(strcmp(hearth_version(&major, &minor, &patch), expected_version) == 0);
  CHECK(major == HEARTH_VERSION_MAJOR && minor == HEARTH_VERSION_MINOR &&
        patch == HEARTH_VERSION_PATCH);
  CHECK(strcmp(hearth_status_name(HEARTH_ERR_NOT_FOUND), "HEARTH_ERR_NOT_FOUND") == 0);

  /* Bad arguments: a status, a message, and NULL outputs. */
  model = (hearth_model*)&major; /* must be overwritten with NULL */
  CHECK_FAILS(hearth_model_load(NULL, NULL, &model), HEARTH_ERR_INVALID_ARGUMENT);
  CHECK(model == NULL);
  CHECK_FAILS(hearth_model_load(tiny, NULL, NULL), HEARTH_ERR_INVALID_ARGUMENT);
  CHECK_FAILS(hearth_model_load("/nonexistent/model", NULL, &model), HEARTH_ERR_NOT_FOUND);
  CHECK(strstr(hearth_last_error(), "/nonexistent/model") != NULL);
  CHECK_FAILS(hearth_model_load(HEARTH_SHARED_DIR "/fixtures", NULL, &model), HEARTH_ERR_NOT_FOUND);
  mp = hearth_model_params_default();
  mp.struct_size = 3;
  CHECK_FAILS(hearth_model_load(tiny, &mp, &model), HEARTH_ERR_INVALID_ARGUMENT);
  CHECK(strstr(hearth_last_error(), "struct_size") != NULL);
  CHECK_FAILS(hearth_model_params_init(NULL, sizeof mp), HEARTH_ERR_INVALID_ARGUMENT);
  CHECK_FAILS(hearth_session_new(NULL, NULL, &session), HEARTH_ERR_INVALID_ARGUMENT);
  CHECK_FAILS(hearth_session_cancel(NULL), HEARTH_ERR_INVALID_ARGUMENT);
  CHECK_FAILS(hearth_tokenize(NULL, "x", 1, &ids, &n_ids), HEARTH_ERR_INVALID_ARGUMENT);
  hearth_free(NULL);
  hearth_model_free(NULL);
  hearth_session_free(NULL);

  /* A load cancelled by its progress callback frees everything and says so. */
  memset(&log, 0, sizeof log);
  log.monotonic = 1;
  log.cancel_stage = "weights";
  mp = hearth_model_params_default();
  mp.progress = on_progress;
  mp.progress_user_data = &log;
  CHECK_FAILS(hearth_model_load(tiny, &mp, &model), HEARTH_ERR_CANCELLED);
  CHECK(model == NULL);

  /* A full load reports every stage, in order, ending at 1. */
  memset(&log, 0, sizeof log);
  log.monotonic = 1;
  mp.n_threads = 1;
  CHECK_OK(hearth_model_load(tiny, &mp, &model));
  if (!model) return 1;
  CHECK(hearth_last_error()[0] == '\0');
  CHECK(log.monotonic && log.last == 1.0f);
  CHECK(strcmp(log.stages,
               "start config checkpoint weights graph tokenizer prefault backend done ") == 0);
  if (strcmp(log.stages,
             "start config checkpoint weights graph tokenizer prefault backend done ") != 0)
    fprintf(stderr, "stages: %s\n", log.stages);

  info.struct_size = sizeof info;
  CHECK_OK(hearth_model_get_info(model, &info));
  CHECK(info.n_layers == 2 && info.vocab_size == 151936 && info.hidden_size == 64);
  CHECK(info.n_heads == 4 && info.n_kv_heads == 2 && info.head_dim == 32);
  CHECK(info.context_length == 40960 && info.n_threads == 1 && info.has_chat_template == 1);
  CHECK(strcmp(info.dtype, "BF16") == 0);
  CHECK(info.n_params > 151936u * 64u);
  info.struct_size = 0;
  CHECK_FAILS(hearth_model_get_info(model, &info), HEARTH_ERR_INVALID_ARGUMENT);

  /* Tokenize and back. */
  CHECK_OK(hearth_tokenize(model, "Hello, world!", HEARTH_STRLEN, &ids, &n_ids));
  CHECK(n_ids > 1 && ids != NULL);
  CHECK_OK(hearth_detokenize(model, ids, n_ids, 1, &text, NULL));
  CHECK(text && strcmp(text, "Hello, world!") == 0);
  hearth_free(text);
  text = NULL;

  /* Chat template. */
  msgs[0].role = "system";
  msgs[0].content = "Be brief.";
  msgs[1].role = "user";
  msgs[1].content = "Hi";
  CHECK_OK(hearth_apply_chat_template(model, msgs, 2, NULL, &text));
  CHECK(text && strstr(text, "<|im_start|>user\nHi<|im_end|>") != NULL);
  CHECK(text && strstr(text, "<|im_start|>assistant\n") != NULL);
  hearth_free(text);
  text = NULL;

  /* Streaming generation: the pieces concatenate to the returned text. */
  CHECK_OK(hearth_session_new(model, NULL, &session));
  memset(&st, 0, sizeof st);
  gp = hearth_generate_params_default();
  gp.max_new_tokens = 12;
  gp.ignore_eos = 1;
  gp.on_text = on_text;
  gp.user_data = &st;
  CHECK_OK(hearth_session_generate_tokens(session, ids, n_ids, &gp, &text));
  CHECK(text != NULL && strcmp(text, st.text) == 0);
  CHECK(st.calls >= 12);
  metrics.struct_size = sizeof metrics;
  CHECK_OK(hearth_session_get_metrics(session, &metrics));
  CHECK(metrics.new_tokens == 12 && metrics.finish_reason == HEARTH_FINISH_LENGTH);
  CHECK(metrics.prompt_tokens == (int32_t)n_ids);
  hearth_free(text);
  text = NULL;

  /* Two chat turns; the second reuses the cache. */
  gp.on_text = NULL;
  CHECK_OK(hearth_session_chat(session, "Hi there", NULL, &gp, &reply));
  CHECK(reply != NULL);
  hearth_free(reply);
  CHECK_OK(hearth_session_chat(session, "And again", NULL, &gp, &reply));
  hearth_free(reply);
  CHECK_OK(hearth_session_get_metrics(session, &metrics));
  CHECK(metrics.prefill_tokens < metrics.prompt_tokens);
  CHECK_OK(hearth_session_message_count(session, &n_msgs));
  CHECK(n_msgs == 4);

  hearth_free(ids);
  hearth_session_free(session);
  hearth_model_free(model);
  if (failures)
    fprintf(stderr, "%d check(s) failed\n", failures);
  else
    printf("capi_c99: all checks passed\n");
  return failures ? 1 : 0;
}
