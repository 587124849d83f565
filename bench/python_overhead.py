#!/usr/bin/env python3
"""The Python API's overhead: LLM.generate of N short prompts against `peregrine bench throughput` doing the same
work (N prompts of --input-len random ids, --output-len tokens each, greedy, ignore_eos, all in flight at once,
the same engine settings). Prints both times and the ratio; figures go to docs/BENCHMARKS.md.

    /usr/bin/python3 bench/python_overhead.py [--model models/pycoder-tiny] [--prompts 1000] [--input-len 32]
        [--output-len 32] [--device cpu] [--repeats 3]

It also reports the part of LLM.generate spent in Python outside Engine::generate (parsing prompts, building
the outputs), which shared-machine noise does not blur. Each repeat runs the CLI once and Python once (alternating, so drift on a shared machine hits both); the medians
are compared. Both measure a warm engine (the CLI's second level; Python after a warm-up batch) on fresh random
prompts (no prefix-cache hits). The package comes from $PEREGRINE_PYTHON_DIR or build/current/python, the binary from
$PEREGRINE_BIN or build/current/peregrine.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, os.environ.get("PEREGRINE_PYTHON_DIR", str(ROOT / "build" / "current" / "python")))
BIN = os.environ.get("PEREGRINE_BIN", str(ROOT / "build" / "current" / "peregrine"))


def cli_seconds(args: argparse.Namespace) -> float:
    cmd = [BIN, "bench", "throughput", "--model", args.model, "--device", args.device, "--input-len",
           str(args.input_len), "--output-len", str(args.output_len), "--concurrency", f"{args.prompts},{args.prompts}",
           "--num-prompts", str(args.prompts)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    # The rows of the two levels (concurrency, requests, seconds, output tok/s, ...): the second, with the engine
    # warm. Its time from output tok/s, which has more digits than the seconds column.
    rows = re.findall(rf"^\s*{args.prompts}\s+{args.prompts}\s+[0-9.]+\s+([0-9.]+)\s", out, re.MULTILINE)
    if len(rows) != 2:
        raise RuntimeError(f"no result rows in:\n{out}")
    return args.prompts * args.output_len / float(rows[1])


class TimedEngine:
    """The LLM's engine handle, timing its generate() (the engine's share of LLM.generate; the rest is Python)."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.seconds = 0.0

    def generate(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return self.engine.generate(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start

    def __getattr__(self, name):
        return getattr(self.engine, name)


def python_seconds(args: argparse.Namespace, llm, prompts) -> tuple[float, float]:
    """(LLM.generate's wall time, of which outside Engine::generate: parsing prompts, building outputs)."""
    from peregrine import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=args.output_len, ignore_eos=True)
    timed = llm._engine = TimedEngine(llm._engine)
    start = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    seconds = time.perf_counter() - start
    llm._engine = timed.engine
    assert all(len(o.outputs[0].token_ids) == args.output_len for o in outputs)
    return seconds, seconds - timed.seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(ROOT / "models" / "pycoder-tiny"))
    parser.add_argument("--prompts", type=int, default=1000)
    parser.add_argument("--input-len", type=int, default=32)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from peregrine import LLM

    # bench throughput's engine: max_num_seqs raised to the concurrency, max_model_len = input + output.
    llm = LLM(args.model, device=args.device, max_num_seqs=args.prompts,
              max_model_len=args.input_len + args.output_len)
    vocab = llm.get_tokenizer().vocab_size
    rng = random.Random(1234)

    def random_prompts():
        # Distinct random prompts, new for every run (as the CLI's): no prefix-cache hits.
        return [{"prompt_token_ids": [rng.randrange(min(100, vocab - 1), vocab) for _ in range(args.input_len)]}
                for _ in range(args.prompts)]

    python_seconds(args, llm, random_prompts())  # warm-up, as the CLI's first level
    cli, py, own = [], [], []
    for i in range(args.repeats):
        cli.append(cli_seconds(args))
        seconds, python_part = python_seconds(args, llm, random_prompts())
        py.append(seconds)
        own.append(python_part)
        print(f"repeat {i + 1}: bench throughput {cli[-1]:.3f} s, LLM.generate {py[-1]:.3f} s "
              f"(of which {1e3 * python_part:.1f} ms in Python, outside the engine)", flush=True)
    c, p, o = statistics.median(cli), statistics.median(py), statistics.median(own)
    tokens = args.prompts * args.output_len
    print(f"{args.prompts} prompts x ({args.input_len} in, {args.output_len} out) on {llm._engine.info['backend']}: "
          f"bench throughput {c:.3f} s ({tokens / c:,.0f} out tok/s), LLM.generate {p:.3f} s ({tokens / p:,.0f} "
          f"out tok/s): Python / CLI = {p / c:.3f}; Python's own work {1e3 * o:.1f} ms = {100 * o / p:.2f}% of "
          f"LLM.generate (medians of {args.repeats})")


if __name__ == "__main__":
    main()
