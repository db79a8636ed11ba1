// hearth bench --plot: decode tokens/s against the memory-bandwidth ceiling, per context depth, as
// an SVG a browser shows, so a user sees at a glance how close the engine came to the machine.
#pragma once
#include <string>
#include <vector>

namespace hearth::cli {

struct PlotPoint {
  int depth = 0;            // positions in the context before decoding
  double tokens_per_s = 0;  // decode, measured
  double ceiling = 0;       // measured read bandwidth / bytes per token; 0 where not measured
};

// A bar per depth (decode tokens/s, labelled with its share of the ceiling), a marker at each
// ceiling; `title` names the run (model, backend, threads, sampling, CPU).
std::string depth_plot_svg(const std::string& title, const std::vector<PlotPoint>& points);
// Writes text to path; throws hearth::Error naming the path when it cannot.
void write_text_file(const std::string& path, const std::string& text);

}  // namespace hearth::cli
