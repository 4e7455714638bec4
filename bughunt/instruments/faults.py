"""A disk that fails on purpose (lesson 8): the k-th write fills the disk after writing half its
bytes (a short write, as a full disk does), or the k-th fsync fails with EIO."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

from ..diskio import Files, FsyncError


@dataclass(frozen=True)
class Faults:
    fail_write: int | None = None        # the k-th write() fails (1 = the first)
    write_errno: int = errno.ENOSPC
    fail_fsync: int | None = None        # the k-th fsync fails, files and directories counted


class FaultyFiles(Files):
    """`Files` with the failures of `faults` injected; everything else passes through."""

    def __init__(self, faults: Faults, inner: Files | None = None):
        self.faults = faults
        self.inner = inner or Files()
        self.writes = self.fsyncs = 0

    def open(self, path: Path, flags: int) -> int:
        return self.inner.open(path, flags)

    def write(self, fd: int, data: bytes, path: str) -> None:
        self.writes += 1
        if self.writes == self.faults.fail_write:
            self.inner.write(fd, data[:len(data) // 2], path)
            code = self.faults.write_errno
            raise OSError(code, f"{os.strerror(code)} (injected at write {self.writes})", path)
        self.inner.write(fd, data, path)

    def _fsync_fault(self, path: str) -> None:
        self.fsyncs += 1
        if self.fsyncs == self.faults.fail_fsync:
            raise FsyncError(errno.EIO, f"I/O error (injected at fsync {self.fsyncs})", path)

    def fsync(self, fd: int, path: str) -> None:
        self._fsync_fault(path)
        self.inner.fsync(fd, path)

    def fsync_dir(self, directory: Path) -> None:
        self._fsync_fault(str(directory))
        self.inner.fsync_dir(directory)

    def close(self, fd: int) -> None:
        self.inner.close(fd)

    def rename(self, src: Path, dst: Path) -> None:
        self.inner.rename(src, dst)

    def unlink(self, path: Path) -> None:
        self.inner.unlink(path)

    def mark(self, what: dict) -> None:
        self.inner.mark(what)
