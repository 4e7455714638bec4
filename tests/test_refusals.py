"""Refuse, don't guess: every bad input gets one sentence naming the file, flag or field, a
non-zero exit, and every byte on disk stays as it was."""

from __future__ import annotations

import errno
import hashlib
import os
import resource
import shutil
import subprocess
import sys
import uuid
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bughunt.config import ConfigError, RunConfig
from bughunt.diskio import Door, read_bytes
from bughunt.experiment import PausedWorker, forget
from bughunt.stores import SNAPSHOT_FILE, StoreDamage, rebuild_from_disk
from bughunt.worker import EXIT_BUSY, EXIT_IO, EXIT_REFUSED, Refused
from bughunt.worker import run as run_in_process
from bughunt.world import TRACKER_FILE, read_reports

from conftest import ROOT, bughunt, report, run

SNAP = RunConfig(store="snapshot", intent=False, idempotency_key=False)
SNAP_TORN = SNAP.replace(write_mode="torn")


def files(run_dir: Path) -> dict[str, bytes]:
    return {p.name: (p.read_bytes() if p.is_file() else b"<dir>") for p in run_dir.iterdir()}


def no_traceback(proc) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr


@pytest.fixture(scope="module")
def crashed_snapshot_run(tmp_path_factory) -> Path:
    """A snapshot-store run killed at p7.after_submit: six pages done, page 7's report filed."""
    run_dir = tmp_path_factory.mktemp("snap") / "run"
    assert run(run_dir, SNAP, "--crash-at", "p7.after_submit").returncode == -9
    return run_dir


# --- the snapshot store refuses a damaged snapshot (atomic writes cannot tear it) -------------

def test_a_damaged_atomic_snapshot_is_refused_with_every_byte_unchanged(crashed_snapshot_run,
                                                                       tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(crashed_snapshot_run, run_dir)
    path = run_dir / SNAPSHOT_FILE
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x04
    path.write_bytes(bytes(data))
    before = files(run_dir)
    proc = run(run_dir, SNAP)
    assert proc.returncode == EXIT_REFUSED and str(path) in proc.stderr
    assert "damaged snapshot" in proc.stderr and "nothing was changed" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    no_traceback(proc)
    assert files(run_dir) == before          # not a model call paid, not a report filed again


@pytest.mark.slow
def test_every_truncation_and_bit_flip_of_an_atomic_snapshot_is_refused_or_harmless(
        crashed_snapshot_run):
    """Exhaustive, in-process: every prefix of the file and every single-bit flip."""
    path = crashed_snapshot_run / SNAPSHOT_FILE
    good = path.read_bytes()
    state = rebuild_from_disk(crashed_snapshot_run, SNAP).state
    variants = [good[:n] for n in range(len(good))]
    variants += [good[:i] + bytes([good[i] ^ (1 << b)]) + good[i + 1:]
                 for i in range(len(good)) for b in range(8)]
    variants += [b"", b"\0" * len(good), b"garbage\n", good + b"{}\n"]
    refused = 0
    try:
        for data in variants:
            path.write_bytes(data)
            try:
                got = rebuild_from_disk(crashed_snapshot_run, SNAP).state
            except StoreDamage as e:
                assert str(path) in str(e)
                refused += 1
            else:
                assert got == state, f"silently different state from {data!r}"
    finally:
        path.write_bytes(good)
    # Only dropping the final newline leaves the same record: everything else is refused.
    assert refused == len(variants) - 1


def test_a_directory_in_place_of_the_snapshot_is_refused(crashed_snapshot_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(crashed_snapshot_run, run_dir)
    (run_dir / SNAPSHOT_FILE).unlink()
    (run_dir / SNAPSHOT_FILE).mkdir()
    before = files(run_dir)
    proc = run(run_dir, SNAP)
    assert proc.returncode == EXIT_REFUSED
    assert f"{run_dir / SNAPSHOT_FILE}: is a directory" in proc.stderr
    no_traceback(proc)
    assert files(run_dir) == before


def test_a_torn_in_place_snapshot_starts_over_and_the_report_says_why(tmp_path):
    run_dir = tmp_path / "run"
    assert run(run_dir, SNAP_TORN, "--crash-at", "p5.mid_commit").returncode == -9
    proc = run(run_dir, SNAP_TORN, "--json")
    out = report(proc)
    assert out["snapshot_fallback"] == "fresh" and out["model_calls"] == 12
    assert "torn snapshot" in out["notes"][0] and "starts over from page 1" in out["notes"][0]
    assert "starts over from page 1" in proc.stderr


# --- the run directory and its files ----------------------------------------------------------

def test_a_dir_that_is_a_file_is_refused(tmp_path):
    target = tmp_path / "notadir"
    target.write_text("mine")
    proc = bughunt("run", "--dir", str(target))
    assert proc.returncode == EXIT_REFUSED and "is a file, not a directory" in proc.stderr
    assert f"--dir {target}" in proc.stderr and target.read_text() == "mine"
    no_traceback(proc)


def test_a_foreign_directory_is_refused_without_leaving_a_lock_file(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    proc = bughunt("run", "--dir", str(tmp_path))
    assert proc.returncode == EXIT_REFUSED and "not a BugHunt run directory" in proc.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_a_checkpoint_log_replaced_by_a_directory_is_refused_naming_it(tmp_path):
    run_dir = tmp_path / "run"
    assert run(run_dir, RunConfig(), "--crash-at", "p4.after_visit").returncode == -9
    (run_dir / "events.jsonl").unlink()
    (run_dir / "events.jsonl").mkdir()
    before = files(run_dir)
    proc = run(run_dir, RunConfig())
    assert proc.returncode == EXIT_REFUSED
    assert f"{run_dir / 'events.jsonl'}: is a directory" in proc.stderr
    assert files(run_dir) == before


@pytest.mark.parametrize("fault, words", [
    ("ENOSPC", "the disk is full"), ("EFBIG", "the disk is full"),
    ("EIO", "resume when that is fixed"),
])
def test_only_a_full_disk_is_called_full_and_the_message_names_the_file(tmp_path, fault, words):
    run_dir = tmp_path / "run"
    proc = run(run_dir, RunConfig(), "--fail-write", f"6:{fault}")
    assert proc.returncode == EXIT_IO and words in proc.stderr
    assert str(run_dir / "events.jsonl") in proc.stderr
    assert "the disk is full" not in proc.stderr or fault != "EIO"
    no_traceback(proc)


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write into a read-only directory")
def test_a_directory_without_write_permission_is_refused_naming_the_file(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    run_dir.chmod(0o500)
    try:
        proc = bughunt("run", "--dir", str(run_dir))
    finally:
        run_dir.chmod(0o700)
    assert proc.returncode in (EXIT_REFUSED, EXIT_IO) and str(run_dir) in proc.stderr
    assert "Permission denied" in proc.stderr
    no_traceback(proc)


# --- the tracker: another program's database, damage, a lock ---------------------------------

def test_a_foreign_sqlite_database_as_tracker_is_refused_untouched(tmp_path):
    run_dir = tmp_path / "run"
    assert run(run_dir, RunConfig(), "--crash-at", "p2.after_visit").returncode == -9
    (run_dir / TRACKER_FILE).unlink()
    db = sqlite3.connect(run_dir / TRACKER_FILE)
    db.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    db.commit()
    db.close()
    before = files(run_dir)
    proc = run(run_dir, RunConfig())
    assert proc.returncode == EXIT_REFUSED and "not a BugHunt tracker" in proc.stderr
    assert str(run_dir / TRACKER_FILE) in proc.stderr and "invoices" in proc.stderr
    assert files(run_dir) == before


@pytest.mark.slow
def test_a_locked_tracker_makes_the_worker_busy_not_broken(tmp_path):
    """Another program holds the tracker's write lock: the first report waits for it (5 s), then
    the worker stops, busy, as after a kill before that submit; a later resume finishes it."""
    run_dir = tmp_path / "run"
    assert run(run_dir, RunConfig(), "--crash-at", "p2.after_visit").returncode == -9
    holder = sqlite3.connect(run_dir / TRACKER_FILE, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        proc = run(run_dir, RunConfig())
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert proc.returncode == EXIT_BUSY and "locked by another program" in proc.stderr
    assert str(run_dir / TRACKER_FILE) in proc.stderr
    no_traceback(proc)
    assert read_reports(run_dir) == []
    out = report(run(run_dir, RunConfig(), "--json"))
    assert out["findings"] == [3, 7, 10]
    assert sorted(r["page"] for r in read_reports(run_dir)) == [3, 7, 10]


@pytest.fixture(scope="module")
def crashed_log_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("log") / "run"
    assert run(run_dir, RunConfig(), "--crash-at", "p8.after_visit").returncode == -9
    return run_dir


def damage(data: bytes, how: str, at: int, garbage: bytes) -> bytes:
    page = 4096
    if how == "truncate-at-page":
        return data[:(at % (len(data) // page + 1)) * page]
    if how == "truncate":
        return data[:at % (len(data) + 1)]
    if how == "flip":
        i = at % len(data)
        return data[:i] + bytes([data[i] ^ 0x10]) + data[i + 1:]
    if how == "garbage":
        return garbage
    return b""


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(how=st.sampled_from(["truncate-at-page", "truncate", "flip", "garbage", "empty"]),
       at=st.integers(0, 1 << 20), garbage=st.binary(min_size=1, max_size=200))
def test_a_damaged_tracker_is_refused_untouched_or_the_run_goes_on(crashed_log_run, tmp_path,
                                                                   how, at, garbage):
    run_dir = tmp_path / uuid.uuid4().hex
    shutil.copytree(crashed_log_run, run_dir)
    tracker = run_dir / TRACKER_FILE
    tracker.write_bytes(damage(tracker.read_bytes(), how, at, garbage))
    before = files(run_dir)
    try:
        run_in_process(run_dir, RunConfig())
    except Refused as e:
        assert e.code == EXIT_REFUSED and str(tracker) in str(e)
        assert files(run_dir) == before
    # else: SQLite could read it (the damage missed everything it looks at), and the run finished


def test_a_kill_inside_a_tracker_transaction_leaves_a_log_the_resume_recovers(tmp_path):
    """The tracker is a SQLite database in WAL mode: a writer killed mid-transaction leaves
    tracker.db-wal with frames of a transaction that never committed. SQLite must recover it
    before it can be read; the resume (and the experiment's witness) let it, and the uncommitted
    rows never appear: the tracker is not refused as damaged."""
    run_dir = tmp_path / "run"
    assert run(run_dir, RunConfig(), "--crash-at", "p4.after_visit").returncode == -9
    writer = f"""
import os, signal, sqlite3
db = sqlite3.connect({str(run_dir / TRACKER_FILE)!r}, isolation_level=None)
db.execute("PRAGMA cache_size=1")
db.execute("BEGIN IMMEDIATE")
for i in range(2000):
    db.execute("INSERT INTO reports (page, idempotency_key, title, pid, filed_at) "
               "VALUES (99, ?, ?, 0, 0)", (f"x{{i}}", "t" * 400))
os.kill(os.getpid(), signal.SIGKILL)
"""
    subprocess.run([sys.executable, "-c", writer])
    assert (run_dir / (TRACKER_FILE + "-wal")).stat().st_size > 0
    out = report(run(run_dir, RunConfig(), "--json"))
    assert out["findings"] == [3, 7, 10]
    assert sorted(r["page"] for r in read_reports(run_dir)) == [3, 7, 10]


# --- flags and fields -------------------------------------------------------------------------

@pytest.mark.parametrize("args, words", [
    (["run", "--dir", "x", "--pages", "-1"], "expected 1 or more"),
    (["run", "--dir", "x", "--pages", "1000000000"], "--pages: must be a whole number from 1"),
    (["points", "--pages", "1000000000"], "--pages: must be a whole number from 1"),
    (["sweep", "--workers", "0"], "--workers: expected 1 or more"),
    (["sweep", "--workers", "-1"], "--workers: expected 1 or more"),
    (["sweep", "--points", ""], "--points: expected crash-point names"),
    (["sweep", "--points", "p3.after_intent", "--intent", "off"], "intents are off"),
    (["kill-random", "--workers", "2"], "unrecognized arguments: --workers"),
    (["kill-random", "--latency-ms", "inf"], "expected 0 to 60000 milliseconds"),
    (["run", "--dir", "x", "--store", "snapshot", "--snapshot-every", "2"],
     "--snapshot-every: applies only when --store is log"),
])
def test_a_bad_flag_is_one_sentence_naming_it(tmp_path, args, words):
    proc = bughunt(*args, cwd=tmp_path, timeout=30)
    assert proc.returncode == 2 and words in proc.stderr, proc.stderr
    no_traceback(proc)
    assert list(tmp_path.iterdir()) == []


def test_a_work_dir_that_is_a_file_is_refused(tmp_path):
    target = tmp_path / "f"
    target.write_text("mine")
    proc = bughunt("sweep", "--points", "1", "--work-dir", str(target), timeout=30)
    assert proc.returncode == 2 and str(target) in proc.stderr and "is a file" in proc.stderr
    no_traceback(proc)
    assert target.read_text() == "mine"


@pytest.mark.parametrize("fields, named", [
    ({"pages": True}, "pages"), ({"pages": 0}, "pages"), ({"snapshot_every": 1.5}, "snapshot_every"),
    ({"intent": 1}, "intent"), ({"store": "sqlite"}, "store"),
    ({"store": "snapshot", "snapshot_every": 2}, "snapshot_every"),
])
def test_a_bad_field_from_python_is_named_in_python_words(fields, named):
    with pytest.raises(ConfigError) as e:
        RunConfig(**fields)
    assert e.value.field == named and str(e.value).startswith(f"{named}:")
    assert "--" not in str(e.value)


# --- second round: links, a tracker that lost a report, faults that cannot fire ---------------

def digest(folder: Path) -> dict[str, str]:
    """Every entry of `folder` without following links: a link is its target, a file the hash of
    its bytes (SQLite's -shm index excepted: it holds no data and every reader may rebuild it)."""
    out = {}
    for p in sorted(folder.iterdir()):
        if p.name.endswith("-shm"):
            continue
        if p.is_symlink():
            out[p.name] = f"-> {os.readlink(p)}"
        elif p.is_file():
            out[p.name] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[p.name] = "dir"
    return out


def one_line(proc) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


@pytest.fixture(scope="module")
def crashed_at_p7(tmp_path_factory) -> Path:
    """A log-store run killed at p7.after_submit: six pages done, pages 3 and 7 filed."""
    run_dir = tmp_path_factory.mktemp("p7") / "run"
    assert run(run_dir, RunConfig(), "--crash-at", "p7.after_submit").returncode == -9
    return run_dir


@pytest.mark.parametrize("name, config", [
    ("events.jsonl", RunConfig()), ("snapshot.json", SNAP), ("tracker.db", RunConfig()),
    ("bill.jsonl", RunConfig()), ("run.lock", RunConfig()), ("config.json", RunConfig()),
])
@pytest.mark.parametrize("target", ["dangling", "existing"])
def test_a_symlinked_file_of_the_run_dir_is_refused_and_never_followed(tmp_path, name, config,
                                                                       target):
    """A run directory's files are never followed out of it: a link to a file elsewhere (or to
    nowhere) is refused with exit 2 naming it; the file elsewhere is not created or changed."""
    run_dir = tmp_path / "run"
    assert run(run_dir, config, "--crash-at", "p4.after_visit").returncode == -9
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    outside = elsewhere / ("x" + Path(name).suffix)
    if (run_dir / name).exists():
        if target == "existing":
            shutil.copy(run_dir / name, outside)
        (run_dir / name).unlink()
    elif target == "existing":
        outside.write_bytes(b"")
    (run_dir / name).symlink_to(outside)
    before, outside_before = digest(run_dir), digest(elsewhere)
    proc = run(run_dir, config)
    assert proc.returncode == EXIT_REFUSED
    said = one_line(proc)
    assert str(run_dir / name) in said and "symbolic link" in said
    assert digest(run_dir) == before and digest(elsewhere) == outside_before


def test_the_door_never_opens_a_file_through_a_link(tmp_path):
    """Below the check of the run directory, the door itself refuses a link (O_NOFOLLOW), for a
    link made while a run goes on: to write, to create, or to read recovery's files."""
    outside = tmp_path / "outside.jsonl"
    outside.write_bytes(b"keep\n")
    (tmp_path / "events.jsonl").symlink_to(outside)
    (tmp_path / "snapshot.json").symlink_to(tmp_path / "nowhere.json")
    door = Door("always")
    for open_it in (lambda: door.open_append(tmp_path / "events.jsonl"),
                    lambda: door.open_append(tmp_path / "snapshot.json"),
                    lambda: door.write_in_place(tmp_path / "events.jsonl", b"x"),
                    lambda: read_bytes(tmp_path / "events.jsonl")):
        with pytest.raises(OSError) as e:
            open_it()
        assert e.value.errno == errno.ELOOP
    assert outside.read_bytes() == b"keep\n" and not (tmp_path / "nowhere.json").exists()


def test_a_tracker_that_lost_an_acknowledged_report_is_refused_naming_the_page(crashed_at_p7,
                                                                              tmp_path):
    """The issue's recipe: the tracker's write-ahead log removed and the database cut to 5000
    bytes. SQLite reads what is left (an empty database), but page 3's report, which the
    checkpoint says was filed, is gone: the resume refuses before it writes anything."""
    run_dir = tmp_path / "run"
    shutil.copytree(crashed_at_p7, run_dir)
    for side in ("-wal", "-shm"):
        (run_dir / (TRACKER_FILE + side)).unlink()
    tracker = run_dir / TRACKER_FILE
    tracker.write_bytes(tracker.read_bytes()[:5000].ljust(5000, b"\0"))
    before = digest(run_dir)
    proc = run(run_dir, RunConfig())
    assert proc.returncode == EXIT_REFUSED and proc.stdout == ""
    said = one_line(proc)
    assert str(tracker) in said and "page 3" in said and "nothing was changed" in said
    assert digest(run_dir) == before


def test_checking_a_tracker_that_still_has_its_write_ahead_log_changes_no_byte(crashed_at_p7,
                                                                              tmp_path):
    """Page 3's report deleted by another program that is then killed, so the tracker keeps its
    write-ahead log: the check reads through the log without checkpointing it into the database
    or removing it at close (a read-write connection would do both), so the refusal's "nothing
    was changed" holds for tracker.db and tracker.db-wal too."""
    run_dir = tmp_path / "run"
    shutil.copytree(crashed_at_p7, run_dir)
    deleter = f"""
import os, signal, sqlite3
db = sqlite3.connect({str(run_dir / TRACKER_FILE)!r}, isolation_level=None)
db.execute("DELETE FROM reports WHERE page = 3")
os.kill(os.getpid(), signal.SIGKILL)
"""
    assert subprocess.run([sys.executable, "-c", deleter]).returncode == -9
    before = digest(run_dir)
    assert TRACKER_FILE + "-wal" in before
    proc = run(run_dir, RunConfig())
    assert proc.returncode == EXIT_REFUSED and "page 3" in one_line(proc)
    assert digest(run_dir) == before


def test_a_report_deleted_from_the_tracker_during_the_run_refuses_its_verdict(tmp_path):
    """Another program deletes page 3's report while the worker is paused at page 8: the run
    ends without a verdict (exit 2, naming the page and the file), and a resume refuses too."""
    run_dir = tmp_path / "run"
    paused = PausedWorker(run_dir, RunConfig(), pause_at="p8.after_visit")
    db = sqlite3.connect(run_dir / TRACKER_FILE, isolation_level=None)
    db.execute("DELETE FROM reports WHERE page = 3")
    db.close()
    out, err = paused.proc.communicate(input="", timeout=60)
    forget(paused.proc)
    assert paused.proc.returncode == EXIT_REFUSED and out == "", err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert str(run_dir / TRACKER_FILE) in lines[0] and "page 3" in lines[0]
    assert sorted(r["page"] for r in read_reports(run_dir)) == [7, 10]
    before = digest(run_dir)
    again = run(run_dir, RunConfig())
    assert again.returncode == EXIT_REFUSED and "page 3" in one_line(again)
    assert digest(run_dir) == before


@pytest.mark.parametrize("flags", [["--fail-fsync", "5", "--fsync", "never"],
                                   ["--fail-fsync", "3", "--fsync", "never"]])
def test_an_fsync_fault_that_can_never_fire_is_refused(tmp_path, flags):
    """With --fsync never the only fsyncs are a new run's config.json and its folder."""
    proc = bughunt("run", "--dir", str(tmp_path / "run"), *flags, cwd=tmp_path)
    assert proc.returncode == EXIT_REFUSED and "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]          # the refusal's one sentence
    assert f"--fail-fsync {flags[1]}" in last and "--fsync never" in last
    assert list(tmp_path.iterdir()) == []


def test_an_fsync_fault_on_a_resume_with_fsync_never_is_refused_untouched(crashed_at_p7, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(crashed_at_p7, run_dir)
    before = digest(run_dir)
    proc = run(run_dir, RunConfig(), "--fail-fsync", "1")
    assert proc.returncode == EXIT_REFUSED and "--fail-fsync 1" in one_line(proc)
    assert digest(run_dir) == before


def test_the_config_fsyncs_of_a_new_run_can_still_fail_with_fsync_never(tmp_path):
    proc = bughunt("run", "--dir", str(tmp_path / "run"), "--fail-fsync", "2", "--fsync", "never")
    assert proc.returncode == EXIT_IO and "fsync failed" in one_line(proc)


def _file_size_limit(limit: int):
    def apply():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def test_a_full_disk_under_the_tracker_exits_74_like_the_event_log(tmp_path):
    """The file size limit (RLIMIT_FSIZE: EFBIG, which the lab counts as a full disk) set just
    below the size the tracker's write-ahead log has once the last report is filed: that report
    cannot be written. The worker stops with 74, as for the event log, and a resume finishes."""
    probe = tmp_path / "probe"
    assert run(probe, RunConfig(), "--crash-at", "p10.after_submit").returncode == -9
    wal = (probe / (TRACKER_FILE + "-wal")).stat().st_size
    others = max(p.stat().st_size for p in probe.iterdir() if p.name != TRACKER_FILE + "-wal")
    assert others < wal - 4096             # only the tracker's log comes near the limit
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "bughunt", "run", "--dir", str(run_dir)],
                          capture_output=True, text=True, timeout=120,
                          preexec_fn=_file_size_limit(wal - 1))
    assert proc.returncode == EXIT_IO, proc.stderr
    said = one_line(proc)
    assert str(run_dir / TRACKER_FILE) in said and "cannot write" in said
    assert sorted(r["page"] for r in read_reports(run_dir)) == [3, 7]    # acknowledged, kept
    assert report(run(run_dir, RunConfig(), "--json"))["findings"] == [3, 7, 10]


def _sqlite_error(message: str, code: int) -> sqlite3.OperationalError:
    e = sqlite3.OperationalError(message)
    e.sqlite_errorcode = code          # as SQLite sets it (Python 3.11+)
    return e


@pytest.mark.parametrize("message, code, exit_code, words", [
    ("database or disk is full", 13, EXIT_IO, "the disk is full"),               # SQLITE_FULL
    ("disk I/O error", 10 | (3 << 8), EXIT_IO, "resume when that is fixed"),   # IOERR_WRITE
    ("attempt to write a readonly database", 8, EXIT_IO, "resume when that is fixed"),
    ("database is locked", 5, EXIT_BUSY, "locked by another program"),
    ("no such table: reports", 1, EXIT_REFUSED, "the tracker failed"),
])
def test_a_tracker_failure_gets_the_exit_code_of_the_readmes_table(tmp_path, message, code,
                                                                   exit_code, words):
    from bughunt.worker import tracker_failure
    refused = tracker_failure(tmp_path / TRACKER_FILE, _sqlite_error(message, code))
    assert refused.code == exit_code and words in str(refused)
    assert str(refused).startswith(str(tmp_path / TRACKER_FILE))


def test_a_planned_kill_is_137_in_a_shell_and_minus_9_in_python_as_the_readme_says(tmp_path):
    shell = subprocess.run(["sh", "-c", f'"{sys.executable}" -m bughunt run --dir '
                            f'"{tmp_path / "run"}" --crash-at p1.after_model_call; echo $?'],
                           capture_output=True, text=True, timeout=60)
    assert shell.stdout.split()[-1] == "137"
    assert run(tmp_path / "run2", RunConfig(), "--crash-at", "p1.after_model_call").returncode == -9
    readme = (ROOT / "README.md").read_text()
    kill_row = [line for line in readme.splitlines() if "planned crash point" in line
                and line.startswith("|")]
    assert len(kill_row) == 1 and "137" in kill_row[0] and "-9" in kill_row[0], kill_row
