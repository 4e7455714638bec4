"""Shared helpers: the worker is always a real subprocess, started the way a learner starts it."""

from __future__ import annotations

import json
import os
import shutil
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


# --- the book, built once per test session -------------------------------------------------------

BOOK_REPOSITORY = "example-org/bughunt-lab"     # for the Binder links; no request is ever made
OFFLINE = '''"""Loaded first by every Python process of the build: no socket connects anywhere."""
import socket


def _refuse(*args, **kwargs):
    raise OSError("the network is switched off for this build (tests/conftest.py)")


socket.socket.connect = _refuse
socket.socket.connect_ex = _refuse
socket.create_connection = _refuse
socket.getaddrinfo = _refuse
'''


def build_book(out: Path, *args: str, offline: Path | None = None,
               timeout: float = 600) -> subprocess.CompletedProcess:
    """`python -m bughunt.book --out OUT ARGS`, as `make book` runs it; with `offline`, a
    folder for a sitecustomize that refuses every network connection of the build's processes."""
    env = dict(os.environ)
    if offline is not None:
        offline.mkdir(parents=True, exist_ok=True)
        (offline / "sitecustomize.py").write_text(OFFLINE)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(offline),
                                                          env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "bughunt.book", "--out", str(out), *args],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout)


@pytest.fixture(scope="session")
def book(tmp_path_factory, worker_id) -> Path:
    """The whole book, built offline from the committed notebooks; returns its html folder.
    Built once per test run: under pytest-xdist the first worker to need it builds it, holding a
    lock in the folder all workers share, and the others read what it built."""
    import fcntl

    pytest.importorskip("myst_nb", reason="the book's tools are missing: make setup-book")
    shared = tmp_path_factory.getbasetemp()
    if worker_id != "master":
        shared = shared.parent                     # the run's folder, above each worker's own
    tmp = shared / "book"
    with open(shared / "book.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (tmp / "built").exists():
            shutil.rmtree(tmp, ignore_errors=True)
            proc = build_book(tmp / "build", "--repository", BOOK_REPOSITORY, "--branch",
                              "main", offline=tmp / "offline")
            assert proc.returncode == 0, proc.stdout + proc.stderr
            (tmp / "built").touch()
    return tmp / "build" / "html"


@pytest.fixture(scope="session")
def worker_id(request) -> str:
    """pytest-xdist's worker name ("gw0", ...), or "master" without it (xdist's own fixture of
    this name takes over when xdist is installed)."""
    return getattr(request.config, "workerinput", {}).get("workerid", "master")


# --- a test run leaves the learner's notebook folder as it found it ------------------------------
#
# Under nbval, lesson 9's `%%writefile` cells write their stores into notebooks/, the kernel's
# folder, as they do for a learner, whose own loop (write a cell, grade the file by name) must
# keep working there. So the run records the folder's top level before the first test and puts
# it back after the last: what appeared is removed, what changed or went is written back (a
# learner's own naive_store.py included). Something a learner adds to the folder while the tests
# run is removed too: run the tests on a checkout you are not working in.

NOTEBOOK_FOLDER = ROOT / "notebooks"


def folder_state(folder: Path) -> dict[str, bytes | None]:
    """The top level of `folder`: each file's bytes, None for a directory (not looked into)."""
    return {p.name: None if p.is_dir() else p.read_bytes() for p in folder.iterdir()}


def put_back(folder: Path, before: dict[str, bytes | None]) -> list[str]:
    """Make the top level of `folder` what it was in `before`; return the names it changed."""
    now = folder_state(folder)
    touched = []
    for name in sorted(set(now) - set(before)):
        path = folder / name
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        touched.append(name)
    for name in sorted(before):
        if name in now and now[name] == before[name]:
            continue
        if before[name] is None:
            (folder / name).mkdir(exist_ok=True)
        else:
            (folder / name).write_bytes(before[name])
        touched.append(name)
    return touched


_NOTEBOOKS_BEFORE: dict[str, bytes | None] = {}


def pytest_sessionstart(session) -> None:
    if not hasattr(session.config, "workerinput"):   # pytest-xdist: the controller only, once
        _NOTEBOOKS_BEFORE.update(folder_state(NOTEBOOK_FOLDER))


def pytest_sessionfinish(session, exitstatus) -> None:
    if _NOTEBOOKS_BEFORE:
        put_back(NOTEBOOK_FOLDER, _NOTEBOOKS_BEFORE)


# --- the tiers (tests/tiers.py) --------------------------------------------------------------------
#
# A test is in the fast tier unless it is marked `slow` (by its own decorator, or here by where it
# is): the notebooks under nbval, the browser tests and the tests of the built book are slow.

def pytest_configure(config) -> None:
    # This process's tests patch the experiment layer on purpose: none of what they measure may
    # reach the claims through the run's folder of results (bughunt/lab/results.py); they read
    # what the notebooks' kernels measured there.
    from bughunt.lab import results
    results.use_disk(write=False)


@pytest.fixture(autouse=True)
def _results_read_again_after_a_reset():
    """A test that reset the lab's cache (`results.reset()`, to measure afresh what it patched)
    stops this process reading the run's folder of results; the next test starts as the first
    did: what that test kept is forgotten (it may be a faked sweep), and the folder is read
    again. Else every later file a worker ran would measure its experiments again."""
    yield
    from bughunt.lab import results
    if not results.reading():
        results.reset()
        results.use_disk(read=True, write=False)


#: The tier a kind of test is counted in, as tests/tiers.py names them.
TIER_OF = {"notebooks": "notebooks", "browser": "book and browser", "book": "book and browser"}


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        path = Path(str(item.fspath))
        kinds = []
        if path.suffix == ".ipynb":
            kinds.append("notebooks")
        elif path.name in ("test_browser.py", "test_layout.py"):
            kinds.append("browser")
        elif "book" in getattr(item, "fixturenames", ()) or item.get_closest_marker("book"):
            kinds.append("book")
        for kind in kinds:
            item.add_marker(kind)
        if kinds:
            item.add_marker("slow")
        # which tier the test is counted in (tests/tiers.py reads it from the JUnit report)
        item.user_properties.append(("tier", TIER_OF.get(kinds[0] if kinds else "", "slow tests")
                                     if kinds or item.get_closest_marker("slow") else "fast tests"))
