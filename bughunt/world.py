"""The world the agent lives in: the site it explores, the model it asks, the tracker it files to.

None of this is the agent's checkpoint. The bill and the tracker are the outside world's records, and
they are what the experiment reads to see what a crash really cost:

- the **bill** (`bill.jsonl`) is the model provider's ledger: one line per call, appended at call
  time, never rewritten. "Redone model calls" are counted here, never from the worker's memory.
- the **tracker** (`tracker.db`) is a real SQLite database of bug reports. With the idempotency key
  on, it deduplicates by a UNIQUE key; with it off, every submit is a new row. It runs in WAL
  mode with `synchronous=NORMAL`: a committed report survives any kill of the agent (SQLite's
  docs: WAL with NORMAL is safe against application crashes), and a commit costs no fsync. What
  a power cut does to the tracker is the tracker's own business; lesson 8's power-loss simulation
  keeps every report it had acknowledged.

Both are written here and not through `bughunt.diskio`: the door is the agent's own disk, where
crash points fire and faults will be simulated; the provider's bill and the tracker are somebody
else's system and stay intact whatever happens to the agent's disk.
"""

from __future__ import annotations

import functools
import json
import os
import sqlite3
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

from .diskio import NOFOLLOW, not_a_file

BILL_FILE = "bill.jsonl"
TRACKER_FILE = "tracker.db"
TRACKER_TIMEOUT_S = 5.0         # how long a submit waits for another program's lock on the tracker
REPORT_COLUMNS = ("id", "page", "idempotency_key", "title", "pid", "filed_at")


def data_dir() -> Path:
    """The lab's `data/` folder: `$BUGHUNT_DATA`, else the checkout this package was installed from."""
    env = os.environ.get("BUGHUNT_DATA")
    return Path(env) if env else Path(__file__).resolve().parent.parent / "data"


class SiteError(ValueError):
    """The site file is missing or malformed; the message names it."""


@dataclass(frozen=True)
class Page:
    page: int
    path: str
    title: str
    bug: str | None


class Site:
    """The synthetic site: the 12 pages of `data/site.json`, repeated for longer runs."""

    def __init__(self, pages: int, template: list[Page], task_id: str):
        self.pages = pages
        self.task_id = task_id
        self._template = template

    @classmethod
    def load(cls, pages: int = 12, path: Path | None = None) -> "Site":
        path = path or data_dir() / "site.json"
        try:
            mtime = path.stat().st_mtime_ns
        except FileNotFoundError:
            raise SiteError(f"{path}: site file not found (set BUGHUNT_DATA)") from None
        except OSError as e:
            raise SiteError(f"{path}: cannot be read ({e.strerror})") from None
        template, task_id = _read_site(path, mtime)
        return cls(pages, list(template), task_id)

    def page(self, n: int) -> Page:
        t = self._template[(n - 1) % len(self._template)]
        return Page(n, t.path, t.title, t.bug)

    def visit(self, n: int) -> str | None:
        """Visit page `n`; return the bug found there, or None. Visiting is safe to repeat."""
        return self.page(n).bug

    @property
    def bug_pages(self) -> list[int]:
        return [n for n in range(1, self.pages + 1) if self.page(n).bug]


@functools.lru_cache(maxsize=8)
def _read_site(path: Path, mtime: int) -> tuple[tuple[Page, ...], str]:
    """The site file, parsed once per version of it (sweeps load it in every process)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        template = tuple(Page(p["page"], p["path"], p["title"], p["bug"]) for p in raw["pages"])
        task_id = raw["task_id"]
    except (ValueError, KeyError, TypeError, OSError) as e:
        raise SiteError(f"{path}: not a valid site file ({e})") from None
    if not template or [p.page for p in template] != list(range(1, len(template) + 1)):
        raise SiteError(f"{path}: pages must be numbered 1, 2, 3, ... in order")
    return template, task_id


def report_key(task_id: str, page: int) -> str:
    """The deterministic idempotency key: the same page of the same task always gets the same key."""
    return f"{task_id}:p{page:02d}"


class MockModel:
    """A deterministic stand-in for the model: same page, same reply, same token count.

    Each call is billed at call time by appending one line to the bill, in one `write()` on an
    O_APPEND descriptor, so a SIGKILL right after the call still leaves it billed, as a real
    provider would. `latency_s`: how long the answer then takes to arrive (a real model takes
    seconds; the lab's default is none). A kill during that wait is a call in flight: billed,
    its answer lost.
    """

    def __init__(self, run_dir: Path, site: Site, latency_s: float = 0.0):
        self.site = site
        self.calls = 0
        self.latency_s = latency_s
        self._fd = os.open(Path(run_dir) / BILL_FILE,
                           os.O_WRONLY | os.O_APPEND | os.O_CREAT | NOFOLLOW, 0o644)

    def ask(self, page: int) -> tuple[str, int]:
        """Ask "what next?" on `page`. Returns (reply, tokens); the call is on the bill."""
        p = self.site.page(page)
        prompt = f"{self.site.task_id} page {page} {p.path}: what next?"
        reply = f"Open {p.path} ({p.title}) and look for errors."
        tokens = 40 + zlib.crc32(prompt.encode()) % 80
        line = json.dumps({"page": page, "tokens": tokens, "pid": os.getpid(),
                           "t": time.time()}) + "\n"
        os.write(self._fd, line.encode())
        self.calls += 1
        if self.latency_s:
            time.sleep(self.latency_s)
        return reply, tokens

    def close(self) -> None:
        os.close(self._fd)


def missing_bill(run_dir: Path) -> str | None:
    """What is wrong with a run directory whose bill is gone (None: it is not): a tracker there
    that holds reports, each filed after its page's model call was billed into this run's
    bill, says calls were billed; the bill was deleted or replaced, and the redone calls would
    be counted on nothing. Read-only, after `check_tracker` (the worker's recovery)."""
    tracker = Path(run_dir) / TRACKER_FILE
    if os.path.lexists(Path(run_dir) / BILL_FILE) or not tracker.exists():
        return None
    try:
        db = open_tracker_for_reading(tracker)
        try:
            (reports,) = db.execute("SELECT count(*) FROM reports").fetchone()
        finally:
            db.close()
    except sqlite3.DatabaseError as e:
        raise _unusable(tracker, e) from None
    if not reports:
        return None
    return (f"{Path(run_dir) / BILL_FILE}: missing, though the tracker holds {reports} report"
            f"{'' if reports == 1 else 's'}, each filed after its page's model call was billed "
            "there: a deleted bill is not the lab's bill")


def read_bill(run_dir: Path) -> list[dict]:
    """Every model call ever billed for this run, in order."""
    path = Path(run_dir) / BILL_FILE
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


#: The first 16 bytes of every SQLite database file (sqlite.org/fileformat.html, 1.3).
SQLITE_HEADER = b"SQLite format 3\0"


class TrackerError(ValueError):
    """A tracker.db that is not the lab's tracker (or is locked: `busy`); the message names it."""

    def __init__(self, message: str, busy: bool = False):
        super().__init__(message)
        self.busy = busy


def check_tracker(run_dir: Path) -> None:
    """Read-only: refuse a tracker.db that is not a SQLite database, or whose `reports` table is
    not the lab's (another program's database must never be written into). A missing or empty
    database is fine: the worker creates the table."""
    path = Path(run_dir) / TRACKER_FILE
    for p in (path, *side_files(path)):      # SQLite would follow a link out of the run dir
        if p.is_symlink():
            raise TrackerError(f"{p}: is a symbolic link, which the tracker never follows")
    for p in (path, *side_files(path)):      # a FIFO would block SQLite's open or its reads
        what = not_a_file(p)
        if what is not None:
            raise TrackerError(f"{p}: is not a file ({what})")
    if not path.exists():
        return
    wal = side_files(path)[0]
    if path.stat().st_size <= 1 and wal.exists() and wal.stat().st_size > 0:
        # SQLite takes an empty database file (one byte counts as empty: os_unix.c,
        # unixFileSize) for a new one, and deletes the log beside it, even when read-only.
        raise TrackerError(f"{path}: the database file is empty but its write-ahead log "
                           f"{wal.name} is not: SQLite would throw the log away, and every "
                           "report in it")
    size = path.stat().st_size
    if size > 1:
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_HEADER))
        if head != SQLITE_HEADER:
            # SQLite reads page 1 from a write-ahead log beside it and ignores such a file,
            # until a writer checkpoints the log over it: a junk tracker.db would be rebuilt.
            raise TrackerError(f"{path}: not a usable tracker database (it does not begin with "
                               f"SQLite's header, {SQLITE_HEADER[:-1].decode()!r}: {head[:16]!r})")
    try:
        db = open_tracker_for_reading(path)
        try:
            tables = {name for (name,) in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            columns = tuple(r[1] for r in db.execute("PRAGMA table_info(reports)"))
        finally:
            db.close()
    except sqlite3.DatabaseError as e:
        raise _unusable(path, e) from None
    if tables and "reports" not in tables:
        raise TrackerError(f"{path}: not a BugHunt tracker (it holds the tables "
                           f"{', '.join(sorted(tables)[:3])}, not reports)")
    if "reports" in tables and columns != REPORT_COLUMNS:
        raise TrackerError(f"{path}: its reports table has the columns {', '.join(columns)}, "
                           f"not the tracker's ({', '.join(REPORT_COLUMNS)})")


def _unusable(path: Path, e: sqlite3.DatabaseError) -> TrackerError:
    """A tracker that cannot be read: locked by another program (busy), or not usable."""
    if isinstance(e, sqlite3.OperationalError) and "locked" in str(e):
        return TrackerError(f"{path}: the tracker is locked by another program (waited "
                            f"{TRACKER_TIMEOUT_S:g} s); resume when it is free", busy=True)
    return TrackerError(f"{path}: not a usable tracker database ({e})")


class Tracker:
    """The bug tracker: a real SQLite database the worker files reports into."""

    SCHEMA = """
        CREATE TABLE IF NOT EXISTS reports (
            id INTEGER PRIMARY KEY,
            page INTEGER NOT NULL,
            idempotency_key TEXT UNIQUE,   -- NULL when keys are off: SQLite allows many NULLs
            title TEXT NOT NULL,
            pid INTEGER NOT NULL,
            filed_at REAL NOT NULL
        )"""

    def __init__(self, run_dir: Path):
        self._db = sqlite3.connect(Path(run_dir) / TRACKER_FILE, isolation_level=None,
                                   timeout=TRACKER_TIMEOUT_S)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(self.SCHEMA)

    def submit(self, page: int, title: str, key: str | None) -> bool:
        """File a report; return True when a new row was stored.

        With a key the tracker deduplicates on the UNIQUE key: `ON CONFLICT(idempotency_key) DO
        NOTHING` (an upsert, sqlite.org/lang_upsert.html) skips a second report with the same
        key, which is what makes a redo effectively once. Not `INSERT OR IGNORE`: that would also
        drop, silently, a row that breaks a NOT NULL or CHECK constraint
        (sqlite.org/lang_conflict.html); here such a row raises.
        """
        tail = " ON CONFLICT(idempotency_key) DO NOTHING" if key is not None else ""
        cur = self._db.execute(
            "INSERT INTO reports (page, idempotency_key, title, pid, filed_at) VALUES (?,?,?,?,?)"
            + tail, (page, key, title, os.getpid(), time.time()))
        return cur.rowcount == 1

    def missing(self, pages: list[int]) -> list[int]:
        """Of `pages`, those with no report here (see `missing_reports`)."""
        return _missing(self._db, pages)

    def close(self) -> None:
        self._db.close()


def missing_reports(run_dir: Path, pages: list[int]) -> list[int]:
    """Of `pages`, those with no report in the tracker, read without changing it. Every page a
    run's checkpoint counts among its findings had its report acknowledged by the tracker before
    that checkpoint was written, so a page listed here is a report the tracker has lost."""
    path = Path(run_dir) / TRACKER_FILE
    if not pages:
        return []
    if not path.exists():
        return list(pages)
    try:
        db = open_tracker_for_reading(path)
        try:
            return _missing(db, pages)
        finally:
            db.close()
    except sqlite3.DatabaseError as e:
        raise _unusable(path, e) from None


def _missing(db: sqlite3.Connection, pages: list[int]) -> list[int]:
    """One query: the pages the reports table holds, against the pages that should be there."""
    if not pages:
        return []
    try:
        held = {page for (page,) in db.execute("SELECT DISTINCT page FROM reports")}
    except sqlite3.OperationalError as e:
        if "no such table" not in str(e):
            raise
        held = set()                         # a database with no reports table at all
    return [p for p in pages if p not in held]


def side_files(path: Path) -> list[Path]:
    """The files SQLite keeps beside a database: its write-ahead log, index, rollback journal."""
    return [Path(f"{path}{s}") for s in ("-wal", "-shm", "-journal")]


def open_tracker_for_reading(path: Path) -> sqlite3.Connection:
    """A connection that reads `path` and writes nothing beside it.

    A database that no connection holds open is read as it is (`immutable=1`: no lock, no side
    files). While a writer has it open, or after a kill left its write-ahead log (`-wal`), it is
    read through the log with a read-only connection (`mode=ro`), which never checkpoints the log
    into the database nor removes it when it closes (only the `-shm` index, which holds no data,
    may be rebuilt). A hot rollback journal (`-journal`) must be rolled back before the file can
    be read: then it is opened read-write, and SQLite recovers it first, as any SQLite program
    would (the tracker included).
    """
    wal, _shm, journal = side_files(path)
    if journal.exists():
        return sqlite3.connect(path, timeout=TRACKER_TIMEOUT_S)
    if wal.exists():
        return sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=TRACKER_TIMEOUT_S)
    return sqlite3.connect(f"file:{path}?immutable=1", uri=True, timeout=TRACKER_TIMEOUT_S)


def read_reports(run_dir: Path) -> list[dict]:
    """The tracker's reports, oldest first, read without changing the database (but for SQLite's
    own rollback of a transaction a kill cut short)."""
    path = Path(run_dir) / TRACKER_FILE
    if not path.exists():
        return []
    db = open_tracker_for_reading(path)
    try:
        db.row_factory = sqlite3.Row
        return [dict(r) for r in db.execute("SELECT * FROM reports ORDER BY id")]
    finally:
        db.close()
