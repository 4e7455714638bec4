"""Ctrl-C and SIGTERM: stop with one sentence, never half way through starting a process.

- `interruptible()` turns SIGINT and SIGTERM into `Interrupted` (a BaseException, not an
  Exception) in the main thread, so `finally` clauses and context managers run (workers killed,
  temp dirs removed) and a command ends with one line and exit 130 (Ctrl-C) or 143 (SIGTERM),
  as a shell reports them.
- `deferred()` holds an interrupt back while a child process is being started: between "the
  child exists" and "we hold its pid" an exception would leave it running with nobody to kill it.
  The signal is acted on as soon as the block ends.
- `as_finished(futures, held)` waits for threads' futures inside a `deferred()` block, where a
  signal wakes the wait instead of raising in the middle of it. An exception raised from a signal
  handler lands between any two bytecodes of the main thread, and `concurrent.futures`' own
  waits (`as_completed`, `wait`) are not written for that: they take every future's lock one
  after another, and an interrupt between two of them left locks held that the worker threads
  need to finish their futures, so the wait for those threads that follows never ended (a
  `bughunt lesson` interrupted as its sweep started hung in 3 of 133 tries on a loaded 2-core
  machine). tests/interrupt_every_line.py hands the signal to every line of the wait in turn.
- `stop_while_starting(command, nothing)` is what a `python -m` command puts in first, before it
  imports the modules it needs (most of its start): a signal in those first milliseconds ends it
  with one sentence and exit 130 or 143, never a KeyboardInterrupt traceback. The command's own
  handlers (`interruptible()`) replace it once it runs. So that this module is quick to import
  for that, it imports nothing at its top but `signal` beyond what the interpreter has loaded
  before it runs a module: `threading` and `queue` where they are used, `Future` in annotations.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

TYPE_CHECKING = False         # typing.TYPE_CHECKING, without importing typing (for type checkers)
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from concurrent.futures import Future

EXIT_INTERRUPTED = 130    # 128 + SIGINT
EXIT_TERMINATED = 143     # 128 + SIGTERM
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """Ctrl-C (SIGINT) or SIGTERM arrived.

    Not an `Exception`, like `KeyboardInterrupt`: an `except Exception` that judges a store (the
    conformance suite's "load() raised ...") or reports a failed run must never catch it, or an
    interrupt would be counted as a broken rule and the run would go on."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
        self.what = "interrupted" if signum == signal.SIGINT else "terminated"
        self.code = EXIT_INTERRUPTED if signum == signal.SIGINT else EXIT_TERMINATED


def how(signum: int) -> str:
    """The signal as a sentence names it: "Ctrl-C (SIGINT)" or "SIGTERM"."""
    return "Ctrl-C (SIGINT)" if signum == signal.SIGINT else "SIGTERM"


def stop_while_starting(command: str, nothing: str) -> None:
    """From now on SIGINT or SIGTERM ends the process with one line on stderr, "COMMAND: stopped
    by Ctrl-C (SIGINT) while starting; NOTHING", and exit 130 or 143 (128 + the signal, as a shell
    reports it). For the first statements of a `python -m` command, while nothing is open yet
    that would need closing; the command's `interruptible()` takes over once it runs."""
    def stopped(signum, frame):
        sys.stderr.write(f"{command}: stopped by {how(signum)} while starting; {nothing}\n")
        sys.exit(128 + signum)

    for s in SIGNALS:
        signal.signal(s, stopped)


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def interruptible():
    """SIGINT and SIGTERM raise `Interrupted` in the main thread while the block runs."""
    def raise_interrupted(signum, frame):
        raise Interrupted(signum)

    if not _main_thread():
        yield
        return
    old = {s: signal.signal(s, raise_interrupted) for s in SIGNALS}
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted(signal.SIGINT) from None
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


class Held:
    """The handler of SIGINT and SIGTERM while a `deferred()` block runs, and what the block gets:
    true once a signal came. `wake`, if set, is called from the handler (in the main thread,
    between two bytecodes), so it must only do what is safe there: `queue.SimpleQueue.put` is.

    Once the block ends (`holding` false) it passes any signal straight on to the handler it
    replaced, so a signal that arrives while the old handlers are being put back, one after the
    other, is acted on at once and never lost."""

    def __init__(self):
        self.caught: list[int] = []
        self.old: dict = {}
        self.holding = True
        self.wake = None

    def __bool__(self) -> bool:
        return bool(self.caught)

    def __call__(self, signum, frame):
        if not self.holding:
            _deliver(signum, self.old[signum])
            return
        self.caught.append(signum)
        if self.wake is not None:
            self.wake()


class HeldBack(BaseException):
    """Raised by `as_finished` when a signal came: unwinds to the end of the `deferred()` block,
    which then acts on the signal (its handler's `Interrupted` or `KeyboardInterrupt` replaces
    this exception). Not an `Exception`, so no `except Exception` stops it on the way."""


@contextlib.contextmanager
def deferred():
    """Act on SIGINT or SIGTERM only when the block ends (main thread; elsewhere no Python signal
    handler runs anyway). Yields a `Held`, true once a signal came; a signal whose handler is
    SIG_IGN stays ignored."""
    held = Held()
    if not _main_thread():
        yield held
        return
    try:
        for s in SIGNALS:
            handler = signal.getsignal(s)
            if handler in (signal.SIG_IGN, None):
                continue
            held.old[s] = handler          # recorded before the swap: restored whatever happens
            signal.signal(s, held)
        yield held
    finally:
        held.holding = False               # from here on a signal goes to its old handler
        for s, handler in held.old.items():
            signal.signal(s, handler)
        if held.caught:
            _deliver(held.caught[0], held.old[held.caught[0]])


def as_finished(futures: Iterable[Future], held: Held, poll: float = 0.25) -> Iterator[Future]:
    """Each of `futures` as it finishes, in the thread of a `deferred()` block that yielded
    `held`; raises `HeldBack` as soon as a signal comes. Unlike `concurrent.futures.as_completed`,
    this thread holds no lock of a future while it waits: each future puts itself on a queue when
    it is done (from the worker thread), and this thread only takes from that queue. `poll`: a
    signal delivered to another thread than the main one wakes nothing, so the wait looks at
    `held` at least that often."""
    import queue

    finished: queue.SimpleQueue = queue.SimpleQueue()
    held.wake = lambda: finished.put(None)
    futures = list(dict.fromkeys(futures))
    for f in futures:
        f.add_done_callback(finished.put)       # called at once for a future already done
    left = len(futures)
    while left:
        if held:
            raise HeldBack
        try:
            f = finished.get(timeout=poll)
        except queue.Empty:
            continue
        if f is not None:
            left -= 1
            yield f
    if held:
        raise HeldBack


def _deliver(signum: int, handler) -> None:
    """Do now what the signal would have done: call the handler, or take the default action."""
    if callable(handler):
        handler(signum, None)
    elif handler == signal.SIG_DFL:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
