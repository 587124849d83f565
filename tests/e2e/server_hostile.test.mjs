// End-to-end: a table of malformed and hostile requests against `peregrine serve`. Each must get the right HTTP
// status and an OpenAI-shaped error body ({"error": {message, type, param, code}}); the server stays healthy.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { startServer, postJson, request, CHAT_TEMPLATE } from './server_helpers.mjs';

let server;
const MODEL = 'pycoder-tiny';

before(async () => {
  server = await startServer(['--served-model-name', MODEL, '--chat-template', CHAT_TEMPLATE,
    '--max-request-body-bytes', '65536']);
});

after(async () => {
  const { code } = await server.stop();
  assert.equal(code, 0, server.log());
});

const C = '/v1/completions';
const CHAT = '/v1/chat/completions';
const ok = { model: MODEL, prompt: 'x = 1', max_tokens: 2 };
const chat = { model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 };

// [name, path, body (object or raw string), status, param (or undefined to skip), message pattern]
const cases = [
  ['invalid JSON', C, '{"prompt": ', 400, null, /not valid JSON/],
  ['JSON array body', C, '[1, 2]', 400, null, /JSON object/],
  ['empty body', C, '', 400, null, /empty/],
  ['JSON number body', C, '42', 400, null, /JSON object/],
  ['missing prompt', C, { model: MODEL }, 400, 'prompt', /prompt/],
  ['prompt is a number', C, { ...ok, prompt: 42 }, 400, 'prompt', /prompt/],
  ['prompt is an empty list', C, { ...ok, prompt: [] }, 400, 'prompt', /prompt/],
  ['prompt list of empty lists', C, { ...ok, prompt: [[]] }, 400, 'prompt[0]', /prompt\[0\]/],
  ['prompt mixes strings and ids', C, { ...ok, prompt: ['a', 5] }, 400, 'prompt[1]', /prompt\[1\]/],
  ['token id beyond the vocabulary', C, { ...ok, prompt: [1, 99999999] }, 400, 'prompt', /vocabulary/],
  ['negative token id', C, { ...ok, prompt: [1, -3] }, 400, 'prompt', /vocabulary/],
  ['max_tokens is a string', C, { ...ok, max_tokens: 'ten' }, 400, 'max_tokens', /max_tokens: expected an integer/],
  ['max_tokens is zero', C, { ...ok, max_tokens: 0 }, 400, 'max_tokens', /max_tokens/],
  ['max_tokens negative', C, { ...ok, max_tokens: -5 }, 400, 'max_tokens', /max_tokens/],
  ['max_tokens beyond the context', C, { ...ok, max_tokens: 5000 }, 400, null, /maximum context length is 1024/],
  ['prompt longer than max-model-len', C, { ...ok, prompt: Array(1100).fill(100) }, 400, null, /maximum context length/],
  ['temperature is a string', C, { ...ok, temperature: 'hot' }, 400, 'temperature', /temperature/],
  ['temperature negative', C, { ...ok, temperature: -1 }, 400, 'temperature', /temperature/],
  ['temperature too high', C, { ...ok, temperature: 3 }, 400, 'temperature', /temperature/],
  ['top_p zero', C, { ...ok, top_p: 0 }, 400, 'top_p', /top_p/],
  ['top_p above one', C, { ...ok, top_p: 1.5 }, 400, 'top_p', /top_p/],
  ['n zero', C, { ...ok, n: 0 }, 400, 'n', /\bn\b/],
  ['n huge', C, { ...ok, n: 100000 }, 400, 'n', /\bn\b/],
  ['stop is a number', C, { ...ok, stop: 5 }, 400, 'stop', /stop/],
  ['stop has an empty string', C, { ...ok, stop: [''] }, 400, 'stop', /stop/],
  ['logprobs too many', C, { ...ok, logprobs: 100 }, 400, 'logprobs', /logprobs/],
  ['logit_bias with a non-id key', C, { ...ok, logit_bias: { abc: 1 } }, 400, 'logit_bias', /logit_bias/],
  ['logit_bias with a string value', C, { ...ok, logit_bias: { 5: 'x' } }, 400, 'logit_bias', /logit_bias/],
  ['logit_bias id beyond the vocabulary', C, { ...ok, logit_bias: { 999999: 1 } }, 400, null, /logit_bias/],
  ['stream is a string', C, { ...ok, stream: 'yes' }, 400, 'stream', /stream/],
  ['stream_options without stream', C, { ...ok, stream_options: { include_usage: true } }, 400, 'stream_options', /stream_options/],
  ['seed is a string', C, { ...ok, seed: 'abc' }, 400, 'seed', /seed/],
  ['suffix unsupported', C, { ...ok, suffix: 'x' }, 400, 'suffix', /suffix/],
  ['unknown model', C, { ...ok, model: 'gpt-9' }, 404, 'model', /The model `gpt-9` does not exist/],
  ['deeply nested JSON', C, '{"prompt":' + '['.repeat(5000) + ']'.repeat(5000) + '}', 400, null, /deeper/],
  ['invalid UTF-8 in the body', C, Buffer.concat([Buffer.from('{"prompt":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]), 400, null, /JSON/],
  ['chat without messages', CHAT, { model: MODEL }, 400, 'messages', /messages/],
  ['chat with empty messages', CHAT, { ...chat, messages: [] }, 400, 'messages', /messages/],
  ['chat messages is a string', CHAT, { ...chat, messages: 'hi' }, 400, 'messages', /messages/],
  ['chat message without role', CHAT, { ...chat, messages: [{ content: 'hi' }] }, 400, 'messages[0].role', /role/],
  ['chat message content is a number', CHAT, { ...chat, messages: [{ role: 'user', content: 7 }] }, 400, 'messages[0].content', /content/],
  ['chat image content part', CHAT, { ...chat, messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }, 400, 'messages[0].content[0].type', /image_url/],
  ['chat top_logprobs without logprobs', CHAT, { ...chat, top_logprobs: 2 }, 400, 'top_logprobs', /top_logprobs/],
  ['chat max_completion_tokens negative', CHAT, { ...chat, max_completion_tokens: -1 }, 400, 'max_completion_tokens', /max_completion_tokens/],
  ['chat tools not a list', CHAT, { ...chat, tools: 'calc' }, 400, 'tools', /tools/],
  ['chat tool without function', CHAT, { ...chat, tools: [{ type: 'function' }] }, 400, 'tools[0].function', /function/],
  ['chat tool function without name', CHAT, { ...chat, tools: [{ type: 'function', function: { parameters: {} } }] }, 400,
    'tools[0].function.name', /name/],
  ['chat tool name not a string', CHAT, { ...chat, tools: [{ type: 'function', function: { name: 5 } }] }, 400,
    'tools[0].function.name', /name/],
  ['chat tool parameters not an object', CHAT, { ...chat, tools: [{ type: 'function', function: { name: 'a', parameters: 'x' } }] },
    400, 'tools[0].function.parameters', /parameters/],
  ['chat tool of another type', CHAT, { ...chat, tools: [{ type: 'code_interpreter', function: { name: 'a' } }] }, 400,
    'tools[0].type', /function/],
  ['chat tool entry not an object', CHAT, { ...chat, tools: [7] }, 400, 'tools[0]', /tools\[0\]/],
  ['chat assistant tool_calls malformed', CHAT, { ...chat, messages: [{ role: 'user', content: 'hi' },
    { role: 'assistant', tool_calls: [{ function: { name: 'a', arguments: 5 } }] }] }, 400,
    'messages[1].tool_calls[0].function.arguments', /arguments/],
  ['stop string over 4 KiB', C, { ...ok, stop: ['s'.repeat(5000)] }, 400, 'stop', /stop/],
  ['chat unknown response_format', CHAT, { ...chat, response_format: { type: 'xml' } }, 400, 'response_format.type', /response_format/],
  ['guided_regex that does not compile', CHAT, { ...chat, guided_regex: '(ab' }, 400, 'guided_regex', /regex/],
  ['guided_grammar with left recursion', CHAT, { ...chat, guided_grammar: 'root ::= root "a" | "b"' }, 400, 'guided_grammar', /left recursion/],
  ['json_schema with an unsupported keyword', CHAT, { ...chat, response_format: { type: 'json_schema', json_schema: { name: 'x',
    schema: { type: 'array', uniqueItems: true } } } }, 400, 'response_format.json_schema.schema', /uniqueItems/],
  ['json_schema with a bad reference', C, { ...ok, structured_outputs: { json: { $ref: '#/$defs/missing' } } }, 400,
    'structured_outputs.json', /does not resolve/],
  ['two constraints at once', CHAT, { ...chat, guided_choice: ['a'], structured_outputs: { regex: 'a' } }, 400, 'guided_choice', /only one/],
  ['unknown structured_outputs field', CHAT, { ...chat, structured_outputs: { jsonn: {} } }, 400, 'structured_outputs.jsonn', /unknown/],
  ['structured_outputs whitespace_pattern', CHAT, { ...chat, structured_outputs: { json: {}, whitespace_pattern: ' ' } }, 400,
    'structured_outputs.whitespace_pattern', /not supported/],
  ['empty guided_choice', CHAT, { ...chat, guided_choice: [] }, 400, 'guided_choice', /choice/],
  ['tool_choice required without tools', CHAT, { ...chat, tool_choice: 'required' }, 400, 'tool_choice', /tools/],
  ['tool_choice names an unknown function', CHAT, { ...chat, tools: [{ type: 'function', function: { name: 'a' } }],
    tool_choice: { type: 'function', function: { name: 'b' } } }, 400, 'tool_choice.function.name', /not one of the tools/],
  ['tool_choice of an unknown kind', CHAT, { ...chat, tool_choice: 'always' }, 400, 'tool_choice', /tool_choice/],
  ['responses without input', '/v1/responses', { model: MODEL }, 400, 'input', /input/],
  ['responses with an unknown previous_response_id', '/v1/responses', { model: MODEL, input: 'hi', previous_response_id: 'resp_nope' },
    404, 'previous_response_id', /not found/],
  ['responses with a bad text.format', '/v1/responses', { model: MODEL, input: 'hi', text: { format: { type: 'json_schema',
    name: 'x', schema: { not: {} } } } }, 400, 'text.format.schema', /not/],
  ['tokenize without prompt', '/tokenize', { model: MODEL }, 400, 'prompt', /prompt/],
  ['detokenize with strings', '/detokenize', { tokens: ['a'] }, 400, 'tokens', /tokens/],
  ['detokenize beyond the vocabulary', '/detokenize', { tokens: [99999999] }, 400, 'tokens', /vocabulary/],
  ['body over the size limit', C, JSON.stringify({ ...ok, prompt: 'x'.repeat(100000) }), 413, null, /exceeds the limit/],
];

function checkError(res, status, param, pattern, name) {
  assert.equal(res.status, status, `${name}: status (body ${res.body})`);
  const body = JSON.parse(res.body);
  assert.equal(typeof body.error, 'object', `${name}: error object`);
  assert.equal(typeof body.error.message, 'string');
  assert.equal(typeof body.error.type, 'string');
  assert.equal(body.error.code, status);
  assert.ok('param' in body.error);
  if (param !== undefined && param !== null) assert.equal(body.error.param, param, `${name}: param`);
  assert.match(body.error.message, pattern, `${name}: message`);
}

test(`${cases.length} malformed requests get the right status and an OpenAI error body`, async () => {
  assert.ok(cases.length >= 30);
  for (const [name, path, body, status, param, pattern] of cases) {
    const raw = typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body);
    const res = await request(server.port, 'POST', path, { body: raw, headers: { 'Content-Type': 'application/json' } });
    checkError(res, status, param, pattern, name);
  }
});

test('wrong methods, unknown routes and broken HTTP', async () => {
  checkError(await request(server.port, 'GET', C), 405, null, /not allowed/, 'GET completions');
  checkError(await request(server.port, 'POST', '/v1/nope', { body: '{}' }), 404, null, /no route/, 'unknown route');
  checkError(await request(server.port, 'GET', '/v1/models', { headers: { 'X-Big': 'a'.repeat(70000) } }), 431, null,
    /headers exceed/, 'huge header');
  // Garbage instead of HTTP, and a connection that sends half a request and leaves.
  const garbage = await new Promise((resolve) => {
    const sock = net.connect(server.port, '127.0.0.1', () => sock.write('GARBAGE\r\n\r\n'));
    let data = '';
    sock.on('data', (d) => { data += d; });
    sock.on('close', () => resolve(data));
    sock.on('error', () => resolve(data));
  });
  assert.match(garbage, /^HTTP\/1\.1 400/);
  await new Promise((resolve) => {
    const sock = net.connect(server.port, '127.0.0.1', () => {
      sock.write('POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"pro');
      setTimeout(() => { sock.destroy(); resolve(); }, 50);
    });
  });
});

test('error messages quote user input only truncated', async () => {
  const res = await postJson(server.port, C, { ...ok, model: 'm'.repeat(20000) });
  assert.equal(res.status, 404);
  const message = JSON.parse(res.body).error.message;
  assert.match(message, /does not exist/);
  assert.ok(message.length < 200, `message of ${message.length} characters`);
  const route = await request(server.port, 'GET', '/' + 'p'.repeat(5000));
  assert.equal(route.status, 404);
  assert.ok(JSON.parse(route.body).error.message.length < 200);
});

// A browser may POST text/plain or a form across origins without a preflight: JSON endpoints accept only JSON.
test('JSON endpoints refuse other content types (415)', async () => {
  const body = JSON.stringify({ ...ok, max_tokens: 1 });
  for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', undefined]) {
    const headers = type ? { 'Content-Type': type } : {};
    for (const path of [C, CHAT, '/tokenize', '/detokenize']) {
      const res = await request(server.port, 'POST', path, { body, headers });
      assert.equal(res.status, 415, `${path} with ${type}: ${res.body}`);
      assert.equal(JSON.parse(res.body).error.code, 415);
    }
  }
  for (const type of ['application/json; charset=utf-8', 'Application/JSON']) {
    const res = await request(server.port, 'POST', C, { body, headers: { 'Content-Type': type } });
    assert.equal(res.status, 200, type);
  }
});

test('CORS is off by default: preflights are refused and no response allows an origin', async () => {
  const preflight = await request(server.port, 'OPTIONS', C, { headers: { Origin: 'http://evil.example',
    'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'content-type' } });
  assert.equal(preflight.status, 403);
  assert.equal(preflight.headers['access-control-allow-origin'], undefined);
  const get = await request(server.port, 'GET', '/v1/models', { headers: { Origin: 'http://evil.example' } });
  assert.equal(get.status, 200);
  assert.equal(get.headers['access-control-allow-origin'], undefined);
  assert.equal(get.headers['x-content-type-options'], 'nosniff');
});

test('the server is healthy afterwards and still generates', async () => {
  assert.equal((await request(server.port, 'GET', '/health')).status, 200);
  const res = await postJson(server.port, C, { ...ok, max_tokens: 4, temperature: 0 });
  assert.equal(res.status, 200);
  assert.equal(JSON.parse(res.body).usage.completion_tokens, 4);
});
