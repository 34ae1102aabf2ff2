// `moeflow serve` driven by the official openai client (and raw fetch for malformed
// bodies): both endpoints streamed and not, batching that changes no output, stop
// strings, log-probabilities, structured outputs, function calling, reasoning_content,
// every bad-input status, a full queue, a client that disconnects, /metrics, and a
// graceful SIGTERM.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { startServer, stopServer, metric, metricsText } from './server_harness.mjs';

let s;
let client;
const MODEL = 'moeflow-default';

before(async () => {
  s = await startServer(['-np', '4', '-c', '256']);
  client = new OpenAI({ baseURL: `${s.baseURL}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
});
after(async () => stopServer(s));

const chat = (content, extra = {}) => ({
  model: MODEL,
  messages: [{ role: 'user', content }],
  temperature: 0,
  max_tokens: 24,
  ...extra,
});

async function collectChat(stream) {
  let text = '';
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const c of stream) {
    chunks++;
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      text += ch.delta?.content ?? '';
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  return { text, finish, usage, chunks };
}

test('health, models', async () => {
  const h = await fetch(`${s.baseURL}/health`);
  assert.equal(h.status, 200);
  assert.deepEqual(await h.json(), { status: 'ok' });
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), [MODEL]);
});

test('chat completion, not streamed and streamed, agree', async () => {
  const r = await client.chat.completions.create(chat('Tell me about the sea.'));
  const m = r.choices[0];
  assert.equal(r.object, 'chat.completion');
  assert.equal(m.message.role, 'assistant');
  assert.ok(m.message.content.length > 0);
  assert.ok(['stop', 'length'].includes(m.finish_reason));
  assert.ok(r.usage.prompt_tokens > 0);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  const st = await collectChat(
    await client.chat.completions.create({ ...chat('Tell me about the sea.'), stream: true, stream_options: { include_usage: true } }),
  );
  assert.equal(st.text, m.message.content);
  assert.equal(st.finish, m.finish_reason);
  // The same counts (the second run may continue from the first one's prompt).
  const counts = ({ prompt_tokens_details, ...rest }) => rest;
  assert.deepEqual(counts(st.usage), counts(r.usage));
  assert.equal(typeof st.usage.prompt_tokens_details.cached_tokens, 'number');
});

test("chat renders the model's template: the built-in one is question-and-answer prose", async () => {
  const messages = [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'What is a river?' },
    { role: 'assistant', content: 'Water that flows.' },
    { role: 'user', content: 'And the sea?' },
  ];
  const r = await client.chat.completions.create({ model: MODEL, messages, temperature: 0, max_tokens: 12 });
  // tools/train/chat_template.jinja, as Python's jinja2 renders it.
  const text = 'Be brief.\n\nQuestion: What is a river?\nAnswer: Water that flows.\n\nQuestion: And the sea?\nAnswer:';
  const c = await client.completions.create({ model: MODEL, prompt: text, temperature: 0, max_tokens: 12 });
  assert.equal(r.usage.prompt_tokens, c.usage.prompt_tokens);
  assert.equal(r.choices[0].message.content, c.choices[0].text);
});

test('completion, not streamed and streamed, agree; length ends at max_tokens', async () => {
  const r = await client.completions.create({ model: MODEL, prompt: 'In the beginning', max_tokens: 12, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.usage.completion_tokens, 12);
  assert.equal(r.choices[0].finish_reason, 'length');
  let text = '';
  for await (const c of await client.completions.create({ model: MODEL, prompt: 'In the beginning', max_tokens: 12, temperature: 0, stream: true }))
    text += c.choices[0]?.text ?? '';
  assert.equal(text, r.choices[0].text);
});

test('8 concurrent temperature-0 requests give the outputs they give one at a time', async () => {
  const prompts = ['The king', 'Once upon a time', 'The function returns', 'In the morning the', 'Water is',
    'And God said', 'The cat sat on', 'Chapter one'];
  const req = (p, i) => ({ model: MODEL, prompt: p, max_tokens: 10 + 3 * i, temperature: 0 });
  const alone = [];
  for (const [i, p] of prompts.entries()) alone.push((await client.completions.create(req(p, i))).choices[0].text);
  const together = await Promise.all(prompts.map((p, i) => client.completions.create(req(p, i))));
  assert.deepEqual(together.map((r) => r.choices[0].text), alone);
  // Chat, streamed, with a seeded temperature: the same again.
  const creq = (p, i) => ({ ...chat(p, { temperature: 0.8, seed: 100 + i, max_tokens: 16 }), stream: true });
  const calone = [];
  for (const [i, p] of prompts.entries()) calone.push((await collectChat(await client.chat.completions.create(creq(p, i)))).text);
  const ctogether = await Promise.all(prompts.map(async (p, i) => (await collectChat(await client.chat.completions.create(creq(p, i)))).text));
  assert.deepEqual(ctogether, calone);
});

test('stop strings end the text before them', async () => {
  const full = (await client.completions.create({ model: MODEL, prompt: 'In the beginning', max_tokens: 20, temperature: 0 })).choices[0].text;
  const words = full.trim().split(/\s+/);
  const stop = ' ' + words[Math.min(3, words.length - 1)];
  const cut = full.indexOf(stop);
  assert.ok(cut >= 0);
  const r = await client.completions.create({ model: MODEL, prompt: 'In the beginning', max_tokens: 20, temperature: 0, stop: [stop] });
  assert.equal(r.choices[0].text, full.slice(0, cut));
  assert.equal(r.choices[0].finish_reason, 'stop');
  let text = '';
  for await (const c of await client.completions.create({ model: MODEL, prompt: 'In the beginning', max_tokens: 20, temperature: 0, stop, stream: true }))
    text += c.choices[0]?.text ?? '';
  assert.equal(text, full.slice(0, cut));
});

test('repetition penalties change what a greedy completion repeats', async () => {
  const base = { model: MODEL, prompt: 'In the beginning', max_tokens: 48, temperature: 0, logprobs: 0 };
  const plain = (await client.completions.create(base)).choices[0].logprobs.tokens;
  const distinct = (toks) => new Set(toks).size;
  for (const extra of [{ frequency_penalty: 2 }, { presence_penalty: 2 }, { repeat_penalty: 1.5, repeat_last_n: -1 }]) {
    const toks = (await client.completions.create({ ...base, ...extra })).choices[0].logprobs.tokens;
    assert.notDeepEqual(toks, plain, JSON.stringify(extra));
    assert.ok(distinct(toks) > distinct(plain), `${JSON.stringify(extra)}: ${distinct(toks)} distinct tokens of 48, against ${distinct(plain)}`);
  }
  await expectError(client.completions.create({ ...base, frequency_penalty: 2.5 }), 400, 'frequency_penalty');
  // logit_bias: +100 on one id forces it at every step, whatever the model prefers.
  const forced = (await client.completions.create({ ...base, max_tokens: 6, logit_bias: { 100: 100 } })).choices[0].logprobs.tokens;
  assert.equal(new Set(forced).size, 1, JSON.stringify(forced));
  assert.notEqual(forced[0], plain[0]);
  await expectError(client.completions.create({ ...base, logit_bias: { 99999999: 1 } }), 400, 'logit_bias');
});

test('log-probabilities in both formats', async () => {
  const r = await client.chat.completions.create(chat('Hello', { logprobs: true, top_logprobs: 3, max_tokens: 5 }));
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, 5);
  for (const t of content) {
    assert.ok(t.logprob <= 0);
    assert.equal(t.top_logprobs.length, 3);
    // Temperature 0 picks the most likely token.
    assert.equal(t.top_logprobs[0].token, t.token);
    assert.ok(t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob);
  }
  const c = await client.completions.create({ model: MODEL, prompt: 'Hello', max_tokens: 4, temperature: 0, logprobs: 2 });
  const lp = c.choices[0].logprobs;
  assert.equal(lp.tokens.length, 4);
  assert.equal(lp.token_logprobs.length, 4);
  assert.equal(Object.keys(lp.top_logprobs[0]).length, 2);
  assert.equal(lp.tokens.join(''), c.choices[0].text);
});

test("log-probabilities end with the text at a stop string, streamed or not", async () => {
  const base = { model: MODEL, prompt: 'In the beginning', max_tokens: 20, temperature: 0, logprobs: 1 };
  const full = (await client.completions.create(base)).choices[0];
  assert.equal(full.logprobs.tokens.join(''), full.text);
  // A stop string at the start of the fourth token or later: the tokens before it spell
  // the text, and neither it nor any token after it is listed.
  const toks = full.logprobs.tokens;
  let j = 3;
  while (j < toks.length && (toks[j] === '' || full.text.indexOf(toks[j]) !== toks.slice(0, j).join('').length)) j++;
  assert.ok(j < toks.length, `no token of ${JSON.stringify(toks)} serves as a stop string`);
  const r = (await client.completions.create({ ...base, stop: [toks[j]] })).choices[0];
  assert.equal(r.finish_reason, 'stop');
  assert.equal(r.text, toks.slice(0, j).join(''));
  assert.deepEqual(r.logprobs.tokens, toks.slice(0, j));
  assert.deepEqual(r.logprobs.token_logprobs, full.logprobs.token_logprobs.slice(0, j));
  const streamed = [];
  for await (const c of await client.completions.create({ ...base, stop: [toks[j]], stream: true }))
    for (const ch of c.choices) streamed.push(...(ch.logprobs?.tokens ?? []));
  assert.deepEqual(streamed, toks.slice(0, j));
  // Chat lists the same way.
  const cfull = await client.chat.completions.create(chat('Hello', { logprobs: true, max_tokens: 20 }));
  const ctoks = cfull.choices[0].logprobs.content.map((t) => t.token);
  let k = 3;
  const ctext = cfull.choices[0].message.content;
  while (k < ctoks.length && (ctoks[k] === '' || ctext.indexOf(ctoks[k]) !== ctoks.slice(0, k).join('').length)) k++;
  if (k < ctoks.length) {
    const cr = await client.chat.completions.create(chat('Hello', { logprobs: true, max_tokens: 20, stop: [ctoks[k]] }));
    assert.deepEqual(cr.choices[0].logprobs.content.map((t) => t.token), ctoks.slice(0, k));
  }
});

// Writes raw bytes on a fresh connection and collects what comes back until the server
// closes it (or `ms` pass).
function rawExchange(bytes, ms = 10000) {
  return new Promise((resolve, reject) => {
    const url = new URL(s.baseURL);
    const sock = net.createConnection({ host: url.hostname, port: Number(url.port) });
    let got = '';
    const timer = setTimeout(() => { sock.destroy(); resolve({ got, closed: false }); }, ms);
    sock.on('data', (d) => { got += d.toString('latin1'); });
    sock.on('end', () => { clearTimeout(timer); resolve({ got, closed: true }); });
    sock.on('error', (e) => { clearTimeout(timer); reject(e); });
    sock.write(bytes);
  });
}

test('conflicting Content-Length headers are refused and the connection closed', async () => {
  const body = '{"prompt":"Hi","max_tokens":1}';
  const r = await rawExchange(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${body.length}\r\nContent-Length: 5\r\n\r\n${body}`);
  assert.match(r.got, /^HTTP\/1\.1 400 /);
  assert.match(r.got, /Content-Length headers that disagree/);
  assert.ok(r.closed, 'the connection was left open after an unread body');
  // The same header twice with one value is only redundant: answered.
  const same = await rawExchange(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${body.length}\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`);
  assert.match(same.got, /^HTTP\/1\.1 200 /);
});

test('n choices: each is the request run alone with seed + i, streamed or not', async () => {
  const base = { model: MODEL, prompt: 'In the beginning', max_tokens: 12, temperature: 0.9, seed: 40 };
  const r = await client.completions.create({ ...base, n: 3 });
  assert.equal(r.choices.length, 3);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  const alone = [];
  let tokens = 0;
  for (let i = 0; i < 3; i++) {
    const a = await client.completions.create({ ...base, seed: 40 + i });
    alone.push(a.choices[0].text);
    tokens += a.usage.completion_tokens;
  }
  assert.deepEqual(r.choices.map((c) => c.text), alone);
  assert.equal(new Set(alone).size > 1, true, 'three seeds gave one text');
  assert.equal(r.usage.completion_tokens, tokens);
  assert.equal(r.usage.prompt_tokens, (await client.completions.create({ ...base, max_tokens: 1 })).usage.prompt_tokens);
  // Streamed chat: chunks of both choices, each with its index; usage summed.
  const texts = ['', ''];
  const finishes = [null, null];
  let usage = null;
  const creq = { ...chat('Hello', { temperature: 0.9, seed: 7, max_tokens: 10 }), n: 2 };
  for await (const c of await client.chat.completions.create({ ...creq, stream: true, stream_options: { include_usage: true } })) {
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      texts[ch.index] += ch.delta?.content ?? '';
      if (ch.finish_reason) finishes[ch.index] = ch.finish_reason;
    }
  }
  const plain = await client.chat.completions.create(creq);
  assert.deepEqual(texts, plain.choices.map((c) => c.message.content));
  assert.ok(finishes.every((f) => f !== null));
  assert.equal(usage.completion_tokens, plain.usage.completion_tokens);
  await expectError(client.completions.create({ ...base, n: 17 }), 400, 'n');
});

test('response_format json_object: the text is (a prefix of) one JSON object', async () => {
  for (const seed of [1, 2, 3]) {
    const r = await client.chat.completions.create(chat('Give me a JSON object', {
      max_tokens: 48, temperature: 0.9, seed, response_format: { type: 'json_object' } }));
    const text = r.choices[0].message.content;
    assert.match(text, /^\s*\{/);
    if (r.choices[0].finish_reason === 'stop') assert.equal(typeof JSON.parse(text), 'object', text);
  }
  await expectError(client.chat.completions.create(chat('x', { response_format: { type: 'xml' } })), 400, 'response_format.type');
});

test('response_format json_schema: the text is (a prefix of) an instance, properties in the schema\'s order', async () => {
  const schema = {
    type: 'object',
    properties: {
      book: { enum: ['Genesis', 'Exodus'] },
      chapter: { type: 'integer' },
      words: { type: 'array', items: { type: 'string' }, maxItems: 2 },
      ok: { type: 'boolean' },
    },
    required: ['book', 'chapter', 'ok'],
    additionalProperties: false,
  };
  let closed = 0;
  for (const seed of [2, 3, 4]) {
    const r = await client.chat.completions.create(chat('Which book?', {
      max_tokens: 200, temperature: 0.9, seed, response_format: { type: 'json_schema', json_schema: { name: 'answer', strict: true, schema } } }));
    const text = r.choices[0].message.content;
    assert.match(text, /^\s*\{/);
    if (r.choices[0].finish_reason !== 'stop') continue;
    closed += 1;
    const v = JSON.parse(text);
    assert.ok(['Genesis', 'Exodus'].includes(v.book), text);
    assert.ok(Number.isInteger(v.chapter), text);
    assert.equal(typeof v.ok, 'boolean', text);
    const order = Object.keys(schema.properties);
    const keys = Object.keys(v);
    assert.deepEqual(keys, order.filter((k) => keys.includes(k)), text);
  }
  assert.ok(closed > 0);
  // A keyword the server cannot hold the model to is refused, with its place.
  const bad = { type: 'object', properties: { email: { type: 'string', format: 'email' } } };
  await assert.rejects(client.chat.completions.create(chat('x', { response_format: { type: 'json_schema', json_schema: { name: 'x', schema: bad } } })), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.param, 'response_format.json_schema.schema');
    assert.match(e.error.message, /#\/properties\/email: the keyword 'format'/);
    return true;
  });
});

const TOOLS = [
  { type: 'function', function: { name: 'get_weather', description: 'The weather in a city',
    parameters: { type: 'object', properties: { unit: { enum: ['celsius', 'fahrenheit'] }, days: { enum: [1, 2, 3] } }, required: ['unit', 'days'] } } },
  { type: 'function', function: { name: 'get_time', description: 'The time now' } },
];

// The functions offered in the prompt take some 300 of the built-in model's tokens: a
// server with room for them.
let toolServer;
let toolClient;
async function tooling() {
  if (!toolServer) {
    toolServer = await startServer(['-np', '2', '-c', '1024']);
    toolClient = new OpenAI({ baseURL: `${toolServer.baseURL}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
  }
  return toolClient;
}
after(async () => { if (toolServer) await stopServer(toolServer); });

async function collectCalls(stream) {
  const calls = [];
  let content = '';
  let finish = null;
  for await (const c of stream) {
    for (const ch of c.choices) {
      content += ch.delta?.content ?? '';
      for (const t of ch.delta?.tool_calls ?? []) {
        if (!calls[t.index]) calls[t.index] = { id: t.id, type: t.type, function: { name: '', arguments: '' } };
        calls[t.index].function.name += t.function?.name ?? '';
        calls[t.index].function.arguments += t.function?.arguments ?? '';
      }
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  return { calls, content, finish };
}

test('tools: tool_choice "required" and a named function give a call of the functions, streamed or not', async () => {
  const client = await tooling();
  const req = chat('What is the weather like?', { max_tokens: 600, tools: TOOLS, tool_choice: 'required' });
  const r = await client.chat.completions.create(req);
  const m = r.choices[0];
  assert.equal(m.finish_reason, 'tool_calls', JSON.stringify(m));
  assert.equal(m.message.content, null);
  assert.equal(m.message.tool_calls.length, 1);
  const call = m.message.tool_calls[0];
  assert.equal(call.type, 'function');
  assert.match(call.id, /^call_[A-Za-z0-9]{24}$/);
  const args = JSON.parse(call.function.arguments);
  if (call.function.name === 'get_weather') {
    assert.ok(['celsius', 'fahrenheit'].includes(args.unit), call.function.arguments);
    assert.ok([1, 2, 3].includes(args.days), call.function.arguments);
  } else {
    assert.equal(call.function.name, 'get_time');
  }
  // Streamed: the same call, whole, in one delta; no content.
  const st = await collectCalls(await client.chat.completions.create({ ...req, stream: true }));
  assert.equal(st.finish, 'tool_calls');
  assert.equal(st.content, '');
  assert.equal(st.calls.length, 1);
  assert.equal(st.calls[0].function.name, call.function.name);
  assert.equal(st.calls[0].function.arguments, call.function.arguments);
  // A named function is the one called.
  for (const name of ['get_weather', 'get_time']) {
    const n = await client.chat.completions.create(chat('Go.', { max_tokens: 600, tools: TOOLS,
      tool_choice: { type: 'function', function: { name } } }));
    assert.equal(n.choices[0].finish_reason, 'tool_calls');
    assert.equal(n.choices[0].message.tool_calls[0].function.name, name);
    assert.equal(typeof JSON.parse(n.choices[0].message.tool_calls[0].function.arguments), 'object');
  }
});

test('tools: an agent loop\'s history is accepted and "auto" replies are text or calls', async () => {
  const client = await tooling();
  const messages = [
    { role: 'user', content: 'What is the weather like?' },
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"unit":"celsius","days":1}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 3}' },
  ];
  for (const stream of [false, true]) {
    const req = { model: MODEL, messages, tools: TOOLS, temperature: 0, max_tokens: 16 };
    if (!stream) {
      const r = await client.chat.completions.create(req);
      const m = r.choices[0];
      if (m.finish_reason === 'tool_calls') assert.ok(m.message.tool_calls.length > 0);
      else assert.equal(typeof m.message.content, 'string');
    } else {
      const st = await collectCalls(await client.chat.completions.create({ ...req, stream: true }));
      assert.ok(st.finish === 'tool_calls' ? st.calls.length > 0 : st.content.length > 0);
    }
  }
  await expectError(client.chat.completions.create(chat('x', { tool_choice: 'required' })), 400, 'tool_choice');
  const bad = [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { d: { type: 'string', format: 'date' } } } } }];
  await expectError(client.chat.completions.create(chat('x', { tools: bad, tool_choice: 'required' })), 400, 'tools[0].function.parameters');
});

test('reasoning: a reply inside <think> is reasoning_content, streamed or not; reasoning_format "none" keeps it in the content', async () => {
  // The built-in template with DeepSeek-R1's ending: the generation prompt opens the block.
  const dir = mkdtempSync(join(tmpdir(), 'moeflow-think-'));
  const file = join(dir, 'think.jinja');
  writeFileSync(file, "{%- for m in messages -%}{{ 'Question: ' + m['content'] + '\\n' }}{%- endfor -%}" +
    "{%- if add_generation_prompt -%}{{ 'Answer: <think>\\n' }}{%- endif -%}");
  const srv = await startServer(['-np', '2', '-c', '256', '--chat-template-file', file]);
  try {
    const c = new OpenAI({ baseURL: `${srv.baseURL}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
    const req = chat('Tell me about the sea.', { max_tokens: 16 });
    const r = await c.chat.completions.create(req);
    const m = r.choices[0].message;
    assert.equal(typeof m.reasoning_content, 'string');
    assert.ok(m.reasoning_content.length > 0);
    let reasoning = '';
    let content = '';
    for await (const ch of await c.chat.completions.create({ ...req, stream: true })) {
      reasoning += ch.choices[0]?.delta?.reasoning_content ?? '';
      content += ch.choices[0]?.delta?.content ?? '';
    }
    assert.equal(reasoning, m.reasoning_content);
    assert.equal(content, m.content);
    const raw = await c.chat.completions.create({ ...req, reasoning_format: 'none' });
    assert.equal(raw.choices[0].message.reasoning_content, undefined);
    assert.equal(raw.choices[0].message.content.trim(), (m.reasoning_content + (m.content ? '</think>' + m.content : '')).trim());
    await expectError(c.chat.completions.create({ ...req, reasoning_format: 'hidden' }), 400, 'reasoning_format');
  } finally {
    await stopServer(srv);
    rmSync(dir, { recursive: true, force: true });
  }
});

test('/tokenize and /detokenize use the served model\'s tokenizer', async () => {
  const post = async (route, body) => {
    const r = await fetch(`${s.baseURL}${route}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    return { status: r.status, body: await r.json() };
  };
  const text = 'In the beginning God created';
  const plain = await post('/tokenize', { content: text });
  assert.equal(plain.status, 200);
  assert.ok(plain.body.tokens.length > 2);
  // With the model's special tokens (its BOS): the ids the completions endpoint counts.
  const t = await post('/tokenize', { content: text, add_special: true });
  assert.ok(t.body.tokens.length >= plain.body.tokens.length);
  const c = await client.completions.create({ model: MODEL, prompt: text, max_tokens: 1 });
  assert.equal(c.usage.prompt_tokens, t.body.tokens.length);
  // Ids as the prompt give the same completion as the text.
  const byIds = await client.completions.create({ model: MODEL, prompt: t.body.tokens, max_tokens: 4, temperature: 0 });
  const byText = await client.completions.create({ model: MODEL, prompt: text, max_tokens: 4, temperature: 0 });
  assert.equal(byIds.choices[0].text, byText.choices[0].text);
  const d = await post('/detokenize', { tokens: t.body.tokens });
  assert.equal(d.status, 200);
  assert.equal(d.body.content, text);
  const bad = await post('/detokenize', { tokens: [1, 99999999] });
  assert.equal(bad.status, 400);
  assert.equal(bad.body.error.param, 'tokens[1]');
  assert.equal((await post('/tokenize', { text })).status, 400);
  assert.equal((await fetch(`${s.baseURL}/tokenize`)).status, 405);
});

test('echo scores the prompt (lm-eval-harness style) and returns it before the completion', async () => {
  const prompt = 'In the beginning God created';
  const r = await client.completions.create({ model: MODEL, prompt, max_tokens: 0, echo: true, logprobs: 1, temperature: 0 });
  const c = r.choices[0];
  assert.equal(c.text, prompt);
  assert.equal(c.finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 0);
  const lp = c.logprobs;
  assert.equal(lp.tokens.join(''), prompt);
  assert.equal(lp.tokens.length, r.usage.prompt_tokens);
  assert.equal(lp.token_logprobs[0], null);
  assert.equal(lp.top_logprobs[0], null);
  for (let i = 1; i < lp.tokens.length; i++) {
    assert.ok(lp.token_logprobs[i] <= 0);
    assert.equal(Object.keys(lp.top_logprobs[i]).length, 1);
    assert.ok(Object.values(lp.top_logprobs[i])[0] >= lp.token_logprobs[i]);
  }
  assert.deepEqual(lp.text_offset.slice(0, 3), [0, lp.tokens[0].length, lp.tokens[0].length + lp.tokens[1].length]);
  // With a completion after it, streamed: the same prompt scores, then the new tokens.
  let text = '';
  const streamed = [];
  for await (const ch of await client.completions.create({ model: MODEL, prompt, max_tokens: 4, echo: true, logprobs: 1, temperature: 0, stream: true }))
    for (const x of ch.choices) {
      text += x.text ?? '';
      streamed.push(...(x.logprobs?.token_logprobs ?? []));
    }
  const plain = (await client.completions.create({ model: MODEL, prompt, max_tokens: 4, temperature: 0 })).choices[0].text;
  assert.equal(text, prompt + plain);
  assert.equal(streamed.length, lp.tokens.length + 4);
  assert.deepEqual(streamed.slice(0, lp.tokens.length), lp.token_logprobs);
  await expectError(client.completions.create({ model: MODEL, prompt, max_tokens: 0 }), 400, 'max_tokens');
  await expectError(client.chat.completions.create({ ...chat('x'), echo: true }), 400, 'echo');
});

async function expectError(promise, status, param) {
  await assert.rejects(promise, (e) => {
    assert.equal(e.status, status, `status of ${e.message}`);
    assert.equal(typeof e.error?.message, 'string');
    if (param !== undefined) assert.equal(e.param, param);
    return true;
  });
}

async function rawPost(route, body) {
  const r = await fetch(`${s.baseURL}${route}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  return { status: r.status, body: await r.json(), headers: r.headers };
}

test("cache_prompt: a conversation's next turn continues from the turn before's prompt, with the same reply", async () => {
  const messages = [
    { role: 'system', content: 'You are a patient teacher who answers in short sentences. '.repeat(7) },
    { role: 'user', content: 'Tell me about the sea.' },
  ];
  const ask = (msgs, extra = {}) =>
    client.chat.completions.create({ model: MODEL, messages: msgs, temperature: 0, max_tokens: 12, ...extra });
  const r1 = await ask(messages);
  assert.ok(r1.usage.prompt_tokens > 128, `${r1.usage.prompt_tokens} prompt tokens: the test needs a whole chunk of 128`);
  assert.ok(r1.usage.prompt_tokens_details.cached_tokens < 16, 'no earlier request shares its system message');
  const next = [...messages, { role: 'assistant', content: r1.choices[0].message.content }, { role: 'user', content: 'And rivers?' }];
  const before = await metric(s, 'moeflow_prompt_tokens_cached_total');
  const r2 = await ask(next);
  const cached = r2.usage.prompt_tokens_details.cached_tokens;
  assert.equal((await metric(s, 'moeflow_prompt_tokens_cached_total')) - before, cached);
  const wholeChunks = Math.floor(r1.usage.prompt_tokens / 128) * 128;
  if ((await metric(s, 'moeflow_prompt_cache_mode')) === 1) {
    // Split-invariant (q8_0 on the integer kernels): all that the two prompts share in
    // whole KV blocks of 32, not whole chunks of 128 only (a reply is kept too, as far
    // as the template writes it back token for token; the built-in model's prose
    // template re-tokenizes at the joint).
    assert.ok(cached >= Math.floor((r1.usage.prompt_tokens - 1) / 32) * 32 && cached % 32 === 0 &&
      cached < r2.usage.prompt_tokens, `${cached} cached of ${r2.usage.prompt_tokens}, turn 1 had ${r1.usage.prompt_tokens}`);
  } else {
    assert.equal(cached, wholeChunks);
  }
  const fresh = await ask(next, { cache_prompt: false });
  assert.equal(fresh.usage.prompt_tokens_details.cached_tokens, 0);
  assert.equal(fresh.choices[0].message.content, r2.choices[0].message.content);
  assert.equal(fresh.usage.prompt_tokens, r2.usage.prompt_tokens);
  const st = await collectChat(await client.chat.completions.create({
    model: MODEL, messages: next, temperature: 0, max_tokens: 12, stream: true, stream_options: { include_usage: true },
  }));
  assert.equal(st.text, r2.choices[0].message.content);
  assert.ok(st.usage.prompt_tokens_details.cached_tokens >= wholeChunks, 'the streamed run continues from a parked prompt too');
  await expectError(ask(next, { cache_prompt: 'yes' }), 400, 'cache_prompt');
});

test('n choices read their shared prompt once: the others wait for it and continue from it', async () => {
  const prompt = 'A lighthouse keeper counts the ships that pass each night. '.repeat(6);
  const before = await metric(s, 'moeflow_prompt_tokens_cached_total');
  const r = await client.completions.create({ model: MODEL, prompt, temperature: 0, max_tokens: 8, n: 3 });
  assert.equal(r.choices.length, 3);
  for (const c of r.choices) assert.equal(c.text, r.choices[0].text, 'greedy choices of one prompt agree');
  const n = r.usage.prompt_tokens;
  assert.ok(n > 128, `${n} prompt tokens: the test needs a whole chunk of 128`);
  // Continued at the last whole KV block (split-invariant) or chunk before the prompt's
  // last token, which each choice computes for its first token's logits.
  const unit = (await metric(s, 'moeflow_prompt_cache_mode')) === 1 ? 32 : 128;
  const expected = Math.floor((n - 1) / unit) * unit;
  assert.equal(r.usage.prompt_tokens_details.cached_tokens, expected);
  assert.equal((await metric(s, 'moeflow_prompt_tokens_cached_total')) - before, 2 * expected, 'two of the three continued');
});

test('bad input gets 400/404 with an OpenAI error object', async () => {
  const malformed = await rawPost('/v1/chat/completions', '{"messages": [');
  assert.equal(malformed.status, 400);
  assert.equal(malformed.body.error.type, 'invalid_request_error');
  assert.ok(malformed.body.error.message.includes('JSON'));
  assert.equal((await rawPost('/v1/completions', '[1,2]')).status, 400);
  await expectError(client.chat.completions.create(chat('x', { temperature: 'hot' })), 400, 'temperature');
  await expectError(client.chat.completions.create(chat('x', { max_tokens: 0 })), 400, 'max_tokens');
  await expectError(client.chat.completions.create(chat('x', { max_tokens: 100000 })), 400, 'max_tokens');
  await expectError(client.chat.completions.create({ model: MODEL, messages: [] }), 400, 'messages');
  await expectError(client.chat.completions.create({ model: MODEL, messages: [{ role: 'user' }] }), 400, 'messages[0].content');
  await expectError(client.chat.completions.create({ model: MODEL, messages: [{ role: 'wizard', content: 'x' }] }), 400, 'messages[0].role');
  await expectError(client.chat.completions.create(chat('x', { stop: 7 })), 400, 'stop');
  await expectError(client.chat.completions.create(chat('x', { n: 20 })), 400, 'n');
  await expectError(client.chat.completions.create(chat('x', { stream: 'yes' })), 400, 'stream');
  await expectError(client.completions.create({ model: MODEL, prompt: 'word '.repeat(400) }), 400, 'prompt');
  await expectError(client.completions.create({ model: MODEL, prompt: [1, 2, 999999] }), 400, 'prompt[2]');
  // A text past what the context could hold in any tokens is refused before tokenising.
  const t0 = Date.now();
  const huge = await rawPost('/v1/chat/completions', JSON.stringify({ messages: [{ role: 'user', content: 'a '.repeat(3000000) }] }));
  assert.equal(huge.status, 400);
  assert.equal(huge.body.error.code, 'context_length_exceeded');
  assert.ok(huge.body.error.message.includes('bytes'), huge.body.error.message);
  assert.ok(Date.now() - t0 < 5000);
  // JSON text has no NUL byte: what follows one is not silently dropped.
  const nul = await rawPost('/v1/completions', '{"prompt": "hi", "max_tokens": 2}\u0000{{{');
  assert.equal(nul.status, 400);
  assert.ok(nul.body.error.message.includes('NUL byte at offset 33'), nul.body.error.message);
  await expectError(client.chat.completions.create({ ...chat('x'), model: 'gpt-4' }), 404, 'model');
  const unknown = await fetch(`${s.baseURL}/v1/engines`);
  assert.equal(unknown.status, 404);
  // A route that exists, asked with another method.
  const wrong = await fetch(`${s.baseURL}/v1/chat/completions`, { method: 'DELETE' });
  assert.equal(wrong.status, 405);
  assert.equal(wrong.headers.get('allow'), 'POST');
  assert.match((await wrong.json()).error.message, /DELETE is not allowed on \/v1\/chat\/completions/);
  assert.equal((await fetch(`${s.baseURL}/v1/completions`)).status, 405);
  assert.equal(typeof (await unknown.json()).error.message, 'string');
  // The server is still well: no slot leaked.
  assert.equal(await metric(s, 'moeflow_requests_running'), 0);
  const ok = await client.completions.create({ model: MODEL, prompt: 'Hello', max_tokens: 2 });
  assert.equal(ok.usage.completion_tokens, 2);
});

test('large bodies are refused quickly and their memory goes back', async () => {
  const fs = await import('node:fs');
  const rss = () => Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${s.proc.pid}/status`, 'utf8'))[1]) * 1024;
  // ~8 MB of messages (under the body limit), labelled as `curl -d` labels them.
  const body = JSON.stringify({ messages: Array(240000).fill({ role: 'user', content: 'a' }), max_tokens: 1 });
  const before = rss();
  for (let i = 0; i < 4; i++) {
    const t0 = Date.now();
    const r = await fetch(`${s.baseURL}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body });
    assert.equal(r.status, 400);
    assert.equal((await r.json()).error.code, 'context_length_exceeded');
    assert.ok(Date.now() - t0 < 10000);
  }
  // Each such request used to keep ~30-170 MB for good. (Under ASan its allocator keeps
  // freed memory in quarantine: the check means nothing there.)
  if (process.env.MOEFLOW_SANITIZED !== '1') assert.ok(rss() - before < 100e6, `RSS grew by ${(rss() - before) / 1e6} MB`);
  // A chunked body has no Content-Length for httplib to check: the server counts it.
  const net = await import('node:net');
  const status = await new Promise((resolve, reject) => {
    const sock = net.connect(s.port, '127.0.0.1');
    let got = '';
    sock.on('data', (d) => {
      got += d.toString();
      const m = /^HTTP\/1\.1 (\d+)/.exec(got);
      if (m) {
        sock.destroy();
        resolve(Number(m[1]));
      }
    });
    sock.on('error', () => {});  // the server stops reading past the limit
    sock.on('close', () => resolve(Number((/^HTTP\/1\.1 (\d+)/.exec(got) ?? [0, 0])[1])));
    sock.write('POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n');
    const chunk = 'a'.repeat(1 << 20);
    for (let i = 0; i < 12; i++) sock.write(`${chunk.length.toString(16)}\r\n${chunk}\r\n`);
    sock.write('0\r\n\r\n');
    setTimeout(() => reject(new Error('no answer to a chunked body past the limit')), 20000);
  });
  assert.equal(status, 413);
  // A form-labelled body past httplib's 8 KiB form limit is still read as the JSON it is.
  const long = await fetch(`${s.baseURL}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: JSON.stringify({ prompt: 'a '.repeat(6000), max_tokens: 1 }) });
  assert.equal(long.status, 400);
  assert.equal((await long.json()).error.code, 'context_length_exceeded');
});

test("a finished request's KV blocks are back before its client hears", async () => {
  for (let i = 0; i < 20; i++) {
    const stream = i % 2 === 1;
    const r = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 5, temperature: 0, stream });
    if (stream) for await (const _ of r);
    // Blocks held by finished prompts kept for reuse are counted apart.
    const held = (await metric(s, 'moeflow_kv_blocks_used')) - (await metric(s, 'moeflow_kv_blocks_parked'));
    assert.equal(held, 0, `request ${i} (${stream ? 'streamed' : 'plain'})`);
  }
});

test('a client that disconnects mid-stream frees its slot', async () => {
  // A generation far longer than the test, so that only the disconnect can end it early.
  const one = await startServer(['-np', '1', '-c', '4096']);
  try {
    const c = new OpenAI({ baseURL: `${one.baseURL}/v1`, apiKey: 'unused', maxRetries: 0 });
    const ctl = new AbortController();
    const stream = await c.completions.create({ model: MODEL, prompt: 'The', max_tokens: 4000, temperature: 0, stream: true }, { signal: ctl.signal });
    let n = 0;
    try {
      for await (const _ of stream) {
        if (++n === 2) {
          ctl.abort();
          break;
        }
      }
    } catch {
      // the abort surfaces as an error in some client versions, as an ended stream in others
    }
    assert.equal(n, 2);
    // The only slot must come back: a second request completes.
    const t0 = Date.now();
    const r = await c.completions.create({ model: MODEL, prompt: 'Hello', max_tokens: 3 });
    assert.equal(r.usage.completion_tokens, 3);
    assert.ok(Date.now() - t0 < 30000);
    assert.equal(await metric(one, 'moeflow_requests_finished_total{reason="cancelled"}'), 1);
    assert.equal(await metric(one, 'moeflow_requests_running'), 0);
  } finally {
    await stopServer(one);
  }
});

test('a client that disconnects before a plain response frees its slot and its queue place', async () => {
  // Not streamed: nothing is written until the generation ends, so only the server's
  // watch on the connection can notice the client leaving.
  const one = await startServer(['-np', '1', '-c', '4096']);
  try {
    const body = JSON.stringify({ model: MODEL, prompt: 'The', max_tokens: 4000, temperature: 0, ignore_eos: true });
    const ctl = new AbortController();
    const post = () => fetch(`${one.baseURL}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body, signal: ctl.signal });
    const running = post().catch(() => null);
    const queued = post().catch(() => null);
    const t0 = Date.now();
    while ((await metric(one, 'moeflow_requests_waiting')) < 1 && Date.now() - t0 < 30000) await new Promise((r) => setTimeout(r, 50));
    assert.equal(await metric(one, 'moeflow_requests_running'), 1);
    ctl.abort();
    await Promise.all([running, queued]);
    const c = new OpenAI({ baseURL: `${one.baseURL}/v1`, apiKey: 'unused', maxRetries: 0 });
    const t1 = Date.now();
    const r = await c.completions.create({ model: MODEL, prompt: 'Hello', max_tokens: 3 });
    assert.equal(r.usage.completion_tokens, 3);
    assert.ok(Date.now() - t1 < 30000);
    assert.equal(await metric(one, 'moeflow_requests_finished_total{reason="cancelled"}'), 2);
    assert.equal(await metric(one, 'moeflow_requests_running'), 0);
    assert.equal(await metric(one, 'moeflow_requests_waiting'), 0);
  } finally {
    await stopServer(one);
  }
});

test('--api-key-file: every route but /health needs one of the keys', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'moeflow-keys-'));
  const file = join(dir, 'keys');
  writeFileSync(file, '# rotated monthly\n  sk-old-1 \n\nsk-new-2\n');
  const k = await startServer(['--api-key-file', file]);
  try {
    assert.match(k.log(), /2 API keys: every route but \/health needs/);
    assert.equal((await fetch(`${k.baseURL}/health`)).status, 200);
    for (const [route, init] of [['/v1/models', {}], ['/metrics', {}],
      ['/v1/completions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"prompt":"Hi","max_tokens":1}' }]]) {
      const r = await fetch(`${k.baseURL}${route}`, init);
      assert.equal(r.status, 401, route);
      assert.equal(r.headers.get('www-authenticate'), 'Bearer');
      const e = (await r.json()).error;
      assert.equal(e.code, 'invalid_api_key');
      assert.match(e.message, /no API key given/);
    }
    const bad = await fetch(`${k.baseURL}/metrics`, { headers: { authorization: 'Bearer sk-old-' } });
    assert.equal(bad.status, 401);
    assert.match((await bad.json()).error.message, /not one of this server's/);
    await expectError(new OpenAI({ baseURL: `${k.baseURL}/v1`, apiKey: 'sk-wrong', maxRetries: 0 })
      .completions.create({ model: MODEL, prompt: 'Hi', max_tokens: 1 }), 401);
    for (const apiKey of ['sk-old-1', 'sk-new-2']) {
      const c = new OpenAI({ baseURL: `${k.baseURL}/v1`, apiKey, maxRetries: 0 });
      assert.equal((await c.completions.create({ model: MODEL, prompt: 'Hi', max_tokens: 2 })).usage.completion_tokens, 2);
    }
    assert.equal((await fetch(`${k.baseURL}/metrics`, { headers: { authorization: 'Bearer sk-new-2' } })).status, 200);
  } finally {
    await stopServer(k);
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a full queue answers 503 with Retry-After', async () => {
  const small = await startServer(['-np', '1', '--queue', '1', '-c', '256']);
  try {
    const body = JSON.stringify({ model: MODEL, prompt: 'The', max_tokens: 200, temperature: 0 });
    const post = () => fetch(`${small.baseURL}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    const results = await Promise.all([post(), post(), post(), post()]);
    const statuses = results.map((r) => r.status).sort();
    assert.ok(statuses.filter((x) => x === 200).length >= 1);
    const full = results.filter((r) => r.status === 503);
    assert.ok(full.length >= 1, `statuses ${statuses}`);
    assert.equal(full[0].headers.get('retry-after'), '1');
    const bodies = await Promise.all(results.map((r) => r.json()));
    assert.equal(bodies[results.indexOf(full[0])].error.code, 'queue_full');
  } finally {
    await stopServer(small);
  }
});

test('/metrics speaks Prometheus with the moeflow_* names', async () => {
  const text = await metricsText(s);
  for (const name of ['moeflow_requests_running', 'moeflow_requests_waiting', 'moeflow_prompt_tokens_total',
    'moeflow_generation_tokens_total', 'moeflow_time_to_first_token_seconds_bucket', 'moeflow_inter_token_latency_seconds_count',
    'moeflow_e2e_request_latency_seconds_sum', 'moeflow_request_queue_time_seconds_count', 'moeflow_kv_blocks_used', 'moeflow_kv_bytes_touched',
    'moeflow_kv_blocks_parked', 'moeflow_prompt_tokens_cached_total', 'moeflow_prompt_cache_mode',
    'moeflow_expert_cache_hits_total', 'moeflow_expert_cache_misses_total', 'moeflow_expert_bytes_read_total',
    'moeflow_expert_stall_seconds_total', 'moeflow_expert_prefetches_issued_total', 'moeflow_expert_prefetches_used_total'])
    assert.ok(text.includes(`\n${name}`) || text.startsWith(name), `missing ${name}`);
  assert.ok((await metric(s, 'moeflow_generation_tokens_total')) > 0);
  assert.ok((await metric(s, 'moeflow_time_to_first_token_seconds_count')) > 0);
});

test('offloaded under a 25% expert budget: same outputs as all-resident', async () => {
  const off = await startServer(['-np', '2', '-c', '256', '--expert-budget', '25%', '--policy', 'lru']);
  try {
    const c = new OpenAI({ baseURL: `${off.baseURL}/v1`, apiKey: 'unused', maxRetries: 0 });
    const req = { model: MODEL, prompt: 'The king', max_tokens: 12, temperature: 0 };
    const [a, b] = await Promise.all([c.completions.create(req), client.completions.create(req)]);
    assert.equal(a.choices[0].text, b.choices[0].text);
    assert.ok((await metric(off, 'moeflow_expert_cache_misses_total')) > 0);
    assert.ok((await metric(off, 'moeflow_expert_bytes_read_total')) > 0);
  } finally {
    await stopServer(off);
  }
});

test('SIGTERM lets the running request finish, then the server exits 0', async () => {
  const t = await startServer(['-np', '2', '-c', '256']);
  const c = new OpenAI({ baseURL: `${t.baseURL}/v1`, apiKey: 'unused', maxRetries: 0 });
  const stream = await c.completions.create({ model: MODEL, prompt: 'The', max_tokens: 40, temperature: 0, stream: true });
  let text = '';
  let finish = null;
  let n = 0;
  for await (const ch of stream) {
    text += ch.choices[0]?.text ?? '';
    finish = ch.choices[0]?.finish_reason ?? finish;
    if (++n === 1) t.proc.kill('SIGTERM');
  }
  assert.equal(finish, 'length');
  assert.equal(await t.exited, 0);
  assert.match(t.log(), /finishing running requests/);
});

test('--policy-state-out saves what the policy learned from the requests served, at SIGTERM', async () => {
  const fs = await import('node:fs');
  const os = await import('node:os');
  const path = await import('node:path');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'moeflow-state-'));
  try {
    const out = path.join(dir, 'mi.state');
    const t = await startServer(['-np', '2', '-c', '256', '--policy', 'moe-infinity', '--expert-budget', '50%', '--policy-state-out', out]);
    const c = new OpenAI({ baseURL: `${t.baseURL}/v1`, apiKey: 'unused', maxRetries: 0 });
    await c.completions.create({ model: MODEL, prompt: 'The sea', max_tokens: 8, temperature: 0 });
    t.proc.kill('SIGTERM');
    assert.equal(await t.exited, 0);
    assert.match(t.log(), /policy state saved/);
    assert.ok(fs.statSync(out).size > 0);
    // The next start reads it.
    const u = await startServer(['-np', '1', '-c', '256', '--policy', 'moe-infinity', '--expert-budget', '50%', '--policy-state', out]);
    await stopServer(u);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
