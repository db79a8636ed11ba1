#include "tools/serve_http.h"

#include <httplib.h>
#include <malloc.h>
#include <sys/socket.h>

#include <cstdio>
#include <ctime>
#include <random>

#include "core/error.h"
#include "tools/serve_format.h"
#include "tools/serve_run.h"
#include "tools/serve_sockets.h"

namespace hearth::serve {

extern const char* const kChatPage;  // tools/serve_page.html, embedded at build time

using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kHeartbeatAfter = std::chrono::seconds(2);  // a quiet stream gets a heartbeat

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.status == 503) res.set_header("Retry-After", "1");
  res.set_content(error_json(e), "application/json");
}

void send_json(httplib::Response& res, const std::string& body) {
  res.status = 200;
  res.set_content(body, "application/json");
}

}  // namespace

// One generation request in flight. A streaming one also has the sink its chunks go to, which the
// watchdog writes heartbeats to between tokens; the lock keeps their writes whole.
struct Server::Stream {
  std::mutex mu;
  httplib::DataSink* sink = nullptr;
  bool broken = false;  // a write failed: the client is gone
  Clock::time_point last_write = Clock::now();
  std::atomic<bool> cancel{false};
  std::atomic<int> peer_fd{-1};          // the client's socket while the request runs; -1: unknown
  std::atomic<bool> client_left{false};  // why `cancel` was set: the client, not a shutdown

  bool gone() {  // the client went away: a write failed, or the watchdog saw its socket close
    std::lock_guard<std::mutex> lk(mu);
    return broken || client_left;
  }

  bool write(const std::string& s) {
    std::lock_guard<std::mutex> lk(mu);
    if (broken || !sink) return false;
    if (!sink->write(s.data(), s.size())) broken = true;
    last_write = Clock::now();
    return !broken;
  }
  // Writes an SSE comment (clients ignore it) if nothing was written since `quiet_since`; false
  // once a write has failed. A stream busy writing is not quiet.
  bool heartbeat(Clock::time_point quiet_since) {
    std::unique_lock<std::mutex> lk(mu, std::try_to_lock);
    if (!lk.owns_lock()) return true;
    if (sink && !broken && last_write < quiet_since) {
      if (!sink->write(":\n\n", 3)) broken = true;
      last_write = Clock::now();
    }
    return !broken;
  }
};

Server::Server(Engine& engine, const TextFrontEnd& text, const ServeOptions& opt)
    : engine_(engine), text_(text), opt_(opt), http_(std::make_unique<httplib::Server>()) {
  // A connection holds its worker thread while it is open, idle keep-alive ones too (up to 5 s),
  // so the pool has room beyond the requests that may run or wait (counted apart, in
  // metrics_.active): a burst gets its 503s at once, and /health and /metrics still answer.
  const int threads = 2 * (opt_.parallel + opt_.max_queue) + 16;
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  http_->set_payload_max_length(opt_.max_body_bytes);
  http_->set_read_timeout(opt_.timeout_s, 0);
  http_->set_write_timeout(opt_.timeout_s, 0);
  http_->set_keep_alive_max_count(1000);
  http_->set_keep_alive_timeout(5);
  // cpp-httplib's default sets SO_REUSEPORT, which would let a second server silently share the
  // port; SO_REUSEADDR only allows a restart while old connections linger. The socket is kept to
  // lengthen its listen backlog (the library's is 5) once bound.
  http_->set_socket_options([this](int sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_fd_ = sock;
  });
  routes();
}

Server::~Server() {
  {
    std::lock_guard<std::mutex> lk(live_mu_);
    stop_watchdog_ = true;
  }
  live_cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

int Server::bind() {
  const int port = opt_.port == 0 ? http_->bind_to_any_port(opt_.host)
                                  : (http_->bind_to_port(opt_.host, opt_.port) ? opt_.port : -1);
  if (port <= 0) fail("serve: cannot listen on ", opt_.host, ":", opt_.port, " (in use?)");
  if (listen_fd_ >= 0) ::listen(listen_fd_, SOMAXCONN);  // again: a longer backlog
  // Each request must arrive within --timeout of its connection opening or its previous request
  // ending, plus the keep-alive wait (5 s) a connection may idle between requests.
  reaper_ = std::make_unique<ConnectionReaper>(port, std::chrono::seconds(opt_.timeout_s + 5));
  watchdog_ = std::thread([this] { watchdog(); });
  return port;
}

void Server::run() {
  http_->listen_after_bind();
}

void Server::shutdown() {
  if (draining_.exchange(true)) return;
  drain_deadline_ = Clock::now() + std::chrono::seconds(opt_.shutdown_grace_s);
  live_cv_.notify_all();
  http_->stop();  // closes the listening socket; run() returns once every worker is done
}

void Server::log_request(const std::string& what, int status, double ms,
                         const std::string& detail) {
  char when[32];
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  std::lock_guard<std::mutex> lk(log_mu_);
  std::fprintf(stderr, "%s %s %d %.1fms%s%s\n", when, what.c_str(), status, ms,
               detail.empty() ? "" : " ", detail.c_str());
}

void Server::routes() {
  auto& h = *http_;
  // Auth and draining come before any route; 404s, 413s and the like get OpenAI's error shape.
  h.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    res.set_header("Access-Control-Allow-Origin", "*");
    if (req.method == "OPTIONS") return httplib::Server::HandlerResponse::Unhandled;
    // cpp-httplib 0.11 bounds bodies by their Content-Length only; a chunked one could grow
    // without limit, so it is refused before it is read.
    if (req.get_header_value("Transfer-Encoding").find("chunked") != std::string::npos) {
      res.set_header("Connection", "close");
      send_error(res, ApiError(411,
                               "send the request body with a Content-Length (chunked "
                               "request bodies are not accepted)",
                               "", "length_required"));
      return httplib::Server::HandlerResponse::Handled;
    }
    const bool api = req.path.rfind("/v1/", 0) == 0;
    if (api && !opt_.api_key.empty() &&
        req.get_header_value("Authorization") != "Bearer " + opt_.api_key) {
      send_error(res, ApiError(401, "Incorrect API key provided", "", "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  h.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404)
      send_error(res, ApiError(404, "no route " + req.method + " " + req.path, "", "not_found"));
    else if (res.status == 413)
      send_error(res, ApiError(413, "the request body is too large", "", "request_too_large"));
    else
      send_error(res, ApiError(res.status, "the request could not be read (" +
                                               std::to_string(res.status) + ")"));
  });
  h.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        send_error(res, ApiError(500, what));
      });
  h.Options(R"(/.*)", [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
    res.status = 204;
  });

  h.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(kChatPage, "text/html; charset=utf-8");
  });
  h.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    res.status = draining_ ? 503 : 200;
    res.set_content(draining_ ? R"({"status": "shutting down"})" : R"({"status": "ok"})",
                    "application/json");
  });
  h.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.render(engine_.stats()), "text/plain; version=0.0.4");
  });
  h.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    Json model = Json::object();
    model.set("id", Json(opt_.model_name));
    model.set("object", Json("model"));
    model.set("created", Json(int64_t(0)));
    model.set("owned_by", Json("hearth"));
    Json list = Json::object();
    list.set("object", Json("list"));
    list.set("data", Json(Json::Array{std::move(model)}));
    send_json(res, list.dump_python());
  });
  h.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    generate(req, res, /*chat=*/true);
  });
  h.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    generate(req, res, /*chat=*/false);
  });
  h.Post("/apply-template", [this](const httplib::Request& req, httplib::Response& res) {
    try {
      Json out = Json::object();
      out.set("prompt", Json(render_chat_prompt(parse_body(req.body), text_, opt_.limits)));
      send_json(res, out.dump_python());
    } catch (const ApiError& e) {
      send_error(res, e);
    }
  });
}

namespace {

// Holds one of the server's request places for as long as a request is in flight, and tells the
// reaper its connection is busy meanwhile.
struct Slot {
  Slot(Metrics& m, ConnectionReaper* reaper, int fd)
      : m_(m), reaper_(reaper), conn_(reaper ? reaper->started(fd) : 0) {
    ++m_.active;
  }
  ~Slot() {
    --m_.active;
    if (reaper_) reaper_->ended(conn_);
  }
  Metrics& m_;
  ConnectionReaper* reaper_;
  ino_t conn_;
};

std::string usage_detail(const RunOutcome& o) {
  const auto& mt = o.result.metrics;
  return "prompt=" + std::to_string(mt.prompt_tokens) +
         " cached=" + std::to_string(cached_tokens(mt)) +
         " gen=" + std::to_string(o.result.tokens.size()) + " finish=" + o.finish_reason;
}

}  // namespace

// One generation request: what it asked for, where its reply goes, and its place in the server.
struct Server::Call {
  Clock::time_point t0 = Clock::now();
  std::string what;  // "POST /v1/...", for the log
  bool chat = true;
  ApiRequest req;
  std::vector<int32_t> prompt;
  ResponseMeta meta;
  std::shared_ptr<Slot> slot;
  std::shared_ptr<Stream> stream;
};

void Server::generate(const httplib::Request& req, httplib::Response& res, bool chat) {
  auto call = std::make_shared<Call>();
  call->what = "POST " + req.path;
  call->chat = chat;
  // A non-streaming reply writes nothing until the end, so the watchdog watches its socket to
  // notice a client that went away; a stream's writes notice it, this just notices sooner.
  const int fd = client_socket(req.remote_addr, req.remote_port, req.local_port);
  call->slot = std::make_shared<Slot>(metrics_, reaper_.get(), fd);
  ++metrics_.requests;
  try {
    read_request(req, *call);
  } catch (const ApiError& e) {
    ++metrics_.errors;
    send_error(res, e);
    log_request(call->what, e.status, ms_since(call->t0), e.what());
    return;
  }
  call->meta = {random_id(chat ? "chatcmpl-" : "cmpl-"), int64_t(std::time(nullptr)),
                opt_.model_name, chat};
  call->stream = std::make_shared<Stream>();
  call->stream->peer_fd = fd;
  {
    std::lock_guard<std::mutex> lk(live_mu_);
    live_.insert(call->stream);
  }
  if (call->req.stream)
    answer_stream(call, res);
  else
    answer_whole(*call, res);
}

void Server::read_request(const httplib::Request& req, Call& call) {
  if (draining_) throw ApiError(503, "the server is shutting down", "", "shutting_down");
  if (metrics_.active > opt_.parallel + opt_.max_queue)
    throw ApiError(503, "the server is busy: too many requests in flight; retry later", "",
                   "server_busy");
  const Json body = parse_body(req.body);
  call.req = call.chat
                 ? parse_chat_request(body, text_, opt_.defaults, opt_.limits, opt_.model_name)
                 : parse_completion_request(body, opt_.defaults, opt_.limits, opt_.model_name);
  call.prompt = text_.tokenizer.encode(call.req.prompt);
  finalize_request(call.req, int(call.prompt.size()), opt_.limits);
  if (!call.req.seeded)
    call.req.gen.sampling.seed = (uint64_t(std::random_device{}()) << 32) | std::random_device{}();
}

RunOutcome Server::run(Call& call, const std::function<bool(std::vector<ReplyDelta>&)>& out) {
  Stream& stream = *call.stream;
  struct Leave {  // the registry, and the socket, which may close once the handler returns
    Server* s;
    std::shared_ptr<Stream> st;
    ~Leave() {
      st->peer_fd = -1;
      std::lock_guard<std::mutex> lk(s->live_mu_);
      s->live_.erase(st);
    }
  } leave{this, call.stream};
  const double started_ms = ms_since(call.t0);  // parsing and tokenizing count toward TTFT
  RunOutcome o = run_request(engine_, text_, call.req, call.prompt, out, &stream.cancel);
  const auto& mt = o.result.metrics;
  metrics_.prompt_tokens += mt.prompt_tokens;
  metrics_.cached_tokens += cached_tokens(mt);
  metrics_.generated_tokens += int64_t(o.result.tokens.size());
  if (o.finish_reason == "cancelled") ++metrics_.cancelled;
  if (o.first_token_ms >= 0) {
    metrics_.ttft.observe((started_ms + o.first_token_ms) / 1e3);
    if (o.result.tokens.size() > 1)
      metrics_.tpot.observe((o.last_token_ms - o.first_token_ms) / 1e3 /
                            double(o.result.tokens.size() - 1));
  }
  return o;
}

void Server::answer_whole(Call& call, httplib::Response& res) {
  Reply reply;
  try {
    RunOutcome o = run(call, [&](std::vector<ReplyDelta>& ds) {
      for (const ReplyDelta& d : ds) reply.add(d);
      return true;
    });
    if (o.finish_reason == "cancelled" && call.stream->client_left) {
      // Nobody is left to answer; 499 is nginx's name for it, for the log.
      log_request(call.what, 499, ms_since(call.t0), usage_detail(o) + " (client gone)");
      return;
    }
    if (o.finish_reason == "cancelled")
      throw ApiError(503, "the request was cancelled: the server is shutting down", "",
                     "shutting_down");
    send_json(res, call.chat
                       ? chat_response(call.meta, reply, o.finish_reason, o.result)
                       : completion_response(call.meta, reply.content, o.finish_reason, o.result));
    log_request(call.what, 200, ms_since(call.t0), usage_detail(o));
  } catch (const ApiError& e) {
    ++metrics_.errors;
    send_error(res, e);
    log_request(call.what, e.status, ms_since(call.t0), e.what());
  } catch (const std::exception& e) {
    ++metrics_.errors;
    send_error(res, ApiError(500, std::string("generation failed: ") + e.what()));
    log_request(call.what, 500, ms_since(call.t0), e.what());
  }
}

void Server::answer_stream(const std::shared_ptr<Call>& call, httplib::Response& res) {
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");  // nginx: pass each event on at once
  // The provider runs after the handler returns; `call` (and its slot) lives as long as it.
  res.set_chunked_content_provider("text/event-stream",
                                   [this, call](size_t, httplib::DataSink& sink) {
                                     stream_events(*call, sink);
                                     sink.done();
                                     return true;
                                   });
}

void Server::stream_events(Call& call, httplib::DataSink& sink) {
  Stream& stream = *call.stream;
  const ResponseMeta& meta = call.meta;
  {
    std::lock_guard<std::mutex> lk(stream.mu);
    stream.sink = &sink;
  }
  int tool_index = 0;
  auto write_deltas = [&](std::vector<ReplyDelta>& ds) {
    std::string events;
    for (const ReplyDelta& d : ds)
      events += call.chat ? delta_chunk(meta, d, tool_index) : completion_chunk(meta, d.text, "");
    return stream.write(events);
  };
  bool ok = true;
  if (call.chat) {
    Json first = Json::object();
    first.set("role", Json("assistant"));
    first.set("content", Json(""));
    ok = stream.write(chat_chunk(meta, std::move(first), ""));
  }
  int status = 200;
  std::string detail;
  if (ok) {
    try {
      RunOutcome o = run(call, write_deltas);
      detail = usage_detail(o);
      if (o.finish_reason == "cancelled" && !stream.gone()) {
        stream.write(sse(error_json(
            ApiError(503, "cancelled: the server is shutting down", "", "shutting_down"))));
      } else if (!stream.gone()) {
        stream.write(call.chat ? chat_chunk(meta, Json::object(), o.finish_reason)
                               : completion_chunk(meta, "", o.finish_reason));
        if (call.req.include_usage) stream.write(usage_chunk(meta, o.result));
        stream.write("data: [DONE]\n\n");
      }
    } catch (const std::exception& e) {
      ++metrics_.errors;
      status = 500;
      detail = e.what();
      stream.write(sse(error_json(ApiError(500, std::string("generation failed: ") + e.what()))));
    }
  }
  {
    std::lock_guard<std::mutex> lk(stream.mu);
    stream.sink = nullptr;
  }
  if (stream.gone()) detail += " (client gone)";
  log_request(call.what + " stream", status, ms_since(call.t0), detail);
}

void Server::watchdog() {
  bool busy_since_trim = false;
  for (;;) {
    std::vector<std::shared_ptr<Stream>> live;
    {
      std::unique_lock<std::mutex> lk(live_mu_);
      live_cv_.wait_for(lk, std::chrono::milliseconds(500));
      if (stop_watchdog_) return;
      live.assign(live_.begin(), live_.end());
    }
    // Once the server goes idle, hand the freed request buffers back to the system, so that its
    // memory after a burst of requests returns to what it was before (glibc keeps them otherwise).
    if (live.empty() && busy_since_trim) {
      malloc_trim(0);
      busy_since_trim = false;
    }
    busy_since_trim = busy_since_trim || !live.empty();
    if (reaper_) reaper_->sweep();
    const auto now = Clock::now();
    const bool past_grace = draining_ && now >= drain_deadline_;
    for (const std::shared_ptr<Stream>& s : live) {
      if (past_grace) s->cancel = true;
      const int fd = s->peer_fd;
      if (!s->heartbeat(now - kHeartbeatAfter) || (fd >= 0 && peer_closed(fd))) {
        s->client_left = true;
        s->cancel = true;
      }
    }
  }
}

}  // namespace hearth::serve
