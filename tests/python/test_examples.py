"""examples/*.py (vLLM's offline examples with `vllm` replaced by `peregrine`) run to the end on pycoder-tiny."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import PYTHON_DIR, ROOT

EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def test_examples_exist():
    names = {p.name for p in EXAMPLES}
    assert {"basic.py", "chat.py", "logprobs.py", "parallel_sampling.py", "async_streaming.py"} <= names


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(example):
    imports = [line for line in example.read_text().splitlines() if line.startswith(("import ", "from "))]
    assert not [line for line in imports if "vllm" in line]
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR))
    result = subprocess.run([sys.executable, str(example)], cwd="/", env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()
    if example.name == "parallel_sampling.py":
        assert sum(line.startswith("[") for line in result.stdout.splitlines()) == 4
    if example.name == "async_streaming.py":
        assert "[search] finished" in result.stdout and "[queue] finished" in result.stdout
