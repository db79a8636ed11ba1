// Requests a careless or malicious client sends: every one must get a 4xx (never a 5xx, never a
// crash), and the server must keep serving others afterwards.
import test, { before, after, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { startServer, modelName, requestJSON } from './server.mjs';

const TIMEOUT_S = 2; // --timeout: socket read/write timeout
const MAX_BODY_MB = 1;

let server;

before(async () => {
  server = await startServer(['--max-body-mb', String(MAX_BODY_MB), '--timeout', String(TIMEOUT_S)]);
});

after(async () => {
  if (server) assert.deepEqual(await server.stop(), { code: 0, signal: null }, 'SIGTERM must exit 0');
});

// Whatever a test threw at it, the server is alive and answers.
afterEach(async () => {
  assert.equal(server.proc.exitCode, null, `server died:\n${server.log().slice(-2000)}`);
  const r = await requestJSON(server.url, '/health');
  assert.equal(r.status, 200, `/health after the test: ${r.status} ${r.text}`);
});

const validBody = (extra = {}) => ({
  model: modelName,
  messages: [{ role: 'user', content: 'hi' }],
  max_tokens: 2,
  temperature: 0,
  ...extra,
});

// POSTs raw bytes (a string is sent as UTF-8) to the chat route.
const postBytes = (bytes, route = '/v1/chat/completions') => requestJSON(server.url, route, bytes);

// Asserts a 400 in the error shape whose message matches `pattern`.
function assert400(r, pattern, what) {
  assert.equal(r.status, 400, `${what}: ${r.status} ${r.text}`);
  assert.equal(typeof r.json?.error?.message, 'string', `${what}: no error.message in ${r.text}`);
  assert.match(r.json.error.message, pattern, `${what}: message does not name the problem`);
}

test('malformed JSON: 400 saying it is the JSON', async () => {
  for (const body of ['{"model": "x", "messages": [', 'not json at all', '{"a": 1} trailing', '']) {
    assert400(await postBytes(body), /json|parse|body/i, JSON.stringify(body));
  }
});

test('fields of the wrong type or range: 400 naming the field', async () => {
  const cases = [
    ['messages', { messages: 'x' }],
    ['temperature', { temperature: 'hot' }],
    ['max_tokens', { max_tokens: -1 }],
    ['top_p', { top_p: 'x' }],
    ['stream', { stream: 'yes' }],
    ['stop', { stop: 5 }],
    ['seed', { seed: 'abc' }],
  ];
  for (const [field, extra] of cases) {
    const r = await postBytes(JSON.stringify(validBody(extra)));
    assert400(r, new RegExp(field), field);
    assert.equal(r.json.error.param, field, `${field}: error.param`); // as the OpenAI API sets it
  }
  // The completions route checks its own prompt field.
  const prompt = JSON.stringify({ model: modelName, prompt: { not: 'a string' }, max_tokens: 2 });
  assert400(await postBytes(prompt, '/v1/completions'), /prompt/, 'prompt');
});

// Sends raw bytes on a fresh TCP connection and resolves to what came back before the server
// closed it. Write errors are ignored: a server may answer early and stop reading the body.
function rawExchange(head, body = Buffer.alloc(0), { timeoutMs = 15000 } = {}) {
  return new Promise((resolve, reject) => {
    const sock = net.connect(server.port, '127.0.0.1');
    let received = Buffer.alloc(0);
    const timer = setTimeout(() => {
      sock.destroy();
      reject(new Error(`no close within ${timeoutMs} ms; got ${JSON.stringify(received.toString().slice(0, 200))}`));
    }, timeoutMs);
    sock.on('data', (d) => (received = Buffer.concat([received, d])));
    sock.on('error', () => {}); // EPIPE / ECONNRESET after an early answer
    sock.on('close', () => {
      clearTimeout(timer);
      resolve(received.toString('latin1'));
    });
    sock.on('connect', async () => {
      sock.write(head);
      // A server that judges by Content-Length answers now; sending the body anyway would race
      // its close (a reset can discard the answer before we read it).
      for (let t = 0; t < 10 && received.length === 0; t++) await new Promise((r) => setTimeout(r, 30));
      // Send the body in pieces and stop once the server has answered.
      for (let off = 0; off < body.length && received.length === 0 && !sock.destroyed; off += 65536) {
        await new Promise((done) => sock.write(body.subarray(off, off + 65536), () => done()));
      }
    });
  });
}

const statusOf = (response) => Number(/^HTTP\/1\.[01] (\d{3})/.exec(response)?.[1]);

test(`a body over --max-body-mb ${MAX_BODY_MB}: 413`, async () => {
  const body = Buffer.from(JSON.stringify(validBody({ pad: 'x'.repeat(2 * 1024 * 1024) })));
  const head =
    'POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n' +
    `Content-Length: ${body.length}\r\nConnection: close\r\n\r\n`;
  const response = await rawExchange(head, body);
  assert.equal(statusOf(response), 413, `response: ${JSON.stringify(response.slice(0, 300))}`);

  // The same through fetch, as an ordinary client sends it, with the error shape.
  const viaFetch = await postBytes(body);
  assert.equal(viaFetch.status, 413, viaFetch.text.slice(0, 300));
  assert.equal(typeof viaFetch.json?.error?.message, 'string');

  // Just under the limit is accepted (the limit is the one asked for, not a smaller one).
  const under = await postBytes(JSON.stringify(validBody({ pad: 'x'.repeat(900 * 1024) })));
  assert.equal(under.status, 200, under.text.slice(0, 300));
});

test(`a chunked body (no Content-Length, over --max-body-mb ${MAX_BODY_MB}): 411, not read`, async () => {
  // cpp-httplib bounds a body by its Content-Length; a chunked one is refused before it is read.
  const json = Buffer.from(JSON.stringify(validBody({ pad: 'x'.repeat(2 * 1024 * 1024) })));
  const pieces = [];
  for (let off = 0; off < json.length; off += 65536) {
    const piece = json.subarray(off, off + 65536);
    pieces.push(Buffer.from(`${piece.length.toString(16)}\r\n`), piece, Buffer.from('\r\n'));
  }
  pieces.push(Buffer.from('0\r\n\r\n'));
  const head =
    'POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n' +
    'Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n';
  const response = await rawExchange(head, Buffer.concat(pieces));
  assert.equal(statusOf(response), 411, `response: ${JSON.stringify(response.slice(0, 300))}`);
});

test('10k messages: a clear 4xx or a 200, no crash', async () => {
  const messages = [];
  for (let i = 0; i < 10000; i++) messages.push({ role: i % 2 ? 'assistant' : 'user', content: `m${i}` });
  const r = await requestJSON(server.url, '/v1/chat/completions', validBody({ messages, max_tokens: 1 }), {
    signal: AbortSignal.timeout(60000),
  });
  assert.ok(r.status === 200 || (r.status >= 400 && r.status < 500), `${r.status} ${r.text.slice(0, 300)}`);
  if (r.status !== 200) assert.equal(typeof r.json?.error?.message, 'string', r.text.slice(0, 300));
});

test('invalid UTF-8 in the body: 400', async () => {
  const wrap = (bytes) =>
    Buffer.concat([
      Buffer.from(`{"model":"${modelName}","messages":[{"role":"user","content":"a`),
      Buffer.from(bytes),
      Buffer.from('b"}],"max_tokens":2}'),
    ]);
  const cases = {
    'a lone 0xff': [0xff],
    'a sequence cut short': [0xc3],
    'an overlong encoding': [0xc0, 0xaf],
    'an encoded surrogate': [0xed, 0xa0, 0x80],
    'a continuation byte alone': [0x80],
  };
  for (const [what, bytes] of Object.entries(cases)) {
    const r = await postBytes(wrap(bytes));
    assert.equal(r.status, 400, `${what}: ${r.status} ${r.text.slice(0, 300)}`);
  }
});

test('a lone surrogate escape (\\ud800): not a 5xx', async () => {
  const body = `{"model":"${modelName}","messages":[{"role":"user","content":"a\\ud800b"}],"max_tokens":2}`;
  const r = await postBytes(body);
  assert.ok(r.status === 200 || r.status === 400, `${r.status} ${r.text.slice(0, 300)}`);
});

test('unknown fields are ignored', async () => {
  const extra = { frobnicate: true, user: 'someone', logit_bias: {}, nested: { a: [1, { b: null }] }, metadata: { k: 'v' } };
  const r = await postBytes(JSON.stringify(validBody(extra)));
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.usage.completion_tokens, 2);
});

// Opens a connection that sends `head` one byte every `intervalMs` (never finishing it; with
// intervalMs 0, all of `head` at once and then nothing) and resolves to how long the server kept
// it open after it connected, or to null if still open `limitMs` after connecting. A connection
// the kernel never completed (a full accept queue drops SYNs; the client retries) resolves to
// 'unconnected' after 2 * limitMs: the server did not hold it, it never had it.
function slowClient(head, { intervalMs, limitMs }) {
  return new Promise((resolve) => {
    const sock = net.connect(server.port, '127.0.0.1');
    let t0 = null;
    let i = 0;
    let ticker;
    let limit = setTimeout(() => finish('unconnected'), 2 * limitMs);
    const finish = (value) => {
      clearInterval(ticker);
      clearTimeout(limit);
      sock.destroy();
      resolve(value);
    };
    sock.on('error', () => {});
    sock.on('close', () => finish(t0 === null ? 'unconnected' : Date.now() - t0));
    sock.on('connect', () => {
      t0 = Date.now();
      clearTimeout(limit);
      limit = setTimeout(() => finish(null), limitMs);
      if (!intervalMs) return void sock.write(head); // all at once, then silence
      const send = () => i < head.length - 1 && !sock.destroyed && sock.write(head[i++]);
      send();
      ticker = setInterval(send, intervalMs);
    });
  });
}

const PARTIAL_HEAD = 'POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-Padding: ';

// A normal request while something else goes on: must succeed.
async function normalRequestWorks() {
  const r = await requestJSON(server.url, '/v1/chat/completions', validBody(), { signal: AbortSignal.timeout(10000) });
  assert.equal(r.status, 200, r.text);
}

test('slowloris, idle: a connection stuck in its request head is closed', async () => {
  const open = slowClient(PARTIAL_HEAD.slice(0, 20), { intervalMs: 0, limitMs: 10000 });
  await new Promise((r) => setTimeout(r, 300));
  await normalRequestWorks();
  const heldMs = await open;
  assert.notEqual(heldMs, 'unconnected', 'could not connect');
  assert.ok(heldMs !== null, `server kept an idle partial head open over 10 s (--timeout ${TIMEOUT_S})`);
});

test('slowloris, trickling: a head sent a byte per second is still closed within ~10 s', async () => {
  // Each byte comes before the per-read timeout ends, so only a deadline on the whole head helps.
  const open = slowClient(PARTIAL_HEAD + 'y'.repeat(200), { intervalMs: 1000, limitMs: 12000 });
  await new Promise((r) => setTimeout(r, 1500));
  await normalRequestWorks();
  const heldMs = await open;
  assert.notEqual(heldMs, 'unconnected', 'could not connect');
  assert.ok(heldMs !== null, 'server kept a trickling request head open over 12 s (allowed: --timeout + 5 s)');
});

test('slowloris, many idle connections: normal requests are still served', async (t) => {
  // More than the server's HTTP workers (parallel + max-queue + 4 = 76 by default): the stuck
  // ones may delay a normal request until their --timeout, never block it for good.
  // Opened a few at a time: a burst would overflow the accept queue (listen backlog), which is
  // the flood test's business, not this one's.
  const sockets = [];
  for (let i = 0; i < 100; i++) {
    sockets.push(slowClient(PARTIAL_HEAD.slice(0, 10), { intervalMs: 0, limitMs: 15000 }));
    if (i % 4 === 3) await new Promise((r) => setTimeout(r, 20));
  }
  await new Promise((r) => setTimeout(r, 300));
  // Allowed to wait for the stuck connections' timeouts, not forever.
  const t0 = Date.now();
  const r = await requestJSON(server.url, '/v1/chat/completions', validBody(), { signal: AbortSignal.timeout(12000) });
  assert.equal(r.status, 200, r.text);
  const waited = Date.now() - t0;
  t.diagnostic(`the normal request took ${waited} ms beside 100 stuck connections`);
  const held = await Promise.all(sockets);
  const unconnected = held.filter((ms) => ms === 'unconnected').length;
  if (unconnected) t.diagnostic(`${unconnected} connections never got through the accept queue`);
  const stuck = held.filter((ms) => ms === null).length;
  assert.equal(stuck, 0, `${stuck} idle connections still open 15 s after connecting`);
  assert.ok(waited < 12000, `normal request waited ${waited} ms`);
});

test('a flood beyond --parallel + --max-queue: 503 with Retry-After, the rest served', async () => {
  // One running and one waiting at most: of 16 requests arriving together, most must be refused.
  const small = await startServer(['--parallel', '1', '--max-queue', '1']);
  try {
    const t0 = Date.now();
    const flood = Array.from({ length: 16 }, (_, i) =>
      fetch(small.url + '/v1/chat/completions', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(validBody({ messages: [{ role: 'user', content: `flood ${i}` }], max_tokens: 32 })),
      }).then(async (res) => ({
        status: res.status,
        retryAfter: res.headers.get('retry-after'),
        text: await res.text(),
        ms: Date.now() - t0,
      })),
    );
    const results = await Promise.all(flood);
    const statuses = results.map((r) => r.status);
    assert.ok(statuses.every((s) => s === 200 || s === 503), `statuses ${statuses}`);
    assert.ok(statuses.includes(200), 'nothing served');
    const refused = results.filter((r) => r.status === 503);
    assert.ok(refused.length > 0, 'no 503 for 16 requests against room for 2');
    for (const r of refused) {
      assert.match(r.retryAfter ?? '', /^\d+$/, 'Retry-After missing');
      assert.equal(typeof JSON.parse(r.text).error?.message, 'string');
    }
    // Refused requests hold nothing: the server answers again.
    const again = await requestJSON(small.url, '/v1/chat/completions', validBody());
    assert.equal(again.status, 200, again.text);
    // Two requests of 32 tokens run, the rest are refused at once: a refusal that takes seconds
    // (connections waiting for an HTTP worker, or SYNs dropped and retried) defeats Retry-After.
    // Only the refusals are timed: how long the two served requests take is the model's speed.
    const slowest = Math.max(...refused.map((r) => r.ms));
    assert.ok(slowest < 2000, `a refusal took ${slowest} ms to arrive`);
  } finally {
    const exit = await small.stop();
    if (exit.code !== 0) assert.fail(`SIGTERM exit ${JSON.stringify(exit)}`);
  }
});

test('JSON nested deeper than 1024 levels: 400 naming the depth', async () => {
  const deep = '['.repeat(5000) + ']'.repeat(5000);
  const r = await postBytes(`{"model":"${modelName}","messages":[{"role":"user","content":"hi"}],"x":${deep}}`);
  assert400(r, /deep|depth/i, 'deep JSON');
});

test('a header over 8 KiB: a 4xx (or the connection closed), and the server goes on', async () => {
  const status = await new Promise((resolve) => {
    const sock = net.connect(new URL(server.url).port, '127.0.0.1');
    let data = '';
    sock.on('data', (d) => (data += d));
    sock.on('error', () => resolve('closed'));
    sock.on('close', () => resolve(data.split(' ')[1] || 'closed'));
    sock.write(`GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(100000)}\r\n\r\n`);
  });
  assert.ok(status === 'closed' || /^4\d\d$/.test(status), `got ${status}`);
});

test('a prompt over the context, and max_tokens over it: 400 naming the limit', async () => {
  const long = 'word '.repeat(50000);
  const r = await requestJSON(server.url, '/v1/chat/completions', validBody({
    messages: [{ role: 'user', content: long }],
  }), { signal: AbortSignal.timeout(60000) });
  assert400(r, /prompt|context|tokens/i, 'long prompt');
  const r2 = await requestJSON(server.url, '/v1/chat/completions', validBody({ max_tokens: 10000000 }));
  assert.ok(r2.status === 400 || r2.status === 200, `${r2.status} ${r2.text}`);
  if (r2.status === 400) assert400(r2, /max_tokens/, 'huge max_tokens');
});
