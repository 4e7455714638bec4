"""Inside the boundary: the process that imports a learner's store and calls it.

    python -m bughunt.boundary FD      (started by the supervisor, never by hand)

By the time this module runs, the `sitecustomize` the boundary wrote has fenced the process
(`fence.install_from_env`) and set its resource limits. It reads jobs from the private channel on
descriptor FD (`{"t": "job", "job": "module:function", "args": {...}}`), runs each with a
`Context`, and answers on the same channel: the job's result, or how it stopped. The store's own
stdout and stderr are this process's, which the lab captures; nothing of the lab's travels there.

Two things here are used in every fenced process, the sweep's workers too:

- `load_store(spec)`: the one place a learner's store file is imported (`bughunt.stores.store_class`
  sends every FILE.py:Class here). Outside a fenced process it refuses: a learner's store runs only
  behind the boundary.
- the guard around the class it returns: each call into the store (its import, `__init__`, `load`,
  `open_for_append`, `commit`, `close`) is bracketed for the fence (confined to that store's run
  directory), announced on the channel when there is one (so that a hang is named), and checked
  on the way out: what it returned against what the contract says it returns, and an end of the
  process (sys.exit, MemoryError, another BaseException) turned into a `fence.StoreStopped` that
  names it, so that no `except Exception` on the lab's side mistakes it for a rule broken.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import re
import signal
import socket
import sys
import traceback
from pathlib import Path

from . import fence as _fence
from .channel import Channel

#: What the conformance suite is checking right now (a crash state), for the guard's labels.
_STATE: list[str] = []
_LOADED: dict[tuple[str, int], type] = {}


def _speaker():
    """`status`, `answer` and `tag`, sharing the channel of this process in their closure and
    nowhere else: no module attribute holds it or its descriptor (a store that imports this
    module finds no channel to write to), and every frame carries the number of the request it
    answers, which the lab checks (see `main`)."""
    held: list = []                 # [channel, the request's number]

    def status(message: dict) -> None:
        """Tell the lab (the boundary's caller) where this process is, if it is listening."""
        if held:
            try:
                held[0].send({"t": "status", "seq": held[1], **message})
            except BrokenPipeError:
                pass                     # the lab is gone: the supervisor ends this process
            except OSError:
                lost()
            except Exception:            # noqa: its objects changed under it (gc.get_objects)
                lost(DAMAGED)

    def answer(message: dict) -> None:
        try:
            held[0].send({**message, "seq": held[1]})
        except BrokenPipeError:
            raise
        except OSError:
            lost()
        except Exception:                # noqa: as in status
            lost(DAMAGED)

    def lost(what: str = "closed or replaced the lab's channel") -> None:
        """The channel's descriptor is closed, or is something else now (os.close, os.dup2 by
        the store), or its objects were changed: say so in the fence's log, the one way left,
        and end this process."""
        fence = _fence.installed()
        if fence is not None:
            fence.log({"kind": "lost", "what": what, "where": "", "at": "", "dir": "",
                       "line": ""})
        os._exit(CHANNEL_LOST)

    def tag(channel=None, seq=None) -> None:
        if channel is not None:
            held[:] = [channel, seq]
        elif held:
            held[1] = seq

    return status, answer, tag


#: The exit status of a child whose channel the store closed or replaced (with a "lost" record).
CHANNEL_LOST = 86
#: The "lost" record's words for a channel whose objects the store changed.
DAMAGED = ("changed the lab's channel objects in its process (its socket, its buffers: found "
           "through gc or the lab's modules)")

status, _answer, _tag = _speaker()
del _speaker


def set_state(at: str | None) -> None:
    """What the lab is doing now, as a phrase ("while the suite records its run", "at the crash
    state kill -9 after operation 12 (...)"), for the words about the store's calls in it."""
    _STATE[:] = [at] if at else []
    status({"state": at})


# --- loading a learner's store --------------------------------------------------------------------

def learner_line(tb) -> str:
    """`my_store.py, line 23, in commit`: the innermost frame of the store's files, or ""."""
    found = ""
    fence = _fence.installed()
    dirs = fence.learner_dirs if fence else ()
    for frame in traceback.extract_tb(tb):
        real = os.path.realpath(frame.filename)
        if any(real.startswith(d + os.sep) for d in dirs) and not real.startswith(_PACKAGE):
            found = f"{Path(frame.filename).name}, line {frame.lineno}, in {frame.name}"
    return found


_PACKAGE = os.path.realpath(Path(__file__).resolve().parents[1]) + os.sep   # bughunt/


def load_store(spec: str):
    """The class `spec` (`/abs/path/file.py:ClassName`) names, imported inside the fence, wrapped
    in the guard. Raises `StoreSpecError` naming the file, the line or the class;
    `fence.StoreStopped` when the import ended the process or was refused."""
    from ..diskio import not_a_file
    from ..stores import StoreSpecError

    fence = _fence.installed()
    file, _, name = spec.rpartition(":")
    if fence is None:
        raise StoreSpecError(
            f"--store {spec}: a learner's store runs only behind the lab's boundary, never in "
            "this process: grade it (bughunt.grader.grade, python -m bughunt.grader --store "
            "FILE.py:Class) or give it to python -m bughunt run, sweep or conformance")
    path = Path(file).expanduser()
    try:
        key = (str(path.resolve()), path.stat().st_mtime_ns)
    except OSError as e:
        raise StoreSpecError(f"--store {spec}: cannot read {file} ({e.strerror})") from None
    what = not_a_file(path.resolve())       # a FIFO would block the import, a directory fail it
    if what is not None:
        raise StoreSpecError(f"--store {spec}: {file} is {what}, not a regular file: FILE.py names "
                             "the Python file the store is in")
    if key in _LOADED:
        return _guarded(_LOADED[key], spec, name)
    module_name = "bughunt_user_store_" + hashlib.sha1(repr(key).encode()).hexdigest()[:12]
    loader = importlib.util.spec_from_file_location(module_name, path.resolve())
    if loader is None:
        raise StoreSpecError(f"--store {spec}: {file} is not a Python module")
    module = importlib.util.module_from_spec(loader)
    sys.modules[module_name] = module
    label = f"importing {path.name}"
    try:
        _call_store(fence, fence.default_dir, label, lambda: loader.loader.exec_module(module))
    except SyntaxError as e:
        del sys.modules[module_name]
        raise StoreSpecError(f"--store {spec}: {path.name}:{e.lineno}: {e.msg}") from None
    except _fence.StoreStopped:
        sys.modules.pop(module_name, None)
        raise
    except Exception as e:          # a learner's module may raise anything while importing
        from ..config import said

        del sys.modules[module_name]
        line = learner_line(e.__traceback__)
        raise StoreSpecError(f"--store {spec}: importing {path.name} raised {said(e)}"
                             + (f" ({line})" if line else "")) from None
    _LOADED[key] = module
    return _guarded(module, spec, name)


def _guarded(module, spec: str, name: str):
    from ..stores import StoreSpecError

    import unicodedata

    # Python keeps an identifier in its NFKC form (PEP 3131): `Störe` typed either way.
    cls = getattr(module, name, None) or getattr(module, unicodedata.normalize("NFKC", name), None)
    if not isinstance(cls, type):
        raise StoreSpecError(f"--store {spec}: {Path(module.__file__).name} has no class {name}")
    missing = [m for m in ("load", "open_for_append", "commit", "close")
               if not callable(getattr(cls, m, None))]
    if missing:
        raise StoreSpecError(f"--store {spec}: class {name} has no {', '.join(missing)} "
                             "(see bughunt/stores/contract.py)")
    label = getattr(cls, "name", name)
    if not isinstance(label, str):       # every verdict prints it: text, and shown escaped
        raise StoreSpecError(f"--store {spec}: the name of class {name} is {_shown(label)}; the "
                             "contract says name is a str, a short label")
    return guard(cls)


# --- the guard ----------------------------------------------------------------------------------

def _call_store(fence, directory, label: str, fn):
    """Run `fn` (the store's code) bracketed: confined to `directory`, announced, and an end of
    the process or a MemoryError turned into `fence.StoreStopped`."""
    at = _STATE[0] if _STATE else ""
    where = label
    depth = fence.enter(directory, label, at)
    status({"begin": label, "at": at})
    handlers = _handlers()
    lab = _lab_modules_now()

    def run():
        try:
            return fn()
        except BaseException:
            # First, before the lab's code below imports anything: a store that cleared
            # sys.modules and then failed is named for what it cleared, not for what followed.
            replaced = _lab_replaced(lab)
            if replaced:
                raise _stopped(fence, "patched", f"replaced {replaced}, which the lab's own code "
                                                 "in its process uses", where, directory,
                               None) from None
            raise

    try:
        result = run()
    except _fence.StoreStopped:
        raise
    except MemoryError as e:
        raise _stopped(fence, "memory", f"ran out of memory (MemoryError{_memory_limit()})",
                       where, directory, e) from None
    except Exception as e:
        refused = _left_group(e) or _kernel_refusal(fence, e)
        if refused:
            record = {"kind": "refused", "event": "kernel", "what": refused, "where": where,
                      "at": at, "dir": str(directory), "line": learner_line(e.__traceback__)}
            fence.log(record)
            raise _fence.FenceRefused({**record, "sentence": f"the kernel refused: the store "
                                                              f"tried to {refused}"}) from None
        try:
            e._bughunt_where = (label, at)   # the suite or the worker judges it; the lab names it
        except AttributeError:
            pass
        raise
    except BaseException as e:
        from ..interrupts import Interrupted
        if isinstance(e, Interrupted):
            raise                        # Ctrl-C, SIGTERM: the lab's to handle (the store's own
            #                              os.kill of its process is named from the fence's note)
        if isinstance(e, SystemExit):
            code = e.code
            what = f"ended its process with sys.exit({'' if code is None else repr(code)})"
            kind = "exit"
        else:
            from ..config import said

            what, kind = f"raised {said(e)}", "raised"
        raise _stopped(fence, kind, what, where, directory, e) from None
    finally:
        fence.leave(depth)
        status({"end": where})
    patched = _patched() or _handler_set(handlers) or _lab_replaced(lab)
    if patched:
        raise _stopped(fence, "patched", f"replaced {patched}, which the lab's own code in its "
                                         "process uses", where, directory, None) from None
    return result


def _left_group(e: BaseException) -> str | None:
    """What the store tried, when `e` is the PermissionError of its own os.setsid, os.setpgid
    or os.setpgrp (the store's process leads the process group by which the lab ends all it
    started, and may not leave it), else None."""
    if not isinstance(e, PermissionError) or e.filename is not None:
        return None
    frames = traceback.extract_tb(e.__traceback__)
    line = (frames[-1].line or "") if frames else ""
    for call in ("setsid", "setpgid", "setpgrp"):
        if re.search(rf"\b{call}\s*\(", line):
            return (f"leave its process group (os.{call}: the lab ends the store's processes by "
                    f"their group, and the system refused it: {e.strerror})")
    return None


def _kernel_refusal(fence, e: BaseException) -> str | None:
    """What the store tried, when `e` is the kernel's refusal (Landlock holds this process, and
    a PermissionError came out of the store's call that the file's own mode does not explain):
    "write x.txt outside its run directory (the kernel refused it: ...)", else None."""
    import errno

    if not fence.kernel_abi:
        return None
    if type(e).__name__ == "OperationalError" and type(e).__module__ == "sqlite3":
        # SQLite's own words for a file it could not open (ATTACH, VACUUM INTO): the path
        opened = re.fullmatch(r"unable to open database: (.+)", str(e))
        if opened and fence.outside_kernel(os.path.realpath(opened.group(1))):
            return (f"open the SQLite database {opened.group(1)} outside its run directory "
                    f"(the kernel refused it, Landlock: {e})")
        return None
    if not isinstance(e, PermissionError) or e.errno not in (errno.EACCES, errno.EPERM):
        return None
    name = e.filename
    shown = os.fsdecode(name) if isinstance(name, (str, bytes)) else None
    if shown is not None:
        real = os.path.realpath(shown)
        if not fence.outside_kernel(real) and (
                os.path.lexists(real) and not os.access(real, os.W_OK) or
                not os.access(os.path.dirname(real) or ".", os.W_OK)):
            return None                  # the mode of a file of its own: the store's exception
    where = f" {shown}" if shown else ""
    return (f"write{where} outside its run directory (the kernel refused it, Landlock: "
            f"{e.strerror or e})")


def _lab_functions() -> dict:
    import json
    out = {"json.dumps": (json, "dumps", json.dumps), "json.loads": (json, "loads", json.loads),
           "json.dump": (json, "dump", json.dump), "json.load": (json, "load", json.load)}
    # what the lab's code in the store's process ends, forks, signals, waits and writes with
    # (a store that replaced os._exit or os.kill left a forked step running the lab's loop)
    for name in ("_exit", "kill", "killpg", "fork", "waitpid", "fsync", "write", "read", "open",
                 "close", "replace", "rename", "getpid"):
        out[f"os.{name}"] = (os, name, getattr(os, name))
    out["sys.exit"] = (sys, "exit", sys.exit)
    return out


#: Functions of the standard library the lab's code calls in the store's process, as they were
#: when this module was imported (before any learner code).
_ORIGINALS = _lab_functions()


def _patched() -> str | None:
    """The first of `_ORIGINALS` the store replaced (then put back: the lab's code goes on
    with the real one), or None."""
    found = None
    for name, (module, attr, original) in _ORIGINALS.items():
        if getattr(module, attr, None) is not original:
            setattr(module, attr, original)          # every one of them put back
            found = found or name
    return found


#: The lab's modules whose names the store's process must leave bound as they are: the fence,
#: the guard, the channel and the steps of a kill's new process.
_LAB_MODULES = ("bughunt.boundary", "bughunt.boundary.fence", "bughunt.boundary.child",
                "bughunt.boundary.channel", "bughunt.boundary.pristine", "bughunt.boundary.jobs")


def _lab_modules_now() -> tuple[dict, dict]:
    """What `_lab_replaced` compares: every module this process has imported, and the names
    the lab's boundary modules bind."""
    return dict(sys.modules), {m: dict(vars(sys.modules[m])) for m in _LAB_MODULES
                               if m in sys.modules}


def _lab_replaced(before: tuple[dict, dict]) -> str | None:
    """ "entries of sys.modules (...)" or "bughunt.boundary.fence.installed" when the store's
    call removed or replaced a module of this process, or rebound a name of the lab's boundary
    modules (all put back, as `_patched` does), else None."""
    modules, names = before
    gone = [m for m, module in modules.items() if sys.modules.get(m) is not module]
    if gone:
        sys.modules.update(modules)
        first = sorted(gone, key=lambda m: (not m.startswith(("bughunt", "sys")), m))
        return (f"entries of sys.modules ({len(gone)} of them: {', '.join(first[:3])}"
                f"{', ...' if len(gone) > 3 else ''})")
    found = None
    for m, saved in names.items():
        now = vars(sys.modules[m])
        for key, value in saved.items():
            if now.get(key, _MISSING) is not value:
                now[key] = value
                found = found or f"{m}.{key}"
    return found


_MISSING = object()

#: Signals whose handlers the lab's own code in the store's process relies on (a child's end,
#: an interrupt, a broken pipe): a store that sets one is named, and the handler put back.
_LAB_SIGNALS = tuple(getattr(signal, n) for n in (
    "SIGCHLD", "SIGINT", "SIGTERM", "SIGHUP", "SIGPIPE", "SIGALRM") if hasattr(signal, n))


def _handlers() -> dict:
    return {s: signal.getsignal(s) for s in _LAB_SIGNALS}


def _handler_set(before: dict) -> str | None:
    """ "a handler for SIGCHLD (signal.signal)" when the store's call changed one of
    `_LAB_SIGNALS`' handlers (put back, where this is the main thread), else None."""
    import threading

    for s, handler in before.items():
        if signal.getsignal(s) is not handler:
            if threading.current_thread() is threading.main_thread():
                try:
                    signal.signal(s, handler if handler is not None else signal.SIG_DFL)
                except (ValueError, OSError, TypeError):
                    pass
            return f"the handler of {signal.Signals(s).name} (signal.signal)"
    return None


def _memory_limit() -> str:
    """ "; its limit is 1 GiB of address space" where the lab set one (Linux), else "". """
    import resource

    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (ValueError, OSError, AttributeError):
        return ""
    if soft == resource.RLIM_INFINITY or not sys.platform.startswith("linux"):
        return ""
    return f"; the lab's limit is {soft / (1 << 30):g} GiB of address space"


def _stopped(fence, how: str, what: str, where: str, directory, e: BaseException | None):
    record = {"kind": "stopped", "how": how, "what": what, "where": where,
              "at": _STATE[0] if _STATE else "", "dir": str(directory),
              "line": learner_line(e.__traceback__) if e is not None else ""}
    fence.log(record)
    return _fence.StoreStopped({**record, "sentence": f"the store {what}, in {where}"})


def _broken(fence, where: str, what: str, directory):
    record = {"kind": "returns", "what": what, "where": where, "dir": str(directory), "line": ""}
    fence.log(record)
    return _fence.StoreStopped({**record, "sentence": what})


def _shown(value) -> str:
    text = repr(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    kind = type(value).__name__
    article = "an" if kind[:1].lower() in "aeiou" else "a"
    return f"{text} ({article} {kind})" if value is not None else "None"


def check_recovered(label: str, got) -> str | None:
    """What is wrong with what load() returned, against the contract, or None."""
    from ..events import initial_state
    from ..stores import Recovered

    says = "the contract says it returns a Recovered(state, ...) (bughunt.stores.Recovered)"
    if not isinstance(got, Recovered):
        return f"{label}.load() returned {_shown(got)}; {says}"
    state = got.state
    if not isinstance(state, dict):
        return (f"{label}.load() returned a Recovered whose state is {_shown(state)}; the "
                "contract says the state is a dict, as initial_state() and apply_event() make it")
    missing = [k for k in initial_state() if k not in state]
    if missing:
        return (f"{label}.load() returned a state without {', '.join(missing)}; the contract says "
                "the state is a dict, as initial_state() and apply_event() make it")
    for field, kind in (("replayed_events", int), ("torn_lines_skipped", int),
                        ("snapshot_used", bool)):
        value = getattr(got, field)
        if not isinstance(value, kind) or (kind is int and (isinstance(value, bool) or value < 0)):
            return (f"{label}.load() returned a Recovered whose {field} is {_shown(value)}; the "
                    f"contract says {field} is " + ("a count (an int, 0 or more)" if kind is int
                                                    else "True or False"))
    if got.snapshot_fallback is not None and not isinstance(got.snapshot_fallback, str):
        return (f"{label}.load() returned a Recovered whose snapshot_fallback is "
                f"{_shown(got.snapshot_fallback)}; the contract says None or a word (\"log\")")
    if not isinstance(got.notes, list) or not all(isinstance(n, str) for n in got.notes):
        return (f"{label}.load() returned a Recovered whose notes is {_shown(got.notes)}; the "
                "contract says notes is a list of strings")
    return None


def check_repairs(label: str, got) -> str | None:
    from ..stores import Repairs

    if not isinstance(got, Repairs):
        return (f"{label}.open_for_append() returned {_shown(got)}; the contract says it returns "
                "a Repairs() (bughunt.stores.Repairs)")
    for field in ("tails_repaired", "temp_files_removed"):
        value = getattr(got, field)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            return (f"{label}.open_for_append() returned a Repairs whose {field} is "
                    f"{_shown(value)}; the contract says a count (an int, 0 or more)")
    return None


def guard(cls):
    """`cls` as the lab calls it behind the boundary: each call bracketed, announced, checked."""
    fence = _fence.installed()
    label = cls.__name__

    class Guarded:
        name = getattr(cls, "name", label)

        def __init__(self, run_dir, config, door):
            self._dir = Path(run_dir)
            self.inner = _call_store(fence, self._dir, f"{label}.__init__",
                               lambda: cls(run_dir, config, door))

        def load(self):
            got = _call_store(fence, self._dir, f"{label}.load", self.inner.load)
            wrong = check_recovered(label, got)
            if wrong:
                raise _broken(fence, f"{label}.load", wrong, self._dir)
            return got

        def open_for_append(self):
            got = _call_store(fence, self._dir, f"{label}.open_for_append",
                              self.inner.open_for_append)
            wrong = check_repairs(label, got)
            if wrong:
                raise _broken(fence, f"{label}.open_for_append", wrong, self._dir)
            return got

        def commit(self, state, event, *, mid):
            detail = (f" (event {event.get('seq')}: {event.get('t')}, page {event.get('page')})"
                      if isinstance(event, dict) else "")
            where = f"{label}.commit{detail}"
            got = _call_store(fence, self._dir, where,
                        lambda: self.inner.commit(state, event, mid=mid))
            if got is not None:
                raise _broken(fence, where, f"{label}.commit() returned {_shown(got)}; the "
                                            "contract says it returns None", self._dir)

        def close(self):
            got = _call_store(fence, self._dir, f"{label}.close", self.inner.close)
            if got is not None:
                raise _broken(fence, f"{label}.close", f"{label}.close() returned "
                                                       f"{_shown(got)}; the contract says it "
                                                       "returns None", self._dir)

    Guarded.__name__ = Guarded.__qualname__ = label
    Guarded.__doc__ = cls.__doc__
    Guarded.learner_class = cls
    return Guarded


# --- jobs --------------------------------------------------------------------------------------

class Context:
    """What a job gets: the channel (status, progress) and the fence."""

    def __init__(self, channel: Channel, fence):
        self.channel, self.fence = channel, fence

    def status(self, **message) -> None:
        status(message)

    def events(self) -> list[dict]:
        """What the fence's log holds so far (every process of this boundary writes to it)."""
        import json

        try:
            with open(self.fence.log_path) as f:
                lines = f.read().splitlines()
        except OSError:
            return []
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append({"kind": "damaged", "what": line[:120]})
        return out


def _job_entry(name: str):
    module, _, function = name.partition(":")
    return getattr(importlib.import_module(module), function)


def describe_failure(e: BaseException) -> dict:
    """A job's exception as the lab reports it: type, words, the store's line, where."""
    from ..config import MESSAGE_CHARS, shown
    from ..stores import StoreSpecError

    where, at = getattr(e, "_bughunt_where", None) or ("", "")
    spec = isinstance(e, StoreSpecError)       # the lab's words, the store's part already cut
    return {"type": type(e).__name__, "text": str(e) if spec or not str(e) else
            shown(str(e), MESSAGE_CHARS), "line": learner_line(e.__traceback__),
            "where": where, "at": at,
            "spec": spec,
            "traceback": "".join(traceback.format_exception(e))[-4000:]}


def _fd_limit() -> int:
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY and soft < (1 << 20) else 1 << 16


def main(argv: list[str]) -> int:
    from ..interrupts import Interrupted, interruptible

    import fcntl

    fence = _fence.installed()
    # The channel moves to a descriptor number nothing names (the one on the command line is
    # closed, and the command line forgotten), held only in `status`'s closure.
    given = int(argv[0])
    moved = fcntl.fcntl(given, fcntl.F_DUPFD_CLOEXEC, 512 + (os.getpid() % 512))
    os.close(given)
    # Nothing else this process was given stays open for the store to write to (a descriptor a
    # caller left): 0, 1 and 2 are the store's, the channel the lab's, and the low numbers held
    # by /dev/null again where the channel was (`fence.hold_low_fds`).
    os.closerange(_fence.LOW_FDS, moved)
    os.closerange(moved + 1, _fd_limit())
    _fence.hold_low_fds()
    sys.argv[1:] = []
    channel = Channel(socket.socket(fileno=moved))
    _tag(channel, None)
    if fence is None:
        _answer({"t": "raised", "type": "RuntimeError", "text": "the process is not fenced",
                 "line": "", "where": "", "spec": False, "traceback": ""})
        return 70
    # The kernel's half of the fence, before any learner code runs here and before any thread.
    abi = _fence.confine()
    from . import pristine
    pristine.start(moved)       # before any learner code is imported here: a kill's new process
    context = Context(channel, fence)
    try:
        with interruptible():
            while True:
                request = channel.recv()
                if request is None:
                    break
                _tag(seq=request.get("seq"))
                status({"fence": {"kernel": abi}})
                try:
                    result = _job_entry(request["job"])(context, **request.get("args", {}))
                    reply = {"t": "result", "result": result}
                except _fence.StoreStopped as e:
                    reply = {"t": "stopped", "record": e.record}
                except Interrupted:
                    raise
                except BaseException as e:       # noqa: the job's own failure is its answer
                    reply = {"t": "raised", **describe_failure(e)}
                set_state(None)
                _answer(reply)                   # the request's one reply, and its last frame
                _tag(seq=None)
    except Interrupted as e:
        try:
            _answer({"t": "interrupted", "signal": e.signum})
        except (OSError, IndexError):
            pass
        return e.code
    return 0
