#include "core/step_rows.h"

#include <cmath>

#include "core/error.h"

namespace hearth {

std::vector<double> rope_frequencies(const Graph& g) {
  std::vector<double> f;
  for (const Node& n : g.nodes()) {
    if (n.op != Op::Rope) continue;
    std::vector<double> mine(size_t(n.p.head_dim / 2));
    for (size_t i = 0; i < mine.size(); ++i)
      mine[i] = std::pow(n.p.rope_theta, -2.0 * double(i) / n.p.head_dim);
    if (!f.empty() && f != mine)
      fail(
          "the graph's Rope nodes differ in head_dim or theta (a GPU backend keeps one RoPE per "
          "graph)");
    f = mine;
  }
  return f;
}

size_t step_block_entries(const StepInputs& in) {
  size_t n = 0;
  for (int s = 0; s < in.n_seqs; ++s) n += size_t(in.seqs[s].n_blocks);
  return n;
}

void fill_step_rows(const StepInputs& in, int T, const std::vector<double>& inv_freq,
                    uint32_t* ints, float* rope, uint32_t* blocks) {
  const size_t half = inv_freq.size();
  uint32_t table = 0;
  for (int s = 0; s < in.n_seqs; ++s) {
    const SeqRows& q = in.seqs[s];
    for (int b = 0; b < q.n_blocks; ++b) blocks[table + uint32_t(b)] = uint32_t(q.blocks[b]);
    for (int i = 0; i < q.n_rows; ++i) {
      const int r = q.row0 + i, pos = q.pos0 + i;
      ints[r] = uint32_t(in.tokens[r]);
      ints[T + r] = uint32_t(pos);
      ints[2 * T + r] = table;
      for (size_t k = 0; k < half; ++k) {
        const double a = double(pos) * inv_freq[k];
        rope[(size_t(r) * half + k) * 2] = float(std::cos(a));
        rope[(size_t(r) * half + k) * 2 + 1] = float(std::sin(a));
      }
    }
    table += uint32_t(q.n_blocks);
  }
  for (int i = 0; i < in.n_out; ++i) ints[3 * T + i] = uint32_t(in.out_rows[i]);
}

}  // namespace hearth
