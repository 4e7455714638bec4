"""Where a written line lives when kill -9 strikes: Python's buffer, the kernel, or the disk.

    python -m bughunt.bufferdemo PATH [--flush | --fsync | --os-write] [--lines N]

Lesson 6's smallest experiment. The program writes a 12-byte line (`page 7 done` and a newline) to
PATH, N times, then kills itself with a real SIGKILL: no handler runs, no buffer is flushed, no
`finally` executes. What PATH holds afterwards shows how far each line got before the kill:

- default: `open()` + `f.write()` only. The line sits in the file object's user-space buffer
  (用户态缓冲区) inside this process, and dies with it: the file stays empty.
- `--flush`: `f.flush()` after the writes hands the bytes to the kernel with `write()`. They are in
  the kernel's page cache now, which outlives the process: all 12 bytes survive kill -9.
- `--os-write`: `os.write()` on a raw descriptor, no Python buffer at all (what the lab's I/O door
  does): survives kill -9 like `--flush`.
- `--fsync`: `f.flush()` then `os.fsync()`: the only one of the four also meant to survive a power
  cut (the kernel has been told to put the bytes on the disk), which kill -9 cannot show.

With many lines and no flush, the buffer empties itself whenever it fills up, so a prefix of the
lines reaches the kernel and the rest is lost: how much depends on the buffer's size, not on you.

Standard library only; the process never exits normally (its parent sees it killed by signal 9).
`run_killed(how, lines)` runs it as that process, in a folder of its own, and says what it left.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

LINE = b"page 7 done\n"          # 12 bytes, the source text's measured line length
HOWS = ("write", "flush", "fsync", "os-write")


def write_then_die(path: str, how: str = "write", lines: int = 1) -> None:
    """Write `lines` copies of LINE to `path` the way `how` says, then SIGKILL this process."""
    if how == "os-write":
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        for _ in range(lines):
            os.write(fd, LINE)
    else:
        # Python's buffered text file, as the source text used. The buffer size is fixed at the usual
        # default (8 KiB) instead of following the file system's block size, so that what a kill
        # leaves behind is the same on every machine.
        f = open(path, "w", encoding="ascii", buffering=8192)
        for _ in range(lines):
            f.write(LINE.decode("ascii"))
        if how in ("flush", "fsync"):
            f.flush()
        if how == "fsync":
            os.fsync(f.fileno())
    os.kill(os.getpid(), signal.SIGKILL)


def run_killed(how: str = "write", lines: int = 1, directory: Path | None = None) -> dict:
    """Run `python -m bughunt.bufferdemo` (it writes, then SIGKILLs itself) in a fresh folder
    (under `directory` if given), and say what the file holds: bytes, whole lines, intact or not."""
    if how not in HOWS:
        raise ValueError(f"how: expected one of {', '.join(HOWS)}, got {how!r}")
    with tempfile.TemporaryDirectory(prefix="bughunt-buffer-", dir=directory) as d:
        path = Path(d) / "line.txt"
        flag = [] if how == "write" else [f"--{how}"]
        proc = subprocess.run([sys.executable, "-m", "bughunt.bufferdemo", str(path), *flag,
                               "--lines", str(lines)], capture_output=True, text=True, timeout=60)
        if proc.returncode != -signal.SIGKILL:
            raise RuntimeError(f"bufferdemo was not killed (exit {proc.returncode}): "
                               f"{proc.stderr.strip()}")
        data = path.read_bytes() if path.exists() else b""
    whole = data.count(b"\n")
    return {"how": how, "lines": lines, "bytes written": len(LINE) * lines,
            "bytes on disk": len(data), "whole lines on disk": whole,
            "intact": data == LINE * whole}


def demo_parser() -> argparse.ArgumentParser:
    from .config import OneSentenceParser
    parser = OneSentenceParser(
        prog="python -m bughunt.bufferdemo",
        description="Write a 12-byte line, then die by SIGKILL; look at the file afterwards.")
    parser.add_argument("path", help="the file to write (created or truncated)")
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--flush", dest="how", action="store_const", const="flush",
                     help="call f.flush() before the kill (hand the bytes to the kernel)")
    how.add_argument("--fsync", dest="how", action="store_const", const="fsync",
                     help="f.flush() and os.fsync() before the kill (ask for the disk)")
    how.add_argument("--os-write", dest="how", action="store_const", const="os-write",
                     help="write with os.write() on a raw descriptor: no user-space buffer")
    parser.add_argument("--lines", type=int, default=1, metavar="N",
                        help="write the line N times (default 1)")
    parser.set_defaults(how="write")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = demo_parser().parse_args(argv)
    if args.lines < 1:
        print("bufferdemo: --lines must be at least 1", file=sys.stderr)
        return 2
    write_then_die(args.path, args.how, args.lines)
    return 1        # not reached: SIGKILL ends the process first


if __name__ == "__main__":
    sys.exit(main())
