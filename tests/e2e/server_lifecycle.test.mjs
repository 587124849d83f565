// End-to-end: API keys (401), a full queue (503 with Retry-After), a client killed mid-stream (request aborted,
// KV freed, server healthy), and SIGTERM (in-flight streams end with a final event and [DONE], exit code 0).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
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

test('API key from VLLM_API_KEY or PEREGRINE_API_KEY: the Bearer scheme in any case, the Authorization header only', async () => {
  for (const env of [{ VLLM_API_KEY: 'env-key' }, { PEREGRINE_API_KEY: 'env-key' }]) {
    const server = await startServer([], { env });
    try {
      const body = { prompt: 'x', max_tokens: 1 };
      assert.equal((await postJson(server.port, '/v1/completions', body)).status, 401);
      for (const scheme of ['Bearer', 'bearer', 'BEARER']) {
        const r = await postJson(server.port, '/v1/completions', body, { Authorization: `${scheme} env-key` });
        assert.equal(r.status, 200, scheme);
      }
      assert.equal((await postJson(server.port, '/v1/completions', body, { Authorization: 'Bearer env-ke' })).status, 401);
      assert.equal((await postJson(server.port, '/v1/completions', body, { Authorization: 'Basic env-key' })).status, 401);
      // Not from the query string, a cookie or another header.
      assert.equal((await postJson(server.port, '/v1/completions?api_key=env-key', body)).status, 401);
      assert.equal((await postJson(server.port, '/v1/completions', body, { Cookie: 'api_key=env-key' })).status, 401);
      assert.equal((await postJson(server.port, '/v1/completions', body, { 'X-Api-Key': 'env-key' })).status, 401);
      assert.doesNotMatch(server.log(), /env-key/);  // never logged
    } finally {
      assert.equal((await server.stop()).code, 0);
    }
  }
});

test('CORS with --allowed-origins: allowed origins get CORS headers and preflights, others do not', async () => {
  const server = await startServer(['--allowed-origins', '["http://app.example"]', '--api-key', 'k']);
  try {
    const preflight = await request(server.port, 'OPTIONS', '/v1/completions', { headers: {
      Origin: 'http://app.example', 'Access-Control-Request-Method': 'POST',
      'Access-Control-Request-Headers': 'authorization, content-type' } });
    assert.equal(preflight.status, 204);  // no API key on a preflight
    assert.equal(preflight.headers['access-control-allow-origin'], 'http://app.example');
    assert.match(preflight.headers['access-control-allow-methods'], /POST/);
    assert.equal(preflight.headers['access-control-allow-headers'], 'authorization, content-type');
    assert.equal(preflight.headers.vary, 'Origin');
    const res = await postJson(server.port, '/v1/completions', { prompt: 'x', max_tokens: 1 },
      { Authorization: 'Bearer k', Origin: 'http://app.example' });
    assert.equal(res.status, 200);
    assert.equal(res.headers['access-control-allow-origin'], 'http://app.example');
    const denied = await postJson(server.port, '/v1/completions', { prompt: 'x', max_tokens: 1 }, { Origin: 'http://app.example' });
    assert.equal(denied.status, 401);
    assert.equal(denied.headers['access-control-allow-origin'], 'http://app.example');  // so the page can read why
    const other = await request(server.port, 'OPTIONS', '/v1/completions', { headers: {
      Origin: 'http://evil.example', 'Access-Control-Request-Method': 'POST' } });
    assert.equal(other.status, 403);
    assert.equal(other.headers['access-control-allow-origin'], undefined);
  } finally {
    assert.equal((await server.stop()).code, 0);
  }
});

test('--max-connections: connections beyond the cap get 503', async () => {
  const server = await startServer(['--max-connections', '3']);
  const open = [];
  try {
    const get = (sock) => new Promise((resolve) => {
      let data = '';
      const onData = (d) => {
        data += d;
        if (/\r\n\r\n/.test(data)) { sock.off('data', onData); resolve(data); }
      };
      sock.on('data', onData);
      sock.on('close', () => resolve(data));
      sock.write(`GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`);
    });
    for (let i = 0; i < 3; i++) {
      const sock = net.connect(server.port, '127.0.0.1');
      sock.on('error', () => {});
      await new Promise((r) => sock.once('connect', r));
      open.push(sock);
      assert.match(await get(sock), /^HTTP\/1\.1 200/);
    }
    const extra = net.connect(server.port, '127.0.0.1');
    extra.on('error', () => {});
    await new Promise((r) => extra.once('connect', r));
    const refused = await get(extra);
    assert.match(refused, /^HTTP\/1\.1 503/);
    extra.destroy();
    open.pop().destroy();
    let served = false;
    for (let i = 0; i < 100 && !served; i++) {
      await sleep(20);
      served = (await request(server.port, 'GET', '/health')).status === 200;
    }
    assert.ok(served, 'a freed slot is used again');
  } finally {
    for (const s of open) s.destroy();
    assert.equal((await server.stop()).code, 0);
  }
});

// Non-streamed request: resolves with the response once it is complete.
function longRequest(port, body) {
  return postJson(port, '/v1/completions', { prompt: 'def main():\n', temperature: 0, ignore_eos: true, ...body });
}

async function waitRunning(port, n = 1) {
  for (let i = 0; i < 500; i++) {
    const m = await metrics(port);
    if (metric(m, 'vllm:num_requests_running') >= n) return;
    await sleep(10);
  }
  throw new Error('request never started running');
}

test('SIGTERM with --shutdown-timeout lets in-flight requests finish', async () => {
  const server = await startServer(['--shutdown-timeout', '120']);
  const pending = longRequest(server.port, { max_tokens: 200 });
  await waitRunning(server.port);
  server.proc.kill('SIGTERM');
  const res = await pending;
  assert.equal(res.status, 200, res.body);
  const body = JSON.parse(res.body);
  assert.equal(body.usage.completion_tokens, 200);
  assert.equal(body.choices[0].finish_reason, 'length');
  const { code } = await server.exited;
  assert.equal(code, 0, server.log());
  assert.match(server.log(), /letting \d+ in-flight requests finish for up to 120 s/);  // the generation (and perhaps the last /metrics poll)
});

test('SIGTERM cuts non-streamed requests with a 503, not a 200 with truncated text', async () => {
  // Default --shutdown-timeout 0 aborts at once; with 1 s the 900-token request is still running when it ends.
  for (const args of [[], ['--shutdown-timeout', '1']]) {
    const server = await startServer(args);
    const pending = longRequest(server.port, { max_tokens: 900 });
    await waitRunning(server.port);
    server.proc.kill('SIGTERM');
    const res = await pending;
    assert.equal(res.status, 503, `${args}: ${res.body}`);
    assert.equal(JSON.parse(res.body).error.code, 503);
    assert.match(JSON.parse(res.body).error.message, /shutting down/);
    const { code } = await server.exited;
    assert.equal(code, 0, server.log());
  }
});
