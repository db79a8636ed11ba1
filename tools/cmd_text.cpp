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
#include "tools/jsonl_lines.h"
#include "tools/text.h"

namespace hearth::cli {

namespace {

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
    out += tokenize_line(tok, v);
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
    out += detokenize_line(tok, v);
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
    out += template_line(t, v);
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
