// End-to-end: the HTTP hardening of issue 8 against `peregrine serve`, over raw sockets. Each defect the issue
// lists has a test here that fails on the code before it: the chunked-trailer crash, the keep-alive and pipelining
// stalls, unbounded chunk-extension buffering (the server's RSS is read from /proc), request smuggling after a
// framing error, the stop-string engine stall; and RFC 9112 conformance (HEAD, HTTP/1.0 streams, Host rules,
// absolute-form targets, Connection: close), no descriptor leaks, and /metrics consistent with sent responses.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import { startServer, postJson, request, parseMetrics, metric, sleep } from './server_helpers.mjs';

let server;
const MODEL = 'pycoder-tiny';

before(async () => {
  server = await startServer(['--served-model-name', MODEL]);
});

after(async () => {
  const { code } = await server.stop();
  assert.equal(code, 0, server.log());
});

// Sends `bytes` (a string, Buffer or array of them written in turn) on a fresh socket; resolves once `until(data)`
// holds, the server closes, or timeoutMs passes: { data, closed, timedOut }.
function exchange(port, bytes, { until = () => false, timeoutMs = 20000 } = {}) {
  return new Promise((resolve) => {
    const sock = net.connect(port, '127.0.0.1');
    let data = '';
    let settled = false;
    const finish = (closed, timedOut = false) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      sock.destroy();
      resolve({ data, closed, timedOut });
    };
    const timer = setTimeout(() => finish(false, true), timeoutMs);
    sock.on('connect', () => {
      for (const b of Array.isArray(bytes) ? bytes : [bytes]) sock.write(b);
    });
    sock.on('data', (d) => {
      data += d.toString('latin1');
      if (until(data)) finish(false);
    });
    sock.on('end', () => finish(true));
    sock.on('close', () => finish(true));
    sock.on('error', () => finish(true));
  });
}

const count = (s, needle) => s.split(needle).length - 1;
const HOST = () => `Host: 127.0.0.1:${server.port}\r\n`;
const getHealth = () => `GET /health HTTP/1.1\r\n${HOST()}\r\n`;

function rssKb(pid) {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m[1]);
}
const fdCount = (pid) => fs.readdirSync(`/proc/${pid}/fd`).length;

async function healthy() {
  assert.equal(server.proc.exitCode, null, `server exited:\n${server.log()}`);
  assert.equal((await request(server.port, 'GET', '/health')).status, 200);
}

let fdsBefore;
test('descriptors at the start', () => {
  fdsBefore = fdCount(server.proc.pid);
});

test('defect 1: a chunked trailer field of 64 KB is answered 431, the process lives', async () => {
  // The reproduction, verbatim.
  const r = await exchange(server.port, Buffer.concat([
    Buffer.from('GET /health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: '),
    Buffer.alloc(65534, 't'), Buffer.from('\r\n\r\n')]));
  assert.match(r.data, /^HTTP\/1\.1 431 /);
  assert.ok(r.closed);
  await healthy();
});

test('defect 2: the second request on fresh keep-alive connections is always answered', async () => {
  for (let c = 0; c < 40; c++) {
    // The second request goes out the moment the first response is complete.
    const r = await new Promise((resolve) => {
      const sock = net.connect(server.port, '127.0.0.1', () => sock.write(getHealth()));
      let data = '';
      let sent = false;
      const timer = setTimeout(() => { sock.destroy(); resolve({ data, timedOut: true }); }, 10000);
      sock.on('data', (d) => {
        data += d;
        if (!sent && count(data, 'HTTP/1.1 200') === 1) { sent = true; sock.write(getHealth()); }
        if (count(data, 'HTTP/1.1 200') === 2) { clearTimeout(timer); sock.destroy(); resolve({ data, timedOut: false }); }
      });
      sock.on('error', () => {});
    });
    assert.equal(r.timedOut, false, `connection ${c}: second request unanswered:\n${r.data}`);
  }
  // The same race made certain: the second request arrives (its own packet) while the first is being generated.
  const completion = JSON.stringify({ model: MODEL, prompt: 'def f():', max_tokens: 24, ignore_eos: true });
  const post = `POST /v1/completions HTTP/1.1\r\n${HOST()}Content-Type: application/json\r\n` +
    `Content-Length: ${Buffer.byteLength(completion)}\r\n\r\n${completion}`;
  for (let c = 0; c < 5; c++) {
    const r = await new Promise((resolve) => {
      const sock = net.connect(server.port, '127.0.0.1', () => {
        sock.write(post);
        setTimeout(() => sock.write(getHealth()), 5);
      });
      let data = '';
      const timer = setTimeout(() => { sock.destroy(); resolve({ data, timedOut: true }); }, 20000);
      sock.on('data', (d) => {
        data += d;
        if (count(data, 'HTTP/1.1 200') === 2) { clearTimeout(timer); sock.destroy(); resolve({ data, timedOut: false }); }
      });
      sock.on('error', () => {});
    });
    assert.equal(r.timedOut, false, `try ${c}: the request sent during the first response was not answered:\n${r.data}`);
    assert.ok(r.data.indexOf('text_completion') < r.data.lastIndexOf('HTTP/1.1 200'), 'answered in order');
  }
});

test('defect 2: pipelined requests, and one sent while a stream is being written, are all answered in order', async () => {
  const completion = JSON.stringify({ model: MODEL, prompt: 'def f():', max_tokens: 3, temperature: 0 });
  const post = `POST /v1/completions HTTP/1.1\r\n${HOST()}Content-Type: application/json\r\n` +
    `Content-Length: ${Buffer.byteLength(completion)}\r\n\r\n${completion}`;
  const r = await exchange(server.port, getHealth() + post + getHealth() + post + getHealth(),
    { until: (d) => count(d, 'HTTP/1.1 200') === 5 });
  assert.equal(count(r.data, 'HTTP/1.1 200'), 5, r.data);
  assert.equal(count(r.data, '"text_completion"'), 2);
  // A request that arrives while a streamed response is being written waits for it, then is served.
  const stream = JSON.stringify({ model: MODEL, prompt: 'def f():', max_tokens: 40, stream: true, ignore_eos: true });
  const streamReq = `POST /v1/completions HTTP/1.1\r\n${HOST()}Content-Type: application/json\r\n` +
    `Content-Length: ${Buffer.byteLength(stream)}\r\n\r\n${stream}`;
  const s = await new Promise((resolve) => {
    const sock = net.connect(server.port, '127.0.0.1', () => sock.write(streamReq));
    let data = '';
    let sent = false;
    const timer = setTimeout(() => { sock.destroy(); resolve(data); }, 20000);
    sock.on('data', (d) => {
      data += d;
      if (!sent && data.includes('data: {')) { sent = true; sock.write(getHealth()); }  // mid-stream
      if (count(data, 'HTTP/1.1 200') === 2) { clearTimeout(timer); sock.destroy(); resolve(data); }
    });
    sock.on('error', () => {});
  });
  assert.equal(count(s, 'HTTP/1.1 200'), 2, s);
  assert.ok(s.indexOf('data: [DONE]') < s.lastIndexOf('HTTP/1.1 200'), 'the health response came after the stream');
});

test('defect 4: endless chunk extensions and zero-padded sizes are refused, not buffered', async () => {
  const pid = server.proc.pid;
  const rssStart = rssKb(pid);
  for (const [name, first, filler] of [['extension', '1;', 'e'], ['zero padding', '', '0']]) {
    const head = `POST /v1/completions HTTP/1.1\r\n${HOST()}Content-Type: application/json\r\n` +
      `Transfer-Encoding: chunked\r\n\r\n${first}`;
    // Up to 64 MB offered in 64 KB writes, one per event-loop turn; the server must answer long before the end.
    const r = await new Promise((resolve) => {
      const sock = net.connect(server.port, '127.0.0.1');
      const piece = Buffer.alloc(65536, filler);
      let data = '';
      let sent = 0;
      let done = false;
      const end = () => { if (!done) { done = true; sock.destroy(); resolve({ data, sent }); } };
      const pump = () => {
        if (done || sent >= (64 << 20)) return;
        sent += piece.length;
        if (sock.write(piece)) setImmediate(pump);
        else sock.once('drain', pump);
      };
      sock.on('connect', () => { sock.write(head); pump(); });
      // Stop offering bytes once the answer is in.
      sock.on('data', (d) => { data += d; if (data.includes('}}')) end(); });
      sock.on('close', end);
      sock.on('error', end);
      setTimeout(end, 20000);
    });
    assert.match(r.data, /^HTTP\/1\.1 400 /, name);
    assert.match(r.data, /chunk/, name);
    assert.ok(r.sent < (64 << 20), `${name}: no answer before all ${r.sent} bytes were sent`);
  }
  const grownMb = (rssKb(pid) - rssStart) / 1024;
  assert.ok(grownMb < 16, `RSS grew by ${grownMb.toFixed(1)} MB`);
  await healthy();
});

test('defect 5: a framing error is answered and the connection closed, so nothing is smuggled', async () => {
  for (const te of ['gzip', 'chunked, chunked', 'gzip, chunked', 'chunked\r\nContent-Length: 4']) {
    const smuggled = `GET /v1/models HTTP/1.1\r\n${HOST()}\r\n`;
    const r = await exchange(server.port,
      `POST /v1/completions HTTP/1.1\r\n${HOST()}Content-Type: application/json\r\nTransfer-Encoding: ${te}\r\n\r\n` +
      smuggled);
    assert.match(r.data, /^HTTP\/1\.1 (400|501) /, te);
    assert.match(r.data, /Connection: close/);
    assert.equal(count(r.data, 'HTTP/1.1 '), 1, `${te}: the smuggled request was answered:\n${r.data}`);
    assert.ok(r.closed, te);
  }
  await healthy();
});

test('defect 3: stop strings the engine cannot bound are refused at once (64 x 70 KB, n = 8)', async () => {
  const t0 = Date.now();
  const res = await postJson(server.port, '/v1/completions', {
    model: MODEL, prompt: 'x', n: 8, max_tokens: 16, stop: Array.from({ length: 64 }, (_, i) => 'x'.repeat(70000 - i)),
  });
  assert.equal(res.status, 400, res.body.slice(0, 300));
  assert.equal(JSON.parse(res.body).error.param, 'stop');
  assert.ok(Date.now() - t0 < 10000);
  // The most that is allowed (64 stop strings, 16 KiB in all, sharing long prefixes) is served normally.
  const ok = await postJson(server.port, '/v1/completions', {
    model: MODEL, prompt: 'def main():', n: 8, max_tokens: 32, temperature: 1, seed: 1,
    stop: Array.from({ length: 64 }, (_, i) => ' '.repeat(255) + String.fromCharCode(33 + i)),
  });
  assert.equal(ok.status, 200, ok.body.slice(0, 300));
  assert.equal(JSON.parse(ok.body).choices.length, 8);
});

test('HEAD gets the headers only; HTTP/1.0 streams are close-delimited', async () => {
  const head = await exchange(server.port, `HEAD /v1/models HTTP/1.1\r\n${HOST()}\r\n` + getHealth(),
    { until: (d) => count(d, 'HTTP/1.1 200') === 2 });
  const [first] = head.data.split('\r\n\r\n');
  const length = Number(/Content-Length: (\d+)/.exec(first)[1]);
  assert.ok(length > 0);
  assert.ok(!head.data.includes('"object"'), 'HEAD returned a body');
  assert.equal(count(head.data, 'HTTP/1.1 200'), 2);
  const body = JSON.stringify({ model: MODEL, prompt: 'x', max_tokens: 4, stream: true });
  const r = await exchange(server.port, `POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${body.length}\r\n\r\n${body}`);
  assert.ok(r.closed);
  assert.match(r.data, /^HTTP\/1\.1 200 /);
  assert.ok(!/Transfer-Encoding/i.test(r.data), r.data);
  assert.ok(r.data.trimEnd().endsWith('data: [DONE]'), r.data);
});

test('Host rules: missing or repeated is 400, a foreign name 421, absolute-form targets work', async () => {
  const status = async (bytes) => Number(/^HTTP\/1\.1 (\d+)/.exec((await exchange(server.port, bytes,
    { until: (d) => d.includes('\r\n\r\n') })).data)?.[1]);
  assert.equal(await status('GET /health HTTP/1.1\r\n\r\n'), 400);
  assert.equal(await status(`GET /health HTTP/1.1\r\n${HOST()}${HOST()}\r\n`), 400);
  assert.equal(await status('GET /health HTTP/1.1\r\nHost: attacker.example\r\n\r\n'), 421);
  assert.equal(await status('GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n'), 200);
  assert.equal(await status(`GET http://127.0.0.1:${server.port}/health HTTP/1.1\r\n${HOST()}\r\n`), 200);
  assert.equal(await status('GET /health HTTP/1.0\r\n\r\n'), 200);
  assert.equal(await status(`GET /health HTTP/2.0\r\n${HOST()}\r\n`), 505);
  assert.equal(await status('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'), 505);  // an HTTP/2 prior-knowledge preface
  assert.equal(await status(`OPTIONS * HTTP/1.1\r\n${HOST()}\r\n`), 204);
});

test('Connection: close is honoured and answered with Connection: close', async () => {
  const r = await exchange(server.port, `GET /health HTTP/1.1\r\n${HOST()}Connection: close\r\n\r\n` + getHealth());
  assert.ok(r.closed);
  assert.match(r.data, /Connection: close/);
  assert.equal(count(r.data, 'HTTP/1.1 200'), 1);
  assert.match(r.data, /X-Content-Type-Options: nosniff/);
});

test('/metrics never shows a request running after its response arrived', async () => {
  let successes = metric(parseMetrics((await request(server.port, 'GET', '/metrics')).body), 'vllm:e2e_request_latency_seconds_count');
  for (let i = 0; i < 25; i++) {
    const res = await postJson(server.port, '/v1/completions', { model: MODEL, prompt: `x${i}`, max_tokens: 2 });
    assert.equal(res.status, 200);
    const m = parseMetrics((await request(server.port, 'GET', '/metrics')).body);
    assert.equal(metric(m, 'vllm:num_requests_running'), 0, `iteration ${i}`);
    successes += 1;
    assert.equal(metric(m, 'vllm:e2e_request_latency_seconds_count'), successes, `iteration ${i}`);
  }
});

test('no descriptors leak and the server is healthy at the end', async () => {
  await healthy();
  let fds = fdCount(server.proc.pid);
  for (let i = 0; i < 100 && fds > fdsBefore + 2; i++) {
    await sleep(50);
    fds = fdCount(server.proc.pid);
  }
  assert.ok(fds <= fdsBefore + 2, `descriptors: ${fdsBefore} before, ${fds} after`);
});
