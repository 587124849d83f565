// End-to-end: `peregrine serve --kv-offloading-size --kv-cache-dir` (a small device KV cache, so long prompts evict
// each other): repeated prompts are served from the host and disk tiers with the same greedy completions as a
// server without them, /metrics reports hits per tier, and a restarted server finds the disk tier's blocks.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import OpenAI from 'openai';
import { startServer, BIN, MODEL, sleep } from './server_helpers.mjs';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'peregrine-kv-tiers-'));
const small = ['--served-model-name', 'pycoder-tiny', '--num-gpu-blocks-override', '40', '--max-model-len', '600'];
const tiers = [...small, '--kv-offloading-size', '0.003', '--kv-cache-dir', dir, '--kv-cache-disk-gb', '1'];
let plain;
let tiered;

// Three prompts of ~25 blocks each: a device cache of 40 blocks holds one at a time.
const base = 'import os\nimport sys\n\ndef walk(root):\n    for dirpath, dirnames, filenames in os.walk(root):\n        for name in filenames:\n            yield os.path.join(dirpath, name)\n\n';
const prompts = [0, 1, 2].map((k) => `# file ${k}\n` + base.repeat(5 + k) + `def main_${k}():\n    `);

before(async () => {
  plain = await startServer(small);
  tiered = await startServer(tiers);
});

after(async () => {
  for (const s of [plain, tiered]) {
    if (!s) continue;
    const { code } = await s.stop();
    assert.equal(code, 0, `server exit code; log:\n${s.log()}`);
  }
  fs.rmSync(dir, { recursive: true, force: true });
});

const client = (s) => new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
const metricsOf = async (s) => {
  const text = await (await fetch(`${s.url}/metrics`)).text();
  return (name, label) => Number((text.match(new RegExp(`^${name}\\{[^}]*${label ?? ''}[^}]*\\} (\\S+)$`, 'm')) || [])[1]);
};
const complete = async (s, prompt) =>
  (await client(s).completions.create({ model: 'pycoder-tiny', prompt, max_tokens: 16, temperature: 0 })).choices[0].text;

test('prompts evicted from the device are served from the lower tiers with unchanged completions', async () => {
  const want = [];
  for (const p of prompts) want.push(await complete(plain, p));
  for (let round = 0; round < 3; ++round) {
    for (let k = 0; k < prompts.length; ++k) assert.equal(await complete(tiered, prompts[k]), want[k], `round ${round}`);
  }
  const m = await metricsOf(tiered);
  assert.ok(m('peregrine:prefix_cache_hits_total', 'tier="host"') + m('peregrine:prefix_cache_hits_total', 'tier="disk"') > 0);
  assert.ok(m('peregrine:kv_offload_bytes_total', 'direction="to_host"') > 0);
  assert.ok(m('peregrine:kv_offload_seconds_total', 'direction="to_host"') > 0, 'the copies are timed');
  assert.ok(m('peregrine:kv_disk_bytes_total', 'direction="written"') > 0);
  // Idle again: nothing is left loading or pinned, and every queued write reaches the disk without a new request.
  let idle = m;
  for (let i = 0; i < 400 && idle('peregrine:kv_disk_blocks_queued') !== 0; ++i) {
    await sleep(25);
    idle = await metricsOf(tiered);
  }
  assert.equal(idle('peregrine:kv_disk_blocks_queued'), 0);
  assert.equal(idle('peregrine:kv_blocks_loading'), 0);
  assert.equal(idle('peregrine:host_kv_blocks_pinned'), 0);
  assert.equal(idle('peregrine:kv_disk_full_total'), 0);
  assert.ok(idle('peregrine:kv_disk_bound_bytes') === 1e9, 'the bound is --kv-cache-disk-gb while the disk has room');
});

test('a restarted server finds the disk tier', async () => {
  const { code } = await tiered.stop();
  assert.equal(code, 0);
  tiered = await startServer(tiers);
  const want = await complete(plain, prompts[0]);
  assert.equal(await complete(tiered, prompts[0]), want);
  const m = await metricsOf(tiered);
  assert.ok(m('peregrine:prefix_cache_hits_total', 'tier="disk"') > 0, 'hits from the disk tier after the restart');
});

test('a server killed with SIGKILL leaves a disk tier the next start reads, dropping what it cannot trust', async () => {
  const dir2 = fs.mkdtempSync(path.join(os.tmpdir(), 'peregrine-kv-kill-'));
  const args = [...small, '--kv-offloading-size', '0.003', '--kv-cache-dir', dir2, '--kv-cache-disk-gb', '1'];
  let s = await startServer(args);
  try {
    const want = [];
    for (const p of prompts) want.push(await complete(plain, p));
    for (const p of prompts) await complete(s, p);
    // Wait until the background writer has put blocks on disk, then kill without warning (no flush, no cleanup).
    for (let i = 0; i < 200; ++i) {
      const m = await metricsOf(s);
      if (m('peregrine:kv_disk_bytes_total', 'direction="written"') > 0) break;
      await sleep(25);
    }
    s.proc.kill('SIGKILL');
    const { signal } = await s.stop();
    assert.equal(signal, 'SIGKILL');
    // What a crash mid-write leaves: a half-written temporary, and a block file cut short.
    const [sub] = fs.readdirSync(dir2).filter((f) => fs.statSync(path.join(dir2, f)).isDirectory());
    assert.ok(sub, 'the disk tier made its identity folder');
    const files = fs.readdirSync(path.join(dir2, sub)).filter((f) => !f.endsWith('.tmp'));
    assert.ok(files.length > 1, 'blocks reached the disk before the kill');
    fs.writeFileSync(path.join(dir2, sub, 'deadbeef.tmp'), 'partial');
    const victim = path.join(dir2, sub, files[0]);
    fs.truncateSync(victim, Math.floor(fs.statSync(victim).size / 2));
    s = await startServer(args);
    for (let k = 0; k < prompts.length; ++k) assert.equal(await complete(s, prompts[k]), want[k], `prompt ${k}`);
    const m = await metricsOf(s);
    assert.ok(m('peregrine:kv_disk_dropped_files_total') >= 1, 'the truncated file was dropped');
    assert.ok(m('peregrine:kv_disk_skipped_blocks_total') >= 0, 'the disk skip is counted');
    assert.ok(!fs.existsSync(path.join(dir2, sub, 'deadbeef.tmp')), 'leftover temporaries are removed at start');
  } finally {
    const { code } = await s.stop();
    assert.equal(code, 0, `server exit code; log:\n${s.log()}`);
    fs.rmSync(dir2, { recursive: true, force: true });
  }
});

test('a disk tier without a host tier is refused at startup, naming the flag', () => {
  const r = spawnSync(BIN, ['serve', MODEL, '--kv-cache-dir', dir], { encoding: 'utf8' });
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /kv_cache_dir/);
});
