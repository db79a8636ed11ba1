#include "tools/text.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iostream>

#include "core/error.h"

namespace hearth::cli {

void for_each_jsonl(const std::string& path, const std::function<void(size_t, const Json&)>& fn) {
  std::ifstream file;
  std::istream* in = &std::cin;
  if (path != "-") {
    file.open(path, std::ios::binary);
    if (!file) fail(path, ": cannot open");
    in = &file;
  }
  std::string line;
  size_t n = 0;
  while (std::getline(*in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
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
  }
}

AnswerPrinter::AnswerPrinter(const TextFrontEnd& t, bool hide_thinking, FILE* out)
    : t_(t), dec_(t.tokenizer, true), hide_(hide_thinking), tty_(isatty(fileno(out))), out_(out) {}

void AnswerPrinter::token(int32_t id) {
  if (id == t_.think_open) {
    thinking_ = true;
    if (tty_ && !hide_) std::fputs("\033[2m", out_);
  }
  std::string piece = dec_.push(id);
  answer_ += piece;
  if (!(thinking_ && hide_)) std::fputs(piece.c_str(), out_);
  if (id == t_.think_close) {
    thinking_ = false;
    if (tty_ && !hide_) std::fputs("\033[0m", out_);
  }
  std::fflush(out_);
}

void AnswerPrinter::finish() {
  std::string rest = dec_.flush();
  answer_ += rest;
  if (!(thinking_ && hide_)) std::fputs(rest.c_str(), out_);
  if (tty_ && thinking_ && !hide_) std::fputs("\033[0m", out_);
  thinking_ = false;
  std::fflush(out_);
}

}  // namespace hearth::cli
