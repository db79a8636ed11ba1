#include "tools/line_reader.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "tools/text.h"

#ifdef HEARTH_HAVE_LIBEDIT
#include <editline/readline.h>
#endif

namespace hearth::cli {

namespace {

constexpr int kHistoryLines = 1000;

}  // namespace

LineReader::LineReader(bool colour) : colour_(colour) {
#ifdef HEARTH_HAVE_LIBEDIT
  editing_ = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
  if (!editing_) return;
  rl_initialize();
  stifle_history(kHistoryLines);
  // The environment is read here, at the CLI's edge.
  if (const char* home = std::getenv("HOME"); home && *home) {
    history_path_ = std::string(home) + "/.hearth_history";
    read_history(history_path_.c_str());
  }
#endif
}

LineReader::~LineReader() {
#ifdef HEARTH_HAVE_LIBEDIT
  if (editing_ && !history_path_.empty()) write_history(history_path_.c_str());
#endif
}

LineReader::Input LineReader::read() {
  std::atomic<bool>& interrupted = catch_ctrl_c();
  interrupted = false;
#ifdef HEARTH_HAVE_LIBEDIT
  if (editing_) {
    // \1 brackets the colour codes so libedit does not count them as prompt width.
    const char* prompt = colour_ ? "\n\1\033[1;32m\1>\1\033[0m\1 " : "\n> ";
    char* line = readline(prompt);
    if (!line) {
      if (interrupted) return {Status::Interrupted, ""};
      std::fputs("\n", stdout);
      return {Status::End, ""};
    }
    std::string text = line;
    std::free(line);
    if (interrupted) return {Status::Interrupted, ""};
    if (!text.empty()) add_history(text.c_str());
    return {Status::Line, text};
  }
#endif
  std::fputs(colour_ ? "\n\033[1;32m> \033[0m" : "\n> ", stdout);
  std::fflush(stdout);
  std::string text;
  if (!std::getline(std::cin, text)) {
    if (interrupted) {
      std::cin.clear();
      return {Status::Interrupted, ""};
    }
    return {Status::End, ""};
  }
  return {Status::Line, text};
}

}  // namespace hearth::cli
