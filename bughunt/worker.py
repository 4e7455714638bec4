"""The BugHunt worker: the agent process the lab kills and resumes.

    python -m bughunt run --dir RUN_DIR [options]      (or: python -m bughunt.worker --dir ...)

Per page: ask the model, visit the page, on a bug page (record an intent, then) file a report, then
commit the page's checkpoint. Resuming is running again on the same directory: the worker recovers
its state from the checkpoint store and carries on from the first page not done.

Exit codes: 0 done; 2 refused (bad flag, damaged checkpoint, configuration mismatch, a file that
is not the lab's); 69 the model over HTTP could not be reached or its call failed (`--model-url`);
74 the disk refused a write or an fsync (full, read-only, I/O error); 75 busy
(another worker holds the run, or another program locks the tracker); 130 interrupted (Ctrl-C),
143 terminated (SIGTERM): both stop between two operations, so the run can be resumed. Death by a
planned crash point is a real SIGKILL: no exit code at all; a shell shows it as 137 (128 + 9),
Python's subprocess as -9.
"""

from __future__ import annotations

import argparse
import errno
import functools
import fcntl
import json
import os
import resource
import sqlite3
import sys
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from .config import (CONFIG_FILE, ConfigError, ConfigFileError, RunConfig, _latency, _positive,
                     add_config_arguments, config_from_args, dumps, is_store_file, read_config)
from .crashpoints import CALL_LABELS, CrashPlan, NoSuchPoint, find, scheme
from .diskio import NOFOLLOW, Door, Files, FsyncError, not_a_file
from .instruments import journal
from .instruments.faults import Faults, FaultyFiles
from .instruments.journal import JournalingFiles
from .events import apply_event
from .interrupts import Interrupted, interruptible
from .stores import (LOG_FILE, SNAPSHOT_FILE, Recovered, Repairs, StoreDamage, StoreSpecError,
                     make_store, store_class)
from .stores.contract import CheckpointStore
from .world import (BILL_FILE, TRACKER_FILE, TRACKER_TIMEOUT_S, MockModel, Site, SiteError, Tracker,
                    TrackerError, check_tracker, missing_bill, missing_reports, report_key,
                    side_files)

EXIT_OK = 0
EXIT_REFUSED = 2
EXIT_MODEL = 69           # EX_UNAVAILABLE: the model over HTTP did not answer
EXIT_IO = 74              # EX_IOERR: the disk refused a write or an fsync
EXIT_BUSY = 75            # EX_TEMPFAIL: try again when the other worker is gone
#: errnos that mean the disk (or the quota, or the file size limit) is full
DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
LOCK_FILE = "run.lock"
JOURNAL_FILE = "io.jsonl"
#: fsyncs a new run makes whatever its policy: config.json, then its folder (`prepare_run_dir`)
CONFIG_FSYNCS = 2


@dataclass(frozen=True)
class LabOptions:
    """Instruments and world settings, never part of a run's configuration.

    io_trace: journal every disk operation to io.jsonl (for the power-loss simulation);
    faults: make the k-th write or fsync fail (lesson 8's full disk and failed fsync);
    model_latency_ms: how long each model answer takes after the call is billed (a real model
    takes seconds; the lab's runs take none, random kills use a few milliseconds);
    model_url, model_name: ask an OpenAI-compatible server through the `openai` SDK instead of the
    in-process model (lesson 11): the call then has crash points inside it, and the server's bill
    is the witness.
    """

    io_trace: bool = False
    faults: Faults | None = None
    model_latency_ms: float = 0.0
    model_url: str | None = None
    model_name: str | None = None


class Refused(Exception):
    """The worker will not run; the message says why, naming the file or flag."""

    def __init__(self, message: str, code: int = EXIT_REFUSED):
        super().__init__(message)
        self.code = code


def acquire_run_lock(run_dir: Path) -> int:
    """One writer per run directory: an exclusive flock on `run.lock`, held until the process ends.

    A flock belongs to the open file, and the kernel drops it when the last descriptor of that
    file is closed: when its holder dies, even by SIGKILL, unless a process it forked still holds
    the descriptor (flock(2); lesson 8 shows both). A paused holder still holds it. A second
    worker started while the lock is held is refused at once.
    """
    try:
        fd = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | NOFOLLOW | os.O_NONBLOCK,
                     0o644)
    except IsADirectoryError:        # made a directory since `refuse_special_files` looked
        raise Refused(f"{run_dir / LOCK_FILE}: is a directory, not a file; the lab opens its "
                      "run directory's files only as regular files: remove it, or use a new "
                      "--dir; nothing was changed") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise Refused(f"{run_dir}: run is busy: another worker holds {LOCK_FILE}",
                          EXIT_BUSY) from None
        raise
    _HELD_LOCKS.append(fd)
    return fd


_HELD_LOCKS: list[int] = []


def peak_rss_kb() -> int:
    """This process's peak resident memory, in KiB.

    On Linux, /proc's VmHWM: getrusage's ru_maxrss survives exec, so a worker started by a big
    parent would report the parent's peak. Elsewhere (macOS: bytes) ru_maxrss.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss // 1024 if sys.platform == "darwin" else rss


def prepare_run_dir(run_dir: Path, config: RunConfig, door: Door) -> None:
    """Claim a new run directory for `config`, or check that an existing one belongs to it."""
    path = run_dir / CONFIG_FILE
    if path.exists():
        try:
            stored = read_config(run_dir)
        except ConfigFileError as e:
            raise Refused(str(e)) from None
        diff = stored.differences(config)
        if diff:
            raise Refused(f"{path}: this run belongs to another configuration "
                          f"(stored vs given: {'; '.join(diff)}); resume it with the same flags "
                          "or use a new --dir")
        return
    check_run_dir(run_dir)             # again, now that we hold the lock
    # Always made durable, whatever the fsync policy: a run must never forget its own design.
    door.write_atomic(path, dumps(config), kind="config", fsync=True)


def check_run_dir(run_dir: Path) -> None:
    """Refuse, before writing anything, a --dir that is a file, a directory that is neither
    new, nor empty, nor a BugHunt run (no config.json, but other files), or one that holds a
    symbolic link."""
    if run_dir.exists() and not run_dir.is_dir():
        raise Refused(f"--dir {run_dir}: is a file, not a directory")
    if not run_dir.exists():
        return
    refuse_links(run_dir)
    refuse_special_files(run_dir)
    if (run_dir / CONFIG_FILE).exists():
        return
    # A kill while the config was being written leaves its temp file: ours, replaced later.
    ours = {LOCK_FILE, CONFIG_FILE + ".tmp", JOURNAL_FILE}
    try:
        strangers = sorted(p.name for p in run_dir.iterdir() if p.name not in ours)
    except OSError as e:
        raise Refused(f"--dir {run_dir}: cannot be read ({e.strerror})") from None
    if strangers:
        raise Refused(f"{run_dir}: not a BugHunt run directory (no {CONFIG_FILE}, but it holds "
                      f"{', '.join(strangers[:3])}); use an empty or new --dir")


def refuse_links(run_dir: Path) -> None:
    """A run directory's files are never followed out of it: a symbolic link in place of the
    log, the snapshot, the tracker, the bill or the lock would make the worker read or write a
    file elsewhere (a dangling one would create it). Checked before anything is opened; the door
    opens with O_NOFOLLOW as well, and SQLite, which cannot be told not to follow, is only ever
    pointed at a tracker checked here."""
    try:
        links = sorted(p for p in run_dir.iterdir() if p.is_symlink())
    except OSError as e:
        raise Refused(f"--dir {run_dir}: cannot be read ({e.strerror})") from None
    if links:
        raise Refused(f"{links[0]}: is a symbolic link (to {os.readlink(links[0])}); the lab "
                      "never follows a run directory's files out of it: put the file itself "
                      "there, or use a new --dir; nothing was changed")


def lab_file_names() -> list[str]:
    """The files of a run directory the lab itself opens by name."""
    return [CONFIG_FILE, CONFIG_FILE + ".tmp", LOCK_FILE, JOURNAL_FILE, TRACE_FILE, BILL_FILE,
            LOG_FILE, SNAPSHOT_FILE, SNAPSHOT_FILE + ".tmp", TRACKER_FILE,
            *(p.name for p in side_files(Path(TRACKER_FILE)))]


def refuse_special_files(run_dir: Path) -> None:
    """None of the lab's files may be a FIFO, a device, a socket or a directory: opening one
    would block the worker for ever (a FIFO waits for a writer) or fail halfway through a run.
    The same check as the tracker's (`diskio.not_a_file`), before anything is opened."""
    for name in lab_file_names():
        what = not_a_file(run_dir / name)
        if what is not None:
            raise Refused(f"{run_dir / name}: is {what}, not a file; the lab opens its run "
                          "directory's files only as regular files: remove it, or use a new "
                          "--dir; nothing was changed")


TRACE_FILE = "trace.jsonl"
READY_BANNER = "bughunt: ready at"


def run(run_dir: Path, config: RunConfig, crash_at: int | str | None = None,
        pause_at: int | str | None = None, trace: bool = False, ready: bool = False,
        lab: LabOptions = LabOptions()) -> dict:
    """Run (or resume) the task in `run_dir` to the end; return the final report.

    A failed disk write or fsync stops the run with Refused(code EXIT_IO): a failed fsync is never
    retried, because after it the kernel may already have dropped the data it could not write.
    """
    try:
        return _run(run_dir, config, crash_at, pause_at, trace, ready, lab)
    except sqlite3.OperationalError as e:
        raise tracker_failure(run_dir / TRACKER_FILE, e) from None
    except sqlite3.DatabaseError as e:
        raise Refused(f"{run_dir / TRACKER_FILE}: not a usable tracker database ({e}); nothing "
                      "more was filed") from None
    except OSError as e:
        if e.errno is None:
            raise
        path = e.filename if isinstance(e.filename, str) else str(run_dir)
        if e.errno == errno.ELOOP:             # a link made while the run was going
            raise Refused(f"{path}: is a symbolic link, which the lab never follows out of the "
                          "run directory; stopped. Every report the tracker acknowledged is "
                          "safe") from None
        if isinstance(e, FsyncError):
            raise Refused(f"{path}: fsync failed ({e.strerror}); stopping without retrying: a "
                          "retry can report success for data the kernel already dropped. Every "
                          "report the tracker acknowledged is safe; resume to continue",
                          EXIT_IO) from None
        cause = ("the disk is full; resume when it has room" if e.errno in DISK_FULL
                 else "resume when that is fixed")
        raise Refused(f"{path}: cannot write ({e.strerror}); stopped. Every report the "
                      f"tracker acknowledged is safe; {cause}", EXIT_IO) from None
    except Exception as e:
        if lab.model_url is None:
            raise
        from .llm import call_failure      # only a call over HTTP fails this way
        why = call_failure(e)
        if why is None:
            raise
        raise Refused(f"--model-url {lab.model_url}: {why}; stopped. Every report the tracker "
                      "acknowledged is safe; resume when the model answers", EXIT_MODEL) from None


#: SQLite's primary result codes for a disk that refused a write (sqlite.org/rescode.html).
SQLITE_READONLY, SQLITE_IOERR, SQLITE_FULL = 8, 10, 13
SQLITE_BUSY, SQLITE_LOCKED = 5, 6


def tracker_failure(path: Path, e: sqlite3.OperationalError) -> Refused:
    """The refusal for a tracker that failed mid-run, with the exit code of the README's table:
    locked by another program is busy (75); a full disk, an I/O error or a read-only file is the
    disk refusing a write (74), as for the agent's own files; anything else is a tracker that
    cannot be used (2)."""
    code = getattr(e, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    safe = "stopped. Every report the tracker acknowledged is safe"
    if primary in (SQLITE_BUSY, SQLITE_LOCKED) or (primary is None and "locked" in str(e)):
        return Refused(f"{path}: the tracker is locked by another program (waited "
                       f"{TRACKER_TIMEOUT_S:g} s); {safe}; resume when it is free", EXIT_BUSY)
    if primary in (SQLITE_FULL, SQLITE_IOERR, SQLITE_READONLY):
        cause = ("the disk is full; resume when it has room" if primary == SQLITE_FULL
                 else "resume when that is fixed")
        return Refused(f"{path}: cannot write ({e}); {safe}; {cause}", EXIT_IO)
    return Refused(f"{path}: the tracker failed ({e}); {safe}")


def lost_reports(run_dir: Path, state: dict, tracker: Tracker | None = None) -> str | None:
    """Every report the run's state counts among its findings was acknowledged by the tracker
    before that page's checkpoint was written, so each must still be there: one query. Returns
    what is wrong, naming the pages and the file, or None. What it cannot see: a report whose
    row is there but altered, a duplicate, or a tracker that lost a report this run's state does
    not count (an aborted page, a page not yet done)."""
    pages = state["findings"]
    missing = tracker.missing(pages) if tracker is not None else missing_reports(run_dir, pages)
    if not missing:
        return None
    which = (f"the report of page {missing[0]} is" if len(missing) == 1 else
             f"the reports of pages {', '.join(map(str, missing))} are")
    return (f"{run_dir / TRACKER_FILE}: {which} not in the tracker, though this run's checkpoint "
            "says the tracker acknowledged it: the tracker lost it (damaged, replaced or rolled "
            "back)")


def _run(run_dir: Path, config: RunConfig, crash_at: int | str | None,
         pause_at: int | str | None, trace: bool, ready: bool, lab: LabOptions) -> dict:
    """One worker process, as the lesson tells it: claim the run directory, recover, run the page
    loop, report. What can be refused before anything touches the disk is refused first."""
    site, plan = plan_crashes(config, crash_at, pause_at, lab)
    check_run_dir(run_dir)                 # read-only: a refusal here leaves nothing behind
    if lab.faults and lab.faults.fail_fsync and config.fsync == "never" and (
            run_dir / CONFIG_FILE).exists():
        raise Refused(f"--fail-fsync {lab.faults.fail_fsync}: with --fsync never a resume makes "
                      "no fsync at all, so the fault can never fire; use --fsync always")
    ready_t = time.time()
    if ready:
        # For kills from outside at random moments: the killer's clock starts here, on the same
        # (wall) clock as the trace, so a delay means the same moment of the run in every try.
        sys.stderr.write(f"{READY_BANNER} {ready_t:.6f}\n")
        sys.stderr.flush()
    door = claim_run_dir(run_dir, config, lab)
    recovery = recover(run_dir, config, door, plan, local_bill=lab.model_url is None)
    agent = Agent(config, site, recovery.store, door, world_model(run_dir, site, lab, plan),
                  Tracker(run_dir), plan, recovery.state)
    if trace:
        plan.trace_to(run_dir / TRACE_FILE)
        plan.mark(agent.state["next_page"], "ready", t=ready_t)
        plan.mark(agent.state["next_page"], "start")
    page_loop(agent)
    plan.mark(config.pages, "end")
    lost = lost_reports(run_dir, agent.state, agent.tracker)
    agent.close()
    if lost:
        raise Refused(f"{lost}; this run gives no result")
    return {**final_report(agent, recovery), "store_files": store_files(run_dir, config)}


def store_files(run_dir: Path, config: RunConfig) -> list[str] | None:
    """What of a learner's store reached the disk: the names in the run directory that are not
    the lab's own files (None for the lab's stores, whose files the door counts)."""
    if not is_store_file(config.store):
        return None
    from .llm import CALL_JOURNAL_FILE

    world = set(lab_file_names()) - {LOG_FILE, SNAPSHOT_FILE, SNAPSHOT_FILE + ".tmp"}
    return sorted(p.name for p in run_dir.iterdir() if p.name not in world | {CALL_JOURNAL_FILE})


def plan_crashes(config: RunConfig, crash_at: int | str | None, pause_at: int | str | None,
                 lab: LabOptions) -> tuple[Site, CrashPlan]:
    """The site, and where this process dies or pauses (`--crash-at`, `--pause-at`: any point of
    the scheme, recovery's included). A point this configuration lacks, a damaged site file or a
    learner's store that does not load is refused here, before anything touches the disk."""
    try:
        site = Site.load(config.pages)
        in_call = lab.model_url is not None          # the call has insides only over HTTP
        points = scheme(config.pages, site.bug_pages, config.intent, in_call,
                        in_recovery=True) if (crash_at is not None or pause_at is not None) else []
        where = dict(pages=config.pages, bug_pages=site.bug_pages, intent=config.intent,
                     call_in_flight=in_call)
        crash = find(points, crash_at, what="--crash-at", **where) if crash_at is not None else None
        pause = find(points, pause_at, what="--pause-at", **where) if pause_at is not None else None
        for flag, target in (("--crash-at", crash), ("--pause-at", pause)):
            if target is not None and target.label == "after_abort" and config.pending != "abort":
                raise NoSuchPoint(f"{flag} after_abort: no such crash point here: a pending "
                                  f"intent is redone, never aborted (--pending {config.pending})")
        store_class(config.store)          # a learner's store file: loads, has the methods
    except (SiteError, NoSuchPoint, StoreSpecError) as e:
        raise Refused(str(e)) from None
    return site, CrashPlan(points, crash, pause)


def claim_run_dir(run_dir: Path, config: RunConfig, lab: LabOptions) -> Door:
    """Make the run directory this process's own: created if new, locked, its configuration
    written (a new run) or checked (a resume). Returns the door every later write goes through."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise Refused(f"--dir {run_dir}: cannot be created ({e.strerror})") from None
    acquire_run_lock(run_dir)              # held until this process ends, however it ends
    door = Door(config.fsync, files=lab_files(run_dir, lab))
    prepare_run_dir(run_dir, config, door)
    door.latencies_ns.clear()              # report checkpoint writes only
    return door


@dataclass
class Recovery:
    """What recovery found and did before the first page: the store it opened, what `load`
    recovered (the state, replayed events, torn lines skipped), the repairs, how long it took."""

    store: CheckpointStore
    found: Recovered
    repairs: Repairs
    ns: int                                # the store's load + repairs (not the tracker's checks)

    @property
    def state(self) -> dict:
        return self.found.state


def recover(run_dir: Path, config: RunConfig, door: Door, plan: CrashPlan,
            local_bill: bool = True) -> Recovery:
    """Recovery is the normal start-up path, the same for a new run and a resume: read the
    checkpoint (read-only, so a refusal leaves every byte as it was), check the tracker and (with
    the in-process model, `local_bill`) the bill, then let the store repair its files for
    appending. A kill here (`after_repair`) is lesson 8's crash during recovery: the next resume
    simply recovers again."""
    store = make_store(run_dir, config, door)
    t0 = time.perf_counter_ns()
    try:
        found = store.load()
    except StoreDamage as e:
        raise Refused(f"{e}; nothing was changed") from None
    load_ns = time.perf_counter_ns() - t0
    refuse_points_passed(plan, found.state["next_page"])
    foreign = bill_problem(run_dir) if local_bill else None      # before SQLite reads anything
    if foreign:
        raise Refused(f"{foreign}; nothing was changed")
    unchanged = nothing_changed(run_dir)
    try:
        check_tracker(run_dir)             # read-only, before the first write of this resume
        lost = lost_reports(run_dir, found.state)
        gone = missing_bill(run_dir) if local_bill else None
    except TrackerError as e:
        raise Refused(f"{e}; {unchanged}", EXIT_BUSY if e.busy else EXIT_REFUSED) from None
    if lost or gone:
        raise Refused(f"{lost or gone}; {unchanged}")
    for note in found.notes:
        print(f"bughunt: {note}", file=sys.stderr)
    t1 = time.perf_counter_ns()
    repairs = store.open_for_append()
    recovery = Recovery(store, found, repairs, load_ns + time.perf_counter_ns() - t1)
    plan.reach(found.state["next_page"], "after_repair")
    return recovery


def nothing_changed(run_dir: Path) -> str:
    """What a refusal after reading the tracker may say it left alone. Reading a tracker that has
    a write-ahead log goes through SQLite's `-shm` index, which SQLite may rebuild (it holds no
    data, only where the log's pages are): that is said, rather than "nothing" untrue."""
    if side_files(run_dir / TRACKER_FILE)[0].exists():
        return (f"nothing was changed but SQLite's index {TRACKER_FILE}-shm, which it rebuilds "
                "from the log when it reads the tracker (it holds no report)")
    return "nothing was changed"


def bill_problem(run_dir: Path) -> str | None:
    """The bill is the world's record of every model call this run paid for: each line one
    call, a JSON object naming its page, written whole (one `write()` on O_APPEND), so a kill
    never leaves half a line. A line that is not such a call (a garbage line appended, someone's
    notes) makes it not the lab's bill, and the redone calls counted on it wrong: refused, as a
    foreign tracker is. None: every line is a billed call.

    A bill with fewer calls than the checkpoint's pages is not refused: the lab's own power-cut
    states (lesson 8, `powerloss.materialize`) hold an empty bill."""
    path = run_dir / BILL_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None                      # a deleted one: `missing_bill`, once the tracker is read
    lines = data.split(b"\n")
    if lines[-1]:
        return (f"{path}: its last line is not a whole billed call (the lab writes each whole, "
                "newline included): not the lab's bill")
    for n, line in enumerate(lines[:-1], 1):
        try:
            call = json.loads(line)
        except ValueError:
            call = None
        if not (isinstance(call, dict) and isinstance(call.get("page"), int)
                and not isinstance(call.get("page"), bool)):
            return (f"{path}:{n}: not a billed call (each line of the lab's bill is a JSON "
                    "object naming the page of one model call): not the lab's bill")
    return None


def refuse_points_passed(plan: CrashPlan, next_page: int) -> None:
    """A page's crash point this run already passed can never be reached: refuse it, unchanged."""
    for flag, target in (("--crash-at", plan.crash_at), ("--pause-at", plan.pause_at)):
        if target is not None and not target.in_recovery and target.page < next_page:
            raise Refused(f"{flag} {target.name}: this run already passed that point (it resumes "
                          f"at page {next_page}); nothing was changed")


def page_loop(agent: Agent) -> None:
    """The page loop, from the recovered state's `next_page`: resuming is running it again. First,
    at most once (pending intent `abort`, as Codex does), a pending intent found at start is
    given up; then every page not done, each committed before the next."""
    if agent.state["pending"] and agent.config.pending == "abort":
        agent.abort_pending()
    for page in range(agent.state["next_page"], agent.config.pages + 1):
        agent.run_page(page)


def final_report(agent: Agent, recovery: Recovery) -> dict:
    """The report of a run that reached its end (`--json` prints it): the state, what this
    process paid for and filed, what its recovery found and repaired, and its checkpoint writes
    (disk writes count the config's too: lesson 8's full disk)."""
    state, door, found = agent.state, agent.door, recovery.found
    return {
        "status": "done", "config": agent.config.to_json(), "state": state,
        "findings": state["findings"], "aborted": state["aborted"], "tokens": state["tokens"],
        "model_calls": agent.model.calls, "reports_filed": agent.reports_filed,
        "replayed_events": found.replayed_events, "torn_lines_skipped": found.torn_lines_skipped,
        "tails_repaired": recovery.repairs.tails_repaired,
        "temp_files_removed": recovery.repairs.temp_files_removed,
        "snapshot_used": found.snapshot_used, "snapshot_fallback": found.snapshot_fallback,
        "notes": found.notes, "pending_at_start": found.state["pending"],
        "checkpoint_writes": {"count": sum(len(v) for v in door.latencies_ns.values()),
                              "latencies_ns": dict(door.latencies_ns)},
        "commits": agent.commits,          # the store's commit() calls, however it wrote
        "disk_writes": door.writes, "fsyncs": door.fsyncs, "recovery_ns": recovery.ns,
        "peak_rss_kb": peak_rss_kb(),
    }


def world_model(run_dir: Path, site: Site, lab: LabOptions, plan: CrashPlan):
    """The model the agent asks: the in-process MockModel (every lesson's default), or, with
    `--model-url`, a server reached through the real `openai` SDK (lesson 11), streamed.

    Over HTTP the call is in flight between "sent" and "last chunk": each moment is journaled
    first (what this process holds), then its crash point fires. The run's calls carry its name
    (`run_project`) to the server's bill. The SDK is imported here, not at the top: the other
    lessons' workers never pay for it.
    """
    if lab.model_url is None:
        return MockModel(run_dir, site, latency_s=lab.model_latency_ms / 1000)
    from .llm import DEFAULT_MODEL, CallJournal, OpenAIModel, run_project

    journal = CallJournal(run_dir)

    def on_chunk(received) -> None:
        journal.write(received)
        label = "call_" + received.name.replace("#", "")     # sent, chunk3, last_chunk
        if label in CALL_LABELS:
            plan.reach(received.page, label)

    return OpenAIModel(site, base_url=lab.model_url, model=lab.model_name or DEFAULT_MODEL,
                       project=run_project(run_dir), on_chunk=on_chunk)


def lab_files(run_dir: Path, lab: LabOptions) -> Files:
    """The door's system calls, with the lab's instruments plugged in underneath when asked:
    the journal records what really reached each file, so it sits below an injected fault."""
    files = Files()
    if lab.io_trace:
        files = JournalingFiles(journal.to_file(run_dir / JOURNAL_FILE), files)
    if lab.faults:
        files = FaultyFiles(lab.faults, files)
    return files


class Agent:
    """The page loop: per page ask the model, visit the page, on a bug page record an intent and
    file the report, then commit the page. One method per rule of the lesson; every change of
    state is an event applied by `apply_event` and made durable by the store (`commit`)."""

    def __init__(self, config: RunConfig, site: Site, store, door: Door, model: MockModel,
                 tracker: Tracker, plan: CrashPlan, state: dict):
        self.config, self.site, self.store, self.door = config, site, store, door
        self.model, self.tracker, self.plan, self.state = model, tracker, plan, state
        self.per_operation = config.granularity == "op"
        self.reports_filed = 0
        self.commits = 0

    def commit(self, event: dict, mid=lambda: None) -> None:
        """A checkpoint: the next state, from the event, made durable before we go on."""
        event = {**event, "seq": self.state["seq"] + 1}
        new_state = apply_event(self.state, event)
        self.store.commit(new_state, event, mid=mid)
        self.state = new_state
        self.commits += 1

    def run_page(self, page: int) -> None:
        done = self.state["in_flight"] if (self.state["in_flight"] or {}).get("page") == page \
            else {}                            # per-operation checkpoints already on disk
        tokens = done["tokens"] if "tokens" in done else self.ask_model(page)
        finding = done["finding"] if "finding" in done else self.visit_page(page)
        if finding and not done.get("submitted"):
            key = report_key(self.config.task_id, page) if self.config.idempotency_key else None
            if self.config.intent:
                self.record_intent(page, key)
            self.submit_report(page, key)
        self.commit_page(page, tokens, finding)

    def ask_model(self, page: int) -> int:
        """Ask the model what next. The call is on the bill from now on, its answer only in
        memory: a kill before the next checkpoint pays for it again (the call in flight)."""
        _reply, tokens = self.model.ask(page)
        self.plan.reach(page, "after_model_call")
        if self.per_operation:
            self.commit({"t": "answered", "page": page, "tokens": tokens})
        return tokens

    def visit_page(self, page: int) -> bool:
        """Visit the page: safe to repeat, so a redo costs time, not correctness."""
        finding = self.site.visit(page) is not None
        self.plan.reach(page, "after_visit")
        if self.per_operation:
            self.commit({"t": "visited", "page": page, "finding": finding})
        return finding

    def record_intent(self, page: int, key: str | None) -> None:
        """The intent is durable before the report is filed: a resume that finds it without its
        page_done knows it may be inside the danger window. If it cannot be written, the error
        stops the run here and the report is never filed."""
        self.commit({"t": "intent", "page": page, "key": key})
        self.plan.reach(page, "after_intent")

    def submit_report(self, page: int, key: str | None) -> None:
        """File the report: the side effect. From here until `commit_page` returns is the danger
        window: the report is in the tracker, the checkpoint does not know it. With a key the
        tracker files it once however often it is sent (`ON CONFLICT(idempotency_key) DO
        NOTHING`)."""
        self.reports_filed += self.tracker.submit(page, self.site.page(page).bug, key)
        self.door.mark(what="submitted", page=page, key=key)
        self.plan.reach(page, "after_submit")
        if self.per_operation:
            self.commit({"t": "submitted", "page": page})

    def commit_page(self, page: int, tokens: int, finding: bool) -> None:
        """The page's checkpoint: once durable, no resume redoes this page."""
        self.commit({"t": "page_done", "page": page, "tokens": tokens, "finding": finding},
                    mid=lambda: self.plan.reach(page, "mid_commit"))
        self.door.mark(what="committed", page=page)
        self.plan.reach(page, "after_commit")

    def abort_pending(self) -> None:
        """At most once, as Codex does: a pending intent means we cannot know whether its report
        was filed, so the page is given up (an `aborted` event) rather than risk filing twice."""
        self.commit({"t": "aborted", "page": self.state["pending"]["page"]})
        self.plan.reach(self.state["next_page"], "after_abort")

    def close(self) -> None:
        """The run's end: the store, the model's connection and the tracker, closed."""
        self.store.close()
        self.model.close()
        self.tracker.close()


@functools.lru_cache(maxsize=4)
def worker_parser(prog: str = "python -m bughunt run") -> argparse.ArgumentParser:
    from .config import OneSentenceParser, given_path   # a refusal: one sentence, no usage

    parser = OneSentenceParser(
        prog=prog, description="Run or resume the BugHunt agent in RUN_DIR (POSIX only).")
    parser.add_argument("--dir", required=True, type=given_path, metavar="RUN_DIR",
                        help="the run directory; running again on it resumes")
    add_config_arguments(parser)
    parser.add_argument("--crash-at", metavar="POINT",
                        help="die by SIGKILL at this crash point: a name like p3.after_submit, or "
                             "its number (see `python -m bughunt points`); inside recovery "
                             "itself: after_repair, after_abort")
    parser.add_argument("--pause-at", metavar="POINT",
                        help="stop at this crash point and wait until stdin closes (or a kill)")
    parser.add_argument("--trace", action="store_true",
                        help=f"write every crash point reached, with its time, to {TRACE_FILE}")
    parser.add_argument("--ready", action="store_true",
                        help="print 'bughunt: ready at T' on stderr when the run starts (T: wall "
                             "time), for a killer timing from outside")
    parser.add_argument("--json", action="store_true", help="print the final report as JSON")
    parser.add_argument("--latency-ms", type=_latency, default=0.0, metavar="MS",
                        help="the world: each model answer takes MS milliseconds after its call "
                             "is billed (default 0; never part of the run's configuration)")
    parser.add_argument("--model-url", type=_model_url, metavar="URL",
                        help="the world: ask an OpenAI-compatible server at URL (e.g. "
                             "http://127.0.0.1:8000/v1) through the openai SDK, streamed, instead "
                             "of the in-process model; its calls get crash points inside them "
                             "(lesson 11; never part of the run's configuration)")
    parser.add_argument("--model-name", metavar="NAME",
                        help="the model to ask at --model-url (default: bughunt-mock)")
    lab = parser.add_argument_group("lesson 8 instruments (never part of the run's configuration)")
    lab.add_argument("--io-trace", action="store_true",
                     help=f"journal every disk operation to {JOURNAL_FILE} (power-loss simulation)")
    lab.add_argument("--fail-write", type=_write_fault, metavar="K[:ENOSPC|EFBIG|EIO]",
                     help="make the K-th write fail after writing half its bytes (disk full)")
    lab.add_argument("--fail-fsync", type=_positive, metavar="K",
                     help="make the K-th fsync fail with EIO")
    return parser


def _model_url(value: str) -> str:
    url = urllib.parse.urlsplit(value)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise argparse.ArgumentTypeError(f"expected an http:// or https:// URL such as "
                                         f"http://127.0.0.1:8000/v1, got {value!r}")
    return value


def _write_fault(value: str) -> tuple[int, int]:
    k, _, name = value.partition(":")
    code = getattr(errno, name or "ENOSPC", None)
    if name and (code is None or name not in ("ENOSPC", "EFBIG", "EIO")):
        raise argparse.ArgumentTypeError(f"expected ENOSPC, EFBIG or EIO after the colon, "
                                         f"got {name!r}")
    return _positive(k), code


def print_report(report: dict) -> None:
    s = report["state"]
    print(f"done: pages 1-{s['next_page'] - 1}, findings on pages {report['findings'] or 'none'}"
          + (f", aborted {report['aborted']}" if report["aborted"] else ""))
    print(f"model calls by this process: {report['model_calls']}; reports filed: "
          f"{report['reports_filed']}; replayed events: {report['replayed_events']}")
    extras = {k: report[k] for k in ("torn_lines_skipped", "tails_repaired", "temp_files_removed")
              if report[k]}
    if report["snapshot_fallback"]:
        extras["snapshot_fallback"] = report["snapshot_fallback"]
    if extras:
        print("recovery: " + ", ".join(f"{k} {v}" for k, v in extras.items()))
    w = report["checkpoint_writes"]
    if report.get("store_files") == [] and report.get("commits"):
        # A store that wrote nothing kept its state in memory: what reached the disk is said.
        print(f"checkpoint writes: none reached the disk ({report['commits']} commits, and no file "
              "of the store's in the run directory: a state kept in memory is lost at a kill)")
    elif not w["count"] and report.get("commits") and is_store_file(report["config"]["store"]):
        # A learner's store that writes through `door.files` (the system calls) or its own calls
        # bypasses the door's timed write methods: which of the two, the lab cannot tell here.
        # Its commits are counted, not called "0 writes", and its files named.
        files = report.get("store_files") or []
        print(f"checkpoint writes: {report['commits']} commits, none through the door's timed "
              "write methods (writes through door.files or the store's own calls are not timed)"
              + (f"; the store's files: {', '.join(files[:5])}"
                 + (f" and {len(files) - 5} more" if len(files) > 5 else "") if files else ""))
    else:
        print(f"checkpoint writes: {w['count']}")


def main(argv: list[str] | None = None, prog: str = "python -m bughunt run") -> int:
    parser = worker_parser(prog)
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
    except ConfigError as e:
        parser.error(e.as_flag())
    if args.model_name is not None and args.model_url is None:
        parser.error(f"--model-name {args.model_name}: names a model at --model-url URL, which "
                     "is not given")
    if args.fail_fsync and config.fsync == "never" and args.fail_fsync > CONFIG_FSYNCS:
        parser.error(f"--fail-fsync {args.fail_fsync}: with --fsync never the only fsyncs are a "
                     f"new run's {CONFIG_FILE} and its folder ({CONFIG_FSYNCS}), so fsync "
                     f"{args.fail_fsync} never happens; use --fsync always")
    if args.latency_ms and args.model_url is not None:
        parser.error(f"--latency-ms {args.latency_ms:g}: the model at --model-url takes its own "
                     "time (slow it with the server's faults: delay, ttfb)")
    report_out = sys.stdout
    if args.json and is_store_file(config.store):
        # A learner's store may print: what it prints goes to stderr, so that stdout carries
        # nothing but the report the lab reads.
        sys.stdout.flush()
        report_out = os.fdopen(os.dup(1), "w")
        os.dup2(2, 1)
    try:
        write_fault = args.fail_write or (None, errno.ENOSPC)
        faults = (Faults(fail_write=write_fault[0], write_errno=write_fault[1],
                         fail_fsync=args.fail_fsync)
                  if args.fail_write or args.fail_fsync else None)
        lab = LabOptions(io_trace=args.io_trace, model_latency_ms=args.latency_ms,
                         faults=faults, model_url=args.model_url, model_name=args.model_name)
        with interruptible():
            report = run(args.dir, config, crash_at=args.crash_at, pause_at=args.pause_at,
                         trace=args.trace, ready=args.ready, lab=lab)
    except Refused as e:
        print(f"bughunt: {e}", file=sys.stderr)
        return e.code
    except Interrupted as e:
        print(f"bughunt: {e.what}: the run stopped between two operations; run again on "
              f"--dir {args.dir} to resume", file=sys.stderr)
        return e.code
    if args.json:
        json.dump(report, report_out)
        report_out.write("\n")
        report_out.flush()
    else:
        print_report(report)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main(prog="python -m bughunt.worker"))


def warm_up() -> None:
    """Run the worker once in a temp dir, in this process: a fork server calls it before forking,
    so its children inherit a parser already built, a site already read, SQLite and JSON already
    initialized (measured: a forked worker then costs less than half the CPU)."""
    import shutil
    import tempfile

    worker_parser("python -m bughunt.worker")
    tmp = tempfile.mkdtemp(prefix="bughunt-warm-")
    try:
        run(Path(tmp) / "run", RunConfig(pages=4))
    except Refused:
        pass                       # a broken site file: the real runs will say so
    finally:
        while _HELD_LOCKS:         # its lock must not be inherited by every child
            os.close(_HELD_LOCKS.pop())
        shutil.rmtree(tmp, ignore_errors=True)
