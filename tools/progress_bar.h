// A one-line progress bar with ETA on stderr, for the long writes (quantize, quantized stand-ins).
#pragma once
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace hearth::cli {

// A one-line progress bar with ETA, redrawn at most ten times a second, on a terminal only.
class ProgressBar {
 public:
  ProgressBar() : tty_(isatty(2)), t0_(std::chrono::steady_clock::now()) {}
  void update(size_t done, size_t total, const std::string& what) {
    if (!tty_ || total == 0) return;
    const auto now = std::chrono::steady_clock::now();
    if (done < total && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    const double f = double(done) / double(total);
    const double el = std::chrono::duration<double>(now - t0_).count();
    const double eta = f > 0.01 ? el * (1 - f) / f : 0;
    const int w = 30, fill = int(f * w + 0.5);
    std::fprintf(stderr, "\r[%.*s%*s] %5.1f%%  ETA %4.0fs  %-48.48s", fill,
                 "##############################", w - fill, "", 100 * f, eta, what.c_str());
    std::fflush(stderr);
    drawn_ = true;
  }
  void done() {
    if (drawn_) std::fprintf(stderr, "\n");
  }

 private:
  bool tty_, drawn_ = false;
  std::chrono::steady_clock::time_point t0_, last_{};
};

}  // namespace hearth::cli
