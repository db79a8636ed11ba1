// Encode throughput of Hugging Face `tokenizers` (its Node binding) on the same text hearth uses,
// single thread, best of N after a warm-up. Usage: node tokenizer_hf.js TOKENIZER_JSON TEXT N
const fs = require('fs');
const { Tokenizer } = require('tokenizers');

async function main() {
  const [tokPath, textPath, reps] = process.argv.slice(2);
  const tok = Tokenizer.fromFile(tokPath);
  const text = fs.readFileSync(textPath, 'utf8');
  const bytes = Buffer.byteLength(text, 'utf8');
  // Encode in 4 KiB pieces split on newlines: one giant string is not how the library is used,
  // and smaller pieces are its best case (hearth encodes the whole text in one call).
  const pieces = text.split(/(?<=\n)/);
  const chunks = [];
  let cur = '';
  for (const p of pieces) {
    if (cur.length + p.length > 4096 && cur) { chunks.push(cur); cur = ''; }
    cur += p;
  }
  if (cur) chunks.push(cur);
  let ids = 0;
  for (const c of chunks) ids += (await tok.encode(c, null, { addSpecialTokens: false })).getIds().length;
  let best = Infinity;
  for (let r = 0; r < Number(reps || 3); r++) {
    const t0 = process.hrtime.bigint();
    for (const c of chunks) await tok.encode(c, null, { addSpecialTokens: false });
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  console.log(JSON.stringify({ bytes, tokens: ids, encode_mb_per_s: bytes / 1e6 / best }));
}
main();
