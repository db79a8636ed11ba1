#!/usr/bin/env bash
# Decode and prefill speed of hearth on random-weight Qwen3 stand-ins at true sizes, as fractions of
# the machine's limits measured in the same runs, and beside llama.cpp when it is available.
#
# Usage: bench/compare.sh [SCHEMES] [THREADS] [ROUNDS]
#   SCHEMES  space-separated, from: 0.6b-bf16 1.7b-bf16 0.6b-int8 0.6b-int4 0.6b-int4cb (the
#            4-bit codebook variant) 0.6b-int4h4 (INT4 with an INT4 LM head, nearer llama.cpp's
#            Q4_0 file, whose tied head is Q6_K); default: all six
#            Qwen3-MoE slices: 30b-a3b-L6-bf16, 30b-a3b-L6-int4 (the 30B-A3B shape with its first
#            6 layers; any -L<N>, and any of the kinds above)
#   THREADS  space-separated thread counts (default: "1 2")
#   ROUNDS   alternating rounds per case (default: 2)
# llama.cpp (optional): set LLAMA_BENCH to a llama-bench binary and LLAMA_CONVERT to its
# convert_hf_to_gguf.py (or GGUF_PY to its gguf-py folder, for bench/st2gguf.py, which needs only
# numpy); the stand-ins are converted once (bf16, then Q8_0 / Q4_0 with
# LLAMA_QUANTIZE) and each round runs hearth, then llama-bench, on the same weights. GGUF files
# already at models-cache/standin-SIZE-bf16.gguf (and -Q8_0.gguf, -Q4_0.gguf) are used as they are,
# so a converter is only needed to make them.
# hearth runs with its default flags, decoding with the checkpoint's sampling (Qwen3: temperature
# 0.6, top-k 20, top-p 0.95) as `hearth run` does; llama-bench's tg test does not sample. DEPTH=N
# (default 0) puts N positions in the context first on both sides (hearth --depth, llama-bench -d).
# Stand-ins and quantized copies live in models-cache/ (about 7 GB in all). Output: one JSON line
# per run, then a table. Shared machines drift from minute to minute: trust the 1-thread ratios
# and the fractions of the ceiling more than absolute tokens/s.
set -euo pipefail
cd "$(dirname "$0")/.."
schemes="${1:-0.6b-bf16 1.7b-bf16 0.6b-int8 0.6b-int4 0.6b-int4cb 0.6b-int4h4}"
threads="${2:-1 2}"
rounds="${3:-2}"
depth=${DEPTH:-0}  # positions in the context before each test (hearth --depth, llama-bench -d)
hearth=${HEARTH:-build/hearth}
cache=models-cache
out="$cache/compare-$(date +%Y%m%d-%H%M%S).jsonl"
mkdir -p "$cache"
[ -x "$hearth" ] || { cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null && ninja -C build hearth; }

# The checkpoint for a scheme, made on first use.
# A scheme is SIZE-KIND; SIZE is a preset, or PRESET-L<N> for its first N layers.
standin_args() {
  local size=$1
  case "$size" in
    *-L*) echo "--preset ${size%-L*} --layers ${size##*-L}" ;;
    *) echo "--preset $size" ;;
  esac
}

model_dir() {
  local size=${1%-*} kind=${1##*-}
  local base="$cache/standin-$size-bf16"
  # shellcheck disable=SC2046
  [ -f "$base/config.json" ] || "$hearth" standin $(standin_args "$size") --out "$base" >&2
  case "$kind" in
    bf16) echo "$base" ;;
    int8 | int4 | int4cb | int4h4)
      local q="$cache/standin-$size-$kind" bits=${kind#int} extra=()
      [ "$kind" = int4cb ] && bits=4 extra=(--codebook)
      [ "$kind" = int4h4 ] && bits=4 extra=(--head int4)
      [ -f "$q/config.json" ] ||
        "$hearth" quantize --model "$base" --out "$q" --bits "$bits" "${extra[@]}" >&2
      echo "$q" ;;
    *) echo "unknown scheme $1" >&2; exit 1 ;;
  esac
}

# llama.cpp's GGUF of the same weights, or nothing when llama.cpp is not set up.
gguf_for() {
  [ -n "${LLAMA_BENCH:-}" ] || return 0
  local size=${1%-*} kind=${1##*-}
  local base="$cache/standin-$size-bf16" g="$cache/standin-$size-bf16.gguf"
  if [ ! -f "$g" ] && [ -n "${GGUF_PY:-}" ]; then
    python3 bench/st2gguf.py "$base" "$g" >&2
  elif [ ! -f "$g" ]; then
    python3 "${LLAMA_CONVERT:?set LLAMA_CONVERT to convert_hf_to_gguf.py}" "$base" --outtype bf16 \
      --outfile "$g" >&2
  fi
  case "$kind" in
    bf16) echo "$g" ;;
    int8 | int4 | int4cb | int4h4)
      local t=Q8_0 && [ "$kind" != int8 ] && t=Q4_0
      local q="$cache/standin-$size-$t.gguf"
      [ -f "$q" ] || "${LLAMA_QUANTIZE:?set LLAMA_QUANTIZE to llama-quantize}" "$g" "$q" "$t" >&2
      echo "$q" ;;
  esac
}

for round in $(seq 1 "$rounds"); do
  for s in $schemes; do
    m=$(model_dir "$s")
    g=$(gguf_for "$s")
    for t in $threads; do
      "$hearth" bench --model "$m" --threads "$t" --prompt 512 --gen 128 --reps 1 --depth "$depth" \
        --json |
        python3 -c "import json,sys; d=json.load(sys.stdin); d.update(engine='hearth', scheme='$s', round=$round); print(json.dumps(d))" |
        tee -a "$out"
      if [ -n "$g" ]; then
        "$LLAMA_BENCH" -m "$g" -t "$t" -p 512 -n 128 -d "$depth" -r 1 -o json |
          python3 -c "
import json, sys
rows = json.load(sys.stdin)
pp = [r['avg_ts'] for r in rows if r.get('n_prompt', 0) > 0 and r.get('n_gen', 0) == 0]
tg = [r['avg_ts'] for r in rows if r.get('n_gen', 0) > 0 and r.get('n_prompt', 0) == 0]
print(json.dumps(dict(engine='llama.cpp', scheme='$s', round=$round, threads=$t,
                      prefill_tokens_per_s=pp[0] if pp else None,
                      decode_tokens_per_s=tg[0] if tg else None)))" | tee -a "$out"
      fi
    done
  done
done

python3 - "$out" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
# llama-bench figures on the issue's 2-core Zen4 machine, for when llama.cpp is not run here.
ref = {("0.6b-bf16", 1): (134, 16.0), ("0.6b-bf16", 2): (258, 23.7),
       ("1.7b-bf16", 1): (59, 6.9), ("1.7b-bf16", 2): (99, 10.0),
       ("0.6b-int4", 1): (121, 44.4), ("0.6b-int4", 2): (205, 56.2),
       ("0.6b-int4cb", 1): (121, 44.4), ("0.6b-int4cb", 2): (205, 56.2),
       ("0.6b-int4h4", 1): (121, 44.4), ("0.6b-int4h4", 2): (205, 56.2),
       ("0.6b-int8", 1): (97, 28.9), ("0.6b-int8", 2): (189, 39.4)}
def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None
# Prefill against the peak of the arithmetic it ran on (hearth bench picks the fastest of them).
def peak_fraction(r):
    return r["prefill_peak_fraction"], r["prefill_peak_arithmetic"] or "no probe"
print("\n| scheme | threads | prefill t/s | % peak (of) | decode t/s | % read bw | bw GB/s "
      "| llama.cpp pp/tg | ratio pp/tg |")
print("|---|---|---|---|---|---|---|---|---|")
for (s, t) in sorted({(r["scheme"], r["threads"]) for r in rows}):
    h = [r for r in rows if r["engine"] == "hearth" and r["scheme"] == s and r["threads"] == t]
    l = [r for r in rows if r["engine"] == "llama.cpp" and r["scheme"] == s and r["threads"] == t]
    pp, tg = med([r["prefill_tokens_per_s"] for r in h]), med([r["decode_tokens_per_s"] for r in h])
    if l:
        lp, lt = med([r["prefill_tokens_per_s"] for r in l]), med([r["decode_tokens_per_s"] for r in l])
        src = "here"
    else:
        lp, lt = ref.get((s, t), (None, None))
        src = "issue (Zen4)"
    ratio = lambda a, b: f"{a / b:.2f}" if a and b else "-"
    kind = peak_fraction(h[0])[1]
    print(f"| {s} | {t} | {pp:.1f} | {100 * med([peak_fraction(r)[0] for r in h]):.0f}% ({kind}) "
          f"| {tg:.1f} | {100 * med([r['decode_bw_fraction'] for r in h]):.0f}% "
          f"| {med([r['mem_bw_gbs'] for r in h]):.1f} | {lp}/{lt} ({src}) "
          f"| {ratio(pp, lp)}/{ratio(tg, lt)} |")
print(f"\nraw runs: {sys.argv[1]}")
PY
