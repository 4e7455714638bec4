"""The lesson registry: one module per lesson, one record each, and everything that lists lessons
reads it (the app's tabs, the closing's links, lesson 0's table, the prev/next lines, the README,
the tests). A lesson added as one module shows up in all of them."""

import subprocess
import sys
import textwrap

import pytest

from bughunt.lab import registry
from bughunt.lab.app import App

LESSONS = registry.lessons()


def test_every_lesson_module_is_found_by_its_name_and_numbered_in_order():
    numbers = [x.number for x in LESSONS]
    assert numbers == sorted(set(numbers)) and numbers[0] == 0 and len(numbers) >= 14
    assert LESSONS[0].kind == "start" and LESSONS[-1].kind == "appendix"
    assert [x.kind for x in LESSONS].count("closing") == 1
    assert len({x.short_title for x in LESSONS}) == len(LESSONS)
    for x in LESSONS:
        assert registry.by_number(x.number) is x and registry.by_notebook(x.notebook) is x


def test_each_record_lists_exactly_the_exercises_its_module_declares():
    from bughunt.lab.judges import EXERCISES, lesson_number

    listed = [e.id for x in LESSONS for e in x.exercises]
    assert len(listed) == len(set(listed)) and set(listed) == set(EXERCISES)
    for x in LESSONS:
        assert all(lesson_number(e.id) == x.number for e in x.exercises), x.notebook
        assert all(e.id.startswith("Q") for e in x.quiz)


def test_a_check_finds_its_lesson_without_the_notebook_importing_it():
    code = ("from bughunt.lab.judges import check, EXERCISES; import sys; "
            "assert 'bughunt.lab.lessons.l05_torn_writes' not in sys.modules; "
            "check('Q5.3', None); "
            "assert 'bughunt.lab.lessons.l06_kill9_vs_power_loss' not in sys.modules")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Exercise Q5.3: no answer yet.")


def test_an_unknown_exercise_is_refused_by_name():
    from bughunt.lab.judges import find_exercise

    with pytest.raises(KeyError, match="no exercise '5.99' in lesson 5"):
        find_exercise("5.99")
    with pytest.raises(KeyError, match="not an exercise id"):
        find_exercise("lesson five")


def test_the_apps_tabs_are_the_lessons_with_a_tab_titled_by_their_records():
    app = App()
    want = [x for x in LESSONS if x.panel is not None and (x.in_app or x.app_panel)]
    assert app.titles() == [x.tab_title for x in want]
    assert list(app.tabs.tooltips) == [x.heading for x in want]       # the full title on hover
    assert app.titles()[0] == "1 · killed at page 7" and "5 · torn writes" in app.titles()
    # Lesson 9's tab grades one of its notebook's steps, not the file its notebook's panel names.
    nine = app.lessons.index(registry.by_number(9))
    assert app.titles()[nine] == "9 · your own store"
    assert app.lessons[nine].app_tab is not app.lessons[nine].panel


def test_the_closings_checklist_links_each_item_to_its_lessons_notebook():
    from bughunt.lab.lessons import l13_closing as closing

    assert closing._link(4) == "[lesson 4](04_danger_window.ipynb)"


def test_prev_next_lines_walk_the_lessons_in_order():
    lines = {x.number: registry.nav_line(x, LESSONS) for x in LESSONS}
    assert lines[0] == ("[Glossary](glossary.md) · "
                        "[Lesson 1: killed at page 7 →](01_killed_at_page_7.ipynb)")
    assert lines[1].startswith("[← Start here](00_start_here.ipynb) · [Glossary]")
    assert lines[5] == ("[← Lesson 4: the danger window](04_danger_window.ipynb) · "
                        "[Start here](00_start_here.ipynb) · [Glossary](glossary.md) · "
                        "[Lesson 6: kill -9 vs power loss →](06_kill9_vs_power_loss.ipynb)")
    assert lines[registry.APPENDIX].endswith("[Glossary](glossary.md)")      # the last: no next


def test_objectives_are_wrapped_without_a_line_markdown_would_read_as_a_list():
    about = registry.about(registry.by_number(9))
    for line in about.splitlines():
        assert not line.startswith(("-9", "+ ", "# ")), line
    assert about.count("\n- ") == len(registry.by_number(9).objectives)


def test_a_record_whose_notebook_does_not_match_its_number_is_refused():
    with pytest.raises(ValueError, match="must start with 07_"):
        registry.Lesson(number=7, notebook="08_beyond", title="t", short_title="s",
                        question="q", teaches="t")
    with pytest.raises(ValueError, match="kind 'chapter'"):
        registry.Lesson(number=7, notebook="07_x", title="t", short_title="s", question="q",
                        teaches="t", kind="chapter")


THROWAWAY = '''
"""A throwaway lesson: proof that one module is all the registry needs."""
from bughunt.lab.judges import defined_in, exercise
from bughunt.lab.registry import Lesson


@exercise("98.1", "How many lessons does it take?", "One module.")
def _ex_98_1(answer):
    return answer == 1, "One module and one notebook source."


def panel():
    from bughunt.lab.lessons import l02_granularity
    return l02_granularity.panel()


LESSON = Lesson(number=98, notebook="98_throwaway", title="A throwaway lesson",
                short_title="throwaway", question="Does one module add a lesson?",
                teaches="nothing: it proves the registry", panel=panel,
                exercises=defined_in(__name__))
'''


@pytest.fixture
def throwaway(tmp_path, monkeypatch):
    """Lesson 98 as one more module on the lessons package's path (removed afterwards)."""
    from bughunt.lab import judges, lessons

    (tmp_path / "l98_throwaway.py").write_text(textwrap.dedent(THROWAWAY))
    monkeypatch.setattr(lessons, "__path__", [*lessons.__path__, str(tmp_path)])
    yield registry.by_number(98)
    sys.modules.pop("bughunt.lab.lessons.l98_throwaway", None)
    judges.EXERCISES.pop("98.1", None)


def test_a_lesson_added_as_one_module_joins_every_list(throwaway):
    every = registry.lessons()
    assert [x.number for x in every][-2:] == [98, registry.APPENDIX]
    before = every[-3]
    assert "| 98 | [Throwaway](98_throwaway.ipynb) | Does one module add a lesson? |" in \
        registry.lessons_table(every)
    assert "| 98 | `98_throwaway` | nothing: it proves the registry |" in registry.readme_table(every)
    appendix = registry.by_number(registry.APPENDIX)
    assert "[Lesson 98: throwaway →](98_throwaway.ipynb)" in registry.nav_line(before, every)
    assert "[← Lesson 98: throwaway](98_throwaway.ipynb)" in registry.nav_line(appendix, every)
    assert App(every).lessons[-1] is throwaway
    from bughunt.lab.judges import judge
    assert judge("98.1", 1) and not judge("98.1", 2)
