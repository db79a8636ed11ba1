// The wire format of `hearth serve` byte by byte, without a client library that would forgive
// it: SSE framing, JSON shapes, /health, /metrics, errors on unknown routes, SIGTERM.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, modelName, requestJSON, parseMetrics, getMetrics } from './server.mjs';

let server;

before(async () => {
  server = await startServer(['--gemm', 'native']);
});

after(async () => {
  if (server) assert.deepEqual(await server.stop(), { code: 0, signal: null }, 'SIGTERM must exit 0');
});

const messages = [{ role: 'user', content: 'Say something about rivers.' }];
// Greedy and thinking off, so streaming and not give the same text in content.
const chatBody = (extra = {}) => ({
  model: modelName,
  messages,
  max_tokens: 8,
  temperature: 0,
  enable_thinking: false, // chat_template_kwargs has its own test in openai.test.mjs
  ...extra,
});

// POSTs and returns the status, headers and body decoded as strict UTF-8 (a stream must never
// carry a broken byte sequence, even when a token ends inside a character).
async function postRaw(route, body) {
  const res = await fetch(server.url + route, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const bytes = new Uint8Array(await res.arrayBuffer());
  const text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  return { status: res.status, headers: res.headers, text };
}

// Splits an SSE body into its data payloads, failing on any byte outside the grammar
// `("data: " LINE "\n\n" | ":" LINE "\n" ["\n"])*`: comments (heartbeats) are the only extra.
function parseSSE(body) {
  const events = [];
  const data = /data: ([^\n\r]*)\n\n/y;
  const comment = /:[^\n]*\n\n?/y;
  let pos = 0;
  while (pos < body.length) {
    comment.lastIndex = pos;
    if (comment.test(body)) {
      pos = comment.lastIndex;
      continue;
    }
    data.lastIndex = pos;
    const m = data.exec(body);
    assert.ok(m, `not an SSE event at byte ${pos}: ${JSON.stringify(body.slice(pos, pos + 80))}`);
    events.push(m[1]);
    pos = data.lastIndex;
  }
  return events;
}

// Checks the framing and returns the JSON chunks (all events but the final [DONE]).
function streamChunks(res) {
  assert.equal(res.status, 200, res.text);
  assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/);
  assert.ok(res.text.endsWith('data: [DONE]\n\n'), `stream end: ${JSON.stringify(res.text.slice(-60))}`);
  const events = parseSSE(res.text);
  assert.equal(events.at(-1), '[DONE]');
  assert.equal(events.filter((e) => e === '[DONE]').length, 1, 'more than one [DONE]');
  return events.slice(0, -1).map((e) => JSON.parse(e));
}

// Checks the fields every chunk of one stream shares and returns the chunks with a choice.
function checkCommon(chunks, object) {
  assert.ok(chunks.length >= 2, `only ${chunks.length} chunks`);
  for (const c of chunks) {
    assert.equal(c.object, object);
    assert.equal(c.id, chunks[0].id, 'chunk ids differ');
    assert.equal(c.created, chunks[0].created);
    assert.equal(c.model, modelName);
  }
  const withChoice = chunks.filter((c) => c.choices.length > 0);
  for (const c of withChoice) {
    assert.equal(c.choices.length, 1);
    assert.equal(c.choices[0].index, 0);
  }
  // finish_reason once, on the last chunk that has a choice.
  const finished = withChoice.filter((c) => c.choices[0].finish_reason != null);
  assert.equal(finished.length, 1, 'finish_reason must appear exactly once');
  assert.equal(finished[0], withChoice.at(-1));
  return withChoice;
}

test('streaming chat: SSE framing, role first, one id, usage chunk, [DONE]', async () => {
  const res = await postRaw('/v1/chat/completions', chatBody({ stream: true, stream_options: { include_usage: true } }));
  const chunks = streamChunks(res);
  assert.match(chunks[0].id, /^chatcmpl-/);
  const withChoice = checkCommon(chunks, 'chat.completion.chunk');
  assert.deepEqual(chunks[0].choices[0].delta, { role: 'assistant', content: '' });
  for (const c of withChoice.slice(1)) assert.equal(c.choices[0].delta.role, undefined, 'role repeated');
  assert.equal(withChoice.at(-1).choices[0].finish_reason, 'length');
  // The usage chunk closes the JSON chunks.
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, []);
  assert.equal(last.usage.completion_tokens, 8);
  assert.ok(last.usage.prompt_tokens > 0);

  // The streamed text is the non-streamed text of the same request.
  const text = withChoice.map((c) => c.choices[0].delta.content ?? '').join('');
  const plain = await postRaw('/v1/chat/completions', chatBody());
  assert.equal(text, JSON.parse(plain.text).choices[0].message.content);
});

test('streaming completions: SSE framing and text chunks', async () => {
  const body = { model: modelName, prompt: 'Once upon a time', max_tokens: 8, temperature: 0 };
  const chunks = streamChunks(await postRaw('/v1/completions', { ...body, stream: true }));
  const withChoice = checkCommon(chunks, 'text_completion');
  assert.equal(withChoice.at(-1).choices[0].finish_reason, 'length');
  const text = withChoice.map((c) => c.choices[0].text ?? '').join('');
  const plain = JSON.parse((await postRaw('/v1/completions', body)).text);
  assert.equal(text, plain.choices[0].text);
});

// Asserts a usage object: integers that add up.
function checkUsage(usage, completion) {
  for (const k of ['prompt_tokens', 'completion_tokens', 'total_tokens']) assert.ok(Number.isInteger(usage[k]), k);
  assert.ok(usage.prompt_tokens > 0);
  assert.equal(usage.completion_tokens, completion);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
  assert.ok(Number.isInteger(usage.prompt_tokens_details?.cached_tokens), 'prompt_tokens_details.cached_tokens');
}

test('non-streaming chat JSON has the documented shape', async () => {
  const res = await postRaw('/v1/chat/completions', chatBody());
  assert.equal(res.status, 200, res.text);
  assert.match(res.headers.get('content-type') ?? '', /^application\/json/);
  const r = JSON.parse(res.text);
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.object, 'chat.completion');
  assert.ok(Number.isInteger(r.created) && Math.abs(r.created - Date.now() / 1000) < 120, `created ${r.created}`);
  assert.equal(r.model, modelName);
  assert.equal(r.choices.length, 1);
  const [c] = r.choices;
  assert.equal(c.index, 0);
  assert.equal(c.message.role, 'assistant');
  assert.equal(typeof c.message.content, 'string');
  assert.equal(c.finish_reason, 'length');
  assert.ok('logprobs' in c && c.logprobs === null, 'logprobs must be null');
  checkUsage(r.usage, 8);
});

test('non-streaming completions JSON has the documented shape', async () => {
  const res = await postRaw('/v1/completions', { model: modelName, prompt: 'Hello', max_tokens: 4, temperature: 0 });
  assert.equal(res.status, 200, res.text);
  const r = JSON.parse(res.text);
  assert.equal(typeof r.id, 'string');
  assert.equal(r.object, 'text_completion');
  assert.equal(r.model, modelName);
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].index, 0);
  assert.equal(typeof r.choices[0].text, 'string');
  assert.equal(r.choices[0].finish_reason, 'length');
  checkUsage(r.usage, 4);
});

test('GET /v1/models has the documented shape', async () => {
  const r = await requestJSON(server.url, '/v1/models');
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.object, 'list');
  assert.equal(r.json.data.length, 1);
  const [m] = r.json.data;
  assert.equal(m.id, modelName);
  assert.equal(m.object, 'model');
  assert.equal(m.owned_by, 'hearth');
  assert.ok(Number.isInteger(m.created));
});

test('GET /health answers {"status":"ok"}', async () => {
  const r = await requestJSON(server.url, '/health');
  assert.equal(r.status, 200);
  assert.deepEqual(r.json, { status: 'ok' });
});

test('GET / serves the chat page', async () => {
  const res = await fetch(server.url + '/');
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') ?? '', /^text\/html/);
  assert.match(await res.text(), /<html/i);
});

const COUNTERS_AND_GAUGES = [
  'hearth_requests_total',
  'hearth_requests_errors_total',
  'hearth_requests_active',
  'hearth_queue_depth',
  'hearth_running_sequences',
  'hearth_held_sequences',
  'hearth_prompt_tokens_total',
  'hearth_prompt_tokens_cached_total',
  'hearth_generated_tokens_total',
  'hearth_kv_blocks_total',
  'hearth_kv_blocks_used',
  'hearth_kv_blocks_cached',
];
const HISTOGRAMS = ['hearth_ttft_seconds', 'hearth_tpot_seconds'];

// Asserts a histogram's buckets are cumulative and end in +Inf = _count.
function checkHistogram(m, name) {
  const buckets = Object.entries(m)
    .map(([k, v]) => [/^(\w+)_bucket\{le="([^"]+)"\}$/.exec(k), v])
    .filter(([match]) => match && match[1] === name)
    .map(([match, v]) => [match[2] === '+Inf' ? Infinity : Number(match[2]), v]);
  assert.ok(buckets.length >= 2, `${name}: no buckets`);
  buckets.sort((a, b) => a[0] - b[0]);
  for (let i = 1; i < buckets.length; i++) assert.ok(buckets[i][1] >= buckets[i - 1][1], `${name}: not cumulative`);
  assert.equal(buckets.at(-1)[0], Infinity, `${name}: no le="+Inf" bucket`);
  assert.equal(buckets.at(-1)[1], m[`${name}_count`], `${name}: +Inf bucket != _count`);
  assert.ok(Number.isFinite(m[`${name}_sum`]) && m[`${name}_sum`] >= 0, `${name}_sum`);
}

test('/metrics: Prometheus text with the documented names, moved by a request', async () => {
  const res = await fetch(server.url + '/metrics');
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') ?? '', /^text\/plain/);
  const body = await res.text();
  // Every sample line is `name{labels} value`, the value a number.
  for (const line of body.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    assert.match(line, /^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[^}]*\})? (-?[0-9.eE+-]+|\+Inf|NaN)$/, line);
  }
  const m0 = parseMetrics(body);
  for (const name of COUNTERS_AND_GAUGES) assert.ok(Number.isFinite(m0[name]), `missing ${name}`);
  for (const name of HISTOGRAMS) checkHistogram(m0, name);
  assert.ok(m0.hearth_kv_blocks_total > 0);

  const r = JSON.parse((await postRaw('/v1/chat/completions', chatBody({ max_tokens: 5 }))).text);
  const m1 = await getMetrics(server.url);
  assert.ok(m1.hearth_requests_total >= m0.hearth_requests_total + 1, 'requests_total did not move');
  assert.equal(m1.hearth_generated_tokens_total - m0.hearth_generated_tokens_total, 5);
  assert.equal(m1.hearth_prompt_tokens_total - m0.hearth_prompt_tokens_total, r.usage.prompt_tokens);
  assert.equal(
    m1.hearth_prompt_tokens_cached_total - m0.hearth_prompt_tokens_cached_total,
    r.usage.prompt_tokens_details.cached_tokens,
  );
  assert.equal(m1.hearth_ttft_seconds_count - m0.hearth_ttft_seconds_count, 1);
  for (const name of HISTOGRAMS) checkHistogram(m1, name);
  // Idle again: nothing in flight, no block held.
  for (const g of ['hearth_requests_active', 'hearth_queue_depth', 'hearth_running_sequences', 'hearth_kv_blocks_used']) {
    assert.equal(m1[g], 0, g);
  }
  assert.ok(m1.hearth_kv_blocks_used + m1.hearth_kv_blocks_cached <= m1.hearth_kv_blocks_total);
});

// Asserts the OpenAI error shape.
function checkError(r, status) {
  assert.equal(r.status, status, r.text);
  assert.ok(r.json?.error, `no error object in ${r.text}`);
  const e = r.json.error;
  assert.equal(typeof e.message, 'string');
  assert.ok(e.message.length > 0);
  assert.equal(typeof e.type, 'string');
  assert.ok('param' in e, 'error.param missing');
  assert.ok('code' in e, 'error.code missing');
}

test('unknown routes answer 404 in the error shape', async () => {
  checkError(await requestJSON(server.url, '/v1/no-such-route'), 404);
  checkError(await requestJSON(server.url, '/no/such/route', { x: 1 }), 404);
});

test('SIGTERM with a stream in flight: the stream ends and the server exits 0', async (t) => {
  const s = await startServer([]);
  try {
    // Long enough (a few seconds) to be running when the signal comes, short enough to end
    // within the server's grace (10 s); past it the server cancels with an error event.
    const res = await fetch(s.url + '/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(chatBody({ max_tokens: 1500, stream: true })),
    });
    assert.equal(res.status, 200);
    const reader = res.body.getReader();
    const first = await reader.read();
    assert.ok(!first.done && first.value.length > 0);
    const t0 = Date.now();
    s.proc.kill('SIGTERM');
    // Read to the end; a reset connection also ends it, a hang does not.
    let tail = '';
    const decoder = new TextDecoder();
    const drained = (async () => {
      try {
        for (let r; !(r = await reader.read()).done; ) tail = (tail + decoder.decode(r.value)).slice(-300);
      } catch {
        // the server may close the connection instead of finishing the stream
      }
      t.diagnostic(`stream ended ${Date.now() - t0} ms after SIGTERM; its end: ${JSON.stringify(tail.slice(-200))}`);
    })();
    const timeout = (ms, what) => new Promise((_, reject) => setTimeout(() => reject(new Error(what)), ms).unref());
    await Promise.race([drained, timeout(15000, 'stream still open 15 s after SIGTERM')]);
    const exit = await Promise.race([s.exited, timeout(15000, 'server still running 15 s after SIGTERM')]);
    t.diagnostic(`server exited ${Date.now() - t0} ms after SIGTERM`);
    // Drained (finished in the grace) or told why it was cut, never just dropped.
    assert.ok(tail.endsWith('data: [DONE]\n\n') || tail.includes('shutting'), `stream end ${JSON.stringify(tail)}`);
    assert.deepEqual(exit, { code: 0, signal: null });
    assert.ok(Date.now() - t0 < 15000);
  } finally {
    if (s.proc.exitCode === null && s.proc.signalCode === null) s.proc.kill('SIGKILL');
  }
});
