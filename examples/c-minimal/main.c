/* c-minimal: the hearth C API from one C99 file. Loads a model folder, chats for two turns with
 * the reply streaming to stdout, then starts a third reply and cancels it from a second thread.
 *
 *   cc -std=c99 main.c $(pkg-config --cflags --libs hearth) -pthread -o c-minimal
 *   ./c-minimal /path/to/Qwen3-0.6B
 */
#define _POSIX_C_SOURCE 200809L
#include <hearth.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

/* Shared between the streaming callback (generation thread) and the canceller thread. */
struct canceller {
  hearth_session* session;
  pthread_mutex_t mutex;
  pthread_cond_t cond;
  int tokens;  /* tokens streamed so far in the current reply */
  int stop_at; /* the canceller fires once this many tokens have streamed */
  int done;    /* the reply ended on its own; the canceller just exits */
};

static int on_progress(float fraction, const char* stage, void* user_data) {
  (void)user_data;
  fprintf(stderr, "\rloading: %3.0f%% %-12s", fraction * 100.0, stage);
  if (fraction >= 1.0f) fputc('\n', stderr);
  return 1; /* 0 would cancel the load */
}

static int on_text(const char* text, size_t len, int32_t token, void* user_data) {
  struct canceller* c = (struct canceller*)user_data;
  fwrite(text, 1, len, stdout);
  fflush(stdout);
  if (c && token != HEARTH_TOKEN_NONE) {
    pthread_mutex_lock(&c->mutex);
    if (++c->tokens == c->stop_at) pthread_cond_signal(&c->cond);
    pthread_mutex_unlock(&c->mutex);
  }
  return 1; /* 0 would stop the reply */
}

static void* cancel_thread(void* arg) {
  struct canceller* c = (struct canceller*)arg;
  pthread_mutex_lock(&c->mutex);
  while (c->tokens < c->stop_at && !c->done) pthread_cond_wait(&c->cond, &c->mutex);
  pthread_mutex_unlock(&c->mutex);
  hearth_session_cancel(c->session); /* safe from any thread */
  return NULL;
}

static int check(hearth_status s, const char* what) {
  if (s != HEARTH_OK)
    fprintf(stderr, "%s: %s: %s\n", what, hearth_status_name(s), hearth_last_error());
  return s == HEARTH_OK;
}

/* The enum has no name function in the API; a switch keeps the names next to the values. */
static const char* finish_name(hearth_finish_reason r) {
  switch (r) {
    case HEARTH_FINISH_NONE:
      return "none";
    case HEARTH_FINISH_STOP_TOKEN:
      return "stop_token";
    case HEARTH_FINISH_STOP_STRING:
      return "stop_string";
    case HEARTH_FINISH_LENGTH:
      return "length";
    case HEARTH_FINISH_CANCELLED:
      return "cancelled";
    case HEARTH_FINISH_CALLBACK:
      return "callback";
  }
  return "unknown"; /* a reason added by a newer library */
}

static void print_metrics(hearth_session* session) {
  hearth_metrics m;
  m.struct_size = sizeof m;
  if (!check(hearth_session_get_metrics(session, &m), "metrics")) return;
  fprintf(stderr,
          "\n[finish %s] prompt %d tokens (%d computed), %d new, first token %.0f ms, %.1f tok/s\n",
          finish_name(m.finish_reason), m.prompt_tokens, m.prefill_tokens, m.new_tokens, m.ttft_ms,
          m.tokens_per_s);
}

int main(int argc, char** argv) {
  hearth_model* model = NULL;
  hearth_session* session = NULL;
  hearth_model_params mp = hearth_model_params_default();
  hearth_session_params sp = hearth_session_params_default();
  hearth_generate_params gp = hearth_generate_params_default();
  hearth_chat_params cp = hearth_chat_params_default();
  const char* turns[2];
  struct canceller c;
  pthread_t thread;
  char* reply = NULL;
  int i, ok = 0;

  if (argc < 2) {
    fprintf(stderr, "usage: %s MODEL_DIR [PROMPT]\n", argv[0]);
    return 2;
  }
  turns[0] = argc > 2 ? argv[2] : "Hello! Who are you?";
  turns[1] = "Tell me more.";
  printf("hearth %s\n", hearth_version(NULL, NULL, NULL));

  mp.progress = on_progress;
  if (!check(hearth_model_load(argv[1], &mp, &model), "load")) return 1;
  sp.system_prompt = "You are a helpful assistant.";
  if (!check(hearth_session_new(model, &sp, &session), "session")) goto out;

  hearth_model_sampling_defaults(model, &gp);
  gp.max_new_tokens = 48;
  gp.on_text = on_text;
  cp.thinking = 0;
  for (i = 0; i < 2; ++i) {
    printf("\n> %s\n", turns[i]);
    if (!check(hearth_session_chat(session, turns[i], &cp, &gp, &reply), "chat")) goto out;
    hearth_free(reply); /* the same text was streamed; the session keeps it as history */
    reply = NULL;
    print_metrics(session);
  }

  /* A third reply, cancelled by another thread once 5 tokens have streamed (the reply may get one
   * more: the cancel lands within one decode step). */
  c.session = session;
  pthread_mutex_init(&c.mutex, NULL);
  pthread_cond_init(&c.cond, NULL);
  c.tokens = 0;
  c.stop_at = 5;
  c.done = 0;
  gp.user_data = &c;
  gp.ignore_eos = 1;
  gp.max_new_tokens = 400;
  pthread_create(&thread, NULL, cancel_thread, &c);
  printf("\n> Write a long story.\n");
  ok = check(hearth_session_chat(session, "Write a long story.", &cp, &gp, NULL), "chat");
  pthread_mutex_lock(&c.mutex);
  c.done = 1;
  pthread_cond_signal(&c.cond);
  pthread_mutex_unlock(&c.mutex);
  pthread_join(thread, NULL);
  pthread_cond_destroy(&c.cond);
  pthread_mutex_destroy(&c.mutex);
  if (ok) print_metrics(session);

out:
  hearth_session_free(session);
  hearth_model_free(model);
  return ok ? 0 : 1;
}
