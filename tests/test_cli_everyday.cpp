// The CLI as people used to ollama and llama.cpp use it: help and version, prompts from anywhere,
// fresh seeds, stop strings, Ctrl-C, chat that keeps its cache and outlives its context, random
// weights announced, and bad or conflicting options refused by name.
#include <doctest/doctest.h>
#include <simdjson.h>

#include <fcntl.h>
#include <signal.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "models/checkpoint.h"
#include "tests/cli_run.h"

using namespace cli_test;

namespace {

const std::string kTiny = kModels + "tiny-tied-bf16";

std::vector<std::string> command_names() {
  const std::string help = run("--help").out;
  std::vector<std::string> names;
  const size_t from = help.find("commands:\n");
  REQUIRE(from != std::string::npos);
  std::istringstream in(help.substr(from + 10));
  std::string line;
  while (std::getline(in, line) && !line.empty())
    names.push_back(line.substr(2, line.find(' ', 2) - 2));
  return names;
}

std::string write_file(const std::string& name, const std::string& text) {
  const fs::path p =
      fs::temp_directory_path() / ("hearth_everyday_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(p, std::ios::binary) << text;
  return p.string();
}

std::vector<int64_t> ints(simdjson::dom::element arr) {
  std::vector<int64_t> v;
  for (int64_t x : arr.get_array()) v.push_back(x);
  return v;
}

// "[reason] prompt N tokens (M computed)" lines of a chat's stderr, in order.
std::vector<std::pair<int, int>> turn_tokens(const std::string& err) {
  std::vector<std::pair<int, int>> turns;
  const std::regex re(R"(prompt (\d+) tokens \((\d+) computed\))");
  for (auto it = std::sregex_iterator(err.begin(), err.end(), re); it != std::sregex_iterator();
       ++it)
    turns.emplace_back(std::stoi((*it)[1]), std::stoi((*it)[2]));
  return turns;
}

}  // namespace

TEST_SUITE("cli") {
  TEST_CASE("every command has --help, -h and `hearth help CMD`; --version says what was built") {
    const std::vector<std::string> names = command_names();
    CHECK(names.size() >= 13);
    for (const std::string& name : names) {
      CAPTURE(name);
      const Result r = run(name + " --help");
      CHECK(r.status == 0);
      CHECK(r.out.rfind("usage: hearth " + name, 0) == 0);
      CHECK(r.out.find("example:") != std::string::npos);
      CHECK(run(name + " -h").out == r.out);
      CHECK(run("help " + name).out == r.out);
    }
    const Result v = run("--version");
    CHECK(v.status == 0);
    CHECK(v.out.rfind(std::string("hearth ") + HEARTH_VERSION + "\n", 0) == 0);
    CHECK(v.out.find("ISAs compiled:") != std::string::npos);
    CHECK(v.out.find("backends: cpu") != std::string::npos);
    CHECK(run("version").out == v.out);
    // The overview stays short: kernel details belong to the commands' pages.
    const Result h = run("--help");
    CHECK(std::count(h.out.begin(), h.out.end(), '\n') < 30);
    CHECK(h.out.find("hugepages") == std::string::npos);
  }

  TEST_CASE("bad and conflicting options are refused by name") {
    const std::string m = "run --model " + kTiny + " hi ";
    expect_error(m + "--top_p 0.9", "did you mean --top-p?");
    expect_error(m + "--temperature -1", "--temperature must be >= 0");
    expect_error(m + "--temperature nan", "not a finite number");
    expect_error(m + "--top-p 0", "--top-p must be in (0, 1]");
    expect_error(m + "--repetition-penalty -1", "--repetition-penalty must be > 0");
    expect_error(m + "--presence-penalty -0.5", "--presence-penalty must be >= 0");
    expect_error(m + "--frequency-penalty inf", "not a finite number");
    expect_error(m + "--seed -3", "--seed");
    expect_error(m + "--threads 100000", "--threads must be in [1, ");
    expect_error(m + "--threads 0", "--threads must be in [1, ");
    expect_error(m + "--thinking --no-thinking", "contradict");
    expect_error(m + "--greedy --temperature 0.7", "contradict");
    expect_error("chat --model " + kTiny + " --thinking --no-thinking", "contradict");
    expect_error(m + "--ctx 1000000", "--ctx must be in [16, ");
    expect_error("rnu", "did you mean run?");
    const std::string gguf = write_file("model.gguf", std::string("GGUF\3\0\0\0", 8));
    expect_error("run --model " + gguf + " hi", "GGUF");
    expect_error("run --model " + kTiny + "/config.json hi", "not a checkpoint folder");
    expect_error("run --model " + kTiny + " --prompt-file /tmp", "a folder, not a text file");
    expect_error("run --model " + kTiny + " --prompt-file /dev/zero", "more than 64 MiB");
    expect_error("run --model " + kTiny, "the prompt is empty");  // stdin is /dev/null
    expect_error("run --model " + kTiny + " --prompt a --prompt-file /etc/hostname",
                 "give the prompt one way");
    fs::remove(gguf);
  }

  TEST_CASE("the prompt comes from an argument, --prompt, --prompt -, a pipe or --prompt-file") {
    // The template command renders the same message independently of run's own path.
    const std::string line = write_file(
        "tpl.jsonl",
        R"({"messages": [{"role": "user", "content": "Tell me a story."}], "add_generation_prompt": true})"
        "\n");
    simdjson::dom::parser tp;
    const std::string tpl = run("template --model " + kTiny + " --jsonl " + line).out;
    const std::vector<int64_t> want = ints(tp.parse(tpl)["ids"]);
    const std::string prompt_file = write_file("prompt.txt", "Tell me a story.");
    const std::string m = "run --model " + kTiny + " --max-new-tokens 2 --json ";
    for (const std::string& form : {m + "\"Tell me a story.\"", m + "--prompt \"Tell me a story.\"",
                                    m + "--prompt - < " + prompt_file, m + "< " + prompt_file,
                                    m + "--prompt-file " + prompt_file}) {
      CAPTURE(form);
      const Result r = run(form);
      REQUIRE(r.status == 0);
      simdjson::dom::parser p;
      CHECK(ints(p.parse(r.out)["manifest"]["prompt_ids"]) == want);
    }
    fs::remove(line);
    fs::remove(prompt_file);
  }

  TEST_CASE("sampling gets a fresh seed each run, recorded; --seed repeats a run") {
    const std::string m = "run --model " + kTiny + " hi --max-new-tokens 16 --ignore-eos --json ";
    auto seed_and_tokens = [&](const std::string& extra) {
      const Result r = run(m + extra);
      REQUIRE(r.status == 0);
      simdjson::dom::parser p;
      simdjson::dom::element j = p.parse(r.out);
      return std::make_pair(uint64_t(j["manifest"]["settings"]["seed"]), ints(j["tokens"]));
    };
    const auto a = seed_and_tokens(""), b = seed_and_tokens("");
    CHECK(a.first != b.first);
    CHECK(a.second != b.second);
    const auto again = seed_and_tokens("--seed " + std::to_string(a.first));
    CHECK(again.first == a.first);
    CHECK(again.second == a.second);
  }

  TEST_CASE("--stop ends the answer before the string; --json separates the reasoning") {
    const std::string m =
        "run --model " + kTiny + " hi --greedy --max-new-tokens 24 --ignore-eos --json";
    const Result whole = run(m);
    REQUIRE(whole.status == 0);
    simdjson::dom::parser p;
    simdjson::dom::element j = p.parse(whole.out);
    const std::string text = std::string(std::string_view(j["text"]));
    CHECK(j["reasoning"].is_string());
    // A stop string from inside the greedy answer: three ASCII letters or digits after its start.
    std::string stop;
    for (size_t i = 1; i + 3 <= text.size() && stop.empty(); ++i)
      if (std::all_of(text.begin() + long(i), text.begin() + long(i) + 3,
                      [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)); }))
        stop = text.substr(i, 3);
    REQUIRE(!stop.empty());
    const std::string stop_file = write_file("stop.txt", stop);
    const Result cut = run(m + " --stop \"$(cat " + stop_file + ")\" --stop never-there");
    REQUIRE(cut.status == 0);
    simdjson::dom::parser p2;
    simdjson::dom::element c = p2.parse(cut.out);
    CHECK(std::string(std::string_view(c["text"])) == text.substr(0, text.find(stop)));
    CHECK(std::string_view(c["finish_reason"]) == "stop");
    fs::remove(stop_file);
  }

  TEST_CASE("run clips the answer to the context and says so") {
    const Result r =
        run("run --model " + kTiny + " hi --ctx 32 --max-new-tokens 100 --ignore-eos --json");
    REQUIRE(r.status == 0);
    CHECK(r.err.find("note: the answer is limited to") != std::string::npos);
    simdjson::dom::parser p;
    simdjson::dom::element j = p.parse(r.out);
    CHECK(int64_t(j["metrics"]["prompt_tokens"]) + int64_t(j["metrics"]["new_tokens"]) == 32);
    expect_error("run --model " + kTiny + " --ctx 16 \"" + std::string(200, 'x') + " y z\"",
                 "the context holds 16");
  }

  TEST_CASE("Ctrl-C in run stops the answer: a newline, the metrics line, exit status 130") {
    // The signal goes once the answer has begun to stream: a Ctrl-C while the model still loads
    // ends the process by the default action, and a fixed delay raced the load on a busy machine.
    const fs::path d = temp_dir();
    const std::string out = (d / "out").string(), err = (d / "err").string();
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      const int in = ::open("/dev/null", O_RDONLY);
      const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (in < 0 || o < 0 || e < 0) ::_exit(99);
      ::dup2(in, 0), ::dup2(o, 1), ::dup2(e, 2);
      ::execl(HEARTH_BINARY, HEARTH_BINARY, "run", "--model", kTiny.c_str(), "hi", "--ignore-eos",
              "--max-new-tokens", "40000", static_cast<char*>(nullptr));
      ::_exit(98);
    }
    bool streaming = false;
    for (int i = 0; i < 1200 && !streaming; ++i) {  // at most a minute
      std::error_code ec;
      streaming = fs::file_size(out, ec) > 0 && !ec;
      if (!streaming) ::usleep(50000);
    }
    CHECK(streaming);
    ::kill(pid, SIGINT);
    int st = 0;
    REQUIRE(::waitpid(pid, &st, 0) == pid);
    REQUIRE(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 130);
    CHECK(slurp(err).find("[cancelled] prompt") != std::string::npos);
    const std::string answer = slurp(out);
    REQUIRE(!answer.empty());
    CHECK(answer.back() == '\n');
    fs::remove_all(d);
  }

  TEST_CASE("chat without thinking computes only each turn's new tokens") {
    const std::string in = write_file("chat.txt", "Hello\nHow are you today?\nAnd then?\n");
    const Result r =
        run("chat --model " + kTiny + " --no-thinking --max-new-tokens 8 --ignore-eos < " + in);
    REQUIRE(r.status == 0);
    const auto turns = turn_tokens(r.err);
    REQUIRE(turns.size() == 3);
    // Each later turn computes the last answer's final token, the template's "<|im_end|>\n" and the
    // new user turn: what the previous turn left in the cache is all reused.
    for (size_t i = 1; i < turns.size(); ++i) {
      CAPTURE(i);
      CHECK(turns[i].first == turns[i - 1].first + 8 + (turns[i].second - 1));
      CHECK(turns[i].second < 25);
    }
    fs::remove(in);
  }

  TEST_CASE("chat outgrows its context: the oldest turns go, with a notice, and it goes on") {
    const std::string in = write_file(
        "chat2.txt", "one two three\nfour five six\nseven eight\n/save " +
                         (fs::temp_directory_path() / "hearth_saved.json").string() + "\n/exit\n");
    const Result r = run("chat --model " + kTiny +
                         " --ctx 48 --max-new-tokens 8 --ignore-eos --no-thinking < " + in);
    REQUIRE(r.status == 0);
    CHECK(r.err.find("context 48 tokens") != std::string::npos);
    CHECK(r.err.find("left out the oldest") != std::string::npos);
    CHECK(turn_tokens(r.err).size() == 3);
    simdjson::dom::parser p;
    simdjson::dom::element saved =
        p.load((fs::temp_directory_path() / "hearth_saved.json").string());
    CHECK(saved.get_array().size() < 6);
    CHECK(std::string_view(saved.at(saved.get_array().size() - 2)["content"]) == "seven eight");
    // /load continues it.
    const std::string in2 = write_file(
        "chat3.txt",
        "/load " + (fs::temp_directory_path() / "hearth_saved.json").string() + "\nnext\n");
    const Result r2 = run("chat --model " + kTiny + " --max-new-tokens 4 --no-thinking < " + in2);
    CHECK(r2.out.find("(loaded") != std::string::npos);
    CHECK(turn_tokens(r2.err).at(0).first > 20);
    fs::remove(in);
    fs::remove(in2);
    fs::remove(fs::temp_directory_path() / "hearth_saved.json");
  }

  TEST_CASE("run's summary gives the decode rate as the bytes a token read") {
    // F32 weights: no screened head, so a token reads every matmul weight, one embedding row and
    // the f32 KV cache of the positions before it.
    const std::string dir = kModels + "tiny-untied-sharded-f32";
    const Result r = run("run --model " + dir + " hi --max-new-tokens 16 --ignore-eos --threads 1");
    REQUIRE(r.status == 0);
    std::smatch m;
    const std::regex line(
        R"(prompt (\d+) tokens .* (\d+) new tokens at [0-9.]+ ms/token \(([0-9.]+) tok/s, )"
        R"(reading ([0-9.]+) GB/s\))");
    REQUIRE(std::regex_search(r.err, m, line));
    const int prompt = std::stoi(m[1]), gen = std::stoi(m[2]);
    const double tps = std::stod(m[3]), gbs = std::stod(m[4]);
    REQUIRE(gen == 16);
    double bytes = 32 * 4;  // one row of the embedding (hidden 32)
    const hearth::Checkpoint ck = hearth::Checkpoint::open(dir);
    for (const hearth::TensorRef* t : ck.all()) {
      const std::string& n = t->name;
      if (n == "lm_head.weight" || n.find("_proj.weight") != std::string::npos) bytes += t->nbytes;
    }
    const double kv_per_pos = 3 * 2 * 2 * 16 * 4;  // layers, K and V, KV heads, head_dim, f32
    for (int i = 1; i <= gen; ++i) bytes += kv_per_pos * (prompt + i) / gen;
    const double want = bytes * tps / 1e9;
    CHECK(std::abs(gbs - want) <= 0.05 + 0.01 * want);
  }

  TEST_CASE("a stand-in's random weights are announced") {
    const fs::path d = temp_dir();
    REQUIRE(run("standin --preset tiny --out " + (d / "m").string()).status == 0);
    const Result r = run("run --model " + (d / "m").string() + " hi --max-new-tokens 2");
    CHECK(r.status == 0);
    CHECK(r.err.find("random weights") != std::string::npos);
    CHECK(run("run --model " + kTiny + " hi --max-new-tokens 2").err.find("random weights") ==
          std::string::npos);
    fs::remove_all(d);
  }

  TEST_CASE("--weight-cache: the first load writes the copies, later ones map them") {
    const fs::path d = temp_dir();
    const std::string gen = "generate --model " + kTiny + " --ids 1,2,3 --max-new-tokens 4 ";
    const Result plain = run(gen + "--no-weight-cache");
    const Result first = run(gen + "--weight-cache " + (d / "c").string());
    const Result again = run(gen + "--weight-cache " + (d / "c").string());
    REQUIRE(plain.status == 0);
    CHECK(first.status == 0);
    CHECK(again.status == 0);
    CHECK(first.out == plain.out);
    CHECK(again.out == plain.out);
    CHECK(first.err.find("note: wrote") != std::string::npos);
    CHECK(again.err.find("wrote") == std::string::npos);
    CHECK(std::distance(fs::directory_iterator(d / "c"), fs::directory_iterator()) == 1);
    // By default only checkpoints of 256 MiB or more are cached: none of the tiny one.
    ::setenv("XDG_CACHE_HOME", (d / "x").c_str(), 1);
    CHECK(run(gen).status == 0);
    ::unsetenv("XDG_CACHE_HOME");
    CHECK(!fs::exists(d / "x"));
    expect_error(gen + "--mmap --weight-cache " + (d / "c").string(), "--weight-cache");
    expect_error(gen + "--no-weight-cache --weight-cache " + (d / "c").string(), "contradict");
    fs::remove_all(d);
  }

  TEST_CASE("a failed write is a failure") {
    for (const std::string& c : {"tokenize --model " + kTiny + " --text hi",
                                 "run --model " + kTiny + " hi --max-new-tokens 2 --json"}) {
      CAPTURE(c);
      const fs::path err = temp_dir() / "err";
      const int st = std::system(
          (std::string(HEARTH_BINARY) + " " + c + " </dev/null >/dev/full 2>" + err.string())
              .c_str());
      CHECK((WIFEXITED(st) && WEXITSTATUS(st) == 1));
      CHECK(slurp(err.string()).find("error: cannot write the output") != std::string::npos);
      fs::remove_all(err.parent_path());
    }
  }
}
