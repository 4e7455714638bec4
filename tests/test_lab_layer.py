"""The lab layer (`bughunt/lab/`) is the thinnest: it starts no process, server or fork pool of its
own (experiments live below it, as context managers that stop what they start), and it speaks one
vocabulary: every function and class it defines has a name no other module of the package uses
for something else."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "bughunt"
LAB = sorted((PACKAGE / "lab").rglob("*.py"))

#: What starts (or signals) a process, or a server: the experiment layer's business, never the lab's.
STARTS_PROCESSES = {"subprocess", "multiprocessing", "concurrent.futures.process"}
OS_CALLS = {"fork", "forkpty", "system", "popen", "kill", "killpg", "execv", "execve", "execvp",
            "execl", "spawnv", "spawnl", "posix_spawn", "posix_spawnp"}
SERVERS = {"forkserver", "ForkServer", "ForkServerPool", "ServerProcess", "ModelServer", "spawn",
           "serve", "CallLab", "ForkedCalls"}


def lab_modules():
    return [pytest.param(p, id=str(p.relative_to(PACKAGE))) for p in LAB]


def offences(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] in STARTS_PROCESSES
                      or a.name in STARTS_PROCESSES]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module in STARTS_PROCESSES or module.split(".")[0] in STARTS_PROCESSES:
                found.append(module)
            found += [f"{module}.{a.name}" for a in node.names if a.name in SERVERS]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == "os" and node.attr in OS_CALLS:
                found.append(f"os.{node.attr}")
            if node.attr in SERVERS and node.value.id not in ("self",):
                found.append(f"{node.value.id}.{node.attr}")
    return found


@pytest.mark.parametrize("path", lab_modules())
def test_the_lab_starts_no_process_server_or_fork_pool_of_its_own(path):
    assert offences(ast.parse(path.read_text(), str(path))) == []


def test_the_check_catches_what_it_forbids():
    """The checker itself can fail: each of these lines is a way the lab layer could start one."""
    for line in ("import subprocess", "from subprocess import run", "os.fork()",
                 "from ...modelserver import ServerProcess", "from ... import forkserver",
                 "x = inflight.CallLab()", "import multiprocessing.pool", "os.killpg(1, 9)"):
        assert offences(ast.parse(line)), line


def definitions() -> dict[str, list[str]]:
    """Top-level function and class names of every module of the package, and where."""
    where = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not (
                    is_claim_check(node)):
                where[node.name].append(str(path.relative_to(PACKAGE)))
    return where


def is_claim_check(node) -> bool:
    """A lesson's claim check (`@CLAIMS.claim(...)`): its name is the claim's key, which the
    lesson's notebook says by (`CLAIMS.say("key")`), so it is scoped by its lesson's CLAIMS."""
    return any(isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute)
               and d.func.attr == "claim" for d in getattr(node, "decorator_list", []))


#: Names that mean the same role in every module that has one: each lesson's `panel()` (its
#: record's factory) and its panel's figure `panel_plot`; its `practice_problem(seed)` (its
#: record's practice); each program's `main` and `build_parser`; lesson 9's `grade`, the cached
#: form of `grader.grade` a learner calls.
ROLES = {"panel", "panel_plot", "practice_problem", "main", "build_parser", "grade"}


@pytest.mark.slow
def test_every_name_the_lab_defines_means_one_thing_in_the_package():
    clashes = {name: places for name, places in definitions().items()
               if len(places) > 1 and name not in ROLES
               and any(p.startswith("lab/") for p in places)}
    assert clashes == {}
