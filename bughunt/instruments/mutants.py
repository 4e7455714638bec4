"""Planted bugs as mutants: each is a named patch to the real source, applied to a temporary copy.

The production modules contain no bug names and no switches. To ask "would the lab catch this
bug?", lesson 8 takes a copy of the package, changes one line of it (a mutant, in the sense of
mutation testing), and runs the same sweeps and the same conformance suite on the copy:

- in a worker process: `code_dir(name)` is a directory to put first on PYTHONPATH (`env(...)`);
- in this process: `load(name)` imports the copy under a name of its own (`bughunt_no_fsync`), so
  the real package stays untouched beside it.

`diff(name)` shows the patch, "this one line is missing", as the lesson prints it.
"""

from __future__ import annotations

import atexit
import difflib
import importlib
import os
import shutil
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from .. import lifeline

PACKAGE = Path(__file__).resolve().parent.parent       # the real bughunt/


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str            # inside the package, e.g. "diskio.py"
    old: str             # exact text, present once
    new: str
    bug: str             # what is wrong, in one sentence
    caught_by: str       # which of the lab's checks should catch it


MUTANTS = {m.name: m for m in (
    Mutant("no-fsync", "diskio.py",
           '        self.fsyncs += 1\n        self.files.fsync(fd, self._paths.get(fd, "?"))\n',
           '        self.fsyncs += 1\n',
           "the door counts an fsync of a file but never makes it",
           "power loss: with fsync always, an acknowledged commit is lost"),
    Mutant("no-dir-fsync", "diskio.py",
           "        self.fsyncs += 1\n        self.files.fsync_dir(directory)\n",
           "        self.fsyncs += 1\n",
           "a new or renamed file's directory entry is never fsynced",
           "power loss: the new name (a renamed snapshot, a new log) can vanish"),
    Mutant("repair-not-idempotent", "stores/log.py",
           '            f.seek(-1, os.SEEK_END)\n            if f.read(1) == b"\\n":\n'
           '                return False\n',
           '            f.seek(-1, os.SEEK_END)\n',
           "the newline repair appends a newline even when the log already ends with one",
           "conformance: repairing twice changes the file again"),
    Mutant("submit-before-intent", "worker.py",
           "            if self.config.intent:\n                self.record_intent(page, key)\n"
           "            self.submit_report(page, key)\n",
           "            self.submit_report(page, key)\n            if self.config.intent:\n"
           "                self.record_intent(page, key)\n",
           "the report is filed before its intent is durable",
           "kill -9 sweep: a kill between them leaves a report no intent knows of"),
    Mutant("no-key", "worker.py",
           "        self.reports_filed += self.tracker.submit(page, self.site.page(page).bug, key)\n",
           "        self.reports_filed += self.tracker.submit(page, self.site.page(page).bug, None)\n",
           "the report is filed without its idempotency key",
           "kill -9 sweep: a redo files a duplicate report"),
    Mutant("no-lock", "worker.py",
           "    acquire_run_lock(run_dir)              # held until this process ends, however it ends\n",
           "",
           "the run lock is never taken",
           "two resumers: both run, and the log forks"),
)}


def _check(name: str) -> Mutant:
    if name not in MUTANTS:
        raise ValueError(f"no mutant {name!r}; the lab has {', '.join(MUTANTS)}")
    mutant = MUTANTS[name]
    text = (PACKAGE / mutant.file).read_text()
    if text.count(mutant.old) != 1:
        raise RuntimeError(f"mutant {name}: {mutant.file} no longer holds the line it patches "
                           "exactly once (the source changed: update the mutant)")
    return mutant


def patched(name: str) -> tuple[str, str]:
    """The mutated file's path inside the package, and its mutated text."""
    mutant = _check(name)
    text = (PACKAGE / mutant.file).read_text()
    return mutant.file, text.replace(mutant.old, mutant.new)


def diff(name: str) -> str:
    """The patch as a unified diff against the real source."""
    mutant = _check(name)
    old = (PACKAGE / mutant.file).read_text().splitlines(keepends=True)
    file, new = patched(name)
    return "".join(difflib.unified_diff(old, new.splitlines(keepends=True),
                                        f"bughunt/{file}", f"bughunt/{file} ({name})", n=2))


_ROOT: list[Path] = []


def _root() -> Path:     # called with _LOCK held
    if not _ROOT:
        _ROOT.append(Path(tempfile.mkdtemp(prefix="bughunt-mutants-")))
        atexit.register(shutil.rmtree, _ROOT[0], True)
        lifeline.watch_dir(_ROOT[0])        # removed even if this process is killed outright
    return _ROOT[0]


def copy_package(dest: Path, name: str | None, package: str = "bughunt") -> Path:
    """Copy the package to dest/package, with mutant `name` applied (None: unchanged)."""
    target = dest / package
    shutil.copytree(PACKAGE, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    if name is not None:
        file, text = patched(name)
        (target / file).write_text(text)
    data = dest / "data"                  # where the copy looks for the site (world.data_dir)
    if not data.exists():
        from ..world import data_dir
        data.symlink_to(data_dir().resolve())
    return dest


_LOCK = threading.Lock()        # sweeps ask for the same copy from many threads at once
_COPIES: dict[str, Path] = {}


def code_dir(name: str) -> Path:
    """A directory holding a `bughunt` package with mutant `name`: put it first on PYTHONPATH."""
    with _LOCK:
        if name not in _COPIES:
            _check(name)
            _COPIES[name] = copy_package(_root() / name, name)
        return _COPIES[name]


def env(code: Path | None) -> dict[str, str]:
    """The environment for a worker process running the code in `code` (None: the real code)."""
    if code is None:
        return dict(os.environ)
    path = os.environ.get("PYTHONPATH")
    # PYTHONSAFEPATH: `python -m` must not put the current directory (maybe a checkout holding the
    # real package) in front of the copy.
    return {**os.environ, "PYTHONPATH": f"{code}{os.pathsep}{path}" if path else str(code),
            "PYTHONSAFEPATH": "1"}


def load(name: str):
    """Import a mutated copy in this process, as its own package (`bughunt_no_fsync`)."""
    package = "bughunt_" + name.replace("-", "_")
    with _LOCK:
        if package in sys.modules:
            return sys.modules[package]
        _check(name)
        dest = _root() / f"inproc-{name}"
        copy_package(dest, name, package)
        sys.path.insert(0, str(dest))
        try:
            return importlib.import_module(package)
        finally:
            sys.path.remove(str(dest))
