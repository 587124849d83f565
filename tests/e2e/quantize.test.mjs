// End-to-end: `peregrine quantize` writes compressed-tensors checkpoints that load back (rtn W4A16, gptq W8A16 with
// a small calibration text), and `peregrine perplexity` scores them as llama.cpp does (chunks of --context, the
// second half of each scored); W8A16 stays within 1% of the float model; FP8 and int8 W8A8 (SmoothQuant) checkpoints
// load back near the float model; W4A8 (int- and pack-quantized) loads back near W4A16; bad arguments are refused
// by name.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BIN, MODEL } from './server_helpers.mjs';

const ROOT = new URL('../..', import.meta.url).pathname;
const dir = mkdtempSync(join(tmpdir(), 'peregrine-quantize-'));
const text = join(dir, 'code.json');
const pyDir = join(ROOT, 'python', 'peregrine');
writeFileSync(text, JSON.stringify(readdirSync(pyDir).filter((f) => f.endsWith('.py')).slice(0, 4)
  .map((f) => ({ text: readFileSync(join(pyDir, f), 'utf8') }))));
const run = (args) => spawnSync(BIN, args, { encoding: 'utf8', timeout: 240000 });
const ppl = (model) => {
  const r = run(['perplexity', '--model', model, '--file', text, '--context', '64', '--chunks', '8', '--device', 'cpu',
    '--threads', '1', '--json']);
  assert.equal(r.status, 0, r.stderr + r.stdout);
  return JSON.parse(r.stdout.trim().split('\n').pop());
};

test('quantize rtn w4a16 and gptq w8a16; the checkpoints load back; perplexity as llama.cpp computes it', () => {
  const w4 = join(dir, 'w4'), w8 = join(dir, 'w8');
  let r = run(['quantize', '--model', MODEL, '--out', w4, '--scheme', 'w4a16', '--group-size', '64']);
  assert.equal(r.status, 0, r.stderr + r.stdout);
  const q = JSON.parse(readFileSync(join(w4, 'config.json'), 'utf8')).quantization_config;
  assert.equal(q.quant_method, 'compressed-tensors');
  assert.equal(q.format, 'pack-quantized');
  assert.equal(q.config_groups.group_0.weights.num_bits, 4);
  assert.equal(q.config_groups.group_0.weights.group_size, 64);
  r = run(['quantize', '--model', MODEL, '--out', w8, '--scheme', 'w8a16', '--method', 'gptq', '--calibration', text,
    '--calibration-tokens', '256']);
  assert.equal(r.status, 0, r.stderr + r.stdout);
  assert.match(r.stdout, /42 projections quantized \(w8a16, gptq, group 128\), 256 calibration tokens/);
  r = run(['generate', '--model', w4, '--prompt', 'def add(a, b):', '--max-tokens', '8', '--device', 'cpu',
    '--quantization', 'compressed-tensors']);
  assert.equal(r.status, 0, r.stderr + r.stdout);
  const dense = ppl(MODEL), p8 = ppl(w8), p4 = ppl(w4);
  for (const p of [dense, p8, p4]) {
    assert.equal(p.method, 'llama.cpp');
    assert.equal(p.windows, 8);
    assert.equal(p.scored_tokens, 8 * (64 - 1 - 32));  // tokens 33..63 of each chunk
    assert.ok(Number.isFinite(p.perplexity) && p.perplexity > 1, JSON.stringify(p));
  }
  assert.ok(p8.perplexity < dense.perplexity * 1.01, `w8 ${p8.perplexity} vs ${dense.perplexity}`);
  assert.ok(p4.perplexity < dense.perplexity * 1.5, `w4 ${p4.perplexity} vs ${dense.perplexity}`);
});

test('quantize fp8 and w8a8-int8 (smoothquant): int-/float-quantized checkpoints with dynamic per-token activations load back', () => {
  const f8 = join(dir, 'fp8'), i8 = join(dir, 'i8');
  let r = run(['quantize', '--model', MODEL, '--out', f8, '--scheme', 'fp8']);
  assert.equal(r.status, 0, r.stderr + r.stdout);
  r = run(['quantize', '--model', MODEL, '--out', i8, '--scheme', 'w8a8-int8', '--method', 'smoothquant', '--calibration', text,
    '--calibration-tokens', '256']);
  assert.equal(r.status, 0, r.stderr + r.stdout);
  for (const [d, fmt, type] of [[f8, 'float-quantized', 'float'], [i8, 'int-quantized', 'int']]) {
    const q = JSON.parse(readFileSync(join(d, 'config.json'), 'utf8')).quantization_config;
    assert.equal(q.format, fmt);
    const g = q.config_groups.group_0;
    assert.equal(g.weights.type, type);
    assert.equal(g.weights.strategy, 'channel');
    assert.deepEqual([g.input_activations.strategy, g.input_activations.dynamic, g.input_activations.type], ['token', true, type]);
  }
  const dense = ppl(MODEL), pf = ppl(f8), pi = ppl(i8);
  assert.ok(pf.perplexity < dense.perplexity * 1.02, `fp8 ${pf.perplexity} vs ${dense.perplexity}`);
  assert.ok(pi.perplexity < dense.perplexity * 1.03, `int8 ${pi.perplexity} vs ${dense.perplexity}`);
});

test('quantize w4a8 (int4 g128, int8 activations per token): int- and pack-quantized checkpoints load back near W4A16', () => {
  const a = join(dir, 'w4a8'), b = join(dir, 'w4a8p'), w4 = join(dir, 'w4a16');
  let r = run(['quantize', '--model', MODEL, '--out', a, '--scheme', 'w4a8']);
  assert.equal(r.status, 0, r.stderr + r.stdout);
  assert.match(r.stdout, /42 projections quantized \(w4a8, rtn, group 128, activations per token\)/);
  r = run(['quantize', '--model', MODEL, '--out', b, '--scheme', 'w4a8', '--format', 'pack-quantized']);
  assert.equal(r.status, 0, r.stderr + r.stdout);
  r = run(['quantize', '--model', MODEL, '--out', w4, '--scheme', 'w4a16']);
  assert.equal(r.status, 0, r.stderr + r.stdout);
  for (const [d, fmt] of [[a, 'int-quantized'], [b, 'pack-quantized']]) {
    const q = JSON.parse(readFileSync(join(d, 'config.json'), 'utf8')).quantization_config;
    assert.equal(q.format, fmt);
    const g = q.config_groups.group_0;
    assert.deepEqual([g.weights.num_bits, g.weights.type, g.weights.strategy, g.weights.group_size], [4, 'int', 'group', 128]);
    assert.deepEqual([g.input_activations.num_bits, g.input_activations.strategy, g.input_activations.dynamic], [8, 'token', true]);
  }
  const pa = ppl(a), pb = ppl(b), p4 = ppl(w4);
  assert.equal(pa.perplexity, pb.perplexity);  // the same codes and scales, two layouts
  assert.ok(pa.perplexity < p4.perplexity * 1.02, `w4a8 ${pa.perplexity} vs w4a16 ${p4.perplexity}`);
  r = run(['quantize', '--model', MODEL, '--out', join(dir, 'x'), '--scheme', 'w4a8', '--format', 'float-quantized']);
  assert.match(r.stderr, /--format 'float-quantized' with --scheme w4a8: expected int-quantized or pack-quantized/);
});

test('perplexity --stride scores every token after the first once (sliding windows)', () => {
  const r = run(['perplexity', '--model', MODEL, '--file', text, '--context', '128', '--stride', '96', '--device', 'cpu',
    '--threads', '1', '--json']);
  assert.equal(r.status, 0, r.stderr + r.stdout);
  const p = JSON.parse(r.stdout.trim().split('\n').pop());
  assert.equal(p.method, 'sliding-window');
  assert.equal(p.scored_tokens, p.tokens - 1, JSON.stringify(p));
  assert.ok(p.perplexity > 1 && Number.isFinite(p.perplexity));
});

test('bad arguments are refused by name', () => {
  let r = run(['quantize', '--model', MODEL, '--out', join(dir, 'x'), '--scheme', 'w3a16']);
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /--scheme 'w3a16': expected w4a16, w8a16, w4a8, w8a8-int8 or fp8/);
  r = run(['quantize', '--model', MODEL, '--out', join(dir, 'x'), '--scheme', 'fp8', '--method', 'gptq']);
  assert.match(r.stderr, /--method 'gptq' with --scheme fp8: expected rtn/);
  r = run(['quantize', '--model', MODEL, '--out', join(dir, 'x'), '--method', 'gptq']);
  assert.match(r.stderr, /--method gptq needs --calibration FILE/);
  r = run(['quantize', '--model', MODEL, '--out', join(dir, 'x'), '--gptq-sequential']);
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /--gptq-sequential: --method is 'rtn', not gptq/);
  r = run(['generate', '--model', MODEL, '--prompt', 'x', '--quantization', 'awq', '--device', 'cpu']);
  assert.match(r.stderr, /--quantization awq: .*config.json has no quantization_config/);
});
