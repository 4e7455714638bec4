"""The durable task store: one SQLite table of task records, one transaction per commit.

Each task is one row: `id`, `kind`, `status`, the full record as JSON (`record`), in the style of the
second lesson's runtime, and `crc`, a CRC-32 of the other four. A commit replaces whole records in
one transaction, so a task is always before or after a commit, never half way.

The store's contract (each promise is tested in tests/test_durable*.py):

1. **Its own files only.** A database made here carries SQLite's `application_id` (0x42484454,
   "BHDT") and `user_version` (the schema version) from its first byte on disk: it is built under a
   temporary name and linked into place complete. Any other file (another program's database, a
   text file, an empty file) is refused before SQLite opens it, so not a byte of it changes and no
   `-wal` or `-shm` file appears beside it.
2. **One writer.** A writable open takes an exclusive `flock` on `<db>.lock` for the store's
   lifetime. A second writable open is refused at once (`StoreBusy`) or, with `wait=True`, waits.
   The kernel drops the lock when its holder dies, even by SIGKILL. Read-only opens take no lock.
3. **Refuse, don't guess.** Every open checks the file before using it: the header, the schema,
   SQLite's `integrity_check`, and every record (its CRC, its shape). Damage is refused with a
   sentence naming the file (`StoreRefused`), and nothing is written. What an open accepts is a
   state the database really passed through: SQLite's write-ahead log drops a torn tail by its
   own checksums, and a flipped bit in a record fails the record's CRC (SQLite pages carry none).
4. **Nothing invalid is written.** `put` and `create` check every record before the transaction:
   JSON only, finite numbers only, the fields the runtime relies on present and typed
   (`InvalidValue`, naming the task and field).
5. **Recovery is explicit.** `recover()` turns every `running` task (cut off mid-step) back to
   `pending`, keeps its checkpoint and counts one more restart, in one commit. A clean `close()`
   puts this process's running tasks back to `pending` without counting a restart.
6. **A read-only open changes nothing.** It sees the tasks as the crash left them, refuses commits
   and resumes (`ReadOnlyError`), and creates no file: with no write-ahead log beside the database
   it reads the file as immutable; with one, SQLite's own reader protocol.

Settings, chosen on purpose:

- `journal_mode=WAL`: a commit appends to the write-ahead log; readers never block the writer.
- `synchronous=FULL` by default: every commit fsyncs the WAL, so a committed checkpoint or memo
  survives a power cut too. `NORMAL` (what the lesson's runtime uses) survives a killed process,
  which is all `kill -9` can do, and costs fewer fsyncs; on power loss it may lose the newest
  commits, though never corrupt the database. A memo that vanishes on power loss would let a step
  repeat an effect it had ruled out, hence FULL here.
"""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import sqlite3
import stat
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from ..interrupts import deferred

APPLICATION_ID = 0x42484454           # "BHDT": PRAGMA application_id of every database made here
SCHEMA_VERSION = 1                    # PRAGMA user_version
STATUSES = ("pending", "running", "waiting", "sleeping", "terminal")
OUTCOMES = ("completed", "failed", "faulted")
SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")
BUSY_TIMEOUT_S = 1.0                  # how long a commit waits for another program's SQLite lock
SQLITE_HEADER = b"SQLite format 3\x00"

SCHEMA = f"""
CREATE TABLE tasks (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ({", ".join(f"'{s}'" for s in STATUSES)})),
    record TEXT NOT NULL CHECK (json_valid(record)),
    crc INTEGER NOT NULL
);
CREATE INDEX tasks_status ON tasks (status, id);
"""
COLUMNS = ("id", "kind", "status", "record", "crc")

Record = dict[str, Any]


def _expected_schema() -> list[tuple]:
    db = sqlite3.connect(":memory:")
    db.executescript(SCHEMA)
    rows = db.execute("SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY name").fetchall()
    db.close()
    return rows


EXPECTED_SCHEMA = _expected_schema()


# --- errors --------------------------------------------------------------------------------------

class StoreRefused(Exception):
    """The store will not open or use this file. The message names it and says why, in one
    sentence; nothing on disk was changed."""

    exit_code = 2

    def __init__(self, path: Path | str, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path = Path(path)
        self.reason = reason


class StoreDiskError(StoreRefused):
    """The disk refused a write or an fsync under the task database (full, a file size limit,
    an I/O error): the README's 74, not a refusal of the file (2)."""

    exit_code = 74


class StoreBusy(StoreRefused):
    """Another durable runtime (or another program's SQLite lock) holds the database now."""

    exit_code = 75                    # EX_TEMPFAIL: try again when the other one is gone


class ReadOnlyError(RuntimeError):
    """A commit or resume on a store opened read-only."""


class InvalidValue(ValueError):
    """A value the store or the runtime will not write; the message names the field. Nothing was
    written."""


# --- records: one definition of a valid record ---------------------------------------------------

def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


def check_record(rec: Any) -> None:
    """Raise InvalidValue, naming the field, unless `rec` is a task record the runtime can run."""
    if not isinstance(rec, dict):
        raise InvalidValue(f"a task record must be a JSON object, got {type(rec).__name__}")
    tid = rec.get("id")
    if not _is_int(tid) or tid < 1:
        raise InvalidValue(f"record field id must be a positive integer, got {tid!r}")
    where = f"task {tid}"
    if not isinstance(rec.get("kind"), str) or not rec["kind"]:
        raise InvalidValue(f"{where}: field kind must be a non-empty string, got {rec.get('kind')!r}")
    if "input" not in rec:
        raise InvalidValue(f"{where}: field input is missing")
    state = rec.get("state")
    if not isinstance(state, dict):
        raise InvalidValue(f"{where}: field state must be an object, got {state!r}")
    status = state.get("status")
    if status not in STATUSES:
        raise InvalidValue(f"{where}: state.status must be one of {', '.join(STATUSES)}, "
                           f"got {status!r}")
    checkpoint = state.get("checkpoint")
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("phase"), str) \
            or not checkpoint["phase"]:
        raise InvalidValue(f"{where}: state.checkpoint must be an object with a non-empty string "
                           f"phase, got {checkpoint!r}")
    if status == "sleeping" and not _is_number(state.get("wake_at")):
        raise InvalidValue(f"{where}: state.wake_at must be a finite number of seconds, got "
                           f"{state.get('wake_at')!r}")
    if status == "waiting":
        on = state.get("on")
        if not isinstance(on, list) or not on or not all(_is_int(t) and t >= 1 for t in on):
            raise InvalidValue(f"{where}: state.on must be a non-empty list of task ids, got {on!r}")
    if status == "terminal":
        outcome = state.get("outcome")
        if not isinstance(outcome, dict) or outcome.get("status") not in OUTCOMES:
            raise InvalidValue(f"{where}: state.outcome must be an object whose status is one of "
                               f"{', '.join(OUTCOMES)}, got {outcome!r}")
    if "memos" in rec and not isinstance(rec["memos"], dict):
        raise InvalidValue(f"{where}: field memos must be an object, got {rec['memos']!r}")
    if "restarts" in rec and (not _is_int(rec["restarts"]) or rec["restarts"] < 1):
        raise InvalidValue(f"{where}: field restarts must be a positive integer, got "
                           f"{rec['restarts']!r}")
    if "output" in rec and not isinstance(rec["output"], str):
        raise InvalidValue(f"{where}: field output must be a string, got {rec['output']!r}")


def to_json(value: Any, field: str) -> str:
    """`value` as compact JSON, or InvalidValue naming `field` (NaN, infinity, non-JSON types)."""
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise InvalidValue(f"{field}: JSON cannot store this value ({e})") from None


def record_crc(tid: int, kind: str, status: str, text: str) -> int:
    """The CRC-32 a row carries: of its id, kind, status and record text together."""
    return zlib.crc32(f"{tid}\x00{kind}\x00{status}\x00{text}".encode())


def encode_row(rec: Record) -> tuple[str, str, str, int]:
    """(kind, status, record text, crc) of a valid record, or InvalidValue."""
    check_record(rec)
    text = to_json(rec, f"task {rec['id']}")
    status = rec["state"]["status"]
    return rec["kind"], status, text, record_crc(rec["id"], rec["kind"], status, text)


def decode_row(row: tuple) -> Record:
    """A stored row back into its record, or InvalidValue saying what does not add up."""
    tid, kind, status, text, crc = row
    if not _is_int(tid) or not isinstance(kind, str) or not isinstance(status, str) \
            or not isinstance(text, str) or not _is_int(crc):
        raise InvalidValue(f"task {tid!r}: a column holds a value of the wrong type")
    if record_crc(tid, kind, status, text) != crc:
        raise InvalidValue(f"task {tid}: its checksum does not match its contents")
    try:
        rec = json.loads(text)
    except ValueError:
        raise InvalidValue(f"task {tid}: its record is not JSON") from None
    check_record(rec)
    if (rec["id"], rec["kind"], rec["state"]["status"]) != (tid, kind, status):
        raise InvalidValue(f"task {tid}: its columns disagree with its record")
    return rec


# --- files ---------------------------------------------------------------------------------------

def lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def wal_path(path: Path) -> Path:
    return path.with_name(path.name + "-wal")


def shm_path(path: Path) -> Path:
    return path.with_name(path.name + "-shm")


def _new_path(path: Path) -> Path:
    return path.with_name(path.name + ".new")


def _check_path(path: Path, writable: bool) -> None:
    """Refuse, in a sentence naming the file or folder, a path the store cannot use."""
    folder = path.parent
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except NotADirectoryError:
        raise StoreRefused(path, f"the folder {folder} is not a folder") from None
    except OSError as e:
        raise StoreRefused(path, f"cannot be examined ({e.strerror})") from None
    if st is None:
        if not folder.is_dir():
            what = "is not a folder" if folder.exists() else "does not exist"
            raise StoreRefused(path, f"the folder {folder} {what}")
        if not writable:
            raise StoreRefused(path, "no such task database")
        for leftover in (wal_path(path), shm_path(path)):
            if leftover.exists():
                raise StoreRefused(path, f"the database is missing but {leftover.name} is there: "
                                         "restore the database or remove the leftover")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise StoreRefused(path, f"cannot create it: the folder {folder} is not writable")
        return
    if stat.S_ISDIR(st.st_mode):
        raise StoreRefused(path, "is a directory, not a task database")
    if not stat.S_ISREG(st.st_mode):
        raise StoreRefused(path, "is not a regular file")
    if not os.access(path, os.R_OK):
        raise StoreRefused(path, "cannot be read (permission denied)")
    if writable and not os.access(path, os.W_OK):
        raise StoreRefused(path, "cannot be written (permission denied); open it read-only "
                                 "to look at it")
    if writable and not os.access(folder, os.W_OK | os.X_OK):
        raise StoreRefused(path, f"the folder {folder} is not writable (SQLite needs to write "
                                 "its write-ahead log there)")


def check_header(path: Path) -> None:
    """Refuse any file that is not a database this store made, before SQLite opens it."""
    try:
        with open(path, "rb") as f:
            head = f.read(100)
    except OSError as e:
        raise StoreRefused(path, f"cannot be read ({e.strerror})") from None
    if not head:
        raise StoreRefused(path, "is an empty file, not a durable task database")
    if len(head) < 100 or not head.startswith(SQLITE_HEADER):
        raise StoreRefused(path, "is not a SQLite database (no SQLite header), so not a durable "
                                 "task database")
    app_id = int.from_bytes(head[68:72], "big", signed=True)
    if app_id != APPLICATION_ID:
        raise StoreRefused(path, f"is a SQLite database of another program (application_id "
                                 f"{app_id}, not {APPLICATION_ID}): the durable runtime opens "
                                 "only its own databases")
    version = int.from_bytes(head[60:64], "big", signed=True)
    if version != SCHEMA_VERSION:
        raise StoreRefused(path, f"has schema version {version}, and this runtime reads version "
                                 f"{SCHEMA_VERSION} only")
    if head[18:20] != b"\x02\x02":
        raise StoreRefused(path, "its header is damaged (it is not in WAL mode, and every durable "
                                 "task database is)")


def _sqlite_refusal(path: Path, e: sqlite3.Error) -> StoreRefused:
    """One sentence for a SQLite error on `path`: busy (locked by another program) or damaged."""
    code = getattr(e, "sqlite_errorcode", None)
    if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or "locked" in str(e):
        return StoreBusy(path, f"another program holds a SQLite lock on it ({e})")
    said = " ".join(str(e).split())
    if isinstance(code, int) and code & 0xFF in (sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL):
        return StoreDiskError(path, f"the disk refused a write ({said}: full, a file size limit "
                                    "or an I/O error); nothing past the last commit was kept")
    damaged = code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB) or "decode" in said or (
        isinstance(e, sqlite3.DatabaseError) and not isinstance(e, sqlite3.OperationalError))
    if damaged:
        return StoreRefused(path, f"damaged: SQLite reports '{said}'; the runtime refuses it "
                                  "rather than guess (restore it from a copy)")
    return StoreRefused(path, f"SQLite cannot use it ({said})")


def _reader(path: Path) -> sqlite3.Connection:
    """A read-only connection that creates no file: immutable when no write-ahead log is there."""
    uri = path.resolve().as_uri() + ("?mode=ro" if wal_path(path).exists()
                                     else "?mode=ro&immutable=1")
    db = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=BUSY_TIMEOUT_S,
                         check_same_thread=False)
    return db


def check_contents(db: sqlite3.Connection, path: Path) -> list[Record]:
    """Every check an open makes through SQLite; the records, or StoreRefused naming the file."""
    try:
        app_id = db.execute("PRAGMA application_id").fetchone()[0]
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if (app_id, version) != (APPLICATION_ID, SCHEMA_VERSION):
            raise StoreRefused(path, f"its header is damaged (application_id {app_id}, "
                                     f"user_version {version})")
        schema = db.execute("SELECT type, name, tbl_name, sql FROM sqlite_schema "
                            "ORDER BY name").fetchall()
        if schema != EXPECTED_SCHEMA:
            columns = tuple(r[1] for r in db.execute("PRAGMA table_info(tasks)"))
            if columns and columns != COLUMNS:
                raise StoreRefused(path, f"its tasks table has the columns {', '.join(columns)}, "
                                         f"not the durable runtime's {', '.join(COLUMNS)}")
            raise StoreRefused(path, "its schema is not the durable runtime's (tables: "
                                     f"{', '.join(r[1] for r in schema) or 'none'})")
        problems = [r[0] for r in db.execute("PRAGMA integrity_check")]
        if problems != ["ok"]:
            first = [line for line in "\n".join(problems).splitlines()
                     if line.strip() and not line.startswith("***")][:1] or ["not ok"]
            raise StoreRefused(path, f"damaged: SQLite's integrity check reports "
                                     f"'{first[0].strip()}'; the runtime refuses it rather than "
                                     "guess")
        rows = db.execute("SELECT id, kind, status, record, crc FROM tasks ORDER BY id").fetchall()
    except sqlite3.Error as e:
        raise _sqlite_refusal(path, e) from None
    except UnicodeDecodeError:
        raise StoreRefused(path, "damaged: a text value in it is not valid UTF-8; the runtime "
                                 "refuses it rather than guess") from None
    records = []
    for row in rows:
        try:
            records.append(decode_row(row))
        except InvalidValue as e:
            raise StoreRefused(path, f"damaged: {e}; the runtime refuses it rather than "
                                     "guess") from None
    return records


class _Lock:
    """The exclusive flock on `<db>.lock` that makes one writable store per database."""

    def __init__(self, path: Path, wait: bool, on_wait: Callable[[], None] | None):
        self.path = lock_path(path)
        while True:
            self.created = False
            try:
                self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
                self.created = True
            except FileExistsError:
                try:
                    self.fd = os.open(self.path, os.O_RDWR)
                except FileNotFoundError:
                    continue                     # removed by a refused opener: try again
                except OSError as e:
                    raise StoreRefused(path, f"cannot open its lock file {self.path.name} "
                                             f"({e.strerror})") from None
            except OSError as e:
                raise StoreRefused(path, f"cannot create its lock file {self.path.name} "
                                         f"({e.strerror})") from None
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    os.close(self.fd)
                    raise StoreRefused(path, f"cannot lock {self.path.name} ({e.strerror})") \
                        from None
                if not wait:
                    os.close(self.fd)
                    raise StoreBusy(path, f"busy: another durable runtime holds its lock "
                                          f"{self.path.name}") from None
                if on_wait:
                    on_wait()
                try:
                    fcntl.flock(self.fd, fcntl.LOCK_EX)     # a signal ends the wait
                except BaseException:
                    os.close(self.fd)
                    raise
            try:
                same = os.fstat(self.fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                return
            os.close(self.fd)                    # we locked a file a refused opener removed

    def release(self, remove: bool = False) -> None:
        """Unlock; `remove` deletes the lock file first (only when this open made it)."""
        if self.fd is None:
            return
        if remove:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
        os.close(self.fd)
        self.fd = None


def _fsync_path(path: Path, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _create(path: Path) -> None:
    """Make a new, empty task database at `path`, which appears complete or not at all.

    It is built under `<db>.new` (marked, schema, WAL mode), fsynced, then hard-linked into place:
    a link never replaces an existing file, and a crash before it leaves only `<db>.new`, which
    the next writable open (holding the lock) removes.
    """
    new = _new_path(path)
    for leftover in (new, wal_path(new), shm_path(new), new.with_name(new.name + "-journal")):
        leftover.unlink(missing_ok=True)
    db = sqlite3.connect(new, isolation_level=None)
    try:
        db.execute("BEGIN")
        db.execute(f"PRAGMA application_id={APPLICATION_ID}")
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        for statement in SCHEMA.split(";"):
            if statement.strip():
                db.execute(statement)
        db.execute("COMMIT")
        db.execute("PRAGMA journal_mode=WAL")
    finally:
        db.close()                               # the last connection: the WAL is folded in
    _fsync_path(new)
    try:
        os.link(new, path)
        new.unlink()
    except FileExistsError:
        new.unlink()
        raise StoreRefused(path, "another program created this file while the runtime was "
                                 "creating it") from None
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
            raise
        os.rename(new, path)         # no hard links here; we hold the lock and path was absent
    _fsync_path(path.parent, directory=True)


# --- the store -----------------------------------------------------------------------------------

class Transaction:
    """The records seen and changed inside one `DurableStore.transaction()`: all or nothing."""

    def __init__(self, store: "DurableStore"):
        self._store = store
        self._db = store.db

    def get(self, task_id: int) -> Record:
        """The task's record as of this transaction; KeyError if there is no such task."""
        return self._store._get(self._db, task_id)

    def all(self) -> list[Record]:
        """Every task's record as of this transaction, by id."""
        return [decode_row(row) for row in
                self._db.execute("SELECT id, kind, status, record, crc FROM tasks ORDER BY id")]

    def put(self, rec: Record) -> None:
        """Replace the task's whole record (checked first; InvalidValue writes nothing)."""
        kind, status, text, crc = encode_row(rec)
        if status == "running":
            # Noted before the UPDATE and never forgotten: a signal can land between this
            # UPDATE and the COMMIT, and the rollback cannot undo a change to a Python set. A
            # task noted here that is no longer running is left alone by `close()`, which reads
            # the status from the database; a task running and not noted would be left running.
            self._store._running_here.add(rec["id"])
        cur = self._db.execute("UPDATE tasks SET kind=?, status=?, record=?, crc=? WHERE id=?",
                               (kind, status, text, crc, rec["id"]))
        if cur.rowcount != 1:
            raise InvalidValue(f"task {rec['id']}: no such task in {self._store.path}")

    def create(self, kind: str, input: Any, checkpoint: dict) -> int:
        """Add a pending task at `checkpoint`; its id."""
        if not isinstance(kind, str) or not kind:
            raise InvalidValue(f"kind must be a non-empty string, got {kind!r}")
        to_json(input, "input")
        row = self._db.execute("SELECT coalesce(max(id), 0) + 1 FROM tasks").fetchone()
        rec = {"id": row[0], "kind": kind, "input": input,
               "state": {"status": "pending", "checkpoint": checkpoint}, "memos": {}}
        kind, status, text, crc = encode_row(rec)
        self._db.execute("INSERT INTO tasks (id, kind, status, record, crc) VALUES (?, ?, ?, ?, ?)",
                         (rec["id"], kind, status, text, crc))
        return rec["id"]


class DurableStore:
    """A SQLite file of task records (see the module's contract). A context manager.

    `DurableStore(path)` opens for writing: it creates the database if there is none, takes the
    one-writer lock (`wait=True`: wait for it; `on_wait` is called once before waiting), and checks
    every byte it will use. `read_only=True` opens without the lock and changes nothing.
    Raises StoreRefused (or StoreBusy) naming the file; nothing on disk is changed by a refusal.
    """

    def __init__(self, path: Path | str, *, read_only: bool = False, synchronous: str = "FULL",
                 wait: bool = False, on_wait: Callable[[], None] | None = None):
        self.path = Path(path)
        self.read_only = read_only
        if not isinstance(synchronous, str) or synchronous.upper() not in SYNCHRONOUS:
            raise InvalidValue(f"synchronous must be one of {', '.join(SYNCHRONOUS)}, "
                               f"got {synchronous!r}")
        self.synchronous = synchronous.upper()
        self.recovered: list[int] = []
        self._running_here: set[int] = set()      # tasks this process ever set running (close)
        self._lock: _Lock | None = None
        self._reader: sqlite3.Connection | None = None
        self.db: sqlite3.Connection | None = None
        _check_path(self.path, writable=not read_only)
        if self.path.exists():
            check_header(self.path)
        if read_only:
            self.db = self._checked_reader()
            return
        self._lock = _Lock(self.path, wait, on_wait)
        made_shm = False
        try:
            _check_path(self.path, writable=True)      # it may have changed while we waited
            if self.path.exists():
                check_header(self.path)
            else:
                _create(self.path)
            made_shm = not shm_path(self.path).exists() and wal_path(self.path).exists()
            # Kept open while the store is: closing the writer first never folds the log into
            # the database, so a refusal (or an abandon) leaves every byte as it found it.
            self._reader = self._checked_reader()
            self.db = sqlite3.connect(self.path, isolation_level=None, timeout=BUSY_TIMEOUT_S)
            try:
                self.db.execute(f"PRAGMA synchronous={self.synchronous}")
                if self.db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                    raise StoreRefused(self.path, "SQLite did not open it in WAL mode")
            except sqlite3.Error as e:
                raise _sqlite_refusal(self.path, e) from None
        except BaseException:
            self._disconnect(abandon=True)
            if made_shm:
                shm_path(self.path).unlink(missing_ok=True)    # an index SQLite rebuilds; ours
            self._lock.release(remove=self._lock.created)
            raise

    def _checked_reader(self) -> sqlite3.Connection:
        try:
            db = _reader(self.path)
        except sqlite3.Error as e:
            raise _sqlite_refusal(self.path, e) from None
        try:
            check_contents(db, self.path)
        except BaseException:
            db.close()
            raise
        return db

    # --- transactions -----------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """One commit: BEGIN IMMEDIATE ... COMMIT around the block, or nothing at all."""
        self._writable("commit")
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:      # another program's lock: busy, in a sentence
            raise _sqlite_refusal(self.path, e) from None
        try:
            yield Transaction(self)
        except BaseException:
            if self.db is not None and self.db.in_transaction:   # (close() may have rolled back)
                self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def _writable(self, what: str) -> None:
        if self.read_only:
            raise ReadOnlyError(f"{self.path} was opened read-only: cannot {what}")
        if self.db is None:
            raise ReadOnlyError(f"{self.path} is closed: cannot {what}")

    def recover(self) -> list[int]:
        """Running tasks were cut off mid-step: back to pending, checkpoint kept, one more restart.

        One commit; returns the ids it recovered (also kept in `recovered`). Waiting, sleeping and
        pending tasks are left as they are.
        """
        with self.transaction() as tx:
            ids = []
            for rec in tx.all():
                if rec["state"]["status"] == "running":
                    rec["state"]["status"] = "pending"
                    rec["restarts"] = rec.get("restarts", 0) + 1
                    tx.put(rec)
                    ids.append(rec["id"])
        self.recovered = ids
        return ids

    # --- records ----------------------------------------------------------------------------------

    @staticmethod
    def _get(db: sqlite3.Connection, task_id: int) -> Record:
        row = db.execute("SELECT id, kind, status, record, crc FROM tasks WHERE id=?",
                         (task_id,)).fetchone()
        if row is None:
            raise KeyError(f"no task {task_id}")
        return decode_row(row)

    def get(self, task_id: int) -> Record:
        """The task's record; KeyError if there is no such task."""
        return self._get(self.db, task_id)

    def all(self) -> list[Record]:
        """Every task's record, by id."""
        return [decode_row(row) for row in
                self.db.execute("SELECT id, kind, status, record, crc FROM tasks ORDER BY id")]

    def put(self, rec: Record) -> None:
        """Replace one task's whole record, in one transaction (checked first).

        (A single UPDATE outside `transaction()` is its own transaction in SQLite.)
        """
        self._writable("commit")
        try:
            Transaction(self).put(rec)
        except sqlite3.OperationalError as e:
            raise _sqlite_refusal(self.path, e) from None

    def create(self, kind: str, input: Any, checkpoint: dict) -> int:
        """Add a pending task at `checkpoint`, in one transaction; its id."""
        with self.transaction() as tx:
            return tx.create(kind, input, checkpoint)

    def close(self, *, abandon: bool = False) -> None:
        """A clean close: the tasks this process set running go back to pending, no restart
        counted (tasks a crashed process left running wait for `recover()`), and SQLite folds its
        write-ahead log into the database.

        `abandon=True` closes as a crash would leave things: no write, nothing folded in.
        """
        if self.db is None:
            return
        try:
            if not self.read_only and not abandon:
                # A second Ctrl-C while closing (the first one is why we close) waits until the
                # reset is committed: acted on inside it, it would roll the reset back and leave
                # the task running, which the next run counts as a crash.
                with deferred():
                    if self.db.in_transaction:      # a signal between BEGIN and its try block
                        self.db.execute("ROLLBACK")
                    if self._running_here:
                        with self.transaction() as tx:
                            for rec in tx.all():
                                if rec["state"]["status"] == "running" \
                                        and rec["id"] in self._running_here:
                                    rec["state"]["status"] = "pending"
                                    tx.put(rec)
        finally:
            self._disconnect(abandon)
            if self._lock is not None:
                self._lock.release()

    def _disconnect(self, abandon: bool) -> None:
        """Close both connections; the writer last (it folds the log in) unless abandoning."""
        first, last = (self.db, self._reader) if abandon else (self._reader, self.db)
        for db in (first, last):
            if db is not None:
                db.close()
        self.db = self._reader = None

    def __enter__(self) -> "DurableStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# --- reading without a store ---------------------------------------------------------------------

@contextmanager
def read_only_connection(path: Path | str) -> Iterator[sqlite3.Connection]:
    """A checked, read-only sqlite3 connection, for your own SQL (e.g. with pandas)."""
    store = DurableStore(path, read_only=True)
    try:
        yield store.db
    finally:
        store.close()


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


def read_tasks(path: Path | str) -> list[dict]:
    """The tasks table, read without changing a byte (a checked read-only connection)."""
    with read_only_connection(path) as db:
        cur = db.execute(TASKS_QUERY)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row)) for row in cur]
