"""The stores you would reach for first, as small agent checkpoints the explorer can run.

Each workload saves an agent's checkpoint (`{"step": n, "todo": [...]}`, a list that shrinks as
the work is done) STEPS times, printing `BEGIN agent n` before and `ACK agent n` after each save,
flushed; its checker reads the checkpoint back as the agent would after a crash. Each has its fix
beside it. The program side runs as a plain script (`python workloads.py run NAME DIR`: only the
standard library and the store are imported under strace):

- `json-dump`: `json.dump` into the checkpoint file opened with "w" (truncates it first);
  fix `json-atomic`: a temp file, flush, fsync, `os.replace`, fsync of the directory.
- `tinydb`: TinyDB's default JSONStorage, which rewrites its file in place: seek(0), write,
  flush, fsync, then truncate (tinydb/storages.py, `JSONStorage.write`); fix `tinydb-atomic`:
  a storage that writes the same JSON atomically.
- `shelve`: `shelve` on `dbm.dumb`, which writes values into its .dat file in place and, at
  sync, renames the .dir index to .bak and writes a new one (CPython Lib/dbm/dumb.py, `_commit`);
  fix `pickle-atomic`: the same dict pickled into one file written atomically.
- `sqlite-wal-full`: `sqlite3`, `journal_mode=WAL`, `synchronous=FULL` (the WAL is fsynced at
  every commit: https://www.sqlite.org/pragma.html#pragma_synchronous); beside it
  `sqlite-wal-normal`, which the SQLite docs say "might roll back" after a power loss.

`SKELETON` is a short checkpointing script with the ACK lines in place, for a learner's own code.

    python -m bughunt explore --dir D --check "python workloads.py check json-dump {state}" \\
        -- python workloads.py run json-dump D
"""

from __future__ import annotations

import json
import os
import sys

STEPS = 5
KEY = "agent"
TODO = [f"page {i}" for i in range(1, 13)]


def _checkpoint(step: int) -> dict:
    return {"step": step, "todo": TODO[step:]}


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _atomic(path: str, data: bytes) -> None:
    """Temp file, fsync, rename, fsync of the directory: the old bytes or the new, durably."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(os.path.dirname(path) or ".")


# --- json.dump ------------------------------------------------------------------------------------

def json_dump_save(d: str, step: int) -> None:
    with open(os.path.join(d, "checkpoint.json"), "w") as f:
        json.dump(_checkpoint(step), f)


def json_atomic_save(d: str, step: int) -> None:
    _atomic(os.path.join(d, "checkpoint.json"), json.dumps(_checkpoint(step)).encode())


def json_load(d: str) -> int | None:
    path = os.path.join(d, "checkpoint.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)["step"]


# --- TinyDB ---------------------------------------------------------------------------------------

def _tinydb(d: str, atomic: bool, read_only: bool = False):
    from tinydb import TinyDB
    from tinydb.storages import JSONStorage, Storage

    path = os.path.join(d, "agent.tinydb.json")

    class AtomicJSONStorage(Storage):
        """TinyDB's JSON, written with a temp file, fsync and rename instead of in place."""

        def __init__(self, path):
            self.path = path

        def read(self):
            if not os.path.exists(self.path) or not os.path.getsize(self.path):
                return None
            with open(self.path) as f:
                return json.load(f)

        def write(self, data):
            _atomic(self.path, json.dumps(data).encode())

    if atomic:
        return TinyDB(path, storage=AtomicJSONStorage)
    if read_only:
        return TinyDB(path, storage=JSONStorage, access_mode="r")
    return TinyDB(path)


def tinydb_save(d: str, step: int, atomic: bool = False, _db={}) -> None:
    from tinydb import Query

    db = _db.get((d, atomic))
    if db is None:
        db = _db[(d, atomic)] = _tinydb(d, atomic)
    db.table("checkpoints").upsert({"agent": KEY, **_checkpoint(step)}, Query().agent == KEY)


def tinydb_load(d: str, atomic: bool = False) -> int | None:
    from tinydb import Query

    path = os.path.join(d, "agent.tinydb.json")
    if not os.path.exists(path):
        return None
    db = _tinydb(d, atomic, read_only=True)
    try:
        doc = db.table("checkpoints").get(Query().agent == KEY)
    finally:
        db.close()
    return None if doc is None else doc["step"]


# --- shelve on dbm.dumb ---------------------------------------------------------------------------

def shelve_save(d: str, step: int, _db={}) -> None:
    import dbm.dumb
    import shelve

    db = _db.get(d)
    if db is None:
        db = _db[d] = shelve.Shelf(dbm.dumb.open(os.path.join(d, "agent.shelf"), "c"))
    db[KEY] = _checkpoint(step)
    db.sync()


def shelve_load(d: str) -> int | None:
    import dbm.dumb
    import shelve

    if not os.path.exists(os.path.join(d, "agent.shelf.dat")):
        return None
    with shelve.Shelf(dbm.dumb.open(os.path.join(d, "agent.shelf"), "r")) as db:
        return db[KEY]["step"] if KEY in db else None


def pickle_atomic_save(d: str, step: int) -> None:
    import pickle

    _atomic(os.path.join(d, "agent.pickle"), pickle.dumps({KEY: _checkpoint(step)}))


def pickle_load(d: str) -> int | None:
    import pickle

    path = os.path.join(d, "agent.pickle")
    if not os.path.exists(path):
        return None
    with open(path, "rb") as f:
        return pickle.load(f)[KEY]["step"]


# --- sqlite3 --------------------------------------------------------------------------------------

def _sqlite(d: str, synchronous: str):
    import sqlite3

    con = sqlite3.connect(os.path.join(d, "agent.sqlite"), isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute(f"PRAGMA synchronous={synchronous}")
    con.execute("CREATE TABLE IF NOT EXISTS checkpoint (agent TEXT PRIMARY KEY, step INTEGER, "
                "todo TEXT)")
    return con


def sqlite_save(d: str, step: int, synchronous: str = "FULL", _db={}) -> None:
    con = _db.get(d)
    if con is None:
        con = _db[d] = _sqlite(d, synchronous)
    cp = _checkpoint(step)
    con.execute("INSERT INTO checkpoint VALUES (?, ?, ?) ON CONFLICT(agent) DO UPDATE SET "
                "step = excluded.step, todo = excluded.todo", (KEY, step, json.dumps(cp["todo"])))


def sqlite_load(d: str) -> int | None:
    import sqlite3

    path = os.path.join(d, "agent.sqlite")
    if not os.path.exists(path):
        return None
    con = sqlite3.connect(path)
    try:
        row = con.execute("SELECT step FROM checkpoint WHERE agent = ?", (KEY,)).fetchone()
    except sqlite3.OperationalError as e:
        if "no such table" in str(e):
            return None
        raise
    finally:
        con.close()
    return None if row is None else row[0]


#: name -> (save, load, files the store maps shared and rebuilds, what it is)
WORKLOADS = {
    "json-dump": (json_dump_save, json_load, (), "json.dump into the file opened with 'w'"),
    "json-atomic": (json_atomic_save, json_load, (), "json.dumps, temp file, fsync, rename, "
                                                     "directory fsync"),
    "tinydb": (tinydb_save, tinydb_load, (), "TinyDB, its default JSONStorage"),
    "tinydb-atomic": (lambda d, s: tinydb_save(d, s, atomic=True),
                      lambda d: tinydb_load(d, atomic=True), (),
                      "TinyDB on a storage that writes atomically"),
    "shelve": (shelve_save, shelve_load, (), "shelve on dbm.dumb, sync() after each save"),
    "pickle-atomic": (pickle_atomic_save, pickle_load, (), "the dict pickled, written atomically"),
    "sqlite-wal-full": (sqlite_save, sqlite_load, ("*-shm",),
                        "sqlite3, journal_mode=WAL, synchronous=FULL"),
    "sqlite-wal-normal": (lambda d, s: sqlite_save(d, s, "NORMAL"), sqlite_load, ("*-shm",),
                          "sqlite3, journal_mode=WAL, synchronous=NORMAL"),
}

#: Each store and its fix (sqlite3 in WAL mode with synchronous=FULL needs none).
FIXES = {"json-dump": "json-atomic", "tinydb": "tinydb-atomic", "shelve": "pickle-atomic",
         "sqlite-wal-normal": "sqlite-wal-full"}


#: Why each store behaves as it does, from its own source or documentation (facts from outside,
#: each with its public source; what a run of the explorer finds is measured, never written here).
WHY = {
    "json-dump": (
        "open(path, 'w') truncates the file first (https://docs.python.org/3/library/"
        "functions.html#open), and json.dump hands its chunks to a buffered file that reaches "
        "the kernel only when it is flushed or closed (https://github.com/python/cpython/blob/"
        "3.11/Lib/json/__init__.py, dump): between the two the checkpoint is empty; nothing is "
        "fsynced, so a power cut may keep neither the bytes nor the name."),
    "tinydb": (
        "JSONStorage.write seeks to 0, writes the new JSON over the old, flushes, fsyncs, and "
        "only then truncates (https://github.com/msiemens/tinydb/blob/master/tinydb/storages.py"
        ", JSONStorage.write): when the new document is shorter, the file holds the new JSON "
        "followed by the old tail until the truncate, and the truncate itself is never fsynced; "
        "the directory is never fsynced, so a new database file's name may not survive a "
        "power cut."),
    "shelve": (
        "dbm.dumb overwrites a value in place in its .dat file when it fits, and its _commit "
        "renames the .dir index to .bak before writing a new .dir with open('w'); on open, a "
        "missing .dir is an empty database and the .bak is never read (https://github.com/"
        "python/cpython/blob/3.11/Lib/dbm/dumb.py, _commit, _update and __setitem__, whose "
        "comment says it: 'this is a disaster (for the database) if the program crashes'); "
        "nothing is fsynced."),
    "sqlite-wal-full": (
        "with journal_mode=WAL and synchronous=FULL, SQLite fsyncs the WAL at every commit "
        "before it returns, and the directory after creating the WAL (https://www.sqlite.org/"
        "pragma.html#pragma_synchronous, https://www.sqlite.org/wal.html); the -shm index is "
        "rebuilt from the WAL, so the explorer allows it as opaque."),
    "sqlite-wal-normal": (
        "with synchronous=NORMAL in WAL mode the WAL is fsynced only at checkpoints: 'A "
        "transaction committed in WAL mode with synchronous=NORMAL might roll back following a "
        "power loss or system crash' (https://www.sqlite.org/pragma.html#pragma_synchronous); "
        "a kill -9 loses nothing, the kernel still has the WAL."),
}


def run_workload(name: str, d: str) -> None:
    save = WORKLOADS[name][0]
    os.makedirs(d, exist_ok=True)
    for step in range(1, STEPS + 1):
        print(f"BEGIN {KEY} {step}", flush=True)
        save(d, step)
        print(f"ACK {KEY} {step}", flush=True)


def check_workload(name: str, d: str) -> dict:
    """The checker's verdict: {"items": {...}} or {"error": ...}."""
    try:
        step = WORKLOADS[name][1](d)
    except Exception as e:          # the reader failing is what the explorer counts
        return {"error": f"{type(e).__name__}: {e}"[:300]}
    return {"items": {} if step is None else {KEY: str(step)}}


def workload_command(name: str, d) -> tuple[list[str], str, tuple[str, ...]]:
    """PROGRAM, the --check template and the --allow-opaque globs for workload `name`."""
    return ([sys.executable, os.path.abspath(__file__), "run", name, str(d)],
            f"{sys.executable} {os.path.abspath(__file__)} check {name} {{state}}",
            WORKLOADS[name][2])


def explore_workload(name: str, d, **kw):
    """Explore workload `name` in directory `d` (new or empty)."""
    from . import explore

    program, check_cmd, opaque = workload_command(name, d)
    return explore(program, d, check=check_cmd, allow_opaque=opaque, **kw)


# --- the skeleton for your own agent ----------------------------------------------------------------

SKELETON = '''\
import json, os, sys                      # python my_agent.py run DIR | check DIR
def save(d, step):                        # your checkpoint code: here, the plain json.dump
    with open(os.path.join(d, "checkpoint.json"), "w") as f: json.dump({"step": step}, f)
def load(d):                              # your recovery code: what a restart reads
    with open(os.path.join(d, "checkpoint.json")) as f: return json.load(f)["step"]
if sys.argv[1] == "run":
    for step in range(1, 6):
        print("BEGIN agent", step, flush=True); save(sys.argv[2], step); print("ACK agent", step, flush=True)
else:
    try: print(json.dumps({"items": {"agent": str(load(sys.argv[2]))}}))
    except FileNotFoundError: print(json.dumps({"items": {}}))
    except Exception as e: print(json.dumps({"error": repr(e)}))
'''


def write_skeleton(path) -> str:
    """Write the skeleton to `path` (refusing to overwrite a file) and return the explorer
    command line that explores it."""
    from pathlib import Path

    path = Path(path)
    with open(path, "x") as f:
        f.write(SKELETON)
    d = path.with_suffix("").name + "-state"
    return (f"python -m bughunt explore --dir {d} --check 'python {path} check {{state}}' "
            f"-- python {path} run {d}")


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in ("run", "check") or argv[1] not in WORKLOADS:
        print(f"usage: workloads.py run|check {'|'.join(WORKLOADS)} DIR", file=sys.stderr)
        return 2
    if argv[0] == "run":
        run_workload(argv[1], argv[2])
    else:
        print(json.dumps(check_workload(argv[1], argv[2])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
