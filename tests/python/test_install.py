"""The README's set-up command installs the package for this interpreter: a fresh process, outside the checkout
and without PYTHONPATH, can `from peregrine import LLM`."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def test_installed_package_imports_from_anywhere():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", "import peregrine; from peregrine import LLM, SamplingParams; "
                             "print(peregrine.__file__)"], cwd="/", env=env, capture_output=True, text=True)
    if "No module named 'peregrine'" in result.stderr:
        pytest.skip(f"peregrine is not installed for {sys.executable}; scripts/setup.sh installs it")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith(os.path.join("python", "peregrine", "__init__.py"))
