// Helpers for the server end-to-end tests: start `peregrine serve` on a free port (PEREGRINE_BIN, default
// build/current/peregrine), wait for its "serving" log line, and stop it; small HTTP utilities.
import { spawn } from 'node:child_process';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const BIN = process.env.PEREGRINE_BIN || path.join(ROOT, 'build', 'current', 'peregrine');
export const MODEL = path.join(ROOT, 'models', 'pycoder-tiny');
export const CHAT_TEMPLATE = path.join(ROOT, 'tests', 'e2e', 'fixtures', 'server_chat_template.jinja');

// Starts a server; resolves to { url, port, proc, log(), stop() }.
// env: extra environment variables for the server (e.g. VLLM_API_KEY).
// model: what to serve (default: models/pycoder-tiny), e.g. a .gguf file.
export async function startServer(extraArgs = [], { timeoutMs = 120000, env = {}, model = MODEL } = {}) {
  // Defaults, unless extraArgs gives the same flag.
  const defaults = [['--port', '0'], ['--device', 'cpu'], ['--num-gpu-blocks-override', '4096'], ['--max-model-len', '1024']]
    .filter(([flag]) => !extraArgs.includes(flag)).flat();
  const args = ['serve', model, ...defaults, ...extraArgs];
  const childEnv = { ...process.env, ...env };
  // Tests pass API keys explicitly; one in the developer's environment must not leak into a server.
  for (const k of ['VLLM_API_KEY', 'PEREGRINE_API_KEY']) if (!(k in env)) delete childEnv[k];
  const proc = spawn(BIN, args, { stdio: ['ignore', 'pipe', 'pipe'], env: childEnv });
  let log = '';
  proc.stdout.on('data', (d) => { log += d; });
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start in ${timeoutMs} ms:\n${log}`)), timeoutMs);
    proc.stderr.on('data', (d) => {
      log += d;
      const m = /serving .* on http:\/\/[^:]+:(\d+)/.exec(log);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`server exited with ${code}:\n${log}`)); });
  });
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    proc,
    exited,
    log: () => log,
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      return exited;
    },
  };
}

// A raw request; resolves to { status, headers, body } (body as text).
export function request(port, method, urlPath, { body, headers = {} } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path: urlPath, headers, agent: false }, (res) => {
      let data = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { data += d; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: data }));
    });
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

export async function postJson(port, urlPath, obj, headers = {}) {
  const body = typeof obj === 'string' ? obj : JSON.stringify(obj);
  return request(port, 'POST', urlPath, { body, headers: { 'Content-Type': 'application/json', ...headers } });
}

// Parses Prometheus text into { 'name{labels}': value }.
export function parseMetrics(text) {
  const out = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    out[line.slice(0, i)] = Number(line.slice(i + 1));
  }
  return out;
}

export function metric(metrics, name) {
  for (const [k, v] of Object.entries(metrics)) if (k.startsWith(name + '{')) return v;
  return undefined;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
