"""Lesson 7: a durable task runtime on SQLite, in the style of the second lesson text.

`store` keeps task records (one row per task, the full record as JSON, one transaction per commit;
its contract is in its docstring); `runtime` runs them step by step (checkpoint = step entry, memo,
sleep_until, restart limit, tool replay policy, model requests in flight); `examples` are the
lesson's programs (`python -m bughunt.durable --help`).
"""

import sys as _sys

# `python -m bughunt.durable` imports this package while it locates its __main__, and sys.argv[0]
# is "-m" only then (the -m option's documented behaviour): the handlers go in first, before the
# imports below (most of the start's time); `examples.run_cli` puts its own in once it runs. An
# `import bughunt.durable` from a program (a notebook) leaves its signals alone.
if _sys.argv[:1] == ["-m"]:
    from ..interrupts import stop_while_starting as _stop_while_starting

    _stop_while_starting("python -m bughunt.durable", "nothing was opened")

from .runtime import (DEFAULT_RESTART_LIMIT, MISSING, Closed, Kind, Report, Retry, Runtime, Step,
                      Tool, interrupted_message)
from .store import (APPLICATION_ID, DurableStore, InvalidValue, ReadOnlyError, StoreBusy,
                    StoreRefused, read_only_connection, read_tasks)

__all__ = ["APPLICATION_ID", "DEFAULT_RESTART_LIMIT", "MISSING", "Closed", "DurableStore",
           "InvalidValue", "Kind", "ReadOnlyError", "Report", "Retry", "Runtime", "Step",
           "StoreBusy", "StoreRefused", "Tool", "interrupted_message", "read_only_connection",
           "read_tasks"]
