"""Nothing of the lab is left behind. `make test` runs every notebook under strict nbval the way
a learner's kernels run them (they end by SIGKILL), each process of the run marked by an
environment variable and given temp folders of its own; then nothing of theirs may still run and
their folders must be empty (`tests/tiers.py`, with `tests/leftovers.py`). The lessons that start
servers and fork pools (7, 11, 12, 13) are the ones this catches. Here: that the check sees what
it must, so a leftover fails the run."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from leftovers import MARK, left_behind, marked

pytestmark = pytest.mark.skipif(not Path("/proc/self/environ").exists(),
                                reason="reads the process table from /proc (Linux)")


READY_THEN_WAIT = "import sys; print('ready', flush=True); sys.stdin.read()"


def test_a_marked_process_still_running_and_a_file_left_are_each_named(tmp_path):
    token = uuid.uuid4().hex
    env = {**os.environ, MARK: token}
    # A daemon a notebook forgot: a grandchild in a session of its own, still running.
    proc = subprocess.Popen([sys.executable, "-c", READY_THEN_WAIT], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=env, start_new_session=True)
    (tmp_path / "bughunt-sweep-x").mkdir()
    try:
        assert proc.stdout.readline() == b"ready\n"         # it runs: a state we can see
        assert marked(token) == [proc.pid]
        left = left_behind(token, [tmp_path], grace_s=0)
        assert left[0].startswith(f"still running: {proc.pid}: ") and "sys.stdin.read" in left[0]
        assert left[1:] == [f"left in {tmp_path}: bughunt-sweep-x"]
    finally:
        proc.stdin.close()
        proc.wait()
    (tmp_path / "bughunt-sweep-x").rmdir()
    assert left_behind(token, [tmp_path], grace_s=0) == []     # and nothing, once it has gone


def test_a_process_that_ends_within_the_grace_is_not_counted(tmp_path):
    token = uuid.uuid4().hex
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                            stdin=subprocess.PIPE, env={**os.environ, MARK: token})
    proc.stdin.close()                  # it ends on its own: the check waits for that
    try:
        assert left_behind(token, [tmp_path], grace_s=60) == []
    finally:
        proc.wait()


def test_the_full_tier_runs_every_notebook_under_the_leftovers_check():
    import tiers
    [(name, cmd)] = [t for t in tiers.tiers("full", None) if t[0] == tiers.NOTEBOOKS_TIER]
    built = sorted(str(p.relative_to(tiers.ROOT)) for p in (tiers.ROOT / "notebooks").glob("*.ipynb"))
    assert [a for a in cmd if a.endswith(".ipynb")] == built and "--nbval" in cmd
