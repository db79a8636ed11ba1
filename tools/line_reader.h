// The chat's input: on a terminal, line editing and history with libedit (BSD-licensed; GNU
// readline is GPL), kept in ~/.hearth_history; otherwise plain lines from stdin, so scripts and
// tests can pipe a conversation in.
#pragma once
#include <string>

namespace hearth::cli {

class LineReader {
 public:
  enum class Status { Line, Interrupted, End };
  struct Input {
    Status status;
    std::string text;
  };

  explicit LineReader(bool colour);
  ~LineReader();  // saves the history
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // Shows the prompt and reads one line. Interrupted: Ctrl-C at the prompt (a fresh prompt
  // follows, as in a shell); End: Ctrl-D or the end of the input.
  Input read();

 private:
  bool editing_ = false;  // a terminal, and libedit is built in
  bool colour_;
  std::string history_path_;
};

}  // namespace hearth::cli
