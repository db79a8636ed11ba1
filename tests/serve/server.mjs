// Starts `hearth serve` for a test and stops it afterwards. The binary and model come from the
// environment ctest sets (HEARTH_BINARY, HEARTH_MODEL), with the repo's defaults for runs by hand.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const binary = process.env.HEARTH_BINARY || path.join(repo, 'build/hearth');
export const modelDir =
  process.env.HEARTH_MODEL || path.resolve(repo, '../shared/fixtures/models/tiny-tied-bf16');
export const modelName = path.basename(modelDir);
// The shared fixtures (tokenizer/chat.jsonl: chat-template cases rendered by the reference).
export const fixturesDir = process.env.HEARTH_FIXTURES || path.resolve(repo, '../shared/fixtures');

// Resolves to {url, port, proc, log(), stop()} once the server says where it listens.
export async function startServer(extraArgs = [], { timeoutMs = 60000 } = {}) {
  // A missing binary must fail the suite loudly, not look like a server that never answers.
  if (!fs.existsSync(binary)) {
    throw new Error(`hearth binary not found at ${binary}: build it (cmake --build build) or set HEARTH_BINARY`);
  }
  const args = ['serve', '--model', modelDir, '--port', '0', '--threads', '1', ...extraArgs];
  const proc = spawn(binary, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  proc.stdout.on('data', (d) => (log += d));
  // Listen for the exit from the start, so stop() also sees an exit that came early.
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      proc.kill('SIGKILL'); // a server that never says where it listens must not outlive the test
      reject(new Error(`server did not start within ${timeoutMs} ms:\n${log}`));
    }, timeoutMs);
    proc.stderr.on('data', (d) => {
      log += d;
      const m = /listening on (http:\/\/[^\s]+)/.exec(log);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    proc.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited with ${code} before listening:\n${log}`));
    });
    proc.on('error', (err) => {
      clearTimeout(timer);
      reject(new Error(`could not start ${binary}: ${err.message}`));
    });
  });
  return {
    url,
    port: Number(new URL(url).port),
    proc,
    exited,
    log: () => log,
    // SIGTERM, then the exit status (the server must exit 0 on SIGTERM).
    async stop(signal = 'SIGTERM') {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
      return exited;
    },
  };
}

// Parses a /metrics body into {name{labels}: value}.
export function parseMetrics(text) {
  const out = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    out[line.slice(0, i)] = Number(line.slice(i + 1));
  }
  return out;
}

// POSTs (or GETs, without body) JSON and resolves to {status, headers, text, json} whatever the
// status, so tests can look at error responses; json is undefined when the body is not JSON.
export async function requestJSON(url, route, body, { method, headers = {}, signal } = {}) {
  const init = { method: method || (body === undefined ? 'GET' : 'POST'), headers: { ...headers }, signal };
  if (body !== undefined) {
    init.headers['content-type'] = 'application/json';
    init.body = typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body);
  }
  const res = await fetch(url + route, init);
  const text = await res.text();
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, text, json };
}

// GET /metrics, parsed.
export async function getMetrics(url) {
  const res = await fetch(url + '/metrics');
  if (res.status !== 200) throw new Error(`/metrics answered ${res.status}`);
  return parseMetrics(await res.text());
}

// Resident set size of a process in bytes, from /proc (Linux only).
export function rssBytes(pid) {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error(`no VmRSS in /proc/${pid}/status`);
  return Number(m[1]) * 1024;
}
