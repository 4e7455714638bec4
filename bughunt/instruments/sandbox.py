"""A fence around a learner's store while the grader runs it (lesson 9): writes stay in the
grade's own temporary directory, and nothing signals the notebook's kernel.

It is an audit hook (PEP 578, `sys.addaudithook`), installed from outside the code under test in
every process of a grade: the conformance suite's process, the sweep's, its fork server and every
worker forked from it (through a `sitecustomize` the grader puts first on `PYTHONPATH`). Python
raises an audit event before each file operation; the hook refuses, with `OutsideRunDir`, every
one that would change something outside the allowed directories:

- opening a file for writing (`open`, `os.open`, `Path.write_text`...), renaming, removing,
  truncating, linking, changing times or modes, making or removing a directory;
- signalling the kernel that started the grade, its process group, or every process (`kill -1`).

While the conformance suite is inside one of the store's methods, the allowed directory narrows to
that store's own run directory (`confine`): the contract's "keeps its files in its run directory",
checked exactly. In the sweep's workers it is the grade's temporary directory as a whole.

What it does not see, said plainly: a C extension or `ctypes` writing with its own system calls,
and a child process the store starts. A resource limit on CPU time (and, on Linux, on memory) is
the backstop for a process that spins or grows without end after its grade gave up on it.
"""

from __future__ import annotations

import json
import os
import sys
import threading

ENV = "BUGHUNT_SANDBOX"
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
#: Events that change a path: (index of a changed path, index of its dir_fd or None), per path.
_PATH_EVENTS = {
    "os.rename": ((0, 2), (1, 3)), "os.link": ((0, 2), (1, 3)), "os.symlink": ((1, 2),),
    "os.remove": ((0, 1),), "os.rmdir": ((0, 1),), "os.mkdir": ((0, 2),),
    "os.chmod": ((0, 2),), "os.chown": ((0, 3),), "os.utime": ((0, 3),),
    "os.truncate": ((0, None),), "shutil.rmtree": ((0, 1),), "shutil.move": ((0, None), (1, None)),
    "shutil.copyfile": ((1, None),), "shutil.copytree": ((1, None),),
}
_SIGNAL_EVENTS = ("os.kill", "os.killpg")


class OutsideRunDir(PermissionError):
    """A write the grader refused: it would change a file outside the store's run directory."""


_roots: tuple[str, ...] = ()
_log_path: str | None = None
_protected: tuple[int, ...] = ()          # pids that must never be signalled (the kernel)
_confined: list[str] = []                 # while set: the one directory writes may go to
_busy = threading.local()


def _real(path, dir_fd=None) -> str:
    path = os.fsdecode(os.fspath(path))
    if dir_fd is not None and dir_fd >= 0 and not os.path.isabs(path):
        base = _fd_path(dir_fd)            # shutil.rmtree removes by names relative to a dir fd
        if base is None:
            return ""                      # cannot tell where: not refused (said in the docs)
        path = os.path.join(base, path)
    return os.path.realpath(os.path.abspath(path))


def _fd_path(fd: int) -> str | None:
    """The path of the directory behind descriptor `fd` (Linux: /proc; macOS: F_GETPATH)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass
    try:
        import fcntl
        raw = fcntl.fcntl(fd, getattr(fcntl, "F_GETPATH"), bytes(1024))
        return os.fsdecode(raw.split(b"\0", 1)[0])
    except (OSError, AttributeError, ValueError):
        return None


def _inside(path: str, roots) -> bool:
    return any(path == r or path.startswith(r + os.sep) for r in roots)


def allowed(path, dir_fd=None) -> bool:
    """Whether the fence lets `path` be changed now."""
    if isinstance(path, int):                # a descriptor: opened (and checked) before
        return True
    real = _real(path, dir_fd)
    if real in ("", os.devnull):
        return True
    return _inside(real, _confined[-1:] or _roots)


def _changed_paths(event: str, args) -> list[tuple]:
    """(path, dir_fd) for each path the event would change."""
    if event == "open":
        path, mode, flags = args
        writes = (flags & _WRITE_FLAGS) if isinstance(flags, int) else (
            isinstance(mode, str) and any(c in mode for c in "wax+"))
        return [(path, None)] if writes and path is not None else []
    out = []
    for i, j in _PATH_EVENTS.get(event, ()):
        if i < len(args) and isinstance(args[i], (str, bytes, os.PathLike)):
            fd = args[j] if j is not None and j < len(args) else None
            out.append((args[i], fd if isinstance(fd, int) else None))
    return out


def _refuse(what: str, path, dir_fd=None) -> None:
    message = (f"the grader refused to signal {path}: a store signals no other process"
               if what == "signal" else
               f"the grader refused to {what} {os.fsdecode(os.fspath(path))}: a store keeps its "
               "files in its run directory")
    if _log_path:
        _busy.on = True
        try:
            fd = os.open(_log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                real = "" if what == "signal" else _real(path, dir_fd)
                os.write(fd, (json.dumps({"what": what, "path": os.fsdecode(os.fspath(path)),
                                          "real": real, "confined": bool(_confined)})
                              + "\n").encode())
            finally:
                os.close(fd)
        finally:
            _busy.on = False
    raise OutsideRunDir(13, message, os.fsdecode(os.fspath(path)))


def _hook(event: str, args) -> None:
    if getattr(_busy, "on", False):
        return
    if event in _SIGNAL_EVENTS:
        pid = args[0]          # os.kill(-g) and os.killpg(g) both signal the group g
        if pid == -1 or abs(pid) in _protected:
            _refuse("signal", f"process {pid}")
        return
    if event != "open" and event not in _PATH_EVENTS:
        return
    for path, dir_fd in _changed_paths(event, args):
        if not allowed(path, dir_fd):
            _refuse("write" if event == "open" else event.split(".")[-1], path, dir_fd)


class confine:
    """Within this block, only `directory` may be changed (a store's run directory)."""

    def __init__(self, directory):
        self.directory = _real(directory)

    def __enter__(self):
        _confined.append(self.directory)

    def __exit__(self, *exc):
        _confined.pop()


def install(roots, *, log: str | None = None, protect=(), cpu_s: int | None = None,
            memory_bytes: int | None = None) -> None:
    """Fence this process (and every process it forks): writes only under `roots`; the pids in
    `protect` (and their process groups) never signalled; refusals appended to `log` (JSON lines).
    Cannot be undone: an audit hook stays for the life of the process."""
    global _roots, _log_path, _protected
    _roots = tuple(_real(r) for r in roots)
    _log_path = log
    _protected = tuple(int(p) for p in protect)
    _limits(cpu_s, memory_bytes)
    sys.addaudithook(_hook)


def _limits(cpu_s: int | None, memory_bytes: int | None) -> None:
    import resource

    wanted = [(resource.RLIMIT_CPU, cpu_s)]
    if sys.platform.startswith("linux"):
        wanted.append((resource.RLIMIT_AS, memory_bytes))
    for which, value in wanted:
        if not value:
            continue
        try:
            soft, hard = resource.getrlimit(which)
            cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(which, (cap, hard))
        except (ValueError, OSError):
            pass                        # a limit the system refuses: the timeouts still hold


def settings(roots, *, log: str, protect=(), cpu_s: int | None = None,
             memory_bytes: int | None = None) -> str:
    """The fence's settings as the environment variable `ENV` carries them to child processes."""
    return json.dumps({"roots": [str(r) for r in roots], "log": str(log),
                       "protect": list(protect), "cpu_s": cpu_s, "memory_bytes": memory_bytes})


def install_from_env() -> bool:
    """Install the fence the environment describes (`ENV`); False if it describes none."""
    raw = os.environ.get(ENV)
    if not raw:
        return False
    s = json.loads(raw)
    install(s["roots"], log=s["log"], protect=s["protect"], cpu_s=s["cpu_s"],
            memory_bytes=s["memory_bytes"])
    return True


#: The `sitecustomize.py` the grader writes into a directory it puts first on `PYTHONPATH`, so
#: that every Python process of a grade fences itself before any other code runs.
SITECUSTOMIZE = ("# Written by bughunt.grader: fence this process (bughunt.instruments.sandbox).\n"
                 "import bughunt.instruments.sandbox as _sandbox\n"
                 "_sandbox.install_from_env()\n")
