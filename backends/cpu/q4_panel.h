// Q4 weights as 16-row panels, the copy the AVX-512 and AVX2 Q4 kernels read
// (KernelTable::q4_panel): rows in groups of 16; a group is its rows' 128-element chunks in order,
// and a chunk is 1024 bytes of codes, [block b < 4][q < 4][row i < 16] dwords where dword (b, q, i)
// is row i's slot dword 4q + b of the chunk (quant/FORMAT.md: its low nibbles are block b's
// elements 4q .. 4q + 3, its high ones 16 + 4q .. 19 + 4q), then the chunk's scales, [slot s][row
// i] F16/BF16 for the chunk's groups (4 for group 32, 2 for 64, 1 for 128), padded to 64 bytes.
// Rows then sit in vector lanes: one vpdpbusd multiplies 16 rows (AVX2: 8, a vector's half) by one
// token's 4 activation codes, so a step of several tokens unpacks each code once for all of them
// and scales each block once per token and 16 rows, and a group is one linear stream.
#pragma once
#include <cstdint>

namespace hearth::cpu {

constexpr int64_t kQ4PanelRows = 16;
constexpr int64_t kQ4PanelCodeBytes = 1024;  // one chunk of 16 rows

// Scale slots per chunk, and the bytes a chunk's scales take (padded).
constexpr int q4_panel_slots(int64_t group) {
  return int(128 / group);
}
constexpr int64_t q4_panel_scale_bytes(int64_t group) {
  return q4_panel_slots(group) == 4 ? 128 : 64;
}
constexpr int64_t q4_panel_chunk_bytes(int64_t group) {
  return kQ4PanelCodeBytes + q4_panel_scale_bytes(group);
}
// Where row r's scale of slot s lies in a chunk of code_bytes of codes (Q4 and Q8 panels alike),
// and which of the row's scales that is for chunk c.
constexpr int64_t panel_scale_byte(int64_t code_bytes, int64_t r, int s) {
  return code_bytes + (s * kQ4PanelRows + r % kQ4PanelRows) * 2;
}
constexpr int64_t panel_scale_index(int64_t group, int64_t c, int s) {
  return c * q4_panel_slots(group) + s;
}
// Whether a rows x k Q4 matrix with this group size has a panel copy.
inline bool q4_panel_fits(int64_t rows, int64_t k, int64_t group) {
  return rows > 0 && rows % kQ4PanelRows == 0 && k % 128 == 0 &&
         (group == 32 || group == 64 || group == 128);
}
// Bytes of one 16-row group, and of the whole copy.
inline int64_t q4_panel_group_bytes(int64_t k, int64_t group) {
  return k / 128 * q4_panel_chunk_bytes(group);
}
inline int64_t q4_panel_bytes(int64_t rows, int64_t k, int64_t group) {
  return rows / kQ4PanelRows * q4_panel_group_bytes(k, group);
}

// Rows [r0, r1) (multiples of 16) of row-major codes (k / 2 bytes a row) and scales (k / group a
// row) into their groups of the copy that starts at `panel`.
void pack_q4_panel(const uint8_t* codes, const uint16_t* scales, int64_t k, int64_t group,
                   int64_t r0, int64_t r1, uint8_t* panel);
// Rows [r0, r0 + n) of the copy back to row-major codes and scales (either may be null).
void unpack_q4_panel(const uint8_t* panel, int64_t k, int64_t group, int64_t r0, int64_t n,
                     uint8_t* codes, uint16_t* scales);

}  // namespace hearth::cpu
