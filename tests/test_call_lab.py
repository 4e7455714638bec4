"""Lesson 11's world (`inflight.CallLab`): a model server and a fork parent of the call processes,
as a context manager that stops both and removes its folder on exit, at the interpreter's exit,
and, through the lifeline, when the process that started it is killed by SIGKILL."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bughunt import inflight, lifeline
from bughunt.lab.lessons import l11_call_in_flight as cif


@pytest.fixture(scope="module")
def lab():
    return inflight.shared_lab()


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text() \
        .split(")")[-1].split()[0] == "Z"


def wait_until(condition, seconds: float = 30) -> bool:
    """Wait for `condition()` (polled; never a sleep standing in for an event)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


# --- the fork parent ------------------------------------------------------------------------------

def _sockets(pid: int) -> list[str]:
    fds = Path(f"/proc/{pid}/fd")
    return [t for t in (os.readlink(f) for f in fds.iterdir()) if t.startswith("socket:")]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc (Linux)")
def test_the_fork_parent_is_one_thread_and_holds_no_socket_a_child_could_share(lab):
    cif.clean_call()                                  # it has forked at least one call process
    pid = lab.forks.server.proc.pid
    assert lab.forks.alive() and _sockets(pid) == []
    assert len(os.listdir(f"/proc/{pid}/task")) == 1  # fork() copies only the calling thread


def test_a_call_process_forked_from_the_parent_dies_by_a_real_sigkill(lab, tmp_path):
    journal = tmp_path / "j.jsonl"
    killed = lab.forks.run(inflight.call_args(lab.base_url, journal, page=5, crash_at="chunk#2"))
    assert killed.returncode == -signal.SIGKILL
    held = inflight.pending_call(inflight.read_client_journal(journal), 5)
    assert held["chunks"] == 2 and held["prefix"] == cif.answer_of(5)[0]


@pytest.mark.slow
def test_a_call_process_that_outlives_its_timeout_is_killed_and_the_parent_goes_on(lab, tmp_path):
    args = inflight.call_args(lab.base_url, tmp_path / "j.jsonl", page=6, fault="ttfb=30")
    with pytest.raises(subprocess.TimeoutExpired):
        lab.forks.run(args, timeout=1)
    again = lab.forks.run(inflight.call_args(lab.base_url, tmp_path / "k.jsonl", page=6))
    assert again.returncode == 0 and lab.forks.alive()


def test_a_refused_flag_comes_back_as_exit_2_with_the_flag_named(lab, tmp_path):
    done = lab.forks.run(inflight.call_args(lab.base_url, tmp_path / "j.jsonl", page=0))
    assert done.returncode == 2 and "--page" in done.stderr and "Traceback" not in done.stderr



def test_a_call_lab_used_as_a_context_manager_stops_both_processes_and_removes_its_folder():
    with inflight.CallLab() as world:
        server, forks, folder = world.server.pid, world.forks.server.proc.pid, world.dir
        assert world.alive() and folder.is_dir()
    assert not folder.exists() and not world.alive()
    assert wait_until(lambda: gone(server) and gone(forks))
    world.close()                                   # closing twice is harmless


OWNER = """
import sys
from bughunt import inflight
world = inflight.CallLab()
print(world.server.pid, world.forks.server.proc.pid, world.dir, flush=True)
sys.stdin.read()
"""


@pytest.mark.slow
def test_a_process_killed_by_sigkill_leaves_no_server_and_no_folder_behind(tmp_path):
    """nbval ends a notebook's kernel this way: no atexit, no finally runs in it."""
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "TMPDIR": str(tmp_path)})
    server, forks, folder = owner.stdout.readline().split()
    assert Path(folder).is_dir() and not gone(int(server))
    owner.kill()
    owner.wait()
    assert wait_until(lambda: gone(int(server)) and gone(int(forks))
                      and not any(tmp_path.iterdir())), list(tmp_path.iterdir())


@pytest.mark.slow
def test_the_watcher_ends_what_is_still_registered_and_spares_what_was_released(tmp_path):
    kept, left = tmp_path / "released", tmp_path / "left"
    kept.mkdir(), left.mkdir()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                               start_new_session=True)
    spared = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                              start_new_session=True)
    try:
        lifeline.watch([f"+group {sleeper.pid}\n".encode(), f"+group {spared.pid}\n".encode(),
                        f"-group {spared.pid}\n".encode(), f"+dir {left}\n".encode(),
                        f"+dir {kept}\n".encode(), f"-dir {kept}\n".encode(), b"nonsense\n"])
        assert sleeper.wait(timeout=30) == -signal.SIGTERM
        assert spared.poll() is None and kept.is_dir() and not left.exists()
    finally:
        for p in (sleeper, spared):
            p.kill()
            p.wait()
