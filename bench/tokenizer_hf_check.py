"""Checks our tokenizer against the Rust `tokenizers` library and transformers' AutoTokenizer, and times the Rust
library single-threaded on the benchmark corpus. For a machine that has those Python packages (not CI).

Usage: python3 tokenizer_hf_check.py BENCH_DIR
  BENCH_DIR holds corpus.json (list of documents), corpus_strings.json (the test corpus), models/<name>/ and, per
  model, ours_<name>.jsonl (our ids per document, from tokenizer_bench --ids-out) and ours_<name>_strings.jsonl
  (our {"ids"} per test string with special tokens, from `tokenize --jsonl`).
"""
import json
import os
import sys
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
from tokenizers import Tokenizer  # noqa: E402

bench = sys.argv[1]
docs = json.load(open(os.path.join(bench, "corpus.json")))
strings = json.load(open(os.path.join(bench, "corpus_strings.json")))
nbytes = sum(len(d.encode()) for d in docs)
report = {}
for name in sorted(os.listdir(os.path.join(bench, "models"))):
    d = os.path.join(bench, "models", name)
    r = {}
    t0 = time.perf_counter()
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    r["rust_load_ms"] = (time.perf_counter() - t0) * 1000
    best = 1e30
    for _ in range(2):
        t0 = time.perf_counter()
        rust_ids = [tok.encode(doc, add_special_tokens=False).ids for doc in docs]
        best = min(best, time.perf_counter() - t0)
    r["rust_mb_per_s"] = nbytes / 1e6 / best
    ours_path = os.path.join(bench, f"ours_{name}.jsonl")
    if os.path.exists(ours_path):
        ours = [json.loads(line) for line in open(ours_path)]
        bad = [i for i, (a, b) in enumerate(zip(ours, rust_ids)) if a != b]
        r["docs_mismatch"] = len(bad)
        r["docs_first_mismatch"] = [{"doc": i, "ours": ours[i][:40], "rust": rust_ids[i][:40]} for i in bad[:2]]
    strings_path = os.path.join(bench, f"ours_{name}_strings.jsonl")
    if os.path.exists(strings_path):
        ours = [json.loads(line).get("ids") for line in open(strings_path)]
        try:
            from transformers import AutoTokenizer
            hf = AutoTokenizer.from_pretrained(d)
            expected = [hf(s, add_special_tokens=True)["input_ids"] for s in strings]
            r["transformers_class"] = type(hf).__name__
        except Exception as e:  # noqa: BLE001
            r["transformers_error"] = repr(e)[:300]
            expected = [tok.encode(s, add_special_tokens=True).ids for s in strings]
        bad = [i for i, (a, b) in enumerate(zip(ours, expected)) if a != b]
        r["strings_mismatch"] = len(bad)
        r["strings_first_mismatch"] = [{"text": strings[i][:60], "ours": ours[i], "hf": expected[i]} for i in bad[:3]]
        # decode check: transformers decode of our ids vs the Rust decoder
        rust_dec = [tok.decode(tok.encode(s, add_special_tokens=False).ids, skip_special_tokens=True) for s in strings]
        r["rust_roundtrip_lossless"] = sum(1 for s, x in zip(strings, rust_dec) if s == x)
    report[name] = r
    print(name, json.dumps(r, ensure_ascii=False), flush=True)
json.dump(report, open(os.path.join(os.environ.get("OUT", "."), "hf_check.json"), "w"), indent=1, ensure_ascii=False)
