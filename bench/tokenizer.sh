#!/usr/bin/env bash
# Tokenizer encode speed, hearth against Hugging Face `tokenizers` (npm), on one mixed text in
# one run. Usage: bench/tokenizer.sh [MODEL_DIR]   (needs build/hearth and node/npm)
set -euo pipefail
cd "$(dirname "$0")/.."
model="${1:-../shared/fixtures/models/tiny-tied-bf16}"
work=models-cache/tokenizer-bench
mkdir -p "$work"
if [ ! -d "$work/node_modules/tokenizers" ]; then
  (cd "$work" && npm install --silent --no-audit --no-fund tokenizers@0.23.2 >/dev/null)
fi
# A ~4 MB mixed text: every tokenizer fixture text (many languages, code, emoji), repeated.
python3 - "$work/mixed.txt" <<'PY'
import json, sys
texts = [json.loads(l)["text"] for l in open("../shared/fixtures/tokenizer/tokenize.jsonl")]
body = "\n".join(texts) + "\n"
open(sys.argv[1], "w").write(body * max(1, 4_000_000 // len(body.encode())))
PY
for round in 1 2; do
  h=$(${HEARTH:-build/hearth} bench-tokenizer --model "$model" --text "$work/mixed.txt" --repeats 3 --json)
  f=$(NODE_PATH="$work/node_modules" RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false \
      node bench/tokenizer_hf.js "$model/tokenizer.json" "$work/mixed.txt" 3)
  python3 -c "
import json,sys
h=json.loads('''$h'''); f=json.loads('''$f''')
print(json.dumps({'round': $round, 'hearth_mb_per_s': round(h['encode_mb_per_s'],2), 'hf_tokenizers_mb_per_s': round(f['encode_mb_per_s'],2), 'ratio': round(h['encode_mb_per_s']/f['encode_mb_per_s'],2)}))"
done
