// Text helpers the `run`, `chat` and batch commands share.
#pragma once
#include <atomic>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "models/stop_filter.h"
#include "models/text_frontend.h"
#include "tools/args.h"

namespace hearth::cli {

// Reads a JSON-lines file ("-" for stdin) and calls fn(line_number, value) for each non-empty line.
void for_each_jsonl(const std::string& path, const std::function<void(size_t, const Json&)>& fn);

// The whole of a text file ("-": stdin), refusing folders, unreadable files and anything over
// 64 MiB; `what` names it in errors ("--prompt-file").
std::string read_text(const std::string& path, const std::string& what);

// The user's prompt: the positional PROMPT, --prompt TEXT ('-': stdin), --prompt-file FILE, or
// stdin when it is not a terminal. Exactly one of them; an empty prompt is an error.
std::string read_prompt(const Args& args);
// --system TEXT or --system-file FILE (not both); nullopt when neither.
std::optional<std::string> read_system_prompt(const Args& args);
// --thinking / --no-thinking (not both); nullopt when neither (the template's default).
std::optional<bool> thinking_flag(const Args& args);

// From now on Ctrl-C sets the returned flag instead of ending the process. The handler does not
// restart system calls, so a blocking read returns at once.
std::atomic<bool>& catch_ctrl_c();

// Writes to stdout and flushes; a failed write (a full disk, a closed pipe) is an error, so the
// command exits non-zero instead of reporting success for output nobody got.
void write_stdout(const std::string& s);

// Whether to colour `f`: a terminal, and NO_COLOR unset (https://no-color.org).
bool use_colour(FILE* f);

// Prints streamed answer text, showing <think> sections dim on a terminal, or hiding them, and
// ending the answer before any of the stop strings. out may be NULL: only collect the answer.
class AnswerPrinter {
 public:
  AnswerPrinter(const TextFrontEnd& t, bool hide_thinking, std::vector<std::string> stops = {},
                FILE* out = stdout);
  bool token(int32_t id);  // false once a stop string has appeared: stop generating
  void finish();           // flushes held-back bytes and resets colours
  const std::string& answer() const { return answer_; }  // everything printed, thinking included
  bool stopped_by_string() const { return filter_.matched(); }

 private:
  void print(const std::string& piece);

  const TextFrontEnd& t_;
  StreamDecoder dec_;
  StopFilter filter_;
  bool hide_, colour_, thinking_ = false;
  FILE* out_;
  std::string answer_;
};

// A reply's text split at Qwen3's </think>: the reasoning (without the tags) and the answer.
struct SplitReply {
  std::string reasoning, content;
};
SplitReply split_reasoning(const std::string& reply);

}  // namespace hearth::cli
