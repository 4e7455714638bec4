"""Planted bugs as mutants: each is a named patch to the real source, applied to a temporary copy.

The production modules contain no bug names and no switches. To ask "would the lab catch this
bug?", lesson 8 takes a copy of the package, changes one statement of it (a mutant, in the sense of
mutation testing), and runs the same sweeps and the same conformance suite on the copy:

- in a worker process: `code_dir(name)` is a directory to put first on PYTHONPATH (`env(...)`);
- in this process: `load(name)` imports the copy under a name of its own (`bughunt_no_fsync`), so
  the real package stays untouched beside it.

A mutant finds its target through the syntax tree (`ast`), not through the text: the function or
method it names, then the statements in it that parse to the same tree as its `old` code. Comments,
blank lines and line breaks inside a statement do not change the tree, so editing them leaves every
mutant working; changing what the code does makes the mutant refuse, naming the function.

`diff(name)` shows the patch, "this one line is missing", as the lesson prints it.
"""

from __future__ import annotations

import ast
import atexit
import difflib
import importlib
import os
import shutil
import sys
import tempfile
import textwrap
import threading
from dataclasses import dataclass
from pathlib import Path

from .. import lifeline

PACKAGE = Path(__file__).resolve().parent.parent       # the real bughunt/


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str            # inside the package, e.g. "diskio.py"
    function: str        # where the target is: a function, or Class.method
    old: str             # the statements to replace, as code (one or more, in a row, once)
    new: str             # what replaces them ("" deletes them)
    bug: str             # what is wrong, in one sentence
    caught_by: str       # which of the lab's checks should catch it


MUTANTS = {m.name: m for m in (
    Mutant("no-fsync", "diskio.py", "Door._fsync",
           'self.files.fsync(fd, self._paths.get(fd, "?"))', "",
           "the door counts an fsync of a file but never makes it",
           "power loss: with fsync always, an acknowledged commit is lost"),
    Mutant("no-dir-fsync", "diskio.py", "Door._fsync_dir",
           "self.files.fsync_dir(directory)", "",
           "a new or renamed file's directory entry is never fsynced",
           "power loss: the new name (a renamed snapshot, a new log) can vanish"),
    Mutant("repair-not-idempotent", "stores/log.py", "ensure_newline_terminated",
           'if f.read(1) == b"\\n":\n    return False', "",
           "the newline repair appends a newline even when the log already ends with one",
           "conformance: repairing twice changes the file again"),
    Mutant("submit-before-intent", "worker.py", "Agent.run_page",
           "if self.config.intent:\n    self.record_intent(page, key)\n"
           "self.submit_report(page, key)",
           "self.submit_report(page, key)\nif self.config.intent:\n"
           "    self.record_intent(page, key)",
           "the report is filed before its intent is durable",
           "kill -9 sweep: a kill between them leaves a report no intent knows of"),
    Mutant("no-key", "worker.py", "Agent.submit_report",
           "self.reports_filed += self.tracker.submit(page, self.site.page(page).bug, key)",
           "self.reports_filed += self.tracker.submit(page, self.site.page(page).bug, None)",
           "the report is filed without its idempotency key",
           "kill -9 sweep: a redo files a duplicate report"),
    Mutant("no-lock", "worker.py", "claim_run_dir",
           "acquire_run_lock(run_dir)", "",
           "the run lock is never taken",
           "two resumers: both run, and the log forks"),
)}


class TargetGone(RuntimeError):
    """The source no longer holds what a mutant patches (its function, or its statements once)."""


def _tree(code: str) -> list[str]:
    """Statements as syntax trees, without positions: what the code does, not how it is laid out."""
    return [ast.dump(node) for node in ast.parse(textwrap.dedent(code)).body]


def _function(module: ast.Module, qualname: str) -> ast.AST | None:
    scope: ast.AST = module
    for part in qualname.split("."):
        scope = next((node for node in ast.iter_child_nodes(scope)
                      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                      and node.name == part), None)
        if scope is None:
            return None
    return scope


def _blocks(node: ast.AST):
    """Every list of statements inside `node` (bodies, else branches, handlers, cases)."""
    for child in ast.walk(node):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(child, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield block


def locate(mutant: Mutant, text: str) -> tuple[int, int, int]:
    """Where `mutant.old` is in `text`: (first line, last line, indent), lines counted from 1.

    Raises TargetGone if the function is missing, or the statements are not in it exactly once."""
    function = _function(ast.parse(text), mutant.function)
    if function is None:
        raise TargetGone(f"mutant {mutant.name}: {mutant.file} has no {mutant.function} any more "
                         "(the source changed: update the mutant)")
    want = _tree(mutant.old)
    found = [(block[i], block[i + len(want) - 1]) for block in _blocks(function)
             for i in range(len(block) - len(want) + 1)
             if [ast.dump(s) for s in block[i:i + len(want)]] == want]
    if len(found) != 1:
        raise TargetGone(f"mutant {mutant.name}: {mutant.function} in {mutant.file} "
                         f"{'no longer holds' if not found else 'holds more than once'} the "
                         "statements it patches (the source changed: update the mutant)")
    first, last = found[0]
    lines = text.splitlines()
    before = lines[first.lineno - 1].encode()[:first.col_offset]       # offsets count bytes
    after = lines[last.end_lineno - 1].encode()[last.end_col_offset:].strip()
    if before.strip() or not (after == b"" or after.startswith(b"#")):
        raise TargetGone(f"mutant {mutant.name}: in {mutant.function} of {mutant.file}, the "
                         "statements it patches share a line with other code")
    return first.lineno, last.end_lineno, first.col_offset


def apply(mutant: Mutant, text: str) -> str:
    """`text` (the source of `mutant.file`) with the mutant's statements replaced, line by line:
    the lines of the old statements (with any comment at their end) give way to the new code at
    the same indent; every other line stays as it was."""
    first, last, indent = locate(mutant, text)
    lines = text.splitlines(keepends=True)
    new = [" " * indent + line + "\n" for line in textwrap.dedent(mutant.new).splitlines()]
    mutated = "".join(lines[:first - 1] + new + lines[last:])
    try:
        ast.parse(mutated)
    except SyntaxError as e:
        raise TargetGone(f"mutant {mutant.name}: the patched {mutant.file} would not parse "
                         f"(line {e.lineno}: {e.msg})") from None
    return mutated


def _check(name: str) -> Mutant:
    if name not in MUTANTS:
        raise ValueError(f"no mutant {name!r}; the lab has {', '.join(MUTANTS)}")
    mutant = MUTANTS[name]
    locate(mutant, (PACKAGE / mutant.file).read_text())
    return mutant


def patched(name: str) -> tuple[str, str]:
    """The mutated file's path inside the package, and its mutated text."""
    mutant = _check(name)
    return mutant.file, apply(mutant, (PACKAGE / mutant.file).read_text())


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
