#include "models/stop_filter.h"

#include <algorithm>
#include <utility>

namespace hearth {

std::string StopFilter::push(std::string_view text) {
  if (matched_) return {};
  held_.append(text);
  if (stops_.empty()) return std::exchange(held_, {});
  // Text already passed on cannot hold the start of a match: any suffix of it that began a stop
  // string was held back, so searching the held text alone finds every occurrence.
  size_t first = std::string::npos;
  for (const std::string& s : stops_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    matched_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  size_t keep = 0;  // the longest held suffix that is a proper prefix of some stop string
  for (const std::string& s : stops_)
    for (size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n)
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopFilter::finish() {
  return matched_ ? std::string() : std::exchange(held_, {});
}

}  // namespace hearth
