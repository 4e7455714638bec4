"""Refuse, don't guess: every bad input gets one sentence naming the file, flag or field, a
non-zero exit, and every byte on disk stays as it was."""

from __future__ import annotations

import os
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
from bughunt.stores import SNAPSHOT_FILE, StoreDamage, rebuild_from_disk
from bughunt.worker import EXIT_BUSY, EXIT_IO, EXIT_REFUSED, Refused
from bughunt.worker import run as run_in_process
from bughunt.world import TRACKER_FILE, read_reports

from conftest import bughunt, report, run

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
    assert proc.returncode == EXIT_REFUSED and "Is a directory" in proc.stderr
    assert str(run_dir / SNAPSHOT_FILE) in proc.stderr
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
    assert f"{run_dir / 'events.jsonl'}: cannot be read (Is a directory)" in proc.stderr
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
