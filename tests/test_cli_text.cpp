// The batch text commands end to end, on every tokenizer fixture: what outside checks run.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "models/json_value.h"

namespace fs = std::filesystem;
using hearth::Json;

namespace {

const std::string kTok = std::string(HEARTH_SHARED_DIR) + "/fixtures/tokenizer/";
const std::string kModel = std::string(HEARTH_SHARED_DIR) + "/fixtures/models/tiny-tied-bf16";

std::vector<Json> read_jsonl(const std::string& path) {
  std::ifstream f(path);
  std::vector<Json> v;
  std::string line;
  while (std::getline(f, line))
    if (!line.empty()) v.push_back(Json::parse(line));
  return v;
}

// Runs `hearth CMD --model M --jsonl IN` on the given input lines; returns output lines.
std::vector<std::string> run_batch(const std::string& cmd, const std::vector<Json>& lines) {
  fs::path d = fs::temp_directory_path() / ("hearth_text_" + std::to_string(::getpid()) + cmd);
  fs::create_directories(d);
  {
    std::ofstream in(d / "in.jsonl");
    for (const auto& l : lines) in << l.dump_python() << "\n";
  }
  std::string sh = std::string("timeout 300 ") + HEARTH_BINARY + " " + cmd + " --model " + kModel +
                   " --jsonl " + (d / "in.jsonl").string() + " >" + (d / "out").string() + " 2>" +
                   (d / "err").string();
  int st = std::system(sh.c_str());
  std::ifstream err(d / "err");
  std::stringstream es;
  es << err.rdbuf();
  CAPTURE(es.str());
  REQUIRE(WIFEXITED(st));
  REQUIRE(WEXITSTATUS(st) == 0);
  std::ifstream out(d / "out");
  std::vector<std::string> result;
  std::string line;
  while (std::getline(out, line)) result.push_back(line);
  fs::remove_all(d);
  return result;
}

Json pick(const Json& v, std::initializer_list<const char*> keys) {
  Json o = Json::object();
  for (const char* k : keys)
    if (const Json* m = v.find(k)) o.set(k, *m);
  return o;
}

}  // namespace

TEST_SUITE("cli") {
  TEST_CASE("tokenize --jsonl reproduces every tokenize fixture") {
    auto cases = read_jsonl(kTok + "tokenize.jsonl");
    std::vector<Json> in;
    for (auto& c : cases) in.push_back(pick(c, {"text"}));
    auto out = run_batch("tokenize", in);
    REQUIRE(out.size() == cases.size());
    int bad = 0;
    for (size_t i = 0; i < cases.size(); ++i)
      if (Json::parse(out[i]) != cases[i].at("ids")) {
        ++bad;
        MESSAGE("mismatch: ", cases[i].at("name").as_string());
      }
    CHECK(bad == 0);
  }

  TEST_CASE("detokenize --jsonl reproduces every decode fixture") {
    auto cases = read_jsonl(kTok + "decode.jsonl");
    std::vector<Json> in;
    for (auto& c : cases) in.push_back(pick(c, {"ids", "skip_special_tokens"}));
    auto out = run_batch("detokenize", in);
    REQUIRE(out.size() == cases.size());
    int bad = 0;
    for (size_t i = 0; i < cases.size(); ++i)
      if (Json::parse(out[i]) != cases[i].at("text")) {
        ++bad;
        MESSAGE("mismatch: ", cases[i].at("name").as_string());
      }
    CHECK(bad == 0);
  }

  TEST_CASE("template --jsonl reproduces every chat fixture, text and ids") {
    auto cases = read_jsonl(kTok + "chat.jsonl");
    std::vector<Json> in;
    for (auto& c : cases)
      in.push_back(pick(c, {"messages", "add_generation_prompt", "enable_thinking", "tools"}));
    auto out = run_batch("template", in);
    REQUIRE(out.size() == cases.size());
    int bad = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      Json got = Json::parse(out[i]);
      if (got.at("text") != cases[i].at("text") || got.at("ids") != cases[i].at("ids")) {
        ++bad;
        MESSAGE("mismatch: ", cases[i].at("name").as_string());
      }
    }
    CHECK(bad == 0);
  }
}
