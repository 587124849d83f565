// End-to-end: `peregrine bench speculative` on pycoder-tiny (CPU) over a small dataset of this repository's own
// Python files: every method's outputs equal plain decoding's, medians over --repeats runs, the JSON report has
// a row per (workload, concurrency, method); bad arguments are refused with a message.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BIN, MODEL } from './server_helpers.mjs';

const ROOT = new URL('../..', import.meta.url).pathname;
const dir = mkdtempSync(join(tmpdir(), 'peregrine-bench-spec-'));
const dataset = join(dir, 'code.json');
const pyDir = join(ROOT, 'python', 'peregrine');
writeFileSync(dataset, JSON.stringify(readdirSync(pyDir).filter((f) => f.endsWith('.py')).slice(0, 3)
  .map((f) => ({ text: readFileSync(join(pyDir, f), 'utf8') }))));

const run = (args) => spawnSync(BIN, ['bench', 'speculative', '--model', MODEL, '--dataset', dataset, '--device', 'cpu',
  '--threads', '1', ...args], { encoding: 'utf8', timeout: 240000 });

test('every method equals plain decoding; medians over repeats; one JSON row per method and level', () => {
  const out = join(dir, 'report.json');
  const r = run(['--concurrency', '1,2', '--num-prompts', '2', '--output-len', '24', '--repeats', '2',
    '--max-prompt-chars', '600', '--json-out', out,
    // adaptive off: the controller may measure drafting as not paying on a busy machine and draft nothing, which
    // would leave `drafted > 0` below to timing.
    '--speculative-config', '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "adaptive": false}',
    '--speculative-config',
    '{"method": "lookahead", "num_speculative_tokens": 5, "num_branches": 2, "max_tree_tokens": 8, "adaptive": false}']);
  assert.equal(r.status, 0, r.stderr + r.stdout);
  const rows = JSON.parse(readFileSync(out, 'utf8'));
  assert.equal(rows.length, 2 /* workloads */ * 2 /* levels */ * 3 /* plain + 2 methods */);
  for (const row of rows) {
    assert.equal(row.identical_to_plain, true, JSON.stringify(row));
    assert.equal(row.seconds_each.length, 2);
    assert.ok(row.seconds > 0 && Number.isFinite(row.speedup));
    if (row.method !== 'plain') assert.ok(row.drafted > 0, JSON.stringify(row));
  }
  assert.match(r.stdout, /workload\s+method/);
  assert.match(r.stdout, /lookahead k=5 tree=8/);
});

test('bad arguments are refused with a message', () => {
  const r = run(['--repeats', '0', '--speculative-config', '{"method": "ngram", "num_speculative_tokens": 4}']);
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /--repeats must be at least 1/);
  const bad = run(['--speculative-config', '{"method": "ngram", "num_speculative_tokenz": 4}']);
  assert.notEqual(bad.status, 0);
  assert.match(bad.stderr, /speculative_config\.num_speculative_tokenz/);
});
