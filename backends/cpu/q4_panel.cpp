// Q4 panels (q4_panel.h): a permutation of a matrix's code dwords and a copy of its scales.
#include "backends/cpu/q4_panel.h"

#include <cstring>

namespace hearth::cpu {

namespace {

// Where row r's chunk c starts in the copy, and its slot dword L, and its scale slot s.
struct PanelAt {
  int64_t k, group;
  int64_t chunk(int64_t r, int64_t c) const {
    return r / kQ4PanelRows * q4_panel_group_bytes(k, group) + c * q4_panel_chunk_bytes(group);
  }
  static int64_t dword(int64_t r, int L) {  // within the chunk
    return ((L % 4) * 4 + L / 4) * 64 + (r % kQ4PanelRows) * 4;
  }
  static int64_t scale(int64_t r, int s) { return panel_scale_byte(kQ4PanelCodeBytes, r, s); }
  int64_t scale_index(int64_t c, int s) const { return panel_scale_index(group, c, s); }
};

}  // namespace

void pack_q4_panel(const uint8_t* codes, const uint16_t* scales, int64_t k, int64_t group,
                   int64_t r0, int64_t r1, uint8_t* panel) {
  // Row by row along the source, each 64-byte chunk loaded once: a MoE model's load packs all of
  // its experts here.
  const PanelAt at{k, group};
  const int64_t ng = k / group, nc = k / 128, chunk_bytes = q4_panel_chunk_bytes(group);
  const int slots = q4_panel_slots(group);
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* src = codes + r * (k / 2);
    const uint16_t* sr = scales + r * ng;
    uint8_t* chunk = panel + at.chunk(r, 0);
    for (int64_t c = 0; c < nc; ++c, src += 64, sr += slots, chunk += chunk_bytes) {
      uint32_t d[16];
      std::memcpy(d, src, 64);
      for (int L = 0; L < 16; ++L) std::memcpy(chunk + PanelAt::dword(r, L), &d[L], 4);
      for (int s = 0; s < slots; ++s) std::memcpy(chunk + PanelAt::scale(r, s), sr + s, 2);
    }
  }
}

void unpack_q4_panel(const uint8_t* panel, int64_t k, int64_t group, int64_t r0, int64_t n,
                     uint8_t* codes, uint16_t* scales) {
  const PanelAt at{k, group};
  const int64_t ng = k / group;
  for (int64_t r = r0; r < r0 + n; ++r)
    for (int64_t c = 0; c < k / 128; ++c) {
      const uint8_t* src = panel + at.chunk(r, c);
      if (codes)
        for (int L = 0; L < 16; ++L)
          std::memcpy(codes + (r - r0) * (k / 2) + 64 * c + 4 * L, src + PanelAt::dword(r, L), 4);
      if (scales)
        for (int s = 0; s < q4_panel_slots(group); ++s)
          std::memcpy(scales + (r - r0) * ng + at.scale_index(c, s), src + PanelAt::scale(r, s), 2);
    }
}

}  // namespace hearth::cpu
