// Text helpers the `run`, `chat` and batch commands share.
#pragma once
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "models/text_frontend.h"

namespace hearth::cli {

// Reads a JSON-lines file ("-" for stdin) and calls fn(line_number, value) for each non-empty line.
void for_each_jsonl(const std::string& path, const std::function<void(size_t, const Json&)>& fn);

// Prints streamed answer text, showing <think> sections dim on a terminal, or hiding them.
class AnswerPrinter {
 public:
  AnswerPrinter(const TextFrontEnd& t, bool hide_thinking, FILE* out = stdout);
  void token(int32_t id);
  void finish();  // flushes held-back bytes and resets colours
  const std::string& answer() const { return answer_; }  // everything printed, thinking included

 private:
  const TextFrontEnd& t_;
  StreamDecoder dec_;
  bool hide_, tty_, thinking_ = false;
  FILE* out_;
  std::string answer_;
};

}  // namespace hearth::cli
