// Weight copies for the CPU's kernels (place_weights.h). Every copy is made by all the pool's
// threads: the copy, and the kernel's zeroing of the fresh huge pages it faults in, were most of a
// load on one core.
#include "backends/cpu/place_weights.h"

#include <algorithm>
#include <cstring>

#include "backends/cpu/q4_panel.h"
#include "backends/cpu/q8_panel.h"

namespace hearth::cpu {

namespace {

// A copy's layout is part of its key in the store: backends of different ISAs may share it.
enum Layout : int {
  kVerbatim = 0,
  kPacked = 1,
  kScreen = 2,
  kScreenPanel = 3,
  kQ4Panel = 4,
  kQ8Panel = 5,
  kScreenSplit = 6,  // a Q8 head's screen and low bits (head_screen.h)
  // 7, 8: a BF16 head's deltas and their exceptions, before the head was coded
  kCoded = 9,  // BF16 coded in 12 bits a weight, and its exceptions (bf16_coded.h)
  kCodedExceptions = 10
};

// A copy's source is handed back slice by slice as it is copied, so that a large tensor (an LM
// head) is not in memory twice at the end of its copy: the load's peak RSS.
constexpr int64_t kSliceBytes = int64_t(8) << 20;
// Every maker here hands its source back that way, so the store need not again.
constexpr bool kSelfReleased = false;

size_t scale_bytes(const Tensor& w) {
  return w.quantized() ? size_t(w.rows() * (w.cols() / w.group_size)) * 2 : 0;
}

}  // namespace

void WeightPlacer::in_parallel(int64_t n, int64_t align,
                               const std::function<void(int64_t, int64_t)>& f) {
  pool_.run([&](int tid, int nth) {
    int64_t b, e;
    ThreadPool::split(n, tid, nth, align, &b, &e);
    if (b < e) f(b, e);
  });
}

void WeightPlacer::copy_handing_back(const void* src, int64_t n, int64_t unit_bytes, int64_t align,
                                     const std::function<void(int64_t, int64_t)>& copy) {
  const int64_t slice = std::max<int64_t>(align, kSliceBytes / unit_bytes / align * align);
  in_parallel(n, align, [&](int64_t b, int64_t e) {
    for (int64_t s = b; s < e; s += slice) {
      const int64_t s1 = std::min(e, s + slice);
      copy(s, s1);
      store_->hand_back(static_cast<const uint8_t*>(src) + s * unit_bytes,
                        size_t((s1 - s) * unit_bytes));
    }
  });
}

void WeightPlacer::copy_verbatim(void* dst, const void* src, size_t bytes) {
  copy_handing_back(src, int64_t(bytes), 1, 4096, [&](int64_t b, int64_t e) {
    std::memcpy(static_cast<uint8_t*>(dst) + b, static_cast<const uint8_t*>(src) + b,
                size_t(e - b));
  });
}

const void* WeightPlacer::verbatim(const void* src, size_t bytes) {
  return store_->get(
      src, kVerbatim, bytes, [&](void* dst) { copy_verbatim(dst, src, bytes); }, kSelfReleased);
}

const void* WeightPlacer::packed_copy(const Tensor& w) {
  const int64_t row_bytes = int64_t(w.nbytes) / w.rows();
  auto pack = [&](void* dst) {
    copy_handing_back(w.data, w.rows(), row_bytes, kPackBf16.rows, [&](int64_t b, int64_t e) {
      kt_.pack_bf16(static_cast<const uint8_t*>(w.data) + b * row_bytes, e - b, w.cols(),
                    static_cast<uint8_t*>(dst) + b * row_bytes);
    });
  };
  return store_->get(w.data, kPacked, w.nbytes, pack, kSelfReleased);
}

bool WeightPlacer::coded_copy(int id, const Tensor& w) {
  const int64_t rows = w.rows(), k = w.cols(), groups = rows / kCodedRows;
  const auto* src = static_cast<const uint16_t*>(w.data);
  auto code = [&](void* dst) {
    in_parallel(groups, 1, [&](int64_t b, int64_t e) {
      code_bf16_groups(src, rows, k, b, e, static_cast<uint8_t*>(dst));
    });
  };
  const size_t bytes = size_t(coded_bf16_bytes(rows, k));
  const auto* coded =
      static_cast<const uint8_t*>(store_->get(w.data, kCoded, bytes, code, kSelfReleased));
  if (coded_too_irregular(coded, rows, k)) return false;
  // Found again from the rows (the coded copy keeps only how many), so made only when the coded
  // copy was, not when both come from a weight cache.
  auto find = [&](void* dst) {
    in_parallel(groups, 1, [&](int64_t b, int64_t e) {
      code_bf16_exceptions(src, rows, k, coded, b, e, static_cast<uint8_t*>(dst));
    });
  };
  const size_t exc_bytes = size_t(coded_exceptions_bytes(coded, rows, k));
  cg_.w_exc[size_t(id)] = store_->get(w.data, kCodedExceptions, exc_bytes, find, kSelfReleased);
  cg_.w_il[size_t(id)] = coded;
  store_->hand_back(w.data, w.nbytes);
  saving_.add(w.data, double(w.nbytes) - double(bytes) - double(exc_bytes));
  return true;
}

// Panels hold a matrix's codes and scales both, so both sources go back.
void WeightPlacer::make_panel(const Tensor& w, void* dst) {
  const int64_t k = w.cols(), ng = k / w.group_size, row_bytes = int64_t(w.nbytes) / w.rows();
  const auto* codes = static_cast<const uint8_t*>(w.data);
  const auto* scales = static_cast<const uint16_t*>(w.scales);
  const int64_t slice = std::max<int64_t>(kQ4PanelRows, kSliceBytes / row_bytes / 16 * 16);
  in_parallel(w.rows(), kQ4PanelRows, [&](int64_t b, int64_t e) {
    for (int64_t s = b; s < e; s += slice) {
      const int64_t s1 = std::min(e, s + slice);
      pack_panel(w.dtype, codes, scales, k, w.group_size, s, s1, static_cast<uint8_t*>(dst));
      store_->hand_back(codes + s * row_bytes, size_t((s1 - s) * row_bytes));
      store_->hand_back(scales + s * ng, size_t((s1 - s) * ng * 2));
    }
  });
}

// The split costs the whole head's reads some speed where the screen cannot spare them (sampling
// on a wide head reads it all: an 8B's 4096 columns ran ~1.3x the panels' time), and saves a
// screen of 5/8 of the head's codes: 10-24% of the weights of the tied Qwen3 0.6B-4B, 7% of the
// 8B's, 1% of the 30B-A3B's. So it is kept where the screen would be over 1/12 of the weights.
// (A BF16 head kept as its screen and a byte of delta per weight read 2.06 bytes a weight where
// the screen could not spare them, at the speed of the kernel's operations: its coded copy reads
// 1.5, at the speed of its bytes.)
bool WeightPlacer::keeps_split(const Tensor& w) const {
  if (!store_ || !screenable(w) || w.dtype != DType::Q8) return false;
  if (!kt_.matmul_q8_split || !kt_.screen_q8) return false;
  return head_screen_bytes(w) * 12 > g_.weight_bytes();
}

void WeightPlacer::place(int id, bool logits, bool pack_ok) {
  if (!cg_.weight[size_t(id)].empty()) return;
  Tensor w = g_.tensors()[size_t(id)].weight;
  const bool place = store_ != nullptr;
  const bool panel = reads_panel(kt_, w), q8 = w.dtype == DType::Q8;
  if (logits && keeps_split(w) && cg_.max_outputs == 1) {
    // One row of logits a step: the head is read from its screen and low bits (place_screen),
    // which hands the mapping's codes back; the screen reads the scales row-major.
    if (w.quantized()) w.scales = verbatim(w.scales, scale_bytes(w));
    cg_.weight[size_t(id)] = w;
    return;
  }
  if (place && pack_ok && panel && q4_panel_fits(w.rows(), w.cols(), w.group_size)) {
    // w keeps pointing at the mapping: only rows outside whole groups read it (never, with the
    // 16-row splits of the steps).
    const int64_t bytes = panel_bytes(w.dtype, w.rows(), w.cols(), w.group_size);
    cg_.w_il[size_t(id)] = store_->get(
        w.data, q8 ? kQ8Panel : kQ4Panel, size_t(bytes), [&](void* dst) { make_panel(w, dst); },
        kSelfReleased);
    if (q8 && logits) w.scales = verbatim(w.scales, scale_bytes(w));
  } else if (place) {
    const int64_t row_bytes = int64_t(w.nbytes) / std::max<int64_t>(w.rows(), 1);
    const bool bf16 =
        pack_ok && w.dtype == DType::BF16 && pack_fits(kPackBf16, w.rows(), row_bytes);
    // BF16 coded where the ISA has a coded kernel; an LM head too: its screen's candidate groups
    // are coded groups, and an embedding table tied to it decodes a group per token.
    const bool coded =
        bf16 && kt_.matmul_bf16_coded && coded_fits(w.rows(), w.cols()) && coded_copy(id, w);
    // Else the AVX-512 and AVX2 kernels read BF16 packed (kPackBf16), NEON's rows; a quantized
    // matrix the panels do not fit is copied as it is, like every other.
    const bool packed = bf16 && !coded && (kt_.isa == Isa::Avx512 || kt_.isa == Isa::Avx2);
    if (packed) {
      cg_.w_il[size_t(id)] = packed_copy(w);
    } else if (!coded) {
      w.data = verbatim(w.data, w.nbytes);
    }
    if (w.quantized()) w.scales = verbatim(w.scales, scale_bytes(w));
  }
  cg_.weight[size_t(id)] = w;
}

// A BF16 LM head gets a Q8 screen, and a Q8 head one of its codes' high bits where a kernel reads
// it, with their low bits beside it where a kernel reads the two (head_screen.h). Every compiled
// graph of a model shares that one copy; those of one row of logits a step read the head from it.
void WeightPlacer::place_screen(int id, ScreenPolicy::Rule rule, ScreenStats& stats) {
  const Tensor& w = g_.tensors()[size_t(id)].weight;
  if (!store_ || !screenable(w) || cg_.screen_w >= 0) return;
  if (w.dtype == DType::Q8 && !kt_.screen_q8) return;
  const bool low = keeps_split(w);
  // A BF16 head's Q8 copy is read by matmul_q8: as panels where it reads them (the layout is part
  // of the store's key).
  const ScreenLayout pk = kt_.q8_panel && q8_panel_fits(w.rows(), w.cols(), kScreenGroup)
                              ? ScreenLayout::kPanel
                              : ScreenLayout::kRows;
  // The screen is made from the model's mapping of the head: a copied head's pages, handed back
  // when its copy was made, are read in again and go back once more, slice by slice.
  auto build = [&](void* dst) {
    copy_handing_back(w.data, w.rows(), int64_t(w.nbytes) / w.rows(), kQ4PanelRows,
                      [&](int64_t b, int64_t e) {
                        build_head_screen(w, pk, dst, b, e, low, kt_.screen_row_bf16);
                      });
    if (w.quantized()) store_->hand_back(w.scales, scale_bytes(w));
  };
  const int layout = low ? kScreenSplit : pk == ScreenLayout::kRows ? kScreen : kScreenPanel;
  const void* mem = store_->get(w.data, layout, head_screen_bytes(w, low), build, kSelfReleased);
  cg_.screen = head_screen_view(w, pk, mem, low);
  cg_.screen_w = id;
  cg_.screen_policy = ScreenPolicy(rule);
  // Room for every row of the longest range a thread screens (argmax_screened's split).
  for (int t = 0; t < pool_.size(); ++t) {
    int64_t b, e;
    ThreadPool::split(w.rows(), t, pool_.size(), 16, &b, &e);
    cg_.screen_cap = std::max(cg_.screen_cap, e - b);
  }
  cg_.screen_cand.alloc(size_t(pool_.size()) * size_t(cg_.screen_cap) * sizeof(ScreenCandidate),
                        "LM head screen candidates");
  if (w.quantized() && kt_.refine_q8_split &&
      reads_split(cg_, cg_.weight[size_t(id)], cg_.w_il[size_t(id)]))
    cg_.screen_est.alloc(size_t(pool_.size()) * 2 * size_t(cg_.screen_cap) * sizeof(float),
                         "LM head screen estimates");
  cg_.topk_shared.alloc(size_t(pool_.size()) * CpuCompiled::kTopkShared * sizeof(float),
                        "LM head top-k exchange");
  cg_.topk_ready = std::make_unique<std::atomic<uint64_t>[]>(size_t(pool_.size()));
  // What a step that reads the whole head reads: a coded head's groups and exceptions.
  const auto* coded = static_cast<const uint8_t*>(cg_.w_il[size_t(id)]);
  stats.head_bytes = cg_.w_exc[size_t(id)]
                         ? double(coded_bf16_bytes(w.rows(), w.cols()) +
                                  coded_exceptions_bytes(coded, w.rows(), w.cols()))
                         : double(w.nbytes) + double(scale_bytes(w));
  stats.screen_bytes = double(head_screen_read_bytes(w));
  stats.row_bytes = stats.head_bytes / double(w.rows());
  stats.low_row_bytes = double(w.cols() / 128 * kScreenLowChunkBytes) +
                        (w.quantized() ? double(scale_bytes(w)) / double(w.rows()) : 0);
  // The screen's own activations after the head kernel's (argmax_screened).
  cg_.screen_scratch = quant_matmul_scratch_floats(w.cols(), 1);
}

// A tied LM head is also the embedding table: the Embed step then reads the head's copy (one row
// per token, unpacked if packed, decoded if coded), so the model's mapping of it is handed back as
// any other weight's, and the head, read whole by every sampled token the screen cannot spare,
// streams from packed huge pages as every other matmul does, not from the mapping's 4 KiB pages.
void WeightPlacer::place_embed_tables() {
  const auto& ts = g_.tensors();
  for (const Node& n : g_.nodes()) {
    if (n.op != Op::Embed) continue;
    const size_t table = size_t(n.in[0]);
    for (size_t id = 0; id < ts.size(); ++id)
      if (id != table && !cg_.weight[id].empty() && ts[id].weight.data == ts[table].weight.data &&
          ts[id].weight.nbytes == ts[table].weight.nbytes)
        cg_.weight[table] = cg_.weight[id], cg_.w_il[table] = cg_.w_il[id],
        cg_.w_exc[table] = cg_.w_exc[id];
    // An untied table is copied as it is (a step reads whole rows of it). Left in the mapping,
    // each token not seen before faults its row in, and once the load has streamed the weights
    // through the page cache that is a read from the disk: a 30B-A3B decode step on a VM waited
    // ~3 ms for one.
    if (cg_.weight[table].empty()) place(int(table), false, false);
  }
}

}  // namespace hearth::cpu
