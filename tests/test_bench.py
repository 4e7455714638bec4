"""The benchmark runs end to end and writes its CSV (timings are checked by `make bench`, not here)."""

import csv

import pytest

from bughunt import bench
from bughunt.config import RunConfig
from bughunt.stores import rebuild_from_disk
from bughunt.world import missing_reports


def test_bench_writes_ratios_for_every_write_and_recovery_case(tmp_path, capsys):
    out = tmp_path / "bench.csv"
    assert bench.main(["--quick", "--only", "write", "--only", "recovery", "--csv", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    writes = [r for r in rows if r["section"] == "write"]
    assert len(writes) == 6 and all(float(r["ratio"]) > 0 for r in writes)
    assert any(r["case"].startswith("full replay vs snapshot") for r in rows)
    assert "written to" in capsys.readouterr().out


def test_a_synthetic_run_is_what_a_worker_would_have_written(tmp_path):
    config = RunConfig(pages=40, snapshot_every=8)
    events = bench.synthetic_run(tmp_path / "run", config)
    rec = rebuild_from_disk(tmp_path / "run", config)
    assert events == 40 + len([p for p in range(1, 41) if (p - 1) % 12 + 1 in (3, 7, 10)])
    assert rec.snapshot_used and rec.state["next_page"] == 41 and rec.replayed_events == 0
    assert missing_reports(tmp_path / "run", rec.state["findings"]) == []   # a resume accepts it


@pytest.mark.slow
def test_bench_measures_the_model_server_start_and_an_http_call_against_the_mock(tmp_path):
    out = tmp_path / "bench.csv"
    assert bench.main(["--quick", "--only", "model", "--csv", str(out)]) == 0
    rows = [r for r in csv.DictReader(out.open()) if r["section"] == "model"]
    assert rows[0]["case"].startswith("model server start") and float(rows[0]["value"]) > 0
    calls = [r for r in rows if r["case"].startswith("one call over HTTP")]
    assert len(calls) == 2 and all(float(r["ratio"]) > 1 for r in calls)


def test_bench_grades_lesson_9s_reference_solution_behind_the_boundary(tmp_path):
    out = tmp_path / "bench.csv"
    assert bench.main(["--quick", "--only", "grade", "--csv", str(out)]) == 0
    rows = [r for r in csv.DictReader(out.open()) if r["section"] == "grade"]
    assert len(rows) == 1 and rows[0]["case"].startswith("lesson 9's reference solution")
    assert float(rows[0]["value"]) > 0 and "passed: True" in rows[0]["note"]


@pytest.mark.slow
def test_bench_reports_the_explorers_trace_overhead_as_a_ratio_and_states_checked_per_second(tmp_path):
    import shutil
    import sys

    import pytest

    if not sys.platform.startswith("linux") or shutil.which("strace") is None:
        pytest.skip("the explorer needs Linux and strace")
    out = tmp_path / "bench.csv"
    bench.ROWS.clear()
    assert bench.main(["--quick", "--only", "explore", "--csv", str(out)]) == 0
    rows = [r for r in csv.DictReader(out.open()) if r["section"] == "explore"]
    overhead = [r for r in rows if "a run under strace vs without" in r["case"]]
    assert len(overhead) == 2 and all(float(r["ratio"]) > 0 and r["target"] for r in overhead)
    assert any(r["case"].endswith("checked per second") and float(r["value"]) > 0 for r in rows)


@pytest.mark.slow
def test_bench_times_the_book_build(tmp_path):
    out = tmp_path / "bench.csv"
    assert bench.main(["--only", "book", "--csv", str(out)]) == 0
    rows = [r for r in csv.DictReader(out.open()) if r["section"] == "book"]
    assert len(rows) == 1 and rows[0]["unit"] == "s" and float(rows[0]["value"]) > 0
    assert rows[0]["note"] == "" and rows[0]["met"] in ("yes", "NO")    # built; the time is noted


FAKE_TIERS = '''
import json, sys
tier, report = sys.argv[1], sys.argv[3]
tiers = [{"name": "fast tests", "seconds": 100.0, "exit": 0}]
if tier == "full":
    tiers.append({"name": "notebooks (strict nbval)", "seconds": 700.0, "exit": 1})
json.dump({"tier": tier, "seconds": sum(t["seconds"] for t in tiers),
           "target_s": {"fast": 180, "full": 600}[tier], "tiers": tiers}, open(report, "w"))
sys.exit(0 if tier == "fast" else 1)
'''


def test_bench_rows_for_the_test_tiers_say_each_tiers_time_and_whether_the_target_was_met(
        tmp_path):
    """The rows come from the tiers' own report; a tier over its target, or failing, is NO."""
    fake = tmp_path / "tests" / "tiers.py"
    fake.parent.mkdir()
    fake.write_text(FAKE_TIERS)
    since = len(bench.ROWS)
    bench.tier_times(fake)
    rows = {r["case"]: r for r in bench.take_rows(since)}
    assert rows["make test-fast: fast tests"]["value"] == 100.0
    fast = next(r for c, r in rows.items() if c.startswith("make test-fast,"))
    full = next(r for c, r in rows.items() if c.startswith("make test,"))
    assert (fast["value"], fast["target"], fast["met"]) == (100.0, "<= 180 s", "yes")
    assert (full["value"], full["met"]) == (800.0, "NO") and "a tier failed" in full["note"]
    assert "failed (exit 1)" in rows["make test: notebooks (strict nbval)"]["note"]


@pytest.mark.parametrize("signum, code", [(2, 130), (15, 143)], ids=["SIGINT", "SIGTERM"])
def test_a_bench_stopped_mid_measurement_writes_nothing_and_leaves_no_folder(tmp_path, signum,
                                                                            code):
    """Stopped while its write section measures in a folder of the current directory (on the
    disk, not in TMPDIR), the bench says so in one sentence and leaves neither that folder nor a
    CSV. A SIGTERM used to end it at once, the folder left behind."""
    import os
    import subprocess
    import sys
    import time

    out = tmp_path / "out.csv"
    proc = subprocess.Popen([sys.executable, "-m", "bughunt.bench", "--only", "write", "--csv",
                             str(out)], cwd=tmp_path, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        deadline = time.monotonic() + 120
        while not any(p.name.startswith("bughunt-bench-") for p in tmp_path.iterdir()):
            assert proc.poll() is None and time.monotonic() < deadline, "it never measured"
            time.sleep(0.01)                  # waits for the folder to be there, nothing else
        proc.send_signal(signum)
        err = proc.communicate(timeout=120)[1]
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == code, err
    assert err.count("\n") == 1 and "nothing written to" in err and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == []
