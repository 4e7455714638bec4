"""A journal of every disk operation: create, truncate (to a size), write (offset and bytes),
fsync, rename, directory fsync, unlink, mkdir, rmdir, the run's marks (a report filed, a page
committed, a line a program acknowledged) and an "unreliable" marker (something happened that the
journal cannot describe).

Two writers produce it: the door, through `JournalingFiles` below (the worker's io.jsonl), and the
explorer, from a program's system calls (`bughunt.explore`). The power-loss simulation
(`bughunt.powerloss`), the conformance suite and the grader build every crash state of a run from
it, as ALICE (Pillai et al., OSDI 2014) and LazyFS do from a system-call trace.

One operation is one JSON object: `{"op": Op.WRITE, "path": "events.jsonl", "offset": 0, "data":
BASE64}`. A `path` is relative to the run directory ("snapshot.json", "db/000001.log"); the door's
files all sit at its top. A `trunc` without `size` truncates to 0 (O_TRUNC), with `size` it sets
the length (ftruncate(2): shorter drops bytes, longer adds zeros). A `fsync_dir` without `path` is
the run directory itself.
"""

from __future__ import annotations

import base64
import json
import os
from enum import StrEnum
from pathlib import Path
from typing import Callable

from ..diskio import Files

Sink = Callable[[dict], None]


class Op(StrEnum):
    """The journal's operation names, defined once (a StrEnum: each one is also the plain string
    the JSON holds, so `op["op"] == Op.WRITE` reads a stored journal as well)."""

    CREATE = "create"          # path: a new, empty file
    TRUNC = "trunc"            # path[, size]: truncate to size (default 0)
    WRITE = "write"            # path, offset, data (base64)
    FSYNC = "fsync"            # path: the file's bytes are durable
    RENAME = "rename"          # src, dst (a file or a directory)
    FSYNC_DIR = "fsync_dir"    # [path]: the directory's names are durable
    UNLINK = "unlink"          # path
    MKDIR = "mkdir"            # path
    RMDIR = "rmdir"            # path
    MARK = "mark"              # what, ...: a moment of the run, no disk effect
    UNRELIABLE = "unreliable"  # why[, path]: the journal cannot describe what happened here


def to_file(path: Path) -> Sink:
    """A sink writing one JSON line per operation to `path` (the worker's io.jsonl)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(op: dict) -> None:
        os.write(fd, (json.dumps(op) + "\n").encode())
    return write


class JournalingFiles(Files):
    """`Files` that also report each operation to `sink`, with paths relative to `root` (default:
    file names only, never full paths: a journal describes one run directory)."""

    def __init__(self, sink: Sink, inner: Files | None = None, *, root: Path | None = None):
        self.sink = sink
        self.inner = inner or Files()
        self.root = root
        self._fds: dict[int, tuple[str, bool]] = {}     # fd -> (file name, opened for append)

    def _name(self, path) -> str:
        if self.root is None:
            return Path(path).name
        return os.path.relpath(path, self.root)

    def open(self, path: Path, flags: int) -> int:
        existed = os.path.exists(path)
        fd = self.inner.open(path, flags)
        self._fds[fd] = (self._name(path), bool(flags & os.O_APPEND))
        if not existed:
            self.sink({"op": Op.CREATE, "path": self._name(path)})
        elif flags & os.O_TRUNC:
            self.sink({"op": Op.TRUNC, "path": self._name(path)})
        return fd

    def write(self, fd: int, data: bytes, path: str) -> None:
        name, appending = self._fds.get(fd, (self._name(path), False))
        if data:
            offset = os.fstat(fd).st_size if appending else os.lseek(fd, 0, os.SEEK_CUR)
            self.sink({"op": Op.WRITE, "path": name, "offset": offset,
                       "data": base64.b64encode(data).decode()})
        self.inner.write(fd, data, path)

    def fsync(self, fd: int, path: str) -> None:
        self.inner.fsync(fd, path)
        self.sink({"op": Op.FSYNC, "path": self._fds.get(fd, (self._name(path),))[0]})

    def close(self, fd: int) -> None:
        self._fds.pop(fd, None)
        self.inner.close(fd)

    def rename(self, src: Path, dst: Path) -> None:
        self.inner.rename(src, dst)
        self.sink({"op": Op.RENAME, "src": self._name(src), "dst": self._name(dst)})

    def fsync_dir(self, directory: Path) -> None:
        self.inner.fsync_dir(directory)
        where = self._name(directory) if self.root is not None else "."
        self.sink({"op": Op.FSYNC_DIR} if where == "." else {"op": Op.FSYNC_DIR, "path": where})

    def unlink(self, path: Path) -> None:
        self.inner.unlink(path)
        self.sink({"op": Op.UNLINK, "path": self._name(path)})

    def mark(self, what: dict) -> None:
        self.inner.mark(what)
        self.sink({"op": Op.MARK, **what})
