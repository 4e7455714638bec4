"""Lesson 9's boundary: learner code runs in a child process the lab controls, behind a fence.

The table below is a learner's (and a careless or hostile learner's) stores, each graded as the
notebook grades them: what the store does (prints, exits, hangs, forks, writes outside its run
directory, flips the fence, returns the wrong thing) and the verdict and hint it must get. After
each grade, nothing the grade started is running (found by an environment marker this test sets,
never by process name) and nothing is left in the test's own temporary folder.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from bughunt import grader
from bughunt.boundary import Boundary, Limits, Printed, problem

ROOT = Path(__file__).resolve().parent.parent
LINUX = sys.platform.startswith("linux")

GOOD = '''
import json, os, signal, subprocess, sys, time
from pathlib import Path
from bughunt.events import initial_state
from bughunt.stores import Recovered, Repairs

OUTSIDE = Path(os.environ["BUGHUNT_TEST_OUTSIDE"])


class Good:
    """A passing store: a temp file, fsynced, renamed, and the directory fsynced."""
    name = "good"

    def __init__(self, run_dir, config, door):
        self.path, self.files = run_dir / "state.json", door.files

    def load(self):
        if not self.path.exists():
            return Recovered(initial_state())
        return Recovered(json.loads(self.path.read_bytes()))

    def open_for_append(self):
        return Repairs()

    def commit(self, state, event, *, mid):
        tmp = self.path.with_name("state.json.tmp")
        fd = self.files.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        self.files.write(fd, json.dumps(state).encode(), str(tmp))
        self.files.fsync(fd, str(tmp))
        self.files.close(fd)
        mid()
        self.files.rename(tmp, self.path)
        self.files.fsync_dir(self.path.parent)

    def close(self):
        pass
'''

SIGNATURES = {"__init__": "(self, run_dir, config, door)", "load": "(self)",
              "open_for_append": "(self)", "commit": "(self, state, event, *, mid)",
              "close": "(self)"}
AFTER = {"__init__": "super().__init__(run_dir, config, door)", "load": "return super().load()",
         "open_for_append": "return super().open_for_append()",
         "commit": "super().commit(state, event, mid=mid)", "close": "super().close()"}


def method(name: str, *body: str) -> str:
    """A method of a subclass of Good: `body`, then what Good does."""
    lines = "\n".join(f"    {b}" for b in body)
    return f"def {name}{SIGNATURES[name]}:\n{lines}\n    {AFTER[name]}"


OUT = "OUTSIDE / 'x.txt'"
#: class name -> (its methods, expected problem kind or None (passes), words in the verdict,
#: the hint's lesson, the grade's settings)
ROWS = {
    "PrintsStdout": (method("commit", "print('debug', event['seq'])"), None,
                     "What the store printed on stdout", 10, {}),
    "PrintsStderr": (method("load", "print('a warning', file=sys.stderr)"), None,
                     "What the store printed on stderr", 10, {}),
    "SlowWrites": (method("commit", "time.sleep(0.1)"), None, "Passes.", 10,
                   {"operation_timeout": 1.0}),
    **{f"Exit0{m.title().replace('_', '')}": (method(m, "sys.exit(0)"), "exit",
                                              f"sys.exit(0), in Exit0{m.title().replace('_', '')}"
                                              f".{m}", 9, {}) for m in SIGNATURES},
    **{f"Exit3{m.title().replace('_', '')}": (method(m, "sys.exit(3)"), "exit",
                                              f"sys.exit(3), in Exit3{m.title().replace('_', '')}"
                                              f".{m}", 9, {}) for m in SIGNATURES},
    **{f"HardExit{m.title().replace('_', '')}": (method(m, "os._exit(0)"), "exit",
                                                 f"os._exit(0), in HardExit"
                                                 f"{m.title().replace('_', '')}.{m}", 9, {})
       for m in SIGNATURES},
    "RaisesInInit": (method("__init__", "raise KeyError('nope')"), "exception",
                     "RaisesInInit.__init__ raised KeyError: 'nope' (bad.py, line", 9, {}),
    "RaisesBase": (method("load", "raise BaseException('why not')"), "exception",
                   "raised BaseException: why not, in RaisesBase.load", 9, {}),
    "Spins": (method("commit", "while True:", "    pass"), "timeout",
              "Spins.commit (event 1: page_done, page 1) did not return within 2 s", 9,
              {"operation_timeout": 2.0}),
    "Sleeps": (method("load", "time.sleep(10 ** 6)"), "timeout",
               "Sleeps.load did not return within 2 s", 9, {"operation_timeout": 2.0}),
    "StopsItself": (method("load", "os.kill(os.getpid(), signal.SIGSTOP)"), "sigstop",
                    "stopped its own process (SIGSTOP), in StopsItself.load", 9, {}),
    "KillsItself": (method("load", "os.kill(os.getpid(), signal.SIGKILL)"), "signal",
                    "sent SIGKILL to its own process, in KillsItself.load", 9, {}),
    "ChildNewSession": (method("__init__", "subprocess.Popen(['sleep', '60'], "
                                           "start_new_session=True)"), "refused",
                        "the store tried to start a process (subprocess.Popen: sleep 60), in "
                        "ChildNewSession.__init__", 9, {}),
    "ChildSameGroup": (method("__init__", "subprocess.Popen(['sleep', '60'])"), "refused",
                       "start a process (subprocess.Popen: sleep 60)", 9, {}),
    "DoubleFork": (method("__init__", "if os.fork() == 0:", "    os.setsid()",
                          "    if os.fork() == 0:", "        os.execvp('sleep', ['sleep', '60'])",
                          "    os._exit(0)"), "refused",
                   "the store tried to fork its process (os.fork)", 9, {}),
    "WritesOpen": (method("commit", f"open({OUT}, 'w').write('x')"), "refused",
                   "to write", 9, {}),
    "WritesOsOpen": (method("commit", f"os.close(os.open({OUT}, os.O_WRONLY | os.O_CREAT))"),
                     "refused", "to write", 9, {}),
    "WritesPathlib": (method("commit", f"({OUT}).write_text('x')"), "refused", "to write", 9, {}),
    "WritesShutil": (method("commit", "import shutil",
                            f"shutil.copyfile(__file__, {OUT})"), "refused", "to copy a file to",
                     9, {}),
    "WritesSubprocess": (method("commit", f"subprocess.run(['sh', '-c', 'echo x > {{}}'"
                                          f".format({OUT})])"), "refused",
                         "start a process (subprocess.Popen: sh -c echo x >", 9, {}),
    "WritesCtypes": (method("commit", "import ctypes", "libc = ctypes.CDLL(None)",
                            f"fd = libc.open(str({OUT}).encode(), 65, 0o644)",
                            "libc.write(fd, b'x', 1)"), "refused",
                     "load a C library or function through ctypes", 9, {}),
    "FlipsTheFence": (method("commit", "from bughunt.boundary import fence, child",
                             "fence._INSTALLED.clear()",
                             "child._LOADED.clear()",
                             "fence.Refused = Exception",
                             "os.path.realpath = lambda p, **k: str(self.path.parent)",
                             "import posixpath; posixpath.realpath = os.path.realpath",
                             f"open({OUT}, 'w').write('x')"), "refused", "to write", 9, {}),
    "SignalsAnother": (method("load", "os.kill(os.getppid(), signal.SIGWINCH)"), "refused",
                       "to signal process", 9, {}),
    "LoadReturnsNone": (method("load", "return None"), "returns",
                        "LoadReturnsNone.load() returned None; the contract says it returns a "
                        "Recovered", 9, {}),
    "LoadReturnsText": (method("load", "return Recovered('hello')"), "returns",
                        "returned a Recovered whose state is 'hello' (a str)", 9, {}),
    "LoadReturnsNotes": (method("load", "r = super().load()", "r.notes = 5", "return r"),
                         "returns", "whose notes is 5 (an int); the contract says notes is a "
                                    "list of strings", 9, {}),
    "OpenReturnsNone": (method("open_for_append", "return None"), "returns",
                        "OpenReturnsNone.open_for_append() returned None", 9, {}),
    "CommitReturns": (method("commit", "super().commit(state, event, mid=mid)", "return 5"),
                      "returns", "CommitReturns.commit() returned 5 (an int); the contract says "
                                 "it returns None", 9, {}),
    "CloseReturns": (method("close", "return 'closed'"), "returns",
                     "CloseReturns.close() returned 'closed' (a str)", 9, {}),
    "RunsOutOfMemory": (method("load", "x = bytes(3 << 30)"), "memory",
                        "ran out of memory (MemoryError", 9, {}),
}
#: store files of their own: (source, class, kind, words, lesson)
FILES = {
    "megabytes.py": ("from good import Good\nfor i in range(20000):\n    print('x' * 50, i)\n",
                     "Good", None, "more lines", 10),
    "exit0_import.py": ("import sys\nsys.exit(0)\n", "Good", "exit",
                        "sys.exit(0), in importing exit0_import.py", 9),
    "exit3_import.py": ("import sys\nsys.exit(3)\n", "Good", "exit",
                        "sys.exit(3), in importing exit3_import.py", 9),
    "hard_exit_import.py": ("import os\nos._exit(0)\n", "Good", "exit",
                            "os._exit(0), in importing hard_exit_import.py", 9),
    "syntax.py": ("class Good:\n    def load(self) return 1\n", "Good", "load",
                  "syntax.py:2: expected ':'", 9),
    "missing.py": ("from good import Good\n", "Nope", "load", "missing.py has no class Nope", 9),
}


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("stores")
    (folder / "good.py").write_text(GOOD)
    body = GOOD + "".join(f"\n\nclass {name}(Good):\n{textwrap.indent(methods, '    ')}\n"
                          for name, (methods, *_rest) in ROWS.items())
    (folder / "bad.py").write_text(body)
    for name, (source, *_rest) in FILES.items():
        (folder / name).write_text(source)
    return folder


@pytest.fixture
def sealed(tmp_path, monkeypatch):
    """A temporary folder and an environment marker of this test's own: afterwards, no process
    carries the marker and the folder holds nothing the grade left."""
    marker = uuid.uuid4().hex
    tmp = tmp_path / "tmp"
    outside = tmp_path / "outside"
    tmp.mkdir(), outside.mkdir()
    monkeypatch.setenv("BUGHUNT_TEST_TAG", marker)
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setenv("BUGHUNT_RAM_DIR", str(tmp))
    monkeypatch.setenv("BUGHUNT_TEST_OUTSIDE", str(outside))
    yield {"marker": marker, "tmp": tmp, "outside": outside}
    assert tagged(marker) == [], "a process the grade started is still running"
    assert list(tmp.iterdir()) == [], "the grade left files in its temporary folder"
    assert list(outside.iterdir()) == [], "the store wrote outside its run directory"


def tagged(marker: str) -> list[str]:
    """Live processes whose environment carries BUGHUNT_TEST_TAG=marker (Linux /proc)."""
    if not LINUX:
        return []
    found = []
    for env in Path("/proc").glob("[0-9]*/environ"):
        try:
            if f"BUGHUNT_TEST_TAG={marker}".encode() in env.read_bytes():
                state = (env.parent / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z" and int(env.parent.name) != os.getpid():
                    found.append(env.parent.name)
        except OSError:
            pass
    return found


SMALL = {"pages": 1, "conform_timeout": 60, "sweep_timeout": 90}


@pytest.mark.parametrize("name", list(ROWS) + list(FILES))
def test_each_store_gets_the_verdict_its_behaviour_deserves(stores, sealed, name):
    if name in ROWS:
        _, kind, words, lesson, settings = ROWS[name]
        spec = f"{stores / 'bad.py'}:{name}"
    else:
        _, cls, kind, words, lesson = FILES[name]
        spec, settings = f"{stores / name}:{cls}", {}
    g = grader.grade(spec, **{**SMALL, **settings})
    said = str(g)
    assert [p.kind for p in g.problems][:1] == ([kind] if kind else []), said
    assert words in said, said
    assert g.hint.lesson == lesson, said
    assert g.passed == (kind is None), said
    words_only = said.split(":", 1)[1]
    assert "Traceback" not in said and str(stores) not in words_only, said
    assert str(sealed["tmp"]) not in said, said
    if kind == "refused":
        assert g.verdict.startswith("Refused: the store tried to"), g.verdict
        assert "Passes" not in said
