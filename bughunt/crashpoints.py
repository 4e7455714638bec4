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

With the model over HTTP (lesson 11: the worker's `--model-url`), the call itself has insides, and
`scheme(..., call_in_flight=True)` puts three points inside it, before `after_model_call`:

- `call_sent`        the request is sent and the server has answered with its headers: it is on
                     the server's bill, and no chunk of the answer has arrived
- `call_chunk3`      3 chunks received (the role, then two words; every answer has more)
- `call_last_chunk`  the stream has ended: the whole answer is here, not yet handed back

That is 3 more per page (87 and 90 for the lesson's site); without the model over HTTP these points
do not exist and the scheme is exactly the lesson's.

Recovery itself has two points of its own (lesson 8: a crash during recovery), reached once by every
resuming worker before its first page, whatever page that is:

- `after_repair`     the store has repaired its files for appending (the log's newline repair,
                     a snapshot's stale temp file); nothing of this resume is written yet
- `after_abort`      at most once (intents on, pending intent `abort`): the pending intent found
                     at start has just been recorded as aborted

They belong to no page and are not counted (their number is 0), so the lesson's scheme keeps its
51 and 54; `scheme(..., in_recovery=True)` lists them first, and a worker fires them by name.

Every point has a stable **name**, `p{page}.{step}` (`p3.after_submit`), which means the same moment
in every configuration (recovery's points: the step alone). Points are also numbered from 1 over a
whole clean run, as the lesson counts them, but numbers shift between schemes: with intents on,
page 3 gains `after_intent` and every later number moves by one. So the lab speaks in names;
numbers are accepted where a count is meant.

A worker started with `--crash-at p3.after_submit` (or its number) kills itself with SIGKILL when it
reaches that point; one started with `--pause-at NAME` stops there and waits, so that another process
can kill it, or start a rival, at an exactly known moment.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from dataclasses import dataclass

LABELS = ("after_model_call", "after_visit", "after_intent", "after_submit", "mid_commit",
          "after_commit")
CALL_CHUNK = 3           # the "after k chunks" point inside the call
#: Points inside the model call (the model over HTTP only), in the order the worker reaches them.
CALL_LABELS = ("call_sent", f"call_chunk{CALL_CHUNK}", "call_last_chunk")
#: Points inside recovery itself (lesson 8), before the first page of every resume.
RECOVERY_LABELS = ("after_repair", "after_abort")


@dataclass(frozen=True)
class CrashPoint:
    index: int          # 1.. over a clean run of this configuration (shifts between schemes);
                        # 0 for recovery's points, which are not counted
    page: int           # 0 for recovery's points, which belong to no page
    label: str          # the step: one of LABELS (or CALL_LABELS, RECOVERY_LABELS)

    @property
    def name(self) -> str:
        """The stable name, the same moment in every configuration: `p3.after_submit`."""
        return point_name(self.page, self.label)

    @property
    def in_recovery(self) -> bool:
        return self.label in RECOVERY_LABELS


def point_name(page: int, label: str) -> str:
    """`p3.after_submit`; a point of recovery is named by its step alone (`after_repair`): every
    resume reaches it once, whatever page it resumes at."""
    return label if label in RECOVERY_LABELS else f"p{page}.{label}"


class NoSuchPoint(ValueError):
    """A crash point this configuration does not have; the message says why."""


_NAME = re.compile(r"^p(\d+)\.([a-z][a-z0-9_]*)$")


def find(points: list[CrashPoint], spec, *, pages: int, bug_pages, intent: bool,
         what: str = "crash point", call_in_flight: bool = False) -> CrashPoint:
    """The point `spec` names (`"p3.after_submit"`, `"after_repair"`) or numbers (`12`, `"12"`)
    in `points`.

    Raises NoSuchPoint with one sentence that says why the point does not exist here (intents
    off, not a bug page, past the last page, not a step at all, out of range).
    """
    counted = [p for p in points if p.index]
    if isinstance(spec, bool):
        raise NoSuchPoint(f"{what} {spec!r}: expected a name like p3.after_submit or a number")
    if isinstance(spec, int) or (isinstance(spec, str) and spec.strip().isdigit()):
        n = int(spec)
        if 1 <= n <= len(counted):
            return counted[n - 1]
        raise NoSuchPoint(f"{what} {n}: this configuration has crash points 1 to {len(counted)} "
                          f"(or name one, like {counted[min(11, len(counted) - 1)].name})")
    if not isinstance(spec, str):
        raise NoSuchPoint(f"{what} {spec!r}: expected a name like p3.after_submit or a number")
    if spec.strip() in RECOVERY_LABELS:
        label = spec.strip()
        for p in points:
            if p.label == label:
                return p
        why = ("intents are off in this configuration, so no intent is ever pending"
               if label == "after_abort" and not intent
               else "it is inside recovery, which this list of points leaves out")
        raise NoSuchPoint(f"{what} {spec}: no such crash point here: {why}")
    m = _NAME.match(spec.strip())
    if not m:
        raise NoSuchPoint(f"{what} {spec!r}: expected a name like p3.after_submit (p<page>.<step>) "
                          f"or a number from 1 to {len(counted)}")
    page, label = int(m.group(1)), m.group(2)
    for p in points:
        if p.page == page and p.label == label:
            return p
    if label in CALL_LABELS and not call_in_flight:
        why = ("it is inside the model call, which has crash points only when the model is "
               "reached over HTTP (--model-url)")
    elif label in RECOVERY_LABELS:
        why = f"a point of recovery belongs to no page: name it {label}"
    elif label not in LABELS + (CALL_LABELS if call_in_flight else ()):
        steps = (CALL_LABELS if call_in_flight else ()) + LABELS
        why = f"{label!r} is not a step (steps: {', '.join(steps)})"
    elif not 1 <= page <= pages:
        why = f"the site has pages 1 to {pages}"
    elif label in ("after_intent", "after_submit") and page not in set(bug_pages):
        why = f"page {page} has no bug, so no report (bug pages: " \
              f"{', '.join(map(str, bug_pages))})"
    elif label == "after_intent" and not intent:
        why = "intents are off in this configuration"
    else:
        why = "it is not reached in this configuration"
    raise NoSuchPoint(f"{what} {spec}: no such crash point here: {why}")


def scheme(pages: int, bug_pages, intent: bool, call_in_flight: bool = False,
           in_recovery: bool = False) -> list[CrashPoint]:
    """Every crash point of a clean run, in the order the worker reaches them. `call_in_flight`:
    the model is reached over HTTP, so each page's call has its own points inside it.
    `in_recovery`: recovery's own points first (lesson 8; `after_abort` with intents on), not
    counted, so every other point keeps its number."""
    bugs = set(bug_pages)
    steps = (CALL_LABELS if call_in_flight else ()) + LABELS
    points = [CrashPoint(0, 0, label) for label in RECOVERY_LABELS
              if in_recovery and (intent or label != "after_abort")]
    counted = 0
    for page in range(1, pages + 1):
        for label in steps:
            if label == "after_intent" and not (intent and page in bugs):
                continue
            if label == "after_submit" and page not in bugs:
                continue
            counted += 1
            points.append(CrashPoint(counted, page, label))
    return points


def describe_point(point: CrashPoint) -> str:
    if point.in_recovery:
        return f"crash point {point.name} (inside recovery, before the first page)"
    return f"crash point {point.name} (number {point.index} in this configuration)"


class CrashPlan:
    """Which point, if any, this process dies at (or pauses at).

    The worker calls `reach(page, label)` at every point, recovery's included. Reaching the
    planned point sends this process a real SIGKILL: no handler runs, no buffer is flushed, no
    `finally` executes, exactly as when the OOM killer or `kill -9` strikes.
    """

    def __init__(self, points: list[CrashPoint], crash_at: CrashPoint | None = None,
                 pause_at: CrashPoint | None = None):
        self._points = {p.name: p for p in points}
        self.crash_at, self.pause_at = crash_at, pause_at
        self._crash = crash_at.name if crash_at else None
        self._pause = pause_at.name if pause_at else None
        self._trace_fd: int | None = None

    def trace_to(self, path) -> None:
        """Also write every point reached, with the wall time, to `path` (lab instrumentation for
        timelines; like the bill it is outside the checkpoint store and never read by recovery)."""
        self._trace_fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW,
                                 0o644)

    def mark(self, page: int, label: str, t: float | None = None) -> None:
        if self._trace_fd is not None:
            line = '{"pid":%d,"t":%.6f,"page":%d,"label":"%s"}\n' % (
                os.getpid(), time.time() if t is None else t, page, label)
            os.write(self._trace_fd, line.encode())

    def reach(self, page: int, label: str) -> None:
        """The worker is at this point (`page`: the page it is on; a resume's recovery is on the
        page it resumes at)."""
        self.mark(page, label)
        here = point_name(page, label)
        if here == self._pause:
            self._pause = None
            wait_here(self._points[here])
        if here == self._crash:
            os.kill(os.getpid(), signal.SIGKILL)


PAUSE_BANNER = "bughunt: paused at"


def wait_here(point: CrashPoint) -> None:
    """Announce the pause on stderr, then wait until stdin is closed (or until killed)."""
    announce_and_wait(f"{PAUSE_BANNER} {describe_point(point)}")


def announce_and_wait(announce: str) -> None:
    """Say `announce` on stderr, then wait until stdin is closed (or until killed): the handshake
    that lets another process act at an exactly known moment, with no sleep."""
    sys.stderr.write(announce + "\n")
    sys.stderr.flush()
    try:
        while sys.stdin.buffer.read(4096):
            pass
    except (OSError, ValueError):
        pass
