"""What a run of the lab left behind: its processes, found by a marker only they carry (an
environment variable every process of the run inherits, read from /proc/PID/environ), and the
files in the temp folders it was given. Other engineers' lab processes may run on the same
machine at the same time; the marker tells this run's apart. Linux (/proc)."""

from __future__ import annotations

import time
from pathlib import Path

MARK = "BUGHUNT_TEST_RUN"


def marked(token: str) -> list[int]:
    """The pids whose environment carries `MARK=token` (processes of other users, or that end
    while we look, are skipped)."""
    needle = f"{MARK}={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def describe(pids: list[int]) -> list[str]:
    out = []
    for pid in pids:
        try:
            out.append(f"{pid}: " + Path(f"/proc/{pid}/cmdline").read_bytes()
                       .replace(b"\0", b" ").decode(errors="replace").strip())
        except OSError:
            pass
    return out


def left_behind(token: str, folders: list[Path], grace_s: float = 60) -> list[str]:
    """What the run marked `token` left: its processes still running once `grace_s` has passed
    (whatever the lab started is stopped by the lab, not by us: this waits for a condition, and
    is not a sleep for timing), then every entry left in `folders`. Empty when nothing was."""
    deadline = time.monotonic() + grace_s
    while marked(token) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [f"still running: {line}" for line in describe(marked(token))]
    for folder in folders:
        if folder.is_dir():
            left += [f"left in {folder}: {p.name}" for p in sorted(folder.iterdir())]
    return left
