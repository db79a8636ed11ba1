// Feeds the input as the bytes of DIR/model.safetensors (a file in /dev/shm) to Checkpoint::open,
// which maps it and validates its header (SafetensorsFile::open); every tensor it accepts must lie
// inside the map, and its view() must either work or throw.
#include <cstdint>

#include "core/error.h"
#include "models/checkpoint.h"
#include "tests/fuzz/fuzz_util.h"

using namespace hearth;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = fuzz::scratch_dir() + "/single";
  static const bool made = std::filesystem::create_directories(dir);
  (void)made;
  fuzz::write_file(dir + "/model.safetensors",
                   std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    Checkpoint ck = Checkpoint::open(dir);
    FUZZ_CHECK(ck.shards().size() == 1);
    const MappedFile& f = ck.shards()[0]->file();
    size_t total = 0;
    for (const TensorRef* t : ck.all()) {
      FUZZ_CHECK(ck.find(t->name) == t);
      // Bounds of the data section, checked independently of the reader: the map is not under
      // ASan's eye, so an out-of-bounds view would go unnoticed otherwise.
      FUZZ_CHECK(t->nbytes <= f.size());
      if (t->nbytes) FUZZ_CHECK(t->data >= f.data() && t->data + t->nbytes <= f.data() + f.size());
      total += t->nbytes;
      try {
        Tensor v = t->view();
        FUZZ_CHECK(v.nbytes == t->nbytes);
      } catch (const Error& e) {
        fuzz::refused(e);
      }
    }
    FUZZ_CHECK(total == ck.total_bytes());
  } catch (const Error& e) {
    fuzz::refused(e);
  }
  return 0;
}
