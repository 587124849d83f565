#!/usr/bin/env node
// Bounded hostile-HTTP probe of a Peregrine server on loopback (the checks of issue 8, as numbers): keep-alive
// and pipelining, requests sent mid-response, smuggling, chunk-extension and zero-padding floods, slowloris,
// header floods, the stop-string stall and the chunked-trailer crash. Starts its own server from --bin and reads
// its RSS and descriptors from /proc before and after. Prints one line per probe and a JSON summary.
//
//   node scripts/stress/http_probe.mjs [--bin build/cpu/peregrine] [--connections 200] [--slowloris 300]
// Loopback only; every probe is bounded in connections, bytes and time.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const opts = { bin: path.join(ROOT, 'build', 'cpu', 'peregrine'), connections: 200, slowloris: 300 };
for (let i = 2; i < process.argv.length; i += 2) {
  const key = process.argv[i].replace(/^--/, '');
  if (!(key in opts)) { console.error(`unknown option ${process.argv[i]}`); process.exit(2); }
  opts[key] = typeof opts[key] === 'number' ? Number(process.argv[i + 1]) : process.argv[i + 1];
}
const CONNS = Math.min(Math.max(1, opts.connections), 1000);
const SLOW = Math.min(Math.max(1, opts.slowloris), 1000);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function startServer() {
  const args = ['serve', path.join(ROOT, 'models', 'pycoder-tiny'), '--port', '0', '--device', 'cpu',
    '--max-model-len', '1024', '--num-gpu-blocks-override', '4096'];
  const proc = spawn(opts.bin, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const port = await new Promise((resolve, reject) => {
    proc.stderr.on('data', (d) => {
      log += d;
      const m = /serving .* on http:\/\/127\.0\.0\.1:(\d+)/.exec(log);
      if (m) resolve(Number(m[1]));
    });
    proc.on('exit', (c) => reject(new Error(`server exited ${c}: ${log}`)));
  });
  return { proc, port, log: () => log };
}

const server = await startServer();
const HOST = `Host: 127.0.0.1:${server.port}\r\n`;
const health = `GET /health HTTP/1.1\r\n${HOST}\r\n`;
const count = (s, needle) => s.split(needle).length - 1;
const alive = () => server.proc.exitCode === null && server.proc.signalCode === null;
function procStats() {
  if (!alive()) return { rssMb: null, fds: null };
  const status = fs.readFileSync(`/proc/${server.proc.pid}/status`, 'utf8');
  return { rssMb: Number(/VmRSS:\s+(\d+)/.exec(status)[1]) / 1024, fds: fs.readdirSync(`/proc/${server.proc.pid}/fd`).length };
}

// One connection: writes `script` steps ({ send, afterMs, whenSeen }) and resolves with what came back.
function conversation(steps, { until = () => false, timeoutMs = 10000 } = {}) {
  return new Promise((resolve) => {
    const sock = net.connect(server.port, '127.0.0.1');
    let data = '';
    let done = false;
    let next = 0;
    const finish = (closed) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sock.destroy();
      resolve({ data, closed, timedOut: !closed && !until(data) });
    };
    const timer = setTimeout(() => finish(false), timeoutMs);
    const advance = () => {
      while (next < steps.length) {
        const s = steps[next];
        if (s.whenSeen && count(data, s.whenSeen) < (s.times || 1)) return;
        next++;
        if (s.afterMs) { setTimeout(() => { if (!done) sock.write(s.send); advance(); }, s.afterMs); return; }
        sock.write(s.send);
      }
    };
    sock.on('connect', advance);
    sock.on('data', (d) => { data += d.toString('latin1'); if (until(data)) finish(false); else advance(); });
    sock.on('close', () => finish(true));
    sock.on('error', () => finish(true));
  });
}

async function inBatches(n, batch, fn) {
  const out = [];
  for (let i = 0; i < n; i += batch) out.push(...await Promise.all(Array.from({ length: Math.min(batch, n - i) }, (_, k) => fn(i + k))));
  return out;
}

const results = { bin: opts.bin, before: null, after: null, probes: {} };
function report(name, fields) {
  results.probes[name] = fields;
  console.log(`${name}: ${JSON.stringify(fields)}`);
}

await conversation([{ send: health }], { until: (d) => d.includes('\r\n\r\n') });
results.before = procStats();
console.log(`before: ${JSON.stringify(results.before)}`);

const completion = (extra = {}) => {
  const body = JSON.stringify({ prompt: 'def f():', max_tokens: 8, ...extra });
  return `POST /v1/completions HTTP/1.1\r\n${HOST}Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
};
const is200 = (k) => (d) => count(d, 'HTTP/1.1 200') >= k;

{  // keep-alive: 5 requests per connection, each sent the moment the previous answer is complete
  const r = await inBatches(CONNS, 50, () => conversation(
    [0, 1, 2, 3, 4].map((i) => ({ send: health, whenSeen: i ? 'HTTP/1.1 200' : undefined, times: i })), { until: is200(5) }));
  report('keep-alive', { connections: CONNS, requests: CONNS * 5, answered: r.reduce((a, x) => a + count(x.data, 'HTTP/1.1 200'), 0) });
}
{  // pipelining: 20 requests in one write
  const r = await inBatches(Math.min(CONNS, 100), 50, () => conversation([{ send: health.repeat(20) }], { until: is200(20) }));
  report('pipelined', { connections: r.length, requests: r.length * 20, answered: r.reduce((a, x) => a + count(x.data, 'HTTP/1.1 200'), 0) });
}
{  // a request sent (its own packet) while the previous response is being generated
  const r = await inBatches(50, 10, () => conversation([{ send: completion({ max_tokens: 16, ignore_eos: true }) },
    { send: health, afterMs: 5 }], { until: is200(2), timeoutMs: 30000 }));
  report('sent mid-response', { requests: 100, answered: r.reduce((a, x) => a + count(x.data, 'HTTP/1.1 200'), 0) });
}
{  // smuggling: a framing error followed by a request on the same connection
  const smuggled = `GET /v1/models HTTP/1.1\r\n${HOST}\r\n`;
  const tes = ['gzip', 'chunked, chunked', 'gzip, chunked', 'chunked\r\nContent-Length: 5', 'identity'];
  const r = await inBatches(100, 25, (i) => conversation([{ send: `POST /v1/completions HTTP/1.1\r\n${HOST}` +
    `Content-Type: application/json\r\nTransfer-Encoding: ${tes[i % tes.length]}\r\n\r\n${smuggled}` }],
  { timeoutMs: 5000 }));
  report('smuggling', { attempts: 100, smuggled_answered: r.filter((x) => x.data.includes('"object":"list"')).length,
    closed_by_server: r.filter((x) => x.closed).length });
}
for (const [name, first, filler] of [['chunk-extension flood', '1;', 'e'], ['zero-padded chunk size', '', '0']]) {
  let peak = procStats().rssMb;
  const r = await inBatches(10, 5, () => new Promise((resolve) => {
    const sock = net.connect(server.port, '127.0.0.1');
    const piece = Buffer.alloc(65536, filler);
    let data = '';
    let sent = 0;
    let done = false;
    const end = () => { if (!done) { done = true; sock.destroy(); resolve({ data, sent }); } };
    const pump = () => {
      if (done || sent >= (64 << 20)) return;
      sent += piece.length;
      if (alive()) peak = Math.max(peak, procStats().rssMb);
      if (sock.write(piece)) setImmediate(pump); else sock.once('drain', pump);
    };
    sock.on('connect', () => {
      sock.write(`POST /v1/completions HTTP/1.1\r\n${HOST}Transfer-Encoding: chunked\r\n\r\n${first}`);
      pump();
    });
    sock.on('data', (d) => { data += d; if (data.includes('}}')) end(); });
    sock.on('close', end);
    sock.on('error', end);
    setTimeout(end, 15000);
  }));
  report(name, { connections: 10, offered_mb_each: 64, answered_400: r.filter((x) => /^HTTP\/1\.1 400/.test(x.data)).length,
    mb_sent_before_answer_max: Math.max(...r.map((x) => x.sent)) / 1048576, rss_peak_mb: peak });
}
{  // slowloris: SLOW connections trickling a header, one byte per 200 ms for 5 s
  const socks = [];
  for (let i = 0; i < SLOW; i++) {
    const s = net.connect(server.port, '127.0.0.1');
    s.on('error', () => {});
    socks.push(s);
  }
  const line = `GET /health HTTP/1.1\r\n${HOST}X-Slow: `;
  for (let t = 0; t < 25; t++) {
    for (const s of socks) if (!s.destroyed) s.write(t === 0 ? line : 'a');
    await sleep(200);
  }
  const during = procStats();
  const t0 = Date.now();
  const h = await conversation([{ send: health }], { until: (d) => d.includes('\r\n\r\n') });
  report('slowloris', { connections: SLOW, health_ms: Date.now() - t0, health_ok: /^HTTP\/1\.1 200/.test(h.data),
    rss_mb: during.rssMb, fds: during.fds });
  for (const s of socks) s.destroy();
}
{  // header floods
  const r = await inBatches(100, 25, () => conversation([{ send: `GET /health HTTP/1.1\r\n${HOST}X-Big: ${'a'.repeat(70000)}\r\n\r\n` }],
    { until: (d) => d.includes('}}'), timeoutMs: 5000 }));
  report('70 KB header', { requests: 100, answered_431: r.filter((x) => /^HTTP\/1\.1 431/.test(x.data)).length });
}
{  // the stop-string stall: a small request's latency while 64 x 70 KB of stop strings (n = 8) is submitted
  const stop = Array.from({ length: 64 }, (_, i) => 'x'.repeat(70000 - i));
  const big = completion({ n: 8, max_tokens: 64, stop, ignore_eos: true });
  const t0 = Date.now();
  const bigRun = conversation([{ send: big }], { until: (d) => d.includes('}}') && d.includes('\r\n\r\n'), timeoutMs: 120000 });
  await sleep(300);
  const t1 = Date.now();
  const small = await conversation([{ send: completion({ max_tokens: 16, ignore_eos: true }) }], { until: is200(1), timeoutMs: 120000 });
  const smallMs = Date.now() - t1;
  const b = await bigRun;
  report('stop-string stall', { big_status: Number(/^HTTP\/1\.1 (\d+)/.exec(b.data)?.[1]), big_ms: Date.now() - t0,
    small_ok: /^HTTP\/1\.1 200/.test(small.data), small_ms: smallMs });
}
{  // the crash: a chunked trailer field of 64 KB (last: it took the old server down)
  const r = await conversation([{ send: `GET /health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: ${'t'.repeat(65534)}\r\n\r\n` }],
    { until: (d) => d.includes('}}'), timeoutMs: 5000 });
  await sleep(200);
  report('64 KB trailer', { status: Number(/^HTTP\/1\.1 (\d+)/.exec(r.data)?.[1]) || null, server_alive: alive() });
}
await sleep(3500);  // lingering closes end
results.after = procStats();
const h = alive() ? await conversation([{ send: health }], { until: (d) => d.includes('\r\n\r\n') }) : { data: '' };
results.after.health_ok = /^HTTP\/1\.1 200/.test(h.data);
console.log(`after: ${JSON.stringify(results.after)}`);
if (alive()) server.proc.kill('SIGTERM');
console.log(JSON.stringify(results));
