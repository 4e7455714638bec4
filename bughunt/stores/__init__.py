"""Checkpoint stores: where the agent keeps its progress, and how it gets it back.

Three designs, one contract (`contract.py`: the promises, which the conformance suite checks):

- `none`      keeps nothing: every resume starts from page 1 (the baseline, outside the contract);
- `snapshot`  keeps the whole state in one checksummed file, rewritten at every commit;
- `log`       appends every event to a JSONL log and replays it, optionally with a snapshot every
              N pages so that recovery replays only the events after it (Codex's compaction);
- a learner's own: `--store path/to/module.py:ClassName`, which runs only behind the lab's
  boundary (`bughunt.boundary`; see `store_class`).

Each store has two ways in. `load()` only reads: it is what recovery uses first, and what the
experiment's "fresh rebuild from disk" uses, so a rebuild can never repair what it is checking.
`open_for_append()` then prepares the files for writing (newline repair, stale temp files).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..config import RunConfig, read_config
from ..diskio import Door
from ..events import State

SNAPSHOT_FILE = "snapshot.json"
LOG_FILE = "events.jsonl"


class StoreDamage(Exception):
    """Checkpoint files that cannot be trusted; recovery refuses instead of guessing."""

    def __init__(self, path: Path, line: int | None, message: str):
        self.path, self.line = Path(path), line
        where = f"{self.path}:{line}" if line is not None else str(self.path)
        super().__init__(f"{where}: {message}")


@dataclass
class Recovered:
    """What a store found on disk."""

    state: State
    replayed_events: int = 0          # log events applied at recovery
    torn_lines_skipped: int = 0       # log lines that did not parse
    snapshot_used: bool = False
    snapshot_fallback: str | None = None   # "log" or "fresh" when a snapshot was unusable
    notes: list[str] = field(default_factory=list)


@dataclass
class Repairs:
    """What `open_for_append` changed before the first new write."""

    tails_repaired: int = 0
    temp_files_removed: int = 0


class StoreSpecError(ValueError):
    """A `--store FILE.py:Class` that cannot be loaded; the message names the file or class."""


def store_class(spec: str):
    """The class a `store` setting names: a built-in design, or `path/to/module.py:ClassName`
    (a learner's store). A learner's store is imported only behind the lab's boundary, in a fenced
    process (`bughunt.boundary.child.load_store`); anywhere else this refuses. Raises
    StoreSpecError naming what is wrong."""
    from .log import LogStore
    from .none import NoStore
    from .snapshot import SnapshotStore

    builtin = {"none": NoStore, "snapshot": SnapshotStore, "log": LogStore}
    if spec in builtin:
        return builtin[spec]
    from ..boundary.child import load_store
    return load_store(spec)


def store_for(config: RunConfig):
    """The class that runs `config`: the one its `store` setting names, except in write mode
    `no-newline`, where the lab's event log runs without its newline repair: the lesson's bug, an
    instrument kept outside the store (`bughunt.instruments.no_newline`)."""
    if config.store == "log" and config.write_mode == "no-newline":
        from ..instruments.no_newline import NoNewlineLogStore
        return NoNewlineLogStore
    return store_class(config.store)


def make_store(run_dir: Path, config: RunConfig, door: Door | None = None):
    return store_for(config)(Path(run_dir), config, door or Door(config.fsync))


def rebuild_from_disk(run_dir: Path, config: RunConfig | None = None) -> Recovered:
    """A fresh, read-only rebuild of the state from the files in `run_dir`.

    This is the third witness of the three-way check: code that did not run the worker reads what
    the worker left on disk. Raises StoreDamage if the files cannot be trusted.
    """
    config = config or read_config(Path(run_dir))
    return make_store(run_dir, config).load()
