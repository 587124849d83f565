// `peregrine serve file.gguf`: a llama.cpp GGUF served with the tokenizer and chat template it carries, through the
// real openai client. The fixture (../shared/models/gguf/pycoder-tiny-q8_0.gguf) has no chat template, so the test
// writes a copy with `tokenizer.chat_template` added (inserted as the first metadata entry, padded to keep the data
// section's alignment). Text is tokenized as llama.cpp tokenizes it (reference.json llamacpp_tokenize).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { startServer, postJson, ROOT } from './server_helpers.mjs';

const SHARED = process.env.PEREGRINE_SHARED_DIR || path.join(ROOT, '..', 'shared');
const SRC = path.join(SHARED, 'models', 'gguf', 'pycoder-tiny-q8_0.gguf');
const TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{{ eos_token }}\n{% endfor %}" +
  '{% if add_generation_prompt %}<|assistant|>\n{% endif %}';

// A copy of the GGUF with one more string metadata entry (key, value) placed before the others.
function withTemplate(src, dst, template) {
  const data = fs.readFileSync(src);
  assert.equal(data.toString('latin1', 0, 4), 'GGUF');
  const key = Buffer.from('tokenizer.chat_template');
  const entry = (pad) => {
    const value = Buffer.from(template + ' '.repeat(pad));
    const b = Buffer.alloc(8 + key.length + 4 + 8 + value.length);
    let o = b.writeBigUInt64LE(BigInt(key.length), 0);
    o += key.copy(b, o);
    o = b.writeUInt32LE(8, o);
    o = b.writeBigUInt64LE(BigInt(value.length), o);
    value.copy(b, o);
    return b;
  };
  let kv = entry(0);
  kv = entry((32 - (kv.length % 32)) % 32);  // trailing spaces after the last tag render as nothing that matters
  const out = Buffer.concat([data.subarray(0, 24), kv, data.subarray(24)]);
  out.writeBigUInt64LE(data.readBigUInt64LE(16) + 1n, 16);
  fs.writeFileSync(dst, out);
}

const skip = !fs.existsSync(SRC) && 'the GGUF fixtures (../shared/models/gguf) are absent';
let server;
let file;
let client;
const reference = !skip && JSON.parse(fs.readFileSync(path.join(SHARED, 'models', 'gguf', 'reference.json'), 'utf8'));

before(async () => {
  if (skip) return;
  file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'peregrine-gguf-')), 'pycoder-tiny-q8_0-chat.gguf');
  withTemplate(SRC, file, TEMPLATE);
  server = await startServer([], { model: file });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'none' });
});

after(async () => {
  if (server) await server.stop();
  if (file) fs.rmSync(path.dirname(file), { recursive: true, force: true });
});

test('the GGUF file is served under its path, with its context length', { skip }, async () => {
  const models = await client.models.list();
  assert.equal(models.data[0].id, file);
  assert.ok(server.log().includes('llama'), server.log());
});

test('text is tokenized as llama.cpp tokenizes the file', { skip }, async () => {
  for (let i = 0; i < 3; i++) {
    const tok = JSON.parse((await postJson(server.port, '/tokenize', {
      prompt: reference.cases[i].prompt, add_special_tokens: false,
    })).body);
    assert.deepEqual(tok.tokens, reference.llamacpp_tokenize.ids[i], `case ${i}`);
  }
});

test('chat completions render the file\'s chat template', { skip }, async () => {
  const messages = [{ role: 'user', content: 'def add(a, b):' }];
  const tok = JSON.parse((await postJson(server.port, '/tokenize', { messages })).body);
  const rendered = JSON.parse((await postJson(server.port, '/detokenize', { tokens: tok.tokens })).body).prompt;
  // </s> (the file's eos) is a control token: in the ids, not in the decoded text.
  assert.match(rendered, /^<\|user\|>\ndef add\(a, b\): ?\n<\|assistant\|>\n/, rendered);
  assert.ok(tok.tokens.includes(2), JSON.stringify(tok.tokens));
  const chat = await client.chat.completions.create({
    model: file, messages, max_tokens: 8, temperature: 0,
  });
  assert.equal(chat.choices[0].message.role, 'assistant');
  assert.equal(typeof chat.choices[0].message.content, 'string');
  assert.ok(chat.usage.completion_tokens > 0);
  assert.equal(chat.usage.prompt_tokens, tok.count ?? tok.tokens.length);
});

test('greedy completion from prompt ids matches llama.cpp\'s first tokens', { skip }, async () => {
  const c = reference.cases[0];
  const res = await client.completions.create({
    model: file, prompt: c.prompt_ids, max_tokens: 4, temperature: 0, logprobs: 1,
  });
  const ref = reference.files['pycoder-tiny-q8_0.gguf'].results_dequantized_f32[0].output_ids.slice(0, 4);
  const detok = async (tokens) => JSON.parse((await postJson(server.port, '/detokenize', { tokens })).body).prompt;
  const prefix = await detok(c.prompt_ids);
  const full = await detok([...c.prompt_ids, ...ref]);
  assert.equal(res.choices[0].text, full.slice(prefix.length));
});
