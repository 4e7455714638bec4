"""A journal of every disk operation the door makes: create, truncate, write (offset and bytes),
fsync, rename, directory fsync, unlink, and the run's marks (a report filed, a page committed).

The power-loss simulation (`bughunt.powerloss`) and the conformance suite build every crash state
of a run from it, as ALICE and LazyFS do from a system-call trace.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Callable

from ..diskio import Files

Sink = Callable[[dict], None]


def to_file(path: Path) -> Sink:
    """A sink writing one JSON line per operation to `path` (the worker's io.jsonl)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(op: dict) -> None:
        os.write(fd, (json.dumps(op) + "\n").encode())
    return write


class JournalingFiles(Files):
    """`Files` that also report each operation to `sink` (file names only, never full paths: a
    journal describes one run directory)."""

    def __init__(self, sink: Sink, inner: Files | None = None):
        self.sink = sink
        self.inner = inner or Files()
        self._fds: dict[int, tuple[str, bool]] = {}     # fd -> (file name, opened for append)

    def open(self, path: Path, flags: int) -> int:
        existed = os.path.exists(path)
        fd = self.inner.open(path, flags)
        self._fds[fd] = (Path(path).name, bool(flags & os.O_APPEND))
        if not existed:
            self.sink({"op": "create", "path": Path(path).name})
        elif flags & os.O_TRUNC:
            self.sink({"op": "trunc", "path": Path(path).name})
        return fd

    def write(self, fd: int, data: bytes, path: str) -> None:
        name, appending = self._fds.get(fd, (Path(path).name, False))
        if data:
            offset = os.fstat(fd).st_size if appending else os.lseek(fd, 0, os.SEEK_CUR)
            self.sink({"op": "write", "path": name, "offset": offset,
                       "data": base64.b64encode(data).decode()})
        self.inner.write(fd, data, path)

    def fsync(self, fd: int, path: str) -> None:
        self.inner.fsync(fd, path)
        self.sink({"op": "fsync", "path": self._fds.get(fd, (Path(path).name,))[0]})

    def close(self, fd: int) -> None:
        self._fds.pop(fd, None)
        self.inner.close(fd)

    def rename(self, src: Path, dst: Path) -> None:
        self.inner.rename(src, dst)
        self.sink({"op": "rename", "src": Path(src).name, "dst": Path(dst).name})

    def fsync_dir(self, directory: Path) -> None:
        self.inner.fsync_dir(directory)
        self.sink({"op": "fsync_dir"})

    def unlink(self, path: Path) -> None:
        self.inner.unlink(path)
        self.sink({"op": "unlink", "path": Path(path).name})

    def mark(self, what: dict) -> None:
        self.inner.mark(what)
        self.sink({"op": "mark", **what})
