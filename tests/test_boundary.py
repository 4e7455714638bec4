"""Lesson 9's boundary: learner code runs in a child process the lab controls, behind a fence.

The table below is a learner's (and a careless or hostile learner's) stores, each graded as the
notebook grades them: what the store does (prints, exits, hangs, forks, writes outside its run
directory, flips the fence, returns the wrong thing) and the verdict and hint it must get. After
each grade, nothing the grade started is running (found by an environment marker this test sets,
never by process name) and nothing is left in the test's own temporary folder.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from bughunt import grader
from bughunt.boundary import Boundary, problem_of

ROOT = Path(__file__).resolve().parent.parent
TESTS_DIR = Path(__file__).resolve().parent
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
                   {"operation_timeout": 2.0, "pages": 2}),
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
                             "fence.FenceRefused = Exception",
                             "os.path.realpath = lambda p, **k: str(self.path.parent)",
                             "import posixpath; posixpath.realpath = os.path.realpath",
                             f"open({OUT}, 'w').write('x')"), "refused", "to write", 9, {}),
    "WritesRelative": (method("commit", "open('state.json', 'w').write('x')"), "refused",
                       "write state.json, a relative path (to the working directory", 9, {}),
    # issue 28: an os.open's dir_fd is not in its audit event: the words say it may be one
    "WritesThroughDirFd": (method("commit", "fd = os.open(OUTSIDE, os.O_RDONLY)",
                                  "os.close(os.open('x.txt', os.O_WRONLY | os.O_CREAT, "
                                  "dir_fd=fd))"), "refused",
                           "write x.txt, a relative path (to the working directory, or to a "
                           "directory descriptor given as dir_fd", 9, {}),
    # issue 28: tempfile's default folder was named by the file's base name only
    "MakesATempFile": (method("commit", "import tempfile", "tempfile.mkstemp()"), "refused",
                       "write $TMPDIR/tmp", 9, {}),
    "WritesBeside": (method("commit", "open(Path(__file__).with_name('leak.json'), 'w')"),
                     "refused", "write leak.json beside the store's file", 9, {}),
    "RemovesAbove": (method("open_for_append", "import shutil",
                            "shutil.rmtree(self.path.parent.parent)"), "refused",
                     "remove the directory tree the directory above its run directory", 9, {}),
    "HangsInWorker": (method("load", "while (self.path.parent / 'run.lock').exists():",
                             "    time.sleep(0.01)"), "timeout",
                      "at p1.after_model_call did not finish within 2 s: a loop or a wait in "
                      "the store?", 9, {"run_timeout": 2.0, "workers": 1}),
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
    # Blame the right party: what the store did to its own process, named as the store's.
    "TimesItselfOut": (method("load", "signal.setitimer(signal.ITIMER_REAL, 0.001)",
                              "time.sleep(60)"), "signal",
                       "died by SIGALRM, in TimesItselfOut.load, while the suite records its "
                       "run: a timer of its own process", 9, {}),
    "TermsItself": (method("load", "os.kill(os.getpid(), signal.SIGTERM)"), "signal",
                    "The store sent SIGTERM to its own process, in TermsItself.load", 9, {}),
    "KillsItsGroup": (method("load", "os.killpg(0, signal.SIGKILL)"), "signal",
                      "sent SIGKILL to its own process, in KillsItsGroup.load", 9, {}),
    # issue 28: a correct store that prints bytes that are not UTF-8 passes, its bytes shown
    "PrintsBytes": (method("commit", "sys.stdout.buffer.write(b'\\xff\\xfe not text\\n')",
                           "sys.stdout.flush()", "sys.stderr.buffer.write(b'\\xff err\\n')",
                           "sys.stderr.flush()"), None,
                    "  | \ufffd\ufffd not text\n", 10, {}),
    # issue 28: what a store prints is shown with its control characters escaped, so an ESC
    # sequence or a carriage return cannot paint over the verdict
    "PrintsControls": (method("commit", "sys.stdout.write('ok \\x1b[1A\\x1b[2K\\rPasses.\\x00\\n')",
                              "sys.stdout.flush()"), None,
                       "  | ok \\x1b[1A\\x1b[2K\\x0dPasses.\\x00\n", 10, {}),
    "PatchesJson": (method("commit", "import json", "json.dumps = lambda *a, **k: 'garbage'"),
                    "patched", "The store replaced json.dumps, which the lab's own code in its "
                               "process uses, in PatchesJson.commit", 9, {}),
    "NamesItsFileTrackerDb": (method("commit", "self.path = self.path.with_name('tracker.db')"),
                              "refused", "rename tracker.db in its run directory: that is the "
                                         "name of the tracker's database", 9, {}),
    "ClosesTheLabsChannel": (method("commit", "super().commit(state, event, mid=mid)",
                                    "import stat",
                                    "for fd in range(3, 1024):",
                                    "    try:",
                                    "        if stat.S_ISSOCK(os.fstat(fd).st_mode):",
                                    "            os.close(fd)",
                                    "    except OSError:",
                                    "        pass"), "channel",
                             "closed or replaced the lab's channel to its process", 9, {}),
    "Dup2sOverTheLabsChannel": (method("commit", "super().commit(state, event, mid=mid)",
                                       "import stat",
                                       "null = os.open(os.devnull, os.O_WRONLY)",
                                       "for fd in range(3, 1024):",
                                       "    try:",
                                       "        if stat.S_ISSOCK(os.fstat(fd).st_mode):",
                                       "            os.dup2(null, fd)",
                                       "    except OSError:",
                                       "        pass"), "channel",
                                "closed or replaced the lab's channel to its process", 9, {}),
    "SetsASigchldHandler": (method("load", "signal.signal(signal.SIGCHLD, lambda *a: 1 / 0)"),
                            "patched", "The store replaced the handler of SIGCHLD (signal.signal),"
                                       " which the lab's own code in its process uses", 9, {}),
    # issue 28: a guess at the lab's descriptors (3 to 9) hits /dev/null, read-only: the
    # store's own OSError, which it may catch; nothing of the lab's is damaged or blamed
    "WritesLowDescriptors": (method("commit", "for fd in range(3, 10):", "    try:",
                                    "        os.write(fd, b'x')", "    except OSError:",
                                    "        pass"), None, "Passes.", 10, {}),
    "WritesDescriptorFive": (method("load", "os.write(5, b'x')"), "exception",
                             "WritesDescriptorFive.load raised OSError: [Errno 9] Bad file "
                             "descriptor", 9, {}),
    # ... and the socket to the process the suite loads crash states in is the lab's channel too
    "WritesThePristineSocket": (method("load", "from bughunt.boundary import pristine",
                                       "if pristine._PRISTINE:",
                                       "    os.write(pristine._PRISTINE[0][0].fileno(), b'x')"),
                                "channel", "The store wrote to the lab's channel", 9, {}),
    # issue 28: named for what they did, not for what the lab's code did next
    "LeavesItsGroup": (method("load", "os.setsid()"), "refused",
                       "the store tried to leave its process group (os.setsid", 9, {}),
    "ChangesTheChannelObjects": (method("load", "import gc",
                                        "from bughunt.boundary.channel import Channel",
                                        "for o in gc.get_objects():",
                                        "    if isinstance(o, Channel):",
                                        "        o.sock = None"), "channel",
                                 "The store changed the lab's channel objects in its process", 9,
                                 {}),
    "PatchesExitAndKill": (method("load", "os.kill = lambda *a: None",
                                  "os._exit = lambda *a: None", "os.fsync = lambda *a: None"),
                           "patched", "The store replaced os._exit, which the lab's own code in "
                                      "its process uses, in PatchesExitAndKill.load", 9, {}),
    "PatchesFsync": (method("commit", "os.fsync = lambda fd: None"), "patched",
                     "The store replaced os.fsync, which the lab's own code", 9, {}),
    "TakesTheRunLock": (method("commit", "open(self.path.with_name('run.lock'), 'w').close()"),
                        "refused", "write run.lock in its run directory: that is the name of "
                                   "the worker's lock on the run", 9, {}),
}
#: A store's way to the lab's channel, without a name for it: every socket it holds.
FORGE = """import json, os, stat, struct
from good import Good


def forge(message):
    data = json.dumps(message).encode()
    for fd in range(3, 1024):
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                os.write(fd, struct.pack(">I", len(data)) + data)
        except OSError:
            pass

"""
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
    "loops.py": ("while True:\n    pass\n", "Good", "timeout",
                 "Importing loops.py did not return within 2 s", 9),
    "syntax.py": ("class Good:\n    def load(self) return 1\n", "Good", "load",
                  "syntax.py:2: expected ':'", 9),
    "missing.py": ("from good import Good\n", "Nope", "load", "missing.py has no class Nope", 9),
    "forges_results.py": (FORGE + "forge({'t': 'result', 'result': {'name': 'forged', 'report': "
                          "{'states': 99, 'ok': True}}})\nforge({'t': 'result', 'result': "
                          "{'records': []}})\n\nclass Forges(Good):\n    pass\n", "Forges",
                          "channel", "The store wrote to the lab's channel, in importing "
                          "forges_results.py", 9),
    "out_of_order.py": (FORGE + "\nclass OutOfOrder(Good):\n"
                        "    def commit(self, state, event, *, mid):\n"
                        "        super().commit(state, event, mid=mid)\n"
                        "        forge({'t': 'status', 'seq': 1, 'end': 'OutOfOrder.commit'})\n",
                        "OutOfOrder", "channel", "The store wrote to the lab's channel, in "
                        "OutOfOrder.commit (event 1", 9),
    "patches_the_fence.py": ("import bughunt.boundary.fence as f\nf.installed = lambda: None\n"
                             "from good import Good\n", "Good", "patched",
                             "The store replaced bughunt.boundary.fence.installed, which the "
                             "lab's own code in its process uses, in importing "
                             "patches_the_fence.py", 9),
    "clears_sys_modules.py": ("import sys\nsys.modules.clear()\nfrom good import Good\n", "Good",
                              "patched", "The store replaced entries of sys.modules (", 9),
    "looks_for_the_channel.py": (
        "import socket, sys\nfrom good import Good\nfrom bughunt.boundary import child\n"
        "from bughunt.boundary.channel import Channel\n"
        "def holds(v):\n"
        "    return isinstance(v, (Channel, socket.socket)) or (isinstance(v, (list, tuple, dict))"
        " and any(holds(x) for x in (v.values() if isinstance(v, dict) else v)))\n"
        "found = [k for k, v in vars(child).items() if holds(v)]\n"
        "if found or sys.argv[1:]:\n    raise RuntimeError(f'the channel: {found} {sys.argv}')\n",
        "Good", None, "Passes.", 10),
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
    """Temporary folders (TMPDIR, and a folder of /dev/shm where the machine has one: where the
    boundary puts its own) and an environment marker of this test's own: afterwards, no process
    carries the marker and neither folder holds anything the grade left."""
    marker = uuid.uuid4().hex
    tmp = tmp_path / "tmp"
    outside = tmp_path / "outside"
    tmp.mkdir(), outside.mkdir()
    ram = Path(tempfile.mkdtemp(prefix="bughunt-test-", dir="/dev/shm")) if os.access(
        "/dev/shm", os.W_OK) else tmp
    monkeypatch.setenv("BUGHUNT_TEST_TAG", marker)
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setenv("BUGHUNT_RAM_DIR", str(ram))
    monkeypatch.setenv("BUGHUNT_TEST_OUTSIDE", str(outside))
    yield {"marker": marker, "tmp": tmp, "ram": ram, "outside": outside}
    try:
        assert tagged(marker) == [], "a process the grade started is still running"
        assert list(tmp.iterdir()) == [], "the grade left files in TMPDIR"
        assert list(ram.iterdir()) == [], "the grade left files in /dev/shm"
        assert list(outside.iterdir()) == [], "the store wrote outside its run directory"
    finally:
        if ram != tmp:
            shutil.rmtree(ram, ignore_errors=True)


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


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ROWS) + list(FILES))
def test_each_store_gets_the_verdict_its_behaviour_deserves(stores, sealed, name):
    if name in ROWS:
        _, kind, words, lesson, settings = ROWS[name]
        spec = f"{stores / 'bad.py'}:{name}"
    else:
        _, cls, kind, words, lesson = FILES[name]
        spec, settings = f"{stores / name}:{cls}", {"operation_timeout": 2.0}
    g = grader.grade(spec, **{**SMALL, **settings})
    said = str(g)
    assert [p.kind for p in g.problems][:1] == ([kind] if kind else []), said
    assert words in said, said
    assert g.hint.lesson == lesson, said
    assert g.passed == (kind is None), said
    words_only = said.split(":", 1)[1]
    assert "Traceback" not in said and str(stores) not in words_only, said
    assert str(sealed["tmp"]) not in said and str(sealed["ram"]) not in said, said
    if kind == "refused":
        assert g.verdict.startswith("Refused: the store tried to"), g.verdict
        assert "Passes" not in said


# --- a kill is a new process ----------------------------------------------------------------------

MEMORY_STORES = {
    "module_dict.py": '''
from bughunt.events import initial_state
from bughunt.stores import Recovered, Repairs

_LATEST = [initial_state()]       # everything in memory: no file is ever written


class Mem:
    name = "memory"

    def __init__(self, run_dir, config, door):
        pass

    def load(self):
        return Recovered(_LATEST[-1])

    def open_for_append(self):
        return Repairs()

    def commit(self, state, event, *, mid):
        mid()
        _LATEST.append(state)

    def close(self):
        pass
''',
    "class_cache.py": '''
import json
from bughunt.events import initial_state
from bughunt.stores import Recovered, Repairs


class Mem:
    """A class-level cache in front of a file that only every other commit writes."""
    name = "class cache"
    cache = []

    def __init__(self, run_dir, config, door):
        self.path, self.door = run_dir / "state.json", door

    def load(self):
        if Mem.cache:
            return Recovered(Mem.cache[-1])
        if self.path.exists():
            return Recovered(json.loads(self.path.read_bytes()))
        return Recovered(initial_state())

    def open_for_append(self):
        return Repairs()

    def commit(self, state, event, *, mid):
        mid()
        Mem.cache.append(state)
        if state["seq"] % 2 == 0:
            self.door.write_atomic(self.path, json.dumps(state).encode())

    def close(self):
        pass
''',
}


@pytest.mark.parametrize("file", list(MEMORY_STORES))
def test_a_store_that_keeps_its_state_in_memory_fails_kill_keeps_acknowledged(sealed, tmp_path,
                                                                              file):
    """The suite loads every crash state in a new process, never in the one that wrote: what a
    store kept in a module's dict or a class attribute is gone, as after a real kill -9."""
    (tmp_path / file).write_text(MEMORY_STORES[file])
    g = grader.grade(f"{tmp_path / file}:Mem", pages=2, sweep=False)
    said = str(g)
    assert not g.passed and not g.problems, said
    assert "kill-keeps-acknowledged" in g.broken(), said
    first = g.first("kill-keeps-acknowledged")
    assert "(commit of event 1 returned)" in first.state, said
    assert "kept in the process's memory" in first.detail, said
    assert g.hint.lesson == 6 and "memory" in g.hint.text, said
    proc = bughunt("conformance", "--store", f"{file}:Mem", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "breaks kill-keeps-acknowledged" in proc.stdout, proc.stdout
    assert "kept in the process's memory" in proc.stdout, proc.stdout


# --- the fence is the kernel's too (Landlock) ----------------------------------------------------

from bughunt.boundary import landlock  # noqa: E402

KERNEL = "outside its run directory (the kernel refused it, Landlock"
VICTIM = "Path(os.environ['BUGHUNT_TEST_VICTIM'])"
#: class name -> (its commit's body, after Good's commit; words in the verdict; whether only the
#: kernel stops it: skipped where the system has no Landlock)
ESCAPES = {
    "DirFdAfterChdir": (["d = os.open(OUTSIDE, os.O_RDONLY)", "os.chdir(self.path.parent)",
                         "os.close(os.open('x.txt', os.O_WRONLY | os.O_CREAT, dir_fd=d))"],
                        KERNEL, True),
    "DirFdThroughProc": (["d = os.open(OUTSIDE, os.O_RDONLY)",
                          "e = os.open(f'/proc/self/fd/{d}', os.O_RDONLY)",
                          "os.chdir(self.path.parent)",
                          "os.close(os.open('x.txt', os.O_WRONLY | os.O_CREAT, dir_fd=e))"],
                         KERNEL, True),
    "TruncatesThroughDirFd": ([f"d = os.open({VICTIM}.parent, os.O_RDONLY)",
                               "os.chdir(self.path.parent)",
                               f"os.close(os.open({VICTIM}.name, os.O_WRONLY | os.O_TRUNC, "
                               "dir_fd=d))"], KERNEL, True),
    "TruncatesTheFencesLog": (["import json",
                               "log = json.loads(os.environ['BUGHUNT_BOUNDARY'])['log']",
                               "d = os.open(os.path.dirname(log), os.O_RDONLY)",
                               "os.chdir(self.path.parent)",
                               "os.open(os.path.basename(log), os.O_WRONLY | os.O_TRUNC, "
                               "dir_fd=d)"], KERNEL, True),
    "MakesAFifo": (["os.mkfifo(OUTSIDE / 'fifo')"], KERNEL, True),
    "MakesANode": (["os.mknod(OUTSIDE / 'node')"], KERNEL, True),
    "BindsAUnixSocket": (["import socket", "s = socket.socket(socket.AF_UNIX)",
                          "s.bind(str(OUTSIDE / 'sock'))"], "bind a Unix socket at", False),
    "AttachesOutside": (["import sqlite3",
                         "db = sqlite3.connect(self.path.parent / 'mine.db')",
                         "db.execute(f\"ATTACH DATABASE '{OUTSIDE / 'o.db'}' AS o\")",
                         "db.execute('CREATE TABLE o.t (x)')"],
                        "open the SQLite database", True),
    "VacuumsIntoOutside": (["import sqlite3",
                            "db = sqlite3.connect(self.path.parent / 'mine.db')",
                            "db.execute(f\"VACUUM INTO '{OUTSIDE / 'v.db'}'\")"],
                           "open the SQLite database", True),
    "UriWithModeRoInside": (["import sqlite3",
                             "db = sqlite3.connect(f'file:{OUTSIDE / \"u.db\"}?mode=rwc&x=mode=ro',"
                             " uri=True)", "db.execute('CREATE TABLE t (x)')"],
                            "open the SQLite database", False),
    "WritesHistory": (["import readline", "readline.write_history_file(str(OUTSIDE / 'h'))"],
                      KERNEL, True),
    "CtypesThroughExec": (["exec(compile('import ctypes\\nctypes.CDLL(None)', '<string>', "
                           "'exec'))"], "load a C library or function through ctypes", False),
    "ThreadWithNoStoreFrame": (["import functools, shutil, threading",
                                "t = threading.Thread(target=functools.partial(shutil.copyfile, "
                                "__file__, OUTSIDE / 't.txt'))", "t.start()", "t.join()"],
                               "copy a file to", True),
}


@pytest.fixture
def victim(tmp_path, monkeypatch):
    folder = tmp_path / "victim"
    folder.mkdir()
    path = folder / "victim.txt"
    path.write_text("the victim's bytes\n")
    monkeypatch.setenv("BUGHUNT_TEST_VICTIM", str(path))
    yield path
    assert path.read_text() == "the victim's bytes\n", "the store changed a file outside"
    assert sorted(p.name for p in folder.iterdir()) == ["victim.txt"]


@pytest.mark.parametrize("name", list(ESCAPES))
def test_an_escape_past_the_audit_hook_is_refused_and_changes_nothing_outside(
        tmp_path, sealed, victim, name):
    """Each of these got past the audit hook alone; the kernel (Landlock) stops them all, and the
    verdict names the refusal: the hook's words where it saw the attempt, else the kernel's
    EACCES as the store's write outside its run directory. The fixtures check that nothing
    appeared in the outside folder and that the victim file is unchanged."""
    body, words, kernel_only = ESCAPES[name]
    if kernel_only and landlock.abi() == 0:
        pytest.skip("no Landlock on this system: the audit hook alone cannot stop this one")
    source = GOOD + f"\n\nclass {name}(Good):\n" + textwrap.indent(
        method("commit", *body), "    ") + "\n"
    (tmp_path / "escape.py").write_text(source)
    g = grader.grade(f"{tmp_path / 'escape.py'}:{name}", pages=1, sweep=False)
    said = str(g)
    assert not g.passed and g.problems and g.problems[0].kind == "refused", said
    assert g.verdict.startswith("Refused: the store tried to"), said
    assert words in said, said
    assert g.kernel_abi == landlock.abi(), said


def test_the_verdict_says_when_the_fence_is_the_audit_hook_alone(stores, sealed, monkeypatch):
    monkeypatch.setenv("BUGHUNT_LANDLOCK", "off")
    g = grader.grade(f"{stores / 'good.py'}:Good", pages=1, sweep=False)
    assert g.kernel_abi == 0
    assert "the fence here was the audit hook alone (no landlock on this system)" in \
        g.verdict.lower() and "dir_fd" in g.verdict and "os.mkfifo" in g.verdict, g.verdict
    if landlock.abi():
        monkeypatch.delenv("BUGHUNT_LANDLOCK")
        g = grader.grade(f"{stores / 'good.py'}:Good", pages=1, sweep=False)
        assert g.kernel_abi == landlock.abi() and "audit hook alone" not in g.verdict


# --- correct stores pass -------------------------------------------------------------------------

CORRECT = TESTS_DIR / "boundary_correct_stores.py"


@pytest.mark.parametrize("name", ["Plain", "Sub", "Sql", "Störe"])
def test_a_correct_store_that_writes_without_the_door_passes_on_the_sweeps_word(sealed, name):
    """By hand (open, os.fsync, os.replace, a directory fsync), in a subdirectory it made with
    os.mkdir, or in SQLite with synchronous=FULL: the door's journal holds none of it, so the
    suite checks the files as the run left them and the sweep's real kills judge the rest."""
    g = grader.grade(f"{CORRECT}:{name}", pages=2)
    said = str(g)
    assert g.passed and not g.problems, said
    assert "The door saw none of its writes" in g.verdict, said
    assert "the power-cut rules were not checked" in g.verdict, said
    assert "recovered correctly, none twice, none lost" in g.verdict, said


ENVIRONMENT = """
import os, stat, sys, tempfile
from good import Good
folder = os.path.realpath(tempfile.gettempdir())
for name in ("HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME",
             "XDG_RUNTIME_DIR", "TMPDIR"):
    value = os.path.realpath(os.environ.get(name, "/nowhere"))
    if os.path.commonpath([value, folder]) != folder or "bughunt-boundary-" not in value:
        raise RuntimeError(f"{name} is {value}, outside the boundary's folder {folder}")
# The XDG Base Directory specification: the runtime directory exists, is the user's, mode 0700.
st = os.stat(os.environ["XDG_RUNTIME_DIR"])
if not stat.S_ISDIR(st.st_mode) or stat.S_IMODE(st.st_mode) != 0o700 or st.st_uid != os.getuid():
    raise RuntimeError(f"XDG_RUNTIME_DIR is not a directory of the user's with mode 0700: "
                       f"{oct(st.st_mode)} uid {st.st_uid}")
os.makedirs(os.path.expanduser("~/.config/mine"), exist_ok=True)
"""
MATPLOTLIB = """
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot
from good import Good
"""
UNDECODABLE = """
import os
from good import Good


class ThroughTheDoor(Good):
    def commit(self, state, event, *, mid):
        super().commit(state, event, mid=mid)
        name = os.fsdecode(bytes(self.path.parent) + b"/\\xff.json")
        fd = self.files.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        self.files.write(fd, b"x", name)
        self.files.close(fd)


class ByHand(Good):
    def commit(self, state, event, *, mid):
        super().commit(state, event, mid=mid)
        with open(bytes(self.path.parent) + b"/\\xff.json", "wb") as f:
            f.write(b"x")
"""


def test_home_xdg_and_tmpdir_point_into_the_boundarys_folder(stores, sealed):
    (stores / "environment.py").write_text(ENVIRONMENT)
    g = grader.grade(f"{stores / 'environment.py'}:Good", pages=1, sweep=False)
    assert not g.problems and g.conformance_ok, str(g)


def test_a_store_that_imports_matplotlib_pyplot_at_the_top_is_graded(stores, sealed):
    """Its first import builds a font cache in HOME (the boundary's) and runs fc-list: a helper
    a library starts, which the fence lets run where the kernel holds it as it holds the store."""
    pytest.importorskip("matplotlib")
    if landlock.abi() == 0:
        pytest.skip("without Landlock the audit hook alone refuses the helper process")
    (stores / "plots.py").write_text(MATPLOTLIB)
    g = grader.grade(f"{stores / 'plots.py'}:Good", pages=1, sweep=False)
    assert not g.problems and g.conformance_ok, str(g)


@pytest.mark.parametrize("name", ["ThroughTheDoor", "ByHand"])
def test_a_file_name_that_is_not_text_is_the_stores_problem_named(stores, sealed, name):
    (stores / "undecodable.py").write_text(UNDECODABLE)
    g = grader.grade(f"{stores / 'undecodable.py'}:{name}", pages=1, sweep=False)
    said = str(g)
    assert g.problems and g.problems[0].kind == "name", said
    assert "named a file with bytes that are not text (not UTF-8): b'\\xff.json'" in said, said
    assert "lab failing" not in said and g.hint.lesson == 9, said


def test_a_file_another_program_makes_beside_the_store_during_the_grade_is_not_the_stores(
        stores, sealed, tmp_path):
    """An editor or a notebook saving beside the store while it is graded: with the kernel's half
    of the fence the store cannot write there, so the name is not held against it. The store
    waits (reading, which is allowed) until the file is there, so the file is made mid-grade."""
    if landlock.abi() == 0:
        pytest.skip("without Landlock a name beside the store's file may be the store's doing")
    folder = tmp_path / "store"
    folder.mkdir()
    shutil.copy(stores / "good.py", folder / "good.py")
    (folder / "waits.py").write_text(
        "import time\nfrom pathlib import Path\nfrom good import Good\n\n"
        "class Waits(Good):\n    def load(self):\n"
        "        while not Path(__file__).with_name('autosave.txt').exists():\n"
        "            time.sleep(0.01)\n        return super().load()\n")
    import threading
    started = threading.Event()

    def autosave():
        wait_for(lambda: any(sealed["ram"].glob("bughunt-boundary-*/out/fence.jsonl")) or
                 any(sealed["tmp"].glob("bughunt-boundary-*/out/fence.jsonl")))
        (folder / "autosave.txt").write_text("saved")
        started.set()

    thread = threading.Thread(target=autosave, daemon=True)
    thread.start()
    g = grader.grade(f"{folder / 'waits.py'}:Waits", pages=1, sweep=False)
    thread.join(60)
    assert started.is_set()
    assert not g.problems and g.conformance_ok, str(g)


@pytest.mark.parametrize("beside", ["sqlite3.py", "selectors.py", "json.py"])
def test_a_file_beside_the_store_named_like_a_module_the_lab_imports_is_ignored(stores, sealed,
                                                                                tmp_path, beside):
    """issue 28: files beside the store's file are ignored unless the store reads them. The
    store's folder was on PYTHONPATH, before the standard library: a `sqlite3.py` there was
    imported by the lab's own code in the boundary's child ("the store raised ..." or "this is
    the lab failing"). The store still imports its helper beside it (`from good import Good`),
    in the suite's processes and in the sweep's workers."""
    folder = tmp_path / "store"
    folder.mkdir()
    shutil.copy(stores / "good.py", folder / "good.py")
    (folder / "mine.py").write_text("from good import Good\n")
    (folder / beside).write_text(f"raise RuntimeError('{beside} beside the store was imported')\n")
    g = grader.grade(f"{folder / 'mine.py'}:Good", **SMALL)
    assert g.passed and not g.problems, str(g)
    assert "beside the store was imported" not in str(g)


# --- the boundary itself -------------------------------------------------------------------------

TESTS = Path(__file__).resolve().parent


def test_a_double_forked_daemon_is_ended_with_the_boundary(sealed, tmp_path):
    """The lab's own code in the child (not a store: the fence lets it) double-forks a sleeper
    that holds a file open; once the boundary has closed, nothing holds it."""
    held = tmp_path / "held.log"
    # The job writes `held` from the child: the kernel lets it only where it may write.
    with Boundary(paths=[TESTS], writable=[tmp_path]) as b:
        ended = b.call("boundary_jobs:double_fork_sleeper", {"holding": str(held)}, timeout=30)
        assert ended.ok, ended
        daemon = ended.result["daemon"]
    assert tagged(sealed["marker"]) == []
    if LINUX:
        assert not Path(f"/proc/{daemon}").exists() or "Z" in (
            Path(f"/proc/{daemon}/stat").read_text().rsplit(")", 1)[1].split()[:1])
        holders = [fd for fd in Path("/proc").glob("[0-9]*/fd/*")
                   if _points_at(fd, held)]
        assert holders == []


def _points_at(fd: Path, target: Path) -> bool:
    try:
        return os.readlink(fd) == str(target)
    except OSError:
        return False


def test_a_child_left_in_the_group_is_ended_with_the_boundary(sealed):
    with Boundary(paths=[TESTS]) as b:
        assert b.call("boundary_jobs:child_in_group", {}, timeout=30).ok
        assert tagged(sealed["marker"])          # the child and its sleeper, while it is open
    assert tagged(sealed["marker"]) == []


def test_what_the_child_prints_is_captured_and_never_mistaken_for_its_answer(sealed):
    with Boundary(paths=[TESTS]) as b:
        ended = b.call("boundary_jobs:prints_and_returns", {"lines": 5000}, timeout=60)
    assert ended.result == {"answer": 42}
    p = ended.printed
    assert p.stdout_lines == 5000 and p.stderr_lines == 1 and p.stderr == ("and on stderr",)
    assert p.stdout[0].startswith('{"t": "result"') and len(p.stdout) < 20
    assert "… 4,992 more lines" in str(p)


def test_bytes_written_to_the_channel_by_accident_are_named_not_read(sealed):
    with Boundary(paths=[TESTS]) as b:
        ended = b.call("boundary_jobs:writes_to_the_channel", {}, timeout=60)
        said = problem_of(ended)
    assert ended.how == "channel" and said.kind == "channel", ended


@pytest.mark.slow
def test_a_job_past_its_time_is_stopped_and_named(sealed):
    with Boundary(paths=[TESTS]) as b:
        ended = b.call("boundary_jobs:sleeps", {"seconds": 600}, timeout=1.0)
    said = problem_of(ended)
    assert ended.how == "timeout" and said.kind == "timeout"
    assert "did not finish within 1 s (it was sleeping)" in said.message


def test_a_learners_store_is_never_imported_outside_the_boundary(tmp_path):
    from bughunt.stores import StoreSpecError, store_class
    marker = tmp_path / "imported"
    (tmp_path / "s.py").write_text(f"open({str(marker)!r}, 'w').close()\nclass S: pass\n")
    with pytest.raises(StoreSpecError, match="runs only behind the lab's boundary"):
        store_class(f"{tmp_path / 's.py'}:S")
    assert not marker.exists()


def test_the_fence_refuses_the_store_and_lets_the_labs_own_code_through(sealed, tmp_path):
    """In a fenced process, the same operation is refused from the store's file and allowed from
    the lab's: the sweep's fork servers and workers depend on it."""
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    (store_dir / "tries.py").write_text(textwrap.dedent("""
        import os, subprocess
        def start():
            subprocess.run(["true"])
        def write(path):
            open(path, "w").close()
    """))
    script = textwrap.dedent(f"""
        import subprocess, sys
        sys.path.insert(0, {str(store_dir)!r})
        from bughunt.boundary import fence
        fence.install(roots=[{str(sealed['tmp'])!r}], default_dir={str(sealed['tmp'])!r},
                      learner_dirs=[{str(store_dir)!r}], log={str(tmp_path / 'log')!r})
        import tries
        results = []
        for attempt in (tries.start, lambda: tries.write({str(sealed['outside'] / 'x')!r}),
                        lambda: tries.write({str(sealed['tmp'] / 'ok')!r})):
            try:
                attempt()
                results.append("allowed")
            except fence.FenceRefused:
                results.append("refused")
        subprocess.run(["true"])            # the lab's own code
        results.append("lab allowed")
        print(" ".join(results))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=tmp_path)
    assert proc.stdout.split() == ["refused", "refused", "allowed", "lab", "allowed"], proc.stderr
    log = (tmp_path / "log").read_text().splitlines()
    assert len(log) == 2 and '"event": "subprocess.Popen"' in log[0] and "tries.py, line" in log[0]
    (sealed["tmp"] / "ok").unlink()


# --- the commands -------------------------------------------------------------------------------

def bughunt(*args, cwd, env=None, timeout=180):
    return subprocess.run([sys.executable, "-m", "bughunt", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=timeout)


@pytest.mark.parametrize("command", [
    ["conformance"], ["sweep", "--pages", "2"], ["run", "--dir", "{tmp}/run"],
])
@pytest.mark.parametrize("store, words", [
    ("syntax.py:Good", "syntax.py:2: expected ':'"),
    ("missing.py:Nope", "missing.py has no class Nope"),
    ("exit3_import.py:Good", "sys.exit(3), in importing exit3_import.py"),
    ("nowhere.py:X", "nowhere.py"),
])
def test_a_store_file_that_cannot_be_loaded_is_refused_with_exit_2_by_every_command(
        stores, sealed, command, store, words):
    command = [c.replace("{tmp}", str(sealed["tmp"].parent)) for c in command]
    proc = bughunt(*command, "--store", store, cwd=stores)
    assert proc.returncode == 2, proc.stderr
    assert words in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout == ""


def test_the_graders_exit_codes_and_streams(stores, sealed):
    def grade(*args):
        return subprocess.run([sys.executable, "-m", "bughunt.grader", *args],
                              capture_output=True, text=True, cwd=stores, timeout=180)
    import json
    refused = grade("--store", "syntax.py:Good")
    assert refused.returncode == 2 and refused.stdout == ""
    assert "syntax.py:2: expected ':'" in refused.stderr
    bad = grade("--store", "bad.py:Exit3Commit", "--json")
    verdict = json.loads(bad.stdout)
    assert bad.returncode == 1 and verdict["passed"] is False
    assert verdict["problems"][0]["kind"] == "exit" and verdict["hint_lesson"] == 9
    assert verdict["verdict"] in bad.stderr


def test_a_sweep_whose_store_cannot_start_is_refused_once_and_never_summarised(stores, sealed):
    proc = bughunt("sweep", "--store", "bad.py:RaisesInInit", "--pages", "2", cwd=stores)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "RaisesInInit.__init__ raised KeyError: 'nope' (bad.py, line" in \
        lines[0] and "bad.py:RaisesInInit" in lines[0], proc.stderr


@pytest.mark.slow
def test_a_sweep_whose_store_hangs_is_stopped_at_the_runs_timeout_with_its_crash_point(
        stores, sealed):
    from bughunt.boundary import commands
    from bughunt.config import RunConfig
    config = RunConfig(store=f"{stores / 'bad.py'}:Spins", pages=2)
    records, said, _printed = commands.sweep_store(config, run_timeout=2.0)
    assert records == [] and said.kind == "timeout"
    assert "did not finish within 2 s" in said.message and "after p1." in said.message


def test_a_sweep_whose_resumes_fail_counts_nothing_negative(stores, sealed, tmp_path):
    """A store whose resume fails at every point: the sweep's numbers say so, and no redone
    count is made up from a run that never finished."""
    import json
    (tmp_path / "fails.py").write_text(
        "from good import Good\nimport os\n\nclass Fails(Good):\n"
        "    def load(self):\n"
        "        if (self.path.parent / 'bill.jsonl').exists():\n"
        "            raise ValueError('cannot read my own file')\n"
        "        return super().load()\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(stores), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = bughunt("sweep", "--store", "fails.py:Fails", "--pages", "2", "--json", cwd=tmp_path,
                   env=env)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["summary"]["errors"] == out["summary"]["crash_points"] == 8
    assert out["summary"]["avg_redone_model_calls"] is None
    assert all(p["redone_model_calls"] is None for p in out["points"])


def test_run_with_a_store_that_prints_keeps_its_json_report_clean(stores, sealed):
    import json
    run_dir = sealed["tmp"].parent / "run"
    proc = bughunt("run", "--dir", str(run_dir), "--store", "bad.py:PrintsStdout", "--pages", "3",
                   "--json", cwd=stores)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["findings"] == [3]
    assert "debug 1" in proc.stderr
    crashed = bughunt("run", "--dir", str(sealed["tmp"].parent / "run2"), "--store",
                      "good.py:Good", "--crash-at", "p1.after_visit", cwd=stores)
    assert crashed.returncode == -signal.SIGKILL      # as a worker's caller sees a crash point


HUGE = '''
from good import Good


class HugeName(Good):
    name = "n\\n" * 100_000


class HugeMessage(Good):
    def load(self):
        raise RuntimeError("z\\n" * 100_000)
'''
#: what a store gives in 100,000 lines, and the start of its cut echo (its repr, then the length)
CUT = {"huge.py:HugeName": "'n\\nn\\nn\\n", "huge.py:HugeMessage": "RuntimeError: 'z\\nz\\nz\\n",
       "huge_import.py:Good": "ValueError: 'i\\ni\\ni\\n"}


@pytest.mark.parametrize("spec", list(CUT))
def test_a_100000_line_name_or_message_from_the_store_is_cut_in_every_verdict(stores, sealed,
                                                                              spec):
    """issue 28: a 100,000-line store `name` (or any huge text from the store: an exception's
    message) was echoed in full by the grader and the conformance suite; it is cut as a flag's
    value is (`config.quoted`), and says its length."""
    (stores / "huge.py").write_text(HUGE)
    (stores / "huge_import.py").write_text('raise ValueError("i\\n" * 100_000)\n')
    g = grader.grade(str(stores / spec), pages=1, sweep=False)
    said = str(g)
    assert CUT[spec] in said and "... (200,000 characters)" in said, said[:2000]
    assert len(said) < 2_000 and said.count("\n") == 1, said[:2000]
    assert len(g.name) < 200 and len(json.dumps(g.to_json())) < 20_000
    proc = bughunt("conformance", "--store", spec, cwd=stores)      # it names no store's `name`
    assert spec.endswith("HugeName") or CUT[spec] in proc.stderr, proc.stderr[:2000]
    assert len(proc.stdout + proc.stderr) < 2_000, proc.stderr[:2000]
    assert "Traceback" not in proc.stderr


def test_conformance_names_a_store_that_ends_its_process(stores, sealed):
    proc = bughunt("conformance", "--store", "bad.py:HardExitCommit", cwd=stores)
    assert proc.returncode == 1 and proc.stdout == ""
    assert ("os._exit(0), in HardExitCommit.commit (event 1: page_done, page 1)"
            in proc.stderr), proc.stderr
    ok = bughunt("conformance", "--store", "bad.py:PrintsStderr", cwd=stores)
    assert ok.returncode == 0 and "passes every rule" in ok.stdout
    assert "What the store printed on stderr" in ok.stderr and "a warning" in ok.stderr


def test_run_without_crash_at_killed_by_sigkill_from_outside_says_it_was_killed(
        stores, sealed, tmp_path):
    """A run given no --crash-at that dies of SIGKILL (the OOM killer, a kill -9 from a shell)
    did not reach a planned crash point: it says it was killed, and exits 1. The store marks
    that its load() is running, and waits there until the test SIGKILLs its processes."""
    (stores / "waits_for_kill.py").write_text(
        "import time\nfrom pathlib import Path\nfrom good import Good\n\n"
        "class Waits(Good):\n    def load(self):\n"
        "        (self.path.parent / 'waiting').touch()\n"
        "        while True:\n            time.sleep(0.01)\n")
    proc = subprocess.Popen([sys.executable, "-m", "bughunt", "run", "--dir",
                             str(tmp_path / "run"), "--store", "waits_for_kill.py:Waits"],
                            cwd=stores, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def child_processes():
        found = []
        for pid in tagged(sealed["marker"]):
            try:
                if b"bughunt.boundary" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(int(pid))
            except OSError:
                pass
        return found

    if not LINUX:
        proc.kill()
        proc.communicate()
        pytest.skip("finds the store's processes in /proc")
    wait_for(lambda: (tmp_path / "run" / "waiting").exists() or proc.poll() is not None)
    for pid in child_processes():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, (proc.returncode, err)
    assert "died by SIGKILL" in err and "Traceback" not in err, err


# --- interrupts ---------------------------------------------------------------------------------

def wait_for(condition, timeout: float = 120.0) -> None:
    """Wait for a state of the file system (never for a time): poll until it holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("the command never reached the state to interrupt")
        time.sleep(0.01)


def running(tmp: Path, pattern: str) -> bool:
    """Something matching `pattern` exists under `tmp`: a conformance suite checking crash states
    (`bughunt-conformance-*/s1`), a sweep's run directories (`sweep-*`)."""
    try:
        return any(True for _ in tmp.glob(f"**/{pattern}"))
    except OSError:                      # a folder removed while it was listed
        return False


SUITE, SWEEP = "bughunt-conformance-*/s1", "sweep-*"


@pytest.mark.parametrize("command, when, signum, code", [
    (["-m", "bughunt.grader", "--store", "bad.py:SlowWrites"], SUITE, signal.SIGINT, 130),
    (["-m", "bughunt.grader", "--store", "bad.py:SlowWrites"], SUITE, signal.SIGTERM, 143),
    (["-m", "bughunt.grader", "--store", "bad.py:SlowWrites"], SWEEP, signal.SIGTERM, 143),
    (["-m", "bughunt", "conformance", "--store", "bad.py:SlowWrites"], SUITE, signal.SIGINT, 130),
    (["-m", "bughunt", "conformance", "--store", "bad.py:SlowWrites"], SUITE, signal.SIGTERM,
     143),
    (["-m", "bughunt", "conformance", "--all"], SUITE, signal.SIGINT, 130),
    (["-m", "bughunt", "conformance", "--all"], SUITE, signal.SIGTERM, 143),
], ids=["grader-ctrl-c", "grader-sigterm", "grader-sigterm-in-its-sweep", "conformance-ctrl-c",
        "conformance-sigterm", "conformance-all-ctrl-c", "conformance-all-sigterm"])
@pytest.mark.slow
def test_an_interrupt_stops_the_grade_at_once_and_is_never_a_broken_rule(stores, sealed, command,
                                                                         when, signum, code):
    proc = subprocess.Popen([sys.executable, *command], cwd=stores, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    wait_for(lambda: running(sealed["ram"], when) or running(sealed["tmp"], when)
             or proc.poll() is not None)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and ("interrupted" if code == 130 else "terminated") in lines[0], err
    assert "breaks" not in out + err and "Traceback" not in err


def test_kill_random_refuses_a_learners_store_rather_than_run_it_outside_the_boundary(stores):
    proc = bughunt("kill-random", "--store", "good.py:Good", "--tries", "2", cwd=stores)
    assert proc.returncode == 2 and "kill-random takes the lab's stores only" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_a_caller_killed_by_sigkill_leaves_nothing_behind(sealed):
    """The notebook's kernel dies with a grade open (SIGKILL, nothing of its own runs): the
    supervisor sees its end of the pipe close, ends the child and removes the boundary's folder."""
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(TESTS)!r})
        from bughunt.boundary import Boundary
        with Boundary(paths=[{str(TESTS)!r}]) as b:
            print(b.root, flush=True)
            b.call("boundary_jobs:sleeps", {{"seconds": 600}}, timeout=600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    root = Path(proc.stdout.readline().strip())
    wait_for(lambda: len(tagged(sealed["marker"])) >= 3)      # caller, supervisor, child
    proc.kill()
    proc.wait()
    wait_for(lambda: not root.exists() and tagged(sealed["marker"]) == [], timeout=30)


# --- the store's name -------------------------------------------------------------------------------

def test_a_name_that_is_not_text_is_refused_and_one_with_control_characters_is_escaped(
        stores, sealed, tmp_path):
    """issue 28: a store's `name` is printed in every verdict: a non-str one was accepted, and
    one with newlines, ANSI escapes or NUL must not reach the terminal as it is."""
    (tmp_path / "names.py").write_text(
        "from good import Good\n\n\nclass Number(Good):\n    name = 42\n\n\n"
        "class Escapes(Good):\n    name = 'evil\\n\\x1b[31mred\\x00' + 'x' * 300\n")
    shutil.copy(stores / "good.py", tmp_path / "good.py")
    g = grader.grade(f"{tmp_path / 'names.py'}:Number", **SMALL)
    assert [p.kind for p in g.problems] == ["load"] and grader.exit_code(g) == 2, str(g)
    assert "The name of class Number is 42 (an int); the contract says name is a str" in str(g)
    g = grader.grade(f"{tmp_path / 'names.py'}:Escapes", **SMALL)
    said = str(g)
    assert g.passed, said
    first = said.splitlines()[0]
    assert first.startswith("'evil\\n\\x1b[31mred\\x00xxx") and "(314 characters)" in first, first
    assert not any(c in said for c in "\x1b\x00")


@pytest.mark.parametrize("name", ["patches_the_fence.py", "clears_sys_modules.py"])
def test_a_store_that_patches_the_lab_while_importing_is_refused_as_the_stores_fault(
        stores, sealed, name):
    """issue 28: a store that replaced bughunt.boundary.fence's functions or cleared sys.modules
    at import was "the lab failing" (exit 1); its import was refused (the README's 2)."""
    g = grader.grade(f"{stores / name}:Good", **SMALL)
    assert g.problems and g.problems[0].loading and grader.exit_code(g) == 2, str(g)
    assert "lab failing" not in str(g)
