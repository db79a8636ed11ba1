// Stop strings for streamed text: text that could be the start of a stop string is held back until
// it is known not to be one, so a stop string never reaches the caller, not even in part.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace hearth {

class StopFilter {
 public:
  explicit StopFilter(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  // Adds generated text and returns the part that can be passed on now. Once a stop string has
  // appeared, matched() is true, the text from the stop string on is dropped, and later calls
  // return "".
  std::string push(std::string_view text);
  // The held-back rest at the end of generation ("" after a match).
  std::string finish();
  bool matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool matched_ = false;
};

}  // namespace hearth
