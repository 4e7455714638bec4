"""Lesson 7: a durable task runtime on SQLite, in the style of the second lesson text.

`store` keeps task records (one row per task, the full record as JSON, one transaction per commit);
`runtime` runs them step by step (checkpoint = step entry, memo, sleep_until, restart limit, tool
replay policy); `examples` are the lesson's programs (`python -m bughunt.durable --help`).
"""

from .runtime import (DEFAULT_RESTART_LIMIT, MISSING, Kind, Runtime, Step, Tool,
                      interrupted_message)
from .store import DurableStore, ReadOnlyError, read_tasks

__all__ = ["DEFAULT_RESTART_LIMIT", "MISSING", "DurableStore", "Kind", "ReadOnlyError", "Runtime",
           "Step", "Tool", "interrupted_message", "read_tasks"]
