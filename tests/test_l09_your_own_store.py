"""Lesson 9: the grader of a learner's store, and the capstone's steps.

The stores graded here are the notebook's own cells (read from notebooks/src/09_your_own_store.py),
the reference solution, and small stores that misbehave on purpose: each failure of learner code
must end in one sentence, within its time limit, with nothing left running and nothing written
outside the grade's temporary directory.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jupytext
import pytest

from bughunt import grader
from bughunt.grader import DiskProfile, Grade, Problem, RuleResult, choose_hint, disk_profile
from bughunt.lab.lessons import l09_your_own_store as cap
from bughunt.lab import results
from bughunt.lab.judges import judge
from bughunt.stores.contract import RULES

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "src" / "09_your_own_store.py"

POWER = ["power-cut-leaves-a-real-state", "fsync-keeps-acknowledged"]
NAIVE = ["crash-leaves-a-real-state", "kill-keeps-acknowledged", *POWER]


def notebook_stores() -> dict[str, str]:
    """The notebook's `%%writefile NAME` cells: file name -> source."""
    out = {}
    for cell in jupytext.read(NOTEBOOK).cells:
        first, _, rest = cell.source.partition("\n")
        if cell.cell_type == "code" and first.startswith("%%writefile "):
            out[first.split()[1]] = rest
    return out


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


def test_the_lab_stores_pass_the_same_grade():
    for store in ("log", "snapshot"):
        assert grader.grade(store).passed


# --- a grader robust to learner code ------------------------------------------------------------

BASE = '''
import json, os, signal, sys, time
from bughunt.events import initial_state
from bughunt.stores import Recovered, Repairs


class Good:
    """A passing store: a temp file, fsynced, renamed, and the directory fsynced."""

    def __init__(self, run_dir, config, door):
        self.path, self.files, self.config = run_dir / "state.json", door.files, config

    def load(self):
        if not self.path.exists():
            return Recovered(initial_state())
        return Recovered(json.loads(self.path.read_bytes()))

    def open_for_append(self):
        return Repairs()

    def commit(self, state, event, *, mid):
        tmp = self.path.with_name("state.json.tmp")
        fd = self.files.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        self.files.write(fd, json.dumps(state).encode(), str(tmp))
        self.files.fsync(fd, str(tmp))
        self.files.close(fd)
        mid()
        self.files.rename(tmp, self.path)
        self.files.fsync_dir(self.path.parent)

    def close(self):
        pass
'''

BAD = {
    "InitRaises": "def __init__(self, run_dir, config, door):\n    raise KeyError('nope')",
    "CommitRaises": "def commit(self, state, event, *, mid):\n    return state['no such key']",
    "WrongReturn": "def load(self):\n    return {'state': 1}",
    "Spins": "def commit(self, state, event, *, mid):\n    while True:\n        pass",
    "Sleeps": "def load(self):\n    time.sleep(10 ** 6)",
    "HangsInWorker": ("def load(self):\n"
                      "    while (self.path.parent / 'config.json').exists():\n"
                      "        time.sleep(0.01)\n"
                      "    return super().load()"),
    "WritesCwd": ("def commit(self, state, event, *, mid):\n"
                  "    open('state.json', 'w').write('x')"),
    "WritesBeside": ("def commit(self, state, event, *, mid):\n"
                     "    here = os.path.dirname(os.path.abspath(__file__))\n"
                     "    open(os.path.join(here, 'leak.json'), 'w').write('x')"),
    "RemovesParent": ("def open_for_append(self):\n"
                      "    import shutil\n"
                      "    shutil.rmtree(self.path.parent.parent)\n"
                      "    return Repairs()"),
    "PastTheFence": ("def load(self):\n"
                     "    import subprocess\n"
                     "    here = os.path.dirname(os.path.abspath(__file__))\n"
                     "    if not os.path.exists(os.path.join(here, 'bypass.txt')):\n"
                     "        subprocess.run(['sh', '-c', 'echo x > bypass.txt'], cwd=here)\n"
                     "    return super().load()"),
    "Exits": "def commit(self, state, event, *, mid):\n    sys.exit(3)",
    "HardExit": "def commit(self, state, event, *, mid):\n    os._exit(0)",
    "SignalsKernel": ("def load(self):\n"
                      "    os.kill(os.getppid(), signal.SIGWINCH)\n"
                      "    return super().load()"),
}


@pytest.fixture(scope="module")
def bad_file(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("bad")
    body = BASE + "".join(f"\n\nclass {name}(Good):\n{textwrap.indent(method, '    ')}\n"
                          for name, method in BAD.items())
    (folder / "bad.py").write_text(body)
    (folder / "broken.py").write_text("class Store:\n    def load(self) return 1\n")
    (folder / "raises.py").write_text("x = 1 / 0\n")
    (folder / "loops.py").write_text("while True:\n    pass\n")
    return folder / "bad.py"


@pytest.fixture
def deadline():
    """A grade that never returns must fail this test, not hang the suite: SIGALRM after 90 s."""
    import signal

    def expired(signum, frame):
        raise TimeoutError("the grade did not return within 90 s")
    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(90)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def grader_processes(root: Path) -> set[int]:
    """Processes a grade under `root` started (their environment names its folder), Linux only:
    by this grade's own folder, not by a name, since other engineers' grades run beside it."""
    mark = f"{root}/bughunt-grade-".encode()
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                env = Path(f"/proc/{entry}/environ").read_bytes()
            except OSError:
                continue
            if mark in env and int(entry) != os.getpid():
                found.add(int(entry))
    return found


@pytest.mark.parametrize("spec, kind, words", [
    ("missing.py:Store", "spec", "missing.py: no such file"),
    ("no colon", "spec", "expected FILE.py:ClassName"),
    ("broken.py:Store", "load", "broken.py:2: expected ':'"),
    ("raises.py:Store", "load", "importing raises.py raised ZeroDivisionError"),
    ("bad.py:Nope", "load", "bad.py has no class Nope"),
    ("bad.py:InitRaises", "exception",
     "InitRaises.__init__ raised KeyError: 'nope' (bad.py, line"),
    ("bad.py:CommitRaises", "exception",
     "CommitRaises.commit (event 1: page_done, page 1) raised KeyError: 'no such key'"),
    ("bad.py:WrongReturn", "returns", "load() must return a Recovered"),
    ("bad.py:Exits", "exception", "raised SystemExit: 3"),
    ("bad.py:HardExit", "exit", "exited with status 0 before it could report"),
    ("bad.py:WritesCwd", "outside",
     "tried to write state.json, a path relative to the working directory"),
    ("bad.py:WritesBeside", "outside", "tried to write leak.json beside the store's file"),
    ("bad.py:RemovesParent", "outside", "tried to rmtree"),
    ("bad.py:SignalsKernel", "signal", "tried to signal process"),
])
def test_a_store_that_misbehaves_gets_one_sentence_and_one_hint(bad_file, monkeypatch, spec,
                                                                kind, words):
    monkeypatch.chdir(bad_file.parent)              # named as a learner names it, by its file
    before = set(os.listdir(bad_file.parent))
    g = grader.grade(spec, conform_timeout=20, sweep_timeout=20)
    assert [p.kind for p in g.problems][:1] == [kind], g.problems
    assert words in g.problems[0].message, g.problems[0].message
    assert not g.passed and g.verdict.startswith("Not graded to the end.")
    assert g.hint.lesson == 9 and "Traceback" not in g.verdict
    assert str(bad_file.parent) not in g.verdict          # no temporary paths in the words
    assert set(os.listdir(bad_file.parent)) == before      # nothing written beside the store


@pytest.mark.parametrize("spec, limit, words", [
    ("loops.py:Store", "conform_timeout", "importing loops.py did not return within 3 s"),
    ("bad.py:Spins", "conform_timeout",
     "Spins.commit (event 1: page_done, page 1) did not return within 3 s"),
    ("bad.py:Sleeps", "conform_timeout", "Sleeps.load did not return within 3 s"),
    ("bad.py:HangsInWorker", "sweep_timeout", "the sweep did not finish within 3 s"),
])
def test_a_store_that_never_returns_is_stopped_at_its_time_limit_and_leaves_nothing_running(
        bad_file, monkeypatch, deadline, spec, limit, words, tmp_path):
    import time

    monkeypatch.chdir(bad_file.parent)
    monkeypatch.setenv("BUGHUNT_RAM_DIR", str(tmp_path))        # the grade's folder: ours alone
    before = grader_processes(tmp_path) if sys.platform.startswith("linux") else set()
    t0 = time.monotonic()
    g = grader.grade(spec, **{limit: 3})
    elapsed = time.monotonic() - t0
    assert [p.kind for p in g.problems] == ["timeout"], g.problems
    assert words in g.problems[0].message, g.problems[0].message
    assert elapsed < 3 + grader._GRACE_S + 20            # the outer limit holds, loaded or not
    if sys.platform.startswith("linux"):
        assert grader_processes(tmp_path) <= before      # no worker, server or suite left
    if limit == "sweep_timeout":                         # the suite never sees a worker's files:
        assert g.conformance_ok                          # it passed; the hung points are named
        assert "never finished" in g.problems[0].message and "p1." in g.problems[0].message


def test_a_write_past_the_fence_is_found_afterwards_and_said(bad_file, monkeypatch):
    """A shell started by the store is not fenced: the grader cannot stop its write, but finds
    the new file beside the store's own and says so."""
    monkeypatch.chdir(bad_file.parent)
    g = grader.grade("bad.py:PastTheFence")
    try:
        message = " ".join(p.message for p in g.problems if p.kind == "outside")
        assert "bypass.txt" in message and "past the fence" in message
        assert not g.passed and g.conformance_ok    # every rule held: only the write is wrong
    finally:
        (bad_file.parent / "bypass.txt").unlink(missing_ok=True)


def test_the_fence_refuses_writes_outside_its_roots_and_allows_them_inside(tmp_path):
    inside, outside = tmp_path / "inside", tmp_path / "outside"
    inside.mkdir(), outside.mkdir()
    script = textwrap.dedent(f"""
        import os, shutil, sys
        from pathlib import Path
        from bughunt.instruments import sandbox
        sandbox.install([{str(inside)!r}], log={str(inside / 'log.jsonl')!r})
        inside, outside = Path({str(inside)!r}), Path({str(outside)!r})
        (inside / "a").write_text("ok")
        os.replace(inside / "a", inside / "b")
        (inside / "d" / "e").mkdir(parents=True)
        shutil.rmtree(inside / "d")                    # removes by names relative to a dir fd
        results = []
        for attempt in (lambda: (outside / "x").write_text("no"),
                        lambda: os.replace(inside / "b", outside / "b"),
                        lambda: os.remove(outside / "keep"),
                        lambda: shutil.rmtree(outside),
                        lambda: os.kill(os.getppid(), 0)):
            try:
                attempt()
                results.append("allowed")
            except sandbox.OutsideRunDir:
                results.append("refused")
        with sandbox.confine(inside / "c"):
            try:
                (inside / "b").write_text("no")
                results.append("allowed")
            except sandbox.OutsideRunDir:
                results.append("refused")
        print(" ".join(results))
    """)
    (outside / "keep").write_text("keep")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["refused", "refused", "refused", "refused", "allowed",
                                   "refused"]
    assert sorted(os.listdir(outside)) == ["keep"] and (inside / "b").read_text() == "ok"


def test_the_fence_protects_the_pids_it_is_given(tmp_path):
    script = textwrap.dedent(f"""
        import os
        from bughunt.instruments import sandbox
        sandbox.install([{str(tmp_path)!r}], protect=[os.getppid()])
        for pid in (os.getppid(), -os.getppid(), -1):
            try:
                os.kill(pid, 0)
                print("allowed")
            except sandbox.OutsideRunDir:
                print("refused")
        os.kill(os.getpid(), 0)
        print("self")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.stdout.split() == ["refused", "refused", "refused", "self"], proc.stderr


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
                            problems=(Problem("timeout", "X.load did not return within 3 s"),))
    assert choose_hint(g).lesson == 9 and "never returns" in choose_hint(g).text
    assert g.verdict == "Not graded to the end. X.load did not return within 3 s"


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


def test_the_comparison_puts_the_lab_stores_beside_the_learners_with_the_same_settings(steps):
    g = graded(steps, "log_store.py:LogStore")
    table = cap.compare_table({"5 log": g})
    assert list(table.index) == ["5 log", "lab: log + intents + key",
                                 "lab: snapshot + intents + key"]
    assert table.loc["5 log", "rules broken"] == "1 of 9"
    assert table.loc["lab: snapshot + intents + key", "correct"] == 22
    fig = cap.plot_grades({"5 log": g})
    ax = fig.axes[0]
    assert "SIGKILL" in ax.get_title() and ax.get_xlabel().startswith("crash point")
    assert [t.get_text().split("\n")[0] for t in ax.get_yticklabels()] == list(table.index)
    assert "rules broken: 1 of 9" in ax.get_yticklabels()[0].get_text()
    assert "redone model calls" in fig.axes[1].get_xlabel()


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


def test_the_grader_from_the_command_line(steps, tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "bughunt.grader", *args],
                              capture_output=True, text=True, cwd=steps, timeout=120)
    bad = run("--store", "naive_store.py:NaiveStore")
    assert bad.returncode == 1 and "Not yet." in bad.stdout and "lesson 5" in bad.stdout
    good = run("--store", "repaired_log_store.py:RepairedLogStore", "--json")
    assert good.returncode == 0 and '"passed": true' in good.stdout
    missing = run("--store", "nope.py:X")
    assert missing.returncode == 2 and "nope.py: no such file" in missing.stdout
    assert "Traceback" not in missing.stdout + missing.stderr
