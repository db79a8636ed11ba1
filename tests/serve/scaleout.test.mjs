// Scale-out: two `hearth serve` replicas behind nginx, configured from examples/nginx/hearth.conf
// (only the replica addresses, the listen port and the main-level pid/error_log are changed).
// Requests through nginx do not say which replica served them, so each check reads the replicas'
// own /metrics (hearth_requests_total) before and after a request.
//   cd tests/serve && node --test scaleout.test.mjs
// NGINX=/path/to/nginx picks the binary (default /usr/sbin/nginx, then nginx on PATH);
// SCALEOUT_KEEP_TMP=1 keeps nginx's folder (config, access.log, error.log) for a look afterwards.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startServer, parseMetrics, modelName } from './server.mjs';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const exampleConf = path.join(repo, 'examples/nginx/hearth.conf');
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
// The promise's value, or `fallback` after `ms` (the timer does not keep the process alive).
const within = (promise, ms, fallback) =>
  Promise.race([promise, new Promise((resolve) => setTimeout(resolve, ms, fallback).unref())]);

function findNginx() {
  for (const candidate of [process.env.NGINX, '/usr/sbin/nginx', 'nginx'].filter(Boolean)) {
    const r = spawnSync(candidate, ['-v'], { encoding: 'utf8' });
    if (!r.error && r.status === 0) return candidate;
  }
  return null;
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

// The example config with the test's replicas and port. Each edit must find its target, so a
// change of the example's shape fails here rather than testing something else.
function deriveConfig(text, { replicaPorts, listenPort }) {
  let out = text.replace(/^(pid|error_log)[ \t][^;\n]*;[ \t]*\n/gm, ''); // given with -g instead
  const servers = [...out.matchAll(/^([ \t]*)server[ \t]+(\S+)([^;\n]*);[ \t]*\n/gm)];
  assert.ok(servers.length >= 1, `no "server HOST:PORT ...;" line in ${exampleConf}`);
  const [first] = servers;
  const lines = replicaPorts.map((p) => `${first[1]}server 127.0.0.1:${p}${first[3]};\n`).join('');
  for (const m of servers.slice().reverse()) {
    out = out.slice(0, m.index) + (m === first ? lines : '') + out.slice(m.index + m[0].length);
  }
  const listens = out.match(/^[ \t]*listen[ \t][^;\n]*;/gm) || [];
  assert.equal(listens.length, 1, `expected one listen directive in ${exampleConf}`);
  out = out.replace(/^([ \t]*)listen[ \t][^;\n]*;/m, `$1listen 127.0.0.1:${listenPort};`);
  assert.match(out, /hash \$\S+ consistent;/, 'the example should hash consistently');
  return out;
}

// An English-looking filler of about `words` tokens, different for each seed.
function filler(seed, words) {
  const vocab = ('the of and to in is was for on with as by at from that this which about river ' +
    'mountain garden winter lantern harbor copper violet engine market silver orchard thunder ' +
    'window ladder kettle meadow compass velvet candle marble anchor forest pepper island').split(' ');
  let x = seed >>> 0 || 1;
  const out = [];
  for (let i = 0; i < words; i++) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    out.push(vocab[(x >>> 8) % vocab.length]);
  }
  return out.join(' ');
}

let nginxBin, tmp, nginx, nginxLog = '', lb;
const replicas = [];
let metricsNoise = 0; // how much one /metrics scrape adds to hearth_requests_total (0 or 1)

function nginxDiagnostics() {
  let errors = '';
  try { errors = fs.readFileSync(path.join(tmp, 'error.log'), 'utf8'); } catch {}
  return `nginx output:\n${nginxLog}\nnginx error.log:\n${errors.slice(-4000)}`;
}

before(async () => {
  nginxBin = findNginx();
  if (!nginxBin) {
    throw new Error('nginx not found (tried $NGINX, /usr/sbin/nginx, nginx on PATH): the scale-out ' +
      'test runs nginx in front of two replicas; install it with scripts/setup.sh ' +
      '(Debian package nginx-light) or point NGINX at a binary');
  }
  // Two replicas of the same model; they are told apart by their ports.
  replicas.push(await startServer(), await startServer());
  for (const r of replicas) r.alive = true;

  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'hearth-scaleout-'));
  fs.chmodSync(tmp, 0o755); // run as root, nginx's workers are "nobody" and write temp files here
  const listenPort = await freePort();
  lb = `http://127.0.0.1:${listenPort}`;
  const conf = path.join(tmp, 'nginx.conf');
  fs.writeFileSync(conf, deriveConfig(fs.readFileSync(exampleConf, 'utf8'),
    { replicaPorts: replicas.map((r) => r.port), listenPort }));
  const args = ['-p', `${tmp}/`, '-c', conf, '-g',
    `daemon off; pid ${tmp}/nginx.pid; error_log ${tmp}/error.log;`];
  const check = spawnSync(nginxBin, ['-t', ...args], { encoding: 'utf8' });
  assert.equal(check.status, 0, `nginx -t rejects the derived config ${conf}:\n${check.stderr}`);

  nginx = spawn(nginxBin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  nginx.stdout.on('data', (d) => (nginxLog += d));
  nginx.stderr.on('data', (d) => (nginxLog += d));
  nginx.exited = new Promise((resolve) => nginx.on('exit', (code, signal) => resolve({ code, signal })));
  const deadline = Date.now() + 10000;
  for (;;) {
    if (nginx.exitCode !== null) throw new Error(`nginx exited with ${nginx.exitCode}\n${nginxDiagnostics()}`);
    try {
      const res = await fetch(`${lb}/health`);
      if (res.status === 200) break;
    } catch {}
    if (Date.now() > deadline) throw new Error(`nginx did not answer on ${lb}\n${nginxDiagnostics()}`);
    await sleep(50);
  }
  const a = await requestCounts(), b = await requestCounts();
  metricsNoise = b[0] - a[0];
  assert.ok(metricsNoise === 0 || metricsNoise === 1, `hearth_requests_total moved by ${metricsNoise} over one scrape`);
});

after(async () => {
  if (nginx && nginx.exitCode === null && nginx.signalCode === null) {
    nginx.kill('SIGQUIT'); // graceful stop
    const done = await within(nginx.exited, 5000, null);
    if (!done) nginx.kill('SIGKILL');
  }
  await Promise.all(replicas.map((r) => r.stop()));
  if (tmp && !process.env.SCALEOUT_KEEP_TMP) fs.rmSync(tmp, { recursive: true, force: true });
  else if (tmp) console.log(`kept ${tmp}`);
});

// nginx's access log lines for one X-Session-Id.
function sessionLog(session) {
  return fs.readFileSync(path.join(tmp, 'access.log'), 'utf8').split('\n')
    .filter((l) => l.includes(`session="${session}"`));
}

function sumMetric(metrics, name) {
  let sum = 0;
  for (const [key, value] of Object.entries(metrics)) {
    if (key === name || key.startsWith(`${name}{`)) sum += value;
  }
  return sum;
}

// GET on a connection of its own, closed after the answer: an idle keep-alive connection from the
// test would hold a stopping replica until its keep-alive timeout.
function getText(url) {
  return new Promise((resolve, reject) => {
    http.get(url, { agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode, body }));
    }).on('error', reject);
  });
}

// hearth_requests_total of each replica (null for a stopped one).
async function requestCounts() {
  return Promise.all(replicas.map(async (r) => {
    if (!r.alive) return null;
    const res = await getText(`${r.url}/metrics`);
    assert.equal(res.status, 200, `GET ${r.url}/metrics`);
    return sumMetric(parseMetrics(res.body), 'hearth_requests_total');
  }));
}

// Runs one request through nginx and says which replica (index into `replicas`) served it.
async function served(fn) {
  const before = await requestCounts();
  const result = await fn();
  let deltas;
  for (let scrapes = 1; ; scrapes++) {
    // A replica may count a request just after its last byte is sent: look again briefly.
    const now = await requestCounts();
    deltas = now.map((c, i) => (c === null ? 0 : c - before[i] - metricsNoise * scrapes));
    if (deltas.reduce((a, b) => a + b, 0) >= 1 || scrapes >= 40) break;
    await sleep(25);
  }
  const who = deltas.flatMap((d, i) => (d > 0 ? [i] : []));
  assert.ok(who.length === 1 && deltas[who[0]] === 1,
    `one request through nginx should count once on one replica; hearth_requests_total moved by ${JSON.stringify(deltas)}`);
  return { replica: who[0], result };
}

async function chat(messages, { session, stream = false, maxTokens = 4, extra = {} } = {}) {
  const headers = { 'content-type': 'application/json' };
  if (session !== undefined) headers['x-session-id'] = session;
  const res = await fetch(`${lb}/v1/chat/completions`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ model: modelName, messages, max_tokens: maxTokens, seed: 7, stream, ...extra }),
  });
  if (stream) return res;
  const text = await res.text();
  assert.equal(res.status, 200, `POST /v1/chat/completions through nginx (session ${session}): ${text}\n${nginxDiagnostics()}`);
  const body = JSON.parse(text);
  assert.equal(body.object, 'chat.completion');
  return body;
}

test('(a) different X-Session-Id values reach both replicas, and so do requests without one', { timeout: 60000 }, async () => {
  const hits = replicas.map(() => 0);
  for (let i = 0; i < 16; i++) {
    const { replica } = await served(() =>
      chat([{ role: 'user', content: `Session ${i}: ${filler(100 + i, 20)}` }], { session: `scaleout-a-${i}-${process.pid}`, maxTokens: 2 }));
    hits[replica]++;
  }
  assert.ok(hits.every((h) => h > 0), `16 sessions should reach both replicas, got ${JSON.stringify(hits)} per replica`);

  // No header: an empty hash key, which nginx (1.17.1 and later) balances round-robin, so these
  // spread too rather than all landing on one replica.
  const noHeader = replicas.map(() => 0);
  for (let i = 0; i < 6; i++) {
    const { replica } = await served(() =>
      chat([{ role: 'user', content: `No session ${i}: ${filler(200 + i, 20)}` }], { maxTokens: 2 }));
    noHeader[replica]++;
  }
  assert.ok(noHeader.every((h) => h > 0),
    `requests without X-Session-Id should spread over the replicas, got ${JSON.stringify(noHeader)}`);
});

const conversation = { session: `scaleout-conversation-${process.pid}-${Date.now()}`, replica: -1, messages: [] };

test('(b) one conversation stays on one replica and reuses its cached prefix', { timeout: 60000 }, async () => {
  const nonce = `${process.pid}-${Date.now()}`;
  const messages = [{ role: 'system', content: `Conversation ${nonce}. ${filler(300, 80)}` }];
  const turns = [];
  for (let k = 0; k < 5; k++) {
    messages.push({ role: 'user', content: `Turn ${k} of ${nonce}: ${filler(1000 + k, 250)}` });
    const { replica, result } = await served(() => chat(messages, { session: conversation.session, maxTokens: 8 }));
    const usage = result.usage;
    turns.push({ replica, prompt: usage.prompt_tokens, cached: usage.prompt_tokens_details?.cached_tokens });
    messages.push({ role: 'assistant', content: result.choices[0].message.content ?? '' });
  }
  const where = JSON.stringify(turns);
  assert.ok(turns.every((t) => t.replica === turns[0].replica), `all 5 turns should reach one replica: ${where}`);
  assert.ok(turns[0].prompt > 256, `the first turn should be a few hundred tokens: ${where}`);
  for (let k = 1; k < turns.length; k++) {
    assert.ok(turns[k].cached > 0, `turn ${k + 1} should reuse the cached prefix of the earlier turns: ${where}`);
    // Everything up to the previous turn's prompt is the same text: all but its last partial
    // 32-token block (and a token or two at the seam) should come from the cache.
    assert.ok(turns[k].cached >= turns[k - 1].prompt - 64 && turns[k].cached < turns[k].prompt,
      `turn ${k + 1} should reuse about the previous turn's prompt (${turns[k - 1].prompt} tokens): ${where}`);
  }
  conversation.replica = turns[0].replica;
  conversation.messages = messages;
});

test('(c) streaming passes through nginx chunk by chunk', { timeout: 60000 }, async () => {
  // A long prompt: the role chunk goes out before its prefill (tens of ms), the tokens after.
  const messages = [{ role: 'user', content: `Stream please. ${filler(4000, 1500)}` }];
  const { result: reads } = await served(async () => {
    const res = await chat(messages, {
      session: `scaleout-stream-${process.pid}`, stream: true, maxTokens: 16,
      extra: { stream_options: { include_usage: true } },
    });
    if (res.status !== 200) assert.fail(`streaming POST through nginx: ${res.status} ${await res.text()}`);
    assert.match(res.headers.get('content-type') || '', /^text\/event-stream/);
    const reads = [];
    const decoder = new TextDecoder();
    for await (const chunk of res.body) reads.push(decoder.decode(chunk, { stream: true }));
    return reads;
  });
  const body = reads.join('');
  const events = body.split('\n\n').filter((e) => e.trim() && !e.startsWith(':'));
  assert.equal(events.at(-1), 'data: [DONE]', `the stream should end with data: [DONE]: ${JSON.stringify(body.slice(-200))}`);
  assert.ok(body.endsWith('data: [DONE]\n\n'), 'nothing after [DONE]');
  const chunks = events.slice(0, -1).map((e) => {
    assert.ok(e.startsWith('data: '), `an SSE event: ${JSON.stringify(e)}`);
    return JSON.parse(e.slice(6));
  });
  assert.ok(chunks.every((c) => c.object === 'chat.completion.chunk'));
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  const withContent = chunks.filter((c) => c.choices.length && c.choices[0].delta.content);
  assert.ok(withContent.length >= 2, `several content chunks expected, got ${withContent.length}`);
  assert.ok(chunks.some((c) => c.choices.length && c.choices[0].finish_reason), 'a chunk with finish_reason');
  assert.equal(chunks.at(-1).choices.length, 0, 'include_usage: a last chunk with no choices');
  assert.equal(chunks.at(-1).usage.completion_tokens, 16);
  // Not collected into one buffer by nginx: the client got the first events in an earlier read
  // than the end of the stream.
  assert.ok(reads.length >= 2, `the stream arrived in ${reads.length} read(s): nginx buffered it`);
  assert.ok(!reads[0].includes('[DONE]'), 'the first read should not already hold the end of the stream');
});

test('(d) when the conversation\'s replica stops, nginx sends its next turn to the other one', { timeout: 60000 }, async () => {
  assert.ok(conversation.replica >= 0, 'test (b) should have found the conversation\'s replica');
  const dead = replicas[conversation.replica];
  const other = 1 - conversation.replica;
  dead.proc.kill('SIGTERM');
  dead.alive = false;
  // The next turn goes out as soon as the replica has stopped listening (its /health is refused),
  // while it may still be draining; it exits on its own.
  for (let i = 0; ; i++) {
    const health = await getText(`${dead.url}/health`).catch((e) => ({ status: e.code }));
    if (health.status !== 200) break;
    assert.ok(i < 100, 'the replica should start draining within 5 s of SIGTERM');
    await sleep(50);
  }
  await sleep(50);

  const messages = conversation.messages;
  messages.push({ role: 'user', content: `After the failover: ${filler(5000, 120)}` });
  const loggedBefore = sessionLog(conversation.session).length;
  // No client retry: nginx itself tries the dead replica, is refused, and goes on to the other.
  const first = await served(() => chat(messages, { session: conversation.session, maxTokens: 4 }));
  assert.equal(first.replica, other, 'served by the surviving replica');
  // nginx's access log (the example's format names every replica tried) shows the retry inside
  // nginx: the dead replica first, then the other one, in one client request. nginx writes the
  // line once the request is over, which can be just after the client has the answer.
  let logged;
  for (let i = 0; (logged = sessionLog(conversation.session)).length === loggedBefore && i < 100; i++) await sleep(20);
  const tried = /upstream=(.*?) upstream_status=(.*?) time=/.exec(logged.at(-1) || '');
  assert.ok(logged.length > loggedBefore && tried, `an access log line for the failover request: ${logged.at(-1)}`);
  assert.equal(tried[1], `127.0.0.1:${dead.port}, 127.0.0.1:${replicas[other].port}`,
    `nginx should have tried the stopped replica, then the other: ${logged.at(-1)}`);
  assert.match(tried[2], /, 200$/);
  const exit = await within(dead.exited, 15000, 'still running 15 s after SIGTERM');
  assert.deepEqual(exit, { code: 0, signal: null },
    `hearth serve should exit 0 on SIGTERM; its log ends:\n${dead.log().slice(-2000)}`);
  messages.push({ role: 'assistant', content: first.result.choices[0].message.content ?? '' });
  assert.equal(first.result.usage.prompt_tokens_details?.cached_tokens ?? 0, 0,
    'the surviving replica has not seen this conversation yet');

  // The conversation carries on there, and its cache warms up on the new replica.
  messages.push({ role: 'user', content: `And once more: ${filler(6000, 60)}` });
  const second = await served(() => chat(messages, { session: conversation.session, maxTokens: 4 }));
  assert.equal(second.replica, other);
  assert.ok(second.result.usage.prompt_tokens_details.cached_tokens > 0,
    `the next turn should hit the surviving replica's cache: ${JSON.stringify(second.result.usage)}`);
});
