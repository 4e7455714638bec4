"""Learning by doing (bughunt.lab.teach and lessons 0-4's practice): the code on screen is the
package's own and free of test switches; predictions are judged exactly or robustly; quiz checks
decide from measurements; diagrams are labelled and grounded in the code they picture."""

import inspect
import re
from pathlib import Path

import pytest
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from bughunt.diskio import Door
from bughunt.durable.store import STATUSES
from bughunt.events import apply_event
from bughunt.lab import practice, teach
from bughunt.lab.exercises import EXERCISES, judge
from bughunt.lab.style import COLORS
from bughunt.world import Tracker

ROOT = Path(__file__).resolve().parent.parent
#: Everything lessons 0-4 put on screen with show_source.
SHOWN = [apply_event, Door.write_atomic, Tracker.submit,
         *(teach.worker_step(n) for n in ("ask_model", "visit_page", "record_intent",
                                          "submit_report", "commit_page", "run_page"))]


# --- the lab's code on screen -------------------------------------------------------------------

@pytest.mark.parametrize("obj", SHOWN, ids=teach.qualified_name)
def test_shown_code_is_the_packages_own_without_paths_or_test_switches(obj):
    shown = teach.show_source(obj)
    markdown, plain = shown._repr_markdown_(), repr(shown)
    assert inspect.getsource(obj).strip().splitlines()[0].strip() in markdown
    assert f"`{teach.qualified_name(obj)}`" in markdown and "```python\n" in markdown
    for text in (markdown, plain):
        assert not re.search(r"/tmp/|/home/|/root/|/Users/|\.py\b", text)
        assert not re.search(r"\bbugs\b|plant", text, re.I)


def test_show_source_refuses_code_that_holds_a_test_switch():
    def page_loop(lab, key):
        return None if "no-key" in lab.bugs else key
    with pytest.raises(ValueError, match="test switch"):
        teach.show_source(page_loop)


def test_show_source_shows_a_slice_by_line_numbers_or_by_text():
    by_text = teach.show_source(apply_event, lines=('elif kind == "page_done"', "return s"))
    assert by_text.code.splitlines()[0] == "# ..."
    assert by_text.code.splitlines()[1].startswith('elif kind == "page_done"')
    assert by_text.code.splitlines()[-1] == "return s"
    assert "lines " in by_text.title and "raise ValueError" not in by_text.code
    first = teach.show_source(apply_event, lines=(1, 2))
    assert first.code.splitlines()[0].startswith("def apply_event") and first.code.endswith("# ...")
    with pytest.raises(ValueError, match="lines="):
        teach.show_source(apply_event, lines=(0, 999))


def test_worker_steps_are_found_by_name_and_an_unknown_name_is_refused():
    for name in ("ask_model", "visit_page", "record_intent", "submit_report", "commit_page"):
        assert teach.worker_step(name).__name__ == name
    with pytest.raises(LookupError, match="no_such_step"):
        teach.worker_step("no_such_step")


def test_the_source_texts_apply_event_is_the_code_shown_and_differs_only_where_the_lesson_says():
    shown = practice.show_text_code("apply_event")
    assert "def apply_event(state, ev):" in shown.code
    table = practice.apply_event_versions()
    assert table.iloc[0, 0] == table.iloc[1, 0]          # same state from the clean log
    assert table.loc["source text"].iloc[1].startswith("ignores it")
    assert table.loc["lab"].iloc[1].startswith("raises ValueError")


# --- predict, then run --------------------------------------------------------------------------

def test_counts_are_judged_exactly():
    assert teach.assess(7, 7).right is True
    assert teach.assess(6, 7).right is False and "off by 1" in teach.assess(6, 7).text
    assert teach.assess(7.0, 7).right is True


def test_true_false_is_not_one_or_zero():
    assert teach.assess(True, True).right is True
    assert teach.assess(1, True).right is False and "True or False" in teach.assess(1, True).text


def test_words_ignore_case_and_quotes_and_lists_are_sets():
    assert teach.assess(" 'After_Visit' ", "after_visit").right is True
    assert teach.assess(["b", "a", "a"], ["a", "b"]).right is True
    assert teach.assess(["a"], ["a", "b"]).right is False
    assert teach.assess("a", ["a"]).right is False


def test_averages_are_judged_within_a_tolerance():
    assert teach.assess(0.75, 0.7647, tolerance=0.05).right is True
    assert teach.assess(0.7, 0.7647, tolerance=0.05).right is False
    assert teach.assess(0.7647, 0.76).right is False         # exact means exact


def test_timings_are_judged_by_order_of_magnitude_or_ratio():
    assert teach.assess(1.0, 0.23, tolerance="magnitude").right is True     # 4.3x: same order
    assert teach.assess(5.0, 0.23, tolerance="magnitude").right is False    # 22x
    assert teach.assess(0.5, 0.23, tolerance=teach.within_factor(3)).right is True
    assert teach.assess(0.8, 0.23, tolerance=teach.within_factor(3)).right is False
    assert "factor" in teach.assess(5.0, 0.23, tolerance="magnitude").text
    with pytest.raises(ValueError):
        teach.within_factor(0.5)


def test_no_prediction_shows_the_measurement_and_judges_nothing(capsys):
    assert teach.assess(None, 12).right is None
    teach.compare(None, 12, what="events")
    out = capsys.readouterr().out
    assert "no prediction yet" in out and "12" in out


# --- exercises of lessons 0-4 (judged from live runs) -------------------------------------------

@pytest.mark.parametrize("id, right, wrong", [
    ("0.2", 12, 15),
    ("2.3", 0.76, 6.51),
    ("3.3", "raise", "ignore"),
    ("3.4", 4, 25),
    ("4.3", 6, 0),
])
def test_practice_exercises_accept_the_measured_answer_and_refuse_a_wrong_one(id, right, wrong):
    assert judge(id, right) and not judge(id, wrong)
    assert not judge(id, [right])


def test_exercise_feedback_shows_prediction_beside_measurement():
    _, text = EXERCISES["4.3"].judge(3)
    assert "you predicted 3, measured 6" in text


# --- common wrong statements --------------------------------------------------------------------

QUIZ_TRUTH = {"Q0.1": False, "Q0.2": False, "Q2.1": False, "Q2.2": False, "Q2.3": True,
              "Q3.1": False, "Q3.2": False, "Q3.3": False, "Q4.1": False, "Q4.2": False,
              "Q4.3": False, "Q4.4": True}


def test_every_lesson_0_to_4_has_quiz_items_registered_as_exercises():
    assert set(QUIZ_TRUTH) <= set(teach.STATEMENTS)
    for id in teach.STATEMENTS:
        assert id in EXERCISES and teach.QUIZ_ID.match(id)
        assert f"*\"{teach.STATEMENTS[id].text}\"*" in teach.quiz(id)._repr_markdown_()


@pytest.mark.parametrize("id", sorted(QUIZ_TRUTH))
def test_quiz_check_judges_by_a_measurement_and_explains_with_it(id):
    truth = QUIZ_TRUTH[id]
    right, feedback = EXERCISES[id].judge(truth)
    assert right, feedback
    assert not EXERCISES[id].judge(not truth)[0]
    assert re.search(r"Measured|Simulated", feedback) and re.search(r"\d", feedback)
    assert f"The statement is {'true' if truth else 'false'}." in feedback


def test_quiz_answers_must_be_true_or_false():
    right, feedback = EXERCISES["Q4.2"].judge("False")
    assert not right and "True or False" in feedback


def test_quiz_verdict_follows_the_measurement_not_a_stored_answer(monkeypatch):
    """If the sweep found no duplicate, "a lock prevents duplicates" would be judged true."""
    monkeypatch.setattr(practice, "duplicate_names", lambda config: [])
    right, feedback = EXERCISES["Q4.2"].judge(True)
    assert right and "0 crash points" in feedback


def test_quiz_ids_must_not_clash_with_lesson_exercises():
    with pytest.raises(ValueError, match="Q4.1"):
        teach.statement("4.9", "x", "y")


# --- diagrams -----------------------------------------------------------------------------------

def texts(fig: Figure) -> str:
    return "\n".join(t.get_text() for ax in fig.axes for t in ax.texts)


def palette_only(fig: Figure) -> None:
    allowed = {to_hex(c) for c in COLORS.values()} | {"#ffffff"}
    for ax in fig.axes:
        for patch in ax.patches:
            if patch.get_facecolor()[3] > 0:
                assert to_hex(patch.get_facecolor(), keep_alpha=False) in allowed


def test_byte_places_diagram_names_each_place_and_what_survives_which_crash():
    fig = teach.plot_byte_places({"write": 0, "flush": 12})
    assert fig.axes[0].get_title()
    t = texts(fig)
    for word in ("user-space buffer", "kernel page cache", "disk", "kill -9", "power loss",
                 "flush()", "fsync()", "0 bytes", "12 after flush()"):
        assert word in t
    assert t.count("✓ survives") == 3 and t.count("✗ lost") == 3
    palette_only(fig)


def test_danger_window_diagram_names_the_operations_and_the_crash_points():
    from bughunt.crashpoints import scheme
    for intent in (True, False):
        fig = teach.plot_danger_window(intent=intent)
        assert "danger window" in fig.axes[0].get_title()
        t = texts(fig)
        assert "report filed, page not committed" in t
        for op in ("model call", "visit", "submit", "commit"):
            assert op in t
        assert ("intent" in t.split("\n")) is intent
        for p in (p for p in scheme(12, [3, 7, 10], intent) if p.page == 3):
            assert p.name in t
        palette_only(fig)
    with pytest.raises(ValueError, match="no bug"):
        teach.plot_danger_window(page=4)


def test_task_state_diagram_draws_every_status_and_transition():
    fig = teach.plot_task_states()
    assert fig.axes[0].get_title()
    t = texts(fig).replace("\n", " ")
    for status in STATUSES:
        assert status in t
    for _src, _dst, label, _code, _line in teach.TASK_TRANSITIONS:
        assert label.replace("\n", " ") in t
    palette_only(fig)


@pytest.mark.parametrize("src, dst, label, code, line", teach.TASK_TRANSITIONS,
                         ids=[t[2].split("\n")[0] for t in teach.TASK_TRANSITIONS])
def test_each_drawn_transition_is_implemented_by_the_code_it_names(src, dst, label, code, line):
    assert line in inspect.getsource(teach.resolve(code))


def test_a_crash_recovery_and_a_clean_close_both_lead_back_to_pending_and_only_recover_counts():
    recover = inspect.getsource(teach.resolve("bughunt.durable.store.DurableStore.recover"))
    close = inspect.getsource(teach.resolve("bughunt.durable.store.DurableStore.close"))
    assert '"restarts"' in recover and '"restarts"' not in close


# --- lesson 3: the atomic write under power loss ------------------------------------------------

def test_only_fsync_rename_and_directory_fsync_leave_the_new_file_after_a_power_cut():
    t = practice.power_cut_after_write()
    lab = t.loc["lab: fsync, rename, fsync dir"]
    assert lab["disk states: old file"] == 0 and lab["disk states: empty or torn file"] == 0
    assert lab["disk states: new file"] > 0 and lab["fsyncs"] == 2
    assert t.loc["source text: fsync, rename", "disk states: old file"] > 0
    assert t.loc["source text: fsync, rename", "disk states: empty or torn file"] == 0
    assert t.loc["rename only", "disk states: empty or torn file"] > 0


# --- the glossary -------------------------------------------------------------------------------

GLOSSARY = ROOT / "notebooks" / "glossary.md"


def glossary_rows():
    rows = [line for line in GLOSSARY.read_text(encoding="utf-8").splitlines()
            if line.startswith("| ") and not line.startswith("| English") and "---" not in line]
    return [[c.strip() for c in r.strip("|").split("|")] for r in rows]


def test_glossary_rows_give_term_chinese_definition_and_lesson():
    terms = [r for r in glossary_rows() if len(r) == 4]
    assert len(terms) >= 40
    for english, chinese, definition, lesson in terms:
        assert english and chinese and len(definition.split()) >= 5, english
        assert re.search(r"\]\(\d\d_\w+\.ipynb\)", lesson), english


def test_glossary_links_point_to_notebooks_that_exist():
    for link in re.findall(r"\]\(([^)#]+\.ipynb)\)", GLOSSARY.read_text(encoding="utf-8")):
        assert (ROOT / "notebooks" / link).exists(), link


def glossary_chinese() -> str:
    """The Chinese column of the definition rows (not the index at the end)."""
    return "\n".join(r[1] for r in glossary_rows() if len(r) == 4)


def test_glossary_defines_the_source_texts_core_terms():
    text = glossary_chinese()
    for term in ("危险窗口", "幂等键", "崩溃点", "快照", "事件日志", "撕裂写", "补换行", "三方一致",
                 "至少一次", "至多一次", "效果上恰好一次", "检查点", "续跑", "原子", "压缩",
                 "页缓存", "用户态缓冲区", "三的法则", "意图", "只认第一次写入"):
        assert term in text, term
