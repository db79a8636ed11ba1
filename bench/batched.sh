#!/usr/bin/env bash
# Batched decode of hearth beside llama.cpp's llama-batched-bench: N sequences of 128 prompt + 128
# generated tokens at once, N in 1,2,4,8,16, alternating the two engines on the same weights.
#
# Usage: bench/batched.sh MODEL_DIR [GGUF] [THREADS] [ROUNDS]
#   MODEL_DIR  a hearth checkpoint (e.g. `hearth standin --preset 0.6b`, or its `quantize --bits 4`)
#   GGUF       the same weights for llama.cpp (bench/st2gguf.py, then llama-quantize Q4_0 beside
#              an INT4 checkpoint); without it only hearth runs
#   THREADS    space-separated thread counts (default "1 2"); ROUNDS alternating rounds (default 1)
# LLAMA_BATCHED_BENCH: the llama-batched-bench binary. Output: JSON files and the load average
# before each run in models-cache/batched-DATE/; the machine must be quiet (check the load log).
set -euo pipefail
cd "$(dirname "$0")/.."
model=$1 gguf=${2:-} threads=${3:-1 2} rounds=${4:-1}
hearth=${HEARTH:-build/hearth}
out=models-cache/batched-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
  for t in $threads; do
    echo "hearth t=$t r=$r load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/load.log"
    "$hearth" bench --model "$model" --parallel 1,2,4,8,16 --threads "$t" --json \
      > "$out/hearth-t$t-r$r.json"
    if [ -n "$gguf" ]; then
      echo "llama.cpp t=$t r=$r load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/load.log"
      "${LLAMA_BATCHED_BENCH:?set LLAMA_BATCHED_BENCH to llama-batched-bench}" -m "$gguf" \
        -npp 128 -ntg 128 -npl 1,2,4,8,16 -t "$t" -c 4096 --output-format jsonl 2>/dev/null |
        grep '^{' > "$out/llama-t$t-r$r.jsonl"
    fi
  done
done
python3 - "$out" <<'PY'
import glob, json, os, sys
d = sys.argv[1]
for f in sorted(glob.glob(f"{d}/hearth-*.json")):
    h = {p["n"]: p for p in json.load(open(f))["parallel"]}
    lf = f.replace("hearth-", "llama-").replace(".json", ".jsonl")
    l = {p["pl"]: p for p in map(json.loads, open(lf))} if os.path.exists(lf) else {}
    print(f"\n{os.path.basename(f)}\n| N | hearth pp / tg t/s | llama.cpp pp / tg t/s | tg ratio |")
    print("|---|---|---|---|")
    for n, p in sorted(h.items()):
        q = l.get(n)
        lt = f"{q['speed_pp']:.1f} / {q['speed_tg']:.1f}" if q else "-"
        ratio = f"{p['decode_tokens_per_s'] / q['speed_tg']:.2f}" if q else "-"
        print(f"| {n} | {p['prefill_tokens_per_s']:.1f} / {p['decode_tokens_per_s']:.1f} | {lt} | {ratio} |")
PY
