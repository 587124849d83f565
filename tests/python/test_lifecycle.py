"""Ctrl-C during LLM.generate aborts the batch's requests in the engine and raises KeyboardInterrupt; the engine
keeps serving; the GIL is released while the engine runs; the process exits cleanly with engines alive."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

from peregrine import SamplingParams

from conftest import MODEL, PYTHON_DIR


def run_script(body: str, timeout: float = 120) -> subprocess.CompletedProcess:
    script = f"import sys\nsys.path.insert(0, {str(PYTHON_DIR)!r})\nMODEL = {str(MODEL)!r}\n" + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout)


def test_ctrl_c_aborts_the_batch():
    result = run_script("""
        import os, signal, threading, time
        from peregrine import LLM, SamplingParams
        # Python's own Ctrl-C handler, even where the test runs with SIGINT ignored (bash ignores it for commands
        # started in the background without job control, and Python then keeps it ignored).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        llm = LLM(MODEL, device="cpu", max_model_len=600, max_num_seqs=4, num_gpu_blocks_override=256)
        threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        start = time.monotonic()
        try:
            llm.generate(["x = "] * 64, SamplingParams(max_tokens=500, ignore_eos=True), use_tqdm=False)
            print("not interrupted")
        except KeyboardInterrupt:
            print(f"interrupted {time.monotonic() - start:.2f}")
        for _ in range(200):
            stats = llm._engine.stats()
            if stats["num_running"] + stats["num_waiting"] == 0:
                break
            time.sleep(0.01)
        print("aborted", stats["requests_finished_abort"], "live", stats["num_running"] + stats["num_waiting"])
        out = llm.generate("y = ", SamplingParams(max_tokens=3), use_tqdm=False)
        print("after", len(out[0].outputs[0].token_ids))
    """)
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    assert "interrupted" in lines, result.stdout
    assert float(lines["interrupted"]) < 5.0
    aborted, live = lines["aborted"].split(" live ")
    assert int(aborted) >= 1 and int(live) == 0
    assert lines["after"] == "3"


def test_exit_with_live_engines_is_clean():
    result = run_script("""
        import asyncio
        from peregrine import LLM, AsyncLLM, SamplingParams
        llm = LLM(MODEL, device="cpu", max_model_len=256, num_gpu_blocks_override=64)
        print(llm.generate("x", SamplingParams(max_tokens=2), use_tqdm=False)[0].finished)
        engine = AsyncLLM(MODEL, device="cpu", max_model_len=256, num_gpu_blocks_override=64)
        async def main():
            async for out in engine.generate("x", SamplingParams(max_tokens=2), request_id="a"):
                pass
            return out.finished
        print(asyncio.run(main()))
        # No shutdown: the engines stop at exit.
    """, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True"]
    assert result.stderr == ""


def test_the_gil_is_released_while_generating(llm):
    """A Python thread keeps running while generate waits on the engine."""
    counter = 0
    stop = False

    def spin():
        nonlocal counter
        while not stop:
            counter += 1
            time.sleep(0.001)

    t = threading.Thread(target=spin)
    t.start()
    start = time.monotonic()
    llm.generate(["a = "] * 8, SamplingParams(temperature=0, max_tokens=64, ignore_eos=True), use_tqdm=False)
    elapsed = time.monotonic() - start
    stop = True
    t.join()
    assert counter >= max(3, int(elapsed / 0.001 * 0.2)), (counter, elapsed)


def test_generate_from_several_threads(llm):
    results = {}

    def work(i):
        out = llm.generate([f"v{i} = {i}", f"w{i} = "], SamplingParams(temperature=0, max_tokens=8), use_tqdm=False)
        results[i] = [o.outputs[0].text for o in out]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(4):
        alone = llm.generate([f"v{i} = {i}", f"w{i} = "], SamplingParams(temperature=0, max_tokens=8), use_tqdm=False)
        assert results[i] == [o.outputs[0].text for o in alone]
