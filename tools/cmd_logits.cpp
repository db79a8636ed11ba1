// hearth logits: float32 logits for every position of a token sequence, raw little-endian
// row-major [T, vocab], optionally fed through the KV cache in chunks.
#include <cstdio>
#include <memory>

#include "core/error.h"
#include "tools/commands.h"
#include "tools/loaded.h"

namespace hearth::cli {

int cmd_logits(int argc, char** argv) {
  auto spec = kEngineOptions;
  spec.insert(spec.end(), {"--ids=", "--out=", "--chunks="});
  Args args(argc, argv, spec);
  const std::vector<int32_t> ids = args.int_list("--ids");
  const std::string out = args.required("--out");
  std::vector<int32_t> chunks;
  if (args.has("--chunks")) {
    chunks = args.int_list("--chunks");
    size_t sum = 0;
    for (int c : chunks) {
      if (c <= 0) fail("--chunks: chunk sizes must be positive");
      sum += size_t(c);
    }
    if (sum != ids.size())
      fail("--chunks: sizes add up to ", sum, " but --ids has ", ids.size(), " tokens");
  }
  args.set_default("--kv", "f32");  // exact logits, for checks against other implementations
  Loaded l = load_engine(args);
  Runner& r = *l.runner;
  const size_t vocab = size_t(r.vocab_size());
  auto kv = r.new_kv(int(ids.size()));
  std::vector<float> logits(ids.size() * vocab);
  if (chunks.empty()) chunks.push_back(int(ids.size()));
  int pos = 0;
  for (int c : chunks) {
    // A chunk larger than the runner's prefill chunk is still one logical chunk: the runner
    // splits it further, which is equivalent through the KV cache.
    r.forward(*kv, ids.data() + pos, c, pos, logits.data() + size_t(pos) * vocab, nullptr);
    pos += c;
  }
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(out.c_str(), "wb"), &std::fclose);
  if (!f) fail(out, ": cannot open for writing");
  if (std::fwrite(logits.data(), 4, logits.size(), f.get()) != logits.size())
    fail(out, ": write failed");
  return 0;
}

}  // namespace hearth::cli
