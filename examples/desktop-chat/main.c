/* desktop-chat: a GTK 4 chat window on the hearth C API.
 *
 * The model loads and replies are generated on worker threads; the workers hand progress and text
 * to the GTK main loop with g_idle_add, so the window stays responsive while the reply streams in.
 * Stop cancels a reply (hearth_session_cancel is safe from any thread). New chat forgets the
 * conversation. Opening another folder keeps the current model until the new one has loaded, so
 * a folder that fails to load costs nothing but an error message.
 *
 *   desktop-chat [MODEL_DIR]
 *
 * Test hook (used by xvfb_test.sh): with HEARTH_CHAT_TEST_PROMPT set, the app sends that prompt as
 * soon as the model is loaded, prints the reply to stdout between "REPLY-BEGIN" and "REPLY-END",
 * prints how long the main loop was ever blocked during generation, saves a screenshot of its
 * window to HEARTH_CHAT_TEST_SCREENSHOT (if set), and quits. HEARTH_CHAT_MAX_TOKENS limits replies.
 * With HEARTH_CHAT_TEST_BAD_MODEL set to a folder that fails to load, it first goes on: opens
 * that folder, prints whether the model and conversation survived ("bad folder: ..."), sends a
 * second prompt ("second reply: ..."), presses New chat ("new chat: ..."), and presses Stop during
 * a third reply ("stop: ...", with where the keyboard focus went).
 */
#include <gtk/gtk.h>
#include <hearth.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where the test hook is (see the top of the file). */
typedef enum {
  TEST_FIRST_REPLY,
  TEST_BAD_FOLDER,
  TEST_SECOND_REPLY,
  TEST_STOPPED_REPLY,
} TestStage;

typedef struct {
  GtkApplication* app;
  GtkWidget *window, *open_button, *model_label, *progress, *thinking, *view, *entry, *send, *stop,
      *new_chat, *status;
  GtkTextBuffer* buffer;
  GtkTextTag *tag_user, *tag_thinking;

  hearth_model* model;
  hearth_session* session;
  GThread* worker;  /* the load or generation thread; at most one at a time */
  gint cancel_load; /* atomic: the progress callback returns 0 once set */
  gboolean generating, in_think, closing;
  char* model_dir;   /* of the loaded model */
  char* loading_dir; /* of the model being loaded */

  /* Test hook state. */
  const char* test_prompt;
  const char* test_screenshot;
  const char* test_bad_model;
  TestStage test_stage;
  gboolean test_stop_pressed;
  hearth_model* test_kept_model; /* the model that must survive the bad folder */
  size_t test_kept_messages;
  GString* reply;
  gint64 last_tick_us, max_gap_us;
  guint tick_source;
  int max_tokens;
} App;

/* ---- controls ---------------------------------------------------------------------------- */

/* One worker at a time: while a load or a reply runs, only Stop (for a reply) is live. */
static void update_controls(App* app) {
  gboolean idle = app->worker == NULL, chat = idle && app->session != NULL;
  gtk_widget_set_sensitive(app->open_button, idle);
  gtk_widget_set_sensitive(app->send, chat);
  gtk_widget_set_sensitive(app->new_chat, chat);
  gtk_widget_set_sensitive(app->stop, app->generating);
}

static gboolean entry_has_focus(App* app) {
  GtkWidget* focus = gtk_window_get_focus(GTK_WINDOW(app->window));
  /* The entry hands its focus to the text widget inside it. */
  return focus && (focus == app->entry || gtk_widget_is_ancestor(focus, app->entry));
}

static void send_prompt(App* app, const char* text);
static gboolean take_screenshot_and_quit(gpointer data);

/* ---- messages from worker threads, run on the main loop ---------------------------------- */

typedef struct {
  App* app;
  float fraction;
  char* stage;
} ProgressMsg;

static gboolean on_progress_idle(gpointer data) {
  ProgressMsg* m = data;
  char text[64];
  gtk_progress_bar_set_fraction(GTK_PROGRESS_BAR(m->app->progress), m->fraction);
  snprintf(text, sizeof text, "Loading: %s (%.0f%%)", m->stage, m->fraction * 100.0);
  gtk_progress_bar_set_text(GTK_PROGRESS_BAR(m->app->progress), text);
  g_free(m->stage);
  g_free(m);
  return G_SOURCE_REMOVE;
}

/* Runs on the load thread. */
static int load_progress(float fraction, const char* stage, void* user_data) {
  App* app = user_data;
  ProgressMsg* m = g_new0(ProgressMsg, 1);
  m->app = app;
  m->fraction = fraction;
  m->stage = g_strdup(stage);
  g_idle_add(on_progress_idle, m);
  return !g_atomic_int_get(&app->cancel_load);
}

typedef struct {
  App* app;
  hearth_model* model;
  hearth_status status;
  char* error;
} LoadResult;

static size_t message_count(App* app) {
  size_t n = 0;
  if (app->session) hearth_session_message_count(app->session, &n);
  return n;
}

/* Test hook: a folder that failed to load must leave the model and the conversation as they
 * were, and the next prompt must still be answered. */
static void test_after_bad_folder(App* app, const char* error) {
  gboolean kept = app->model && app->model == app->test_kept_model &&
                  message_count(app) == app->test_kept_messages;
  printf("bad folder: load failed: %s\n", error);
  printf("bad folder: model kept: %s, messages: %zu\n", kept ? "yes" : "no", message_count(app));
  fflush(stdout);
  app->test_stage = TEST_SECOND_REPLY;
  send_prompt(app, "Tell me more.");
}

static gboolean on_load_done(gpointer data) {
  LoadResult* r = data;
  App* app = r->app;
  if (app->worker) g_thread_join(app->worker); /* on_close may have joined it already */
  app->worker = NULL;
  if (app->closing) {
    hearth_model_free(r->model);
    r->model = NULL;
    r->status = HEARTH_ERR_CANCELLED;
  }
  if (app->closing) {
    /* The window is going away: nothing to show. */
  } else if (r->status != HEARTH_OK) {
    char* msg = g_strdup_printf("Could not load %s: %s", app->loading_dir, r->error);
    /* The model loaded before (if any) is still there, with its conversation: the bar goes back
     * to saying so, and the status line says what went wrong. */
    gtk_progress_bar_set_fraction(GTK_PROGRESS_BAR(app->progress), app->model ? 1.0 : 0.0);
    gtk_progress_bar_set_text(GTK_PROGRESS_BAR(app->progress),
                              app->model ? "Model loaded" : "Load failed");
    gtk_label_set_text(GTK_LABEL(app->status), msg);
    fprintf(stderr, "%s\n", msg);
    g_free(msg);
    g_free(app->loading_dir);
    app->loading_dir = NULL;
    update_controls(app);
    if (app->session) gtk_widget_grab_focus(app->entry);
    if (app->test_prompt && app->test_stage == TEST_BAD_FOLDER)
      test_after_bad_folder(app, r->error);
    else if (app->test_prompt)
      g_application_quit(G_APPLICATION(app->app));
  } else {
    hearth_model_info info;
    hearth_session_params sp = hearth_session_params_default();
    hearth_status s;
    char* label;
    /* Only now, with the new model in hand, does the old one go, and its conversation with it. */
    hearth_session_free(app->session);
    hearth_model_free(app->model);
    app->session = NULL;
    app->model = r->model;
    g_free(app->model_dir);
    app->model_dir = app->loading_dir;
    app->loading_dir = NULL;
    gtk_text_buffer_set_text(app->buffer, "", 0);
    info.struct_size = sizeof info;
    hearth_model_get_info(app->model, &info);
    label = g_strdup_printf("%s  ·  %d layers, %.2f B params, %s%s  ·  %s", app->model_dir,
                            info.n_layers, (double)info.n_params / 1e9, info.dtype,
                            info.random_weights ? " (random weights: its text is noise)" : "",
                            info.backend);
    gtk_label_set_text(GTK_LABEL(app->model_label), label);
    g_free(label);
    sp.system_prompt = "You are a helpful assistant.";
    s = hearth_session_new(app->model, &sp, &app->session);
    update_controls(app);
    if (s != HEARTH_OK) {
      gtk_label_set_text(GTK_LABEL(app->status), hearth_last_error());
    } else {
      gtk_progress_bar_set_text(GTK_PROGRESS_BAR(app->progress), "Model loaded");
      gtk_label_set_text(GTK_LABEL(app->status), "");
      gtk_widget_grab_focus(app->entry);
      if (app->test_prompt) send_prompt(app, app->test_prompt);
    }
  }
  g_free(r->error);
  g_free(r);
  return G_SOURCE_REMOVE;
}

static gpointer load_thread(gpointer data) {
  App* app = data;
  LoadResult* r = g_new0(LoadResult, 1);
  hearth_model_params mp = hearth_model_params_default();
  mp.progress = load_progress;
  mp.progress_user_data = app;
  r->app = app;
  r->status = hearth_model_load(app->loading_dir, &mp, &r->model);
  if (r->status != HEARTH_OK) r->error = g_strdup(hearth_last_error()); /* per thread: copy now */
  g_idle_add(on_load_done, r);
  return NULL;
}

/* The current model and conversation stay usable until the new model has loaded (on_load_done
 * swaps them); chatting waits meanwhile, as there is one worker. */
static void start_load(App* app, const char* dir) {
  if (app->worker) return; /* a load or a reply is running */
  g_free(app->loading_dir);
  app->loading_dir = g_strdup(dir);
  if (!app->model) gtk_label_set_text(GTK_LABEL(app->model_label), dir);
  gtk_progress_bar_set_fraction(GTK_PROGRESS_BAR(app->progress), 0.0);
  g_atomic_int_set(&app->cancel_load, 0);
  app->worker = g_thread_new("hearth-load", load_thread, app);
  update_controls(app);
}

/* ---- generation ------------------------------------------------------------------------ */

typedef struct {
  App* app;
  char* text;
} TextMsg;

static void append(App* app, const char* text, GtkTextTag* tag) {
  GtkTextIter end;
  gtk_text_buffer_get_end_iter(app->buffer, &end);
  if (tag)
    gtk_text_buffer_insert_with_tags(app->buffer, &end, text, -1, tag, NULL);
  else
    gtk_text_buffer_insert(app->buffer, &end, text, -1);
  gtk_text_buffer_get_end_iter(app->buffer, &end);
  gtk_text_view_scroll_to_iter(GTK_TEXT_VIEW(app->view), &end, 0.0, FALSE, 0.0, 1.0);
}

static gboolean on_text_idle(gpointer data) {
  TextMsg* m = data;
  App* app = m->app;
  /* <think> and </think> are tokens of their own, so each arrives as a whole piece. */
  if (strcmp(m->text, "<think>") == 0) app->in_think = TRUE;
  append(app, m->text, app->in_think ? app->tag_thinking : NULL);
  if (strcmp(m->text, "</think>") == 0) app->in_think = FALSE;
  if (app->reply) g_string_append(app->reply, m->text);
  g_free(m->text);
  g_free(m);
  /* Test hook: Stop as a user would press it, the button taking the focus first. */
  if (app->test_prompt && app->test_stage == TEST_STOPPED_REPLY && !app->test_stop_pressed) {
    app->test_stop_pressed = TRUE;
    gtk_widget_grab_focus(app->stop);
    g_signal_emit_by_name(app->stop, "clicked"); /* gtk_widget_activate clicks 250 ms later */
  }
  return G_SOURCE_REMOVE;
}

/* Runs on the generation thread. */
static int stream_text(const char* text, size_t len, int32_t token, void* user_data) {
  TextMsg* m;
  (void)token;
  if (len == 0) return 1;
  m = g_new0(TextMsg, 1);
  m->app = user_data;
  m->text = g_strndup(text, len);
  g_idle_add(on_text_idle, m);
  return 1;
}

typedef struct {
  App* app;
  char* prompt;
  int thinking;
  hearth_status status;
  char* error;
  hearth_metrics metrics;
} ChatJob;

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
  return "unknown";
}

/* Test hook, after each reply: prints what xvfb_test.sh checks and takes the next step. */
static void test_after_reply(App* app, const ChatJob* job) {
  switch (app->test_stage) {
    case TEST_FIRST_REPLY:
      printf("REPLY-BEGIN\n%s\nREPLY-END\n", app->reply->str);
      printf("status: %s\n", hearth_status_name(job->status));
      printf("new tokens: %d\n", job->metrics.new_tokens);
      printf("main loop max gap during generation: %.0f ms\n", app->max_gap_us / 1000.0);
      fflush(stdout);
      if (app->test_bad_model && job->status == HEARTH_OK) {
        app->test_stage = TEST_BAD_FOLDER;
        app->test_kept_model = app->model;
        app->test_kept_messages = message_count(app);
        start_load(app, app->test_bad_model); /* what choosing it in the dialog does */
        return;
      }
      break;
    case TEST_SECOND_REPLY: {
      GtkTextIter start, end;
      hearth_message first = {NULL, NULL};
      size_t n;
      printf("second reply: status %s, new tokens %d, messages %zu\n",
             hearth_status_name(job->status), job->metrics.new_tokens, message_count(app));
      if (gtk_widget_get_sensitive(app->new_chat)) g_signal_emit_by_name(app->new_chat, "clicked");
      n = message_count(app);
      if (n > 0) hearth_session_get_message(app->session, 0, &first);
      gtk_text_buffer_get_bounds(app->buffer, &start, &end);
      printf("new chat: messages %zu, system prompt only: %s, view chars %d\n", n,
             n == 1 && first.role && strcmp(first.role, "system") == 0 ? "yes" : "no",
             gtk_text_iter_get_offset(&end) - gtk_text_iter_get_offset(&start));
      fflush(stdout);
      app->test_stage = TEST_STOPPED_REPLY;
      send_prompt(app, "Write a long story.");
      return;
    }
    case TEST_STOPPED_REPLY:
      printf("stop: finish %s, focus on entry: %s\n", finish_name(job->metrics.finish_reason),
             entry_has_focus(app) ? "yes" : "no");
      fflush(stdout);
      break;
    case TEST_BAD_FOLDER:
      break;
  }
  /* Give GTK a moment to lay out and draw the last text before the screenshot. */
  g_timeout_add(400, take_screenshot_and_quit, app);
}

static gboolean on_chat_done(gpointer data) {
  ChatJob* job = data;
  App* app = job->app;
  GtkWidget* focus;
  char* status;
  if (app->worker) g_thread_join(app->worker); /* on_close may have joined it already */
  app->worker = NULL;
  app->generating = FALSE;
  app->in_think = FALSE;
  if (app->tick_source) g_source_remove(app->tick_source);
  app->tick_source = 0;
  append(app, "\n\n", NULL);
  focus = gtk_window_get_focus(GTK_WINDOW(app->window));
  update_controls(app);
  /* Typing goes on where it was, unless the focus sat on a button the reply used (or nowhere);
   * the user may have moved it to the conversation to copy text. */
  if (!focus || focus == app->stop || focus == app->send) gtk_widget_grab_focus(app->entry);
  if (job->status != HEARTH_OK) {
    status = g_strdup_printf("Error: %s", job->error);
  } else {
    const hearth_metrics* m = &job->metrics;
    status = g_strdup_printf("%s%d tokens · first token %.0f ms · %.1f tokens/s",
                             m->finish_reason == HEARTH_FINISH_CANCELLED ? "Stopped · " : "",
                             m->new_tokens, m->ttft_ms, m->tokens_per_s);
  }
  gtk_label_set_text(GTK_LABEL(app->status), status);
  g_free(status);
  if (app->test_prompt && !app->closing) test_after_reply(app, job);
  g_free(job->prompt);
  g_free(job->error);
  g_free(job);
  return G_SOURCE_REMOVE;
}

static gpointer chat_thread(gpointer data) {
  ChatJob* job = data;
  App* app = job->app;
  hearth_chat_params cp = hearth_chat_params_default();
  hearth_generate_params gp = hearth_generate_params_default();
  cp.thinking = job->thinking;
  hearth_model_sampling_defaults(app->model, &gp);
  gp.max_new_tokens = app->max_tokens;
  /* Test hook: the reply Stop cancels gets the app's usual cap, not the test's short one, so that
     it cannot end on its own before the press reaches it (a loaded machine may run the UI's idle
     callback only after a tiny model's 40 tokens). */
  if (app->test_prompt && app->test_stage == TEST_STOPPED_REPLY) gp.max_new_tokens = 1024;
  gp.on_text = stream_text;
  gp.user_data = app;
  job->status = hearth_session_chat(app->session, job->prompt, &cp, &gp, NULL);
  if (job->status != HEARTH_OK) job->error = g_strdup(hearth_last_error());
  job->metrics.struct_size = sizeof job->metrics;
  hearth_session_get_metrics(app->session, &job->metrics);
  g_idle_add(on_chat_done, job);
  return NULL;
}

/* Measures how long the main loop goes between ticks while a reply streams. */
static gboolean on_tick(gpointer data) {
  App* app = data;
  gint64 now = g_get_monotonic_time();
  if (app->last_tick_us && now - app->last_tick_us > app->max_gap_us)
    app->max_gap_us = now - app->last_tick_us;
  app->last_tick_us = now;
  return G_SOURCE_CONTINUE;
}

static void send_prompt(App* app, const char* text) {
  ChatJob* job;
  if (!app->session || app->worker || app->closing || !text || !*text) return;
  append(app, "You: ", app->tag_user);
  append(app, text, app->tag_user);
  append(app, "\n\nAssistant: ", app->tag_user);
  job = g_new0(ChatJob, 1);
  job->app = app;
  job->prompt = g_strdup(text);
  job->thinking = gtk_check_button_get_active(GTK_CHECK_BUTTON(app->thinking)) ? 1 : 0;
  app->generating = TRUE;
  gtk_label_set_text(GTK_LABEL(app->status), "Generating…");
  app->last_tick_us = 0;
  app->max_gap_us = 0;
  app->tick_source = g_timeout_add(20, on_tick, app);
  app->worker = g_thread_new("hearth-chat", chat_thread, job);
  update_controls(app);
}

/* ---- screenshot (test hook) ------------------------------------------------------------ */

static gboolean take_screenshot_and_quit(gpointer data) {
  App* app = data;
  if (app->test_screenshot) {
    int w = gtk_widget_get_width(app->window), h = gtk_widget_get_height(app->window);
    GdkPaintable* paintable = gtk_widget_paintable_new(app->window);
    GtkSnapshot* snapshot = gtk_snapshot_new();
    GskRenderNode* node;
    gdk_paintable_snapshot(paintable, GDK_SNAPSHOT(snapshot), w, h);
    node = gtk_snapshot_free_to_node(snapshot);
    if (node) {
      GskRenderer* renderer = gtk_native_get_renderer(GTK_NATIVE(app->window));
      graphene_rect_t area;
      GdkTexture* texture;
      graphene_rect_init(&area, 0, 0, (float)w, (float)h);
      texture = gsk_renderer_render_texture(renderer, node, &area);
      if (gdk_texture_save_to_png(texture, app->test_screenshot))
        printf("screenshot: %s (%dx%d)\n", app->test_screenshot, w, h);
      else
        fprintf(stderr, "could not save %s\n", app->test_screenshot);
      g_object_unref(texture);
      gsk_render_node_unref(node);
    }
    g_object_unref(paintable);
    fflush(stdout);
  }
  g_application_quit(G_APPLICATION(app->app));
  return G_SOURCE_REMOVE;
}

/* ---- UI ---------------------------------------------------------------------------------- */

static void on_send(GtkWidget* widget, gpointer data) {
  App* app = data;
  GtkEntryBuffer* eb = gtk_entry_get_buffer(GTK_ENTRY(app->entry));
  char* text = g_strdup(gtk_entry_buffer_get_text(eb));
  (void)widget;
  if (app->session && !app->worker && *text) {
    send_prompt(app, text);
    gtk_entry_buffer_set_text(eb, "", 0);
  }
  g_free(text);
}

static void on_stop(GtkWidget* widget, gpointer data) {
  App* app = data;
  (void)widget;
  if (app->session && app->generating) hearth_session_cancel(app->session);
  /* Stop is pressed to say something else: the keyboard goes back to the entry rather than
   * staying on a button that is about to turn insensitive. */
  gtk_widget_grab_focus(app->entry);
}

/* Forgets the conversation (the system prompt stays) and its cached tokens. */
static void on_new_chat(GtkWidget* widget, gpointer data) {
  App* app = data;
  hearth_status s;
  (void)widget;
  if (!app->session || app->worker) return;
  s = hearth_session_reset(app->session);
  if (s != HEARTH_OK) {
    gtk_label_set_text(GTK_LABEL(app->status), hearth_last_error());
    return;
  }
  gtk_text_buffer_set_text(app->buffer, "", 0);
  app->in_think = FALSE;
  gtk_label_set_text(GTK_LABEL(app->status), "New chat");
  gtk_widget_grab_focus(app->entry);
}

#if GTK_CHECK_VERSION(4, 10, 0)
static void on_folder_chosen(GObject* source, GAsyncResult* result, gpointer data) {
  GFile* folder = gtk_file_dialog_select_folder_finish(GTK_FILE_DIALOG(source), result, NULL);
  if (folder) {
    char* path = g_file_get_path(folder);
    if (path) start_load(data, path);
    g_free(path);
    g_object_unref(folder);
  }
}

static void on_open(GtkWidget* widget, gpointer data) {
  App* app = data;
  GtkFileDialog* dialog = gtk_file_dialog_new();
  (void)widget;
  gtk_file_dialog_set_title(dialog, "Choose a model folder");
  gtk_file_dialog_select_folder(dialog, GTK_WINDOW(app->window), NULL, on_folder_chosen, app);
  g_object_unref(dialog);
}
#else
static void on_folder_response(GtkNativeDialog* dialog, int response, gpointer data) {
  if (response == GTK_RESPONSE_ACCEPT) {
    GFile* folder = gtk_file_chooser_get_file(GTK_FILE_CHOOSER(dialog));
    if (folder) {
      char* path = g_file_get_path(folder);
      if (path) start_load(data, path);
      g_free(path);
      g_object_unref(folder);
    }
  }
  g_object_unref(dialog);
}

static void on_open(GtkWidget* widget, gpointer data) {
  App* app = data;
  GtkFileChooserNative* dialog =
      gtk_file_chooser_native_new("Choose a model folder", GTK_WINDOW(app->window),
                                  GTK_FILE_CHOOSER_ACTION_SELECT_FOLDER, "_Open", "_Cancel");
  (void)widget;
  g_signal_connect(dialog, "response", G_CALLBACK(on_folder_response), app);
  gtk_native_dialog_show(GTK_NATIVE_DIALOG(dialog));
}
#endif

/* Closing waits for the worker, after asking it to stop: a reply stops within one token and a
 * load at its next progress report. */
static gboolean on_close(GtkWindow* window, gpointer data) {
  App* app = data;
  (void)window;
  app->closing = TRUE;
  g_atomic_int_set(&app->cancel_load, 1);
  if (app->session) hearth_session_cancel(app->session);
  if (app->worker) {
    g_thread_join(app->worker);
    app->worker = NULL;
    /* The worker's completion message is still queued; it must not run on a freed app, so
     * process pending idles now while everything is alive. */
    while (g_main_context_pending(NULL)) g_main_context_iteration(NULL, FALSE);
  }
  return FALSE;
}

static void on_activate(GtkApplication* gapp, gpointer data) {
  App* app = data;
  GtkWidget *box, *top, *bottom, *scroll;
  app->window = gtk_application_window_new(gapp);
  gtk_window_set_title(GTK_WINDOW(app->window), "hearth chat");
  gtk_window_set_default_size(GTK_WINDOW(app->window), 820, 560);
  g_signal_connect(app->window, "close-request", G_CALLBACK(on_close), app);

  box = gtk_box_new(GTK_ORIENTATION_VERTICAL, 6);
  gtk_widget_set_margin_start(box, 8);
  gtk_widget_set_margin_end(box, 8);
  gtk_widget_set_margin_top(box, 8);
  gtk_widget_set_margin_bottom(box, 8);
  gtk_window_set_child(GTK_WINDOW(app->window), box);

  top = gtk_box_new(GTK_ORIENTATION_HORIZONTAL, 8);
  app->open_button = gtk_button_new_with_label("Open model folder…");
  g_signal_connect(app->open_button, "clicked", G_CALLBACK(on_open), app);
  app->model_label = gtk_label_new("No model loaded");
  gtk_label_set_ellipsize(GTK_LABEL(app->model_label), PANGO_ELLIPSIZE_MIDDLE);
  gtk_widget_set_hexpand(app->model_label, TRUE);
  gtk_label_set_xalign(GTK_LABEL(app->model_label), 0.0f);
  app->thinking = gtk_check_button_new_with_label("Thinking");
  app->new_chat = gtk_button_new_with_label("New chat");
  g_signal_connect(app->new_chat, "clicked", G_CALLBACK(on_new_chat), app);
  gtk_box_append(GTK_BOX(top), app->open_button);
  gtk_box_append(GTK_BOX(top), app->model_label);
  gtk_box_append(GTK_BOX(top), app->thinking);
  gtk_box_append(GTK_BOX(top), app->new_chat);
  gtk_box_append(GTK_BOX(box), top);

  app->progress = gtk_progress_bar_new();
  gtk_progress_bar_set_show_text(GTK_PROGRESS_BAR(app->progress), TRUE);
  gtk_progress_bar_set_text(GTK_PROGRESS_BAR(app->progress), "No model");
  gtk_box_append(GTK_BOX(box), app->progress);

  app->view = gtk_text_view_new();
  gtk_text_view_set_editable(GTK_TEXT_VIEW(app->view), FALSE);
  gtk_text_view_set_cursor_visible(GTK_TEXT_VIEW(app->view), FALSE);
  gtk_text_view_set_wrap_mode(GTK_TEXT_VIEW(app->view), GTK_WRAP_WORD_CHAR);
  gtk_text_view_set_left_margin(GTK_TEXT_VIEW(app->view), 6);
  gtk_text_view_set_right_margin(GTK_TEXT_VIEW(app->view), 6);
  app->buffer = gtk_text_view_get_buffer(GTK_TEXT_VIEW(app->view));
  app->tag_user =
      gtk_text_buffer_create_tag(app->buffer, "user", "weight", PANGO_WEIGHT_BOLD, NULL);
  app->tag_thinking = gtk_text_buffer_create_tag(app->buffer, "thinking", "foreground", "gray50",
                                                 "style", PANGO_STYLE_ITALIC, NULL);
  scroll = gtk_scrolled_window_new();
  gtk_scrolled_window_set_child(GTK_SCROLLED_WINDOW(scroll), app->view);
  gtk_widget_set_vexpand(scroll, TRUE);
  gtk_box_append(GTK_BOX(box), scroll);

  bottom = gtk_box_new(GTK_ORIENTATION_HORIZONTAL, 8);
  app->entry = gtk_entry_new();
  gtk_entry_set_placeholder_text(GTK_ENTRY(app->entry), "Type a message and press Enter");
  gtk_widget_set_hexpand(app->entry, TRUE);
  g_signal_connect(app->entry, "activate", G_CALLBACK(on_send), app);
  app->send = gtk_button_new_with_label("Send");
  g_signal_connect(app->send, "clicked", G_CALLBACK(on_send), app);
  app->stop = gtk_button_new_with_label("Stop");
  g_signal_connect(app->stop, "clicked", G_CALLBACK(on_stop), app);
  gtk_box_append(GTK_BOX(bottom), app->entry);
  gtk_box_append(GTK_BOX(bottom), app->send);
  gtk_box_append(GTK_BOX(bottom), app->stop);
  gtk_box_append(GTK_BOX(box), bottom);

  app->status = gtk_label_new("");
  gtk_label_set_xalign(GTK_LABEL(app->status), 0.0f);
  gtk_box_append(GTK_BOX(box), app->status);
  update_controls(app);

  gtk_window_present(GTK_WINDOW(app->window));
  if (app->loading_dir) {
    char* dir = g_strdup(app->loading_dir);
    start_load(app, dir);
    g_free(dir);
  }
}

int main(int argc, char** argv) {
  App app;
  const char* max_tokens = getenv("HEARTH_CHAT_MAX_TOKENS");
  int status;
  memset(&app, 0, sizeof app);
  app.test_prompt = getenv("HEARTH_CHAT_TEST_PROMPT");
  app.test_screenshot = getenv("HEARTH_CHAT_TEST_SCREENSHOT");
  app.test_bad_model = getenv("HEARTH_CHAT_TEST_BAD_MODEL");
  app.max_tokens = max_tokens ? atoi(max_tokens) : 1024;
  if (app.test_prompt) app.reply = g_string_new("");
  if (argc > 1) app.loading_dir = g_strdup(argv[1]); /* loaded once the window is up */

  /* Non-unique: every start is its own window and needs no session bus (tests run without one). */
  app.app = gtk_application_new("org.hearth.DesktopChat", G_APPLICATION_NON_UNIQUE);
  g_signal_connect(app.app, "activate", G_CALLBACK(on_activate), &app);
  status = g_application_run(G_APPLICATION(app.app), 1, argv); /* the folder is ours, not GTK's */
  g_object_unref(app.app);

  if (app.worker) g_thread_join(app.worker);
  hearth_session_free(app.session);
  hearth_model_free(app.model);
  g_free(app.model_dir);
  g_free(app.loading_dir);
  if (app.reply) g_string_free(app.reply, TRUE);
  return status;
}
