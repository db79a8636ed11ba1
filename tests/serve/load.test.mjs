// 64 concurrent streaming clients, some of which give up halfway: every reply that completes
// must be the reply its request gets alone (--gemm native makes arithmetic independent of the
// batch), and afterwards the server must hold nothing and have grown no memory.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { startServer, modelName, getMetrics, rssBytes } from './server.mjs';

const K = 8; // distinct requests
const COPIES = 8; // clients per request in the load
const PROMPTS = [
  'Name a color.',
  'Count to five.',
  'What is a cat?',
  'Write one word.',
  'Describe rain.',
  'Say hello in French.',
  'Pick a number.',
  'Tell me about stars.',
];
// Each request samples (temperature 0.8) with its own seed: a reply depends on the seed and the
// sampler state of its own sequence only, so a mix-up between sequences shows.
const requestBody = (i, stream) => ({
  model: modelName,
  messages: [{ role: 'user', content: PROMPTS[i] }],
  temperature: 0.8,
  seed: 1000 + i,
  max_tokens: 24,
  enable_thinking: false, // chat_template_kwargs has its own test in openai.test.mjs
  stream,
});

let server;
const alone = []; // reply of request i sent alone
let rssBeforeLoad;

before(async () => {
  server = await startServer(['--gemm', 'native', '--parallel', '8']);
});

after(async () => {
  if (server) assert.deepEqual(await server.stop(), { code: 0, signal: null }, 'SIGTERM must exit 0');
});

// Deterministic pseudo-random numbers (mulberry32), so a failing pattern can be replayed.
function prng(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// The content and finish_reason of an SSE chat stream (framing is sse.test.mjs's business).
function readStream(text) {
  let content = '';
  let finish = null;
  let done = false;
  for (const line of text.split('\n')) {
    if (!line.startsWith('data: ')) continue;
    if (line === 'data: [DONE]') {
      done = true;
      continue;
    }
    const chunk = JSON.parse(line.slice(6));
    const choice = chunk.choices[0];
    if (!choice) continue;
    content += choice.delta?.content ?? '';
    finish = choice.finish_reason ?? finish;
  }
  return { content, finish, done };
}

async function postChat(body, signal) {
  return fetch(server.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal,
  });
}

// A client that reads its stream to the end.
async function streamingClient(i) {
  const res = await postChat(requestBody(i, true));
  assert.equal(res.status, 200);
  return { i, kind: 'complete', ...readStream(await res.text()) };
}

// A client that aborts (AbortController) after delayMs, wherever the request is by then.
async function abortingClient(i, delayMs) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), delayMs);
  try {
    const res = await postChat(requestBody(i, true), ctl.signal);
    const r = readStream(await res.text());
    return { i, kind: 'abort-too-late', ...r }; // it finished before the abort: still checked
  } catch (err) {
    if (err.name !== 'AbortError') throw err;
    return { i, kind: 'aborted' };
  } finally {
    clearTimeout(timer);
  }
}

// A client that destroys its socket once the stream has started, after delayMs more.
function destroyingClient(i, delayMs) {
  return new Promise((resolve, reject) => {
    const body = JSON.stringify(requestBody(i, true));
    let destroyed = false;
    const req = http.request(server.url + '/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
      agent: false, // its own connection, so destroying it harms no other client
    });
    req.on('response', (res) => {
      res.on('error', () => {}); // "aborted": we did it
      res.once('data', () =>
        setTimeout(() => {
          destroyed = true;
          res.socket.destroy();
        }, delayMs),
      );
      res.on('end', () => resolve({ i, kind: 'destroy-too-late' }));
      res.resume();
    });
    req.on('error', (err) => (destroyed ? resolve({ i, kind: 'destroyed' }) : reject(err)));
    req.on('close', () => resolve({ i, kind: destroyed ? 'destroyed' : 'destroy-too-late' }));
    req.end(body);
  });
}

// Polls /metrics until the named gauges are all 0; returns the last sample.
async function waitIdle(gauges, withinMs) {
  const deadline = Date.now() + withinMs;
  for (;;) {
    const m = await getMetrics(server.url);
    if (gauges.every((g) => m[g] === 0)) return m;
    if (Date.now() > deadline) {
      assert.fail(`not idle ${withinMs} ms after the load: ${gauges.map((g) => `${g}=${m[g]}`).join(' ')}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

const IDLE_GAUGES = [
  'hearth_requests_active',
  'hearth_running_sequences',
  'hearth_queue_depth',
  'hearth_held_sequences',
  'hearth_kv_blocks_used',
];

test('each request alone, one at a time', async () => {
  for (let i = 0; i < K; i++) {
    const res = await postChat(requestBody(i, false));
    assert.equal(res.status, 200);
    const r = await res.json();
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.usage.completion_tokens, 24);
    alone.push(r.choices[0].message.content);
  }
  // Distinct prompts and seeds: equal replies would mean the comparison below proves little.
  assert.equal(new Set(alone).size, K, 'alone replies are not distinct');
});

test('warm-up: the 8 requests at once give their alone replies', async () => {
  assert.equal(alone.length, K, 'needs the alone replies');
  const results = await Promise.all(PROMPTS.map((_, i) => streamingClient(i)));
  for (const r of results) {
    assert.ok(r.done, `request ${r.i}: no [DONE]`);
    assert.equal(r.content, alone[r.i], `request ${r.i} among 8`);
  }
  await waitIdle(IDLE_GAUGES, 10000);
});

// 64 clients at once, each one of the 8 requests; copies 0-5 read to the end, copy 6 aborts,
// copy 7 destroys its socket mid-stream. Every completed reply must be its request's alone reply.
async function load(t, seed) {
  const rand = prng(seed);
  const plan = [];
  for (let i = 0; i < K; i++) for (let c = 0; c < COPIES; c++) plan.push({ i, c });
  for (let n = plan.length - 1; n > 0; n--) {
    const m = Math.floor(rand() * (n + 1));
    [plan[n], plan[m]] = [plan[m], plan[n]];
  }
  const results = await Promise.all(
    plan.map(({ i, c }) => {
      if (c === 6) return abortingClient(i, Math.floor(rand() * 800));
      if (c === 7) return destroyingClient(i, Math.floor(rand() * 30));
      return streamingClient(i);
    }),
  );
  const kinds = {};
  for (const r of results) kinds[r.kind] = (kinds[r.kind] ?? 0) + 1;
  t.diagnostic(`clients: ${JSON.stringify(kinds)}`);
  let checked = 0;
  for (const r of results) {
    if (r.kind === 'aborted' || r.kind === 'destroyed' || r.kind === 'destroy-too-late') continue;
    assert.ok(r.done, `request ${r.i} (${r.kind}): stream ended without [DONE]`);
    assert.equal(r.finish, 'length', `request ${r.i} (${r.kind})`);
    assert.equal(r.content, alone[r.i], `request ${r.i} (${r.kind}) under load differs from alone`);
    checked++;
  }
  assert.ok(checked >= K * 6, `only ${checked} replies completed`);
}

// The server hands freed memory back once it has been idle for a moment (its watchdog ticks
// every 500 ms); RSS is read after that.
async function settledRss() {
  await waitIdle(IDLE_GAUGES, 10000);
  await new Promise((r) => setTimeout(r, 1500));
  return rssBytes(server.proc.pid);
}

// The first round touches what any such load needs once (the KV pages its sequences write, the
// worker threads' stacks and arenas); the pre-load RSS is measured after it, so the second round
// shows whether serving leaks.
test('a first round of 64 concurrent clients, some aborting or dropping the socket', async (t) => {
  assert.equal(alone.length, K, 'needs the alone replies');
  await load(t, 20240601);
  rssBeforeLoad = await settledRss();
});

test('a second round of 64 concurrent clients', async (t) => {
  assert.equal(alone.length, K, 'needs the alone replies');
  await load(t, 20241201);
});

test('after the load: nothing active, queued, running or held, within 10 s', async () => {
  await waitIdle(IDLE_GAUGES, 10000);
});

test('after the load: RSS within 5% of its pre-load value', async (t) => {
  if (process.env.HEARTH_SANITIZED) {
    t.skip('skipped: under AddressSanitizer RSS measures its quarantine of freed memory, not the server (LeakSanitizer checks leaks there)');
    return;
  }
  assert.ok(rssBeforeLoad, 'needs the first round');
  const rss = await settledRss();
  const mb = (b) => (b / 2 ** 20).toFixed(1);
  t.diagnostic(`RSS ${mb(rssBeforeLoad)} MiB before the load, ${mb(rss)} MiB after`);
  assert.ok(rss <= rssBeforeLoad * 1.05, `RSS ${mb(rssBeforeLoad)} MiB before the load, ${mb(rss)} MiB after`);
});

test('after the load: a request alone still gives its alone reply', async () => {
  const r = await (await postChat(requestBody(3, false))).json();
  assert.equal(r.choices[0].message.content, alone[3]);
});
