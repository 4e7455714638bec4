"""Ctrl-C and SIGTERM stop a long command at once: one sentence, exit 130 or 143, no worker left
running, no temporary run directory left behind, no traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from conftest import ROOT

LINUX = Path("/proc/self/environ").exists()


def processes_tagged(tag: str) -> list[str]:
    """Live processes whose environment carries BUGHUNT_TEST_TAG=tag (Linux /proc), with their
    command lines and states."""
    found = []
    for env in Path("/proc").glob("[0-9]*/environ"):
        try:
            if f"BUGHUNT_TEST_TAG={tag}".encode() in env.read_bytes():
                cmd = (env.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                state = (env.parent / "stat").read_text().split(") ")[1][0]
                found.append(f"{env.parent.name} [{state}] {cmd}")
        except OSError:
            pass
    return found


def wait_for(condition, timeout: float = 60.0) -> None:
    """Wait for a condition of the file system (not for a time): poll until it holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("the command never reached the state to interrupt")
        time.sleep(0.01)


def start(args: list[str], tmp: Path, tag: str) -> subprocess.Popen:
    env = {**os.environ, "TMPDIR": str(tmp), "BUGHUNT_RAM_DIR": str(tmp),
           "BUGHUNT_TEST_TAG": tag}
    return subprocess.Popen([sys.executable, "-m", "bughunt", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_dirs_exist(tmp: Path) -> bool:
    """A sweep has started killing workers: its temp dir holds run directories."""
    return any(d.is_dir() and any(d.iterdir()) for d in tmp.glob("bughunt-*")
               if not d.name.startswith("bughunt-fork-"))


@pytest.mark.parametrize("command, signum, code", [
    (["lesson"], signal.SIGINT, 130),
    (["lesson"], signal.SIGTERM, 143),
    (["sweep", "--store", "log", "--pages", "60"], signal.SIGINT, 130),
    (["kill-random", "--tries", "200"], signal.SIGTERM, 143),
    (["frameworks", "--framework", "lab", "--repeat", "20"], signal.SIGTERM, 143),
], ids=["lesson-ctrl-c", "lesson-sigterm", "sweep-ctrl-c", "kill-random-sigterm",
        "frameworks-sigterm"])
def test_an_interrupted_command_stops_at_once_and_leaves_nothing(tmp_path, command, signum, code):
    tag = uuid.uuid4().hex
    proc = start(command, tmp_path, tag)
    wait_for(lambda: run_dirs_exist(tmp_path) or proc.poll() is not None)
    assert proc.poll() is None, proc.stderr.read()
    t0 = time.monotonic()
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=30)
    elapsed = time.monotonic() - t0
    assert proc.returncode == code, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "interrupted" in lines[0] if code == 130 else "terminated" in lines[0], lines[0]
    assert list(tmp_path.iterdir()) == [], "temporary directories were left behind"
    if LINUX:
        assert processes_tagged(tag) == [], "a worker or fork server is still running"
    assert elapsed < 5, f"took {elapsed:.1f} s to stop"      # make bench holds it to 1 s


def test_an_interrupted_worker_says_so_and_its_run_resumes(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "bughunt", "run", "--dir", str(run_dir),
                             "--latency-ms", "60000", "--ready", "--json"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr.readline().startswith("bughunt: ready at")
    wait_for(lambda: (run_dir / "bill.jsonl").exists()
             and (run_dir / "bill.jsonl").read_text().count("\n") >= 1)
    proc.send_signal(signal.SIGINT)            # during page 1's wait for the model
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "Traceback" not in err
    assert "interrupted" in err and f"--dir {run_dir}" in err
    resumed = subprocess.run([sys.executable, "-m", "bughunt", "run", "--dir", str(run_dir),
                              "--json"], capture_output=True, text=True, cwd=ROOT)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["findings"] == [3, 7, 10]
