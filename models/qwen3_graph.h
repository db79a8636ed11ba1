// Qwen3 as a compute graph: the model definition, read top to bottom like the paper's diagram.
#pragma once
#include "core/graph.h"
#include "models/qwen3_config.h"
#include "models/qwen3_weights.h"

namespace hearth {

// Builds the decoder graph for any number of tokens per step. Logits are computed only for the
// rows the step asks for (StepInputs::out_rows), so decode never runs the LM head on the prompt.
Graph build_qwen3_graph(const Qwen3Config& c, const Qwen3Weights& w);

}  // namespace hearth
