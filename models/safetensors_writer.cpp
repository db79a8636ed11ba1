#include "models/safetensors_writer.h"

#include <cstdio>
#include <memory>

#include "core/error.h"
#include "core/json_writer.h"
#include "models/safetensors.h"

namespace hearth {

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::string h = "{";
  bool first = true;
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    bool f2 = true;
    for (auto& [k, v] : metadata) {
      if (!f2) h += ",";
      f2 = false;
      h += json_quote(k) + ":" + json_quote(v);
    }
    h += "}";
    first = false;
  }
  size_t off = 0;
  for (auto& t : tensors) {
    // Readers refuse a tensor that does not start on a multiple of its element size (they read
    // it in place), and safetensors allows no gaps: callers order tensors so none is needed.
    const size_t esize = safetensors_dtype_size(t.dtype);
    if (esize > 1 && off % esize != 0)
      fail(path, ": tensor '", t.name, "' would start at byte ", off, ", not a multiple of its ",
           esize, "-byte element size; write wider dtypes first");
    if (!first) h += ",";
    first = false;
    h += json_quote(t.name) + ":{\"dtype\":\"" + t.dtype + "\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) h += (i ? "," : "") + std::to_string(t.shape[i]);
    h += "],\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + t.nbytes) + "]}";
    off += t.nbytes;
  }
  h += "}";
  // Spaces pad the header so that the data starts on a 64-byte line: tensors whose sizes are
  // multiples of 64 (every Qwen3 weight, code and scale tensor) then start on one too, which a
  // direct map of the file needs for full-speed vector loads.
  while ((8 + h.size()) % 64) h += ' ';

  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) fail(path, ": cannot open for writing");
  uint64_t n = h.size();
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(n >> (8 * i));
  bool ok = std::fwrite(len, 1, 8, f.get()) == 8 && std::fwrite(h.data(), 1, n, f.get()) == n;
  std::vector<uint8_t> buf;
  for (auto& t : tensors) {
    if (!ok) break;
    buf.assign(t.nbytes, 0);
    if (t.fill) t.fill(buf.data());
    ok = std::fwrite(buf.data(), 1, buf.size(), f.get()) == buf.size();
  }
  if (!ok || std::fflush(f.get()) != 0) fail(path, ": write failed (disk full?)");
}

}  // namespace hearth
