// `hearth serve` through the official openai npm client: the shapes a real application sees.
// Expected values come from the tokenizer fixtures (rendered by the reference Qwen3 template and
// tokenizer) or from the same request sent another way (stream vs not, alone), never from output
// captured earlier.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI, { APIError, AuthenticationError, BadRequestError, NotFoundError } from 'openai';
import { startServer, modelName, fixturesDir, requestJSON } from './server.mjs';

const API_KEY = 'sekrit-key';
// Qwen3's empty thinking block, appended to the generation prompt when thinking is off.
const EMPTY_THINK = '<think>\n\n</think>\n\n';
// The same as tokens: <think> \n\n </think> \n\n.
const EMPTY_THINK_TOKENS = 4;

const chatCases = fs
  .readFileSync(path.join(fixturesDir, 'tokenizer/chat.jsonl'), 'utf8')
  .split('\n')
  .filter(Boolean)
  .map((line) => JSON.parse(line));
const caseByName = (name) => {
  const c = chatCases.find((x) => x.name === name);
  assert.ok(c, `fixture case ${name} missing from chat.jsonl`);
  return c;
};
// A single user turn with thinking off: its rendering and ids are in the fixture.
const jokeCase = caseByName('public-chat-001-single_user');

let server; // --gemm native: a request gives the same tokens whatever else the cache holds
let authServer; // --api-key
let client;

before(async () => {
  server = await startServer(['--gemm', 'native']);
  authServer = await startServer(['--api-key', API_KEY]);
  // No retries: a retried 5xx would hide the first answer; short timeout: the model is tiny.
  client = new OpenAI({ baseURL: server.url + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 20000 });
});

after(async () => {
  const results = await Promise.all([server?.stop(), authServer?.stop()]);
  for (const r of results) if (r) assert.deepEqual(r, { code: 0, signal: null }, 'SIGTERM must exit 0');
});

// A greedy chat request with thinking off, so the whole reply lands in content.
function chatParams(extra = {}) {
  return {
    model: modelName,
    messages: jokeCase.messages,
    max_tokens: 12,
    temperature: 0,
    enable_thinking: false, // the chat_template_kwargs form has its own test below
    ...extra,
  };
}

// Runs a streaming request and gathers what a client would: the chunks, the text, the end.
async function collectStream(stream, field = 'content') {
  const chunks = [];
  let text = '';
  for await (const chunk of stream) {
    chunks.push(chunk);
    const choice = chunk.choices[0];
    if (!choice) continue;
    text += field === 'text' ? (choice.text ?? '') : (choice.delta?.content ?? '');
  }
  const withChoice = chunks.filter((c) => c.choices.length > 0);
  const finish = withChoice.at(-1)?.choices[0].finish_reason;
  return { chunks, text, finish };
}

// Resolves to the APIError a call rejects with (fails if it resolves).
async function apiError(promise) {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof APIError, `expected an APIError, got ${err}`);
    return err;
  }
  assert.fail('the request succeeded, expected an error');
}

test('GET /v1/models lists the served model', async () => {
  const ids = [];
  for await (const m of client.models.list()) {
    assert.equal(m.object, 'model');
    assert.equal(m.owned_by, 'hearth');
    assert.equal(typeof m.created, 'number');
    ids.push(m.id);
  }
  assert.deepEqual(ids, [modelName]);
});

test('non-streaming chat: shape, and prompt_tokens equal to the fixture ids', async () => {
  const r = await client.chat.completions.create(chatParams());
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.model, modelName);
  assert.equal(r.choices.length, 1);
  const [choice] = r.choices;
  assert.equal(choice.index, 0);
  assert.equal(choice.message.role, 'assistant');
  assert.equal(typeof choice.message.content, 'string');
  assert.ok(choice.message.content.length > 0, 'empty content');
  assert.equal(choice.finish_reason, 'length'); // random weights: no EOS within 12 tokens
  // The server's template + tokenizer must give what the reference gave for these messages.
  assert.equal(r.usage.prompt_tokens, jokeCase.ids.length);
  assert.equal(r.usage.completion_tokens, 12);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
});

test('streaming chat gives the text of the same request without streaming', async () => {
  const plain = await client.chat.completions.create(chatParams());
  const streamed = await collectStream(await client.chat.completions.create(chatParams({ stream: true })));
  assert.equal(streamed.chunks[0].choices[0].delta.role, 'assistant');
  for (const c of streamed.chunks) {
    assert.equal(c.object, 'chat.completion.chunk');
    assert.equal(c.id, streamed.chunks[0].id);
  }
  assert.equal(streamed.text, plain.choices[0].message.content);
  assert.equal(streamed.finish, 'length');
  // No usage chunk unless asked for.
  assert.ok(streamed.chunks.every((c) => c.choices.length > 0 && !c.usage), 'usage sent without include_usage');
});

test('completions, streaming and not, on a raw prompt (no template)', async () => {
  const params = { model: modelName, prompt: jokeCase.messages[0].content, max_tokens: 10, temperature: 0 };
  const plain = await client.completions.create(params);
  assert.equal(plain.object, 'text_completion');
  assert.equal(plain.choices.length, 1);
  assert.equal(typeof plain.choices[0].text, 'string');
  assert.ok(plain.choices[0].text.length > 0, 'empty text');
  assert.equal(plain.choices[0].finish_reason, 'length');
  // The prompt alone, as tokens: the user content's ids inside the fixture's chat rendering
  // (after "<|im_start|>user\n", before "<|im_end|>").
  const contentIds = jokeCase.ids.slice(3, jokeCase.ids.indexOf(151645));
  assert.equal(plain.usage.prompt_tokens, contentIds.length);
  assert.equal(plain.usage.completion_tokens, 10);

  const streamed = await collectStream(await client.completions.create({ ...params, stream: true }), 'text');
  assert.equal(streamed.text, plain.choices[0].text);
  assert.equal(streamed.finish, 'length');
  for (const c of streamed.chunks) assert.equal(c.object, 'text_completion');
});

test('stream_options.include_usage ends the stream with a usage chunk', async () => {
  const max = 9;
  const streamed = await collectStream(
    await client.chat.completions.create(
      chatParams({ max_tokens: max, stream: true, stream_options: { include_usage: true } }),
    ),
  );
  const last = streamed.chunks.at(-1);
  assert.deepEqual(last.choices, [], 'the last chunk must have empty choices');
  assert.ok(last.usage, 'the last chunk has no usage');
  assert.equal(last.usage.prompt_tokens, jokeCase.ids.length);
  assert.equal(last.usage.completion_tokens, max); // finish_reason length: exactly max tokens
  assert.equal(last.usage.total_tokens, last.usage.prompt_tokens + max);
  assert.equal(streamed.finish, 'length');
  // Only the final chunk carries usage (OpenAI sends null on the others).
  for (const c of streamed.chunks.slice(0, -1)) assert.ok(!c.usage, 'usage on a chunk before the last');
  // The same request without streaming counts the same tokens.
  const plain = await client.chat.completions.create(chatParams({ max_tokens: max }));
  assert.equal(plain.usage.completion_tokens, last.usage.completion_tokens);
  assert.equal(streamed.text, plain.choices[0].message.content);
});

// /apply-template's prompt for the joke messages with the given extra fields.
async function templatePrompt(fields) {
  const r = await requestJSON(server.url, '/apply-template', { messages: jokeCase.messages, ...fields });
  assert.equal(r.status, 200, r.text);
  assert.equal(typeof r.json.prompt, 'string');
  return r.json.prompt;
}

// prompt_tokens of a short greedy chat request with the given extra fields.
async function promptTokens(fields) {
  const r = await client.chat.completions.create({
    model: modelName,
    messages: jokeCase.messages,
    max_tokens: 2,
    temperature: 0,
    ...fields,
  });
  return r.usage.prompt_tokens;
}

// Checks one way of switching thinking, given how it spells enable_thinking: X.
async function checkThinkingSwitch(spell) {
  const off = await templatePrompt(spell(false));
  const on = await templatePrompt(spell(true));
  assert.ok(off.endsWith(EMPTY_THINK), JSON.stringify(off));
  assert.equal(off, jokeCase.text); // the fixture case is this very request
  assert.ok(!on.endsWith(EMPTY_THINK), JSON.stringify(on));
  assert.equal(on + EMPTY_THINK, off);
  // The chat endpoint must apply the same switch: thinking off costs exactly the empty block.
  const onTokens = await promptTokens(spell(true));
  assert.equal(await promptTokens(spell(false)), onTokens + EMPTY_THINK_TOKENS);
  assert.equal(onTokens, jokeCase.ids.length - EMPTY_THINK_TOKENS);
}

test('thinking on/off through top-level enable_thinking', async () => {
  await checkThinkingSwitch((on) => ({ enable_thinking: on }));
  // Qwen3's default is thinking on.
  assert.ok(!(await templatePrompt({})).endsWith(EMPTY_THINK));
});

test('thinking on/off through chat_template_kwargs.enable_thinking', async () => {
  await checkThinkingSwitch((on) => ({ chat_template_kwargs: { enable_thinking: on } }));
});

test('/apply-template renders the fixture chats exactly as the Qwen3 template', async (t) => {
  const withTools = chatCases.filter((c) => c.tools);
  assert.ok(withTools.length >= 3, 'expected fixture cases with tools');
  // The tool cases are the point; the others come for free and guard the rest of the template.
  for (const c of [...withTools, ...chatCases.filter((x) => !x.tools)]) {
    await t.test(c.name, async () => {
      const body = {
        messages: c.messages,
        add_generation_prompt: c.add_generation_prompt,
        enable_thinking: c.enable_thinking,
      };
      if (c.tools) body.tools = c.tools;
      // Tool calls come in OpenAI's shape ({function: {name, arguments}}) and, in some cases, in
      // the bare {name, arguments} that transformers' templates also take: both are accepted.
      const r = await requestJSON(server.url, '/apply-template', body);
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.prompt, c.text);
    });
  }
});

test('tool-call round trip: tools, an assistant tool_calls turn and a tool result', async () => {
  // The fixture's tool-call case, written as an OpenAI client sends it: arguments as a JSON string
  // (in the spacing Python's json.dumps gives the template's tojson), ids, content null.
  const c = caseByName('public-chat-044-tools_call');
  const args = '{"city": "Paris", "unit": "celsius"}';
  assert.deepEqual(JSON.parse(args), c.messages[1].tool_calls[0].function.arguments);
  const messages = [
    c.messages[0],
    {
      role: 'assistant',
      content: null,
      tool_calls: [{ id: 'call_0', type: 'function', function: { name: 'get_weather', arguments: args } }],
    },
    { role: 'tool', tool_call_id: 'call_0', content: c.messages[2].content },
  ];
  const rendered = await requestJSON(server.url, '/apply-template', {
    messages,
    tools: c.tools,
    enable_thinking: c.enable_thinking,
  });
  assert.equal(rendered.status, 200, rendered.text);
  assert.equal(rendered.json.prompt, c.text);

  const r = await client.chat.completions.create({
    model: modelName,
    messages,
    tools: c.tools,
    tool_choice: 'auto',
    max_tokens: 8,
    temperature: 0,
    enable_thinking: c.enable_thinking,
  });
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.ok(['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason), r.choices[0].finish_reason);
  // The request rendered the same prompt as the reference: same token count as its ids.
  assert.equal(r.usage.prompt_tokens, c.ids.length);
});

// A piece from the middle of text that a stop string can match: whole characters, no
// replacement character (a token cut inside a UTF-8 sequence), not only whitespace.
function middlePiece(text) {
  const chars = Array.from(text);
  for (let len of [4, 3, 2]) {
    const mid = Math.floor(chars.length / 2);
    for (let d = 0; d < chars.length; d++) {
      for (const start of [mid + d, mid - d]) {
        if (start < 1 || start + len > chars.length) continue;
        const piece = chars.slice(start, start + len).join('');
        if (!piece.includes('\uFFFD') && piece.trim().length === piece.length && piece.trim()) return piece;
      }
    }
  }
  assert.fail(`no usable stop piece in ${JSON.stringify(text)}`);
}

test('stop strings end the text just before the first match', async (t) => {
  const full = (await client.chat.completions.create(chatParams({ max_tokens: 32 }))).choices[0].message.content;
  const piece = middlePiece(full);
  const expected = full.slice(0, full.indexOf(piece));
  t.diagnostic(`stop ${JSON.stringify(piece)} in ${JSON.stringify(full)}`);

  const asArray = await client.chat.completions.create(chatParams({ max_tokens: 32, stop: [piece] }));
  assert.equal(asArray.choices[0].message.content, expected, `stop ${JSON.stringify(piece)} in ${JSON.stringify(full)}`);
  assert.equal(asArray.choices[0].finish_reason, 'stop');

  const asString = await client.chat.completions.create(chatParams({ max_tokens: 32, stop: piece }));
  assert.equal(asString.choices[0].message.content, expected);

  // Streaming must hold back a partial match rather than send text that the stop then removes.
  const streamed = await collectStream(
    await client.chat.completions.create(chatParams({ max_tokens: 32, stop: ['\u0001never', piece], stream: true })),
  );
  assert.equal(streamed.text, expected);
  assert.equal(streamed.finish, 'stop');
});

test('seed: the same seed repeats a sampled reply, another seed does not', async () => {
  const sample = async (seed, stream = false) => {
    const params = chatParams({ temperature: 1, seed, max_tokens: 16, stream });
    if (stream) return (await collectStream(await client.chat.completions.create(params))).text;
    return (await client.chat.completions.create(params)).choices[0].message.content;
  };
  const a = await sample(1234);
  assert.equal(await sample(1234), a);
  assert.equal(await sample(1234, true), a);
  // 16 tokens drawn at temperature 1 from a random model: a collision is all but impossible.
  assert.notEqual(await sample(4321), a);
  assert.notEqual(await sample(1235), a);
});

test('max_tokens and max_completion_tokens end with finish_reason length', async () => {
  for (const [field, n] of [
    ['max_tokens', 5],
    ['max_completion_tokens', 7],
  ]) {
    const params = chatParams();
    delete params.max_tokens;
    params[field] = n;
    const r = await client.chat.completions.create(params);
    assert.equal(r.choices[0].finish_reason, 'length', field);
    assert.equal(r.usage.completion_tokens, n, field);
  }
});

test('prefix cache: a repeated long prompt reports cached tokens and the same reply', async () => {
  // A few hundred tokens (blocks are 32), starting with a nonce so no earlier prompt shares a block.
  const words = [];
  for (let i = 0; i < 300; i++) words.push(`w${(i * 7919) % 1000}`);
  const content = `nonce ${Date.now()} ${process.pid}: ${words.join(' ')}`;
  const params = chatParams({ messages: [{ role: 'user', content }], max_tokens: 8 });
  const first = await client.chat.completions.create(params);
  const second = await client.chat.completions.create(params);
  assert.ok(first.usage.prompt_tokens >= 256, `prompt only ${first.usage.prompt_tokens} tokens`);
  assert.equal(first.usage.prompt_tokens_details?.cached_tokens, 0, 'nothing can be cached yet');
  const cached = second.usage.prompt_tokens_details?.cached_tokens;
  assert.ok(cached > 0, `cached_tokens ${cached} on the repeated prompt`);
  assert.ok(cached <= second.usage.prompt_tokens);
  assert.equal(second.usage.prompt_tokens, first.usage.prompt_tokens);
  // Reused KV must give the reply a fresh prefill gave.
  assert.equal(second.choices[0].message.content, first.choices[0].message.content);
});

test('bad requests raise BadRequestError (400)', async () => {
  const cases = {
    'temperature of the wrong type': chatParams({ temperature: 'hot' }),
    'n: 2': chatParams({ n: 2 }),
    'empty messages': chatParams({ messages: [] }),
  };
  for (const [what, params] of Object.entries(cases)) {
    const err = await apiError(client.chat.completions.create(params));
    assert.ok(err instanceof BadRequestError, `${what}: ${err.constructor.name} ${err.status}`);
    assert.equal(err.status, 400, what);
    assert.equal(typeof err.error?.message, 'string', `${what}: no error.message`);
  }
});

test('an unknown model raises NotFoundError (404)', async () => {
  const err = await apiError(client.chat.completions.create(chatParams({ model: 'no-such-model' })));
  assert.ok(err instanceof NotFoundError, `${err.constructor.name} ${err.status}`);
  assert.equal(err.status, 404);
});

test('--api-key: a wrong key raises AuthenticationError (401), the right one works', async () => {
  const make = (apiKey) => new OpenAI({ baseURL: authServer.url + '/v1', apiKey, maxRetries: 0, timeout: 20000 });
  const err = await apiError(make('wrong-key').chat.completions.create(chatParams({ max_tokens: 2 })));
  assert.ok(err instanceof AuthenticationError, `${err.constructor.name} ${err.status}`);
  assert.equal(err.status, 401);
  const modelsErr = await apiError(make('wrong-key').models.list());
  assert.equal(modelsErr.status, 401);

  const good = make(API_KEY);
  const r = await good.chat.completions.create(chatParams({ max_tokens: 2 }));
  assert.equal(r.usage.completion_tokens, 2);
  const ids = [];
  for await (const m of good.models.list()) ids.push(m.id);
  assert.deepEqual(ids, [modelName]);

  // No Authorization header at all is refused too; /health stays open.
  const bare = await requestJSON(authServer.url, '/v1/models');
  assert.equal(bare.status, 401);
  assert.equal((await requestJSON(authServer.url, '/health')).status, 200);
});
