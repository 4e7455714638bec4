"""The fence: what a learner's store may not do, refused as it tries (lesson 9).

It is an audit hook (PEP 578, `sys.addaudithook`) that every Python process behind the boundary
installs before any other code runs (`install_from_env`, from the `sitecustomize` the boundary
writes). Python raises an audit event before each of the operations below; while the store's code
is running, the hook refuses them with `FenceRefused`, and writes what was tried, and where, to the
boundary's log, which the lab reads afterwards (a store that catches the refusal is still named):

- starting a process: `subprocess`, `os.system`, `os.fork`, `os.forkpty`, `os.posix_spawn`,
  `os.exec*`, `os.spawn*` (where the kernel holds the process, a library the store calls may start
  a helper of its own, as matplotlib runs fc-list: the helper is held as the store is);
- loading a C library or a C function through `ctypes` (`ctypes.dlopen`, `ctypes.dlsym`...),
  when the store's own code asks for it (a library it imports, numpy say, may use ctypes itself);
- a signal to any process but the store's own (and its own process group, where it leads one);
- changing a file outside the run directory of the store being called: opening it for writing,
  renaming, removing, truncating, linking, changing its times or mode, making or removing a
  directory, `shutil`'s tree operations, a SQLite database (a `file:` URI counts as read-only
  only when its last `mode` is `ro`), a Unix socket bound at a path;
- changing its own resource limits (the boundary's memory and time caps).

"While the store's code is running" means: the thread is inside a call the lab made into the store
(its import, `__init__`, `load`, `open_for_append`, `commit`, `close`: the boundary's guard
brackets each one), or a frame of the store's own files is on the stack. The lab's own machinery in
the same process (the fork server, a sweep's workers, the conformance suite's temp files) is
neither, so it may start processes and write where it writes.

The state of the hook lives in its closure: the directories, the log, the brackets. No module
attribute turns it off, and an audit hook cannot be removed. The functions it calls are bound when
it is installed, so replacing `os.path.realpath` or `json.dumps` changes nothing for it.

The kernel's half (`confine`, `landlock.py`): on Linux with Landlock, the boundary's child
restricts itself before it imports any learner code, and every process it starts inherits the
restriction: nothing is made, written, truncated, renamed or removed outside the boundary's
temporary folder and the run directories it was given, no TCP port is bound or connected to (but a
model server's), and (Landlock ABI 6) no signal reaches a process outside. The hook stays the layer
that *names* a refusal in one sentence, where Python tells it what is being tried; the kernel is
what stops it, including what the hook cannot see: an `os.open` with a `dir_fd`, `os.mkfifo` and
`os.mknod`, SQLite's `ATTACH` and `VACUUM INTO`, `readline.write_history_file`, C code, a process
started past the hook. Where the kernel refuses, the store's call fails with EACCES, and the guard
(`child.py`) names it as the store's write outside its run directory; a write from a thread or a
callback with no frame of the store's on the stack, which the hook sees but cannot place, is
logged as refused too, since the lab's own code never writes where the kernel refuses.

What it is still not: a complete sandbox. Reading is not restricted (any file the user may read,
the store may read); within the boundary's temporary folder one crash state's directory is not
fenced from another's by the kernel, only by the hook; the hook's state can be reached by code that
walks the interpreter's frames and objects, and a store that catches the kernel's refusal and
carries on is stopped without being named. Where Landlock is missing (macOS, a kernel before 5.13,
a container whose seccomp profile forbids it), the fence is this hook alone, and the grader's
verdict says so and lists what the hook alone lets by (`landlock.HOOK_ALONE_GAPS`): code written to
get out of it can (a thread, a `weakref.finalize` or `atexit` callback that calls `os.system` with
no frame of the store's on the stack; `_posixsubprocess.fork_exec` called directly; a `dir_fd`; a C
extension).
"""

from __future__ import annotations

import json
import os
import signal
import sys

#: The environment variable that carries the fence's settings to every process of a boundary.
ENV = "BUGHUNT_BOUNDARY"

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
#: Events that change a path: (index of the path in the event's arguments, index of its dir_fd).
_PATH_EVENTS = {
    "os.rename": ((0, 2), (1, 3)), "os.link": ((0, 2), (1, 3)), "os.symlink": ((1, 2),),
    "os.remove": ((0, 1),), "os.rmdir": ((0, 1),), "os.mkdir": ((0, 2),),
    "os.chmod": ((0, 2),), "os.chown": ((0, 3),), "os.utime": ((0, 3),),
    "os.chflags": ((0, None),), "os.lchflags": ((0, None),), "os.truncate": ((0, None),),
    "os.setxattr": ((0, None),), "os.removexattr": ((0, None),),
    "shutil.rmtree": ((0, 1),), "shutil.move": ((0, None), (1, None)),
    "shutil.copyfile": ((1, None),), "shutil.copytree": ((1, None),),
    "shutil.copymode": ((1, None),), "shutil.copystat": ((1, None),),
    "shutil.chown": ((0, None),), "shutil.unpack_archive": ((1, None),),
    "sqlite3.connect": ((0, None),),
}
_VERBS = {"os.rename": "rename", "os.link": "link", "os.symlink": "make a symlink at",
          "os.remove": "remove", "os.rmdir": "remove the directory",
          "os.mkdir": "make the directory",
          "os.chmod": "change the mode of", "os.chown": "change the owner of",
          "os.utime": "change the times of", "os.truncate": "truncate",
          "shutil.rmtree": "remove the directory tree", "shutil.move": "move",
          "shutil.copyfile": "copy a file to", "shutil.copytree": "copy a tree to",
          "sqlite3.connect": "open the SQLite database"}
_PROCESS_EVENTS = {
    "subprocess.Popen": "start a process", "os.system": "run a shell command",
    "os.fork": "fork its process", "os.forkpty": "fork its process", "os.posix_spawn":
    "start a program", "os.exec": "replace its process with a program", "os.spawn":
    "start a program", "os.startfile": "start a program", "pty.spawn": "start a program",
    "_thread.start_new_thread": "start a thread",
}
#: The lab's own files in a run directory: a store that writes one of these names is told so.
_LAB_NAMES = {
    "tracker.db": "the tracker's database", "tracker.db-journal": "the tracker's journal",
    "tracker.db-wal": "the tracker's journal", "tracker.db-shm": "the tracker's journal",
    "bill.jsonl": "the model's bill", "run.lock": "the worker's lock on the run",
    "config.json": "the run's configuration", "config.json.tmp": "the run's configuration",
    "io.jsonl": "the door's journal", "calls.jsonl": "the model calls' journal",
    "trace.jsonl": "the run's trace",
}
_LIMIT_EVENTS = {"resource.setrlimit": "change its resource limits",
                 "resource.prlimit": "change its resource limits"}
_SIGNAL_EVENTS = ("os.kill", "os.killpg", "signal.pthread_kill")
#: Signals a store may send itself, but that end or stop its process: worth a note in the log,
#: so that the verdict can say the store did it.
_ENDING = {int(getattr(signal, name)): name for name in (
    "SIGKILL", "SIGSTOP", "SIGTERM", "SIGABRT", "SIGSEGV", "SIGINT", "SIGHUP", "SIGQUIT",
    "SIGTSTP")}


class StoreStopped(BaseException):
    """The lab stopped the store (the fence refused it, or the guard found it broke the contract
    or ended its process). Not an `Exception`: neither the store's `except Exception` nor the
    lab's turns it into a rule broken or a resume failed; it stops the run and is reported.
    `record` is what the log says: kind, what, where, line."""

    def __init__(self, record: dict):
        super().__init__(record.get("sentence") or record.get("what", ""))
        self.record = record


class FenceRefused(StoreStopped):
    """An operation the fence refused."""


def settings(*, roots, default_dir, learner_dirs, log, limits: dict | None = None,
             kernel: dict | None = None) -> str:
    """The fence's settings, as the environment variable `ENV` carries them to child processes.

    roots: the directories a store may ever write under (the boundary's temporary folder, a run
    directory it was given); default_dir: where its code may write outside a call of the lab's
    (its import); learner_dirs: where its files are; log: the boundary's log (JSON lines);
    kernel: what the boundary's child asks Landlock for (`confine`): {"dirs": [...], "files":
    [...], "ports": [...]}; once applied, "abi" says which version holds (0: none)."""
    return json.dumps({"roots": [str(r) for r in roots], "default_dir": str(default_dir),
                       "learner_dirs": [str(d) for d in learner_dirs], "log": str(log),
                       "limits": limits or {}, "kernel": kernel or {}})


_INSTALLED: list = []        # the Fence of this process, once installed (inherited by a fork)


def installed():
    """This process's fence, or None. (An audit hook cannot be removed, so once it is there it
    stays for the life of the process and of every process it forks.)"""
    return _INSTALLED[0] if _INSTALLED else None


#: Descriptors below this are held by /dev/null in every process of a boundary (`hold_low_fds`).
LOW_FDS = 10


def hold_low_fds() -> None:
    """Every free descriptor below LOW_FDS held by /dev/null, read-only, in every process of the
    boundary before other code opens a file: the lab's own files there (the tracker, the bill, a
    fork server's socket) get numbers past them, and a store that writes to 3, 4, 5 (a guess at
    the lab's) gets its own OSError (EBADF), never a file of the lab's damaged, which a verdict
    then blamed on the lab. (Not inherited by a program started: it holds its own.)"""
    while True:
        fd = os.open(os.devnull, os.O_RDONLY)
        if fd >= LOW_FDS:
            os.close(fd)
            return


def install_from_env() -> bool:
    """Install the fence `ENV` describes (and the resource limits with it); False if none."""
    raw = os.environ.get(ENV)
    if not raw or _INSTALLED:
        return bool(_INSTALLED)
    hold_low_fds()
    s = json.loads(raw)
    apply_limits(s.get("limits") or {})
    fence = install(roots=s["roots"], default_dir=s["default_dir"],
                    learner_dirs=s["learner_dirs"], log=s["log"])
    kernel = s.get("kernel") or {}
    if kernel.get("abi"):           # a process the confined child started: inside its domain
        fence.kernel_on(kernel["abi"], kernel.get("dirs", []),
                        kernel.get("files", []) + kernel.get("append", []))
    return True


def add_learner_dirs() -> None:
    """Put the store's folder (`ENV`'s learner_dirs) at the end of the import path, after the
    standard library and the installed packages, so that a store's file can import another
    beside it (`from helpers import x`), while a file there named like a module the lab or
    Python imports (a `sqlite3.py`, a `selectors.py`, a `json.py`) is never imported in its
    place: the files beside the store are ignored unless the store imports them by a name of
    their own. (On PYTHONPATH the folder would come before the standard library.)"""
    raw = os.environ.get(ENV)
    if not raw:
        return
    for d in json.loads(raw).get("learner_dirs") or ():
        if d not in sys.path:
            sys.path.append(d)


def confine() -> int:
    """The kernel's half of the fence (`landlock.restrict`), for this process and every process
    it starts, as `ENV` asks; the boundary's child calls it once, before it imports learner code
    or starts a thread. Returns the Landlock ABI in force (0: the audit hook alone), and tells
    this process's hook and, through `ENV`, every process started from now on."""
    from . import landlock

    raw = os.environ.get(ENV)
    fence = installed()
    if not raw or fence is None:
        return 0
    s = json.loads(raw)
    kernel = s.get("kernel") or {}
    if "dirs" not in kernel or kernel.get("abi") is not None:
        return int(kernel.get("abi") or 0)
    try:
        version = landlock.restrict(writable_dirs=kernel["dirs"],
                                    writable_files=kernel.get("files", []),
                                    appendable_files=kernel.get("append", []),
                                    tcp_ports=kernel.get("ports", []))
    except OSError:
        version = 0                   # refused (a container's seccomp profile): the hook alone
    kernel["abi"] = version
    s["kernel"] = kernel
    os.environ[ENV] = json.dumps(s)
    if version:
        fence.kernel_on(version, kernel["dirs"],
                        kernel.get("files", []) + kernel.get("append", []))
    return version


def apply_limits(limits: dict) -> None:
    """Resource limits for this process and every process it starts, soft and hard (so that the
    store cannot raise them again): memory (address space, Linux; macOS accepts RLIMIT_AS and
    does not enforce it), CPU seconds, the size of any one file, no core files."""
    import resource

    wanted = [(resource.RLIMIT_CPU, limits.get("cpu_s")),
              (resource.RLIMIT_FSIZE, limits.get("file_bytes")),
              (resource.RLIMIT_CORE, 0)]
    if sys.platform.startswith("linux"):
        wanted.append((resource.RLIMIT_AS, limits.get("memory_bytes")))
    for which, value in wanted:
        if value is None:
            continue
        try:
            _soft, hard = resource.getrlimit(which)
            cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(which, (cap, cap))
        except (ValueError, OSError):
            pass                    # a limit the system refuses: the boundary's timeouts still hold


class Fence:
    """What the lab's code holds of the fence: brackets around its calls into the store, and the
    log. Everything else is in the hook's closure."""

    def __init__(self, enter, leave, log, where, *, roots, default_dir, learner_dirs, log_path,
                 kernel_on, kernel):
        self.enter, self.leave, self.log, self.where = enter, leave, log, where
        self.roots, self.default_dir, self.learner_dirs = roots, default_dir, learner_dirs
        self.log_path = log_path
        self.kernel_on = kernel_on      # (abi, dirs, files): the kernel holds this process too
        self._kernel = kernel

    @property
    def kernel_abi(self) -> int:
        """The Landlock ABI that confines this process (0: the audit hook alone)."""
        return self._kernel[0] if self._kernel else 0

    def outside_kernel(self, path: str) -> bool:
        """Whether `path` (absolute, resolved) is where the kernel lets nothing be written."""
        if not self._kernel:
            return False
        _abi, dirs, files = self._kernel
        return not (path in files or any(path == d or path.startswith(d + "/") for d in dirs))

    def call(self, directory, label: str, at: str = ""):
        """A context manager: the store's code runs in it, confined to `directory`."""
        return _Bracket(self, directory, label, at)


class _Bracket:
    def __init__(self, fence: Fence, directory, label: str, at: str = ""):
        self.fence, self.directory, self.label, self.at = fence, directory, label, at

    def __enter__(self):
        self.depth = self.fence.enter(self.directory, self.label, self.at)

    def __exit__(self, *exc):
        self.fence.leave(self.depth)


def install(*, roots, default_dir, learner_dirs, log) -> Fence:
    """Fence this process (and every process it forks). Returns the `Fence` the lab's code uses."""
    import _thread
    import posix
    import stat
    import sysconfig
    from _json import encode_basestring_ascii as quote

    # Bound now: what the hook calls cannot be replaced from Python afterwards.
    getframe, get_ident = sys._getframe, _thread.get_ident
    getpid, getpgrp, getcwd = posix.getpid, posix.getpgrp, posix.getcwd
    lstat, readlink, fspath, is_link = posix.lstat, posix.readlink, posix.fspath, stat.S_ISLNK
    os_open, os_write, os_close = posix.open, posix.write, posix.close
    encoding = sys.getfilesystemencoding()
    APPEND = posix.O_WRONLY | posix.O_APPEND | posix.O_CREAT
    write_flags, path_events, verbs = _WRITE_FLAGS, dict(_PATH_EVENTS), dict(_VERBS)
    lab_names = dict(_LAB_NAMES)
    process_events, limit_events = dict(_PROCESS_EVENTS), dict(_LIMIT_EVENTS)
    signal_events, ending = frozenset(_SIGNAL_EVENTS), dict(_ENDING)
    names = {int(s): s.name for s in signal.Signals}
    watched = frozenset({"open", *path_events, *process_events, *limit_events, *signal_events,
                         "socket.bind"})
    Refused_, isinstance_, str_, int_, bytes_ = FenceRefused, isinstance, str, int, bytes

    def text(path) -> str:
        p = fspath(path)
        return p.decode(encoding, "surrogateescape") if isinstance_(p, bytes_) else p

    def resolve(path: str, base: str | None = None) -> str:
        """The real absolute path, symlinks followed, without os.path (which can be replaced)."""
        if not path.startswith("/"):
            path = (base if base is not None else getcwd()) + "/" + path
        parts, done, links = path.split("/"), [], 0
        while parts:
            part = parts.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                if done:
                    done.pop()
                continue
            candidate = "/" + "/".join(done + [part])
            try:
                st = lstat(candidate)
            except OSError:
                done.append(part)
                continue
            if is_link(st.st_mode) and links < 40:
                links += 1
                target = readlink(candidate)
                if target.startswith("/"):
                    done = []
                parts = [p for p in target.split("/")] + parts
                continue
            done.append(part)
        return "/" + "/".join(done)

    def fd_dir(fd: int) -> str | None:
        try:
            return readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
        try:
            import fcntl
            raw = fcntl.fcntl(fd, fcntl.F_GETPATH, bytes(1024))
            return raw.split(b"\0", 1)[0].decode(encoding, "surrogateescape")
        except (OSError, AttributeError, ValueError):
            return None

    def inside(path: str, dirs) -> bool:
        for d in dirs:
            if path == d or path.startswith(d + "/"):
                return True
        return False

    roots_ = tuple(resolve(text(r)) for r in roots)
    default_ = resolve(text(default_dir))
    learners = tuple(resolve(text(d)) for d in learner_dirs)
    paths = sysconfig.get_paths()
    std = tuple({resolve(p) for p in (paths.get("stdlib"), paths.get("platstdlib")) if p})
    site = tuple({resolve(p) for p in (paths.get("purelib"), paths.get("platlib")) if p})
    others = tuple({resolve(p) for p in (
        sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix) if p})
    lab = (resolve(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),)
    log_path = text(log)
    origins: dict[str, str] = {}
    brackets: dict[int, list[tuple[str, str]]] = {}
    busy: set[int] = set()
    kernel: list = []                 # [abi, dirs, files] once Landlock holds this process
    from urllib.parse import parse_qsl
    unix = getattr(__import__("socket"), "AF_UNIX", None)

    def kernel_on(abi: int, dirs, files) -> None:
        if not kernel:
            kernel.extend([int_(abi), tuple(resolve(text(d)) for d in dirs),
                           tuple(resolve(text(f)) for f in files)])

    def outside_kernel(real: str) -> bool:
        return bool(kernel) and not (real in kernel[2] or inside(real, kernel[1]))

    def read_only_uri(query: str) -> bool:
        """A SQLite URI's query opens read-only (SQLite reads every `mode`; the last wins)."""
        modes = [v for k, v in parse_qsl(query, keep_blank_values=True) if k == "mode"]
        return bool(modes) and modes[-1] in ("ro", "memory")

    def origin(filename: str) -> str:
        """Whose code a frame runs: the store's ("learner"), the lab's, the standard library's,
        or other (site-packages, `<string>`, frozen modules)."""
        kind = origins.get(filename)
        if kind is None:
            real = resolve(filename) if filename.startswith("/") else ""
            kind = ("std" if filename.startswith("<frozen ") else
                    "other" if not real or inside(real, site) else
                    "std" if inside(real, std) else
                    "lab" if inside(real, lab) else "other" if inside(real, others) else
                    "learner" if inside(real, learners) else "other")
            origins[filename] = kind
        return kind

    def store_context():
        """(innermost bracket or None, the store's innermost frame as file/line/function or "",
        whether the nearest frame that is not the standard library's is the store's). Code
        compiled from a string (`<string>`: exec, eval) is its caller's: it is skipped."""
        stack = brackets.get(get_ident())
        bracket = stack[-1] if stack else None
        f = getframe(2)
        line, nearest = "", None
        while f is not None:
            code = f.f_code
            kind = origin(code.co_filename)
            if nearest is None and kind != "std" and not (
                    code.co_filename.startswith("<") and not
                    code.co_filename.startswith("<frozen ")):
                nearest = kind
            if kind == "learner" and not line:
                line = (f"{code.co_filename.rsplit('/', 1)[-1]}, line {f.f_lineno}, "
                        f"in {code.co_name}")
            f = f.f_back
        return bracket, line, nearest == "learner"

    def log_line(record: dict) -> None:
        me = get_ident()
        nested = me in busy
        busy.add(me)                  # the log's own open is the lab's, not the store's
        try:
            write_line({**record, "pid": getpid()})
        finally:
            if not nested:
                busy.discard(me)

    def write_line(record: dict) -> None:
        parts = []
        for key, value in record.items():
            shown = (quote(value) if isinstance_(value, str_) else
                     str_(int_(value)) if isinstance_(value, int_) else "null")
            parts.append(quote(key) + ": " + shown)
        try:
            fd = os_open(log_path, APPEND, 0o644)
            try:
                os_write(fd, ("{" + ", ".join(parts) + "}\n").encode("utf-8", "replace"))
            finally:
                os_close(fd)
        except OSError:
            pass

    def refuse(event: str, what: str, bracket, line: str) -> None:
        record = {"kind": "refused", "event": event, "what": what,
                  "where": bracket[1] if bracket else "", "at": bracket[2] if bracket else "",
                  "dir": bracket[0] if bracket else "", "line": line}
        log_line(record)
        raise Refused_({**record,
                        "sentence": f"the lab's fence refused: the store tried to {what}"})

    def allowed_dir(bracket) -> str:
        return bracket[0] if bracket else default_

    def changed_paths(event: str, args):
        if event == "open":
            path, mode, flags = args
            writes = (flags & write_flags) if isinstance_(flags, int_) else (
                isinstance_(mode, str_) and any(c in mode for c in "wax+"))
            if not writes or path is None or isinstance_(path, int_):
                return ()
            return ((path, None),)
        out = []
        for i, j in path_events[event]:
            if i < len(args) and isinstance_(args[i], (str_, bytes_, os.PathLike)):
                fd = args[j] if j is not None and j < len(args) else None
                out.append((args[i], fd if isinstance_(fd, int_) and fd >= 0 else None))
        return out

    def hook(event: str, args) -> None:
        if event not in watched and not event.startswith("ctypes."):
            return
        if event == "open":
            flags, mode = args[2], args[1]
            if not ((flags & write_flags) if isinstance_(flags, int_) else
                    (isinstance_(mode, str_) and any(c in mode for c in "wax+"))):
                return
        me = get_ident()
        if me in busy:
            return
        busy.add(me)
        try:
            bracket, line, by_store = store_context()
            if bracket is None and not line:
                if kernel and event not in process_events and event not in signal_events:
                    beyond(event, args)   # the lab's code never writes where the kernel refuses
                return                            # the lab's own code: not fenced
            if event == "socket.bind":
                address = args[1] if len(args) > 1 else None
                if (unix is not None and getattr(args[0], "family", None) == unix and
                        isinstance_(address, (str_, bytes_)) and address and
                        address[:1] not in ("\0", b"\0")):
                    real = resolve(text(address))
                    if not inside(real, (allowed_dir(bracket),)):
                        refuse(event, f"bind a Unix socket at {real} (outside its run "
                                      "directory)", bracket, line)
                return
            if event.startswith("ctypes.") and not by_store:
                return                # a library the store imports or calls uses ctypes itself
            if event in process_events and kernel and not by_store:
                return                # ... or starts a helper (matplotlib's fc-list): the kernel
                #                       holds it as it holds the store (no write outside, no TCP)
            if event in process_events or event.startswith("ctypes.") or event in limit_events:
                detail = ""
                if event == "subprocess.Popen" and len(args) > 1:
                    detail = ": " + " ".join(text(a) if isinstance_(a, (str_, bytes_)) else
                                             str_(a) for a in (args[1] if isinstance_(
                                                 args[1], (list, tuple)) else [args[1]]))
                elif event in ("os.system",) and args:
                    detail = ": " + text(args[0])
                elif event in ("os.posix_spawn", "os.exec", "os.spawn") and args:
                    detail = ": " + text(args[1] if event == "os.spawn" else args[0])
                elif event.startswith("ctypes.") and args:
                    detail = f": {args[0]}" if isinstance_(args[0], (str_, bytes_)) else ""
                what = (process_events.get(event) or limit_events.get(event) or
                        "load a C library or function through ctypes")
                refuse(event, f"{what} ({event}{detail[:2000]})", bracket, line)
            if event in signal_events:
                target, signum = args[0], args[1]
                if event == "signal.pthread_kill" or signum == 0:
                    ok = True
                else:
                    pid, group = getpid(), getpgrp()
                    ok = (target == pid if event == "os.kill" and target > 0 else
                          group == pid and target in ((0, group) if event == "os.killpg"
                                                      else (0, -group)))
                if not ok:
                    whom = (f"process group {target}" if event == "os.killpg" or target <= 0
                            else f"process {target}")
                    refuse(event, f"signal {whom} with {names.get(signum, signum)} (not its own "
                                  "process)", bracket, line)
                if signum in ending and by_store:
                    log_line({"kind": "note", "event": event,
                              "what": f"sent {ending[signum]} to its own process",
                              "where": bracket[1] if bracket else "",
                              "at": bracket[2] if bracket else "",
                              "dir": bracket[0] if bracket else "", "line": line})
                return
            target_dir = allowed_dir(bracket)
            for path, dir_fd in changed_paths(event, args):
                shown = text(path)
                if event == "sqlite3.connect":
                    if shown.startswith("file:"):
                        shown, _, query = shown[5:].partition("?")
                        shown = shown.partition("#")[0]
                        if read_only_uri(query.partition("#")[0]):
                            continue
                    if shown in ("", ":memory:"):
                        continue
                base = fd_dir(dir_fd) if dir_fd is not None else None
                if dir_fd is not None and base is None:
                    continue                   # cannot tell where: not refused (said above)
                real = resolve(shown, base)
                if real == "/dev/null":
                    continue
                if inside(real, (target_dir,)):
                    name = real.rsplit("/", 1)[1]
                    if bracket and real == bracket[0] + "/" + name and name in lab_names:
                        refuse(event, f"{verbs.get(event, 'write') if event != 'open' else 'write'}"
                                      f" {name} in its run directory: that is the name of "
                                      f"{lab_names[name]}, one of the lab's own files there "
                                      "(give the store's files names of their own)",
                               bracket, line)
                    continue
                verb = "write" if event == "open" else verbs.get(event, event)
                place = ("outside its run directory" if bracket and bracket[0] != default_
                         else "outside the boundary's temporary folder")
                if target_dir.startswith(real + "/"):
                    what = f"the directory above its run directory ({place})"
                elif base is None and not shown.startswith("/"):
                    # An os.open's audit event carries no dir_fd: the path may be relative to
                    # a directory descriptor as well as to the working directory.
                    what = (f"{shown}, a relative path (to the working directory, or to a "
                            f"directory descriptor given as dir_fd; {place}: build paths from "
                            "run_dir)")
                elif real.rsplit("/", 1)[0] in learners:
                    what = f"{real.rsplit('/', 1)[1]} beside the store's file ({place})"
                elif bracket and inside(real, (default_,)):
                    # tempfile's folder by default (TMPDIR): the boundary's, removed at its end
                    what = (f"$TMPDIR/{real[len(default_) + 1:]}, in the temporary folder where "
                            f"tempfile writes by default ({place}: give tempfile dir=run_dir)")
                else:
                    what = f"{real} ({place})"
                refuse(event, f"{verb} {what}", bracket, line)
        finally:
            busy.discard(me)

    def beyond(event: str, args) -> None:
        """An operation of no call into the store, in a process the kernel confines: one that
        changes a path where the kernel lets nothing be written is the store's (a thread, a
        finalizer, a callback it left): logged as refused; the kernel stops it."""
        try:
            changes = changed_paths(event, args) if event in path_events or event == "open" \
                else ()
        except (TypeError, ValueError, IndexError):
            return
        for path, dir_fd in changes:
            shown = text(path)
            if event == "sqlite3.connect":
                query = shown.partition("?")[2] if shown.startswith("file:") else ""
                if shown in ("", ":memory:") or read_only_uri(query):
                    continue
                shown = shown[5:].partition("?")[0] if shown.startswith("file:") else shown
            base = fd_dir(dir_fd) if dir_fd is not None else None
            real = resolve(shown, base)
            if real == "/dev/null" or not outside_kernel(real):
                continue
            verb = "write" if event == "open" else verbs.get(event, event)
            log_line({"kind": "refused", "event": event,
                      "what": f"{verb} {real} (outside its run directory, from no call into "
                              "the store: a thread or a callback it left; the kernel refused it)",
                      "where": "", "at": "", "dir": "", "line": ""})

    def enter(directory, label: str, at: str = "") -> int:
        """Bracket a call into the store (`label`: which call; `at`: what the lab was doing);
        returns the depth to `leave` at. A directory outside the fence's roots is never allowed:
        the bracket then confines to the default one."""
        real = resolve(text(directory))
        if not inside(real, roots_):
            real = default_
        stack = brackets.setdefault(get_ident(), [])
        stack.append((real, str_(label), str_(at)))
        return len(stack) - 1

    def leave(depth: int) -> None:
        stack = brackets.get(get_ident())
        if stack:
            del stack[depth:]

    def where() -> tuple[str, str, str] | None:
        stack = brackets.get(get_ident())
        return stack[-1] if stack else None

    sys.addaudithook(hook)
    fence = Fence(enter, leave, log_line, where, roots=roots_, default_dir=default_,
                  learner_dirs=learners, log_path=log_path, kernel_on=kernel_on, kernel=kernel)
    _INSTALLED.append(fence)
    return fence
