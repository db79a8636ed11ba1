#!/usr/bin/env bash
# Sets up, builds, and generates text. Usage: scripts/demo.sh [MODEL_DIR] [PROMPT]
# With no MODEL_DIR, a Qwen3-0.6B-shaped checkpoint with RANDOM weights is generated first: it
# runs at true size and speed, but its text is gibberish.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build hearth

model="${1:-}"
prompt="${2:-Give me a short introduction to large language models.}"
if [ -z "$model" ]; then
  model=models-cache/standin-0.6b-bf16
  if [ ! -f "$model/config.json" ]; then
    echo "No model folder given: writing a random-weight Qwen3-0.6B-shape stand-in to $model" >&2
    build/hearth standin --preset 0.6b --out "$model"
  fi
  echo "NOTE: $model has random weights (a stand-in, not a trained model); expect gibberish." >&2
fi
build/hearth run --model "$model" --prompt "$prompt" --max-new-tokens 64
