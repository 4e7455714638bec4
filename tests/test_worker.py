"""The worker as a process: one configuration per run, one writer per run, clear refusals."""

import json
import os
import signal

import pytest

from bughunt.config import RunConfig
from bughunt.experiment import PausedWorker
from bughunt.world import read_bill, read_reports

from conftest import bughunt, report, run


def test_clean_run_files_three_reports_and_pays_twelve_calls(run_dir, tmp_path):
    r = report(run(run_dir, RunConfig(), "--json", cwd=tmp_path))
    assert r["findings"] == [3, 7, 10] and r["model_calls"] == 12
    assert len(read_bill(run_dir)) == 12
    assert [x["page"] for x in read_reports(run_dir)] == [3, 7, 10]
    assert [x["idempotency_key"] for x in read_reports(run_dir)] == [
        "bughunt:p03", "bughunt:p07", "bughunt:p10"]


def test_keys_off_files_reports_without_a_key(run_dir):
    report(run(run_dir, RunConfig(idempotency_key=False), "--json"))
    assert [x["idempotency_key"] for x in read_reports(run_dir)] == [None, None, None]


def test_crash_is_a_real_sigkill_and_the_bill_keeps_the_call(run_dir):
    proc = run(run_dir, RunConfig(), "--crash-at", "1")
    assert proc.returncode == -signal.SIGKILL
    assert [c["page"] for c in read_bill(run_dir)] == [1]


def test_resume_with_another_configuration_is_refused(run_dir):
    assert run(run_dir, RunConfig(), "--crash-at", "5").returncode == -9
    before = sorted((p.name, p.read_bytes()) for p in run_dir.iterdir())
    proc = run(run_dir, RunConfig(store="snapshot"))
    assert proc.returncode == 2
    assert "config.json" in proc.stderr and "store: 'log' vs 'snapshot'" in proc.stderr
    assert sorted((p.name, p.read_bytes()) for p in run_dir.iterdir()) == before


def test_a_foreign_directory_is_not_taken_over(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    proc = run(tmp_path, RunConfig())
    assert proc.returncode == 2 and "not a BugHunt run directory" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]      # no run.lock either


def test_a_second_resumer_is_refused_while_the_first_lives_and_succeeds_after_its_kill(run_dir):
    first = PausedWorker(run_dir, RunConfig(), pause_at=20)
    try:
        second = run(run_dir, RunConfig())
        assert second.returncode == 75 and "run is busy" in second.stderr
    finally:
        assert first.kill() == -signal.SIGKILL
    third = report(run(run_dir, RunConfig(), "--json"))
    assert third["findings"] == [3, 7, 10]


def test_a_paused_worker_can_be_released_to_finish(run_dir):
    paused = PausedWorker(run_dir, RunConfig(), pause_at="p1.mid_commit")
    assert "p1.mid_commit" in paused.point_reached
    assert paused.release()["findings"] == [3, 7, 10]


@pytest.mark.parametrize("args, flag", [
    (["--store", "sqlite"], "--store"),
    (["--write-mode", "half"], "--write-mode"),
    (["--idempotency-key", "yes"], "--idempotency-key"),
    (["--pages", "0"], "--pages"),
    (["--snapshot-every", "-1"], "--snapshot-every"),
    (["--snapshot-every", "4", "--store", "snapshot"], "--snapshot-every"),
    (["--granularity", "op"], "--granularity"),
])
def test_bad_flags_are_refused_naming_the_flag(tmp_path, args, flag):
    proc = bughunt("run", "--dir", str(tmp_path / "r"), *args)
    assert proc.returncode == 2 and flag in proc.stderr
    assert not (tmp_path / "r").exists()


def test_a_crash_point_outside_the_scheme_is_refused_before_touching_disk(tmp_path):
    proc = bughunt("run", "--dir", str(tmp_path / "r"), "--intent", "off", "--crash-at", "52")
    assert proc.returncode == 2 and "crash points 1 to 51" in proc.stderr
    assert not (tmp_path / "r").exists()


def test_resuming_a_finished_run_does_nothing_more(run_dir):
    report(run(run_dir, RunConfig(), "--json"))
    r = report(run(run_dir, RunConfig(), "--json"))
    assert r["model_calls"] == 0 and r["reports_filed"] == 0 and r["replayed_events"] == 15
    assert len(read_bill(run_dir)) == 12


def test_worker_module_runs_from_any_directory(tmp_path):
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-m", "bughunt.worker", "--dir", "r", "--json"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["findings"] == [3, 7, 10]
    assert os.path.exists(tmp_path / "r" / "events.jsonl")


def test_fsync_always_reports_each_checkpoint_write_with_its_latency(run_dir):
    r = report(run(run_dir, RunConfig(store="log", fsync="always", snapshot_every=4), "--json"))
    lat = r["checkpoint_writes"]["latencies_ns"]
    assert len(lat["append"]) == 15 and len(lat["snapshot"]) == 3
    assert all(isinstance(ns, int) and ns > 0 for ns in lat["append"] + lat["snapshot"])


def test_a_kill_while_the_config_was_written_does_not_orphan_the_run(run_dir):
    run_dir.mkdir()
    (run_dir / "run.lock").write_bytes(b"")
    (run_dir / "config.json.tmp").write_bytes(b'{"form')
    r = report(run(run_dir, RunConfig(), "--json"))
    assert r["findings"] == [3, 7, 10] and not (run_dir / "config.json.tmp").exists()
