"""The store contract, held by one suite: every design of the lab's own stores, the planted bugs
(as mutants of the real source), and a learner's store loaded from a file."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bughunt.conformance import conform, lab_designs
from bughunt.config import RunConfig
from bughunt.instruments import mutants
from bughunt.stores import StoreSpecError, store_class
from bughunt.stores.contract import RULES, CheckpointStore

from conftest import bughunt, report, run

#: What each of the lab's designs breaks, by design (the lessons teach why).
EXPECTED = {
    ("snapshot", "atomic"): [],
    ("snapshot", "torn"): ["kill-keeps-acknowledged"],        # in place: a kill tears it
    ("snapshot", "no-newline"): ["kill-keeps-acknowledged"],
    ("log", "atomic"): [],
    ("log", "torn"): [],                                       # skipped fragment, then repaired
    ("log", "no-newline"): ["resume-appends-cleanly"],         # the no-newline trap
}


@pytest.fixture(scope="module")
def lab_reports():
    return {name: conform(cfg) for name, cfg in lab_designs().items()}


@pytest.mark.slow
def test_every_lab_design_breaks_exactly_the_rules_its_lesson_says(lab_reports):
    for name, r in lab_reports.items():
        expected = list(EXPECTED[(r.config.store, r.config.write_mode)])
        if expected == ["kill-keeps-acknowledged"] and r.config.fsync == "always":
            expected.append("fsync-keeps-acknowledged")
        assert r.broken() == expected, f"{name}: {r.broken()} {r.violations[:2]}"
        assert r.states > 30 and all(r.checked[rule] for rule in (
            "load-reads-only", "crash-leaves-a-real-state", "kill-keeps-acknowledged",
            "power-cut-leaves-a-real-state", "repair-is-idempotent", "commit-reads-back",
            "mid-fires-once")), name
        if r.config.fsync == "always":
            assert r.checked["fsync-keeps-acknowledged"]


@pytest.mark.slow
def test_a_violation_names_the_rule_the_crash_state_and_the_disk(lab_reports):
    r = lab_reports["log, no-newline, fsync never"]
    v = r.first("resume-appends-cleanly")
    assert v.state.startswith("kill -9 after operation ") and "events.jsonl" in v.state
    assert "events.jsonl" in v.disk and "then load() gave" in v.detail
    table = r.table()
    assert table.loc["resume-appends-cleanly", "violations"] > 0
    assert table.loc["load-reads-only", "violations"] == 0


@pytest.mark.parametrize("mutant, store, rule", [
    ("no-fsync", "log", "fsync-keeps-acknowledged"),
    ("no-fsync", "snapshot", "fsync-keeps-acknowledged"),
    ("no-dir-fsync", "log", "fsync-keeps-acknowledged"),
    ("no-dir-fsync", "snapshot", "fsync-keeps-acknowledged"),
    ("repair-not-idempotent", "log", "repair-is-idempotent"),
])
def test_each_planted_store_bug_breaks_its_rule_and_only_it(mutant, store, rule):
    package = mutants.load(mutant)
    suite = importlib.import_module(package.__name__ + ".conformance")
    config = importlib.import_module(package.__name__ + ".config").RunConfig
    r = suite.conform(config(store=store, fsync="always"))
    assert r.broken() == [rule] and len(r.violations) >= 5


def test_the_mutants_patch_the_real_source_and_production_code_names_no_bug():
    from bughunt.instruments.mutants import PACKAGE
    for name in mutants.MUTANTS:
        assert mutants.diff(name).count("\n-") + mutants.diff(name).count("\n+") >= 1
    # The code under test, the code a learner reads: no bug names, no switches for them.
    under_test = [PACKAGE / f for f in ("worker.py", "diskio.py", "events.py", "world.py",
                                        "config.py", "crashpoints.py", "experiment.py")]
    under_test += list((PACKAGE / "stores").glob("*.py"))
    for path in under_test:
        text = path.read_text()
        for name in mutants.MUTANTS:
            assert f'"{name}"' not in text, f"{path.name} names the planted bug {name}"
        assert "plant" not in text.lower() and ".bugs" not in text, path


# --- a learner's store -------------------------------------------------------------------------

NAIVE = '''
import json
from bughunt.stores import Recovered, Repairs
from bughunt.events import initial_state


class NaiveStore:
    """The first try: the state as JSON, written in place, no fsync."""
    name = "naive"

    def __init__(self, run_dir, config, door):
        self.path, self.door = run_dir / "state.json", door

    def load(self):
        try:
            return Recovered(json.loads(self.path.read_text()))
        except FileNotFoundError:
            return Recovered(initial_state())

    def open_for_append(self):
        return Repairs()

    def commit(self, state, event, *, mid):
        self.door.write_in_place(self.path, json.dumps(state).encode(), torn=True, mid=mid)

    def close(self):
        pass
'''


@pytest.fixture
def naive_file(tmp_path):
    path = tmp_path / "naive_store.py"
    path.write_text(NAIVE)
    return path


def test_a_learners_naive_store_is_graded_rule_by_rule(naive_file):
    """The same suite, behind the boundary: the learner's store never runs in this process."""
    from bughunt.boundary import commands

    module = {}
    exec(compile(NAIVE, str(naive_file), "exec"), module)     # the test's own look at it
    assert isinstance(module["NaiveStore"](naive_file.parent, RunConfig(), None), CheckpointStore)
    report, problem, printed = commands.conform_store(
        "test", RunConfig(store=f"{naive_file}:NaiveStore"), pages=5)
    assert problem is None and not printed
    broken = [v["rule"] for v in report["violations"]]
    assert "crash-leaves-a-real-state" in broken        # a torn file: load() raises
    assert "kill-keeps-acknowledged" in broken
    v = next(v for v in report["violations"] if v["rule"] == "crash-leaves-a-real-state")
    assert "load() raised JSONDecodeError" in v["detail"] and "state.json" in v["disk"]


@pytest.mark.parametrize("load_does, changed", [
    ("(self.path.parent / 'marker.txt').write_text('x')", "marker.txt"),    # not the door's
    ("(self.path.parent / 'cache').mkdir(exist_ok=True)", "cache"),
])
def test_a_load_that_makes_a_file_in_the_empty_run_directory_breaks_load_reads_only(
        tmp_path, load_does, changed):
    """issue 28: a load() that made a file the door never saw (in the empty run directory the
    run starts in, and again at every load after) passed "load reads only": the suite compared
    files only at crash states built from the door's journal, where the file already was."""
    path = tmp_path / "makes.py"
    path.write_text(NAIVE.replace("    def load(self):\n",
                                  f"    def load(self):\n        {load_does}\n"))
    from bughunt.boundary import commands

    report, problem, _ = commands.conform_store(
        "test", RunConfig(store=f"{path}:NaiveStore"), pages=2)
    assert problem is None
    reads = [v for v in report["violations"] if v["rule"] == "load-reads-only"]
    assert reads and reads[0]["state"] == ("on the empty run directory the run starts in (its "
                                           "first load)"), report["violations"]
    assert reads[0]["file"] == changed and reads[0]["detail"] == f"load() changed {changed}"


def test_the_worker_and_a_sweep_run_a_learners_store_from_its_file(naive_file, tmp_path):
    spec = f"{naive_file}:NaiveStore"
    out = report(run(tmp_path / "r", RunConfig(store=spec), "--json"))
    assert out["findings"] == [3, 7, 10] and (tmp_path / "r" / "state.json").exists()
    proc = bughunt("sweep", "--store", spec, "--points", "p3.after_submit,p5.mid_commit",
                   "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    points = json.loads(proc.stdout)["points"]
    assert [p["crash_point"] for p in points] == ["p3.after_submit", "p5.mid_commit"]
    assert points[1]["error"] is not None        # killed mid-write: the torn file breaks load()


@pytest.mark.parametrize("spec, words", [
    ("missing.py:Store", "cannot read missing.py"),
    ("{dir}/naive_store.py:Nope", "has no class Nope"),
    ("{dir}/broken.py:Store", "broken.py:2: expected ':'"),
    ("{dir}/half.py:Half", "class Half has no open_for_append, commit, close"),
])
def test_a_bad_store_file_is_one_sentence_naming_it(naive_file, tmp_path, spec, words):
    (tmp_path / "broken.py").write_text("class Store:\n    def load(self) return 1\n")
    (tmp_path / "half.py").write_text(textwrap.dedent("""
        class Half:
            def load(self):
                pass
    """))
    spec = spec.format(dir=tmp_path)
    with pytest.raises(StoreSpecError, match="runs only behind the lab's boundary"):
        store_class(spec)                  # never imported in this process
    proc = bughunt("run", "--dir", str(tmp_path / "r"), "--store", spec, cwd=tmp_path)
    assert proc.returncode == 2 and words in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "r").exists()


def test_the_suite_from_the_command_line(tmp_path, naive_file):
    ok = subprocess.run([sys.executable, "-m", "bughunt.conformance", "--store", "log", "--json"],
                        capture_output=True, text=True, cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["log"]["ok"] is True
    bad = subprocess.run([sys.executable, "-m", "bughunt.conformance", "--store",
                          f"{naive_file}:NaiveStore"], capture_output=True, text=True)
    assert bad.returncode == 1 and "breaks crash-leaves-a-real-state" in bad.stdout
    assert "load-reads-only" in RULES and "resume-appends-cleanly" in RULES


DOOR_FILES_STORES = Path(__file__).resolve().parent / "door_files_stores.py"


def test_a_store_writing_sub_state_json_through_the_door_is_seen_at_every_crash_state(tmp_path):
    """issue 28: a store whose sub/state.json went through the door was said to write outside
    it (the journal kept file names only, so sub/state.json was journaled as state.json), and
    only the run's last files were checked."""
    from bughunt.boundary import commands

    report, problem, _ = commands.conform_store(
        "test", RunConfig(store=f"{DOOR_FILES_STORES}:InAFolder"), pages=2)
    assert problem is None
    assert report["unseen"] == [] and report["states"] > 1, report
    assert report["violations"] == []
