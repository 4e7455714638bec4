"""Shared helpers: the worker is always a real subprocess, started the way a learner starts it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bughunt.config import RunConfig

ROOT = Path(__file__).resolve().parent.parent


def bughunt(*args: str, cwd: Path | None = None, input: str | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess:
    """`python -m bughunt ARGS` in a fresh interpreter, from `cwd` (default: somewhere else)."""
    return subprocess.run([sys.executable, "-m", "bughunt", *args], capture_output=True, text=True,
                          cwd=cwd, input=input, timeout=timeout)


def run(run_dir: Path, config: RunConfig = RunConfig(), *extra: str,
        cwd: Path | None = None) -> subprocess.CompletedProcess:
    return bughunt("run", "--dir", str(run_dir), *config.to_args(), *extra, cwd=cwd)


def report(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return tmp_path / "run"
