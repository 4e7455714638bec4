"""BugHunt Recovery Lab: an agent worker killed with SIGKILL at every crash point, and resumed.

Read the package top to bottom as the lesson: `events` (the state and `apply_event`), `world` (site,
mock model and its bill, SQLite tracker), `diskio` (the one door to the disk), `crashpoints` (where a
crash can fall), `stores` (none, snapshot, log: load, replay, commit), `worker` (the page loop),
`experiment` (kill, resume, the three witnesses, sweeps), `cli`.

Importing this package imports nothing else, so the worker starts fast.
"""

__version__ = "0.1.0"
