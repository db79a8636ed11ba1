// Where a compiled graph's linear steps read their weights: the model's mapping, or private
// huge-page copies (WeightStore) in the layout the ISA's kernels read. BF16 matrices are coded in
// 12 bits a weight (bf16_coded.h) where a kernel reads them so (AVX-512, AVX2, NEON), LM heads
// and the embedding tables tied to them too; those too irregular to code are packed a group of
// rows at a time (pack_rows) for the x86 decode kernels and the AVX-512 bf16 GEMM (NEON's read
// rows), which the prefill GEMMs read as they are or unpacked block by block (rebuilt, where
// coded); Q8 and Q4 ones are 16-row panels (q4_panel.h, q8_panel.h), which decode and the int8
// GEMM read as they are; anything else is copied verbatim. An LM head may get a screen beside its
// copy (head_screen.h).
#pragma once
#include <cstdint>
#include <functional>

#include "backends/cpu/compiled.h"
#include "core/graph.h"
#include "core/threadpool.h"
#include "core/weight_store.h"

namespace hearth::cpu {

class WeightPlacer {
 public:
  // store: where copies go, or null to read every weight from the model's mapping.
  WeightPlacer(const Graph& g, CpuCompiled& cg, ThreadPool& pool, WeightStore* store,
               const KernelTable& kt, CodedSaving& saving)
      : g_(g), cg_(cg), pool_(pool), store_(store), kt_(kt), saving_(saving) {}

  // Weight `id` into cg.weight[id] and, for a packed or panel copy, cg.w_il[id]; once per weight.
  // logits: an LM head with a screen (place_screen), which reads its scales row-major and, where
  // keeps_split, is all a graph of one row of logits a step reads of a Q8 head; pack_ok: false
  // where a step reads whole rows of it (an embedding table).
  void place(int id, bool logits, bool pack_ok = true);
  // The screen of LM head `id` (cg.screen, screen_w, screen_cap, screen_cand, screen_scratch),
  // where the head has one and no other head took it; stats learns the head's and screen's bytes.
  void place_screen(int id, ScreenPolicy::Rule rule, ScreenStats& stats);
  // Each Embed step's table: the LM head's copy where the head is tied to it, else a copy of its
  // own. After every linear step's weights are placed.
  void place_embed_tables();

 private:
  // Whether Q8 LM head w's screen keeps the low bits of its codes too (head_screen.h).
  bool keeps_split(const Tensor& w) const;
  const void* packed_copy(const Tensor& w);  // BF16 rows packed (kPackBf16)
  // Weight id's BF16 rows coded (bf16_coded.h) into cg_.w_il and w_exc; false where they are too
  // irregular for it (they are then to be packed).
  bool coded_copy(int id, const Tensor& w);
  // f(b, e) over [0, n) split among the pool's threads in multiples of align.
  void in_parallel(int64_t n, int64_t align, const std::function<void(int64_t, int64_t)>& f);
  // copy(b, e) over n units of unit_bytes at src, in parallel, handing each slice of the source
  // back to the OS once it is copied.
  void copy_handing_back(const void* src, int64_t n, int64_t unit_bytes, int64_t align,
                         const std::function<void(int64_t, int64_t)>& copy);
  void copy_verbatim(void* dst, const void* src, size_t bytes);
  void make_panel(const Tensor& w, void* dst);  // Q4 or Q8 panels of w's codes and scales
  const void* verbatim(const void* src, size_t bytes);

  const Graph& g_;
  CpuCompiled& cg_;
  ThreadPool& pool_;
  WeightStore* store_;
  const KernelTable& kt_;
  CodedSaving& saving_;
};

}  // namespace hearth::cpu
