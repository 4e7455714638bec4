"""Nothing of the lab is left behind: the lessons that start servers and fork pools (11, the call in
flight: a model server and a fork server; 12, the stores you would reach for first: strace, the
traced programs and their checkers; 13, the closing: every kind of sweep and lesson 11's servers
again) run under strict nbval exactly as `make test` runs them, whose kernels end by
SIGKILL; then no process of theirs runs and nothing of theirs is in their temp dir.

Other engineers' lab processes run on this machine at the same time, so this run's are recognised
by a marker only they carry: an environment variable every process of the run inherits (read from
/proc/PID/environ), and a TMPDIR of their own (BUGHUNT_RAM_DIR empty: sweeps use it too).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ["notebooks/11_call_in_flight.ipynb", "notebooks/12_first_stores.ipynb",
             "notebooks/13_closing.ipynb"]
MARK = "BUGHUNT_TEST_RUN"


def marked(token: str) -> list[int]:
    """The pids whose environment carries `MARK=token` (processes of other users, or that end
    while we look, are skipped)."""
    needle = f"{MARK}={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def describe(pids: list[int]) -> list[str]:
    out = []
    for pid in pids:
        try:
            out.append(f"{pid}: " + Path(f"/proc/{pid}/cmdline").read_bytes()
                       .replace(b"\0", b" ").decode(errors="replace").strip())
        except OSError:
            pass
    return out


@pytest.mark.skipif(not Path("/proc/self/environ").exists(),
                    reason="reads the process table from /proc (Linux)")
def test_the_server_lessons_leave_no_process_and_no_temp_file(tmp_path):
    token = uuid.uuid4().hex
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, MARK: token, "TMPDIR": str(scratch), "BUGHUNT_RAM_DIR": "",
           "PYTHONHASHSEED": "0"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval",
         "--nbval-current-env", "--nbval-sanitize-with", "notebooks/sanitize.cfg",
         "--nbval-cell-timeout=300", "--nbval-kernel-startup-timeout=120", *NOTEBOOKS],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    # Whatever the lab left is stopped by the lab, not by us: wait (a condition, not a sleep for
    # timing) for its processes to go, and fail with their command lines if they do not.
    deadline = time.monotonic() + 60
    while marked(token) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = describe(marked(token))
    assert not left, "still running:\n" + "\n".join(left)
    assert sorted(p.name for p in scratch.iterdir()) == []
