// Feeds the input as DIR/model.safetensors.index.json to Checkpoint::open, beside two small valid
// shards written once (model-0000{1,2}-of-00002.safetensors holding a.weight, b.weight and
// c.weight) and a stray folder and FIFO, so the index's weight_map is checked against real files.
#include <sys/stat.h>

#include <cstdint>

#include "core/error.h"
#include "models/checkpoint.h"
#include "models/safetensors_writer.h"
#include "tests/fuzz/fuzz_util.h"

using namespace hearth;

namespace {

TensorToWrite f32(const std::string& name, std::vector<int64_t> shape) {
  size_t n = 1;
  for (int64_t d : shape) n *= size_t(d);
  return {name, "F32", shape, n * 4, [n](uint8_t* dst) {
            for (size_t i = 0; i < n * 4; ++i) dst[i] = uint8_t(i);
          }};
}

const std::string& make_dir() {
  static const std::string dir = [] {
    std::string d = fuzz::scratch_dir() + "/sharded";
    std::filesystem::create_directories(d + "/subdir");
    write_safetensors(d + "/model-00001-of-00002.safetensors",
                      {f32("a.weight", {4, 8}), f32("b.weight", {8})});
    write_safetensors(d + "/model-00002-of-00002.safetensors", {f32("c.weight", {2, 2, 2})},
                      {{"format", "pt"}});
    mkfifo((d + "/fifo").c_str(), 0600);
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = make_dir();
  fuzz::write_file(dir + "/model.safetensors.index.json",
                   std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    Checkpoint ck = Checkpoint::open(dir);
    FUZZ_CHECK(!ck.files().empty());
    for (const TensorRef* t : ck.all()) FUZZ_CHECK(ck.find(t->name) == t);
  } catch (const Error& e) {
    fuzz::refused(e);
  }
  return 0;
}
