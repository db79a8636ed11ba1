#!/usr/bin/env node
// Load generator for OpenAI-compatible servers (`hearth serve`, llama.cpp's llama-server): streams
// chat completions with the official `openai` client at each concurrency level and measures, per
// request, TTFT (send -> first non-empty content / reasoning / tool-call delta) and TPOT
// ((last token time - first token time) / (completion_tokens - 1)); per level, aggregate output
// tokens/s (completion tokens of all requests / wall time of the level), TTFT p50/p99, TPOT p50/p99,
// end-to-end latency p50 and errors.
//
// Usage:
//   node bench/serve_load.mjs --url http://127.0.0.1:8080 --model NAME [--concurrency 1,8,32]
//     [--prompt-tokens 128] [--max-tokens 64] [--requests-per-level N] [--label hearth|llama]
//     [--api-key KEY] [--timeout 600] [--no-ignore-eos] [--no-thinking] [--start-index K]
// --url: with or without /v1. --requests-per-level: default max(8, 2 * concurrency).
// Output: one JSON object per level on stdout, a table on stderr. Exit status 1 when a level had
// errors (the JSON lines are written either way).
//
// The request is the same for every server: model, messages, temperature 0, max_tokens, stream,
// stream_options.include_usage, ignore_eos: true (llama-server then always generates max_tokens;
// hearth ignores the field, and its random-weight stand-ins almost never emit EOS, so check
// completion_tokens_mean in the output). No template arguments: both servers render the Qwen3
// template with its defaults (llama-server needs --jinja and the checkpoint's template, see
// bench/serve.sh); --no-thinking adds chat_template_kwargs.enable_thinking: false (an empty think
// block in the prompt; hearth answered that with 400 "argument 'enable_thinking' is given twice"
// when this was written).
// The prompt is --prompt-tokens words from a fixed list (each word one token in the Qwen3
// vocabulary), preceded by "Request K: " with K unique per request (across levels too, see
// --start-index): the varying part is at the very start so a prefix cache (hearth shares only whole
// leading blocks, llama-server the common token prefix) cannot make a request free. The chat
// template adds about 17 tokens; usage.prompt_tokens is reported as prompt_tokens_mean.
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { performance } from 'node:perf_hooks';

const here = path.dirname(fileURLToPath(import.meta.url));
const { default: OpenAI } = await import(
  pathToFileURL(path.join(here, '../tests/serve/node_modules/openai/index.mjs')).href
);

function parseArgs(argv) {
  const o = {
    url: 'http://127.0.0.1:8080',
    model: '',
    concurrency: [1, 8, 32],
    promptTokens: 128,
    maxTokens: 64,
    requestsPerLevel: 0,
    label: 'server',
    apiKey: 'none',
    timeout: 600,
    ignoreEos: true,
    noThinking: false,
    startIndex: 0,
  };
  const need = (i) => {
    if (i + 1 >= argv.length) throw new Error(`${argv[i]} needs a value`);
    return argv[i + 1];
  };
  const posInt = (flag, v, min = 1) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < min) throw new Error(`${flag}: expected an integer >= ${min}, got '${v}'`);
    return n;
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    switch (a) {
      case '--url': o.url = need(i); i++; break;
      case '--model': o.model = need(i); i++; break;
      case '--concurrency':
        o.concurrency = need(i).split(',').filter(Boolean).map((s) => posInt(a, s));
        i++;
        break;
      case '--prompt-tokens': o.promptTokens = posInt(a, need(i)); i++; break;
      case '--max-tokens': o.maxTokens = posInt(a, need(i)); i++; break;
      case '--requests-per-level': o.requestsPerLevel = posInt(a, need(i)); i++; break;
      case '--label': o.label = need(i); i++; break;
      case '--api-key': o.apiKey = need(i); i++; break;
      case '--timeout': o.timeout = posInt(a, need(i)); i++; break;
      case '--start-index': o.startIndex = posInt(a, need(i), 0); i++; break;
      case '--no-ignore-eos': o.ignoreEos = false; break;
      case '--no-thinking': o.noThinking = true; break;
      case '-h':
      case '--help':
        process.stderr.write(
          'node bench/serve_load.mjs --url URL --model NAME [--concurrency 1,8,32] [--prompt-tokens 128]\n' +
            '  [--max-tokens 64] [--requests-per-level N] [--label L] [--api-key K] [--timeout S]\n' +
            '  [--no-ignore-eos] [--no-thinking] [--start-index K]\n',
        );
        process.exit(0);
      default:
        throw new Error(`unknown option '${a}'`);
    }
  }
  if (!o.concurrency.length) throw new Error('--concurrency: empty list');
  o.baseURL = o.url.replace(/\/+$/, '').replace(/\/v1$/, '') + '/v1';
  return o;
}

// Common English words, each a single token (with its leading space) in the Qwen3 vocabulary.
const WORDS = (
  'the quick brown fox jumps over lazy dog while river water runs past green hills under bright ' +
  'summer sky and small birds sing near old stone walls of quiet town where people walk slowly'
).split(' ');

function promptText(k, nWords) {
  const words = [];
  for (let i = 0; i < nWords; i++) words.push(WORDS[i % WORDS.length]);
  return `Request ${k}: ${words.join(' ')}`;
}

function quantile(xs, q) {
  if (!xs.length) return null;
  const s = [...xs].sort((a, b) => a - b);
  const pos = (s.length - 1) * q;
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  return s[lo] + (s[hi] - s[lo]) * (pos - lo);
}

const mean = (xs) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null);
const round = (x, d = 2) => (x === null || x === undefined ? null : Number(x.toFixed(d)));

// One streamed request; resolves to its measurements (never rejects: errors are recorded).
async function oneRequest(client, opt, k) {
  const body = {
    model: opt.model,
    messages: [{ role: 'user', content: promptText(k, opt.promptTokens) }],
    temperature: 0,
    max_tokens: opt.maxTokens,
    stream: true,
    stream_options: { include_usage: true },
  };
  if (opt.ignoreEos) body.ignore_eos = true;
  if (opt.noThinking) body.chat_template_kwargs = { enable_thinking: false };
  const r = { k, ok: false, ttft_ms: null, tpot_ms: null, e2e_ms: null, prompt_tokens: null,
    completion_tokens: null, deltas: 0, finish_reason: null, error: null };
  const t0 = performance.now();
  let first = null;
  let last = null;
  try {
    const stream = await client.chat.completions.create(body);
    for await (const chunk of stream) {
      const now = performance.now();
      if (chunk.usage) {
        r.prompt_tokens = chunk.usage.prompt_tokens;
        r.completion_tokens = chunk.usage.completion_tokens;
      }
      const c = chunk.choices && chunk.choices[0];
      if (!c) continue;
      if (c.finish_reason) r.finish_reason = c.finish_reason;
      const d = c.delta || {};
      if (d.content || d.reasoning_content || d.reasoning || (d.tool_calls && d.tool_calls.length)) {
        if (first === null) first = now;
        last = now;
        r.deltas++;
      }
    }
    r.e2e_ms = performance.now() - t0;
    if (first === null) throw new Error('stream ended without a content delta');
    if (r.completion_tokens === null) throw new Error('no usage chunk (stream_options.include_usage)');
    r.ttft_ms = first - t0;
    if (r.completion_tokens > 1) r.tpot_ms = (last - first) / (r.completion_tokens - 1);
    r.ok = true;
  } catch (e) {
    r.e2e_ms = performance.now() - t0;
    r.error = `${e.status ? `HTTP ${e.status}: ` : ''}${e.message || e}`.slice(0, 300);
  }
  return r;
}

async function runLevel(client, opt, conc, nextIndex) {
  const n = opt.requestsPerLevel || Math.max(8, 2 * conc);
  let issued = 0;
  const results = [];
  const t0 = performance.now();
  const worker = async () => {
    while (issued < n) {
      issued++;
      results.push(await oneRequest(client, opt, nextIndex()));
    }
  };
  await Promise.all(Array.from({ length: Math.min(conc, n) }, worker));
  const wall = (performance.now() - t0) / 1000;
  const ok = results.filter((r) => r.ok);
  const bad = results.filter((r) => !r.ok);
  const completion = ok.reduce((a, r) => a + r.completion_tokens, 0);
  const ttft = ok.map((r) => r.ttft_ms);
  const tpot = ok.filter((r) => r.tpot_ms !== null).map((r) => r.tpot_ms);
  const e2e = ok.map((r) => r.e2e_ms);
  const finish = {};
  for (const r of ok) finish[r.finish_reason] = (finish[r.finish_reason] || 0) + 1;
  return {
    label: opt.label,
    url: opt.baseURL,
    model: opt.model,
    concurrency: conc,
    requests: n,
    ok: ok.length,
    errors: bad.length,
    first_error: bad.length ? bad[0].error : null,
    prompt_words: opt.promptTokens,
    max_tokens: opt.maxTokens,
    prompt_tokens_mean: round(mean(ok.map((r) => r.prompt_tokens)), 1),
    completion_tokens_total: completion,
    completion_tokens_mean: round(mean(ok.map((r) => r.completion_tokens)), 1),
    // Tokens per streamed delta: 1 when a server streams token by token.
    tokens_per_delta: round(completion / Math.max(1, ok.reduce((a, r) => a + r.deltas, 0)), 2),
    finish_reasons: finish,
    wall_s: round(wall, 3),
    output_tokens_per_s: round(completion / wall, 2),
    requests_per_s: round(ok.length / wall, 3),
    ttft_p50_ms: round(quantile(ttft, 0.5), 1),
    ttft_p99_ms: round(quantile(ttft, 0.99), 1),
    tpot_p50_ms: round(quantile(tpot, 0.5), 2),
    tpot_p99_ms: round(quantile(tpot, 0.99), 2),
    e2e_p50_ms: round(quantile(e2e, 0.5), 1),
    time: new Date().toISOString(),
  };
}

function table(rows) {
  const cols = [
    ['label', 'label'], ['conc', 'concurrency'], ['reqs', 'requests'], ['err', 'errors'],
    ['prompt', 'prompt_tokens_mean'], ['gen', 'completion_tokens_mean'], ['wall_s', 'wall_s'],
    ['out_tok/s', 'output_tokens_per_s'], ['ttft_p50', 'ttft_p50_ms'], ['ttft_p99', 'ttft_p99_ms'],
    ['tpot_p50', 'tpot_p50_ms'], ['tpot_p99', 'tpot_p99_ms'],
  ];
  const cells = [cols.map((c) => c[0]), ...rows.map((r) => cols.map((c) => String(r[c[1]] ?? '-')))];
  const w = cols.map((_, j) => Math.max(...cells.map((row) => row[j].length)));
  return cells.map((row) => row.map((s, j) => s.padStart(w[j])).join('  ')).join('\n') + '\n';
}

async function main() {
  let opt;
  try {
    opt = parseArgs(process.argv.slice(2));
  } catch (e) {
    process.stderr.write(`serve_load: ${e.message}\n`);
    process.exit(2);
  }
  const client = new OpenAI({ baseURL: opt.baseURL, apiKey: opt.apiKey, maxRetries: 0,
    timeout: opt.timeout * 1000 });
  if (!opt.model) {
    const models = await client.models.list();
    opt.model = models.data[0].id;
  }
  let k = opt.startIndex;
  const nextIndex = () => k++;
  // Warm-up: one request, not measured (first-touch of weights, thread pools, connections).
  const warm = await oneRequest(client, opt, nextIndex());
  if (!warm.ok) {
    process.stderr.write(`serve_load: warm-up request failed: ${warm.error}\n`);
    process.exit(1);
  }
  const rows = [];
  for (const c of opt.concurrency) {
    const row = await runLevel(client, opt, c, nextIndex);
    rows.push(row);
    process.stdout.write(JSON.stringify(row) + '\n');
    if (row.errors) process.stderr.write(`serve_load: ${row.errors} errors at concurrency ${c}: ${row.first_error}\n`);
  }
  process.stderr.write(table(rows));
  process.exit(rows.some((r) => r.errors) ? 1 : 0);
}

main().catch((e) => {
  process.stderr.write(`serve_load: ${e.stack || e}\n`);
  process.exit(1);
});
