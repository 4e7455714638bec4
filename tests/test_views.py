"""The lab's code on screen: it is the package's own, free of test switches and of this machine's
paths, sliced by lines or text; the source texts' code is shown as they quote it."""

import inspect
import re

import pytest

from bughunt.diskio import Door
from bughunt.events import apply_event
from bughunt.lab import views
from bughunt.world import Tracker

#: Everything lessons 0-4 put on screen with show_source.
SHOWN = [apply_event, Door.write_atomic, Tracker.submit,
         *(views.worker_step(n) for n in ("ask_model", "visit_page", "record_intent",
                                          "submit_report", "commit_page", "run_page"))]


# --- the lab's code on screen -------------------------------------------------------------------

@pytest.mark.parametrize("obj", SHOWN, ids=views.qualified_name)
def test_shown_code_is_the_packages_own_without_paths_or_test_switches(obj):
    shown = views.show_source(obj)
    markdown, plain = shown._repr_markdown_(), repr(shown)
    assert inspect.getsource(obj).strip().splitlines()[0].strip() in markdown
    assert f"`{views.qualified_name(obj)}`" in markdown and "```python\n" in markdown
    for text in (markdown, plain):
        assert not re.search(r"/tmp/|/home/|/root/|/Users/|\.py\b", text)
        assert not re.search(r"\bbugs\b|plant", text, re.I)


def test_show_source_refuses_code_that_holds_a_test_switch():
    def page_loop(lab, key):
        return None if "no-key" in lab.bugs else key
    with pytest.raises(ValueError, match="test switch"):
        views.show_source(page_loop)


def test_show_source_shows_a_slice_by_line_numbers_or_by_text():
    by_text = views.show_source(apply_event, lines=('elif kind == "page_done"', "return s"))
    assert by_text.code.splitlines()[0] == "# ..."
    assert by_text.code.splitlines()[1].startswith('elif kind == "page_done"')
    assert by_text.code.splitlines()[-1] == "return s"
    assert "lines " in by_text.title and "raise ValueError" not in by_text.code
    first = views.show_source(apply_event, lines=(1, 2))
    assert first.code.splitlines()[0].startswith("def apply_event") and first.code.endswith("# ...")
    with pytest.raises(ValueError, match="lines="):
        views.show_source(apply_event, lines=(0, 999))


def test_worker_steps_are_found_by_name_and_an_unknown_name_is_refused():
    for name in ("ask_model", "visit_page", "record_intent", "submit_report", "commit_page"):
        assert views.worker_step(name).__name__ == name
    with pytest.raises(LookupError, match="no_such_step"):
        views.worker_step("no_such_step")


def test_every_source_text_snippet_is_shown_under_its_own_heading_in_its_language():
    from bughunt.lab.reference import TEXT_CODE

    for name, quoted in TEXT_CODE.items():
        shown = views.show_text_code(name)
        assert shown.title == quoted.title and f"```{quoted.language}\n" in shown._repr_markdown_()
        assert shown.code == quoted.code.strip("\n")
    with pytest.raises(KeyError, match="no source-text code"):
        views.show_text_code("no_such_snippet")
