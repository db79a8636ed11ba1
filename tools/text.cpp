#include "tools/text.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>

#include "core/error.h"

namespace hearth::cli {

namespace {

constexpr size_t kMaxTextBytes = size_t(64) << 20;

// A signal handler can only reach static storage; this flag is the CLI's, not the library's.
std::atomic<bool> g_ctrl_c{false};
extern "C" void on_ctrl_c(int) {
  g_ctrl_c.store(true);
}

std::string strip_newlines(const std::string& s) {
  const size_t a = s.find_first_not_of('\n');
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of('\n') - a + 1);
}

}  // namespace

void for_each_jsonl(const std::string& path, const std::function<void(size_t, const Json&)>& fn) {
  FILE* f = stdin;
  if (path != "-") {
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) fail(path, ": ", std::strerror(errno));
    if (S_ISDIR(st.st_mode)) fail(path, ": a folder, not a JSON-lines file");
    f = std::fopen(path.c_str(), "rb");
    if (!f) fail(path, ": ", std::strerror(errno));
  }
  std::unique_ptr<FILE, int (*)(FILE*)> owned(f == stdin ? nullptr : f, &std::fclose);
  std::string line;
  size_t n = 0;
  auto one = [&] {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) return;
    Json v;
    try {
      v = Json::parse(line);
    } catch (const std::exception& e) {
      fail(path, ": line ", n, ": ", e.what());
    }
    try {
      fn(n, v);
    } catch (const Error& e) {
      fail(path, ": line ", n, ": ", e.what());
    }
  };
  // Read in blocks so an endless line (/dev/zero) ends in an error, not in all of memory.
  char buf[1 << 16];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) {
    for (size_t i = 0; i < got;) {
      const char* nl = static_cast<const char*>(std::memchr(buf + i, '\n', got - i));
      const size_t end = nl ? size_t(nl - buf) : got;
      line.append(buf + i, end - i);
      if (line.size() > kMaxTextBytes)
        fail(path, ": line ", n + 1, " is longer than ", kMaxTextBytes >> 20, " MiB");
      i = end;
      if (nl) {
        one();
        line.clear();
        ++i;
      }
    }
  }
  if (std::ferror(f)) fail(path, ": read error: ", std::strerror(errno));
  if (!line.empty()) one();
}

std::string read_text(const std::string& path, const std::string& what) {
  FILE* f = stdin;
  if (path != "-") {
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) fail(what, " ", path, ": ", std::strerror(errno));
    if (S_ISDIR(st.st_mode)) fail(what, " ", path, ": a folder, not a text file");
    f = std::fopen(path.c_str(), "rb");
    if (!f) fail(what, " ", path, ": ", std::strerror(errno));
  }
  std::string text;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
    text.append(buf, n);
    if (text.size() > kMaxTextBytes) {
      if (f != stdin) std::fclose(f);
      fail(what, " ", path == "-" ? "(stdin)" : path, ": more than ", kMaxTextBytes >> 20, " MiB");
    }
  }
  const bool failed = std::ferror(f);
  if (f != stdin) std::fclose(f);
  if (failed) fail(what, " ", path == "-" ? "(stdin)" : path, ": read error");
  return text;
}

std::string read_prompt(const Args& args) {
  const int given = int(args.positional().has_value()) + int(args.has("--prompt")) +
                    int(args.has("--prompt-file"));
  if (given > 1) fail("give the prompt one way: PROMPT, --prompt or --prompt-file");
  std::string prompt;
  if (args.positional())
    prompt = *args.positional() == "-" ? read_text("-", "stdin") : *args.positional();
  else if (args.has("--prompt"))
    prompt = args.str("--prompt") == "-" ? read_text("-", "stdin") : args.str("--prompt");
  else if (args.has("--prompt-file"))
    prompt = read_text(args.str("--prompt-file"), "--prompt-file");
  else if (!isatty(STDIN_FILENO))
    prompt = read_text("-", "stdin");
  else
    fail(
        "no prompt: give it as an argument, with --prompt TEXT or --prompt-file FILE, or pipe "
        "it in");
  if (prompt.find_first_not_of(" \t\r\n") == std::string::npos) fail("the prompt is empty");
  return prompt;
}

std::optional<std::string> read_system_prompt(const Args& args) {
  if (args.has("--system") && args.has("--system-file"))
    fail("--system and --system-file both give the system prompt; give one");
  if (args.has("--system")) return args.str("--system");
  if (args.has("--system-file")) return read_text(args.str("--system-file"), "--system-file");
  return std::nullopt;
}

std::optional<bool> thinking_flag(const Args& args) {
  if (args.has("--thinking") && args.has("--no-thinking"))
    fail("--thinking and --no-thinking contradict each other; give one");
  if (args.has("--thinking")) return true;
  if (args.has("--no-thinking")) return false;
  return std::nullopt;
}

std::atomic<bool>& catch_ctrl_c() {
  struct sigaction sa {};
  sa.sa_handler = on_ctrl_c;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART
  sigaction(SIGINT, &sa, nullptr);
  return g_ctrl_c;
}

void write_stdout(const std::string& s) {
  if (std::fwrite(s.data(), 1, s.size(), stdout) != s.size() || std::fflush(stdout) != 0)
    fail("cannot write the output: ", std::strerror(errno));
}

bool use_colour(FILE* f) {
  const char* no = std::getenv("NO_COLOR");
  return f && isatty(fileno(f)) && !(no && *no);
}

AnswerPrinter::AnswerPrinter(const TextFrontEnd& t, bool hide_thinking,
                             std::vector<std::string> stops, FILE* out)
    : t_(t),
      dec_(t.tokenizer, true),
      filter_(std::move(stops)),
      hide_(hide_thinking),
      colour_(use_colour(out)),
      out_(out) {}

void AnswerPrinter::print(const std::string& piece) {
  answer_ += piece;
  if (out_ && !(thinking_ && hide_)) std::fputs(piece.c_str(), out_);
}

bool AnswerPrinter::token(int32_t id) {
  if (filter_.matched()) return false;
  const std::string piece = filter_.push(dec_.push(id));
  if (id == t_.think_open) {
    thinking_ = true;
    if (colour_ && !hide_) std::fputs("\033[2m", out_);
    print(piece);
  } else if (id == t_.think_close) {
    print(piece);
    thinking_ = false;
    if (colour_ && !hide_) std::fputs("\033[0m", out_);
  } else {
    print(piece);
  }
  if (out_) std::fflush(out_);
  return !filter_.matched();
}

void AnswerPrinter::finish() {
  if (!filter_.matched()) print(filter_.push(dec_.flush()) + filter_.finish());
  if (colour_ && thinking_ && !hide_) std::fputs("\033[0m", out_);
  thinking_ = false;
  if (out_) std::fflush(out_);
}

SplitReply split_reasoning(const std::string& reply) {
  const size_t open = reply.find("<think>");
  const size_t close = reply.find("</think>");
  if (close == std::string::npos) {
    // Unclosed: everything after <think> was still reasoning when generation ended.
    if (open == std::string::npos) return {"", reply};
    return {strip_newlines(reply.substr(open + 7)), ""};
  }
  const size_t from = open != std::string::npos && open < close ? open + 7 : 0;
  return {strip_newlines(reply.substr(from, close - from)),
          reply.substr(std::min(reply.size(), reply.find_first_not_of('\n', close + 8)))};
}

}  // namespace hearth::cli
