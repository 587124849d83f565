// End-to-end: structured outputs and the API surface real clients use, on pycoder-tiny, checked by an independent
// validator (ajv): every one of the fixture schemas (tests/e2e/fixtures/structured_schemas.json, real-world
// style) yields valid JSON; regex, choice and grammar constraints; tool_choice required / named (streamed
// arguments concatenate to the final JSON); the Vercel AI SDK (generateObject, streamObject, toolChoice required,
// the default OpenAI provider on /v1/responses), LangChain (withStructuredOutput: jsonSchema, functionCalling,
// jsonMode; useResponsesApi) and the openai SDK (responses.create / responses.stream, previous_response_id).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { generateObject, streamObject, generateText, jsonSchema, tool } from 'ai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { createOpenAI } from '@ai-sdk/openai';
import { ChatOpenAI } from '@langchain/openai';
import { startServer, postJson, request, ROOT, CHAT_TEMPLATE } from './server_helpers.mjs';

let server;
let client;
const MODEL = 'pycoder-tiny';
const schemas = JSON.parse(fs.readFileSync(path.join(ROOT, 'tests', 'e2e', 'fixtures', 'structured_schemas.json'), 'utf8'));
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);

before(async () => {
  server = await startServer(['--served-model-name', MODEL, '--chat-template', CHAT_TEMPLATE]);
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
});

after(async () => {
  const { code } = await server.stop();
  assert.equal(code, 0, `server exit code; log:\n${server.log()}`);
});

async function pool(items, width, fn) {
  const out = new Array(items.length);
  let next = 0;
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i], i);
    }
  }));
  return out;
}

test(`every fixture schema (${schemas.length}) gives output the independent validator accepts`, async () => {
  assert.ok(schemas.length >= 100);
  const failures = [];
  await pool(schemas, 8, async ({ name, schema }, i) => {
    const validate = ajv.compile(schema);
    const r = await client.chat.completions.create({
      model: MODEL, messages: [{ role: 'user', content: `Give me a ${name.replace(/_/g, ' ')} as JSON.` }],
      response_format: { type: 'json_schema', json_schema: { name, schema, strict: true } },
      max_tokens: 400, temperature: i % 2 ? 0.8 : 0, seed: i,
    });
    const text = r.choices[0].message.content;
    let value;
    try {
      value = JSON.parse(text);
    } catch {
      failures.push(`${name}: not JSON (${r.choices[0].finish_reason}): ${text.slice(0, 200)}`);
      return;
    }
    if (!validate(value)) failures.push(`${name}: ${ajv.errorsText(validate.errors)}: ${text.slice(0, 200)}`);
    if (r.choices[0].finish_reason !== 'stop') failures.push(`${name}: finish_reason ${r.choices[0].finish_reason}`);
  });
  assert.deepEqual(failures, []);
});

test('regex, choice, grammar and json_object constraints (vLLM fields and the older guided_* ones)', async () => {
  const ask = async (extra) => {
    const r = await postJson(server.port, '/v1/chat/completions', {
      model: MODEL, messages: [{ role: 'user', content: 'Answer.' }], max_tokens: 60, temperature: 0.7, seed: 3, ...extra });
    assert.equal(r.status, 200, r.body);
    return JSON.parse(r.body).choices[0];
  };
  for (let seed = 0; seed < 4; ++seed) {
    const c = await ask({ structured_outputs: { regex: '[A-Z][a-z]{2,6}-[0-9]{3}' }, seed });
    assert.match(c.message.content, /^[A-Z][a-z]{2,6}-[0-9]{3}$/);
  }
  const choice = await ask({ guided_choice: ['positive', 'negative', 'neutral'] });
  assert.ok(['positive', 'negative', 'neutral'].includes(choice.message.content));
  const gbnf = await ask({ structured_outputs: { grammar: 'root ::= "SELECT " col (", " col)* " FROM t"\ncol ::= "a" | "b" | "c"' } });
  assert.match(gbnf.message.content, /^SELECT [abc](, [abc])* FROM t$/);
  const lark = await ask({ guided_grammar: '?start: "x=" INT ("," INT)~0..2 ";"\nINT: /[0-9]{1,3}/' });
  assert.match(lark.message.content, /^x=[0-9]{1,3}(,[0-9]{1,3}){0,2};$/);
  // json_object: any object (unbounded, so a tiny model may run to max_tokens; those that stop must parse).
  let stopped = 0;
  for (let seed = 0; seed < 4; ++seed) {
    const obj = await ask({ response_format: { type: 'json_object' }, max_tokens: 120, seed });
    if (obj.finish_reason !== 'stop') continue;
    ++stopped;
    const v = JSON.parse(obj.message.content);
    assert.ok(typeof v === 'object' && !Array.isArray(v) && v !== null);
  }
  assert.ok(stopped > 0);
  // Completions take the same fields; n > 1 constrains every completion.
  const r = await postJson(server.port, '/v1/completions', { model: MODEL, prompt: 'def f(', max_tokens: 20, n: 3,
    temperature: 1, seed: 5, guided_regex: '(yes|no)!' });
  for (const c of JSON.parse(r.body).choices) assert.match(c.text, /^(yes|no)!$/);
});

const weatherTools = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 20 }, unit: { type: 'string', enum: ['c', 'f'] } },
      required: ['city', 'unit'] } } },
  { type: 'function', function: { name: 'add', parameters: { type: 'object',
    properties: { a: { type: 'integer', minimum: 0, maximum: 99 }, b: { type: 'integer', minimum: 0, maximum: 99 } }, required: ['a', 'b'] } } },
];
const toolSchemas = Object.fromEntries(weatherTools.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));

test('tool_choice required and named: valid calls, streamed arguments concatenate to the same JSON', async () => {
  const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
  for (const tool_choice of ['required', { type: 'function', function: { name: 'get_weather' } }]) {
    const r = await client.chat.completions.create({ model: MODEL, messages, tools: weatherTools, tool_choice, temperature: 0, max_tokens: 120 });
    const m = r.choices[0].message;
    assert.equal(m.content, null);
    assert.ok(m.tool_calls.length >= 1);
    for (const call of m.tool_calls) {
      assert.ok(toolSchemas[call.function.name](JSON.parse(call.function.arguments)), call.function.arguments);
    }
    if (typeof tool_choice === 'object') assert.equal(m.tool_calls[0].function.name, 'get_weather');
    assert.equal(r.choices[0].finish_reason, tool_choice === 'required' ? 'tool_calls' : 'stop');
    const stream = await client.chat.completions.create({ model: MODEL, messages, tools: weatherTools, tool_choice, temperature: 0,
      max_tokens: 120, stream: true, stream_options: { include_usage: true, continuous_usage_stats: true } });
    const args = [];
    const names = [];
    let content = null;
    let finish = null;
    let usageChunks = 0;
    for await (const chunk of stream) {
      if (chunk.usage) ++usageChunks;
      const d = chunk.choices[0]?.delta;
      if (!d) continue;
      if (d.content) content = (content ?? '') + d.content;
      for (const tc of d.tool_calls ?? []) {
        if (tc.function?.name) names[tc.index] = tc.function.name;
        args[tc.index] = (args[tc.index] ?? '') + (tc.function?.arguments ?? '');
      }
      if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
    }
    assert.equal(content, null);
    assert.deepEqual(names, m.tool_calls.map((c) => c.function.name));
    assert.deepEqual(args.map((a) => JSON.parse(a)), m.tool_calls.map((c) => JSON.parse(c.function.arguments)));
    assert.equal(finish, r.choices[0].finish_reason);
    assert.ok(usageChunks > 2, 'continuous usage: usage in every chunk');
  }
});

test('GET /v1/models/{id}', async () => {
  const m = await client.models.retrieve(MODEL);
  assert.equal(m.id, MODEL);
  const missing = await request(server.port, 'GET', '/v1/models/nope');
  assert.equal(missing.status, 404);
});

test('Vercel AI SDK: generateObject, streamObject and toolChoice required through the OpenAI-compatible provider', async () => {
  const provider = createOpenAICompatible({ name: 'peregrine', baseURL: `${server.url}/v1`, apiKey: 'unused',
    supportsStructuredOutputs: true });
  const schema = { type: 'object', properties: { name: { type: 'string', maxLength: 20 }, age: { type: 'integer', minimum: 0, maximum: 120 } },
    required: ['name', 'age'], additionalProperties: false };
  const validate = ajv.compile(schema);
  const { object } = await generateObject({ model: provider(MODEL), schema: jsonSchema(schema), prompt: 'A person.', temperature: 0, maxRetries: 0 });
  assert.ok(validate(object), JSON.stringify(object));
  const s = streamObject({ model: provider(MODEL), schema: jsonSchema(schema), prompt: 'A person.', temperature: 0, maxRetries: 0 });
  let last;
  for await (const partial of s.partialObjectStream) last = partial;
  const streamed = await s.object;
  assert.ok(validate(streamed));
  assert.deepEqual(last, streamed);
  const t = await generateText({
    model: provider(MODEL), prompt: 'Add 2 and 3.', temperature: 0, maxRetries: 0, toolChoice: 'required',
    tools: { add: tool({ description: 'add', inputSchema: jsonSchema(weatherTools[1].function.parameters) }) },
  });
  assert.ok(t.toolCalls.length >= 1);
  assert.equal(t.toolCalls[0].toolName, 'add');
  assert.ok(toolSchemas.add(t.toolCalls[0].input));
});

test('Vercel AI SDK default OpenAI provider (the Responses API): text and a json_schema object', async () => {
  const openai = createOpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused' });
  const t = await generateText({ model: openai(MODEL), prompt: 'def add(a, b):', maxOutputTokens: 8, temperature: 0, maxRetries: 0 });
  assert.equal(typeof t.text, 'string');
  assert.ok(t.usage.outputTokens > 0);
  const schema = { type: 'object', properties: { ok: { type: 'boolean' }, n: { type: 'integer', minimum: 0, maximum: 9 } }, required: ['ok', 'n'],
    additionalProperties: false };
  const { object } = await generateObject({ model: openai(MODEL), schema: jsonSchema(schema), prompt: 'Reply.', temperature: 0, maxRetries: 0 });
  assert.ok(ajv.compile(schema)(object));
});

test('LangChain withStructuredOutput: jsonSchema, functionCalling, jsonMode; useResponsesApi', async () => {
  const llm = new ChatOpenAI({ model: MODEL, temperature: 0, maxRetries: 0, apiKey: 'unused', configuration: { baseURL: `${server.url}/v1` } });
  const schema = { title: 'Person', type: 'object', properties: { name: { type: 'string', maxLength: 20 }, age: { type: 'integer', minimum: 0, maximum: 99 } },
    required: ['name', 'age'], additionalProperties: false };
  const validate = ajv.compile(schema);
  for (const method of ['jsonSchema', 'functionCalling']) {
    const out = await llm.withStructuredOutput(schema, { method }).invoke('Describe a person.');
    assert.ok(validate(out), `${method}: ${JSON.stringify(out)}`);
  }
  const json = await llm.withStructuredOutput(schema, { method: 'jsonMode' }).invoke('Describe a person as JSON.');
  assert.equal(typeof json, 'object');
  const responses = new ChatOpenAI({ model: MODEL, temperature: 0, maxRetries: 0, apiKey: 'unused', useResponsesApi: true, maxTokens: 8,
    configuration: { baseURL: `${server.url}/v1` } });
  const msg = await responses.invoke('def f():');
  assert.equal(typeof msg.content === 'string' ? msg.content : msg.content.map((c) => c.text).join(''), msg.text);
});

test('openai SDK responses.create / responses.stream, instructions, text.format, tools, previous_response_id', async () => {
  const r = await client.responses.create({ model: MODEL, instructions: 'Write Python.', input: 'def add(a, b):', max_output_tokens: 6, temperature: 0 });
  assert.equal(r.object, 'response');
  assert.equal(r.status, 'incomplete');
  assert.equal(r.incomplete_details.reason, 'max_output_tokens');
  assert.equal(r.usage.output_tokens, 6);
  assert.equal(typeof r.output_text, 'string');
  // Streamed: the events in order, the deltas add up to the final text.
  const stream = client.responses.stream({ model: MODEL, input: 'def add(a, b):', max_output_tokens: 6, temperature: 0 });
  const types = [];
  let deltas = '';
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === 'response.output_text.delta') deltas += ev.delta;
  }
  const final = await stream.finalResponse();
  assert.equal(types[0], 'response.created');
  assert.ok(types.includes('response.output_item.added') && types.includes('response.output_text.done'));
  assert.equal(types.at(-1), 'response.incomplete');
  assert.equal(deltas, final.output_text);
  assert.equal(final.output_text, r.output_text);
  // text.format json_schema.
  const schema = { type: 'object', properties: { color: { type: 'string', enum: ['red', 'blue'] } }, required: ['color'], additionalProperties: false };
  const j = await client.responses.create({ model: MODEL, input: 'A color.', text: { format: { type: 'json_schema', name: 'c', schema, strict: true } } });
  assert.ok(ajv.compile(schema)(JSON.parse(j.output_text)));
  // Tools: a forced call, then its output sent back with previous_response_id.
  const fn = { type: 'function', name: 'get_weather', parameters: weatherTools[0].function.parameters };
  const call = await client.responses.create({ model: MODEL, input: 'Weather in Oslo?', tools: [fn], tool_choice: 'required', temperature: 0 });
  const item = call.output.find((o) => o.type === 'function_call');
  assert.equal(item.name, 'get_weather');
  assert.ok(toolSchemas.get_weather(JSON.parse(item.arguments)));
  // Streamed forced calls (required and named): arguments arrive as several deltas whose concatenation is the final
  // call's arguments, which the schema accepts; the item ids of the events are those of the final output.
  for (const tool_choice of ['required', { type: 'function', name: 'get_weather' }]) {
    const callStream = client.responses.stream({ model: MODEL, input: 'Weather in Oslo?', tools: [fn], tool_choice, temperature: 0 });
    const argDeltas = new Map();
    const added = [];
    for await (const ev of callStream) {
      if (ev.type === 'response.output_item.added') added.push(ev.item);
      if (ev.type === 'response.function_call_arguments.delta') {
        if (!argDeltas.has(ev.item_id)) argDeltas.set(ev.item_id, []);
        argDeltas.get(ev.item_id).push(ev.delta);
      }
    }
    const done = await callStream.finalResponse();
    const calls = done.output.filter((o) => o.type === 'function_call');
    assert.ok(calls.length >= 1, JSON.stringify(done.output));
    for (const c of calls) {
      assert.equal(c.name, 'get_weather');
      assert.ok(toolSchemas.get_weather(JSON.parse(c.arguments)), c.arguments);
      const parts = argDeltas.get(c.id) ?? [];
      assert.ok(parts.length > 1, `arguments in ${parts.length} delta(s)`);
      assert.equal(parts.join(''), c.arguments);
      assert.ok(added.some((a) => a.id === c.id && a.call_id === c.call_id && a.status === 'in_progress'));
    }
  }
  const followUp = await client.responses.create({ model: MODEL, previous_response_id: call.id, max_output_tokens: 4,
    input: [{ type: 'function_call_output', call_id: item.call_id, output: '{"temp": 3}' }] });
  assert.equal(followUp.previous_response_id, call.id);
  const alone = await client.responses.create({ model: MODEL, max_output_tokens: 4,
    input: [{ type: 'function_call_output', call_id: item.call_id, output: '{"temp": 3}' }] });
  assert.ok(followUp.usage.input_tokens > alone.usage.input_tokens, 'the previous turn is part of the prompt');
  // store: false responses cannot be continued.
  const unstored = await client.responses.create({ model: MODEL, input: 'x', max_output_tokens: 2, store: false });
  const refused = await postJson(server.port, '/v1/responses', { model: MODEL, input: 'y', previous_response_id: unstored.id });
  assert.equal(refused.status, 404);
  const got = await request(server.port, 'GET', `/v1/responses/${call.id}`);
  assert.equal(JSON.parse(got.body).id, call.id);
});

test('speculative decoding: drafts are checked against the constraint, greedy output identical to plain decoding', async () => {
  const spec = await startServer(['--served-model-name', MODEL, '--chat-template', CHAT_TEMPLATE, '--speculative-config',
    '{"method": "lookahead", "num_speculative_tokens": 6, "prompt_lookup_max": 4}']);
  try {
    const specClient = new OpenAI({ baseURL: `${spec.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
    const picked = schemas.filter((s) => ['order', 'todo_list', 'survey', 'menu', 'polygon', 'grade_report', 'tags', 'matrix'].includes(s.name));
    for (const { name, schema } of picked) {
      const body = { model: MODEL, messages: [{ role: 'user', content: `A ${name} as JSON, twice the same.` }],
        response_format: { type: 'json_schema', json_schema: { name, schema } }, max_tokens: 300, temperature: 0 };
      const a = await client.chat.completions.create(body);
      for (let round = 0; round < 2; ++round) {  // the second round drafts from the first one's text
        const b = await specClient.chat.completions.create(body);
        assert.equal(b.choices[0].message.content, a.choices[0].message.content, name);
        assert.ok(ajv.compile(schema)(JSON.parse(b.choices[0].message.content)), name);
      }
    }
    const metrics = (await request(spec.port, 'GET', '/metrics')).body;
    const drafted = Number(/^vllm:spec_decode_num_draft_tokens_total(?:\{[^}]*\})? (\S+)$/m.exec(metrics)?.[1] ?? 0);
    assert.ok(drafted > 0, 'drafts were proposed and verified');
  } finally {
    await spec.stop();
  }
});
