// The batch text commands outside checks use: one JSON value out per JSON line in, same order.
//   tokenize   {"text": ...}                                  -> [ids...]
//   detokenize {"ids": [...], "skip_special_tokens": bool}   -> "text"
//   template   {"messages": [...], "add_generation_prompt": bool, "enable_thinking": bool?,
//               "tools": [...]?, ...other template keywords}  -> {"text": ..., "ids": [...]}
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/json_writer.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/text.h"

namespace hearth::cli {

namespace {

const Json& member(const Json& v, const char* key) {
  const Json* m = v.find(key);
  if (!m) fail("missing \"", key, "\"");
  return *m;
}

std::string ids_json(const std::vector<int32_t>& ids) {
  JsonWriter w;
  w.array(ids);
  return w.str();
}

}  // namespace

int cmd_tokenize(int argc, char** argv) {
  Args args(argc, argv, {"--model=", "--jsonl=", "--text="});
  Tokenizer tok = Tokenizer::load(args.required("--model"));
  if (args.has("--text")) {
    std::printf("%s\n", ids_json(tok.encode(args.str("--text"))).c_str());
    return 0;
  }
  std::string out;
  for_each_jsonl(args.required("--jsonl"), [&](size_t, const Json& v) {
    const Json& text = member(v, "text");
    if (!text.is_string()) fail("\"text\" must be a string");
    out += ids_json(tok.encode(text.as_string()));
    out += '\n';
  });
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

int cmd_detokenize(int argc, char** argv) {
  Args args(argc, argv, {"--model=", "--jsonl="});
  Tokenizer tok = Tokenizer::load(args.required("--model"));
  std::string out;
  for_each_jsonl(args.required("--jsonl"), [&](size_t, const Json& v) {
    const Json& ids = member(v, "ids");
    if (!ids.is_array()) fail("\"ids\" must be an array");
    std::vector<int32_t> list;
    // Range-checked as the 64-bit values JSON gives, so 2^32 + 1 is refused rather than read as 1.
    for (const Json& id : ids.as_array()) {
      if (!id.is_int()) fail("\"ids\" must hold integers");
      if (id.as_int() < 0 || id.as_int() > INT32_MAX)
        fail("\"ids\"[", list.size(), "] is ", id.as_int(), ", not a token id");
      list.push_back(int32_t(id.as_int()));
    }
    bool skip = false;
    if (const Json* s = v.find("skip_special_tokens")) {
      if (!s->is_bool()) fail("\"skip_special_tokens\" must be true or false");
      skip = s->as_bool();
    }
    out += json_quote(tok.decode(list, skip));
    out += '\n';
  });
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

int cmd_template(int argc, char** argv) {
  Args args(argc, argv, {"--model=", "--jsonl="});
  TextFrontEnd t = TextFrontEnd::load(args.required("--model"));
  std::string out;
  for_each_jsonl(args.required("--jsonl"), [&](size_t, const Json& v) {
    if (!v.is_object()) fail("each line must be a JSON object");
    const Json& messages = member(v, "messages");
    if (!messages.is_array()) fail("\"messages\" must be an array");
    ChatOptions opt;
    Json extra = Json::object();
    for (const auto& [k, val] : v.as_object()) {
      if (k == "messages") continue;
      if (k == "add_generation_prompt") {
        if (!val.is_bool()) fail("\"add_generation_prompt\" must be true or false");
        opt.add_generation_prompt = val.as_bool();
      } else if (k == "enable_thinking") {
        if (val.is_bool())
          opt.enable_thinking = val.as_bool();
        else if (!val.is_null())
          fail("\"enable_thinking\" must be true, false or null");
      } else if (k == "tools") {
        opt.tools = val;
      } else {
        extra.set(k, val);
      }
    }
    opt.extra = extra;
    std::string text = t.chat.render(messages, opt);
    JsonWriter w;
    w.begin_object();
    w.field("text", text);
    w.key("ids").array(t.tokenizer.encode(text));
    w.end_object();
    out += w.str();
    out += '\n';
  });
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

// Encode throughput on a text file, one thread, after a warm-up pass.
int cmd_bench_tokenizer(int argc, char** argv) {
  Args args(argc, argv, {"--model=", "--text=", "--repeats=", "--json"});
  Tokenizer tok = Tokenizer::load(args.required("--model"));
  const std::string path = args.required("--text");
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  const int repeats = args.integer("--repeats", 5);
  const double mbs = tokenizer_bench_mb_per_s(tok, text, repeats);
  const size_t n_tokens = tok.encode(text).size();
  if (args.has("--json")) {
    JsonWriter w;
    w.begin_object();
    w.field("bytes", text.size()).field("tokens", n_tokens).field("repeats", repeats);
    w.field("encode_mb_per_s", mbs);
    w.end_object();
    std::printf("%s\n", w.str().c_str());
  } else {
    std::printf("encode: %.2f MB/s (%zu bytes -> %zu tokens, best of %d)\n", mbs, text.size(),
                n_tokens, repeats);
  }
  return 0;
}

}  // namespace hearth::cli
