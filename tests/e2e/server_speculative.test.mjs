// End-to-end: `peregrine serve --speculative-config` (vLLM's flag) gives, through the official openai client, the
// same greedy completions as a server without speculation (streamed and not), and /metrics reports vLLM's
// spec_decode counters. A bad config is refused at startup naming the key.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import OpenAI from 'openai';
import { startServer, BIN, MODEL } from './server_helpers.mjs';

let plain;
let spec;
const prompts = [
  'def fibonacci(n):\n    ',
  'class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n        self.items.append(item)\n\n    def pop(self):\n        ',
  '# a table of squares\nsquares = {\n    1: 1,\n    2: 4,\n    3: 9,\n',
];

before(async () => {
  plain = await startServer(['--served-model-name', 'pycoder-tiny']);
  spec = await startServer(['--served-model-name', 'pycoder-tiny', '--speculative-config',
    '{"method": "lookahead", "num_speculative_tokens": 6, "prompt_lookup_max": 4}']);
});

after(async () => {
  for (const s of [plain, spec]) {
    const { code } = await s.stop();
    assert.equal(code, 0, `server exit code; log:\n${s.log()}`);
  }
});

const client = (s) => new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });

test('greedy completions equal those of a server without speculation, streamed and not', async () => {
  for (const prompt of prompts) {
    const req = { model: 'pycoder-tiny', prompt, max_tokens: 64, temperature: 0, logprobs: 1 };
    const a = await client(plain).completions.create(req);
    const b = await client(spec).completions.create(req);
    assert.equal(b.choices[0].text, a.choices[0].text);
    assert.deepEqual(b.choices[0].logprobs.token_logprobs, a.choices[0].logprobs.token_logprobs);
    let streamed = '';
    for await (const chunk of await client(spec).completions.create({ ...req, stream: true })) {
      streamed += chunk.choices[0]?.text ?? '';
    }
    assert.equal(streamed, a.choices[0].text);
  }
});

test('/metrics reports the spec_decode counters', async () => {
  const text = await (await fetch(`${spec.url}/metrics`)).text();
  const value = (name) => Number((text.match(new RegExp(`^${name}\\{[^}]*\\} (\\S+)$`, 'm')) || [])[1]);
  assert.ok(value('vllm:spec_decode_num_drafts_total') > 0, text);
  assert.ok(value('vllm:spec_decode_num_draft_tokens_total') >= value('vllm:spec_decode_num_accepted_tokens_total'));
  assert.ok(value('vllm:spec_decode_num_accepted_tokens_total') > 0);
  assert.match(text, /vllm:spec_decode_num_accepted_tokens_per_pos_total\{[^}]*position="0"\} \d+/);
});

test('a bad speculative config is refused at startup, naming the key', () => {
  const r = spawnSync(BIN, ['serve', MODEL, '--speculative-config', '{"method": "ngram", "num_speculative_tokens": 4, "foo": 1}'],
    { encoding: 'utf8' });
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /speculative_config\.foo: unknown key/);
  const m = spawnSync(BIN, ['serve', MODEL, '--speculative-config', '{"method": "medusa", "num_speculative_tokens": 4}'],
    { encoding: 'utf8' });
  assert.match(m.stderr, /speculative_config\.method: unknown method 'medusa'/);
});
