"""From a program's system calls to the lab's I/O journal (Linux: strace(1), which needs ptrace).

`run_traced` runs PROGRAM under stock strace, as ALICE (Pillai et al., OSDI 2014) runs an
application under its own patched one, and `parse` turns the trace into journal operations
(`bughunt.instruments.journal.Op`) on the files below DIR, in the order strace printed them:

    strace -f -qq -y -xx -X raw -s N -e trace=... -e raw=read,readv -e signal=none -o TRACE

(strace(1): `-f` follows every process and thread, `-y` prints the path behind each descriptor,
`-xx` prints every byte of a buffer in hex, `-X raw` prints flags as numbers, `-s N` prints
buffers up to N bytes, `-e raw=read,readv` keeps read buffers out but keeps their return values.)

To know which file a write reaches and at which offset, the parser keeps what the kernel keeps:
per process an fd table (shared by threads and by `clone(CLONE_FILES)`, copied by `fork`, its
O_CLOEXEC descriptors dropped by `execve`), and open file descriptions with their shared offset
and O_APPEND flag (moved by read, write, lseek; `dup`, `dup2`, `dup3`, `F_DUPFD` and fork share
them; `close_range` closes many). Paths are resolved against the calling process's working
directory or the directory descriptor of an `*at` call.

What strace cannot show makes the trace unfit for a verdict, and the parser says so in one
sentence (`Trace.refusals`): a shared writable mmap of a file below DIR (its writes are memory
stores, no system call), sendfile, copy_file_range, splice, io_uring and Linux AIO (the kernel
moves the bytes), two threads writing one file (strace's line order is not the order in which
their writes took effect), a buffer longer than `-s`, a descriptor whose open was not seen.
"""

from __future__ import annotations

import base64
import fnmatch
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..instruments.journal import Op

#: The system calls traced: whatever opens, moves, writes, syncs, renames or removes a file, or
#: copies an fd table. Reads only to follow offsets (their buffers stay out: -e raw=read,readv).
SYSCALLS = (
    "open,openat,openat2,creat,close,close_range,dup,dup2,dup3,fcntl,ioctl,"
    "read,readv,write,writev,pwrite64,pwritev,pwritev2,lseek,"
    "truncate,ftruncate,fallocate,rename,renameat,renameat2,unlink,unlinkat,rmdir,mkdir,mkdirat,"
    "link,linkat,symlink,symlinkat,fsync,fdatasync,sync,syncfs,msync,mmap,"
    "sendfile,copy_file_range,splice,tee,vmsplice,io_uring_setup,io_submit,"
    "clone,clone3,fork,vfork,execve,execveat,chdir,fchdir")

#: strace prints at most this many bytes of a buffer; a longer write is refused, never guessed.
MAX_WRITE = 1 << 22

O_ACCMODE, O_CREAT, O_TRUNC, O_APPEND = 0o3, 0o100, 0o1000, 0o2000
O_DIRECTORY, O_CLOEXEC, O_TMPFILE = 0o200000, 0o2000000, 0o20200000
AT_FDCWD, AT_REMOVEDIR = -100, 0x200
CLONE_VM, CLONE_FS, CLONE_FILES, CLONE_THREAD = 0x100, 0x200, 0x400, 0x10000
F_DUPFD, F_GETFD, F_SETFD, F_SETFL, F_DUPFD_CLOEXEC = 0, 1, 2, 4, 0x406
FIOCLEX, FIONCLEX = 0x5451, 0x5450
PROT_WRITE, MAP_SHARED = 0x2, 0x1
RENAME_EXCHANGE, RENAME_WHITEOUT = 0x2, 0x4
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE = 0x1, 0x2, 0x10
RWF_APPEND = 0x10
SEEK_SET, SEEK_CUR, SEEK_END = 0, 1, 2


def strace_command(trace: Path, program: list[str]) -> list[str]:
    return ["strace", "-f", "-qq", "-y", "-xx", "-X", "raw", "-s", str(MAX_WRITE),
            "-e", f"trace={SYSCALLS}", "-e", "raw=read,readv", "-e", "signal=none",
            "-o", str(trace), "--", *program]


# --- one line of the trace ------------------------------------------------------------------------

@dataclass
class Call:
    tid: int
    name: str
    args: list[str]
    result: str           # "3<...>", "0", "-1 ENOENT (...)", "?"
    line: int             # where it ended in the trace (1-based)
    started: int = 0      # where it began (an <unfinished ...> line), else == line

    @property
    def ok(self) -> bool:
        return not (self.result.startswith("-") or self.result.startswith("?"))

    @property
    def value(self) -> int:
        return _int(self.result.split("<", 1)[0].split()[0])


_LINE = re.compile(r"^(\d+)\s+(.*)$")
_UNFINISHED = " <unfinished ...>"
_RESUMED = re.compile(r"^<\.\.\. (\w+) resumed>(.*)$")


def calls(lines) -> list[Call]:
    """The complete calls of a trace, an interrupted one joined with its resumption."""
    out: list[Call] = []
    pending: dict[int, tuple[int, str]] = {}
    for n, raw in enumerate(lines, 1):
        m = _LINE.match(raw.rstrip("\n"))
        if not m:
            continue
        tid, text = int(m.group(1)), m.group(2)
        if text.startswith("+++") or text.startswith("---"):
            continue
        if text.endswith(_UNFINISHED):
            pending[tid] = (n, text[:-len(_UNFINISHED)])
            continue
        r = _RESUMED.match(text)
        started = n
        if r:
            begun = pending.pop(tid, None)
            if begun is None:
                continue
            started, head = begun
            text = head + r.group(2)
        call = _call(tid, text, n, started)
        if call is not None:
            out.append(call)
    return out


def _unquoted(text: str, opens: str, closes: str):
    """(index, character, depth after it) of each character outside a quoted string."""
    depth, i, quoted = 0, 0, False
    while i < len(text):
        c = text[i]
        if quoted:
            if c == "\\":
                i += 1
            elif c == '"':
                quoted = False
        elif c == '"':
            quoted = True
        else:
            depth += (c in opens) - (c in closes)
            yield i, c, depth
        i += 1


def _call(tid: int, text: str, line: int, started: int) -> Call | None:
    paren = text.find("(")
    if paren <= 0:
        return None
    end = next((i for i, c, depth in _unquoted(text, "([{", ")]}") if depth == 0 and c in ")]}"),
               len(text))
    args = _split(text[paren + 1:end])
    rest = text[end + 1:].strip()
    result = rest[1:].strip() if rest.startswith("=") else "?"
    return Call(tid, text[:paren], args, result, line, started)


def _split(text: str) -> list[str]:
    """Top-level comma-separated arguments (quotes, brackets, braces and `<...>` kept whole)."""
    args, start = [], 0
    for i, c, depth in _unquoted(text, "([{<", ")]}>"):
        if c == "," and depth == 0:
            args.append(text[start:i].strip())
            start = i + 1
    if text[start:].strip():
        args.append(text[start:].strip())
    return args


def _int(text: str) -> int:
    text = text.strip()
    if "<" in text:
        text = text.split("<", 1)[0]
    if "=" in text:
        text = text.split("=", 1)[1]
    if "|" in text:                 # flags with a signal: 0x1200000|17
        value = 0
        for part in text.split("|"):
            value |= _int(part)
        return value
    return int(text, 0) if not re.fullmatch(r"-?0\d+", text) else int(text, 8)


class Truncated(ValueError):
    """A buffer longer than strace printed (-s)."""


def _bytes(text: str) -> bytes:
    """A string argument as strace -xx prints it: "\\x68\\x69" (then "..." if cut short)."""
    text = text.strip()
    if not text.startswith('"'):
        raise ValueError(f"not a string: {text[:40]}")
    end = text.rfind('"')
    if text[end + 1:].startswith("..."):
        raise Truncated(text[:40])
    body = text[1:end]
    out = bytearray()
    i = 0
    while i < len(body):
        if body[i] == "\\":
            c = body[i + 1]
            if c == "x":
                out.append(int(body[i + 2:i + 4], 16))
                i += 4
                continue
            out.append({"n": 10, "t": 9, "r": 13, "v": 11, "f": 12, "\\": 92, '"': 34}.get(
                c, ord(c)))
            i += 2
        else:
            out.append(ord(body[i]))
            i += 1
    return bytes(out)


def _fd(arg: str) -> int:
    return _int(arg.split("<", 1)[0])


def _path_behind_fd(arg: str) -> str | None:
    """The path strace -y printed behind a descriptor: `3<\\x2f\\x74...>`."""
    if "<" not in arg or not arg.endswith(">"):
        return None
    inner = arg[arg.index("<") + 1:-1]
    try:
        return _bytes('"' + inner + '"').decode("utf-8", "surrogateescape")
    except ValueError:
        return None


def _str(arg: str) -> str:
    return _bytes(arg).decode("utf-8", "surrogateescape")


def _iov(arg: str) -> bytes:
    """The bytes of an iovec array: [{iov_base="...", iov_len=5}, ...]."""
    out = b""
    for m in re.finditer(r'iov_base=("(?:[^"\\]|\\.)*"(?:\.\.\.)?)', arg):
        out += _bytes(m.group(1))
    return out


# --- the kernel's tables, as far as the journal needs them ----------------------------------------

@dataclass
class Description:
    """An open file description: shared by dup'ed and inherited descriptors (open(2))."""

    path: str | None          # below DIR (relative), or None for anything else
    inode: int | None
    offset: int = 0
    append: bool = False
    directory: bool = False
    stdout: bool = False      # PROGRAM's standard output (the oracle's lines)


@dataclass
class FdTable:
    fds: dict[int, tuple[Description, bool]] = field(default_factory=dict)  # fd -> (ofd, cloexec)


@dataclass
class Process:
    tgid: int
    table: FdTable
    cwd: list            # [path]: a list so CLONE_FS shares it


@dataclass
class Trace:
    """What the parser made of a trace."""

    ops: list[dict] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    opaque: set[str] = field(default_factory=set)     # files written through an allowed mmap
    stdout: bytes = b""
    stdout_tail: bytes = b""                          # a last line without its newline
    calls: int = 0
    first_line: dict[int, int] = field(default_factory=dict)   # op index -> trace line

    def refuse(self, sentence: str) -> None:
        if sentence not in self.refusals:
            self.refusals.append(sentence)


class TraceReader:
    """Follows the calls of one trace and writes the journal of what they did below `root`."""

    def __init__(self, root: Path, cwd: Path, before: dict[str, bytes], dirs=(), *,
                 allow_opaque=(), ack_file: str | None = None, ack_on_fsync: bool = False):
        # DIR as the kernel names it (strace -y) and as the program may spell it (a symlink).
        self.roots = sorted({os.path.realpath(root), os.path.abspath(root)}, key=len,
                            reverse=True)
        self.allow_opaque = tuple(allow_opaque)
        self.ack_file, self.ack_on_fsync = ack_file, ack_on_fsync
        self.out = Trace()
        self.names: dict[str, int] = {}           # path below root -> inode
        self.paths: dict[int, str] = {}           # inode -> its current path
        self.sizes: dict[int, int] = {}
        self.dirs: set[str] = set(dirs)
        self.writers: dict[int, dict[int, int]] = {}   # inode -> {tgid: tid that wrote it}
        for name, data in before.items():
            ino = self._new_inode(name)
            self.sizes[ino] = len(data)
        self.ack_text = bytearray(before.get(ack_file, b"")) if ack_file else bytearray()
        self.ack_pending: list[tuple[str, str]] = []   # complete lines waiting for an fsync
        self.procs: dict[int, Process] = {}
        self.root_tid: int | None = None
        self.start_cwd = os.path.realpath(cwd)
        self.stdout_line = b""

    # --- names ---------------------------------------------------------------------------------

    def _new_inode(self, path: str) -> int:
        ino = len(self.sizes)
        self.sizes[ino] = 0
        self.names[path] = ino
        self.paths[ino] = path
        return ino

    def _below(self, absolute: str) -> str | None:
        """The path below root, or None for a path outside it (or root itself: "")."""
        absolute = os.path.normpath(absolute)
        for root in self.roots:
            if absolute == root:
                return ""
            if absolute.startswith(root + os.sep):
                return absolute[len(root) + 1:]
        return None

    def _resolve(self, proc: Process, dirfd_arg: str | None, path_arg: str) -> str | None:
        path = _str(path_arg)
        if path.startswith("/"):
            return self._below(path)
        if dirfd_arg is None or _fd(dirfd_arg) == AT_FDCWD:
            base = (_path_behind_fd(dirfd_arg) if dirfd_arg else None) or proc.cwd[0]
        else:
            base = _path_behind_fd(dirfd_arg)
            if base is None:
                held = proc.table.fds.get(_fd(dirfd_arg))
                if held is None or held[0].path is None:
                    return None
                base = os.path.join(self.roots[0], held[0].path)
        return self._below(os.path.join(base, path))

    def _emit(self, op: dict, call: Call) -> None:
        self.out.first_line[len(self.out.ops)] = call.line
        self.out.ops.append(op)

    # --- processes -----------------------------------------------------------------------------

    def _proc(self, tid: int) -> Process:
        proc = self.procs.get(tid)
        if proc is None:            # the first process: PROGRAM with stdin, stdout, stderr
            if self.root_tid is None:
                self.root_tid = tid
            table = FdTable({0: (Description(None, None), False),
                             1: (Description(None, None, stdout=True), False),
                             2: (Description(None, None), False)})
            proc = Process(tid, table, [self.start_cwd])
            self.procs[tid] = proc
        return proc

    def _clone(self, call: Call, flags: int) -> None:
        if not call.ok:
            return
        parent = self._proc(call.tid)
        child_tid = call.value
        table = parent.table if flags & CLONE_FILES else FdTable(dict(parent.table.fds))
        cwd = parent.cwd if flags & CLONE_FS else [parent.cwd[0]]
        tgid = parent.tgid if flags & CLONE_THREAD else child_tid
        self.procs[child_tid] = Process(tgid, table, cwd)

    # --- the calls -----------------------------------------------------------------------------

    def feed(self, all_calls: list[Call]) -> Trace:
        # A child's first calls may be printed before its parent's clone returned: create
        # each child where its clone began.
        order = sorted(((c.started if c.name in ("clone", "clone3", "fork", "vfork") else c.line,
                         i) for i, c in enumerate(all_calls)))
        for _, i in order:
            call = all_calls[i]
            self.out.calls += 1
            try:
                self._call(call)
            except Truncated:
                self.out.refuse(f"a {call.name} at line {call.line} of the trace wrote more than "
                                f"{MAX_WRITE} bytes at once, more than strace prints")
            except (ValueError, IndexError, KeyError) as e:
                self.out.refuse(f"line {call.line} of the trace ({call.name}) could not be "
                                f"read: {e}")
        self.out.stdout_tail = self.stdout_line
        return self.out

    def _call(self, call: Call) -> None:
        proc = self._proc(call.tid)
        name, a = call.name, call.args
        if name in ("clone", "fork", "vfork"):
            flags = 0
            for arg in a:
                if arg.startswith("flags="):
                    flags = _int(arg)
            self._clone(call, flags)
        elif name == "clone3":
            m = re.search(r"flags=(0x[0-9a-f]+|\d+)", a[0] if a else "")
            self._clone(call, int(m.group(1), 0) if m else 0)
        if not call.ok:
            return
        if name in ("open", "creat", "openat", "openat2"):
            self._open(proc, call)
        elif name == "close":
            proc.table.fds.pop(_fd(a[0]), None)
        elif name == "close_range":
            first, last = _int(a[0]), _int(a[1])
            flags = _int(a[2]) if len(a) > 2 else 0
            for fd in [fd for fd in proc.table.fds if first <= fd <= last]:
                if flags & 0x4:          # CLOSE_RANGE_CLOEXEC
                    proc.table.fds[fd] = (proc.table.fds[fd][0], True)
                elif flags & 0x2:        # CLOSE_RANGE_UNSHARE: a copy, then close
                    proc.table = FdTable(dict(proc.table.fds))
                    proc.table.fds.pop(fd, None)
                else:
                    proc.table.fds.pop(fd, None)
        elif name in ("dup", "dup2", "dup3"):
            held = proc.table.fds.get(_fd(a[0]))
            if held is not None:
                cloexec = name == "dup3" and bool(_int(a[2]) & O_CLOEXEC)
                proc.table.fds[call.value] = (held[0], cloexec)
        elif name == "fcntl":
            self._fcntl(proc, call)
        elif name == "ioctl":
            held = proc.table.fds.get(_fd(a[0]))
            if held and _int(a[1]) in (FIOCLEX, FIONCLEX):
                proc.table.fds[_fd(a[0])] = (held[0], _int(a[1]) == FIOCLEX)
        elif name in ("read", "readv"):
            held = proc.table.fds.get(_fd(a[0]))
            if held:
                held[0].offset += call.value
        elif name == "lseek":
            held = proc.table.fds.get(_fd(a[0]))
            if held:
                held[0].offset = call.value
        elif name in ("write", "writev", "pwrite64", "pwritev", "pwritev2"):
            self._write(proc, call)
        elif name in ("truncate", "ftruncate"):
            self._truncate(proc, call)
        elif name == "fallocate":
            self._fallocate(proc, call)
        elif name in ("rename", "renameat", "renameat2"):
            self._rename(proc, call)
        elif name in ("unlink", "unlinkat", "rmdir"):
            self._remove(proc, call)
        elif name in ("mkdir", "mkdirat"):
            path = self._resolve(proc, a[0] if name == "mkdirat" else None,
                                 a[1] if name == "mkdirat" else a[0])
            if path:
                self.dirs.add(path)
                self._emit({"op": Op.MKDIR, "path": path}, call)
        elif name in ("fsync", "fdatasync", "msync"):
            if name != "msync":
                self._fsync(proc, call)
        elif name in ("sync", "syncfs"):
            self._sync_all(call)
        elif name == "mmap":
            self._mmap(proc, call)
        elif name in ("sendfile", "copy_file_range", "splice", "tee", "vmsplice"):
            self._kernel_copy(proc, call)
        elif name in ("io_uring_setup", "io_submit"):
            kind = "io_uring" if name == "io_uring_setup" else "Linux AIO (io_submit)"
            self.out.refuse(f"PROGRAM used {kind} (trace line {call.line}): the kernel does its "
                            "reads and writes without a system call strace can show")
        elif name in ("link", "linkat", "symlink", "symlinkat"):
            self._link(proc, call)
        elif name in ("execve", "execveat"):
            # execve unshares the fd table and closes the O_CLOEXEC descriptors (execve(2)).
            proc.table = FdTable({fd: v for fd, v in proc.table.fds.items() if not v[1]})
        elif name == "chdir":
            proc.cwd[0] = os.path.normpath(os.path.join(proc.cwd[0], _str(a[0])))
        elif name == "fchdir":
            path = _path_behind_fd(a[0])
            if path:
                proc.cwd[0] = path

    def _open(self, proc: Process, call: Call) -> None:
        a = call.args
        if call.name == "creat":
            dirfd, path_arg, flags = None, a[0], 0o1 | O_CREAT | O_TRUNC
        elif call.name == "open":
            dirfd, path_arg, flags = None, a[0], _int(a[1])
        elif call.name == "openat":
            dirfd, path_arg, flags = a[0], a[1], _int(a[2])
        else:                                       # openat2(dirfd, path, {flags=...}, size)
            m = re.search(r"flags=(0x[0-9a-f]+|\d+)", a[2])
            dirfd, path_arg, flags = a[0], a[1], int(m.group(1), 0) if m else 0
        path = self._resolve(proc, dirfd, path_arg)
        fd = call.value
        cloexec = bool(flags & O_CLOEXEC)
        if path is None:
            proc.table.fds[fd] = (Description(None, None), cloexec)
            return
        if flags & O_TMPFILE == O_TMPFILE:
            self.out.refuse(f"PROGRAM opened an unnamed O_TMPFILE in {path or 'DIR'} (trace line "
                            f"{call.line}): the journal has no name for it")
            return
        directory = path == "" or path in self.dirs or bool(flags & O_DIRECTORY)
        if directory:
            proc.table.fds[fd] = (Description(path, None, directory=True), cloexec)
            return
        ino = self.names.get(path)
        if ino is None:
            ino = self._new_inode(path)
            self._emit({"op": Op.CREATE, "path": path}, call)
        elif flags & O_TRUNC and flags & O_ACCMODE:
            self.sizes[ino] = 0
            self._emit({"op": Op.TRUNC, "path": path}, call)
            self._ack_reset(path)
        proc.table.fds[fd] = (Description(path, ino, append=bool(flags & O_APPEND)), cloexec)

    def _fcntl(self, proc: Process, call: Call) -> None:
        a = call.args
        held = proc.table.fds.get(_fd(a[0]))
        if held is None:
            return
        cmd = _int(a[1])
        if cmd in (F_DUPFD, F_DUPFD_CLOEXEC):
            proc.table.fds[call.value] = (held[0], cmd == F_DUPFD_CLOEXEC)
        elif cmd == F_SETFD:
            proc.table.fds[_fd(a[0])] = (held[0], bool(_int(a[2]) & 1))
        elif cmd == F_SETFL:
            held[0].append = bool(_int(a[2]) & O_APPEND)

    def _description(self, proc: Process, call: Call, arg: str) -> Description | None:
        """The open file description behind a descriptor argument; a file below DIR whose open
        the trace did not show is refused (its offset and flags are unknown)."""
        held = proc.table.fds.get(_fd(arg))
        if held is not None:
            return held[0]
        shown = _path_behind_fd(arg)
        if shown and self._below(shown):
            self.out.refuse(f"descriptor {_fd(arg)} ({self._below(shown)}) was used at trace line "
                            f"{call.line} but its open was never seen")
        return None

    def _write(self, proc: Process, call: Call) -> None:
        a, name = call.args, call.name
        d = self._description(proc, call, a[0])
        if d is None:
            return
        n = call.value
        data = (_bytes(a[1]) if name in ("write", "pwrite64") else _iov(a[1]))[:n]
        if d.stdout:
            self._stdout(data, call)
            return
        if d.inode is None or d.directory or not n:
            return
        positional = name in ("pwrite64", "pwritev") or (name == "pwritev2" and _int(a[3]) != -1)
        flags = _int(a[4]) if name == "pwritev2" and len(a) > 4 else 0
        # On Linux a pwrite on an O_APPEND descriptor appends all the same (pwrite(2), BUGS).
        if d.append or flags & RWF_APPEND:
            offset = self.sizes[d.inode]
        elif positional:
            offset = _int(a[3])
        else:
            offset = d.offset
        if not positional:
            d.offset = offset + n
        self._writer(d.inode, call)
        self.sizes[d.inode] = max(self.sizes[d.inode], offset + n)
        path = self.paths.get(d.inode)
        if path is None:
            return                   # an unlinked file: no state will hold it
        acks = self._ack_write(offset, data, call) if path == self.ack_file else []
        self._emit({"op": Op.WRITE, "path": path, "offset": offset,
                    "data": base64.b64encode(data).decode()}, call)
        for mark in acks:
            self._emit(mark, call)

    def _writer(self, ino: int, call: Call) -> None:
        tgid = self.procs[call.tid].tgid
        seen = self.writers.setdefault(ino, {})
        other = seen.setdefault(tgid, call.tid)
        if other != call.tid:
            self.out.refuse(f"two threads of one process ({other} and {call.tid}) wrote "
                            f"{self.paths.get(ino, 'a file')}: strace's order of their writes "
                            "is not the order in which they reached the file")

    def _truncate(self, proc: Process, call: Call) -> None:
        a = call.args
        if call.name == "truncate":
            path = self._resolve(proc, None, a[0])
            ino = self.names.get(path) if path else None
        else:
            d = self._description(proc, call, a[0])
            ino = d.inode if d else None
        if ino is None:
            return
        size = _int(a[1])
        self._writer(ino, call)
        self.sizes[ino] = size
        if self.paths.get(ino) is not None:
            path = self.paths[ino]
            self._emit({"op": Op.TRUNC, "path": path, "size": size} if size else
                       {"op": Op.TRUNC, "path": path}, call)
            if path == self.ack_file:
                del self.ack_text[size:]
                self.ack_text.extend(b"\0" * (size - len(self.ack_text)))

    def _fallocate(self, proc: Process, call: Call) -> None:
        a = call.args
        d = self._description(proc, call, a[0])
        if d is None or d.inode is None:
            return
        mode, offset, length = _int(a[1]), _int(a[2]), _int(a[3])
        path, size = self.paths.get(d.inode), self.sizes[d.inode]
        self._writer(d.inode, call)
        if mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE):
            end = min(offset + length, size) if mode & FALLOC_FL_KEEP_SIZE or \
                mode & FALLOC_FL_PUNCH_HOLE else offset + length
            if end > offset and path is not None:
                self._emit({"op": Op.WRITE, "path": path, "offset": offset,
                            "data": base64.b64encode(b"\0" * (end - offset)).decode()}, call)
            self.sizes[d.inode] = max(size, end)
        elif not mode & FALLOC_FL_KEEP_SIZE and offset + length > size:
            self.sizes[d.inode] = offset + length      # zeros: as ftruncate to the new length
            if path is not None:
                self._emit({"op": Op.TRUNC, "path": path, "size": offset + length}, call)

    def _rename(self, proc: Process, call: Call) -> None:
        a = call.args
        if call.name == "rename":
            src, dst, flags = self._resolve(proc, None, a[0]), self._resolve(proc, None, a[1]), 0
        else:
            src, dst = self._resolve(proc, a[0], a[1]), self._resolve(proc, a[2], a[3])
            flags = _int(a[4]) if call.name == "renameat2" and len(a) > 4 else 0
        if src is None and dst is None:
            return
        if src is None or dst is None:
            inside = dst if src is None else src
            self.out.refuse(f"PROGRAM renamed a file {'into' if src is None else 'out of'} DIR "
                            f"({inside}, trace line {call.line}): the journal sees only DIR")
            return
        if flags & (RENAME_EXCHANGE | RENAME_WHITEOUT):
            self.out.refuse(f"PROGRAM exchanged {src} and {dst} with renameat2 (trace line "
                            f"{call.line}), which the journal cannot express")
            return
        if src in self.dirs:
            for d in [d for d in self.dirs if d == src or d.startswith(src + "/")]:
                self.dirs.discard(d)
                self.dirs.add(dst + d[len(src):])
            for p in [p for p in self.names if p.startswith(src + "/")]:
                self._move(p, dst + p[len(src):])
        elif src in self.names:
            if dst in self.names:
                self.paths.pop(self.names.pop(dst), None)
            self._move(src, dst)
        self._emit({"op": Op.RENAME, "src": src, "dst": dst}, call)

    def _move(self, src: str, dst: str) -> None:
        ino = self.names.pop(src)
        self.names[dst] = ino
        self.paths[ino] = dst

    def _remove(self, proc: Process, call: Call) -> None:
        a = call.args
        if call.name == "unlinkat":
            path, directory = self._resolve(proc, a[0], a[1]), bool(_int(a[2]) & AT_REMOVEDIR)
        else:
            path, directory = self._resolve(proc, None, a[0]), call.name == "rmdir"
        if not path:
            return
        if directory:
            self.dirs.discard(path)
            self._emit({"op": Op.RMDIR, "path": path}, call)
        else:
            ino = self.names.pop(path, None)
            if ino is not None:
                self.paths.pop(ino, None)
            self._emit({"op": Op.UNLINK, "path": path}, call)

    def _fsync(self, proc: Process, call: Call) -> None:
        d = self._description(proc, call, call.args[0])
        if d is None:
            return
        if d.directory:
            self._emit({"op": Op.FSYNC_DIR, "path": d.path} if d.path else
                       {"op": Op.FSYNC_DIR}, call)
        elif d.inode is not None and self.paths.get(d.inode) is not None:
            path = self.paths[d.inode]
            self._emit({"op": Op.FSYNC, "path": path}, call)
            if path == self.ack_file and self.ack_on_fsync:
                self._ack_flush(call)

    def _sync_all(self, call: Call) -> None:
        """sync(2)/syncfs(2): every file and every directory durable."""
        for path in sorted(self.names):
            self._emit({"op": Op.FSYNC, "path": path}, call)
        for directory in sorted(self.dirs, key=lambda d: -d.count("/")):
            self._emit({"op": Op.FSYNC_DIR, "path": directory}, call)
        self._emit({"op": Op.FSYNC_DIR}, call)
        if self.ack_file and self.ack_on_fsync:
            self._ack_flush(call)

    def _mmap(self, proc: Process, call: Call) -> None:
        a = call.args
        prot, flags = _int(a[2]), _int(a[3])
        if not (prot & PROT_WRITE and (flags & 0x3) in (MAP_SHARED, 0x3)):
            return
        d = proc.table.fds.get(_fd(a[4]))
        path = d[0].path if d else (self._below(_path_behind_fd(a[4]) or "") or None)
        if not path:
            return
        if any(fnmatch.fnmatch(path, g) for g in self.allow_opaque):
            if path not in self.out.opaque:
                self.out.opaque.add(path)
                self._emit({"op": Op.UNRELIABLE, "path": path,
                            "why": f"{path} is written through a shared mmap (allowed by "
                                   "--allow-opaque): its bytes are not in the trace"}, call)
            return
        self.out.refuse(f"PROGRAM maps {path} shared and writable (mmap, trace line {call.line}): "
                        "its writes are memory stores that strace cannot see (name it with "
                        "--allow-opaque if the program rebuilds it, as SQLite does its -shm)")

    def _kernel_copy(self, proc: Process, call: Call) -> None:
        a = call.args
        out_arg = {"sendfile": a[0], "copy_file_range": a[2], "splice": a[2], "tee": a[1],
                   "vmsplice": a[0]}[call.name]
        d = proc.table.fds.get(_fd(out_arg))
        path = d[0].path if d else self._below(_path_behind_fd(out_arg) or "")
        if path or (d and d[0].stdout):
            what = path or "PROGRAM's standard output"
            self.out.refuse(f"PROGRAM wrote {what} with {call.name} (trace line {call.line}): the "
                            "kernel copies those bytes without showing them (shutil.copyfile uses "
                            "sendfile on Linux)")

    def _link(self, proc: Process, call: Call) -> None:
        a = call.args
        target = a[-1] if call.name in ("link", "symlink") else (
            a[3] if call.name == "linkat" else a[2])
        dirfd = None if call.name in ("link", "symlink") else (
            a[2] if call.name == "linkat" else a[1])
        path = self._resolve(proc, dirfd, target)
        if path:
            self.out.refuse(f"PROGRAM made a {'symbolic' if 'sym' in call.name else 'hard'} link "
                            f"{path} (trace line {call.line}), which the journal cannot express")

    # --- the oracle ----------------------------------------------------------------------------

    def _stdout(self, data: bytes, call: Call) -> None:
        """`BEGIN <key> <version>` and `ACK <key> <version>` lines on PROGRAM's standard output
        become marks at this point of the journal."""
        self.out.stdout += data
        self.stdout_line += data
        while b"\n" in self.stdout_line:
            line, _, self.stdout_line = self.stdout_line.partition(b"\n")
            words = line.decode("utf-8", "replace").split()
            if len(words) == 3 and words[0] in ("BEGIN", "ACK"):
                self._emit({"op": Op.MARK, "what": words[0].lower(), "key": words[1],
                            "version": words[2]}, call)

    def _ack_reset(self, path: str) -> None:
        if path == self.ack_file:
            self.ack_text = bytearray()
            self.ack_pending = []

    def _ack_write(self, offset: int, data: bytes, call: Call) -> list[dict]:
        """--ack-lines FILE: a line this write completes is begun as the write starts (the
        marks are emitted here, before it), and acknowledged once it returned (the marks
        returned, to follow it) or at the next fsync of FILE."""
        before = bytes(self.ack_text)
        if offset > len(self.ack_text):
            self.ack_text.extend(b"\0" * (offset - len(self.ack_text)))
        self.ack_text[offset:offset + len(data)] = data
        old, new = _lines(before), _lines(bytes(self.ack_text))
        acks = []
        for i, line in enumerate(new):
            if i >= len(old) or old[i] != line:
                key, version = str(i + 1), line
                self._emit({"op": Op.MARK, "what": "begin", "key": key, "version": version}, call)
                if self.ack_on_fsync:
                    self.ack_pending.append((key, version))
                else:
                    acks.append({"op": Op.MARK, "what": "ack", "key": key, "version": version})
        return acks

    def _ack_flush(self, call: Call) -> None:
        for key, version in self.ack_pending:
            self._emit({"op": Op.MARK, "what": "ack", "key": key, "version": version}, call)
        self.ack_pending = []


def _lines(data: bytes) -> list[str]:
    """The complete lines of a file (a last line without its newline is not one yet)."""
    return [line.decode("utf-8", "replace") for line in data.split(b"\n")[:-1]]


def parse(trace_text: str, root: Path, cwd: Path, before: dict[str, bytes], dirs=(), **kw) -> Trace:
    return TraceReader(root, cwd, before, dirs, **kw).feed(calls(trace_text.splitlines()))


# --- running PROGRAM under strace -----------------------------------------------------------------

@dataclass
class Traced:
    """PROGRAM's run under strace: its trace, its exit, its output, and how long it took."""

    text: str
    returncode: int
    stdout: bytes
    stderr: str
    seconds: float
    #: processes PROGRAM started that left its group and lost their parent (a daemon), ended by
    #: the supervisor as soon as it found them: what they would have done next is not traced
    orphans: int = 0


class TimedOut(Exception):
    """PROGRAM did not finish in time (it was killed, with everything it started)."""


def run_traced(program: list[str], workdir: Path, *, env: dict | None = None,
               timeout: float | None = None) -> Traced:
    """Run PROGRAM under strace to its end, under the boundary's supervisor (`check.supervised`):
    a subreaper, so that a daemon PROGRAM starts (a double fork, a session of its own) is
    re-parented to it and ended, as is everything else PROGRAM started, on the way out (its end,
    Ctrl-C, SIGTERM, an error, `timeout` seconds passed: `TimedOut`). What outlives that raises
    `check.StillRunning`: nothing is said to be stopped that is not."""
    import time

    from .check import supervised

    trace, out, err = workdir / "trace.txt", workdir / "stdout", workdir / "stderr"
    t0 = time.perf_counter()
    ended: list[int] = []
    returncode = supervised(strace_command(trace, program), out, err,
                            timeout if timeout is not None else 10 ** 6, env=env, ended=ended)
    if returncode is None:
        raise TimedOut(timeout)
    seconds = time.perf_counter() - t0
    text = trace.read_text(errors="surrogateescape") if trace.exists() else ""
    return Traced(text, returncode, out.read_bytes(), err.read_text(errors="replace"), seconds,
                  orphans=sum(ended))
