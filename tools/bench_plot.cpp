#include "tools/bench_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "core/error.h"

namespace hearth::cli {

namespace {

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<')
      o += "&lt;";
    else if (c == '>')
      o += "&gt;";
    else if (c == '&')
      o += "&amp;";
    else if (c == '"')
      o += "&quot;";
    else
      o += c;
  }
  return o;
}

std::string fmt(const char* f, double a, double b = 0) {
  char buf[96];
  std::snprintf(buf, sizeof buf, f, a, b);
  return buf;
}

// The smallest "nice" step (1, 2 or 5 times a power of ten) giving at most 6 grid lines to top.
double grid_step(double top) {
  const double raw = top / 6;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * p >= raw) return m * p;
  return 10 * p;
}

}  // namespace

std::string depth_plot_svg(const std::string& title, const std::vector<PlotPoint>& points) {
  const double W = 720, H = 420, left = 70, right = 20, top = 60, bottom = 60;
  const double pw = W - left - right, ph = H - top - bottom;
  double ymax = 1;
  for (const PlotPoint& p : points) ymax = std::max({ymax, p.tokens_per_s, p.ceiling});
  const double step = grid_step(ymax * 1.1);
  ymax = std::ceil(ymax * 1.1 / step) * step;
  auto y = [&](double v) { return top + ph * (1 - v / ymax); };

  std::string s =
      fmt("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" ", W, H) +
      "font-family=\"sans-serif\" font-size=\"12\">\n";
  s += fmt("<rect width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n", W, H);
  s += "<text x=\"10\" y=\"20\" font-size=\"14\">Decode tokens/s against the read-bandwidth "
       "ceiling, by context depth</text>\n";
  // The title's parts ("; "-separated) on lines of at most ~120 characters.
  std::vector<std::string> lines(1);
  for (size_t at = 0; at <= title.size();) {
    size_t end = title.find("; ", at);
    if (end == std::string::npos) end = title.size();
    const std::string part = title.substr(at, end - at);
    if (!lines.back().empty() && lines.back().size() + part.size() > 120) lines.emplace_back();
    lines.back() += (lines.back().empty() ? "" : "; ") + part;
    at = end + 2;
  }
  for (size_t i = 0; i < lines.size() && i < 2; ++i)
    s += fmt("<text x=\"10\" y=\"%.0f\" font-size=\"10\" fill=\"#555\">", 34 + 13 * double(i)) +
         escape(lines[i]) + "</text>\n";
  for (double v = 0; v <= ymax + step / 2; v += step) {
    s += fmt("<line x1=\"%.0f\" x2=\"%.0f\" ", left, left + pw) +
         fmt("y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", y(v), y(v));
    s += fmt("<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">", left - 6, y(v) + 4) +
         fmt("%g</text>\n", v);
  }
  s += fmt("<text x=\"16\" y=\"%.0f\" transform=\"rotate(-90 16 ", top + ph / 2) +
       fmt("%.0f)\" text-anchor=\"middle\">tokens/s</text>\n", top + ph / 2);
  const double slot = pw / double(std::max<size_t>(points.size(), 1));
  for (size_t i = 0; i < points.size(); ++i) {
    const PlotPoint& p = points[i];
    const double cx = left + slot * (double(i) + 0.5), bw = std::min(80.0, slot * 0.5);
    s += fmt("<rect x=\"%.1f\" y=\"%.1f\" ", cx - bw / 2, y(p.tokens_per_s)) +
         fmt("width=\"%.1f\" height=\"%.1f\" fill=\"#4a7ebb\"/>\n", bw,
             top + ph - y(p.tokens_per_s));
    std::string label = fmt("%.1f t/s", p.tokens_per_s);
    if (p.ceiling > 0) {
      label += fmt(" (%.0f%%)", 100 * p.tokens_per_s / p.ceiling);
      s += fmt("<line x1=\"%.1f\" x2=\"%.1f\" ", cx - bw * 0.7, cx + bw * 0.7) +
           fmt("y1=\"%.1f\" y2=\"%.1f\" stroke=\"#c0392b\" stroke-width=\"3\"/>\n", y(p.ceiling),
               y(p.ceiling));
    }
    const double ly = std::min(y(p.tokens_per_s), p.ceiling > 0 ? y(p.ceiling) : H) - 8;
    s += fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", cx, ly) + escape(label) +
         "</text>\n";
    s += fmt("<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">", cx, top + ph + 18) +
         fmt("depth %.0f</text>\n", p.depth);
  }
  s += fmt("<line x1=\"%.0f\" x2=\"%.0f\" ", left, left + pw) +
       fmt("y1=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", top + ph, top + ph);
  s += fmt("<rect x=\"%.0f\" y=\"%.0f\" width=\"14\" height=\"10\" fill=\"#4a7ebb\"/>", left,
           H - 22) +
       fmt("<text x=\"%.0f\" y=\"%.0f\">decode, measured</text>\n", left + 20, H - 13);
  s += fmt("<line x1=\"%.0f\" x2=\"%.0f\" ", left + 160, left + 174) +
       fmt("y1=\"%.0f\" y2=\"%.0f\" stroke=\"#c0392b\" stroke-width=\"3\"/>", H - 17, H - 17) +
       fmt("<text x=\"%.0f\" y=\"%.0f\">ceiling: read bandwidth / bytes per token, both "
           "measured</text>\n",
           left + 180, H - 13);
  s += "</svg>\n";
  return s;
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) fail(path, ": cannot open for writing");
  f << text;
  f.close();
  if (!f) fail(path, ": cannot write");
}

}  // namespace hearth::cli
