// The chat page that `hearth serve` serves at GET /, driven in Debian's Chromium (headless) through
// playwright-core: the model name, a streamed reply that ends at max_tokens, Stop (the partial reply
// stays, the server lets the sequence go), the settings that reach the request, New chat, an API
// error shown inline, safe rendering of a (mocked) stream with thinking, and the API key field.
// Leaves a screenshot in /tmp/hearth-page.png.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { chromium } from 'playwright-core';
import { startServer, modelName, parseMetrics } from './server.mjs';

const chromiumPath = process.env.HEARTH_CHROMIUM || '/usr/bin/chromium';
const screenshot = '/tmp/hearth-page.png';

let server, browser, page;
const requests = []; // bodies of the page's POST /v1/chat/completions, in order

const assistants = () => page.locator('#messages .assistant');
const lastAssistant = () => assistants().last();

// Types a prompt and sends it with Enter; resolves to the new assistant message once it is done.
async function ask(text, { maxTokens } = {}) {
  if (maxTokens !== undefined) await page.fill('#max-tokens', String(maxTokens));
  const done = await page.locator('#messages .assistant[data-finish]').count();
  await page.fill('#prompt', text);
  await page.press('#prompt', 'Enter');
  const msg = page.locator('#messages .assistant[data-finish]').nth(done);
  await msg.waitFor();
  return msg;
}

async function metrics(url) {
  const res = await fetch(`${url}/metrics`);
  assert.equal(res.status, 200);
  return parseMetrics(await res.text());
}

// Waits until the server runs no sequence and serves no generation request.
async function waitIdle(url, ms = 5000) {
  const end = Date.now() + ms;
  let m;
  for (;;) {
    m = await metrics(url);
    if (m.hearth_running_sequences === 0 && m.hearth_requests_active === 0) return m;
    if (Date.now() > end) break;
    await sleep(100);
  }
  assert.fail(`server not idle ${ms} ms after Stop: running_sequences ${m.hearth_running_sequences}, ` +
    `requests_active ${m.hearth_requests_active}`);
}

before(async () => {
  if (!fs.existsSync(chromiumPath)) {
    throw new Error(`Chromium not found at ${chromiumPath}: the chat page test needs Debian's chromium ` +
      `package (scripts/setup.sh installs it), or HEARTH_CHROMIUM pointing at a Chromium binary`);
  }
  server = await startServer(['--max-tokens', '4096']);
  browser = await chromium.launch({ executablePath: chromiumPath, args: ['--no-sandbox'], headless: true });
  page = await browser.newPage({ viewport: { width: 1100, height: 760 } });
  page.setDefaultTimeout(20000);
  page.on('request', (r) => {
    if (r.method() === 'POST' && r.url().endsWith('/v1/chat/completions')) requests.push(JSON.parse(r.postData()));
  });
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

test('GET / serves the page, which shows the model name', async () => {
  const res = await fetch(`${server.url}/`);
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /^text\/html/);
  assert.match(await res.text(), /id="prompt"/);

  await page.goto(`${server.url}/`);
  await page.locator('#model').filter({ hasText: modelName }).waitFor();
  assert.equal(await page.locator('#messages .error').count(), 0);
  for (const id of ['prompt', 'send', 'stop', 'messages', 'temperature', 'max-tokens', 'system', 'thinking', 'new-chat']) {
    assert.equal(await page.locator(`#${id}`).count(), 1, `#${id}`);
  }
  assert.equal(await page.isDisabled('#stop'), true);
});

test('a reply streams into the assistant message and ends at max_tokens with finish "length"', async () => {
  await page.fill('#max-tokens', '16');
  await page.fill('#prompt', 'Hello there');
  await page.press('#prompt', 'Shift+Enter'); // a newline, not a send
  await page.type('#prompt', 'second line');
  assert.equal(await page.inputValue('#prompt'), 'Hello there\nsecond line');
  assert.equal(await page.locator('#messages .msg').count(), 0);

  const msg = await ask('Hello there\nsecond line');
  assert.equal(await msg.getAttribute('data-finish'), 'length');
  const text = await msg.locator('.content').textContent();
  assert.ok(text.length > 0, 'the reply has text');
  assert.equal(await page.locator('#messages .user .content').first().textContent(), 'Hello there\nsecond line');
  assert.match(await msg.locator('.meta').textContent(), /^length · 16 tokens/);
  assert.equal(await page.inputValue('#prompt'), '');

  assert.equal(requests.length, 1);
  const body = requests[0];
  assert.equal(body.stream, true);
  assert.equal(body.model, modelName);
  assert.equal(body.max_tokens, 16);
  assert.equal(body.temperature, 0.7);
  assert.equal(body.chat_template_kwargs.enable_thinking, false);
  assert.deepEqual(body.messages, [{ role: 'user', content: 'Hello there\nsecond line' }]);
});

test('Stop aborts the stream, keeps the partial reply, and the server lets the sequence go', async () => {
  await page.fill('#max-tokens', '4000');
  await page.fill('#prompt', 'Tell me a long story');
  await page.click('#send');
  const msg = lastAssistant();
  // Some text has streamed while the reply is still running.
  await page.waitForFunction(() => {
    const m = [...document.querySelectorAll('#messages .assistant')].pop();
    return m && m.querySelector('.content').textContent.length >= 8;
  });
  assert.equal(await msg.getAttribute('data-finish'), null, 'the 4000-token reply finished before Stop');
  assert.equal(await page.isDisabled('#send'), true);
  await page.click('#stop');
  await page.locator('#messages .assistant[data-finish="stopped"]').waitFor();
  const stopped = await msg.locator('.content').textContent();
  assert.ok(stopped.length >= 8);
  await sleep(1000);
  assert.equal(await msg.locator('.content').textContent(), stopped, 'the text stopped growing');
  assert.equal(await page.isDisabled('#stop'), true);
  assert.equal(await page.isEnabled('#send'), true);
  await waitIdle(server.url);
});

test('the settings reach the request: system prompt, thinking, history with the stopped reply', async () => {
  const first = await assistants().nth(0).locator('.content').textContent();
  const stopped = await assistants().nth(1).locator('.content').textContent();
  await page.check('#thinking');
  await page.fill('#system', 'You are terse.');
  const msg = await ask('And now?', { maxTokens: 8 });
  assert.equal(await msg.getAttribute('data-finish'), 'length');
  const body = requests.at(-1);
  assert.equal(body.chat_template_kwargs.enable_thinking, true);
  assert.equal(body.max_tokens, 8);
  assert.deepEqual(body.messages, [
    { role: 'system', content: 'You are terse.' },
    { role: 'user', content: 'Hello there\nsecond line' },
    { role: 'assistant', content: first },
    { role: 'user', content: 'Tell me a long story' },
    { role: 'assistant', content: stopped },
    { role: 'user', content: 'And now?' },
  ]);
  // Whatever went to thinking sits folded above the answer.
  const thinking = msg.locator('details.thinking');
  assert.equal(await thinking.evaluate((d) => d.open), false);
  assert.equal(await thinking.locator('summary').textContent(), 'Thinking…');
  const reasoning = await thinking.locator('.reasoning').textContent();
  assert.equal(await thinking.isVisible(), reasoning.length > 0);
  assert.ok(reasoning.length + (await msg.locator('.content').textContent()).length > 0);
  await page.uncheck('#thinking');
});

test('New chat clears the conversation and the history', async () => {
  await page.click('#new-chat');
  assert.equal(await page.locator('#messages .msg').count(), 0);
  const msg = await ask('Fresh start', { maxTokens: 12 });
  assert.equal(await msg.getAttribute('data-finish'), 'length');
  assert.deepEqual(requests.at(-1).messages, [
    { role: 'system', content: 'You are terse.' },
    { role: 'user', content: 'Fresh start' },
  ]);
});

test('an API error is shown inline and the prompt comes back', async () => {
  await page.fill('#temperature', '5');
  await page.fill('#prompt', 'too hot');
  await page.click('#send');
  const error = page.locator('#messages .error');
  await error.waitFor();
  const text = await error.textContent();
  assert.match(text, /^Error 400: /);
  assert.match(text, /temperature/, 'the message names the field');
  assert.equal(await page.inputValue('#prompt'), 'too hot');
  assert.equal(await page.locator('#messages .user.failed').count(), 1);
  assert.equal(await page.isEnabled('#send'), true);
  assert.equal(await page.isDisabled('#stop'), true);
  await page.fill('#temperature', '0.7');
  await page.fill('#system', '');
  await page.focus('#prompt');
  await page.screenshot({ path: screenshot });
});

test('a stream is rendered as text: thinking folded, heartbeats skipped, no HTML', async () => {
  const p = await browser.newPage({ viewport: { width: 900, height: 600 } });
  try {
    const chunk = (delta, finish = null) =>
      `data: ${JSON.stringify({ object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }] })}\r\n\r\n`;
    const html = '<img src=x onerror="window.__xss=1"> & <b>bold</b>';
    const body = chunk({ role: 'assistant', content: '' }) + ': heartbeat\n\n' +
      chunk({ reasoning_content: 'Let me ' }) + chunk({ reasoning_content: 'think.' }) + ':\n\n' +
      chunk({ content: html.slice(0, 10) }) + chunk({ content: html.slice(10) }, 'stop') +
      `data: ${JSON.stringify({ object: 'chat.completion.chunk', choices: [], usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } })}\n\n` +
      'data: [DONE]\n\n';
    await p.route('**/v1/chat/completions', (route) =>
      route.fulfill({ status: 200, headers: { 'content-type': 'text/event-stream' }, body }));
    await p.goto(`${server.url}/`);
    await p.locator('#model').filter({ hasText: modelName }).waitFor();
    await p.fill('#prompt', 'hi');
    await p.press('#prompt', 'Enter');
    const msg = p.locator('#messages .assistant[data-finish]');
    await msg.waitFor();
    assert.equal(await msg.getAttribute('data-finish'), 'stop');
    assert.equal(await msg.locator('.content').textContent(), html);
    assert.equal(await p.locator('#messages img, #messages b').count(), 0);
    assert.equal(await p.evaluate(() => window.__xss), undefined);
    const thinking = msg.locator('details.thinking');
    assert.equal(await thinking.isVisible(), true);
    assert.equal(await thinking.evaluate((d) => d.open), false);
    assert.equal(await thinking.locator('.reasoning').textContent(), 'Let me think.');
    await thinking.locator('summary').click();
    assert.equal(await thinking.locator('.reasoning').isVisible(), true);
  } finally {
    await p.close();
  }
});

test('with --api-key the page asks for the key and sends it as a Bearer token', async () => {
  const keyed = await startServer(['--max-tokens', '64', '--api-key', 'sekret']);
  const p = await browser.newPage({ viewport: { width: 900, height: 600 } });
  try {
    p.setDefaultTimeout(20000);
    const auth = [];
    p.on('request', (r) => { if (r.url().includes('/v1/')) auth.push(r.headers().authorization); });
    await p.goto(`${keyed.url}/`); // the page itself needs no key
    await p.locator('#messages .error').filter({ hasText: '401' }).waitFor();
    assert.equal(await p.isVisible('#api-key'), true);
    await p.fill('#api-key', 'sekret');
    await p.press('#api-key', 'Tab'); // change -> the models are fetched again, with the key
    await p.locator('#model').filter({ hasText: modelName }).waitFor();
    assert.equal(await p.locator('#messages .error').count(), 0);
    await p.fill('#max-tokens', '4');
    await p.fill('#prompt', 'hi');
    await p.press('#prompt', 'Enter');
    const msg = p.locator('#messages .assistant[data-finish]');
    await msg.waitFor();
    assert.equal(await msg.getAttribute('data-finish'), 'length');
    assert.equal(auth.at(-1), 'Bearer sekret');
  } finally {
    await p.close();
    await keyed.stop();
  }
});
