// Feeds the input as a `--jsonl` file (in /dev/shm) to tools/text.cpp's for_each_jsonl, and each
// line it parses (Json::parse) to the line handling of `hearth tokenize`, `detokenize` and
// `template` (tools/jsonl_lines.h) with the tiny-tied-bf16 fixture's tokenizer and chat template.
#include <cstdint>

#include "core/error.h"
#include "models/text_frontend.h"
#include "tests/fuzz/fuzz_util.h"
#include "tools/jsonl_lines.h"
#include "tools/text.h"

using namespace hearth;

namespace {

const TextFrontEnd& frontend() {
  static const TextFrontEnd t =
      TextFrontEnd::load(HEARTH_SHARED_DIR "/fixtures/models/tiny-tied-bf16");
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)frontend();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = fuzz::scratch_dir() + "/requests.jsonl";
  const TextFrontEnd& t = frontend();
  fuzz::write_file(path, std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    cli::for_each_jsonl(path, [&](size_t, const Json& v) {
      // Each command sees every line; one refusing it must not keep the others from trying.
      try {
        (void)cli::tokenize_line(t.tokenizer, v);
      } catch (const Error& e) {
        fuzz::refused(e);
      }
      try {
        (void)cli::detokenize_line(t.tokenizer, v);
      } catch (const Error& e) {
        fuzz::refused(e);
      }
      try {
        (void)cli::template_line(t, v);
      } catch (const Error& e) {
        fuzz::refused(e);
      }
    });
  } catch (const Error& e) {
    fuzz::refused(e);
  }
  return 0;
}
