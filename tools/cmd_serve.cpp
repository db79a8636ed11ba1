// hearth serve: an OpenAI-compatible HTTP server over one model (tools/serve_http.h). SIGTERM or
// Ctrl-C stops it gracefully: it stops accepting, lets running requests finish within the grace
// period, cancels the rest and exits 0.
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <thread>

#include "core/error.h"
#include "tools/commands.h"
#include "tools/loaded.h"
#include "tools/serve_http.h"

namespace hearth::cli {

namespace {

// SIGTERM and SIGINT write their number to this pipe, which a thread of the server reads: a signal
// handler may do little more, and libraries (OpenBLAS) start threads of their own before main, so
// masking the signals to one thread is not enough. The pipe is the CLI's, not the library's.
int g_signal_pipe[2] = {-1, -1};
extern "C" void on_stop_signal(int sig) {
  const char c = char(sig);
  [[maybe_unused]] ssize_t n = write(g_signal_pipe[1], &c, 1);
}

std::string basename_of(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const size_t slash = dir.rfind('/');
  return slash == std::string::npos ? dir : dir.substr(slash + 1);
}

int positive(const Args& args, const char* name, int def, int max) {
  const int v = args.integer(name, def);
  if (v <= 0 || v > max) fail(name, " must be in [1, ", max, "]");
  return v;
}

serve::ServeOptions serve_options(const Args& args, const Loaded& l, const TextFrontEnd& text,
                                  int parallel) {
  serve::ServeOptions o;
  o.host = args.str("--host", o.host);
  o.port = args.integer("--port", o.port);
  if (o.port < 0 || o.port > 65535) fail("--port must be in [0, 65535]");
  o.api_key = args.str("--api-key");
  o.model_name = args.str("--model-name", basename_of(l.model->dir()));
  o.parallel = parallel;
  o.max_queue = args.integer("--max-queue", o.max_queue);
  if (o.max_queue < 0 || o.max_queue > 4096) fail("--max-queue must be in [0, 4096]");
  o.max_body_bytes = size_t(positive(args, "--max-body-mb", 8, 1024)) << 20;
  o.timeout_s = positive(args, "--timeout", o.timeout_s, 3600);
  o.shutdown_grace_s = args.integer("--shutdown-grace", o.shutdown_grace_s);
  if (o.shutdown_grace_s < 0) fail("--shutdown-grace must not be negative");
  const KVPool& pool = l.runner->kv_pool();
  o.limits.context = std::min(l.runner->max_positions(), pool.n_blocks() * pool.block_size());
  o.limits.max_prompt_tokens = args.integer("--max-prompt-tokens", 0);
  o.limits.max_tokens = args.integer("--max-tokens", 0);
  if (o.limits.max_prompt_tokens < 0 || o.limits.max_tokens < 0)
    fail("--max-prompt-tokens and --max-tokens must not be negative");
  // The checkpoint's sampling defaults, and any given on the command line, for fields a request
  // leaves out.
  o.defaults = generate_options(args, *l.model, /*model_defaults=*/true);
  o.defaults.stop_ids = text.stop_ids(o.defaults.stop_ids);
  return o;
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  if (pipe(g_signal_pipe) != 0) fail("serve: cannot create a pipe");
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client gone mid-write must not end the server
  // Requests come and go with buffers of a vocabulary's size (samplers, logits); a fixed mmap
  // threshold gives those back when freed instead of letting glibc raise it and keep them.
  mallopt(M_MMAP_THRESHOLD, 256 << 10);

  auto spec = kEngineOptions;
  auto so = sampling_options();
  spec.insert(spec.end(), so.begin(), so.end());
  spec.insert(spec.end(), {"--host=", "--port=", "--parallel=", "--max-batch-tokens=", "--api-key=",
                           "--max-queue=", "--max-body-mb=", "--max-prompt-tokens=",
                           "--max-tokens=", "--model-name=", "--timeout=", "--shutdown-grace="});
  Args args(argc, argv, spec);
  RunnerOptions ro = runner_options(args);
  const int parallel =
      positive(args, "--parallel", args.has("--max-batch") ? ro.max_seqs : 8, 1024);
  ro.max_seqs = parallel;
  SchedulerOptions sched;
  sched.max_batch_tokens = args.integer("--max-batch-tokens", 0);
  if (sched.max_batch_tokens < 0) fail("--max-batch-tokens must not be negative");
  const TextFrontEnd text = load_text(args);
  Loaded l = load_engine(args, ro, sched);
  note_random_weights(*l.model);
  serve::Server server(*l.engine, text, serve_options(args, l, text, parallel));
  const int port = server.bind();

  std::thread waiter([&] {
    char sig = 0;
    while (read(g_signal_pipe[0], &sig, 1) < 0 && errno == EINTR) {
    }
    if (sig != 0)
      std::fprintf(stderr, "hearth serve: %s, shutting down\n",
                   sig == SIGINT ? "SIGINT" : "SIGTERM");
    server.shutdown();
  });
  std::fprintf(stderr, "hearth serve: %s, %d sequences per step, %.0f ms to load\n",
               l.runner->backend().describe().c_str(), parallel, l.load_ms);
  std::fprintf(stderr, "hearth serve: listening on http://%s:%d\n",
               args.str("--host", "127.0.0.1").c_str(), port);
  server.run();
  const char wake = 0;  // run() ended on its own: wake the waiter
  [[maybe_unused]] ssize_t n = write(g_signal_pipe[1], &wake, 1);
  waiter.join();
  std::fprintf(stderr, "hearth serve: stopped\n");
  return 0;
}

}  // namespace hearth::cli
