"""Lesson 10: the adapter contract, proven with a tiny fake framework, then one real sweep of each
framework (LangGraph, DBOS) at a few points. Every crash is a real SIGKILL of a real process."""

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from bughunt.forkserver import ForkServer
from bughunt.frameworks import cli
from bughunt.experiment import frame, summarize
from bughunt.frameworks.sweep import (Point, SweepSettings, crash_run, discover, preload_for,
                                      select_points, shared_children, varying_points)
from bughunt.frameworks.sweep import sweep_framework as sweep
from bughunt.world import read_bill


def run_points(settings: SweepSettings, tmp_path: Path, choose) -> tuple:
    """Discover `settings`' points, then crash at the ones `choose(points)` returns (by name)."""
    settings = settings.resolved()
    children = shared_children(preload_for(settings))      # fork servers kept between tests
    clean = discover(settings, children, tmp_path / "sweep")
    wanted = choose(clean.points)
    by_name = {p.point: p for p in clean.points}
    records = {name: crash_run(settings, clean, by_name[name], tmp_path / f"run{i}", children)
               for i, name in enumerate(wanted)}
    return clean, records


# --- the contract, with the fake framework -------------------------------------------------------

@pytest.mark.slow
def test_points_are_discovered_from_a_traced_clean_run_by_name_and_occurrence(tmp_path):
    clean, _ = run_points(SweepSettings("fake", "page"), tmp_path, lambda pts: [])
    names = Counter(p.name for p in clean.points)
    assert names == {"ask_model.after": 12, "visit.after": 12, "submit.after": 3,
                     "framework.save.committed": 13}
    assert [p.point for p in clean.points[:3]] == ["ask_model.after#1", "visit.after#1",
                                                   "framework.save.committed#1"]
    submits = [p for p in clean.points if p.name == "submit.after"]
    assert [(p.point, p.page, p.kind) for p in submits] == [
        ("submit.after#1", 3, "user"), ("submit.after#2", 7, "user"), ("submit.after#3", 10, "user")]
    assert clean.final == {"findings": [3, 7, 10], "tokens": clean.final["tokens"],
                           "pages_done": 12} and clean.model_calls == 12


def test_a_kill_at_a_named_point_really_kills_that_process_there(tmp_path):
    _, recs = run_points(SweepSettings("fake", "page"), tmp_path, lambda pts: ["ask_model.after#3"])
    rec = recs["ask_model.after#3"]
    assert rec.killed and rec.verdict == "correct"
    bill = read_bill(tmp_path / "run0")
    first, second = bill[0]["pid"], bill[-1]["pid"]
    assert first != second                                  # two processes
    assert [c["page"] for c in bill if c["pid"] == first] == [1, 2, 3]   # died right after call 3
    assert [c["page"] for c in bill if c["pid"] == second] == list(range(3, 13))


def test_a_point_the_run_never_reaches_is_reported_not_reached(tmp_path):
    settings = SweepSettings("fake", "page").resolved()
    children = shared_children(preload_for(settings))
    clean = discover(settings, children, tmp_path / "s")
    ghost = Point("ask_model.after#99", "ask_model.after", 99, 999, 12, "user")
    rec = crash_run(settings, clean, ghost, tmp_path / "r", children)
    assert not rec.killed and rec.verdict == "not reached" and rec.error is None


def test_the_three_witnesses_see_a_redone_call_and_a_duplicate_report(tmp_path):
    for key in (False, True):
        _, recs = run_points(SweepSettings("fake", "page", idempotency_key=key), tmp_path / str(key),
                             lambda pts: ["submit.after#1", "framework.save.committed#3"])
        danger, saved = recs["submit.after#1"], recs["framework.save.committed#3"]
        # Killed after page 3's report, before its checkpoint: page 3 is redone.
        assert danger.redone_model_calls == 1 and danger.lost_reports == 0
        assert danger.duplicate_reports == (0 if key else 1)
        assert danger.tracker_pages == ([3, 7, 10] if key else [3, 3, 7, 10])
        assert danger.memory_ok and danger.disk_ok          # the agent's own state is right
        assert danger.three_way_check == key                     # the tracker holds a page twice
        assert danger.verdict == ("correct" if key else "duplicate")
        # Killed after page 3's checkpoint: nothing is redone.
        assert saved.redone_model_calls == 0 and saved.verdict == "correct"


@pytest.mark.slow
def test_repeat_reports_the_points_whose_verdict_varies_between_sweeps():
    flaky = sweep(SweepSettings("fake", "flaky", idempotency_key=False),
                  points="ask_model.after#*", repeat=3)
    varying = [v for v in varying_points(flaky.records) if v["verdict_varies"]]
    assert varying, "a framework that checkpoints at random must vary somewhere"
    assert all(set(v["verdicts"]) == {"correct", "duplicate"} for v in varying)
    assert {v["point"] for v in varying} <= {f"ask_model.after#{k}" for k in range(4, 13)}
    steady = sweep(SweepSettings("fake", "page", idempotency_key=False),
                   points="ask_model.after#*", repeat=2)
    assert varying_points(steady.records) == []
    df = frame(flaky.records)
    assert len(df) == 36 and set(df["repeat"]) == {0, 1, 2} and "verdict" in df


@pytest.mark.slow
def test_a_hung_resume_is_killed_at_its_timeout_and_named_in_the_record():
    hanging = "bughunt.frameworks.fake:HangingFramework"
    res = sweep(SweepSettings(hanging, "page"), points="ask_model.after#2", timeout=1.5)
    (rec,) = res.records
    assert rec.verdict == "error"
    assert rec.error == (f"the resume of {hanging} page, resume load, key on did not finish "
                         "within 1.5 s; the child was killed")


@pytest.mark.slow
def test_the_lab_worker_fits_the_contract_and_reproduces_the_lesson():
    res = sweep(SweepSettings("lab", "snapshot", idempotency_key=False))
    s = summarize(res.records)
    assert (s["crash_points"], round(s["avg_redone_model_calls"], 2),
            s["duplicate_points"]) == (51, 0.76, 6)
    assert s["wrong_memory"] == s["wrong_disk"] == s["errors"] == 0


# --- LangGraph -----------------------------------------------------------------------------------

@pytest.mark.slow
def test_langgraph_sync_redoes_only_the_node_whose_writes_were_not_saved(tmp_path):
    # Named per node, a point is the same moment whichever background thread commits first.
    points = ["ask_model.after#2", "framework.put_writes.ask_model.committed#2",
              "submit.after#1", "framework.put_writes.submit.committed#1"]
    _, recs = run_points(SweepSettings("langgraph", "sync", idempotency_key=False), tmp_path,
                         lambda pts: points)

    def calls_for(name, page):
        i = points.index(name)
        return sum(c["page"] == page for c in read_bill(tmp_path / f"run{i}"))

    asked, saved_ask, submitted, saved_submit = (recs[n] for n in points)
    assert asked.redone_model_calls == 1 and calls_for("ask_model.after#2", 2) == 2
    # ask_model's results were saved: LangGraph does not run it again (pending writes)
    assert calls_for("framework.put_writes.ask_model.committed#2", 2) == 1
    # the report is filed, the submit node's results are not saved: the node runs again
    assert submitted.verdict == "duplicate" and submitted.tracker_pages == [3, 3, 7, 10]
    assert saved_submit.verdict == "correct" and saved_submit.tracker_pages == [3, 7, 10]
    assert all(r.killed and r.memory_ok and r.disk_ok for r in recs.values())


@pytest.mark.slow
def test_langgraph_resume_mistakes_lose_reports_or_double_count(tmp_path):
    # Between a node's saved results and the step's checkpoint, .next is empty mid-run. Both are
    # written by background threads, so each point is swept twice and one "lost" is enough.
    saved = "framework.put_writes.*.committed#1"
    early = sweep(SweepSettings("langgraph", "sync", "next_empty_is_done"), points=saved,
                  repeat=2).records
    lost = [r for r in early if r.verdict == "lost"]
    # the resume returns at once: every report not filed yet is lost, every later page skipped
    assert lost and all(r.lost_reports >= 2 and r.skipped_pages >= 9 for r in lost)
    documented = sweep(SweepSettings("langgraph", "sync", "documented"), points=saved).records
    assert {r.verdict for r in documented} == {"correct"}
    _, again = run_points(SweepSettings("langgraph", "sync", "reinvoke_input"), tmp_path,
                          lambda pts: ["ask_model.after#4"])
    rec = again["ask_model.after#4"]
    # a new run from START on top of the saved state: page 3's finding is added again
    assert rec.verdict == "wrong state" and rec.final_state["findings"] == [3, 3, 7, 10]
    assert rec.redone_model_calls == 4 and rec.duplicate_reports == 0     # the key held


# --- DBOS ----------------------------------------------------------------------------------------

@pytest.mark.slow
def test_dbos_steps_are_at_least_once_and_recorded_steps_never_rerun(tmp_path):
    window = ["submit.after#1", "framework.step_output.submit.uncommitted#1",
              "framework.step_output.submit.committed#1"]
    _, recs = run_points(SweepSettings("dbos", resume="workflow_id", idempotency_key=False),
                         tmp_path / "a", lambda pts: window)
    in_step, in_commit, recorded = (recs[n] for n in window)
    assert in_step.verdict == "duplicate" and in_step.redone_model_calls == 0
    assert in_commit.verdict == "duplicate"       # a kill inside the commit: rolled back
    assert recorded.verdict == "correct" and recorded.tracker_pages == [3, 7, 10]
    _, recovered = run_points(SweepSettings("dbos", resume="recovery"), tmp_path / "b",
                              lambda pts: ["ask_model.after#2"])
    rec = recovered["ask_model.after#2"]
    assert rec.verdict == "correct" and rec.redone_model_calls == 1 and rec.disk_ok


# --- the fork server's entry, and the CLI --------------------------------------------------------

def test_the_fork_server_runs_an_entry_function_after_preloading(tmp_path):
    server = ForkServer(preload=("bughunt.frameworks.child",))
    job = {"role": "rebuild", "adapter": "fake", "mode": "page", "resume": "load",
           "run_dir": str(tmp_path), "world": {}}
    try:
        out = server.run([json.dumps(job)], entry="bughunt.frameworks.child:main")
        bad = server.run(["not json"], entry="bughunt.frameworks.child:main")
    finally:
        server.close()
    assert out.returncode == 0 and json.loads(out.stdout) == {"rebuilt": None}
    assert bad.returncode == 2 and "one JSON job argument" in bad.stderr


@pytest.mark.parametrize("argv, flag", [
    (["--framework", "nope"], "--framework"),
    (["--framework", "langgraph", "--mode", "fast"], "--mode"),
    (["--framework", "dbos", "--resume", "documented,magic"], "--resume"),
    (["--framework", "all", "--mode", "sync"], "--mode"),
    (["--latency-ms", "-1"], "--latency-ms"),
    (["--repeat", "0"], "--repeat"),
    (["--key", "maybe"], "--key"),
    (["--timeout", "0"], "--timeout"),
    (["--framework", "fake", "--points", "nothing#1"], "--points"),
])
@pytest.mark.slow
def test_bad_flags_are_refused_in_one_sentence_naming_the_flag(argv, flag, capsys, tmp_path,
                                                               monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert exit_.value.code == 2 and flag in err and "Traceback" not in err
    assert os.listdir(tmp_path) == []                   # nothing left on disk


@pytest.mark.parametrize("spec", [":X", "..relative:X", "bughunt.no_such_module:X",
                                  "bughunt.frameworks.fake:NoSuchClass"])
def test_an_adapter_that_cannot_be_loaded_is_one_sentence_naming_the_flag(spec, tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "bughunt", "frameworks", "--framework", spec],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert f"--framework {spec!r}" in last
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
@pytest.mark.parametrize("args", [["--timeout", "1e-9", "--framework", "fake"],
                                  ["--timeout", "0.05", "--framework", "langgraph",
                                   "--mode", "sync", "--points", "user@p1"]])
def test_a_timeout_shorter_than_the_clean_run_fails_the_sweep_in_one_sentence(args, tmp_path):
    """The timeout is the child's: a fork server that takes longer to start than that is not
    the child running too long, and a clean run killed at its timeout is a sweep that could not
    run (exit 1), said in one sentence, with nothing left in the temp dir."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "bughunt", "frameworks", *args],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "did not finish within" in lines[0], lines
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_json_output_holds_typed_records_and_summaries(capsys):
    assert cli.main(["--framework", "fake", "--mode", "page", "--key", "off",
                     "--points", "submit.after#*", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    (s,) = out["sweeps"]
    assert s["summary"]["user"]["duplicate_points"] == 3 and len(s["records"]) == 3
    assert {r["verdict"] for r in s["records"]} == {"duplicate"}


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc (Linux)")
def test_ctrl_c_stops_at_once_leaving_no_process_and_no_temp_dir(tmp_path):
    # A framework whose resume hangs: Ctrl-C comes while a child is stuck, and only killing it
    # can end the sweep in time (its timeout is 30 s).
    mark = f"bughunt-ctrl-c-{os.getpid()}"
    env = {**os.environ, "TMPDIR": str(tmp_path), "BUGHUNT_TEST_MARK": mark}
    proc = subprocess.Popen([sys.executable, "-m", "bughunt.frameworks", "--framework",
                             "bughunt.frameworks.fake:HangingFramework", "--mode", "page",
                             "--timeout", "30"],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    assert "crash runs" in proc.stderr.readline()       # discovery done, crash runs starting
    deadline = time.monotonic() + 30
    while not list(tmp_path.glob("bughunt-fw-*/s0/*/hanging")):   # a resume is stuck now
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    rest = proc.stderr.read()
    proc.wait(timeout=60)                                 # a hang guard; make bench times it
    assert proc.returncode == 130 and "interrupted" in rest and "Traceback" not in rest
    assert os.listdir(tmp_path) == []
    marked = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if mark.encode() in Path(f"/proc/{pid}/environ").read_bytes():
                marked.append(pid)
        except OSError:
            pass
    assert marked == []


def test_select_points_by_kind_and_pattern():
    pts = [Point("ask_model.after#1", "ask_model.after", 1, 1, 1, "user"),
           Point("framework.put.committed#1", "framework.put.committed", 1, 2, 1, "framework")]
    assert select_points(pts, "framework") == pts[1:]
    assert select_points(pts, "ask_model.*") == pts[:1]
    assert select_points(pts, "user,framework.put.*") == pts
    assert select_points(pts, "all@p1") == pts
    assert select_points(pts, "all@p2-5", strict=False) == []
    with pytest.raises(ValueError, match="--points 'visit"):
        select_points(pts, "visit.after#*")
    with pytest.raises(ValueError, match="not a page range"):
        select_points(pts, "user@page3")


@pytest.mark.slow
def test_the_panel_sweeps_the_chosen_settings_and_shows_each_witness():
    from bughunt.lab.lessons import l10_frameworks as fw

    fw.clear_caches()
    p = fw.FrameworkPanel()
    p.framework.value = "fake"
    assert list(p.mode.options) == ["page", "never", "flaky"] and p.resume.value == "load"
    p.mode.value, p.key.value, p.points.value = "page", False, "user"
    p.run()
    assert p.status.value.startswith("27 crash runs: 24 correct, 3 with a duplicate")
    assert len(p.images()) == 1 and len(p.out.outputs) == 2        # the figure, the summary
    p.inspect.value = "submit.after#1"
    assert "duplicate" in p.point_info.value and "[3, 3, 7, 10]" in p.point_info.value
    p.reset()
    assert (p.framework.value, p.mode.value, p.sweep) == ("langgraph", "async", None)
    assert p.out.outputs == () and p.status.value == "Reset."
