"""Lesson 10's lab layer: the predict-then-run exercises and the common wrong statements, each
judged by real LangGraph and DBOS processes killed by SIGKILL (sweeps cached per process, as in a
kernel)."""

import re

import pytest

from bughunt.lab.lessons import l10_frameworks as fw
from bughunt.lab.judges import EXERCISES, judge
from bughunt.lab.views import show_source


@pytest.mark.slow
def test_exercise_10_1_counts_the_duplicates_right_after_each_report():
    assert judge("10.1", 3) and not judge("10.1", 0) and not judge("10.1", 27)
    assert not judge("10.1", "3")
    right, feedback = EXERCISES["10.1"].judge(3)
    assert "submit.after#1, submit.after#2, submit.after#3" in feedback
    assert "27 points of the agent's code" in feedback


@pytest.mark.slow
def test_exercise_10_2_an_empty_next_taken_for_done_loses_every_report():
    assert judge("10.2", 3) and not judge("10.2", 0) and not judge("10.2", 1)
    right, feedback = EXERCISES["10.2"].judge(3)
    assert fw.NEXT_EMPTY_POINT in feedback and "the tracker holds pages []" in feedback


def test_practice_draws_designs_lengths_and_points_the_lesson_never_runs():
    ran = {*fw.FRAMEWORKS.values(), *fw.RESUMES.values()}
    seen = set()
    for seed in range(50):
        design, settings, point, kind = fw.practice_settings(seed)
        assert settings.pages != fw.PAGES                 # every sweep of the lesson: 12 pages
        assert settings not in ran and (settings.framework, settings.mode) in \
            set(fw.PRACTICE_DESIGNS.values())
        name, occurrence = point.split("#")
        assert name in ("ask_model.after", "visit.after", "submit.after") and int(occurrence) >= 1
        p = fw.practice_problem(seed)
        assert point in p.setting and p.drawn["kind"] == kind
        seen.add((design, settings, point, kind))
    assert len(seen) >= 30


@pytest.mark.slow
def test_transfer_10_3_is_the_practice_problem_measured_live():
    p = fw.TRANSFER
    assert p.seed == fw.TRANSFER_SEED and p.drawn["settings"]["pages"] != fw.PAGES
    measured = p.measure()
    assert judge("10.3", measured.value) and not judge("10.3", measured.value + 1)


@pytest.mark.slow
def test_exercise_10_4_sweeps_the_learners_adapter_as_the_file_is_now(tmp_path, monkeypatch):
    import jupytext

    cells = [c.source for c in jupytext.read(fw.Path(__file__).resolve().parents[1] / "notebooks"
                                             / "src" / "10_frameworks.py").cells
             if c.source.startswith("%%writefile my_adapter.py")]
    (tmp_path / "my_adapter.py").write_text(cells[0].partition("\n")[2])
    monkeypatch.chdir(tmp_path)
    assert judge("10.4", 7) and not judge("10.4", 3)
    right, feedback = EXERCISES["10.4"].judge(7)
    assert "submit.after#1, ask_model.after#4, visit.after#4" in feedback
    # An edited adapter (a checkpoint after every page) is swept afresh: page 3's report is then
    # remembered by page 3's own checkpoint, so only the points right after each report repeat.
    (tmp_path / "my_adapter.py").write_text(
        (tmp_path / "my_adapter.py").read_text().replace("page % 2 == 0", "True"))
    assert judge("10.4", 3)
    monkeypatch.chdir(tmp_path / "..")
    right, feedback = EXERCISES["10.4"].judge(3)
    assert not right and "my_adapter.py" in feedback


QUIZ_10 = {"Q10.1": False, "Q10.2": False, "Q10.3": False}


@pytest.mark.slow
@pytest.mark.parametrize("id", sorted(QUIZ_10))
def test_quiz_10_is_judged_by_the_sweeps_and_explained_with_them(id):
    truth = QUIZ_10[id]
    right, feedback = EXERCISES[id].judge(truth)
    assert right, feedback
    assert f"The statement is {'true' if truth else 'false'}." in feedback
    assert "Measured just now" in feedback and re.search(r"\d", feedback)
    assert not EXERCISES[id].judge(not truth)[0] and not EXERCISES[id].judge("False")[0]


@pytest.mark.slow
def test_q10_1_names_the_duplicates_of_both_frameworks():
    feedback = EXERCISES["Q10.1"].judge(False)[1]
    assert "LangGraph sync filed a report twice at 3 of 27" in feedback
    assert "DBOS (workflow ID) filed a report twice at 3 of 27" in feedback


def test_q10_2_a_kill_before_the_commit_files_the_report_again():
    feedback = EXERCISES["Q10.2"].judge(False)[1]
    assert "framework.step_output.submit.uncommitted#1" in feedback
    assert "1 duplicate report(s)" in feedback and "verdict duplicate" in feedback


def test_the_code_shown_in_lesson_10_is_the_packages_own_and_holds_no_test_switch():
    from bughunt.frameworks import dbos_agent, fake, langgraph_agent
    for obj in (langgraph_agent.build_graph, dbos_agent.submit, dbos_agent.bughunt,
                langgraph_agent.resume_documented, langgraph_agent.resume_next_empty_is_done,
                fake.FakeFramework):
        shown = show_source(obj)
        assert re.search(rf"^(def|class) {obj.__name__}\b", shown.code, re.M)
    assert "invoke(None" in show_source(langgraph_agent.resume_documented).code


@pytest.mark.slow
def test_q10_3_reinvoking_with_the_input_leaves_a_wrong_memory_the_documented_resume_does_not():
    feedback = EXERCISES["Q10.3"].judge(False)[1]
    assert re.search(r"re-invoked with the input, the resumed memory was wrong at [1-9]\d* of",
                     feedback)
    assert re.search(r"resumed the documented way, wrong at 0 of \d+, at most 1 call", feedback)


def test_the_adapters_copies_go_with_the_process_that_made_them_even_by_sigkill(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    (tmp_path / "a_adapter.py").write_text("x = 1\n")
    code = ("from bughunt.lab.lessons import l10_frameworks as fw\n"
            "print(fw.adapter_spec('a_adapter.py:X'), fw._ADAPTERS['dir'], flush=True)\n"
            "import time; time.sleep(60)\n")
    p = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, stdout=subprocess.PIPE,
                         text=True)
    spec, folder = p.stdout.readline().split()
    assert spec.startswith("a_adapter_") and os.path.isfile(
        os.path.join(folder, spec.partition(":")[0] + ".py"))
    p.send_signal(signal.SIGKILL)           # nbval ends a kernel this way: no atexit runs
    p.wait()
    deadline = time.monotonic() + 15
    while os.path.exists(folder) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not os.path.exists(folder)
