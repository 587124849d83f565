// End-to-end tests of `peregrine serve` on pycoder-tiny with the official `openai` npm client: completions and
// chat (streaming and not), n=2, logprobs, stop strings, echo, usage, tokenize/detokenize, and 64 concurrent
// streams that must each equal the greedy output of the same request run alone.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import OpenAI from 'openai';
import { startServer, postJson, request, parseMetrics, metric, CHAT_TEMPLATE } from './server_helpers.mjs';

let server;
let client;
const MODEL = 'pycoder-tiny';

before(async () => {
  server = await startServer(['--served-model-name', MODEL, '--chat-template', CHAT_TEMPLATE]);
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
});

after(async () => {
  const { code } = await server.stop();
  assert.equal(code, 0, `server exit code; log:\n${server.log()}`);
});

const greedy = { model: MODEL, temperature: 0, max_tokens: 16 };

async function streamText(params) {
  const stream = await client.completions.create({ ...params, stream: true });
  let text = '';
  let finish = null;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { text, finish };
}

test('startup log names the model, the KV capacity and the URL', () => {
  const log = server.log();
  assert.match(log, /loaded LlamaForCausalLM/);
  assert.match(log, /KV cache 4096 blocks x 16 = 65536 tokens/);
  assert.match(log, new RegExp(`http://127.0.0.1:${server.port}`));
});

test('models, health and version', async () => {
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), [MODEL]);
  assert.equal(models.data[0].max_model_len, 1024);
  assert.equal((await request(server.port, 'GET', '/health')).status, 200);
  const version = JSON.parse((await request(server.port, 'GET', '/version')).body);
  assert.match(version.version, /^\d+\.\d+\.\d+$/);
});

test('completion: text, usage, finish reason; greedy is reproducible', async () => {
  const a = await client.completions.create({ ...greedy, prompt: 'def fibonacci(n):\n    ' });
  assert.equal(a.object, 'text_completion');
  assert.equal(a.choices.length, 1);
  assert.equal(a.choices[0].finish_reason, 'length');
  assert.ok(a.choices[0].text.length > 0);
  assert.equal(a.usage.completion_tokens, 16);
  assert.equal(a.usage.total_tokens, a.usage.prompt_tokens + 16);
  const b = await client.completions.create({ ...greedy, prompt: 'def fibonacci(n):\n    ' });
  assert.equal(b.choices[0].text, a.choices[0].text);
});

test('streamed completion equals the non-streamed one, with a usage chunk', async () => {
  const prompt = 'import os\nimport sys\n';
  const full = await client.completions.create({ ...greedy, prompt });
  const stream = await client.completions.create({ ...greedy, prompt, stream: true, stream_options: { include_usage: true } });
  let text = '';
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) text += c.text;
  }
  assert.equal(text, full.choices[0].text);
  assert.ok(chunks > 2);
  assert.deepEqual(usage, full.usage);
});

test('prompts as token ids and as a list; n=2 with a seed', async () => {
  const tok = JSON.parse((await postJson(server.port, '/tokenize', { prompt: 'class Stack:' })).body);
  assert.equal(tok.count, tok.tokens.length);
  assert.equal(tok.max_model_len, 1024);
  const byText = await client.completions.create({ ...greedy, prompt: 'class Stack:' });
  const byIds = await client.completions.create({ ...greedy, prompt: tok.tokens });
  assert.equal(byIds.choices[0].text, byText.choices[0].text);
  const list = await client.completions.create({ ...greedy, prompt: ['class Stack:', 'x = 1\n'] });
  assert.equal(list.choices.length, 2);
  assert.equal(list.choices[0].text, byText.choices[0].text);
  const n2 = await client.completions.create({ model: MODEL, prompt: 'def main():\n', n: 2, temperature: 1.0, seed: 7, max_tokens: 24 });
  assert.equal(n2.choices.length, 2);
  assert.deepEqual(n2.choices.map((c) => c.index), [0, 1]);
  assert.notEqual(n2.choices[0].text, n2.choices[1].text);
  assert.equal(n2.usage.completion_tokens, 48);
  const again = await client.completions.create({ model: MODEL, prompt: 'def main():\n', n: 2, temperature: 1.0, seed: 7, max_tokens: 24 });
  assert.deepEqual(again.choices.map((c) => c.text), n2.choices.map((c) => c.text));
});

test('detokenize inverts tokenize', async () => {
  const text = 'for i in range(10):\n    print(i)';
  const tok = JSON.parse((await postJson(server.port, '/tokenize', { prompt: text, add_special_tokens: false })).body);
  const detok = JSON.parse((await postJson(server.port, '/detokenize', { tokens: tok.tokens })).body);
  assert.equal(detok.prompt, text);
});

test('stop strings end the text before the stop, also when streamed', async () => {
  const prompt = 'def fibonacci(n):\n    ';
  const base = await client.completions.create({ ...greedy, prompt, max_tokens: 32 });
  const text = base.choices[0].text;
  const stop = text.slice(8, 11);
  const cut = text.indexOf(stop);
  assert.ok(cut >= 0 && stop.length === 3);
  const stopped = await client.completions.create({ ...greedy, prompt, max_tokens: 32, stop: [stop] });
  assert.equal(stopped.choices[0].text, text.slice(0, cut));
  assert.equal(stopped.choices[0].finish_reason, 'stop');
  assert.equal(stopped.choices[0].stop_reason, stop);
  const streamed = await streamText({ ...greedy, prompt, max_tokens: 32, stop });
  assert.equal(streamed.text, text.slice(0, cut));
  assert.equal(streamed.finish, 'stop');
});

test('completion logprobs and echo', async () => {
  const r = await client.completions.create({ ...greedy, prompt: 'x = [1, 2, 3]\n', max_tokens: 5, logprobs: 3 });
  const lp = r.choices[0].logprobs;
  assert.equal(lp.tokens.length, 5);
  assert.equal(lp.token_logprobs.length, 5);
  assert.equal(lp.tokens.join(''), r.choices[0].text);
  for (let i = 0; i < 5; i++) {
    assert.ok(lp.token_logprobs[i] <= 0);
    const top = Object.values(lp.top_logprobs[i]);
    assert.ok(top.length >= 1 && top.length <= 4);
    // Greedy: the chosen token is the most likely one.
    assert.ok(Math.abs(Math.max(...top) - lp.token_logprobs[i]) < 1e-5);
  }
  assert.deepEqual(lp.text_offset, [0, ...lp.tokens.slice(0, -1).map((_, i) => lp.tokens.slice(0, i + 1).join('').length)]);
  const echo = await client.completions.create({ ...greedy, prompt: 'x = [1, 2, 3]\n', max_tokens: 5, echo: true, logprobs: 1 });
  assert.equal(echo.choices[0].text, 'x = [1, 2, 3]\n' + r.choices[0].text);
  assert.equal(echo.choices[0].logprobs.token_logprobs[0], null);
  assert.equal(echo.choices[0].logprobs.tokens.length, echo.usage.prompt_tokens + 5);
  // vLLM's prompt_logprobs: null first, then {token_id: {logprob, rank, decoded_token}} per prompt token.
  const pl = await client.completions.create({ ...greedy, prompt: 'x = [1, 2, 3]\n', max_tokens: 2, prompt_logprobs: 2 });
  const plp = pl.choices[0].prompt_logprobs;
  assert.equal(plp.length, pl.usage.prompt_tokens);
  assert.equal(plp[0], null);
  for (const pos of plp.slice(1)) {
    const entries = Object.values(pos);
    assert.ok(entries.length >= 2 && entries.length <= 3);
    for (const e of entries) assert.ok(e.logprob <= 0 && e.rank >= 1 && typeof e.decoded_token === 'string');
  }
});

test('chat: template, streaming and not, logprobs, max_completion_tokens, tools reach the template', async () => {
  const messages = [
    { role: 'system', content: 'You write Python.' },
    { role: 'user', content: [{ type: 'text', text: 'Write a function' }, { type: 'text', text: 'that adds.' }] },
  ];
  const r = await client.chat.completions.create({ model: MODEL, messages, temperature: 0, max_completion_tokens: 12, logprobs: true, top_logprobs: 2 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(r.usage.completion_tokens, 12);
  assert.equal(r.choices[0].logprobs.content.length, 12);
  assert.equal(r.choices[0].logprobs.content[0].top_logprobs.length, 2);
  assert.equal(r.choices[0].logprobs.content.map((c) => c.token).join(''), r.choices[0].message.content);
  const stream = await client.chat.completions.create({ model: MODEL, messages, temperature: 0, max_tokens: 12, stream: true, stream_options: { include_usage: true } });
  let content = '';
  let role = null;
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.role) role = c.delta.role;
      if (c.delta.content) content += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(role, 'assistant');
  assert.equal(content, r.choices[0].message.content);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 12);
  // The prompt the template rendered: system, user (parts joined), and the tools list.
  const tools = [{ type: 'function', function: { name: 'add_numbers', parameters: { type: 'object' } } }];
  const tok = JSON.parse((await postJson(server.port, '/tokenize', { messages, tools })).body);
  const rendered = JSON.parse((await postJson(server.port, '/detokenize', { tokens: tok.tokens })).body).prompt;
  assert.match(rendered, /<\|system\|>\nYou write Python\.\n<\|user\|>\nWrite a function\nthat adds\.\n<\|assistant\|>\n$/);
  assert.match(rendered, /add_numbers/);
  const withTools = await client.chat.completions.create({ model: MODEL, messages, tools, tool_choice: 'none', temperature: 0, max_tokens: 4 });
  assert.equal(withTools.usage.prompt_tokens, tok.count);
  // tool_choice auto (the default with tools) needs a tool-call parser, as in vLLM.
  const refused = await postJson(server.port, '/v1/chat/completions', { model: MODEL, messages, tools, max_tokens: 4 });
  assert.equal(refused.status, 400);
  assert.equal(JSON.parse(refused.body).error.message,
    '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set');
});

test('chat: continue_final_message continues a partly written assistant reply', async () => {
  const messages = [
    { role: 'user', content: 'Write a stack class.' },
    { role: 'assistant', content: 'class Stack:\n    def __init__(self):' },
  ];
  const body = { messages, continue_final_message: true, add_generation_prompt: false };
  const tok = JSON.parse((await postJson(server.port, '/tokenize', body)).body);
  const rendered = JSON.parse((await postJson(server.port, '/detokenize', { tokens: tok.tokens })).body).prompt;
  // The prompt ends inside the assistant turn, right after its text: no end-of-turn, no new assistant header.
  assert.ok(rendered.endsWith('<|assistant|>\nclass Stack:\n    def __init__(self):'), JSON.stringify(rendered));
  const r = await client.chat.completions.create({
    model: MODEL, messages, temperature: 0, max_tokens: 8, continue_final_message: true, add_generation_prompt: false,
  });
  assert.equal(r.usage.prompt_tokens, tok.count);
  // The continuation is what a plain completion of the same prompt gives.
  const plain = await client.completions.create({ model: MODEL, prompt: tok.tokens, temperature: 0, max_tokens: 8 });
  assert.equal(r.choices[0].message.content, plain.choices[0].text);
  // add_generation_prompt defaults to false when continuing; asking for both is a 400 naming the field.
  const implied = JSON.parse((await postJson(server.port, '/tokenize', { messages, continue_final_message: true })).body);
  assert.deepEqual(implied.tokens, tok.tokens);
  const both = await postJson(server.port, '/v1/chat/completions',
    { model: MODEL, messages, continue_final_message: true, add_generation_prompt: true });
  assert.equal(both.status, 400);
  assert.equal(JSON.parse(both.body).error.param, 'continue_final_message');
  const empty = await postJson(server.port, '/v1/chat/completions',
    { model: MODEL, messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: '  ' }],
      continue_final_message: true });
  assert.equal(empty.status, 400);
  assert.match(JSON.parse(empty.body).error.message, /continue_final_message/);
});

test('64 concurrent streams each equal the greedy output of the request alone', async () => {
  const prompts = [];
  for (let i = 0; i < 64; i++) prompts.push(`# task ${i}\ndef f_${i}(x):\n    return x * ${i}\n\n`);
  const params = { model: MODEL, temperature: 0, max_tokens: 12, ignore_eos: true };
  const alone = [];
  for (const prompt of prompts) alone.push((await client.completions.create({ ...params, prompt })).choices[0].text);
  const streamed = await Promise.all(prompts.map((prompt) => streamText({ ...params, prompt })));
  for (let i = 0; i < 64; i++) assert.equal(streamed[i].text, alone[i], `stream ${i}`);
  const m = parseMetrics((await request(server.port, 'GET', '/metrics')).body);
  assert.equal(metric(m, 'vllm:num_requests_running'), 0);
  assert.equal(metric(m, 'vllm:kv_cache_usage_perc'), 0);
  assert.ok(metric(m, 'vllm:prefix_cache_hits_total') > 0);
  // The process gauges a soak watches; the server's own RSS and descriptors as /proc reports them.
  const status = fs.readFileSync(`/proc/${server.proc.pid}/status`, 'utf8');
  const rss = Number(/VmRSS:\s+(\d+)/.exec(status)[1]) * 1024;
  assert.ok(Math.abs(metric(m, 'process_resident_memory_bytes') - rss) < 0.25 * rss, `rss ${rss}`);
  assert.ok(metric(m, 'process_virtual_memory_bytes') >= metric(m, 'process_resident_memory_bytes'));
  assert.ok(metric(m, 'process_open_fds') >= 3);
  assert.equal(metric(m, 'peregrine:device_memory_used_bytes'), undefined);  // a CPU server has no device memory
});
