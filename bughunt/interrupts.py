"""Ctrl-C and SIGTERM: stop with one sentence, never half way through starting a process.

- `interruptible()` turns SIGINT and SIGTERM into `Interrupted` (a BaseException, not an
  Exception) in the main thread, so `finally` clauses and context managers run (workers killed,
  temp dirs removed) and a command ends with one line and exit 130 (Ctrl-C) or 143 (SIGTERM),
  as a shell reports them.
- `deferred()` holds an interrupt back while a child process is being started: between "the
  child exists" and "we hold its pid" an exception would leave it running with nobody to kill it.
  The signal is acted on as soon as the block ends.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading

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


def _main_thread() -> bool:
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


@contextlib.contextmanager
def deferred():
    """Act on SIGINT or SIGTERM only when the block ends (main thread; elsewhere no Python signal
    handler runs anyway)."""
    if not _main_thread():
        yield
        return
    caught: list[int] = []
    old = {s: signal.signal(s, lambda signum, frame: caught.append(signum)) for s in SIGNALS}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        if caught:
            _deliver(caught[0], old[caught[0]])


def _deliver(signum: int, handler) -> None:
    """Do now what the signal would have done: call the handler, or take the default action."""
    if callable(handler):
        handler(signum, None)
    elif handler == signal.SIG_DFL:
        os.kill(os.getpid(), signum)
