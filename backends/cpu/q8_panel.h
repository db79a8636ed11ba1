// Q8 weights as 16-row panels, the copy the AVX-512 and AVX2 Q8 kernels read
// (KernelTable::q8_panel): rows in groups of 16 as Q4 panels (q4_panel.h); a chunk is 2048 bytes
// of codes, [block b < 4][q < 8][row i < 16] dwords where dword (b, q, i) holds row i's elements
// 32b + 4q .. 32b + 4q + 3 (in element order, wherever quant/FORMAT.md's slot order keeps them)
// with each code's sign bit flipped (q + 128, vpdpbusd's unsigned operand), then the chunk's
// scales as in a Q4 panel.
#pragma once
#include <cstdint>

#include "backends/cpu/q4_panel.h"
#include "core/dtype.h"

namespace hearth::cpu {

constexpr int64_t kQ8PanelCodeBytes = 2048;  // one chunk of 16 rows

constexpr int64_t q8_panel_chunk_bytes(int64_t group) {
  return kQ8PanelCodeBytes + q4_panel_scale_bytes(group);
}
// Whether a rows x k Q8 matrix with this group size has a panel copy.
inline bool q8_panel_fits(int64_t rows, int64_t k, int64_t group) {
  return q4_panel_fits(rows, k, group);
}
inline int64_t q8_panel_group_bytes(int64_t k, int64_t group) {
  return k / 128 * q8_panel_chunk_bytes(group);
}
inline int64_t q8_panel_bytes(int64_t rows, int64_t k, int64_t group) {
  return rows / kQ4PanelRows * q8_panel_group_bytes(k, group);
}
// The byte of a row's chunk (slot order) that holds element e < 128 of it (quant/FORMAT.md: 4-byte
// lane i of half h holds block i % 4's elements 4 (i / 4 + 4 h) .. + 3).
constexpr int64_t q8_slot_byte(int64_t e) {
  return (e % 32) / 16 * 64 + ((e % 16) / 4 * 4 + e / 32) * 4 + e % 4;
}

// Rows [r0, r1) (multiples of 16) of row-major codes (k bytes a row) and scales (k / group a row)
// into their groups of the copy that starts at `panel`.
void pack_q8_panel(const uint8_t* codes, const uint16_t* scales, int64_t k, int64_t group,
                   int64_t r0, int64_t r1, uint8_t* panel);
// One group of 16 rows whose codes are in element order (k bytes a row), not the checkpoint's slot
// order, into its place in the copy (`panel` is where the group starts): a screen built from BF16.
void pack_q8_panel_elements(const uint8_t* codes, const uint16_t* scales, int64_t k, int64_t group,
                            uint8_t* panel);
// Rows [r0, r0 + n) of the copy back to row-major codes and scales (either may be null).
void unpack_q8_panel(const uint8_t* panel, int64_t k, int64_t group, int64_t r0, int64_t n,
                     uint8_t* codes, uint16_t* scales);

// The same for Q4 or Q8 panels, by the weight's dtype (Q8, else Q4).
inline int64_t panel_bytes(DType t, int64_t rows, int64_t k, int64_t group) {
  return (t == DType::Q8 ? q8_panel_bytes : q4_panel_bytes)(rows, k, group);
}
inline void pack_panel(DType t, const uint8_t* codes, const uint16_t* scales, int64_t k,
                       int64_t group, int64_t r0, int64_t r1, uint8_t* panel) {
  (t == DType::Q8 ? pack_q8_panel : pack_q4_panel)(codes, scales, k, group, r0, r1, panel);
}
inline void unpack_panel(DType t, const uint8_t* panel, int64_t k, int64_t group, int64_t r0,
                         int64_t n, uint8_t* codes, uint16_t* scales) {
  (t == DType::Q8 ? unpack_q8_panel : unpack_q4_panel)(panel, k, group, r0, n, codes, scales);
}

}  // namespace hearth::cpu
