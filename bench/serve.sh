#!/usr/bin/env bash
# Serving benchmark: `hearth serve` beside llama.cpp's llama-server on the same weights, the same
# thread count and the same streamed chat requests (bench/serve_load.mjs, the official openai
# client). Both servers stay up for the whole window; for each concurrency level the runs
# alternate hearth, llama, hearth, llama (--rounds pairs), so drift on a shared machine hits both.
# Each run records how much CPU the idle other server used meanwhile (other_server_cpu_s).
#
# Usage:
#   bench/serve.sh --hearth BIN --model DIR --gguf FILE --llama-server BIN [--threads N]
#     [--concurrency 1,8,32] [--prompt-tokens 128] [--max-tokens 64] [--requests-per-level N]
#     [--rounds 2] [--parallel N] [--out FILE] [--template FILE] [--hearth-args "..."]
#     [--llama-args "..."] [--no-llama]
#   --model     the HF checkpoint folder hearth serves (BF16, or a `hearth quantize` output)
#   --gguf      the same weights for llama-server (see "Making the GGUF" below)
#   --threads   for both servers (default: the physical cores, from lscpu)
#   --parallel  hearth --parallel and llama-server -np (default: the largest concurrency);
#               llama-server gets -c parallel * (prompt-tokens + max-tokens + 64)
#   --template  the Jinja chat template for llama-server (default: chat_template from
#               DIR/tokenizer_config.json), so both render the same prompt (llama-server --jinja)
#   --out       where the JSON summary goes (also printed on stdout); default: none
#   --no-llama  hearth only
# Output JSON: {cpu_model, threads, ..., runs: [one serve_load.mjs level each, with round and
# other_server_cpu_s], summary: [per concurrency and server: medians over rounds of
# output_tokens_per_s, ttft_p50_ms, ttft_p99_ms, tpot_p50_ms; errors summed; and
# hearth_over_llama_tokens_per_s]}; a table on stderr.
#
# Making the GGUF (bench/st2gguf.py: a one-file BF16 safetensors Qwen3 checkpoint, e.g. a
# `hearth standin`; needs numpy and llama.cpp's gguf-py, no torch; Debian's python3-numpy,
# python3-yaml, python3-tqdm and python3-requests with /usr/bin/python3 do):
#   GGUF_PY=/tmp/llama.cpp/gguf-py /usr/bin/python3 bench/st2gguf.py MODEL_DIR MODEL-bf16.gguf
#   /tmp/llama.cpp/build/bin/llama-quantize MODEL-bf16.gguf MODEL-Q4_0.gguf Q4_0
# (llama-quantize gives the tied embedding / LM head Q6_K in a Q4_0 file; the nearest hearth side
# is `hearth quantize --model MODEL_DIR --out MODEL_DIR-int4 --bits 4 --head int4`, served with
# --model MODEL_DIR-int4.) A real Qwen3 checkpoint converts with llama.cpp's own
# convert_hf_to_gguf.py MODEL_DIR --outtype bf16 --outfile MODEL-bf16.gguf.
# The st2gguf.py GGUF has no chat template; --template (default: the checkpoint's) supplies it.
#
# Example (0.6B stand-in, BF16):
#   build/hearth standin --preset 0.6b --out models-cache/standin-0.6b-bf16
#   GGUF_PY=/tmp/llama.cpp/gguf-py /usr/bin/python3 bench/st2gguf.py models-cache/standin-0.6b-bf16 \
#     models-cache/standin-0.6b-bf16.gguf
#   bench/serve.sh --hearth build/hearth --model models-cache/standin-0.6b-bf16 \
#     --gguf models-cache/standin-0.6b-bf16.gguf --llama-server /tmp/llama.cpp/build/bin/llama-server \
#     --concurrency 1,8,32 --out /tmp/serve_results.json
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

hearth='' model='' gguf='' llama='' threads='' conc=1,8,32 prompt=128 gen=64 rpl='' rounds=2
parallel='' out='' template='' hearth_args='' llama_args='' no_llama=0
die() { echo "serve.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --hearth) hearth=$2; shift ;;
    --model) model=$2; shift ;;
    --gguf) gguf=$2; shift ;;
    --llama-server) llama=$2; shift ;;
    --threads) threads=$2; shift ;;
    --concurrency) conc=$2; shift ;;
    --prompt-tokens) prompt=$2; shift ;;
    --max-tokens) gen=$2; shift ;;
    --requests-per-level) rpl=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --parallel) parallel=$2; shift ;;
    --out) out=$2; shift ;;
    --template) template=$2; shift ;;
    --hearth-args) hearth_args=$2; shift ;;
    --llama-args) llama_args=$2; shift ;;
    --no-llama) no_llama=1 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
  shift
done
[ -n "$hearth" ] && [ -x "$hearth" ] || die "--hearth BIN: not an executable: '$hearth'"
[ -n "$model" ] && [ -f "$model/config.json" ] || die "--model DIR: no config.json in '$model'"
if [ "$no_llama" = 0 ]; then
  [ -n "$gguf" ] && [ -f "$gguf" ] || die "--gguf FILE: not a file: '$gguf' (see --help: Making the GGUF)"
  [ -n "$llama" ] && [ -x "$llama" ] || die "--llama-server BIN: not an executable: '$llama'"
fi
if [ -z "$threads" ]; then
  threads=$(lscpu -p=Core,Socket | grep -v '^#' | sort -u | wc -l)
  [ "$threads" -ge 1 ] || threads=$(nproc)
fi
if [ -z "$parallel" ]; then
  parallel=$(tr ',' '\n' <<<"$conc" | sort -n | tail -1)
fi
ctx=$((parallel * (prompt + gen + 64)))
cpu_model=$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)
tmp=$(mktemp -d /tmp/serve-bench.XXXXXX)
hearth_pid='' llama_pid=''
cleanup() {
  for p in $hearth_pid $llama_pid; do kill "$p" 2>/dev/null || true; done
  for p in $hearth_pid $llama_pid; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# CPU seconds (user + system) a process has used so far.
cpu_s() {
  local f
  f=$(cut -d')' -f2- "/proc/$1/stat" 2>/dev/null) || { echo 0; return; }
  awk -v t="$(getconf CLK_TCK)" '{ printf "%.2f", ($12 + $13) / t }' <<<"$f"
}

# hearth: --port 0, the port comes from its "listening on" line.
# shellcheck disable=SC2086
"$hearth" serve --model "$model" --port 0 --threads "$threads" --parallel "$parallel" $hearth_args \
  2>"$tmp/hearth.log" >/dev/null &
hearth_pid=$!
hearth_url=''
for _ in $(seq 600); do
  hearth_url=$(grep -o 'listening on http://[^[:space:]]*' "$tmp/hearth.log" | head -1 | sed 's/^listening on //') || true
  [ -n "$hearth_url" ] && break
  kill -0 "$hearth_pid" 2>/dev/null || { cat "$tmp/hearth.log" >&2; die "hearth serve exited before listening"; }
  sleep 0.5
done
[ -n "$hearth_url" ] || { cat "$tmp/hearth.log" >&2; die "hearth serve did not listen within 300 s"; }
echo "serve.sh: hearth at $hearth_url (threads $threads, parallel $parallel)" >&2

llama_url='' llama_version=''
if [ "$no_llama" = 0 ]; then
  if [ -z "$template" ]; then
    template="$tmp/chat_template.jinja"
    node -e '
      const c = JSON.parse(require("fs").readFileSync(process.argv[1] + "/tokenizer_config.json", "utf8"));
      if (typeof c.chat_template !== "string") process.exit(1);
      require("fs").writeFileSync(process.argv[2], c.chat_template);' "$model" "$template" ||
      die "no chat_template in $model/tokenizer_config.json: pass --template FILE"
  fi
  port=$(node -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });')
  llama_version=$("$llama" --version 2>&1 | grep -m1 -i 'version' || true)
  # shellcheck disable=SC2086
  "$llama" -m "$gguf" -np "$parallel" -c "$ctx" --host 127.0.0.1 --port "$port" -t "$threads" \
    --jinja --chat-template-file "$template" $llama_args >"$tmp/llama.log" 2>&1 &
  llama_pid=$!
  llama_url="http://127.0.0.1:$port"
  ok=0
  for _ in $(seq 600); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$llama_url/health" || true)" = 200 ] && { ok=1; break; }
    kill -0 "$llama_pid" 2>/dev/null || { tail -30 "$tmp/llama.log" >&2; die "llama-server exited before ready"; }
    sleep 0.5
  done
  [ "$ok" = 1 ] || { tail -30 "$tmp/llama.log" >&2; die "llama-server not ready within 300 s"; }
  echo "serve.sh: llama-server at $llama_url (-np $parallel -c $ctx -t $threads)" >&2
fi

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
runs="$tmp/runs.jsonl"
: >"$runs"
run_no=0
for c in ${conc//,/ }; do
  for r in $(seq "$rounds"); do
    for label in hearth llama; do
      if [ "$label" = hearth ]; then
        url=$hearth_url other=$llama_pid
      else
        [ "$no_llama" = 0 ] || continue
        url=$llama_url other=$hearth_pid
      fi
      run_no=$((run_no + 1))
      args=(--url "$url" --concurrency "$c" --prompt-tokens "$prompt" --max-tokens "$gen"
        --label "$label" --start-index $((run_no * 100000)))
      [ -n "$rpl" ] && args+=(--requests-per-level "$rpl")
      o0=0 && [ -n "$other" ] && o0=$(cpu_s "$other")
      line=$(node "$here/serve_load.mjs" "${args[@]}") || echo "serve.sh: $label at concurrency $c had errors" >&2
      o1=0 && [ -n "$other" ] && o1=$(cpu_s "$other")
      [ -n "$line" ] || die "no result from serve_load.mjs ($label, concurrency $c)"
      node -e '
        const r = JSON.parse(process.argv[1]);
        r.round = Number(process.argv[2]);
        r.other_server_cpu_s = Number((Number(process.argv[4]) - Number(process.argv[3])).toFixed(2));
        console.log(JSON.stringify(r));' "$line" "$r" "$o0" "$o1" >>"$runs"
    done
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

export BENCH_META
BENCH_META=$(node -e 'console.log(JSON.stringify({
  cpu_model: process.argv[1], nproc: Number(process.argv[2]), threads: Number(process.argv[3]),
  parallel: Number(process.argv[4]), llama_ctx: Number(process.argv[5]),
  prompt_words: Number(process.argv[6]), max_tokens: Number(process.argv[7]),
  rounds: Number(process.argv[8]), hearth: process.argv[9], model: process.argv[10],
  gguf: process.argv[11] || null, llama_server: process.argv[12] || null,
  llama_version: process.argv[13] || null, hearth_args: process.argv[14], llama_args: process.argv[15],
  loadavg_before: process.argv[16], loadavg_after: process.argv[17], date: new Date().toISOString() }))' \
  "$cpu_model" "$(nproc)" "$threads" "$parallel" "$([ "$no_llama" = 0 ] && echo "$ctx" || echo 0)" \
  "$prompt" "$gen" "$rounds" "$(readlink -f "$hearth")" "$(readlink -f "$model")" \
  "$([ "$no_llama" = 0 ] && readlink -f "$gguf" || true)" "$([ "$no_llama" = 0 ] && readlink -f "$llama" || true)" \
  "$llama_version" "$hearth_args" "$llama_args" "$load_before" "$load_after")
# shellcheck disable=SC2016
summary=$(node -e '
  const fs = require("fs");
  const runs = fs.readFileSync(process.argv[1], "utf8").split("\n").filter(Boolean).map(JSON.parse);
  const med = (xs) => { xs = xs.filter((x) => x !== null).sort((a, b) => a - b); if (!xs.length) return null;
    const m = xs.length >> 1; return xs.length % 2 ? xs[m] : (xs[m - 1] + xs[m]) / 2; };
  const summary = [];
  for (const c of [...new Set(runs.map((r) => r.concurrency))]) {
    const row = { concurrency: c };
    for (const label of ["hearth", "llama"]) {
      const rs = runs.filter((r) => r.concurrency === c && r.label === label);
      if (!rs.length) continue;
      row[label] = { runs: rs.length, errors: rs.reduce((a, r) => a + r.errors, 0),
        output_tokens_per_s: med(rs.map((r) => r.output_tokens_per_s)),
        ttft_p50_ms: med(rs.map((r) => r.ttft_p50_ms)), ttft_p99_ms: med(rs.map((r) => r.ttft_p99_ms)),
        tpot_p50_ms: med(rs.map((r) => r.tpot_p50_ms)),
        completion_tokens_mean: med(rs.map((r) => r.completion_tokens_mean)),
        prompt_tokens_mean: med(rs.map((r) => r.prompt_tokens_mean)) };
    }
    if (row.hearth && row.llama && row.llama.output_tokens_per_s)
      row.hearth_over_llama_tokens_per_s = Number((row.hearth.output_tokens_per_s / row.llama.output_tokens_per_s).toFixed(3));
    summary.push(row);
  }
  const res = { ...JSON.parse(process.env.BENCH_META), runs, summary };
  const f = (x) => (x === null || x === undefined ? "-" : String(Number(x.toFixed ? x.toFixed(1) : x)));
  const lines = [["conc", "server", "out_tok/s", "ttft_p50", "ttft_p99", "tpot_p50", "gen", "prompt", "err", "h/l"]];
  for (const row of summary) for (const label of ["hearth", "llama"]) { const s = row[label]; if (!s) continue;
    lines.push([String(row.concurrency), label, f(s.output_tokens_per_s), f(s.ttft_p50_ms), f(s.ttft_p99_ms),
      f(s.tpot_p50_ms), f(s.completion_tokens_mean), f(s.prompt_tokens_mean), String(s.errors),
      label === "hearth" ? f(row.hearth_over_llama_tokens_per_s) : ""]); }
  const w = lines[0].map((_, j) => Math.max(...lines.map((l) => l[j].length)));
  process.stderr.write(`${res.cpu_model}, ${res.threads} threads, parallel ${res.parallel}, ` +
    `prompt ${res.prompt_words} words, max_tokens ${res.max_tokens}, medians of ${res.rounds} rounds\n` +
    lines.map((l) => l.map((s, j) => s.padStart(w[j])).join("  ")).join("\n") + "\n");
  console.log(JSON.stringify(res, null, 1));' "$runs")
if [ -n "$out" ]; then
  printf '%s\n' "$summary" >"$out"
  echo "serve.sh: wrote $out" >&2
fi
printf '%s\n' "$summary"
