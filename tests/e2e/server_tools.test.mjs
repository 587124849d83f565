// End-to-end: tool calling with `--enable-auto-tool-choice --tool-call-parser hermes`, through the openai client,
// and vLLM command lines (flags accepted as no-ops, unknown flags refused).
// pycoder-tiny is steered into writing a Hermes-style call by a reply that already holds eight of them (it copies
// the pattern), so the parsed calls come from a real model's output, streamed and not.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import OpenAI from 'openai';
import { startServer, postJson, BIN, MODEL, CHAT_TEMPLATE } from './server_helpers.mjs';

let server;
let client;

const call = '<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>\n';
const tools = [{ type: 'function', function: { name: 'add', parameters: { type: 'object', properties: { a: { type: 'integer' } } } } }];
const request = {
  model: 'pycoder-tiny',
  messages: [{ role: 'user', content: 'Add one.' }, { role: 'assistant', content: call.repeat(8) }],
  tools,
  temperature: 0,
  max_tokens: 40,
  continue_final_message: true,
  add_generation_prompt: false,
  stop: ['</tool_call>'],
  include_stop_str_in_output: true,
};

before(async () => {
  server = await startServer(['--served-model-name', 'pycoder-tiny', '--chat-template', CHAT_TEMPLATE,
    '--enable-auto-tool-choice', '--tool-call-parser', 'hermes']);
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
});

after(async () => {
  const { code } = await server.stop();
  assert.equal(code, 0, `server exit code; log:\n${server.log()}`);
});

test('startup log names the tool-call parser', () => {
  assert.match(server.log(), /tool calls parsed \(hermes\)/);
});

test('the model output is first checked to be a Hermes call (tool_choice none leaves it as text)', async () => {
  const r = await client.chat.completions.create({ ...request, tool_choice: 'none' });
  assert.equal(r.choices[0].message.content, '\n<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>');
  assert.deepEqual(r.choices[0].message.tool_calls, []);
  assert.equal(r.choices[0].finish_reason, 'stop');
});

test('non-streamed: tool_calls with id, name and JSON arguments; finish_reason tool_calls', async () => {
  const r = await client.chat.completions.create(request);
  const m = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(m.content, null);
  assert.equal(m.tool_calls.length, 1);
  assert.equal(m.tool_calls[0].type, 'function');
  assert.match(m.tool_calls[0].id, /^chatcmpl-tool-[0-9a-f]{32}$/);
  assert.equal(m.tool_calls[0].function.name, 'add');
  assert.deepEqual(JSON.parse(m.tool_calls[0].function.arguments), { a: 1 });
});

test('streamed: the call arrives as a tool_calls delta, no call text leaks into content', async () => {
  const stream = await client.chat.completions.create({ ...request, stream: true });
  let content = '';
  const calls = [];
  let finish = null;
  let roleChunk = null;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      if (c.delta.role) roleChunk = c.delta;
      if (c.delta.content) content += c.delta.content;
      for (const tc of c.delta.tool_calls || []) calls.push(tc);
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(content.trim(), '');
  assert.equal(roleChunk.content, null, 'the role chunk does not turn a calls-only reply\'s null content into ""');
  assert.equal(finish, 'tool_calls');
  assert.equal(calls.length, 1);
  assert.equal(calls[0].index, 0);
  assert.equal(calls[0].function.name, 'add');
  assert.deepEqual(JSON.parse(calls[0].function.arguments), { a: 1 });
  // The client library's own accumulator gives the same message.
  const again = await client.chat.completions.stream({ ...request, stream: true });
  const final = await again.finalChatCompletion();
  assert.equal(final.choices[0].message.tool_calls[0].function.name, 'add');
});

test('without tools, or with ordinary output, nothing is parsed', async () => {
  const { tools: _unused, ...noTools } = request;
  const r = await client.chat.completions.create(noTools);
  assert.match(r.choices[0].message.content, /<tool_call>/);
  assert.equal(r.choices[0].finish_reason, 'stop');
  const plain = await client.chat.completions.create({
    model: 'pycoder-tiny', messages: [{ role: 'user', content: 'def add(a, b):' }], tools, temperature: 0, max_tokens: 8,
  });
  assert.equal(plain.choices[0].finish_reason, 'length');
  assert.deepEqual(plain.choices[0].message.tool_calls, []);
  assert.equal(typeof plain.choices[0].message.content, 'string');
});

test('bad tool-call flags are refused at startup with a clear message', () => {
  const unknown = spawnSync(BIN, ['serve', MODEL, '--enable-auto-tool-choice', '--tool-call-parser', 'nope'], { encoding: 'utf8' });
  assert.notEqual(unknown.status, 0);
  assert.match(unknown.stderr, /--tool-call-parser: unknown parser 'nope' \(known: hermes, llama3_json, mistral\)/);
  const missing = spawnSync(BIN, ['serve', MODEL, '--enable-auto-tool-choice'], { encoding: 'utf8' });
  assert.notEqual(missing.status, 0);
  assert.match(missing.stderr, /--enable-auto-tool-choice needs --tool-call-parser/);
});

test('tool_choice required works beside the parser (a constrained call); an unknown tool_choice is a 400', async () => {
  const ok = await client.chat.completions.create({ ...request, tool_choice: 'required' });
  assert.equal(ok.choices[0].finish_reason, 'tool_calls');
  assert.equal(ok.choices[0].message.tool_calls[0].function.name, 'add');
  assert.equal(typeof JSON.parse(ok.choices[0].message.tool_calls[0].function.arguments), 'object');
  const r = await postJson(server.port, '/v1/chat/completions', { ...request, tool_choice: 'sometimes' });
  assert.equal(r.status, 400);
  assert.equal(JSON.parse(r.body).error.param, 'tool_choice');
});

test('vLLM command lines: no-op flags accepted, unknown flags and tensor parallelism refused clearly', async () => {
  const s = await startServer(['--trust-remote-code', '--disable-log-requests', '--disable-log-stats', '--enforce-eager']);
  try {
    const r = await postJson(s.port, '/v1/completions', { prompt: 'x = ', max_tokens: 2 });
    assert.equal(r.status, 200);
  } finally {
    assert.equal((await s.stop()).code, 0);
  }
  const unknown = spawnSync(BIN, ['serve', MODEL, '--no-such-flag'], { encoding: 'utf8' });
  assert.notEqual(unknown.status, 0);
  assert.match(unknown.stderr, /--no-such-flag/);
  const tp = spawnSync(BIN, ['serve', MODEL, '--tensor-parallel-size', '2'], { encoding: 'utf8' });
  assert.notEqual(tp.status, 0);
  assert.match(tp.stderr, /--tensor-parallel-size 2 is not supported yet/);
});
