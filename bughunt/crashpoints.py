"""Where a crash can fall: the lesson's crash-point scheme, and the real SIGKILL that ends a worker.

Per page, in order (the lesson's scheme, so its numbers can be reproduced exactly):

1. `after_model_call`  the call is on the bill, its answer only in memory
2. `after_visit`       the page was visited
3. `after_intent`      bug pages with intents on: the intent is durable, the report not yet filed
4. `after_submit`      bug pages: the report is in the tracker, the page not yet committed
5. `mid_commit`        inside the page's commit write: nothing of it is durable yet (torn modes
                       leave half a record; atomic leaves a temp file not yet renamed, or a log
                       line not yet written; with no store the commit does nothing)
6. `after_commit`      the page's checkpoint is durable

No point before the first model call and no separate end point: 12 pages with bugs on 3, 7 and 10
give 9 x 4 + 3 x 5 = 51 points without intents and 54 with.

Points are numbered from 1 over a whole clean run. A worker started with `--crash-at I` kills itself
with SIGKILL when it reaches point I; one started with `--pause-at I` stops there and waits, so that
another process can kill it, or start a rival, at an exactly known moment.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass

LABELS = ("after_model_call", "after_visit", "after_intent", "after_submit", "mid_commit",
          "after_commit")


@dataclass(frozen=True)
class CrashPoint:
    index: int
    page: int
    label: str


def scheme(pages: int, bug_pages, intent: bool) -> list[CrashPoint]:
    """Every crash point of a clean run, in the order the worker reaches them."""
    bugs = set(bug_pages)
    points = []
    for page in range(1, pages + 1):
        for label in LABELS:
            if label == "after_intent" and not (intent and page in bugs):
                continue
            if label == "after_submit" and page not in bugs:
                continue
            points.append(CrashPoint(len(points) + 1, page, label))
    return points


def describe(point: CrashPoint) -> str:
    return f"crash point {point.index} (page {point.page}, {point.label})"


class CrashPlan:
    """Which point, if any, this process dies at (or pauses at).

    The worker calls `reach(page, label)` at every point. Reaching the planned point sends this
    process a real SIGKILL: no handler runs, no buffer is flushed, no `finally` executes, exactly as
    when the OOM killer or `kill -9` strikes.
    """

    def __init__(self, points: list[CrashPoint], crash_at: int | None = None,
                 pause_at: int | None = None):
        self._by_index = {p.index: p for p in points}
        self.crash = self._target(crash_at, "--crash-at")
        self.pause = self._target(pause_at, "--pause-at")
        self._trace_fd: int | None = None

    def trace_to(self, path) -> None:
        """Also write every point reached, with the wall time, to `path` (lab instrumentation for
        timelines; like the bill it is outside the checkpoint store and never read by recovery)."""
        self._trace_fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def mark(self, page: int, label: str) -> None:
        if self._trace_fd is not None:
            line = '{"pid":%d,"t":%.6f,"page":%d,"label":"%s"}\n' % (
                os.getpid(), time.time(), page, label)
            os.write(self._trace_fd, line.encode())

    def _target(self, index: int | None, flag: str) -> tuple[int, str] | None:
        if index is None:
            return None
        if index not in self._by_index:
            raise ValueError(f"{flag} {index}: this configuration has crash points 1 to "
                             f"{len(self._by_index)}")
        p = self._by_index[index]
        return (p.page, p.label)

    def point(self, page: int, label: str) -> CrashPoint | None:
        for p in self._by_index.values():
            if p.page == page and p.label == label:
                return p
        return None

    @staticmethod
    def die() -> None:
        """A real SIGKILL, now (a crash inside recovery itself)."""
        os.kill(os.getpid(), signal.SIGKILL)

    def reach(self, page: int, label: str) -> None:
        self.mark(page, label)
        here = (page, label)
        if here == self.pause:
            self.pause = None
            wait_here(self.point(page, label))
        if here == self.crash:
            os.kill(os.getpid(), signal.SIGKILL)


PAUSE_BANNER = "bughunt: paused at"


def wait_here(point: CrashPoint) -> None:
    """Announce the pause on stderr, then wait until stdin is closed (or until killed)."""
    sys.stderr.write(f"{PAUSE_BANNER} {describe(point)}\n")
    sys.stderr.flush()
    try:
        while sys.stdin.buffer.read(4096):
            pass
    except (OSError, ValueError):
        pass
