"""The app's page (`make app`) without a browser: its tabs from the registry, lesson 9's tab that
grades a step of the capstone read from the notebook (tests/test_browser.py drives it in
Chromium)."""

from __future__ import annotations

import ast
import re
import tempfile
from pathlib import Path

import pytest

from bughunt.lab import registry
from bughunt.lab.app import App
from bughunt.lab.capstone_steps import StepPanel, grade_step, steps_of

CAPSTONE = registry.by_number(9)
SOURCE = Path(__file__).resolve().parents[1] / "notebooks" / "src" / f"{CAPSTONE.notebook}.py"


def test_the_steps_are_the_notebooks_writefile_cells_that_say_step_n():
    steps = steps_of(CAPSTONE.notebook)
    text = SOURCE.read_text(encoding="utf-8")
    files = re.findall(r"^# %%writefile (\S+\.py)\n\"\"\"Step \d+:", text, re.M)
    assert [s.file for s in steps] == files and len(steps) >= 2
    assert [s.number for s in steps] == sorted(s.number for s in steps)
    for s in steps:
        module = ast.parse(s.source)
        assert ast.get_docstring(module).startswith(f"Step {s.number}: ")
        assert s.class_name in {n.name for n in module.body if isinstance(n, ast.ClassDef)}


@pytest.mark.slow
def test_a_step_that_imports_an_earlier_one_is_graded_and_its_folder_removed(monkeypatch,
                                                                             tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    steps = steps_of(CAPSTONE.notebook)
    later = next(s for s in steps if re.search(rf"^from {steps[0].file[:-3]} import", s.source,
                                               re.M))
    first, graded = grade_step(steps[0], steps), grade_step(later, steps)
    assert not first.problems and not graded.problems         # both found, imported, graded
    assert graded.store == later.store and first.store == steps[0].store
    assert first.broken() and first.broken() != graded.broken()
    assert list(tmp_path.iterdir()) == []                      # the step files' folder is gone


@pytest.mark.slow
def test_the_capstone_tab_grades_the_step_picked_and_shows_its_file():
    panel = StepPanel(CAPSTONE.notebook)
    steps = panel.steps
    panel.show()
    assert panel.last is None and "Pick a step" in panel.status.value   # nothing graded yet
    panel.controls["step"].value = steps[-1].number
    assert steps[-1].file in panel.code.value and "class " in panel.code.value
    panel.run_button.click()
    assert panel.error is None and panel.last.store == steps[-1].store
    assert panel.status.value == panel.last.verdict.split(". ")[0].rstrip(".") + "."
    panel.reset()
    assert panel.controls["step"].value == steps[0].number and steps[0].file in panel.code.value


def test_the_app_has_one_heading_and_the_labs_stylesheet():
    header = App().header.value
    assert len(re.findall(r"<h[1-6]", header)) == 1 and "<h1>BugHunt Recovery Lab</h1>" in header
    assert "white-space: pre !important" in header
