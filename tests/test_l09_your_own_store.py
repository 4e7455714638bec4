"""Lesson 9: the grader of a learner's store, and the capstone's steps.

The stores graded here are the notebook's own cells (read from notebooks/src/09_your_own_store.py),
the reference solution, and small stores that misbehave on purpose: each failure of learner code
must end in one sentence, within its time limit, with nothing left running and nothing written
outside the grade's temporary directory.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import jupytext
import pytest

from bughunt import grader
from bughunt.grader import DiskProfile, Grade, StoreProblem, RuleResult, choose_hint, disk_profile
from bughunt.lab.lessons import l09_your_own_store as cap
from bughunt.lab import results
from bughunt.lab.judges import judge
from bughunt.stores.contract import RULES

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "src" / "09_your_own_store.py"

POWER = ["power-cut-leaves-a-real-state", "fsync-keeps-acknowledged"]
NAIVE = ["crash-leaves-a-real-state", "kill-keeps-acknowledged", *POWER]


def notebook_stores() -> dict[str, str]:
    """The notebook's `%%writefile NAME` cells: file name -> source (the lesson reads them too,
    to check its claims headless)."""
    return cap.notebook_stores()


@pytest.fixture(scope="module")
def steps(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("steps")
    for name, source in notebook_stores().items():
        (folder / name).write_text(source)
    return folder


@pytest.fixture(autouse=True)
def fresh_results():
    results.reset()
    yield
    results.reset()


def graded(folder: Path, spec: str, **kw) -> Grade:
    return grader.grade(f"{folder / spec.partition(':')[0]}:{spec.partition(':')[2]}", **kw)


# --- the capstone's steps, from the notebook ------------------------------------------------------

def test_the_notebook_writes_six_stores_each_importing_what_it_builds_on():
    assert list(notebook_stores()) == ["naive_store.py", "rename_store.py", "fsync_store.py",
                                       "durable_store.py", "log_store.py",
                                       "repaired_log_store.py"]


def test_the_naive_store_breaks_the_kill_and_power_cut_rules_and_its_resume_fails_mid_commit(steps):
    g = graded(steps, "naive_store.py:NaiveStore")
    assert g.broken() == NAIVE and not g.passed and not g.problems
    first = g.first("crash-leaves-a-real-state")
    assert first.state.startswith("kill -9 after operation") and "state.json" in first.state
    assert "JSONDecodeError" in first.detail and first.disk == {"state.json": "b'' (0 bytes)"}
    bad = [r.crash_point for r in g.records if not r.correct]
    assert bad == [f"p{p}.mid_commit" for p in range(1, 6)]
    assert all(r.verdict == "error" and "JSONDecodeError" in r.error for r in g.records
               if not r.correct)
    assert g.hint.lesson == 5 and "temp file" in g.hint.text
    assert g.profile.in_place and g.profile.data_unsynced


@pytest.mark.parametrize("spec, broken, lesson, words", [
    ("rename_store.py:RenameStore", POWER, 6, "fsync the temp file"),
    ("fsync_store.py:FsyncStore", ["fsync-keeps-acknowledged"], 6, "fsync the directory"),
    ("durable_store.py:DurableStore", [], 10, "nothing to fix"),
    ("log_store.py:LogStore", ["resume-appends-cleanly"], 5, "newline"),
    ("repaired_log_store.py:RepairedLogStore", [], 10, "nothing to fix"),
])
def test_each_fix_of_the_notebook_leaves_only_what_its_hint_names_next(steps, spec, broken,
                                                                       lesson, words):
    g = graded(steps, spec)
    assert g.broken() == broken, g.verdict
    assert g.hint.lesson == lesson and words in g.hint.text
    assert len(g.records) == 22 and all(r.correct for r in g.records)   # kill -9 cannot see it
    assert g.passed == (not broken)


def test_without_the_key_a_passing_store_files_page_3_twice_and_the_hint_is_lesson_4(steps):
    g = graded(steps, "repaired_log_store.py:RepairedLogStore", idempotency_key=False,
               intent=False)
    assert g.conformance_ok and not g.passed
    dup = sorted(r.crash_point for r in g.records if r.duplicate_reports)
    assert dup == ["p3.after_submit", "p3.mid_commit"]
    assert g.hint.lesson == 4 and "idempotency key" in g.hint.text


def test_the_reference_solution_passes_every_rule_and_every_crash_point():
    g = cap.reference()
    assert g.passed and not g.problems and g.broken() == []
    assert [r.rule for r in g.rules] == list(RULES) and all(r.checked for r in g.rules)
    assert len(g.records) == 22 and all(r.verdict == "correct" for r in g.records)
    # its snapshot bounds the replay: a crash after page 4's commit replays nothing
    after4 = next(r for r in g.records if r.crash_point == "p4.after_commit")
    assert after4.replayed_events == 0
    assert "rename snapshot.json.tmp -> snapshot.json" in g.profile.commit_ops


def test_the_notebook_states_the_boundarys_limits_as_the_grader_sets_them():
    from bughunt.boundary import Limits
    text = " ".join(" ".join(line.lstrip("# ") for line in NOTEBOOK.read_text().splitlines())
                    .split())
    says = (f"Each call into your store gets {grader.OPERATION_TIMEOUT_S:g} s, the suite "
            f"{grader.CONFORM_TIMEOUT_S:g} s, the sweep {grader.SWEEP_TIMEOUT_S:g} s (each worker "
            f"{grader.RUN_TIMEOUT_S:g} s); each process gets "
            f"{Limits().memory_bytes / (1 << 30):g} GiB of address space")
    assert says in text


@pytest.mark.slow
def test_the_two_stores_behind_the_boundary_print_and_are_refused():
    graded = cap.behind_the_boundary()
    chatty, backup = graded["ChattyStore"], graded["BackupStore"]
    assert chatty.passed and chatty.printed.stdout[0] == "committing event 1 page_done"
    assert backup.problems[0].kind == "refused" and not backup.passed
    assert "(subprocess.Popen: cp events.jsonl events.jsonl.bak)" in backup.verdict


@pytest.mark.slow
def test_the_lab_stores_pass_the_same_grade():
    for store in ("log", "snapshot"):
        assert grader.grade(store).passed


# What the grader does with a store that misbehaves (prints, exits, hangs, forks, writes outside,
# returns the wrong thing) is tested row by row in tests/test_boundary.py.


# --- the hint, the journal, the records ---------------------------------------------------------

def _grade(broken=(), profile=DiskProfile(), records=(), config=None, detail="gave a state"):
    from bughunt.config import RunConfig
    rules = tuple(RuleResult(rule=r, promise=p, checked=5, violations=int(r in broken),
                             state="kill -9 after operation 3", detail=detail)
                  for r, p in RULES.items())
    return Grade(store="s.py:S", name="S", config=config or RunConfig(pages=5), rules=rules,
                 states=10, records=tuple(records), profile=profile)


@pytest.mark.parametrize("broken, profile, lesson, words", [
    (["mid-fires-once", "kill-keeps-acknowledged"], DiskProfile(in_place=True), 5, "mid()"),
    (["commit-reads-back"], DiskProfile(), 3, "apply_event"),
    (["load-reads-only"], DiskProfile(), 5, "open_for_append"),
    (["crash-leaves-a-real-state"], DiskProfile(in_place=True), 5, "temp file"),
    (["kill-keeps-acknowledged", *POWER], DiskProfile(in_place=True, data_unsynced=True), 5,
     "rename it over"),
    (["repair-is-idempotent"], DiskProfile(appends=True), 5, "second"),
    (["resume-appends-cleanly"], DiskProfile(appends=True), 5, "newline"),
    (POWER, DiskProfile(renamed_unsynced=True, dir_unsynced=True), 6, "fsync the temp file"),
    (["fsync-keeps-acknowledged"], DiskProfile(dir_unsynced=True), 6, "fsync the directory"),
])
def test_the_hint_points_to_the_lesson_that_teaches_the_first_fix(broken, profile, lesson, words):
    hint = choose_hint(_grade(broken, profile))
    assert hint.lesson == lesson and words in hint.text, hint
    assert hint.notebook.startswith(f"{lesson:02d}_")


def test_a_log_that_raises_on_a_torn_line_is_sent_to_lesson_5_not_to_fsync():
    for broken in (["crash-leaves-a-real-state"], ["power-cut-leaves-a-real-state"]):
        g = _grade(broken, DiskProfile(appends=True),
                   detail="load() raised JSONDecodeError: Unterminated string")
        hint = choose_hint(g)
        assert hint.lesson == 5 and "skip a line that does not parse" in hint.text, broken


def test_a_grade_with_a_problem_hints_at_the_problem_first():
    g = dataclasses.replace(_grade(["crash-leaves-a-real-state"]),
                            problems=(StoreProblem("timeout", "X.load did not return within 3 s"),))
    assert choose_hint(g).lesson == 9 and "never returns" in choose_hint(g).text
    assert g.verdict == "Not graded to the end. X.load did not return within 3 s."


def test_the_journal_tells_an_in_place_write_from_a_durable_rename():
    def commit(seq, *ops):
        return [{"op": "mark", "what": "commit-begin", "seq": seq}, *ops,
                {"op": "mark", "what": "commit-end", "seq": seq}]
    w = {"op": "write", "path": "s.json", "offset": 0, "data": "eHl6"}
    tmp = [{"op": "create", "path": "s.tmp"}, {**w, "path": "s.tmp"},
           {"op": "fsync", "path": "s.tmp"}, {"op": "rename", "src": "s.tmp", "dst": "s.json"}]
    events = [{"seq": 1, "t": "page_done", "page": 1}, {"seq": 2, "t": "page_done", "page": 2}]
    in_place = disk_profile(commit(1, {"op": "create", "path": "s.json"}, w)
                            + commit(2, {"op": "trunc", "path": "s.json"}, w), events)
    assert in_place.in_place and in_place.data_unsynced and in_place.commit_page == 2
    no_dir = disk_profile(commit(1, *tmp) + commit(2, *tmp), events)
    assert not no_dir.data_unsynced and not no_dir.renamed_unsynced and no_dir.dir_unsynced
    assert no_dir.commit_ops[-1] == "rename s.tmp -> s.json"
    durable = disk_profile(commit(1, *tmp, {"op": "fsync_dir"}) +
                           commit(2, *tmp, {"op": "fsync_dir"}), events)
    assert not (durable.dir_unsynced or durable.data_unsynced)
    assert durable.commit_ops[-1] == "directory fsync"
    early = disk_profile(commit(1, tmp[0], tmp[1], tmp[3], tmp[2]), events[:1])
    assert early.renamed_unsynced
    # the directory fsynced after the temp file was created, but not after the rename
    created_only = disk_profile(commit(1, tmp[0], {"op": "fsync_dir"}, *tmp[1:]), events[:1])
    assert created_only.dir_unsynced


def test_a_failed_resume_shows_no_redone_calls_and_one_line_of_error(steps):
    table = graded(steps, "naive_store.py:NaiveStore").sweep_table()
    failed = table[table["verdict"] == "error"]
    assert failed["redone_model_calls"].isna().all()
    assert failed["error"].str.startswith("resume exited 1: json.decoder.JSONDecodeError").all()
    assert not failed["error"].str.contains("\n|/tmp/|Traceback").any()


# --- the lab module: skeleton, tables, figure, panel, exercises, command line -------------------

def test_the_skeleton_carries_every_promise_and_is_graded_as_not_written_yet():
    from bughunt.stores import contract
    src = cap.skeleton()
    compile(src, "my_store.py", "exec")
    for rule in RULES:
        assert f"- {rule}:" in src
    for method in ("load", "open_for_append", "commit", "close"):
        assert f"def {method}(self" in src
    assert "Idempotent." in src and contract.CheckpointStore.commit.__doc__.split()[0] in src
    g = cap.grade_skeleton()
    assert g.problems[0].kind == "exception"
    assert g.problems[0].message.startswith("MyStore.load raised NotImplementedError")
    assert "(my_store.py, line" in g.problems[0].message


@pytest.mark.slow
def test_the_comparison_puts_the_lab_stores_beside_the_learners_with_the_same_settings(steps):
    g = graded(steps, "log_store.py:LogStore")
    table = cap.compare_table({"5 log": g}).df
    assert list(table.index) == ["5 log", "lab: log + intents + key",
                                 "lab: snapshot + intents + key"]
    assert table.loc["5 log", "rules broken"] == 1 and table.loc["5 log", "rules checked"] == 9
    assert table.loc["lab: snapshot + intents + key", "correct"] == 22
    assert table.loc["lab: snapshot + intents + key", "crash states"] > 0   # the suite ran it
    fig = cap.plot_grades({"5 log": g})
    ax = fig.axes[0]
    assert "SIGKILL" in ax.get_title() and ax.get_xlabel().startswith("crash point")
    assert [t.get_text().split("\n")[0] for t in ax.get_yticklabels()] == list(table.index)
    assert "rules broken: 1 of 9" in ax.get_yticklabels()[0].get_text()
    assert "redone model calls" in fig.axes[1].get_xlabel()


@pytest.mark.slow
def test_the_panel_grades_the_file_named_and_reset_forgets(steps):
    p = cap.panel(f"{steps / 'fsync_store.py'}:FsyncStore")
    p.widget()
    g = p.run()
    assert g.broken() == ["fsync-keeps-acknowledged"]
    shown = p.out.outputs[0]["data"]["text/html"]           # the grade in words, then the figure
    assert "fsync the directory" in shown and p.images() and p.status.value
    p.key.value = False
    p.intent.value = False
    assert p.run().summary["duplicate_points"] == 2
    p.reset()
    assert p.status.value == "Reset." and p.key.value is True and not p.out.outputs


@pytest.mark.slow
def test_exercise_9_1_judges_the_store_named_by_grading_it(steps, tmp_path, monkeypatch):
    (tmp_path / "my_store.py").write_text(cap.REFERENCE)
    monkeypatch.chdir(tmp_path)
    assert judge("9.1", "my_store.py:MyStore")
    assert not judge("9.1", f"{steps / 'naive_store.py'}:NaiveStore")
    assert not judge("9.1", 42)


def test_exercise_9_2_grades_the_fsynced_in_place_store_just_now():
    assert len(cap.NAIVE_BROKEN) == 4 and judge("9.2", set(cap.NAIVE_BROKEN))
    assert not judge("9.2", set())
    assert not judge("9.2", {"kill-keeps-acknowledged"})
    assert not judge("9.2", {"no such rule"})


@pytest.mark.slow
def test_the_grader_from_the_command_line(steps, tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "bughunt.grader", *args],
                              capture_output=True, text=True, cwd=steps, timeout=120)
    bad = run("--store", "naive_store.py:NaiveStore")
    assert bad.returncode == 1 and "Not yet." in bad.stderr and "lesson 5" in bad.stderr
    assert bad.stdout == ""                   # the verdict is a sentence: stderr; --json: stdout
    good = run("--store", "repaired_log_store.py:RepairedLogStore", "--json")
    assert good.returncode == 0 and json.loads(good.stdout)["passed"] is True
    missing = run("--store", "nope.py:X")
    assert missing.returncode == 2 and "nope.py: no such file" in missing.stderr
    assert "Traceback" not in missing.stdout + missing.stderr


# --- the comparison adds up; the practice draws what the lesson did not grade ----------------------

def _crash(verdict: str, error=None):
    from types import SimpleNamespace

    return SimpleNamespace(verdict=verdict, error=error, redone_model_calls=1)


def test_the_comparison_rows_partition_the_crash_points_and_a_broken_row_is_refused():
    from bughunt.lab.claims import TableError, checked_rows

    records = [_crash("correct"), _crash("duplicate"), _crash("error", "resume exited 1")]
    row = cap._row("s", records, 1, 10, 9)
    assert sum(row[c] for c in cap.OUTCOMES) == row["crash points"] == 3
    assert row["resumes that ran"] == 2 and row["avg redone calls (resumes that ran)"] == 1
    checked_rows([row], "ok", cap.COMPARE_INVARIANTS)
    # The old table counted a failed resume's lost report as well as its failure: 4 of 3.
    with pytest.raises(TableError, match="does not add up.*crash points"):
        checked_rows([{**row, "lost report": 1}], "stores", cap.COMPARE_INVARIANTS)
    with pytest.raises(TableError, match="rules broken of 9"):
        checked_rows([{**row, "rules broken": 12}], "stores", cap.COMPARE_INVARIANTS)


def test_practice_draws_stores_and_settings_the_lesson_never_grades():
    import ast

    step_sources = set(cap.notebook_stores().values()) | {cap.REFERENCE, cap.FSYNC_IN_PLACE}
    seen = set()
    for seed in range(50):
        p = cap.practice_problem(seed)
        store, settings = p.drawn["store"], p.drawn["settings"]
        source = cap.practice_source(store)
        ast.parse(source)
        assert source not in step_sources
        assert store in cap.PRACTICE_STORES and settings in cap.PRACTICE_SETTINGS
        seen.add((store, tuple(sorted(settings.items())), p.drawn["kind"]))
    assert len(seen) >= 15
    # none of the drawn stores is a step under another name: each flag set differs from every step
    flags = [f for _, f in cap.PRACTICE_STORES.values()]
    assert {"temp_file": False, "fsync_file": False, "fsync_dir": False} not in flags   # naive
    assert {"temp_file": True, "fsync_file": True, "fsync_dir": True} not in flags      # durable
    assert {"temp_file": False, "fsync_file": True, "fsync_dir": True} not in flags     # 9.2
    assert {"fsync": True, "repair": True} not in flags and {"fsync": True, "repair": False} \
        not in flags                                                                   # 5 and 6


def test_the_transfer_is_measured_by_grading_the_drawn_store_now():
    p = cap.TRANSFER
    assert p.drawn["kind"] == "points"
    measured = p.measure()
    assert isinstance(measured.value, int) and 0 < measured.value < 22
    # in place: a kill inside every commit leaves an empty file; no key: page 3's report again
    assert all(f"p{n}.mid_commit (error)" in measured.said for n in range(1, 6))
    assert "p3.after_submit (duplicate)" in measured.said
    assert f"{measured.value} did not recover correctly" in measured.said
    assert judge("9.3", measured.value) and not judge("9.3", measured.value + 1)
