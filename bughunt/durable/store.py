"""The durable task store: one SQLite table of task records, one transaction per commit.

Each task is one row: `id`, `kind`, `status`, and the full record as JSON (`record`), in the style of
the second lesson's runtime. A commit replaces the whole record in one transaction, so a task is
always either before or after a commit, never half way.

Settings, chosen on purpose:

- `journal_mode=WAL`: a commit appends to the write-ahead log; readers never block the writer.
- `synchronous=FULL` by default: every commit fsyncs the WAL, so a committed checkpoint or memo
  survives a power cut too. `NORMAL` (what the lesson's runtime uses) survives a killed process,
  which is all `kill -9` can do, and costs fewer fsyncs; on power loss it may lose the newest
  commits, though never corrupt the database. A memo that vanishes on power loss would let a step
  repeat an effect it had ruled out, hence FULL here.

Opening a store (not read-only) is recovery: every task found `running` was cut off mid-step. It goes
back to `pending` with its checkpoint kept, and its `restarts` count grows by one. A clean `close()`
also puts this process's running tasks back to `pending`, but does not count a restart. A read-only
open changes nothing on disk, and any attempt to commit or resume raises `ReadOnlyError`.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

STATUSES = ("pending", "running", "waiting", "sleeping", "terminal")
SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS tasks (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ({", ".join(f"'{s}'" for s in STATUSES)})),
    record TEXT NOT NULL CHECK (json_valid(record))
);
CREATE INDEX IF NOT EXISTS tasks_status ON tasks (status, id);
"""

Record = dict[str, Any]


class ReadOnlyError(RuntimeError):
    """A commit or resume on a store opened read-only."""


class DurableStore:
    """A SQLite file of task records. Use as a context manager, or call `close()`."""

    def __init__(self, path: Path, *, read_only: bool = False, synchronous: str = "FULL"):
        self.path = Path(path)
        self.read_only = read_only
        if synchronous.upper() not in SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {', '.join(SYNCHRONOUS)}")
        self.synchronous = synchronous.upper()
        if read_only:
            if not self.path.exists():
                raise FileNotFoundError(f"{self.path}: no such task database")
            self.db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True,
                                      isolation_level=None)
            self.recovered: list[int] = []
            return
        self.db = sqlite3.connect(self.path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(f"PRAGMA synchronous={self.synchronous}")
        self.db.executescript(SCHEMA)
        self.recovered = self._recover()

    # --- transactions ---------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One commit: BEGIN IMMEDIATE ... COMMIT, or nothing at all."""
        self._writable("commit")
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def _writable(self, what: str) -> None:
        if self.read_only:
            raise ReadOnlyError(f"{self.path} was opened read-only: cannot {what}")

    def _recover(self) -> list[int]:
        """Running tasks were cut off: back to pending, checkpoint kept, one more restart."""
        ids = []
        with self.transaction() as db:
            rows = db.execute("SELECT id, record FROM tasks WHERE status='running'").fetchall()
            for (rid, raw) in rows:
                rec = json.loads(raw)
                rec["state"]["status"] = "pending"
                rec["restarts"] = rec.get("restarts", 0) + 1
                self._put(db, rec)
                ids.append(rid)
        return ids

    # --- records --------------------------------------------------------------------------------

    @staticmethod
    def _put(db: sqlite3.Connection, rec: Record) -> None:
        db.execute("UPDATE tasks SET status=?, record=? WHERE id=?",
                   (rec["state"]["status"], json.dumps(rec, separators=(",", ":")), rec["id"]))

    def put(self, rec: Record) -> None:
        """Replace one task's record in one transaction (a single UPDATE is its own transaction)."""
        self._writable("commit")
        self._put(self.db, rec)

    def create(self, kind: str, input: Any, checkpoint: dict, db=None) -> int:
        """Add a pending task; inside `transaction()` when `db` is given."""
        def insert(conn):
            cur = conn.execute("INSERT INTO tasks (kind, status, record) VALUES (?, 'pending', '{}')",
                               (kind,))
            rec = {"id": cur.lastrowid, "kind": kind, "input": input,
                   "state": {"status": "pending", "checkpoint": checkpoint}, "memos": {}}
            self._put(conn, rec)
            return cur.lastrowid
        if db is not None:
            return insert(db)
        with self.transaction() as conn:
            return insert(conn)

    def get(self, task_id: int) -> Record:
        row = self.db.execute("SELECT record FROM tasks WHERE id=?", (task_id,)).fetchone()
        if row is None:
            raise KeyError(f"no task {task_id} in {self.path}")
        return json.loads(row[0])

    def all(self) -> list[Record]:
        return [json.loads(r) for (r,) in self.db.execute("SELECT record FROM tasks ORDER BY id")]

    def close(self) -> None:
        """A clean close: this process's running tasks go back to pending, no restart counted."""
        if not self.read_only:
            with self.transaction() as db:
                rows = db.execute("SELECT record FROM tasks WHERE status='running'").fetchall()
                for (raw,) in rows:
                    rec = json.loads(raw)
                    rec["state"]["status"] = "pending"
                    self._put(db, rec)
        self.db.close()

    def __enter__(self) -> "DurableStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


#: The lesson's "storage in practice" query, in portable json_extract form.
TASKS_QUERY = """
SELECT id, kind, status,
       json_extract(record, '$.restarts')               AS restarts,
       json_extract(record, '$.state.checkpoint.phase') AS phase,
       json_extract(record, '$.state.checkpoint.n')     AS n,
       json_extract(record, '$.state.checkpoint.replay') AS replay,
       json_extract(record, '$.memos')                  AS memos,
       json_extract(record, '$.state.outcome.status')   AS outcome
FROM tasks ORDER BY id
"""


def read_tasks(path: Path) -> list[dict]:
    """The tasks table, read without changing a byte (a read-only connection)."""
    with DurableStore(path, read_only=True) as store:
        cur = store.db.execute(TASKS_QUERY)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row)) for row in cur]
