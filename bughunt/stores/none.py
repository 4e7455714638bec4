"""No checkpoint at all: the baseline every other design is measured against.

Every resume starts from page 1, so every model call before the crash is paid again, and every
report already filed is filed again unless the tracker deduplicates it.
"""

from __future__ import annotations

from pathlib import Path

from ..config import RunConfig
from ..diskio import Door
from ..events import initial_state
from . import Recovered, Repairs


class NoStore:
    name = "none"

    def __init__(self, run_dir: Path, config: RunConfig, door: Door):
        self.door = door

    def load(self) -> Recovered:
        return Recovered(initial_state())

    def open_for_append(self) -> Repairs:
        return Repairs()

    def commit(self, state, event, *, mid=lambda: None) -> None:
        # The mid-commit crash point still exists: it is simply a moment when nothing is saved.
        mid()

    def close(self) -> None:
        pass
