"""The one door to the agent's disk.

Every durable write of a checkpoint store goes through a `Door`: appending a log line, writing a
snapshot, fsync, rename, directory fsync, removing a stale temp file. That single place is

- where a write is torn on purpose (write mode `torn` / `no-newline`) and the mid-commit crash
  point fires between the two halves, or between a snapshot's temp file and its rename;
- where every checkpoint write is timed (nanoseconds, per kind), which lesson 6 plots;
- where later lessons plug in a disk that fills up or loses power: they wrap these few methods.

The door writes with `os.write` on raw descriptors. There is no user-space buffer, so every byte a
method has written is in the kernel's page cache when it returns: that survives `kill -9`. Only
`fsync` makes it survive a power cut, and the fsync policy decides whether that is paid.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable

Hook = Callable[[], None]


def _nothing() -> None:
    pass


class Door:
    """The agent's disk, as the checkpoint stores see it.

    `fsync` is the policy: "always" fsyncs each checkpoint write (and the directory after a rename),
    "never" stops at the kernel hand-off.
    """

    def __init__(self, fsync: str = "never", clock: Callable[[], int] = time.perf_counter_ns):
        self.fsync_always = fsync == "always"
        self._clock = clock
        #: checkpoint write latencies in ns, by kind ("append", "snapshot", ...)
        self.latencies_ns: dict[str, list[int]] = defaultdict(list)

    # --- the syscalls, one method each, so a simulation can wrap exactly these -----------------

    def _open(self, path: Path, flags: int) -> int:
        return os.open(path, flags, 0o644)

    def _write(self, fd: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]

    def _fsync(self, fd: int) -> None:
        os.fsync(fd)

    def _close(self, fd: int) -> None:
        os.close(fd)

    def _replace(self, src: Path, dst: Path) -> None:
        os.replace(src, dst)

    def _fsync_dir(self, directory: Path) -> None:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # --- what the stores call -------------------------------------------------------------------

    def open_append(self, path: Path) -> int:
        """Open (creating if needed) a file for appending; returns the descriptor."""
        return self._open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    def close(self, fd: int) -> None:
        self._close(fd)

    def append(self, fd: int, data: bytes, *, torn: bool = False, mid: Hook = _nothing,
               kind: str = "append") -> None:
        """Append `data` to the file behind `fd`.

        Not torn: one `write()` of the whole record, and the mid-commit point fires before it, so a
        kill there leaves no byte of the record on disk. (SIGKILL cannot split a small write into a
        regular file: the kernel copies it into the page cache before the signal is acted on.)
        Torn: the first half is written, the mid-commit point fires, then the rest, which is how a
        record split across several writes by a buffer looks after a kill.
        """
        t0 = self._clock()
        if torn:
            half = len(data) // 2
            self._write(fd, data[:half])
            mid()
            self._write(fd, data[half:])
        else:
            mid()
            self._write(fd, data)
        if self.fsync_always:
            self._fsync(fd)
        self.latencies_ns[kind].append(self._clock() - t0)

    def write_atomic(self, path: Path, data: bytes, *, mid: Hook = _nothing,
                     kind: str = "snapshot", fsync: bool | None = None) -> None:
        """Replace `path` with `data` so that a reader sees the old file or the new one, never half.

        Temp file in the same directory, write, fsync, `os.replace`, then fsync the directory so the
        rename itself survives a power cut. (The lesson's `atomic_write` stops after `os.replace`:
        without the directory fsync the new name may be lost on power loss, though never on kill -9.)
        The mid-commit point fires after the temp file is complete and before the rename.
        """
        sync = self.fsync_always if fsync is None else fsync
        t0 = self._clock()
        tmp = path.with_name(path.name + ".tmp")
        fd = self._open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            self._write(fd, data)
            if sync:
                self._fsync(fd)
        finally:
            self._close(fd)
        mid()
        self._replace(tmp, path)
        if sync:
            self._fsync_dir(path.parent)
        self.latencies_ns[kind].append(self._clock() - t0)

    def write_in_place(self, path: Path, data: bytes, *, torn: bool = False, mid: Hook = _nothing,
                       kind: str = "snapshot") -> None:
        """Overwrite `path` in place: truncate, then write. A kill in between leaves a torn file.

        This is what the atomic snapshot protects against; torn write modes use it on purpose.
        """
        t0 = self._clock()
        if not torn:
            mid()
        fd = self._open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            if torn:
                half = len(data) // 2
                self._write(fd, data[:half])
                mid()
                self._write(fd, data[half:])
            else:
                self._write(fd, data)
            if self.fsync_always:
                self._fsync(fd)
        finally:
            self._close(fd)
        self.latencies_ns[kind].append(self._clock() - t0)

    def remove(self, path: Path) -> None:
        """Remove a file (a stale temp file left by a kill between write and rename)."""
        os.unlink(path)
        if self.fsync_always:
            self._fsync_dir(path.parent)
