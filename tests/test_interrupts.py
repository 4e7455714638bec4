"""Ctrl-C and SIGTERM stop a long command at once: one sentence, exit 130 or 143, no worker left
running, no temporary run directory left behind, no traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
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


def kill_tagged(tag: str) -> None:
    """SIGKILL what a hung command left (found by its tag, never by name)."""
    for line in processes_tagged(tag):
        try:
            os.kill(int(line.split()[0]), signal.SIGKILL)
        except OSError:
            pass


def run_dirs(tmp: Path) -> list[Path]:
    return [r for d in tmp.glob("bughunt-*")
            if d.is_dir() and not d.name.startswith("bughunt-fork-") for r in d.iterdir()]


# The moments a test interrupts at, each a state of the command's temp dir the test sees happen
# (never a sleep):
#   "start"    the first run directory exists: the sweep has submitted its jobs and its fork
#              servers are still starting (the moment an interrupt used to hang the lesson, its
#              threads waiting forever for locks the interrupted main thread held)
#   "running"  a worker has billed a model call: workers are running
MOMENTS = {
    "start": lambda tmp: bool(run_dirs(tmp)),
    "running": lambda tmp: any((r / "bill.jsonl").exists() for r in run_dirs(tmp)),
}


@pytest.mark.parametrize("command, signum, code, moment", [
    (["lesson"], signal.SIGINT, 130, "start"),
    (["lesson"], signal.SIGTERM, 143, "start"),
    (["lesson"], signal.SIGINT, 130, "running"),
    (["lesson"], signal.SIGTERM, 143, "running"),
    (["sweep", "--store", "log", "--pages", "60"], signal.SIGINT, 130, "running"),
    (["kill-random", "--tries", "200"], signal.SIGTERM, 143, "start"),
    (["frameworks", "--framework", "lab", "--repeat", "20"], signal.SIGTERM, 143, "start"),
], ids=["lesson-ctrl-c", "lesson-sigterm", "lesson-ctrl-c-running", "lesson-sigterm-running",
        "sweep-ctrl-c", "kill-random-sigterm", "frameworks-sigterm"])
def test_an_interrupted_command_stops_and_leaves_nothing(tmp_path, command, signum, code, moment):
    """How fast it stops is `make bench`'s (bughunt/bench.py); here only that it stops, with
    its one sentence and exit code, and leaves nothing. The 60 s are a guard against a hang."""
    tag = uuid.uuid4().hex
    proc = start(command, tmp_path, tag)
    try:
        wait_for(lambda: MOMENTS[moment](tmp_path) or proc.poll() is not None)
        assert proc.poll() is None, proc.stderr.read()
        proc.send_signal(signum)
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{command} did not stop within 60 s of the signal; still "
                                 f"running: {processes_tagged(tag)}") from None
    finally:
        kill_tagged(tag)
    assert proc.returncode == code, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "interrupted" in lines[0] if code == 130 else "terminated" in lines[0], lines[0]
    assert list(tmp_path.iterdir()) == [], "temporary directories were left behind"
    if LINUX:
        assert processes_tagged(tag) == [], "a worker or fork server is still running"


SHARDS = 4


@pytest.mark.slow
@pytest.mark.parametrize("target", ["in_parallel", "frameworks_wait"])
def test_a_signal_at_any_line_of_a_sweeps_wait_stops_it_and_leaves_no_thread(tmp_path, target):
    """The lost-signal hang, made deterministic: the sweep's wait for its threads is run once for
    every line its main thread runs, with SIGINT's handler called at that line (as a signal
    arriving there calls it). Each run must end interrupted, with no thread left and SIGINT still
    acted on afterwards. Raising in the middle of concurrent.futures' waits instead left locks
    held that the threads needed, a RuntimeError, or threads never joined."""
    # The runs of one process mostly wait for its threads: SHARDS processes at once, each taking
    # every SHARDS-th line, cover every line in a fraction of the wall time.
    procs = [subprocess.Popen([sys.executable, str(ROOT / "tests" / "interrupt_every_line.py"),
                               target, "--shard", f"{k}/{SHARDS}"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=ROOT,
                              env={**os.environ, "TMPDIR": str(tmp_path),
                                   "BUGHUNT_RAM_DIR": str(tmp_path)})
             for k in range(SHARDS)]
    try:
        ended = [p.communicate(timeout=600) for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()
    for (out, err), p in zip(ended, procs):
        assert p.returncode == 0, out + err[-3000:]
    seen = [json.loads(out) for out, _ in ended]
    assert sum(s["interrupted"] for s in seen) > 100 and all(s["wrong"] == 0 for s in seen), seen
    assert list(tmp_path.iterdir()) == [], "an interrupted run left its temp dir"


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


@pytest.mark.parametrize("delivered_to", ["any thread", "another thread"])
def test_a_notebooks_interrupt_during_a_slow_forked_worker_is_raised_and_kills_it(tmp_path,
                                                                                 delivered_to):
    """A notebook's Ctrl-C (KeyboardInterrupt, in the main thread) while a forked worker waits 60 s
    for its model: the interrupt is what is raised, and the worker and its fork server are gone.
    Closing the server instead waited for the worker, then raised TimeoutExpired 10 s later.
    The kernel may hand the signal to any thread (kill(2)); "another thread": the main thread
    blocks it, so it must go to the one that sends it, and Python's flag alone tells the main
    thread, whose wait for the worker must notice it (it once waited out its whole timeout)."""
    tag = uuid.uuid4().hex
    block = ("signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})"
             if delivered_to == "another thread" else "pass")
    script = textwrap.dedent(f"""
        import os, signal, threading, time
        from pathlib import Path
        from bughunt import experiment
        from bughunt.config import RunConfig
        run = Path({str(tmp_path / "run")!r})
        signal.signal(signal.SIGINT, signal.default_int_handler)   # as a kernel's own handler

        def interrupt_once_billed():          # the worker is inside page 1's model call
            while not (run / "bill.jsonl").exists():
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGINT)

        threading.Thread(target=interrupt_once_billed, daemon=True).start()
        {block}
        try:
            experiment.run_worker(run, RunConfig(), extra=("--latency-ms", "60000"))
        except KeyboardInterrupt:
            print("KeyboardInterrupt")
        except BaseException as e:
            print(type(e).__name__)
    """)
    env = {**os.environ, "TMPDIR": str(tmp_path), "BUGHUNT_TEST_TAG": tag}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=100)       # the worker's own limit: 120 s
    assert proc.stdout.strip() == "KeyboardInterrupt", proc.stdout + proc.stderr
    if LINUX:
        assert processes_tagged(tag) == [], "the worker or its fork server is still running"
    assert [p.name for p in tmp_path.iterdir()] == ["run"], "the fork server left its folder"


def test_an_interrupt_as_the_boundary_starts_its_supervisor_leaves_nothing(tmp_path):
    """SIGINT arriving the moment the boundary's supervisor exists (delivered from inside Popen's
    return): the boundary stops with Interrupted, no traceback of its own or of the supervisor's,
    no process, no folder. It used to be acted on before the supervisor had its orders: an
    AttributeError in close, the supervisor's JSONDecodeError, the folder left in TMPDIR."""
    tag = uuid.uuid4().hex
    script = textwrap.dedent(f"""
        import os, signal, subprocess, sys
        from unittest import mock
        from bughunt.boundary import Boundary
        from bughunt.interrupts import Interrupted, interruptible

        real = subprocess.Popen

        def popen_then_interrupt(*args, **kwargs):
            proc = real(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGINT)
            return proc

        try:
            with interruptible():
                with Boundary(paths=[{str(ROOT / "tests")!r}]) as b:
                    with mock.patch.object(subprocess, "Popen", popen_then_interrupt):
                        b.call("boundary_jobs:sleeps", {{"seconds": 60}}, timeout=120)
        except Interrupted:
            print("Interrupted")
    """)
    env = {**os.environ, "TMPDIR": str(tmp_path), "BUGHUNT_RAM_DIR": str(tmp_path),
           "BUGHUNT_TEST_TAG": tag}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=120)
    assert proc.stdout.strip() == "Interrupted", proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    if LINUX:
        assert processes_tagged(tag) == [], "the supervisor or its child is still running"
    assert list(tmp_path.iterdir()) == [], "the boundary's folder was left behind"
