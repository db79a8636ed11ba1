// Feeds the input as a weight cache file (core/weight_cache.h) made for identity "fuzz": a file
// that is not a whole one is refused (a new one is started), and every copy its index names that
// find() hands out lies inside the file's map (the map is outside ASan's eye, so each is read
// through, and one beyond the map faults).
#include <cstdint>

#include "core/weight_cache.h"
#include "tests/fuzz/fuzz_util.h"

using namespace hearth;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = fuzz::scratch_dir() + "/m.weights";
  fuzz::write_file(path, std::string_view(reinterpret_cast<const char*>(data), size));
  WeightCacheFile cache(path, "fuzz");
  for (uint32_t layout = 0; layout < 4; ++layout) {
    const CopyKey key{0, layout, 4096 * uint64_t(layout), 100 + uint64_t(layout)};
    const auto* p = static_cast<const uint8_t*>(cache.find(key));
    if (!p) continue;
    volatile uint8_t sum = 0;
    for (size_t i = 0; i < key.bytes; ++i) sum = uint8_t(sum + p[i]);
  }
  return 0;
}
