"""The one door to the agent's disk.

Every durable write of a checkpoint store goes through a `Door`: appending a log line, writing a
snapshot, fsync, rename, directory fsync, removing a stale temp file. That single place is

- where a write is torn on purpose (write mode `torn` / `no-newline`) and the mid-commit crash
  point fires between the two halves, or between a snapshot's temp file and its rename;
- where every checkpoint write is timed (nanoseconds, per kind), which lesson 6 plots;
- where the fsync policy is applied, and where a new file's directory entry is made durable.

Underneath, the door makes its system calls through a `Files` object, one method per call
(open, write, fsync, close, rename, directory fsync, unlink), like SQLite's VFS. The lab's
instruments plug in there, from outside this module, without a switch in the code a learner
reads: a journal of every operation for the power-loss simulation, a disk that fills up or an
fsync that fails (`bughunt.instruments`).

The door writes with `os.write` on raw descriptors. There is no user-space buffer, so every byte a
method has written is in the kernel's page cache when it returns: that survives `kill -9`. Only
`fsync` makes it survive a power cut, and the fsync policy decides whether that is paid.

A run directory's files are never followed out of it: every open here, for writing or reading,
refuses a symbolic link (`O_NOFOLLOW`: open(2) fails with ELOOP), so a link put in place of
the log cannot make the agent write, or read its state, somewhere else.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from pathlib import Path
from typing import BinaryIO, Callable

Hook = Callable[[], None]

#: open(2) flag: fail with ELOOP instead of following a symbolic link (POSIX.1-2008).
NOFOLLOW = os.O_NOFOLLOW


def _nothing() -> None:
    pass


class FsyncError(OSError):
    """fsync failed. Fatal: the kernel may already have dropped the pages it could not write, so
    a retry that succeeds proves nothing (PostgreSQL's "fsyncgate", 2018)."""


class Files:
    """The system calls the door makes, one method each: the seam instruments plug into.

    Errors name the file: `OSError.filename` is the full path of the file involved.
    """

    def open(self, path: Path, flags: int) -> int:
        return os.open(path, flags | NOFOLLOW, 0o644)

    def write(self, fd: int, data: bytes, path: str) -> None:
        """All of `data`; a short write (rare on a regular file, but legal) is continued."""
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except OSError as e:           # os.write names no file: say which one
            raise OSError(e.errno, e.strerror, path) from None

    def fsync(self, fd: int, path: str) -> None:
        try:
            os.fsync(fd)
        except OSError as e:
            raise FsyncError(e.errno, e.strerror, path) from None

    def close(self, fd: int) -> None:
        os.close(fd)

    def rename(self, src: Path, dst: Path) -> None:
        os.replace(src, dst)

    def fsync_dir(self, directory: Path) -> None:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        except OSError as e:
            raise FsyncError(e.errno, e.strerror, str(directory)) from None
        finally:
            os.close(fd)

    def unlink(self, path: Path) -> None:
        os.unlink(path)

    def mark(self, what: dict) -> None:
        """A moment of the run (a report filed, a page committed): nothing to do on a real disk;
        a journal records it."""


class Door:
    """The agent's disk, as the checkpoint stores see it.

    `fsync` is the policy: "always" fsyncs each checkpoint write (and the directory after a rename
    or after creating a file), "never" stops at the kernel hand-off. `files` are the system calls
    underneath (`Files()`, or an instrument wrapping it).
    """

    def __init__(self, fsync: str = "never", clock: Callable[[], int] = time.perf_counter_ns, *,
                 files: Files | None = None):
        self.fsync_always = fsync == "always"
        self._clock = clock
        self.files = files or Files()
        #: checkpoint write latencies in ns, by kind ("append", "snapshot", ...)
        self.latencies_ns: dict[str, list[int]] = defaultdict(list)
        self.writes = 0          # write() calls so far
        self.fsyncs = 0          # fsync() calls so far, files and directories
        self._paths: dict[int, str] = {}

    def mark(self, **what) -> None:
        """Note a moment of the run (for a journal, if one is plugged in)."""
        self.files.mark(what)

    # --- the system calls, counted ---------------------------------------------------------------

    def _open(self, path: Path, flags: int) -> tuple[int, bool]:
        """Open `path`; returns the descriptor and whether the file was created."""
        existed = os.path.lexists(path)
        fd = self.files.open(path, flags)
        self._paths[fd] = str(path)
        return fd, not existed

    def _write(self, fd: int, data: bytes) -> None:
        self.writes += 1
        self.files.write(fd, data, self._paths.get(fd, "?"))

    def _fsync(self, fd: int) -> None:
        self.fsyncs += 1
        self.files.fsync(fd, self._paths.get(fd, "?"))

    def _fsync_dir(self, directory: Path) -> None:
        self.fsyncs += 1
        self.files.fsync_dir(directory)

    def _close(self, fd: int) -> None:
        self._paths.pop(fd, None)
        self.files.close(fd)

    # --- what the stores call -------------------------------------------------------------------

    def open_append(self, path: Path) -> int:
        """Open (creating if needed) a file for appending; returns the descriptor.

        A new file's name lives in its directory: with fsync on, the directory is fsynced too, or a
        power cut could lose the whole file however often its contents were fsynced (fsync(2)).
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
        self.files.rename(tmp, path)
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
        self.files.unlink(path)
        if self.fsync_always:
            self._fsync_dir(path.parent)


#: What a file that is not a regular one is, by its type (`stat.S_IFMT`).
_KINDS = {0o010000: "a named pipe (FIFO)", 0o020000: "a character device",
          0o040000: "a directory", 0o060000: "a block device", 0o140000: "a socket",
          0o120000: "a symbolic link"}


def not_a_file(path: Path) -> str | None:
    """What `path` is when it is there but is not a regular file ("a named pipe (FIFO)", "a
    directory", ...), else None (a regular file, or nothing there). Opening such a file would
    block (a FIFO waits for its other end), read without end (a device) or fail mid-run (a
    directory), so the lab checks its files with this before it opens any of them. Never follows
    a link (lstat)."""
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    kind = mode & 0o170000
    return None if kind == 0o100000 else _KINDS.get(kind, "not a regular file")


def open_for_reading(path: Path) -> BinaryIO:
    """`path` opened to read, as a binary file, refusing a symbolic link (OSError ELOOP) as the
    door's writes do: recovery reads the run's own files, never a file a link points to."""
    return os.fdopen(os.open(path, os.O_RDONLY | NOFOLLOW), "rb")


def read_bytes(path: Path) -> bytes:
    """All of `path` (see `open_for_reading`)."""
    with open_for_reading(path) as f:
        return f.read()
