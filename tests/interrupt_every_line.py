"""A signal at every line: run `in_parallel` (or the frameworks sweep's wait) in the main thread
with a signal handled at the Nth line the main thread runs, for every N, and check that each run
ends: interrupted (or finished, for an N past its end), with no thread left behind and SIGINT
acted on after it (not lost). Run by tests/test_interrupts.py as `python THIS TARGET [--shard K/M]`
(with --shard, only the runs whose N is K modulo M: M processes at once cover every line in a
fraction of the wall time, each mostly waiting for its threads); prints one JSON line; exits 1 at
the first run that went wrong, or by faulthandler after a hang."""

from __future__ import annotations

import faulthandler
import functools
import json
import signal
import sys
import threading

from concurrent.futures import ThreadPoolExecutor

from bughunt import experiment
from bughunt.frameworks import sweep
from bughunt.interrupts import Interrupted, deferred, interruptible

release = threading.Event()
lines_run = [0]          # the main thread's line events so far, in this run


def job(i: int) -> int:
    """Run until the signal comes (to finish right after it, while the main thread handles it),
    or until the main thread has run no line for 5 ms: it is waiting for the jobs."""
    seen = -1
    while not release.wait(0.005) and lines_run[0] != seen:
        seen = lines_run[0]
    return i


def in_parallel() -> None:
    calls = [functools.partial(job, i) for i in range(3)]
    assert experiment.in_parallel(calls, workers=2) == [0, 1, 2]


class _Settings:
    def resolved(self):
        return self


class _Children:
    cancelled = threading.Event()

    def kill_all(self):
        pass


class _Point:
    def __init__(self, order: int):
        self.order = order


#: `sweep_many`'s processes replaced by the same short jobs (its children need a framework):
#: discovery and the crash runs are threads that each run a `job`. Put in place once, by `main`.
SWEEP_FAKES = {"preload_for": lambda s: (), "shared_children": lambda preload: _Children(),
               "discover": lambda s, children, base, timeout: job(0),
               "select_for_all": lambda cleans, points: [[_Point(i) for i in range(3)]],
               "crash_run": lambda s, clean, p, run_dir, children, r, timeout: job(p.order)}


def frameworks_wait() -> None:
    """`sweep_many` itself, on `SWEEP_FAKES`."""
    [result] = sweep.sweep_many([_Settings()], workers=2)
    assert result.records == [0, 1, 2]


TARGETS = {"in_parallel": in_parallel, "frameworks_wait": frameworks_wait}


def trial(target, n: int) -> tuple[str, int, str]:
    """Run `target` with SIGINT's handler called at the main thread's `n`th line event, as a
    signal arriving there would call it. Returns (outcome, events seen, where it fired)."""
    count, where = 0, ""

    def tracer(frame, event, arg):
        nonlocal count, where
        count += 1
        lines_run[0] = count
        if count == n:
            where = f"{frame.f_code.co_filename}:{frame.f_lineno} ({event})"
            release.set()
            handler = signal.getsignal(signal.SIGINT)
            handler(signal.SIGINT, frame)
        return tracer

    release.clear()
    outcome = "finished"
    try:
        with interruptible():
            sys.settrace(tracer)
            try:
                target()
            finally:
                sys.settrace(None)
    except Interrupted:
        outcome = "interrupted"
    return outcome, count, where


def signal_still_acted_on() -> bool:
    """SIGINT raises `Interrupted` again: no handler of an earlier run is left holding it."""
    try:
        with interruptible():
            signal.raise_signal(signal.SIGINT)
            for _ in range(1000):
                pass
    except Interrupted:
        return True
    return False


def main(name: str, keep_going: bool = False, shard: tuple[int, int] = (0, 1)) -> int:
    """`keep_going`: count the runs that went wrong instead of stopping at the first (to see how
    an old version fails: a hang still ends the process, by faulthandler, naming the run).
    `shard` (K, M): only the runs whose N is K modulo M."""
    target = TARGETS[name]
    for attribute, fake in SWEEP_FAKES.items():
        setattr(sweep, attribute, fake)
    faulthandler.dump_traceback_later(60, exit=True)
    _, events, _ = trial(target, 0)
    seen = {"interrupted": 0, "finished": 0, "wrong": 0}
    k, m = shard
    for n in range(1, events + 20):
        if n % m != k:
            continue
        print(f"run {n}", file=sys.stderr, flush=True)        # named by a hang's traceback
        faulthandler.dump_traceback_later(30, exit=True)      # a hang guard, per run
        try:
            outcome, _, where = trial(target, n)
        except BaseException as e:      # noqa: what went wrong is the finding
            outcome, where = f"{type(e).__name__}: {e}", "?"
        left = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
        if (outcome not in seen or (outcome == "finished" and where) or left
                or not signal_still_acted_on()):
            print(json.dumps({"n": n, "where": where, "outcome": outcome, "threads": left}))
            if not keep_going:
                return 1
            seen["wrong"] += 1
            continue
        seen[outcome] += 1
    faulthandler.cancel_dump_traceback_later()
    print(json.dumps({"events": events, **seen}))
    return 1 if seen["wrong"] else 0


def _shard(argv: list[str]) -> tuple[int, int]:
    if "--shard" not in argv:
        return 0, 1
    k, m = (int(x) for x in argv[argv.index("--shard") + 1].split("/"))
    return k, m


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], "--keep-going" in sys.argv[2:], _shard(sys.argv[2:])))
