"""The fork server starts real, separate worker processes; results match fresh interpreters."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from bughunt import experiment as ex
from bughunt.config import RunConfig
from bughunt.forkserver import ForkServer
from bughunt.world import read_bill

SMALL = RunConfig(store="snapshot", intent=False, idempotency_key=False, pages=4)


def test_a_forked_worker_is_a_separate_process_killed_by_a_real_sigkill(tmp_path):
    server = ForkServer()
    try:
        killed = server.run(ex.worker_args(tmp_path / "r", SMALL, "--crash-at", "5"))
        assert killed.returncode == -signal.SIGKILL
        done = server.run(ex.worker_args(tmp_path / "r", SMALL, "--json"))
        assert done.returncode == 0 and json.loads(done.stdout)["findings"] == [3]
        bad = server.run(["--dir", str(tmp_path / "x"), "--store", "nope"])
        assert bad.returncode == 2 and "--store" in bad.stderr
        for i in range(3):
            server.run(ex.worker_args(tmp_path / f"p{i}", SMALL))
        pids = {c["pid"] for i in range(3) for c in read_bill(tmp_path / f"p{i}")}
        assert len(pids) == 3 and server.proc.pid not in pids     # three processes of their own
    finally:
        server.close()
    assert server.proc.returncode == 0


@pytest.mark.slow
def test_fork_server_and_fresh_interpreters_measure_the_same(monkeypatch):
    keys = ["index", "redone_model_calls", "replayed_events", "duplicate_reports",
            "lost_reports", "three_way_check", "tracker_pages"]
    forked = [{k: getattr(r, k) for k in keys} for r in ex.sweep_records(SMALL)]
    monkeypatch.setenv("BUGHUNT_FORKSERVER", "0")
    fresh = [{k: getattr(r, k) for k in keys} for r in ex.sweep_records(SMALL)]
    assert forked == fresh and sum(r["duplicate_reports"] for r in forked) == 2


def test_a_worker_that_ends_at_once_does_not_stall_the_server(tmp_path):
    server = ForkServer()
    try:
        for i in range(20):   # replies come back faster than they are read
            out = server.run(ex.worker_args(tmp_path / "done", SMALL, "--json"), timeout=10)
            assert out.returncode == 0
    finally:
        server.close()
    assert not os.path.exists(server.tmp.name)


@pytest.mark.skipif(not os.path.exists("/proc/self/environ"), reason="reads /proc (Linux)")
def test_a_server_keeps_its_temp_files_where_its_kill_removes_them(tmp_path):
    # A server killed while it warms up (an interrupted sweep) dies before it can clean up: its
    # warm-up run and Python's probe of the temp dir must be in the directory `kill` removes.
    server = ForkServer(env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        # After a first run the server has surely finished starting (its exec, then its warm-up).
        assert server.run(ex.worker_args(tmp_path / "r", SMALL)).returncode == 0
        environ = open(f"/proc/{server.proc.pid}/environ", "rb").read().split(b"\0")
        assert f"TMPDIR={server.tmp.name}".encode() in environ
    finally:
        server.kill()
    assert not os.path.exists(server.tmp.name)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]       # nothing but the run


@pytest.mark.slow
def test_a_fork_server_removes_its_folder_when_its_caller_is_killed(tmp_path):
    """A notebook kernel is stopped with SIGKILL (nbval, a forced restart): its own cleanup never
    runs. The lifeline ends its fork server and takes its output folder with it."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    caller = subprocess.Popen(
        [sys.executable, "-c", "import sys; from bughunt.forkserver import ForkServer; "
         "s = ForkServer(); s.run(['--help']); print('ran', flush=True); sys.stdin.read()"],
        env={**os.environ, "TMPDIR": str(tmp)}, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True)
    assert caller.stdout.readline() == "ran\n"
    assert [p.name[:13] for p in tmp.iterdir()] == ["bughunt-fork-"]
    caller.kill()
    caller.communicate()
    deadline = time.monotonic() + 60            # a condition to wait for, not a timed assert
    while list(tmp.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert list(tmp.iterdir()) == []
