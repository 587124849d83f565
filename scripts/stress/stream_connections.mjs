#!/usr/bin/env node
// Bounded load test: holds N concurrent streaming /v1/completions connections (one socket each) against a
// Peregrine server on loopback and checks that every stream completes ([DONE], a finish_reason, the token count
// asked for). Starts its own server unless --url is given. Loopback only; bounded count and time.
//
//   node scripts/stress/stream_connections.mjs [--connections 1000] [--max-tokens 32] [--timeout-s 600]
//        [--bin build/current/peregrine] [--url http://127.0.0.1:8000]
// Exit code 0 when every stream succeeded.
import http from 'node:http';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const opts = { connections: 1000, 'max-tokens': 32, 'timeout-s': 600, bin: path.join(ROOT, 'build', 'current', 'peregrine'), url: '' };
for (let i = 2; i < process.argv.length; i += 2) {
  const key = process.argv[i].replace(/^--/, '');
  if (!(key in opts)) { console.error(`unknown option ${process.argv[i]}`); process.exit(2); }
  opts[key] = typeof opts[key] === 'number' ? Number(process.argv[i + 1]) : process.argv[i + 1];
}
const N = Math.min(Math.max(1, opts.connections), 5000);  // bounded
const MAX_TOKENS = Math.min(Math.max(1, opts['max-tokens']), 512);

async function startServer() {
  const args = ['serve', path.join(ROOT, 'models', 'pycoder-tiny'), '--port', '0', '--max-num-seqs', '256',
    '--max-queued-requests', String(N + 16), '--max-model-len', '512'];
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
  return { proc, url: `http://127.0.0.1:${port}` };
}

function stream(url, i) {
  const u = new URL(url);
  if (u.hostname !== '127.0.0.1' && u.hostname !== 'localhost') throw new Error('loopback only');
  const body = JSON.stringify({ prompt: `# stream ${i}\ndef f(x):\n`, max_tokens: MAX_TOKENS, temperature: 0,
    ignore_eos: true, stream: true, stream_options: { include_usage: true } });
  const started = Date.now();
  return new Promise((resolve) => {
    const req = http.request({ host: u.hostname, port: u.port, method: 'POST', path: '/v1/completions', agent: false,
      headers: { 'Content-Type': 'application/json' } }, (res) => {
      let text = '';
      let firstByte = 0;
      res.setEncoding('utf8');
      res.on('data', (d) => { if (!firstByte) firstByte = Date.now(); text += d; });
      res.on('end', () => {
        const events = text.split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => e.slice(6));
        let finish = null;
        let usage = null;
        for (const e of events) {
          if (e === '[DONE]') continue;
          const j = JSON.parse(e);
          for (const c of j.choices || []) if (c.finish_reason) finish = c.finish_reason;
          if (j.usage) usage = j.usage;
        }
        const ok = res.statusCode === 200 && events.at(-1) === '[DONE]' && finish === 'length' &&
          usage && usage.completion_tokens === MAX_TOKENS;
        resolve({ ok, status: res.statusCode, ttft: firstByte - started, e2e: Date.now() - started,
          error: ok ? null : `status ${res.statusCode}, finish ${finish}, tail ${text.slice(-200)}` });
      });
      res.on('error', (e) => resolve({ ok: false, error: String(e) }));
    });
    req.on('error', (e) => resolve({ ok: false, error: String(e) }));
    req.end(body);
  });
}

const pct = (v, p) => { const s = [...v].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(p / 100 * s.length))]; };

const server = opts.url ? null : await startServer();
const url = opts.url || server.url;
const timer = setTimeout(() => { console.error(`timed out after ${opts['timeout-s']} s`); server?.proc.kill('SIGTERM'); process.exit(1); },
  opts['timeout-s'] * 1000);
const t0 = Date.now();
let peak = 0;
let open = 0;
const results = await Promise.all(Array.from({ length: N }, (_, i) => {
  open++;
  peak = Math.max(peak, open);
  return stream(url, i).finally(() => { open--; });
}));
const secs = (Date.now() - t0) / 1000;
clearTimeout(timer);
const failed = results.filter((r) => !r.ok);
const good = results.filter((r) => r.ok);
console.log(`streams            ${N} concurrent connections (peak open ${peak}), ${MAX_TOKENS} tokens each`);
console.log(`completed          ${good.length}, failed ${failed.length} in ${secs.toFixed(1)} s`);
console.log(`output throughput  ${(good.length * MAX_TOKENS / secs).toFixed(0)} tok/s`);
if (good.length) {
  console.log(`first byte ms      p50 ${pct(good.map((r) => r.ttft), 50)}  p99 ${pct(good.map((r) => r.ttft), 99)}`);
  console.log(`stream ms          p50 ${pct(good.map((r) => r.e2e), 50)}  p99 ${pct(good.map((r) => r.e2e), 99)}`);
}
if (failed.length) console.log(`first failure      ${failed[0].error}`);
if (server) {
  const metrics = await new Promise((resolve) => http.get(`${url}/metrics`, (res) => {
    let t = ''; res.on('data', (d) => { t += d; }); res.on('end', () => resolve(t));
  }).on('error', () => resolve('')));
  const used = /peregrine:kv_blocks_used\{[^}]*\} (\S+)/.exec(metrics);
  console.log(`kv blocks in use   ${used ? used[1] : '?'} after the run`);
  server.proc.kill('SIGTERM');
}
process.exit(failed.length === 0 ? 0 : 1);
