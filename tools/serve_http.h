// `hearth serve`'s HTTP side: OpenAI-compatible routes on cpp-httplib over one model's engine.
// Each request runs on an HTTP worker thread, which drives the shared engine (core/engine.h) until
// its sequence ends, so the worker pool bounds how many requests run or wait at once. A watchdog
// thread writes SSE heartbeats to quiet streams, which is how a client that went away while its
// request waited or prefilled is noticed and its sequence cancelled, and cancels what still runs
// when a shutdown's grace period ends.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "core/engine.h"
#include "models/text_frontend.h"
#include "tools/serve_api.h"
#include "tools/serve_metrics.h"
#include "tools/serve_run.h"
#include "tools/serve_sockets.h"

namespace httplib {
class Server;
class DataSink;
struct Request;
struct Response;
}  // namespace httplib

namespace hearth::serve {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;     // required as "Authorization: Bearer KEY" on /v1/*; empty: none
  std::string model_name;  // the id clients name
  int parallel = 8;        // sequences the engine runs at once
  int max_queue = 64;      // requests that may wait beyond those; more get 503
  size_t max_body_bytes = size_t(8) << 20;
  int timeout_s = 30;         // socket read/write timeout
  int shutdown_grace_s = 10;  // after SIGTERM, running requests get this long to finish
  ApiLimits limits;
  GenerateOptions defaults;  // for fields a request leaves out
};

class Server {
 public:
  Server(Engine& engine, const TextFrontEnd& text, const ServeOptions& opt);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int bind();  // binds host:port and returns the port (the chosen one for port 0); throws
  void run();  // serves until shutdown() has drained every request
  // Stops accepting, answers /health and new requests with 503, cancels what still runs after the
  // grace period. Safe from any thread (not from a signal handler).
  void shutdown();

  struct Stream;  // one response in flight (serve_http.cpp)
  struct Call;    // one generation request (serve_http.cpp)

 private:
  void routes();
  void chat_completions(const httplib::Request& req, httplib::Response& res);
  void completions(const httplib::Request& req, httplib::Response& res);
  void generate(const httplib::Request& req, httplib::Response& res, bool chat);
  void read_request(const httplib::Request& req, Call& call);  // throws ApiError
  // Runs the call on the engine, handing deltas to `out`; records metrics; leaves the registry.
  RunOutcome run(Call& call, const std::function<bool(std::vector<ReplyDelta>&)>& out);
  void answer_whole(Call& call, httplib::Response& res);
  void answer_stream(const std::shared_ptr<Call>& call, httplib::Response& res);
  void stream_events(Call& call, httplib::DataSink& sink);
  void watchdog();
  void log_request(const std::string& what, int status, double ms, const std::string& detail);

  Engine& engine_;
  const TextFrontEnd& text_;
  ServeOptions opt_;
  Metrics metrics_;
  std::unique_ptr<httplib::Server> http_;
  int listen_fd_ = -1;
  std::unique_ptr<ConnectionReaper> reaper_;  // set by bind()
  std::atomic<bool> draining_{false};
  std::chrono::steady_clock::time_point drain_deadline_;

  std::mutex live_mu_;  // guards live_ and stop_watchdog_
  std::condition_variable live_cv_;
  std::set<std::shared_ptr<Stream>> live_;
  bool stop_watchdog_ = false;
  std::thread watchdog_;
  std::mutex log_mu_;
};

}  // namespace hearth::serve
