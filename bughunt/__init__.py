"""BugHunt Recovery Lab: an agent worker killed with SIGKILL at every crash point, and resumed.

Read the package top to bottom as the lesson: `events` (the state and `apply_event`), `world` (site,
mock model and its bill, SQLite tracker), `diskio` (the one door to the disk), `crashpoints` (where a
crash can fall), `stores` (none, snapshot, log: load, replay, commit), `worker` (the page loop),
`experiment` (kill, resume, the three witnesses, sweeps), `cli`.

Importing this package imports nothing else, so the worker starts fast.
"""

__version__ = "0.1.0"


def _library_first() -> None:
    """`python -m bughunt...` put the current directory first on the import path, ahead of the
    standard library: a learner's folder with a json.py, tempfile.py or sqlite3.py beside their
    store was imported in place of the modules the lab imports. The lab imports nothing from
    there (a store is imported from its file, with its folder last on the path:
    `boundary.fence.add_learner_dirs`), so that entry goes, as `python -P` would leave it out.
    (A bughunt.py there is found before this runs: Python's own start, which nothing here
    reaches; behind the boundary, PYTHONSAFEPATH keeps the folder out from the start.)"""
    import os
    import sys

    if sys.argv[:1] != ["-m"] or sys.flags.safe_path or not sys.path:
        return                       # imported, not run: the importer's path is its own
    first = os.path.realpath(sys.path[0] or os.curdir)
    here = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    if first == os.path.realpath(os.getcwd()) and first != here:
        del sys.path[0]


_library_first()
