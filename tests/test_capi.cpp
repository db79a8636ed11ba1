// The C API's behaviour, checked through include/hearth.h only (plus the stop-string filter, which
// is tested on its own): streaming equals the whole answer, cancellation from another thread,
// concurrency, error codes, struct_size versioning, the exported symbols of libhearth.so, and the
// installed package used the way an outside program uses it.
#include <doctest/doctest.h>
#include <simdjson.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "hearth.h"
#include "models/stop_filter.h"
#include "tests/vulkan_target.h"

namespace fs = std::filesystem;

namespace {

const std::string kModels = std::string(HEARTH_SHARED_DIR) + "/fixtures/models/";
const std::string kTiny = kModels + "tiny-tied-bf16";
const std::string kSharded = kModels + "tiny-untied-sharded-f32";

struct TempDir {
  fs::path path;
  TempDir() {
    static std::atomic<int> counter{0};
    path = fs::temp_directory_path() /
           ("hearth_capi_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Owning wrappers so a failed CHECK cannot leak a handle.
struct Model {
  hearth_model* m = nullptr;
  explicit Model(const std::string& dir, int threads = 1, bool hugepages = false,
                 const char* backend = nullptr) {
    hearth_model_params p = hearth_model_params_default();
    p.n_threads = threads;
    p.prefault = 0;
    p.hugepages = hugepages;
    p.backend = backend;
    hearth_status s = hearth_model_load(dir.c_str(), &p, &m);
    REQUIRE_MESSAGE(s == HEARTH_OK, hearth_last_error());
  }
  ~Model() { hearth_model_free(m); }
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
};

struct Session {
  hearth_session* s = nullptr;
  explicit Session(hearth_model* m, const hearth_session_params* p = nullptr) {
    hearth_status st = hearth_session_new(m, p, &s);
    REQUIRE_MESSAGE(st == HEARTH_OK, hearth_last_error());
  }
  ~Session() { hearth_session_free(s); }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
};

struct Stream {
  std::string text;
  std::vector<std::string> pieces;
  std::vector<int32_t> tokens;
  int final_calls = 0;
};

int collect(const char* text, size_t len, int32_t token, void* user) {
  auto* s = static_cast<Stream*>(user);
  s->text.append(text, len);
  s->pieces.emplace_back(text, len);
  if (token == HEARTH_TOKEN_NONE)
    ++s->final_calls;
  else
    s->tokens.push_back(token);
  return 1;
}

std::string take(char* p) {
  std::string s = p ? p : "";
  hearth_free(p);
  return s;
}

// Strict UTF-8 well-formedness (no overlongs, surrogates or code points past U+10FFFF).
bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int n;
    uint32_t cp;
    if (c < 0x80)
      n = 0, cp = c;
    else if ((c & 0xE0) == 0xC0)
      n = 1, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0)
      n = 2, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0)
      n = 3, cp = c & 0x07;
    else
      return false;
    if (i + size_t(n) >= s.size()) return false;
    for (int k = 1; k <= n; ++k) {
      const unsigned char d = static_cast<unsigned char>(s[i + size_t(k)]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += size_t(n) + 1;
  }
  return true;
}

std::vector<int32_t> tokenize(hearth_model* m, const std::string& text) {
  int32_t* ids = nullptr;
  size_t n = 0;
  REQUIRE(hearth_tokenize(m, text.data(), text.size(), &ids, &n) == HEARTH_OK);
  std::vector<int32_t> v(ids, ids + n);
  hearth_free(ids);
  return v;
}

hearth_generate_params greedy(int max_new_tokens) {
  hearth_generate_params g = hearth_generate_params_default();
  g.max_new_tokens = max_new_tokens;
  g.ignore_eos = 1;  // random weights: a fixed length keeps the checks meaningful
  return g;
}

// A call that must fail with `want` and a message containing `needle`.
void fails(hearth_status got, hearth_status want, const std::string& needle) {
  CHECK(got == want);
  const std::string msg = hearth_last_error();
  CAPTURE(msg);
  CHECK(msg.find(needle) != std::string::npos);
}

hearth_metrics metrics_of(hearth_session* s) {
  hearth_metrics m;
  m.struct_size = sizeof m;
  REQUIRE(hearth_session_get_metrics(s, &m) == HEARTH_OK);
  return m;
}

struct CmdResult {
  int status = -1;
  std::string out;
};

CmdResult run(const std::string& cmd) {
  TempDir d;
  const fs::path out = d.path / "out";
  const int st = std::system(("(" + cmd + ") >" + out.string() + " 2>&1").c_str());
  CmdResult r;
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = slurp(out);
  return r;
}

// Parameters of a safetensors checkpoint, counted from the file headers.
// The parameters the checkpoint's files hold; with experts_per_tok, those a token runs through:
// of each layer's experts (".mlp.experts." tensors), experts_per_tok / n_experts.
uint64_t count_checkpoint_params(const std::string& dir, int experts_per_tok = 0,
                                 int n_experts = 0) {
  uint64_t total = 0, expert = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".safetensors") continue;
    std::ifstream f(e.path(), std::ios::binary);
    uint64_t n = 0;
    f.read(reinterpret_cast<char*>(&n), 8);
    std::string header(n, '\0');
    f.read(header.data(), std::streamsize(n));
    simdjson::dom::parser parser;
    simdjson::dom::object obj = parser.parse(header).get_object();
    for (auto kv : obj) {
      if (kv.key == "__metadata__") continue;
      uint64_t numel = 1;
      for (auto d : kv.value["shape"].get_array()) numel *= uint64_t(d.get_int64());
      total += numel;
      if (std::string_view(kv.key).find(".mlp.experts.") != std::string_view::npos) expert += numel;
    }
  }
  if (n_experts > 0) total -= expert / uint64_t(n_experts) * uint64_t(n_experts - experts_per_tok);
  return total;
}

}  // namespace

TEST_SUITE("capi") {
  TEST_CASE("stop filter holds back possible stop-string prefixes and cuts at a match") {
    hearth::StopFilter f({"o W", "xyz"});
    std::string out = f.push("Hel");
    out += f.push("lo");  // "o" may start "o W": held
    CHECK(out == "Hell");
    out += f.push(" Wor");
    CHECK(f.matched());
    CHECK(out == "Hell");
    CHECK(f.push("more") == "");
    CHECK(f.finish() == "");

    hearth::StopFilter g({"abc"});
    std::string o = g.push("xa");
    CHECK(o == "x");
    o += g.push("bx");  // "ab" then "x": not a stop string after all
    CHECK(o == "xabx");
    o += g.push("ab");
    o += g.finish();
    CHECK(o == "xabxab");
    CHECK(!g.matched());

    hearth::StopFilter none({});
    CHECK(none.push("abc") == "abc");
  }

  TEST_CASE("version, status names and defaults") {
    int ma = -1, mi = -1, pa = -1;
    const std::string v = hearth_version(&ma, &mi, &pa);
    CHECK(v == std::to_string(HEARTH_VERSION_MAJOR) + "." + std::to_string(HEARTH_VERSION_MINOR) +
                   "." + std::to_string(HEARTH_VERSION_PATCH));
    CHECK(ma == HEARTH_VERSION_MAJOR);
    CHECK(std::string(hearth_status_name(HEARTH_ERR_BUSY)) == "HEARTH_ERR_BUSY");
    // What a C caller can pass: any int in the enum's place.
    hearth_status unknown;
    const int raw = 1234;
    std::memcpy(&unknown, &raw, sizeof raw);
    CHECK(std::string(hearth_status_name(unknown)) == "HEARTH_ERR_UNKNOWN");
    const hearth_generate_params g = hearth_generate_params_default();
    CHECK(g.struct_size == sizeof g);
    CHECK(g.max_new_tokens == 512);
    CHECK(g.temperature == 0.f);
    CHECK(g.top_p == 1.f);
    const hearth_chat_params c = hearth_chat_params_default();
    CHECK(c.add_generation_prompt == 1);
    CHECK(c.thinking == HEARTH_THINKING_DEFAULT);
  }

  TEST_CASE("struct_size: older, newer and wrong sizes") {
    Model model(kTiny);
    hearth_session* s = nullptr;
    // Too small for any version.
    hearth_session_params sp = hearth_session_params_default();
    sp.struct_size = 4;
    CHECK(hearth_session_new(model.m, &sp, &s) == HEARTH_ERR_INVALID_ARGUMENT);
    CHECK(s == nullptr);
    CHECK(std::string(hearth_last_error()).find("struct_size") != std::string::npos);

    // A newer program's larger struct: fine while the fields this library does not know are 0.
    struct Newer {
      hearth_session_params p;
      int64_t future_field;
    } newer{};
    CHECK(hearth_session_params_init(&newer.p, sizeof newer) == HEARTH_OK);
    CHECK(newer.p.struct_size == sizeof newer);
    CHECK(newer.future_field == 0);
    CHECK(hearth_session_new(model.m, &newer.p, &s) == HEARTH_OK);
    hearth_session_free(s);
    s = nullptr;
    newer.future_field = 7;
    CHECK(hearth_session_new(model.m, &newer.p, &s) == HEARTH_ERR_INVALID_ARGUMENT);
    CHECK(std::string(hearth_last_error()).find("does not know") != std::string::npos);

    // Output structs: a larger one gets zeroes past what the library knows.
    struct NewerInfo {
      hearth_model_info info;
      int64_t future_field;
    } ni;
    std::memset(&ni, 0xAB, sizeof ni);
    ni.info.struct_size = sizeof ni;
    CHECK(hearth_model_get_info(model.m, &ni.info) == HEARTH_OK);
    CHECK(ni.info.struct_size == sizeof ni);
    CHECK(ni.future_field == 0);
    CHECK(ni.info.n_layers == 2);
    // An older program's smaller one (before random_weights and the experts were added) gets
    // what it has, and nothing is written past it.
    struct OlderInfo {
      hearth_model_info info;
    } oi;
    std::memset(&oi, 0xAB, sizeof oi);
    oi.info.struct_size = offsetof(hearth_model_info, random_weights);
    CHECK(hearth_model_get_info(model.m, &oi.info) == HEARTH_OK);
    CHECK(oi.info.n_layers == 2);
    CHECK(oi.info.random_weights == int32_t(0xABABABAB));
    hearth_metrics older_m;
    std::memset(&older_m, 0xAB, sizeof older_m);
    older_m.struct_size = offsetof(hearth_metrics, dropped_messages);
    Session older_s(model.m);
    CHECK(hearth_session_get_metrics(older_s.s, &older_m) == HEARTH_OK);
    CHECK(older_m.dropped_messages == int32_t(0xABABABAB));
    hearth_metrics m;
    m.struct_size = 8;
    Session sess(model.m);
    CHECK(hearth_session_get_metrics(sess.s, &m) == HEARTH_ERR_INVALID_ARGUMENT);
    CHECK(hearth_model_params_init(nullptr, sizeof(hearth_model_params)) ==
          HEARTH_ERR_INVALID_ARGUMENT);
    hearth_model_params mp;
    CHECK(hearth_model_params_init(&mp, 2) == HEARTH_ERR_INVALID_ARGUMENT);
    REQUIRE(hearth_model_params_init(&mp, sizeof mp) == HEARTH_OK);
    CHECK(mp.kv_type == HEARTH_KV_F16);  // the CLI's default too
  }

  TEST_CASE("model info and parameter count") {
    for (const std::string& dir :
         {kTiny, kSharded, kModels + "moe-tiny-bf16", kModels + "moe-tiny-f32-sharded"}) {
      CAPTURE(dir);
      Model model(dir, 2);
      hearth_model_info info;
      info.struct_size = sizeof info;
      REQUIRE(hearth_model_get_info(model.m, &info) == HEARTH_OK);
      simdjson::dom::parser parser;
      const simdjson::dom::element config = parser.load(dir + "/config.json");
      CHECK(info.n_layers == int64_t(config["num_hidden_layers"]));
      CHECK(info.vocab_size == int64_t(config["vocab_size"]));
      CHECK(info.hidden_size == int64_t(config["hidden_size"]));
      CHECK(info.n_kv_heads == int64_t(config["num_key_value_heads"]));
      CHECK(info.n_threads == 2);
      CHECK(std::string(info.path) == dir);
      CHECK(std::string(info.backend).rfind("cpu", 0) == 0);
      CHECK(info.n_params == count_checkpoint_params(dir));
      const int64_t experts = config["num_experts"].is_int64() ? int64_t(config["num_experts"]) : 0;
      CHECK(info.n_experts == experts);
      if (experts > 0) {
        CHECK(info.n_experts_per_tok == int64_t(config["num_experts_per_tok"]));
        CHECK(info.n_active_params ==
              count_checkpoint_params(dir, info.n_experts_per_tok, info.n_experts));
        CHECK(info.n_active_params < info.n_params);
      } else {
        CHECK(info.n_active_params == info.n_params);
      }
      CHECK(std::string(info.dtype) ==
            (dir == kTiny || dir.find("moe-tiny-bf16") != std::string::npos ? "BF16" : "F32"));
      CHECK(info.random_weights == 0);  // the fixtures' config.json has no "hearth_standin"
    }
  }

  TEST_CASE("load progress reaches every stage in order and can cancel at each") {
    struct Log {
      std::vector<std::string> stages;
      std::vector<float> fractions;
      std::string cancel_at;
    };
    auto cb = [](float f, const char* stage, void* user) -> int {
      auto* log = static_cast<Log*>(user);
      log->fractions.push_back(f);
      if (log->stages.empty() || log->stages.back() != stage) log->stages.push_back(stage);
      return log->cancel_at != stage;
    };
    Log log;
    hearth_model_params p = hearth_model_params_default();
    p.progress = cb;
    p.progress_user_data = &log;
    hearth_model* m = nullptr;
    REQUIRE(hearth_model_load(kSharded.c_str(), &p, &m) == HEARTH_OK);
    hearth_model_free(m);
    CHECK(log.stages == std::vector<std::string>{"start", "config", "checkpoint", "weights",
                                                 "graph", "tokenizer", "prefault", "backend",
                                                 "done"});
    CHECK(log.fractions.back() == 1.f);
    CHECK(std::is_sorted(log.fractions.begin(), log.fractions.end()));
    const std::vector<std::string> stages = log.stages;
    for (const std::string& stage : stages) {
      CAPTURE(stage);
      Log c;
      c.cancel_at = stage;
      p.progress_user_data = &c;
      m = reinterpret_cast<hearth_model*>(&c);
      CHECK(hearth_model_load(kSharded.c_str(), &p, &m) == HEARTH_ERR_CANCELLED);
      CHECK(m == nullptr);
      CHECK(std::string(hearth_last_error()).find("cancelled") != std::string::npos);
      CHECK(c.stages.back() == stage);
    }
  }

  TEST_CASE("bad paths and bad arguments return codes and messages") {
    hearth_model* m = nullptr;
    fails(hearth_model_load(nullptr, nullptr, &m), HEARTH_ERR_INVALID_ARGUMENT, "path is NULL");
    fails(hearth_model_load("", nullptr, &m), HEARTH_ERR_INVALID_ARGUMENT, "empty");
    fails(hearth_model_load(kTiny.c_str(), nullptr, nullptr), HEARTH_ERR_INVALID_ARGUMENT,
          "out_model");
    fails(hearth_model_load("/no/such/folder", nullptr, &m), HEARTH_ERR_NOT_FOUND,
          "/no/such/folder");
    CHECK(m == nullptr);
    TempDir d;
    {
      std::ofstream(d.path / "model.gguf", std::ios::binary) << std::string("GGUF\3\0\0\0", 8);
      fails(hearth_model_load((d.path / "model.gguf").c_str(), nullptr, &m), HEARTH_ERR_UNSUPPORTED,
            "a GGUF file");
      fs::remove(d.path / "model.gguf");
    }
    fails(hearth_model_load(d.path.c_str(), nullptr, &m), HEARTH_ERR_NOT_FOUND, "config.json");
    fs::copy_file(kTiny + "/config.json", d.path / "config.json");
    fs::copy_file(kTiny + "/tokenizer.json", d.path / "tokenizer.json");
    fails(hearth_model_load(d.path.c_str(), nullptr, &m), HEARTH_ERR_NOT_FOUND,
          "model.safetensors");
    // A corrupt config is a model error naming the file.
    fs::copy_file(kTiny + "/model.safetensors", d.path / "model.safetensors");
    std::ofstream(d.path / "config.json", std::ios::trunc) << "{\"hidden_size\": ";
    fails(hearth_model_load(d.path.c_str(), nullptr, &m), HEARTH_ERR_MODEL, "config.json");
    hearth_model_params p = hearth_model_params_default();
    p.backend = "no-such-backend";
    fails(hearth_model_load(kTiny.c_str(), &p, &m), HEARTH_ERR_UNSUPPORTED, "no-such-backend");
    p = hearth_model_params_default();
    const int bad_kv = 9;  // as a C caller could store it
    std::memcpy(&p.kv_type, &bad_kv, sizeof bad_kv);
    fails(hearth_model_load(kTiny.c_str(), &p, &m), HEARTH_ERR_INVALID_ARGUMENT, "kv_type");
    p = hearth_model_params_default();
    p.n_threads = -1;
    fails(hearth_model_load(kTiny.c_str(), &p, &m), HEARTH_ERR_INVALID_ARGUMENT, "n_threads");
    CHECK(m == nullptr);

    Model model(kTiny);
    CHECK(hearth_last_error() == std::string());
    Session s(model.m);
    char* out = reinterpret_cast<char*>(&p);
    fails(hearth_session_generate(nullptr, "x", nullptr, &out), HEARTH_ERR_INVALID_ARGUMENT,
          "session is NULL");
    CHECK(out == nullptr);
    fails(hearth_session_generate(s.s, nullptr, nullptr, &out), HEARTH_ERR_INVALID_ARGUMENT,
          "prompt is NULL");
    fails(hearth_session_generate(s.s, "", nullptr, &out), HEARTH_ERR_INVALID_ARGUMENT, "empty");
    const int32_t bad_ids[] = {1, 999999};
    fails(hearth_session_generate_tokens(s.s, bad_ids, 2, nullptr, &out),
          HEARTH_ERR_INVALID_ARGUMENT, "999999");
    hearth_generate_params g = greedy(4);
    g.max_new_tokens = -1;
    fails(hearth_session_generate(s.s, "hi", &g, &out), HEARTH_ERR_INVALID_ARGUMENT,
          "max_new_tokens");
    g = greedy(4);
    g.top_p = 2.f;
    fails(hearth_session_generate(s.s, "hi", &g, &out), HEARTH_ERR_INVALID_ARGUMENT, "top_p");
    g = greedy(4);
    g.n_stop_strings = 2;
    fails(hearth_session_generate(s.s, "hi", &g, &out), HEARTH_ERR_INVALID_ARGUMENT,
          "stop_strings");
    const char* empty_stop[] = {""};
    g.stop_strings = empty_stop;
    g.n_stop_strings = 1;
    fails(hearth_session_generate(s.s, "hi", &g, &out), HEARTH_ERR_INVALID_ARGUMENT,
          "stop_strings[0]");
    g = greedy(4);
    g.struct_size = 1;
    fails(hearth_session_generate(s.s, "hi", &g, &out), HEARTH_ERR_INVALID_ARGUMENT, "struct_size");
    hearth_chat_params c = hearth_chat_params_default();
    c.thinking = 5;
    fails(hearth_session_chat(s.s, "hi", &c, nullptr, &out), HEARTH_ERR_INVALID_ARGUMENT,
          "thinking");
    c = hearth_chat_params_default();
    c.tools_json = "[{";
    fails(hearth_session_chat(s.s, "hi", &c, nullptr, &out), HEARTH_ERR_INVALID_ARGUMENT,
          "tools_json");
    c.tools_json = "{}";
    fails(hearth_session_chat(s.s, "hi", &c, nullptr, &out), HEARTH_ERR_INVALID_ARGUMENT, "array");
    size_t n = 99;
    REQUIRE(hearth_session_message_count(s.s, &n) == HEARTH_OK);
    CHECK(n == 0);  // failed turns leave no trace
    hearth_message msg;
    fails(hearth_session_get_message(s.s, 0, &msg), HEARTH_ERR_INVALID_ARGUMENT, "out of range");
    CHECK(msg.role == nullptr);
    fails(hearth_tokenize(model.m, nullptr, 3, nullptr, nullptr), HEARTH_ERR_INVALID_ARGUMENT,
          "text is NULL");
    fails(hearth_apply_chat_template_json(model.m, "not json", nullptr, &out),
          HEARTH_ERR_INVALID_ARGUMENT, "messages_json");
    hearth_message null_role{nullptr, "x"};
    fails(hearth_apply_chat_template(model.m, &null_role, 1, nullptr, &out),
          HEARTH_ERR_INVALID_ARGUMENT, "messages[0]");
    hearth_session_params sp = hearth_session_params_default();
    sp.context_length = 1 << 30;
    hearth_session* s2 = nullptr;
    fails(hearth_session_new(model.m, &sp, &s2), HEARTH_ERR_INVALID_ARGUMENT, "context_length");

    // The message is per thread: another thread's call does not see this thread's error.
    std::string other;
    std::thread([&] { other = hearth_last_error(); }).join();
    CHECK(other.empty());
    CHECK(std::string(hearth_last_error()).find("context_length") != std::string::npos);
  }

  TEST_CASE("the Vulkan backend by name and device: the CPU's greedy answer, clear refusals") {
    if (!hearth::test::vulkan_device_here()) return;
    hearth_model_params p = hearth_model_params_default();
    p.backend = "vulkan";
    p.device = 99;
    hearth_model* bad = nullptr;
    fails(hearth_model_load(kTiny.c_str(), &p, &bad), HEARTH_ERR_UNSUPPORTED, "no device 99");
    p.device = -1;
    fails(hearth_model_load(kTiny.c_str(), &p, &bad), HEARTH_ERR_INVALID_ARGUMENT, "device");
    CHECK(bad == nullptr);
    Model vk(kTiny, 1, false, "vulkan"), cpu(kTiny, 1, false, "cpu");
    hearth_model_info info;
    info.struct_size = sizeof info;
    REQUIRE(hearth_model_get_info(vk.m, &info) == HEARTH_OK);
    CHECK(std::string(info.backend).rfind("vulkan 0: ", 0) == 0);
    std::string answers[2];
    Model* models[2] = {&vk, &cpu};
    for (int i = 0; i < 2; ++i) {
      Session s(models[i]->m);
      hearth_generate_params g = greedy(24);
      char* out = nullptr;
      REQUIRE(hearth_session_generate(s.s, "Hello there", &g, &out) == HEARTH_OK);
      answers[i] = out;
      hearth_free(out);
    }
    CHECK(!answers[0].empty());
    CHECK(answers[0] == answers[1]);
  }

  TEST_CASE("a prompt longer than the session's context is refused") {
    Model model(kTiny);
    hearth_session_params sp = hearth_session_params_default();
    sp.context_length = 16;
    Session s(model.m, &sp);
    const std::vector<int32_t> ids = tokenize(model.m, std::string(200, 'a') + " b c d e f g h");
    REQUIRE(ids.size() >= 16);
    char* out = nullptr;
    hearth_generate_params g = greedy(4);
    CHECK(hearth_session_generate_tokens(s.s, ids.data(), ids.size(), &g, &out) ==
          HEARTH_ERR_CONTEXT_FULL);
    // A prompt that fits gets at most what the context leaves.
    g = greedy(100);
    REQUIRE(hearth_session_generate_tokens(s.s, ids.data(), 10, &g, &out) == HEARTH_OK);
    hearth_free(out);
    const hearth_metrics m = metrics_of(s.s);
    CHECK(m.new_tokens == 6);
    CHECK(m.finish_reason == HEARTH_FINISH_LENGTH);
  }

  TEST_CASE("tokenize, detokenize and chat templates") {
    Model model(kTiny);
    const std::string text = "Hello, wörld! <|im_end|> 你好";
    const std::vector<int32_t> ids = tokenize(model.m, text);
    char* out = nullptr;
    size_t len = 0;
    REQUIRE(hearth_detokenize(model.m, ids.data(), ids.size(), 0, &out, &len) == HEARTH_OK);
    CHECK(len == text.size());
    CHECK(take(out) == text);
    REQUIRE(hearth_detokenize(model.m, ids.data(), ids.size(), 1, &out, nullptr) == HEARTH_OK);
    CHECK(take(out) == "Hello, wörld!  你好");
    int32_t* none = nullptr;
    size_t n = 5;
    CHECK(hearth_tokenize(model.m, "", 0, &none, &n) == HEARTH_OK);
    CHECK(none == nullptr);
    CHECK(n == 0);
    // Length-limited input stops at the length, not at the NUL.
    CHECK(tokenize(model.m, "Hello").size() ==
          tokenize(model.m, std::string("Hello, x", 5)).size());

    const hearth_message msgs[] = {{"system", "Be brief."}, {"user", "Hi"}};
    hearth_chat_params c = hearth_chat_params_default();
    c.thinking = 0;
    REQUIRE(hearth_apply_chat_template(model.m, msgs, 2, &c, &out) == HEARTH_OK);
    const std::string prompt = take(out);
    CHECK(prompt ==
          "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
          "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    REQUIRE(hearth_apply_chat_template_json(
                model.m,
                R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}])", &c,
                &out) == HEARTH_OK);
    CHECK(take(out) == prompt);
    c = hearth_chat_params_default();
    c.tools_json =
        R"([{"type":"function","function":{"name":"get_time","description":"Now","parameters":{}}}])";
    REQUIRE(hearth_apply_chat_template(model.m, msgs + 1, 1, &c, &out) == HEARTH_OK);
    const std::string with_tools = take(out);
    CHECK(with_tools.find("<tools>") != std::string::npos);
    CHECK(with_tools.find("get_time") != std::string::npos);
  }

  TEST_CASE("streamed pieces concatenate to the non-streamed answer") {
    Model model(kTiny);
    const std::vector<int32_t> prompt = tokenize(model.m, "Once upon a time");
    for (float temperature : {0.f, 0.9f}) {
      CAPTURE(temperature);
      hearth_generate_params g = greedy(40);
      g.temperature = temperature;
      g.seed = 42;
      Session a(model.m), b(model.m);
      Stream st;
      g.on_text = collect;
      g.user_data = &st;
      char* out = nullptr;
      REQUIRE(hearth_session_generate_tokens(a.s, prompt.data(), prompt.size(), &g, &out) ==
              HEARTH_OK);
      const std::string streamed_answer = take(out);
      g.on_text = nullptr;
      REQUIRE(hearth_session_generate_tokens(b.s, prompt.data(), prompt.size(), &g, &out) ==
              HEARTH_OK);
      const std::string plain_answer = take(out);
      CHECK(st.text == streamed_answer);
      CHECK(plain_answer == streamed_answer);
      CHECK(st.tokens.size() == 40);
      CHECK(st.final_calls <= 1);
      // Every piece but a final flush is complete UTF-8; the whole equals a batch decode.
      for (size_t i = 0; i + 1 < st.pieces.size(); ++i) CHECK(valid_utf8(st.pieces[i]));
      char* decoded = nullptr;
      REQUIRE(hearth_detokenize(model.m, st.tokens.data(), st.tokens.size(), 1, &decoded,
                                nullptr) == HEARTH_OK);
      CHECK(take(decoded) == plain_answer);
    }
  }

  TEST_CASE("weights read into huge pages give the same answer as mapped ones") {
    Model mapped(kTiny), copied(kTiny, 1, true);
    const std::vector<int32_t> prompt = tokenize(mapped.m, "Once upon a time");
    std::string answers[2];
    for (int i = 0; i < 2; ++i) {
      Session s(i ? copied.m : mapped.m);
      hearth_generate_params g = greedy(24);
      char* out = nullptr;
      REQUIRE(hearth_session_generate_tokens(s.s, prompt.data(), prompt.size(), &g, &out) ==
              HEARTH_OK);
      answers[i] = take(out);
    }
    CHECK(!answers[0].empty());
    CHECK(answers[0] == answers[1]);
  }

  TEST_CASE("a weight cache folder: written by the first load, the same answer from the next") {
    const fs::path dir =
        fs::temp_directory_path() / ("hearth_capi_wc_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    std::string answers[3];
    for (int i = 0; i < 3; ++i) {
      hearth_model_params p = hearth_model_params_default();
      p.n_threads = 1;
      p.prefault = 0;
      if (i) p.weight_cache_dir = dir.c_str();
      hearth_model* m = nullptr;
      REQUIRE_MESSAGE(hearth_model_load(kTiny.c_str(), &p, &m) == HEARTH_OK, hearth_last_error());
      CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == (i ? 1 : 0));
      {
        Session s(m);
        const std::vector<int32_t> prompt = tokenize(m, "Once upon a time");
        hearth_generate_params g = greedy(24);
        char* out = nullptr;
        REQUIRE(hearth_session_generate_tokens(s.s, prompt.data(), prompt.size(), &g, &out) ==
                HEARTH_OK);
        answers[i] = take(out);
      }
      hearth_model_free(m);
    }
    CHECK(!answers[0].empty());
    CHECK(answers[1] == answers[0]);
    CHECK(answers[2] == answers[0]);
    hearth_model_params p = hearth_model_params_default();
    p.weight_cache_dir = "/nonexistent/hearth-cache";
    hearth_model* m = nullptr;
    CHECK(hearth_model_load(kTiny.c_str(), &p, &m) == HEARTH_ERR_INVALID_ARGUMENT);
    CHECK(std::string(hearth_last_error()).find("weight_cache_dir") != std::string::npos);
    fs::remove_all(dir);
  }

  TEST_CASE("stop strings end the text just before them") {
    Model model(kTiny);
    const std::vector<int32_t> prompt = tokenize(model.m, "The quick brown fox");
    Session a(model.m);
    hearth_generate_params g = greedy(48);
    char* out = nullptr;
    REQUIRE(hearth_session_generate_tokens(a.s, prompt.data(), prompt.size(), &g, &out) ==
            HEARTH_OK);
    const std::string full = take(out);
    // A stop string from the middle of the greedy answer, on UTF-8 character boundaries.
    auto boundary = [&](size_t i) {
      while (i < full.size() && (static_cast<unsigned char>(full[i]) & 0xC0) == 0x80) ++i;
      return i;
    };
    const size_t b0 = boundary(full.size() / 2), b1 = boundary(b0 + 3);
    REQUIRE(b1 <= full.size());
    REQUIRE(b1 > b0);
    const std::string stop = full.substr(b0, b1 - b0);
    const std::string expected = full.substr(0, full.find(stop));
    CAPTURE(full);
    CAPTURE(stop);

    Session b(model.m);
    Stream st;
    const char* stops[] = {"never appears \x01", stop.c_str()};
    g.stop_strings = stops;
    g.n_stop_strings = 2;
    g.on_text = collect;
    g.user_data = &st;
    REQUIRE(hearth_session_generate_tokens(b.s, prompt.data(), prompt.size(), &g, &out) ==
            HEARTH_OK);
    CHECK(take(out) == expected);
    CHECK(st.text == expected);
    CHECK(metrics_of(b.s).finish_reason == HEARTH_FINISH_STOP_STRING);
    CHECK(metrics_of(b.s).new_tokens < 48);
  }

  TEST_CASE("the streaming callback can stop generation") {
    Model model(kTiny);
    Session s(model.m);
    struct Count {
      int n = 0;
      std::string text;
    } c;
    hearth_generate_params g = greedy(64);
    g.on_text = [](const char* t, size_t len, int32_t tok, void* u) -> int {
      auto* c = static_cast<Count*>(u);
      c->text.append(t, len);
      return tok == HEARTH_TOKEN_NONE || ++c->n < 5;
    };
    g.user_data = &c;
    char* out = nullptr;
    REQUIRE(hearth_session_generate(s.s, "Hello there", &g, &out) == HEARTH_OK);
    CHECK(take(out) == c.text);
    CHECK(c.n == 5);
    const hearth_metrics m = metrics_of(s.s);
    CHECK(m.new_tokens == 5);
    CHECK(m.finish_reason == HEARTH_FINISH_CALLBACK);
  }

  TEST_CASE("cancel from another thread stops within one decode step") {
    Model model(kTiny);
    Session s(model.m);
    struct Shared {
      hearth_session* s;
      std::mutex mu;
      std::condition_variable cv;
      int tokens = 0;
      bool request = false, cancelled = false;
      hearth_status busy_status = HEARTH_OK;
    } sh;
    sh.s = s.s;
    // At token 6 the callback asks the other thread to cancel and waits until it has, so the
    // cancel certainly lands between two decode steps; the next step must not run.
    std::thread canceller([&] {
      std::unique_lock<std::mutex> lock(sh.mu);
      sh.cv.wait(lock, [&] { return sh.request; });
      char* out = nullptr;
      sh.busy_status = hearth_session_generate(sh.s, "x", nullptr, &out);  // in use: refused
      hearth_session_cancel(sh.s);
      sh.cancelled = true;
      sh.cv.notify_all();
    });
    hearth_generate_params g = greedy(2000);
    g.on_text = [](const char*, size_t, int32_t tok, void* u) -> int {
      auto* sh = static_cast<Shared*>(u);
      if (tok == HEARTH_TOKEN_NONE) return 1;
      std::unique_lock<std::mutex> lock(sh->mu);
      if (++sh->tokens == 6) {
        sh->request = true;
        sh->cv.notify_all();
        sh->cv.wait(lock, [&] { return sh->cancelled; });
      }
      return 1;
    };
    g.user_data = &sh;
    char* out = nullptr;
    const hearth_status st = hearth_session_generate(s.s, "Tell me a very long story", &g, &out);
    canceller.join();
    REQUIRE(st == HEARTH_OK);
    hearth_free(out);
    CHECK(sh.busy_status == HEARTH_ERR_BUSY);
    const hearth_metrics m = metrics_of(s.s);
    CHECK(m.finish_reason == HEARTH_FINISH_CANCELLED);
    CHECK(m.new_tokens == 6);
    CHECK(sh.tokens == 6);

    // The next generation starts uncancelled, and the session still works.
    g = greedy(3);
    REQUIRE(hearth_session_generate(s.s, "Again", &g, &out) == HEARTH_OK);
    hearth_free(out);
    CHECK(metrics_of(s.s).new_tokens == 3);
  }

  TEST_CASE("multi-turn chat keeps messages and reuses the cache") {
    Model model(kTiny);
    hearth_session_params sp = hearth_session_params_default();
    sp.system_prompt = "You are terse.";
    Session s(model.m, &sp);
    hearth_generate_params g = greedy(12);
    hearth_chat_params c = hearth_chat_params_default();
    c.thinking = 0;
    char* out = nullptr;
    REQUIRE(hearth_session_chat(s.s, "First question", &c, &g, &out) == HEARTH_OK);
    const std::string r1 = take(out);
    const hearth_metrics m1 = metrics_of(s.s);
    CHECK(m1.prefill_tokens == m1.prompt_tokens);
    REQUIRE(hearth_session_chat(s.s, "Second question", &c, &g, &out) == HEARTH_OK);
    const std::string r2 = take(out);
    const hearth_metrics m2 = metrics_of(s.s);
    CHECK(m2.prompt_tokens > m1.prompt_tokens);
    // Only the new turn is computed: the reply's last token, the template's closing of the reply
    // (its end token too when the length limit cut it) and the new user turn. The template's
    // re-rendering of the reply (without the empty think block) is not what the cache holds.
    const std::string turn2 =
        std::string(m1.finish_reason == HEARTH_FINISH_LENGTH ? "<|im_end|>" : "") +
        "\n<|im_start|>user\nSecond question<|im_end|>\n<|im_start|>assistant\n<think>\n\n"
        "</think>\n\n";
    CHECK(m2.prefill_tokens == 1 + int(tokenize(model.m, turn2).size()));
    CHECK(m2.prompt_tokens ==
          m1.prompt_tokens + m1.new_tokens + int(tokenize(model.m, turn2).size()));
    CHECK(m2.cached_tokens > 0);
    CHECK(m2.kv_bytes > 0);

    size_t n = 0;
    REQUIRE(hearth_session_message_count(s.s, &n) == HEARTH_OK);
    REQUIRE(n == 5);
    const char* roles[] = {"system", "user", "assistant", "user", "assistant"};
    const std::string contents[] = {"You are terse.", "First question", r1, "Second question", r2};
    for (size_t i = 0; i < n; ++i) {
      hearth_message msg;
      REQUIRE(hearth_session_get_message(s.s, i, &msg) == HEARTH_OK);
      CHECK(std::string(msg.role) == roles[i]);
      CHECK(std::string(msg.content) == contents[i]);
    }

    // The session's history renders to the same prompt as the template applied by hand.
    std::vector<hearth_message> msgs(n);
    for (size_t i = 0; i < n; ++i) hearth_session_get_message(s.s, i, &msgs[i]);
    REQUIRE(hearth_session_add_message(s.s, "user", "Third") == HEARTH_OK);
    msgs.push_back({"user", "Third"});
    REQUIRE(hearth_apply_chat_template(model.m, msgs.data(), msgs.size(), &c, &out) == HEARTH_OK);
    const std::vector<int32_t> ids = tokenize(model.m, take(out));
    // Generating from exactly those tokens reuses the cache up to where the template's rendering
    // of the history departs from what was generated: the first reply's empty think block, which
    // the template leaves out of past turns.
    REQUIRE(hearth_session_generate_tokens(s.s, ids.data(), ids.size(), &g, &out) == HEARTH_OK);
    hearth_free(out);
    const hearth_metrics m3 = metrics_of(s.s);
    CHECK(m3.prompt_tokens - m3.prefill_tokens ==
          m1.prompt_tokens - int(tokenize(model.m, "<think>\n\n</think>\n\n").size()));

    REQUIRE(hearth_session_reset(s.s) == HEARTH_OK);
    REQUIRE(hearth_session_message_count(s.s, &n) == HEARTH_OK);
    CHECK(n == 1);                              // the system prompt stays
    CHECK(metrics_of(s.s).cached_tokens == 0);  // what the cache holds now: nothing
    CHECK(metrics_of(s.s).kv_bytes == 0);
    REQUIRE(hearth_session_chat(s.s, "First question", &c, &g, &out) == HEARTH_OK);
    CHECK(take(out) == r1);  // greedy: the same conversation gives the same reply
  }

  TEST_CASE("a chat that outgrows the session's context drops its oldest turns and goes on") {
    Model model(kTiny);
    hearth_session_params sp = hearth_session_params_default();
    sp.system_prompt = "Sys.";
    sp.context_length = 80;
    Session s(model.m, &sp);
    hearth_generate_params g = greedy(8);
    g.ignore_eos = 1;
    hearth_chat_params c = hearth_chat_params_default();
    c.thinking = 0;
    int dropped = 0;
    for (int turn = 0; turn < 6; ++turn) {
      CAPTURE(turn);
      char* out = nullptr;
      REQUIRE(hearth_session_chat(s.s, "one more question for you", &c, &g, &out) == HEARTH_OK);
      hearth_free(out);
      const hearth_metrics m = metrics_of(s.s);
      CHECK(m.prompt_tokens + m.new_tokens <= 80);
      dropped += m.dropped_messages;
      hearth_message first;
      REQUIRE(hearth_session_get_message(s.s, 0, &first) == HEARTH_OK);
      CHECK(std::string(first.content) == "Sys.");
    }
    CHECK(dropped > 0);
    size_t n = 0;
    REQUIRE(hearth_session_message_count(s.s, &n) == HEARTH_OK);
    CHECK(n == size_t(1 + 12 - dropped));
    // A message that cannot fit even alone is refused, and the conversation stays as it was.
    char* out = nullptr;
    CHECK(hearth_session_chat(s.s, std::string(2000, 'x').c_str(), &c, &g, &out) ==
          HEARTH_ERR_CONTEXT_FULL);
    CHECK(std::string(hearth_last_error()).find("the context holds 80") != std::string::npos);
    size_t n2 = 0;
    REQUIRE(hearth_session_message_count(s.s, &n2) == HEARTH_OK);
    CHECK(n2 == n);
  }

  TEST_CASE("two models in two threads, and two sessions of one model in two threads") {
    // Reference answers, one at a time.
    const std::string prompt = "Counting: one two three";
    auto answer = [&](hearth_model* m, hearth_session* s) {
      const std::vector<int32_t> ids = tokenize(m, prompt);
      hearth_generate_params g = greedy(24);
      char* out = nullptr;
      REQUIRE(hearth_session_generate_tokens(s, ids.data(), ids.size(), &g, &out) == HEARTH_OK);
      return take(out);
    };
    std::string ref_tiny, ref_sharded;
    {
      Model a(kTiny), b(kSharded);
      Session sa(a.m), sb(b.m);
      ref_tiny = answer(a.m, sa.s);
      ref_sharded = answer(b.m, sb.s);
    }
    CHECK(ref_tiny != ref_sharded);

    std::string got_tiny, got_sharded;
    std::atomic<int> failures{0};
    auto worker = [&](const std::string& dir, std::string* out_text) {
      hearth_model_params p = hearth_model_params_default();
      p.n_threads = 1;
      hearth_model* m = nullptr;
      hearth_session* s = nullptr;
      if (hearth_model_load(dir.c_str(), &p, &m) != HEARTH_OK ||
          hearth_session_new(m, nullptr, &s) != HEARTH_OK) {
        ++failures;
      } else {
        int32_t* ids = nullptr;
        size_t n = 0;
        hearth_tokenize(m, prompt.c_str(), HEARTH_STRLEN, &ids, &n);
        hearth_generate_params g = greedy(24);
        char* text = nullptr;
        if (hearth_session_generate_tokens(s, ids, n, &g, &text) != HEARTH_OK) ++failures;
        *out_text = text ? text : "";
        hearth_free(text);
        hearth_free(ids);
      }
      hearth_session_free(s);
      hearth_model_free(m);
    };
    std::thread t1(worker, kTiny, &got_tiny), t2(worker, kSharded, &got_sharded);
    t1.join();
    t2.join();
    CHECK(failures == 0);
    CHECK(got_tiny == ref_tiny);
    CHECK(got_sharded == ref_sharded);

    // One model, two sessions on two threads at once; the model handle is freed first, since
    // sessions keep the weights alive.
    auto* model = new Model(kTiny);
    const std::vector<int32_t> ids = tokenize(model->m, prompt);
    auto* s1 = new Session(model->m);
    auto* s2 = new Session(model->m);
    delete model;
    std::string r1, r2;
    auto gen = [&](hearth_session* s, std::string* out_text) {
      hearth_generate_params g = greedy(24);
      char* text = nullptr;
      if (hearth_session_generate_tokens(s, ids.data(), ids.size(), &g, &text) != HEARTH_OK)
        ++failures;
      *out_text = text ? text : "";
      hearth_free(text);
    };
    std::thread u1(gen, s1->s, &r1), u2(gen, s2->s, &r2);
    u1.join();
    u2.join();
    CHECK(failures == 0);
    CHECK(r1 == ref_tiny);
    CHECK(r2 == ref_tiny);
    delete s1;
    delete s2;
  }

  TEST_CASE("libhearth.so exports the C API and nothing else") {
    const CmdResult nm = run(std::string("nm -D --defined-only ") + HEARTH_SHARED_LIBRARY);
    REQUIRE(nm.status == 0);
    std::set<std::string> exported;
    std::istringstream lines(nm.out);
    std::string line;
    while (std::getline(lines, line)) {
      std::istringstream f(line);
      std::string addr, type, name;
      f >> addr >> type >> name;
      if (name.empty()) continue;
      CAPTURE(line);
      CHECK(name.rfind("hearth_", 0) == 0);
      exported.insert(name);
    }
    // Every function the header declares is exported (the static inline _default() wrappers
    // are compiled into the caller instead).
    const std::string header = slurp(std::string(HEARTH_SOURCE_DIR) + "/include/hearth.h");
    const std::regex decl(R"(HEARTH_API[^;(]*?\b(hearth_[a-z0-9_]+)\s*\()");
    size_t declared = 0;
    for (auto it = std::sregex_iterator(header.begin(), header.end(), decl);
         it != std::sregex_iterator(); ++it) {
      const std::string fn = (*it)[1];
      CAPTURE(fn);
      CHECK(exported.count(fn) == 1);
      ++declared;
    }
    CHECK(declared >= 25);
    CHECK(exported.size() == declared);

    const CmdResult soname = run(std::string("objdump -p ") + HEARTH_SHARED_LIBRARY);
    CHECK(soname.out.find("SONAME               libhearth.so." +
                          std::to_string(HEARTH_VERSION_MAJOR)) != std::string::npos);
  }

  TEST_CASE("the installed package builds and runs c-minimal with pkg-config and find_package") {
    TempDir d;
    const fs::path prefix = d.path / "prefix";
    const std::string cmake = HEARTH_CMAKE_COMMAND;
    CmdResult r = run(cmake + " --install " + HEARTH_BUILD_DIR + " --prefix " + prefix.string());
    REQUIRE_MESSAGE(r.status == 0, r.out);
    for (const char* f :
         {"include/hearth.h", "lib/libhearth.so", "lib/libhearth.so.0", "lib/libhearth.a",
          "lib/cmake/hearth/hearth-config.cmake", "lib/cmake/hearth/hearth-config-version.cmake",
          "lib/pkgconfig/hearth.pc", "bin/hearth", "share/man/man1/hearth.1",
          "share/bash-completion/completions/hearth"})
      CHECK_MESSAGE(fs::exists(prefix / f), f);
    // pkg-config --cflags shows only what a user of the header needs.
    const CmdResult cflags = run("PKG_CONFIG_PATH=" + (prefix / "lib/pkgconfig").string() +
                                 " pkg-config --cflags hearth");
    CHECK(cflags.status == 0);
    CHECK(cflags.out.find("-I") != std::string::npos);
    CHECK(cflags.out.find("simdjson") == std::string::npos);
    CHECK(cflags.out.find("openblas") == std::string::npos);

    // examples/c-minimal/Makefile as its comment says to use it: pkg-config finds the package,
    // once with the shared library and once with the static one, whose dependencies come from
    // Libs.private / Requires.private. The CPU backend registers itself from a static initializer,
    // which a static link must not drop: the static program's run below checks it.
    const std::string san = HEARTH_SANITIZED ? " -fsanitize=address,undefined" : "";
    const std::string example = std::string(HEARTH_SOURCE_DIR) + "/examples/c-minimal";
    const fs::path shared_dir = d.path / "shared", static_dir = d.path / "static";
    for (const fs::path& dir : {shared_dir, static_dir}) {
      fs::create_directories(dir);
      r = run("PKG_CONFIG_PATH=" + (prefix / "lib/pkgconfig").string() + " make -C " +
              dir.string() + " -f " + example + "/Makefile VPATH=" + example +
              " CC=" + HEARTH_C_COMPILER + " CFLAGS='-O2 -std=c99 -pedantic -Wall -Wextra -Werror" +
              san + "'" + (dir == static_dir ? " STATIC=1" : ""));
      REQUIRE_MESSAGE(r.status == 0, r.out);
    }
    const fs::path shared_exe = shared_dir / "c-minimal", static_exe = static_dir / "c-minimal";
    CHECK(run("ldd " + shared_exe.string() + " | grep libhearth.so.0 | grep -c " + prefix.string())
              .out == "1\n");
    CHECK(run("ldd " + static_exe.string() + " | grep -c libhearth").out == "0\n");
    // find_package(hearth) from a CMake project.
    const fs::path cm_build = d.path / "cmake-build";
    r = run(cmake + " -S " + HEARTH_SOURCE_DIR + "/examples/c-minimal -B " + cm_build.string() +
            " -DCMAKE_PREFIX_PATH=" + prefix.string() +
            (HEARTH_SANITIZED ? " -DCMAKE_C_FLAGS=-fsanitize=address,undefined" : "") + " && " +
            cmake + " --build " + cm_build.string());
    REQUIRE_MESSAGE(r.status == 0, r.out);

    for (const fs::path& exe : {shared_exe, static_exe, cm_build / "c-minimal"}) {
      CAPTURE(exe);
      r = run("timeout 120 " + exe.string() + " " + kTiny);
      CHECK_MESSAGE(r.status == 0, r.out);
      CHECK(r.out.find("> Tell me more.") != std::string::npos);
      CHECK(r.out.find("[finish cancelled]") !=
            std::string::npos);  // the third reply was cancelled
      CHECK(r.out.find("100% done") != std::string::npos);
    }
  }
}
