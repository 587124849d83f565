"""Fixtures of the Python package's tests (run with Debian's pytest: /usr/bin/python3 -m pytest tests/python).

The package under test is this checkout's build: $PEREGRINE_PYTHON_DIR, else build/current/python (what
scripts/setup.sh builds), put first on sys.path so an installed copy elsewhere cannot shadow it. Tests that need
../shared (transformers references) skip with a message where it is absent.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYTHON_DIR = Path(os.environ.get("PEREGRINE_PYTHON_DIR", ROOT / "build" / "current" / "python"))
BIN = Path(os.environ.get("PEREGRINE_BIN", ROOT / "build" / "current" / "peregrine"))
MODEL = ROOT / "models" / "pycoder-tiny"
CHAT_TEMPLATE = ROOT / "tests" / "e2e" / "fixtures" / "server_chat_template.jinja"

if not (PYTHON_DIR / "peregrine" / "__init__.py").exists():
    raise pytest.UsageError(f"no built package at {PYTHON_DIR}; run scripts/setup.sh (or set PEREGRINE_PYTHON_DIR)")
sys.path.insert(0, str(PYTHON_DIR))


def shared_dir() -> Path | None:
    env = os.environ.get("PEREGRINE_SHARED_DIR")
    for candidate in ([Path(env)] if env else []) + [ROOT.parent / "shared"]:
        if (candidate / "models").is_dir():
            return candidate
    return None


@pytest.fixture(scope="session")
def model_path() -> str:
    return str(MODEL)


@pytest.fixture(scope="session")
def llm():
    """One engine for the session's tests (CPU, fp32: the path the transformers references are compared on)."""
    from peregrine import LLM

    engine = LLM(str(MODEL), device="cpu", max_model_len=512, max_num_seqs=32, num_gpu_blocks_override=1024,
                 generation_config="vllm")
    yield engine
    engine.shutdown()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, proc: subprocess.Popen, port: int) -> None:
        self.proc = proc
        self.url = f"http://127.0.0.1:{port}"

    def post(self, path: str, body: dict) -> dict:
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as resp:
            return json.loads(resp.read())


@pytest.fixture(scope="session")
def server():
    """`peregrine serve` on pycoder-tiny (CPU, the session LLM's settings) with the e2e tests' chat template."""
    if not BIN.exists():
        pytest.skip(f"no peregrine binary at {BIN}")
    port = free_port()
    proc = subprocess.Popen([str(BIN), "serve", str(MODEL), "--port", str(port), "--device", "cpu",
                             "--max-model-len", "512", "--num-gpu-blocks-override", "1024",
                             "--generation-config", "vllm", "--chat-template", str(CHAT_TEMPLATE)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                break
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"peregrine serve exited with {proc.returncode}: {proc.stderr.read()}")
            if time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("peregrine serve did not start in 120 s")
            time.sleep(0.1)
    yield Server(proc, port)
    proc.terminate()
    proc.wait(timeout=30)
