"""The snapshot store: atomic replace, torn snapshots detected, stale temp files cleaned."""

from bughunt.config import RunConfig
from bughunt.stores import make_store

from conftest import report, run

SNAP = RunConfig(store="snapshot", intent=False)


def test_atomic_mid_commit_leaves_an_unrenamed_temp_file(run_dir):
    assert run(run_dir, SNAP, "--crash-at", "7").returncode == -9      # page 2, mid_commit
    assert (run_dir / "snapshot.json.tmp").exists()
    assert make_store(run_dir, SNAP).load().state["next_page"] == 2     # still page 1's snapshot


def test_resume_removes_the_stale_temp_file_and_redoes_the_page(run_dir):
    assert run(run_dir, SNAP, "--crash-at", "7").returncode == -9
    r = report(run(run_dir, SNAP, "--json"))
    assert r["temp_files_removed"] == 1 and not (run_dir / "snapshot.json.tmp").exists()
    assert r["model_calls"] == 11                                      # page 2 asked again


def test_torn_snapshot_is_detected_and_recovery_starts_fresh_and_says_so(run_dir):
    config = SNAP.replace(write_mode="torn")
    assert run(run_dir, config, "--crash-at", "7").returncode == -9
    proc = run(run_dir, config, "--json")
    r = report(proc)
    assert r["snapshot_fallback"] == "fresh" and r["model_calls"] == 12
    assert "torn snapshot" in proc.stderr and "snapshot.json" in proc.stderr


def test_op_granularity_saves_the_model_answer_before_the_visit(run_dir):
    config = SNAP.replace(granularity="op")
    assert run(run_dir, config, "--crash-at", "6").returncode == -9     # page 2, after_visit
    r = report(run(run_dir, config, "--json"))
    assert r["model_calls"] == 10                                       # page 2's answer was kept
