// Q8 panels (q8_panel.h): a permutation of a matrix's code dwords, sign bits flipped, and a copy of
// its scales.
#include "backends/cpu/q8_panel.h"

#include <cstring>

namespace hearth::cpu {

namespace {

constexpr uint32_t kFlip = 0x80808080u;

// Where row r's chunk c starts in the copy, where its dword V = 8b + q lies in it (elements
// 32b + 4q ..), where that dword is in the row's chunk, and its scale slot s.
struct PanelAt {
  int64_t k, group;
  int64_t chunk(int64_t r, int64_t c) const {
    return r / kQ4PanelRows * q8_panel_group_bytes(k, group) + c * q8_panel_chunk_bytes(group);
  }
  static int64_t dword(int64_t r, int V) { return V * 64 + (r % kQ4PanelRows) * 4; }
  static int64_t source(int V) { return q8_slot_byte(4 * V); }
  static int64_t scale(int64_t r, int s) { return panel_scale_byte(kQ8PanelCodeBytes, r, s); }
  int64_t scale_index(int64_t c, int s) const { return panel_scale_index(group, c, s); }
};

}  // namespace

namespace {

// pack_q8_panel's loop; `slot_order`: codes as the checkpoint stores them, else in element order
// (dword V of a chunk is then its bytes 4V .. 4V + 3).
void pack_rows(const uint8_t* codes, const uint16_t* scales, int64_t k, int64_t group, int64_t r0,
               int64_t r1, uint8_t* panel, bool slot_order) {
  const PanelAt at{k, group};
  const int64_t ng = k / group, nc = k / 128, chunk_bytes = q8_panel_chunk_bytes(group);
  const int slots = q4_panel_slots(group);
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* src = codes + r * k;
    const uint16_t* sr = scales + r * ng;
    uint8_t* chunk = panel + at.chunk(r, 0);
    for (int64_t c = 0; c < nc; ++c, src += 128, sr += slots, chunk += chunk_bytes) {
      for (int V = 0; V < 32; ++V) {
        uint32_t d;
        std::memcpy(&d, src + (slot_order ? PanelAt::source(V) : 4 * V), 4);
        d ^= kFlip;
        std::memcpy(chunk + PanelAt::dword(r, V), &d, 4);
      }
      for (int s = 0; s < slots; ++s) std::memcpy(chunk + PanelAt::scale(r, s), sr + s, 2);
    }
  }
}

}  // namespace

void pack_q8_panel(const uint8_t* codes, const uint16_t* scales, int64_t k, int64_t group,
                   int64_t r0, int64_t r1, uint8_t* panel) {
  pack_rows(codes, scales, k, group, r0, r1, panel, true);
}

void pack_q8_panel_elements(const uint8_t* codes, const uint16_t* scales, int64_t k, int64_t group,
                            uint8_t* panel) {
  pack_rows(codes, scales, k, group, 0, kQ4PanelRows, panel, false);
}

void unpack_q8_panel(const uint8_t* panel, int64_t k, int64_t group, int64_t r0, int64_t n,
                     uint8_t* codes, uint16_t* scales) {
  const PanelAt at{k, group};
  const int64_t ng = k / group;
  for (int64_t r = r0; r < r0 + n; ++r)
    for (int64_t c = 0; c < k / 128; ++c) {
      const uint8_t* src = panel + at.chunk(r, c);
      if (codes)
        for (int V = 0; V < 32; ++V) {
          uint32_t d;
          std::memcpy(&d, src + PanelAt::dword(r, V), 4);
          d ^= kFlip;
          std::memcpy(codes + (r - r0) * k + 128 * c + PanelAt::source(V), &d, 4);
        }
      if (scales)
        for (int s = 0; s < q4_panel_slots(group); ++s)
          std::memcpy(scales + (r - r0) * ng + at.scale_index(c, s), src + PanelAt::scale(r, s), 2);
    }
}

}  // namespace hearth::cpu
