"""The store contract: what every checkpoint store promises, the lab's and a learner's own.

A store keeps the agent's progress in its run directory, writing only through the I/O door it is
given (`bughunt.diskio.Door`), so that the lab can see, time, tear and journal every byte. The
worker uses it in this order, once per process:

    store = Store(run_dir, config, door)
    recovered = store.load()          # what survived; reads only
    store.open_for_append()           # make the files ready to write after it
    store.commit(state, event, mid=hook)   # once per event, in order
    store.close()

Each promise below is one rule of the conformance suite (`bughunt.conformance`), which drives a
store in-process through a journaling door and checks it at every crash state of a run: after each
disk operation (kill -9: everything written so far is in the page cache and survives) and at the
disk states a power cut may leave (only what was fsynced is sure to survive).

The `none` store keeps nothing on purpose: it is the baseline the lessons measure against, not a
checkpoint store under this contract.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Protocol, runtime_checkable

from ..config import RunConfig
from ..diskio import Door
from . import Recovered, Repairs

#: The rules of the contract, by id, as the conformance suite names them.
RULES = {
    "load-reads-only":
        "load() changes no byte of the run directory (a refusal leaves every byte as it was)",
    "commit-reads-back":
        "after commit() returns, load() gives exactly the state that was committed",
    "mid-fires-once":
        "commit() calls its mid() hook exactly once (the mid-commit crash point)",
    "crash-leaves-a-real-state":
        "after a kill -9 at any moment, load() gives a state the run really passed through, or "
        "refuses with StoreDamage naming a file",
    "kill-keeps-acknowledged":
        "after a kill -9, every commit that had returned is still there (kill -9 keeps the "
        "page cache)",
    "repair-is-idempotent":
        "open_for_append() twice leaves the files as once, and load() after it gives the same "
        "state as before",
    "resume-appends-cleanly":
        "after recovery from any crash, the next commit reads back as written (the no-newline "
        "trap breaks this)",
    "power-cut-leaves-a-real-state":
        "after a power cut at any moment, load() gives a state the run passed through, or refuses "
        "naming a file",
    "fsync-keeps-acknowledged":
        "with fsync always, after a power cut every commit that had returned is still there",
}


@runtime_checkable
class CheckpointStore(Protocol):
    """The protocol. `name` is a short label; the rest is the promises above."""

    name: str

    def __init__(self, run_dir: Path, config: RunConfig, door: Door) -> None:
        """Remember where and how; touch no file yet."""

    def load(self) -> Recovered:
        """Read what is on disk and return the newest state the run reached that is complete
        there (with counts: events replayed, torn lines skipped, notes for the report).

        Reads only (rule load-reads-only). Never returns a state the run never was in: a file
        that cannot be trusted raises `StoreDamage(path, line, message)` instead.
        """

    def open_for_append(self) -> Repairs:
        """After `load()`, before the first `commit()`: prepare the files for writing (a newline
        after a torn tail, a stale temp file removed), through the door. Idempotent."""

    def commit(self, state: dict, event: dict, *, mid: Callable[[], None]) -> None:
        """Make `state`, the state after `event`, durable through the door, and call `mid()` once,
        in the middle of the write. When this returns, `load()` must give `state` after a kill -9;
        with the fsync policy "always", after a power cut as well."""

    def close(self) -> None:
        """Release what `open_for_append()` opened."""
