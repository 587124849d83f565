// End-to-end: API keys (401), a full queue (503 with Retry-After), a client killed mid-stream (request aborted,
// KV freed, server healthy), and SIGTERM (in-flight streams end with a final event and [DONE], exit code 0).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import OpenAI from 'openai';
import { startServer, postJson, request, parseMetrics, metric, sleep, MODEL } from './server_helpers.mjs';

const long = { prompt: 'def main():\n', max_tokens: 600, temperature: 0, ignore_eos: true };

// Opens a streaming completion over a raw socket; resolves once `chunks` data events arrived.
function openStream(port, body, chunks = 3) {
  return new Promise((resolve, reject) => {
    let seen = 0;
    let text = '';
    const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/v1/completions', agent: false,
      headers: { 'Content-Type': 'application/json' } }, (res) => {
      res.setEncoding('utf8');
      const done = new Promise((r) => { res.on('end', () => r(text)); res.on('error', () => r(text)); res.on('close', () => r(text)); });
      res.on('data', (d) => {
        text += d;
        if (++seen === chunks) resolve({ req, res, done, text: () => text });
      });
    });
    req.on('error', reject);
    req.end(JSON.stringify({ ...body, stream: true }));
  });
}

async function metrics(port) {
  return parseMetrics((await request(port, 'GET', '/metrics')).body);
}

test('API key: missing or wrong key gets 401, the right key works, probes stay open', async () => {
  const server = await startServer(['--api-key', 'sekrit']);
  try {
    const missing = await postJson(server.port, '/v1/completions', { prompt: 'x', max_tokens: 1 });
    assert.equal(missing.status, 401);
    assert.equal(JSON.parse(missing.body).error.code, 401);
    const wrong = await postJson(server.port, '/v1/completions', { prompt: 'x', max_tokens: 1 }, { Authorization: 'Bearer nope' });
    assert.equal(wrong.status, 401);
    assert.equal((await request(server.port, 'GET', '/v1/models')).status, 401);
    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'sekrit', maxRetries: 0 });
    const r = await client.completions.create({ model: MODEL, prompt: 'x', max_tokens: 2 });
    assert.equal(r.usage.completion_tokens, 2);
    const bad = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'nope', maxRetries: 0 });
    await assert.rejects(bad.models.list(), (e) => e.status === 401);
    assert.equal((await request(server.port, 'GET', '/health')).status, 200);
  } finally {
    assert.equal((await server.stop()).code, 0);
  }
});

test('a full queue answers 503 with Retry-After', async () => {
  const server = await startServer(['--max-num-seqs', '1', '--max-queued-requests', '1']);
  try {
    const results = await Promise.all(Array.from({ length: 6 }, () =>
      postJson(server.port, '/v1/completions', { ...long, max_tokens: 64 })));
    const refused = results.filter((r) => r.status === 503);
    assert.ok(refused.length >= 1, `statuses ${results.map((r) => r.status)}`);
    assert.ok(results.some((r) => r.status === 200));
    for (const r of refused) {
      assert.equal(r.headers['retry-after'], '1');
      assert.equal(JSON.parse(r.body).error.code, 503);
    }
    assert.equal((await request(server.port, 'GET', '/health')).status, 200);
  } finally {
    assert.equal((await server.stop()).code, 0);
  }
});

test('a client killed mid-stream aborts its request and frees its KV blocks', async () => {
  const server = await startServer([]);
  try {
    const s = await openStream(server.port, long, 3);
    let m = await metrics(server.port);
    assert.equal(metric(m, 'vllm:num_requests_running'), 1);
    assert.ok(metric(m, 'peregrine:kv_blocks_used') > 0);
    s.req.destroy();  // the client goes away
    let freed = false;
    for (let i = 0; i < 100 && !freed; i++) {
      await sleep(20);
      m = await metrics(server.port);
      freed = metric(m, 'vllm:num_requests_running') === 0 && metric(m, 'peregrine:kv_blocks_used') === 0;
    }
    assert.ok(freed, 'request still running after the client left');
    assert.equal(m['vllm:request_success_total{model_name="' + MODEL + '",finished_reason="abort"}'], 1);
    const after = await postJson(server.port, '/v1/completions', { prompt: 'x = ', max_tokens: 3 });
    assert.equal(after.status, 200);
  } finally {
    assert.equal((await server.stop()).code, 0);
  }
});

test('SIGTERM ends in-flight streams with a final event and [DONE], then exits 0', async () => {
  const server = await startServer([]);
  const streams = await Promise.all([openStream(server.port, long, 2), openStream(server.port, long, 2)]);
  server.proc.kill('SIGTERM');
  const texts = await Promise.all(streams.map((s) => s.done));
  for (const text of texts) {
    const events = text.split('\n\n').filter((e) => e.startsWith('data: '));
    assert.equal(events.at(-1), 'data: [DONE]');
    const last = JSON.parse(events.at(-2).slice(6));
    assert.equal(last.choices[0].finish_reason, 'abort');
  }
  const { code } = await server.exited;
  assert.equal(code, 0, server.log());
  assert.match(server.log(), /SIGTERM: no longer accepting/);
});
