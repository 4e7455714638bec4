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

import base64
import errno
import json
import os
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

Hook = Callable[[], None]

#: Bugs a lesson-8 worker can be built with on purpose, one at a time, to prove the sweeps catch them.
DOOR_BUGS = ("no-fsync", "no-dir-fsync")


def _nothing() -> None:
    pass


class FsyncError(OSError):
    """fsync failed. Fatal: the kernel may already have dropped the pages it could not write, so
    a retry that succeeds proves nothing (PostgreSQL's "fsyncgate", 2018)."""


@dataclass(frozen=True)
class Faults:
    """Failures to inject, for the disk-full lesson: the k-th write or the k-th fsync fails.

    A failing write first writes half its bytes (a short write), as a full disk does, then raises.
    """

    fail_write: int | None = None
    write_errno: int = errno.ENOSPC
    fail_fsync: int | None = None


class Door:
    """The agent's disk, as the checkpoint stores see it.

    `fsync` is the policy: "always" fsyncs each checkpoint write (and the directory after a rename
    or after creating a file), "never" stops at the kernel hand-off.

    `journal`, if given, is a file where every operation is recorded as it happens (create, trunc,
    write with its bytes, fsync, rename, directory fsync, unlink), for the power-loss simulation of
    lesson 8; `faults` injects failures; `bugs` plants one of DOOR_BUGS.
    """

    def __init__(self, fsync: str = "never", clock: Callable[[], int] = time.perf_counter_ns, *,
                 faults: Faults | None = None, journal: Path | None = None,
                 bugs: frozenset[str] = frozenset()):
        self.fsync_always = fsync == "always"
        self._clock = clock
        #: checkpoint write latencies in ns, by kind ("append", "snapshot", ...)
        self.latencies_ns: dict[str, list[int]] = defaultdict(list)
        self.faults = faults or Faults()
        self.bugs = frozenset(bugs)
        self.writes = 0          # write() calls so far
        self.fsyncs = 0          # fsync() calls so far, files and directories
        self._names: dict[int, str] = {}      # fd -> file name, for the journal
        self._paths: dict[int, str] = {}      # fd -> full path, for error messages
        self._append_fds: set[int] = set()
        self._journal_fd = (os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                            if journal is not None else None)

    # --- the syscalls, one method each, so a simulation can wrap exactly these -----------------

    def _record(self, **op) -> None:
        if self._journal_fd is not None:
            os.write(self._journal_fd, (json.dumps(op) + "\n").encode())

    def mark(self, **what) -> None:
        """Note a moment of the run in the journal (a report filed, a page committed)."""
        self._record(op="mark", **what)

    def _open(self, path: Path, flags: int) -> tuple[int, bool]:
        """Open `path`; returns the descriptor and whether the file was created."""
        existed = os.path.exists(path)
        fd = os.open(path, flags, 0o644)
        self._names[fd] = path.name
        self._paths[fd] = str(path)
        if flags & os.O_APPEND:
            self._append_fds.add(fd)
        if not existed:
            self._record(op="create", path=path.name)
        elif flags & os.O_TRUNC:
            self._record(op="trunc", path=path.name)
        return fd, not existed

    def _write(self, fd: int, data: bytes) -> None:
        self.writes += 1
        if self.writes == self.faults.fail_write:
            self._write_all(fd, data[:len(data) // 2])
            code = self.faults.write_errno
            raise OSError(code, f"{os.strerror(code)} (injected at write {self.writes})",
                          self._paths.get(fd))
        self._write_all(fd, data)

    def _write_all(self, fd: int, data: bytes) -> None:
        if self._journal_fd is not None and data:
            offset = (os.fstat(fd).st_size if fd in self._append_fds
                      else os.lseek(fd, 0, os.SEEK_CUR))
            self._record(op="write", path=self._names.get(fd), offset=offset,
                         data=base64.b64encode(data).decode())
        try:
            n = os.write(fd, data)
            if n < len(data):              # a short write: rare on a regular file, but legal
                view = memoryview(data)[n:]
                while view:
                    view = view[os.write(fd, view):]
        except OSError as e:               # os.write names no file: say which one
            raise OSError(e.errno, e.strerror, self._paths.get(fd)) from None

    def _count_fsync(self, what: str) -> None:
        self.fsyncs += 1
        if self.fsyncs == self.faults.fail_fsync:
            raise FsyncError(errno.EIO, f"I/O error (injected at fsync {self.fsyncs})", what)

    def _fsync(self, fd: int) -> None:
        if "no-fsync" in self.bugs:
            return
        self._count_fsync(self._paths.get(fd, "?"))
        try:
            os.fsync(fd)
        except OSError as e:
            raise FsyncError(e.errno, e.strerror, self._paths.get(fd)) from None
        self._record(op="fsync", path=self._names.get(fd))

    def _close(self, fd: int) -> None:
        self._names.pop(fd, None)
        self._paths.pop(fd, None)
        self._append_fds.discard(fd)
        os.close(fd)

    def _replace(self, src: Path, dst: Path) -> None:
        os.replace(src, dst)
        self._record(op="rename", src=src.name, dst=dst.name)

    def _fsync_dir(self, directory: Path) -> None:
        if "no-fsync" in self.bugs or "no-dir-fsync" in self.bugs:
            return
        self._count_fsync(str(directory))
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        except OSError as e:
            raise FsyncError(e.errno, e.strerror, str(directory)) from None
        finally:
            os.close(fd)
        self._record(op="fsync_dir")

    # --- what the stores call -------------------------------------------------------------------

    def open_append(self, path: Path) -> int:
        """Open (creating if needed) a file for appending; returns the descriptor.

        A new file's name lives in its directory: with fsync on, the directory is fsynced too, or a
        power cut could lose the whole file however often its contents were fsynced.
        """
        fd, created = self._open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        if created and self.fsync_always:
            self._fsync_dir(path.parent)
        return fd

    def close(self, fd: int) -> None:
        self._close(fd)

    def append(self, fd: int, data: bytes, *, torn: bool = False, mid: Hook = _nothing,
               kind: str = "append") -> None:
        """Append `data` to the file behind `fd`.

        Not torn: one `write()` of the whole record, and the mid-commit point fires before it, so a
        kill there leaves no byte of the record on disk. One `write()` is not atomic against
        SIGKILL, though: Linux copies a buffered write into the page cache one memory page (4 KiB)
        at a time and stops between pages when a fatal signal is pending (`generic_perform_write`
        in mm/filemap.c, the loop ext4 uses), so a record that straddles a page boundary of the
        file can, rarely, be cut there and leave its first part on disk.

        Torn: the first half is written, the mid-commit point fires, then the rest, which is how a
        record split across several writes by a buffer, or cut at a page boundary, looks after a
        kill.
        """
        t0 = self._clock()
        if torn:
            self._write_torn(fd, data, mid)
        else:
            mid()
            self._write(fd, data)
        if self.fsync_always:
            self._fsync(fd)
        self.latencies_ns[kind].append(self._clock() - t0)

    def _write_torn(self, fd: int, data: bytes, mid: Hook) -> None:
        """The first half, the mid-commit point, then the rest: a kill in between tears it."""
        half = len(data) // 2
        self._write(fd, data[:half])
        mid()
        self._write(fd, data[half:])

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
        fd, _ = self._open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
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
        fd, created = self._open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            if torn:
                self._write_torn(fd, data, mid)
            else:
                self._write(fd, data)
            if self.fsync_always:
                self._fsync(fd)
        finally:
            self._close(fd)
        if created and self.fsync_always:
            self._fsync_dir(path.parent)
        self.latencies_ns[kind].append(self._clock() - t0)

    def remove(self, path: Path) -> None:
        """Remove a file (a stale temp file left by a kill between write and rename)."""
        os.unlink(path)
        self._record(op="unlink", path=path.name)
        if self.fsync_always:
            self._fsync_dir(path.parent)
