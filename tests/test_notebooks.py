"""The committed notebooks: in sync with their sources, linked, and free of unstable outputs.

(Executing them and comparing every stored output is nbval's job in `make test`.)
"""

import json
import re
from pathlib import Path

import jupytext
import pytest

from bughunt.lab import registry
from bughunt.lab.regen import MARKER, read_source

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
SOURCES = sorted((NOTEBOOKS / "src").glob("[0-9][0-9]_*.py"))
BUILT = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
LESSONS = registry.lessons()


def cells(path):
    return json.loads(path.read_text())["cells"]


def test_every_source_has_its_built_notebook_and_its_lesson_and_back():
    assert [p.stem for p in SOURCES] == [p.stem for p in BUILT]
    assert [p.stem for p in SOURCES] == [x.notebook for x in LESSONS]
    assert len(BUILT) >= 7


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.stem)
def test_built_notebook_matches_its_source(src):
    """Every cell of the built notebook is its source's, with the registry's links and tables where
    the source has a marker: a stale notebook, or a lesson renamed in its record, fails here."""
    want = [c.source for c in read_source(src).cells]
    got = ["".join(c["source"]) for c in cells(NOTEBOOKS / f"{src.stem}.ipynb")]
    assert got == want, f"{src.stem}.ipynb is out of date: run `make regen NB={src.stem[:2]}`"


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.stem)
def test_what_lists_lessons_is_a_marker_in_the_source_never_typed_in(src):
    text = "\n".join(c.source for c in jupytext.read(src).cells if c.cell_type == "markdown")
    this = registry.by_notebook(src.stem)
    kinds = MARKER.findall(text)
    assert kinds[0] == "header" and kinds[-1] == "nav", kinds
    assert ("about" in kinds) is bool(this.objectives)
    assert ("table" in kinds) is (this.kind == "start")
    assert "[←" not in text and "→](" not in text      # a prev/next link is the registry's to write


def test_the_readme_table_of_lessons_is_the_registrys():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert registry.readme_table() in readme, "run `make regen` (or regen --links)"


def test_the_graders_hints_name_each_lesson_as_its_record_does():
    """The grader (a terminal command, below the lab) keeps its own short list of lessons for its
    hints; it must not drift from the registry."""
    from bughunt.grader import LESSONS as HINTED

    for number, (notebook, title) in HINTED.items():
        this = registry.by_number(number)
        assert (notebook, title) == (this.file, this.short_title), number


@pytest.mark.parametrize("nb", BUILT, ids=lambda p: p.stem)
def test_links_point_to_notebooks_that_exist(nb):
    text = "".join("".join(c["source"]) for c in cells(nb) if c["cell_type"] == "markdown")
    links = re.findall(r"\]\(([^)#]+\.ipynb)\)", text)
    assert links, "no links to other lessons"
    missing = [link for link in links if not (NOTEBOOKS / link).exists()]
    assert not missing


@pytest.mark.parametrize("nb", BUILT, ids=lambda p: p.stem)
def test_stored_outputs_hold_no_paths_errors_or_stale_widgets(nb):
    for cell in cells(nb):
        if cell["cell_type"] != "code":
            continue
        tags = cell["metadata"].get("tags", [])
        if "panel" in tags:
            # a picture of the panel as it was built, for viewers that cannot run widgets
            assert "nbval-ignore-output" in tags and cell["outputs"], cell["source"]
            note = "".join(cell["outputs"][0]["data"]["text/markdown"])
            assert note.startswith("*The panel as it was when this notebook was built")
            assert any("image/png" in o.get("data", {}) for o in cell["outputs"]), cell["source"]
            assert not any("application/vnd.jupyter.widget-view+json" in o.get("data", {})
                           for o in cell["outputs"])
        for out in cell["outputs"]:
            assert out["output_type"] != "error", cell["source"]
            text = json.dumps({k: v for k, v in out.get("data", {}).items() if k != "image/png"})
            text += "".join(out.get("text", ""))
            assert not re.search(r"/tmp/|/root/|/home/|Traceback|Error displaying widget", text)


@pytest.mark.parametrize("nb", [NOTEBOOKS / x.file for x in LESSONS
                                if x.kind in ("lesson", "closing")], ids=lambda p: p.stem)
def test_each_lesson_ends_with_what_to_remember_and_an_exercise_check(nb):
    sources = ["".join(c["source"]) for c in cells(nb)]
    assert any("## What to remember" in s for s in sources)
    assert any(re.search(r'^check\("\d+\.\d+"', s, re.M) for s in sources)
    assert any("Start here" in s or "00_start_here" in s for s in sources)


def test_start_here_links_every_lesson():
    text = "".join("".join(c["source"]) for c in cells(NOTEBOOKS / "00_start_here.ipynb"))
    for nb in BUILT[1:]:
        assert f"({nb.name})" in text, nb.name


# --- the product stands alone, and says what it shows ----------------------------------------

#: Places a learner does not have: the team's notes beside the repository.
OUTSIDE = re.compile(r"\.\./shared|shared/research|our research notes|our notes|research notes?\b",
                     re.I)


def product_files():
    files = [*NOTEBOOKS.glob("src/*.py"), *NOTEBOOKS.glob("*.ipynb"), ROOT / "README.md"]
    files += sorted((ROOT / "bughunt").rglob("*.py"))
    return sorted(set(files))


@pytest.mark.parametrize("path", product_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_nothing_points_to_files_outside_the_repository(path):
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        assert not OUTSIDE.search(line), f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}"


#: Colour words that name no colour the lab draws (its palette's words: bughunt.lab.style.COLOR_WORDS).
COLOUR_WORD = re.compile(r"\b(red|orange|green|blue|sky blue|yellow|purple|pink|violet|magenta|"
                         r"brown|cyan|grey|gray|black|vermillion)\b(?!-box)", re.I)


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.stem)
def test_colour_words_in_prose_name_colours_of_the_palette(src):
    from bughunt.lab.style import COLOR_WORDS
    allowed = set(COLOR_WORDS.values())
    for cell in read_source(src).cells:
        if cell.cell_type != "markdown":
            continue
        text = re.sub(r"https?://\S+", "", cell.source)
        for word in COLOUR_WORD.findall(text):
            assert word.lower() in allowed, (
                f"{src.name}: '{word}' names no colour of the palette; say one of {sorted(allowed)}")


def test_lesson_8_fault_tables_name_a_file_in_every_row():
    """The "failing file" column once read `the` for the run directory (k = 2 and 3)."""
    for cell in cells(NOTEBOOKS / "08_beyond.ipynb"):
        for out in cell.get("outputs", []):
            text = "".join(out.get("data", {}).get("text/plain", ""))
            if "failing file" in text:
                assert not re.search(r"^\s*\d+\s+the\s+\d", text, re.M), text


# --- learning by doing: every lesson with a quiz; the scaffolding: every lesson with objectives ---

#: The lessons that ask for predictions and end with common wrong statements (their records hold
#: quiz items); the closing runs no new experiment: the same scaffolding, no quiz of its own.
LEARN_BY_DOING = [x.notebook for x in LESSONS if x.quiz]
SCAFFOLDED = [x.notebook for x in LESSONS if x.objectives]
GLOSSARY = NOTEBOOKS / "glossary.md"


def test_the_lists_of_lessons_hold_what_the_records_say():
    assert "13_closing" in SCAFFOLDED and "13_closing" not in LEARN_BY_DOING
    assert len(LEARN_BY_DOING) == len(LESSONS) - 2       # not the closing, not the appendix


def markdown_cells(stem):
    """The markdown a learner reads: the source's, with the registry's text filled in."""
    return [c.source for c in read_source(NOTEBOOKS / "src" / f"{stem}.py").cells
            if c.cell_type == "markdown"]


@pytest.mark.parametrize("stem", SCAFFOLDED)
def test_lesson_states_objectives_prerequisites_time_and_links_the_glossary(stem):
    text = "\n".join(markdown_cells(stem))
    for part in ("**Learning objectives", "**Prerequisites.**", "**Estimated", "**Contents.**",
                 "## Further reading"):
        assert part in text, part
    assert stem not in LEARN_BY_DOING or "## Common wrong statements" in text
    assert "](glossary.md)" in text
    reading = text[text.index("## Further reading"):]
    assert len(re.findall(r"\]\(https://", reading)) >= 2


@pytest.mark.parametrize("stem", SCAFFOLDED)
def test_no_markdown_cell_runs_past_twenty_lines(stem):
    for source in markdown_cells(stem):
        assert len(source.splitlines()) <= 20, source.splitlines()[0]


@pytest.mark.parametrize("stem", LEARN_BY_DOING)
def test_predictions_are_written_down_before_the_experiment_that_checks_them(stem):
    code = [c.source for c in jupytext.read(NOTEBOOKS / "src" / f"{stem}.py").cells
            if c.cell_type == "code"]
    for i, source in enumerate(code):
        for name in re.findall(r'^check\("[\d.]+", (prediction_\w+)\)', source, re.M):
            made = next(j for j, s in enumerate(code) if re.search(rf"^{name} = ", s, re.M))
            assert made < i, f"{name} is set in the cell that checks it"
    assert any(re.search(r'^check\("Q\d+\.\d+", answer_q', s, re.M) for s in code)
    assert any(re.search(r'^quiz\("Q\d+\.\d+"\)', s, re.M) for s in code)


@pytest.mark.parametrize("stem", SCAFFOLDED)
def test_every_chinese_term_a_lesson_introduces_is_in_the_glossary(stem):
    rows = [line.split("|") for line in GLOSSARY.read_text(encoding="utf-8").splitlines()
            if line.count("|") == 5]                      # | English | 中文 | meaning | lesson |
    glossary = "\n".join(cells[2] for cells in rows)
    for source in markdown_cells(stem):
        for term in re.findall(r"[(（]([\u4e00-\u9fff]{2,8})[)）]", source):
            assert term in glossary, term


def test_the_test_run_puts_the_notebook_folder_back_as_it_found_it(tmp_path):
    """What lesson 9's %%writefile cells leave under nbval is removed after the run, and a
    learner's own file of the same name is written back (tests/conftest.py)."""
    from conftest import folder_state, put_back

    (tmp_path / "naive_store.py").write_text("# the learner's own\n")
    (tmp_path / "09_your_own_store.ipynb").write_text("{}")
    (tmp_path / "src").mkdir()
    before = folder_state(tmp_path)
    (tmp_path / "naive_store.py").write_text("# written by the notebook\n")
    (tmp_path / "rename_store.py").write_text("# written by the notebook\n")
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "x").write_text("x")
    (tmp_path / "09_your_own_store.ipynb").unlink()
    assert put_back(tmp_path, before) == ["rename_store.py", "runs", "09_your_own_store.ipynb",
                                          "naive_store.py"]
    assert folder_state(tmp_path) == before
    assert (tmp_path / "naive_store.py").read_text() == "# the learner's own\n"
    assert put_back(tmp_path, before) == []                  # twice is the same as once


@pytest.mark.parametrize("nb", BUILT, ids=lambda p: p.stem)
def test_every_section_link_in_a_notebook_names_one_of_its_headings(nb):
    """A `[text](#Anchor)` link opens the section JupyterLab gives that id (the heading's text
    with each space a hyphen): a heading renamed without its contents line is a dead link."""
    from bughunt.book import jupyterlab_anchor

    markdown = ["".join(c["source"]) for c in cells(nb) if c["cell_type"] == "markdown"]
    headings = {jupyterlab_anchor(m.group(1).strip())
                for text in markdown for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}
    dead = sorted({m.group(1) for text in markdown
                   for m in re.finditer(r"\]\(#((?:[^()\s]|\([^()\s]*\))+)\)", text)} - headings)
    assert not dead, f"{nb.name}: links to no heading: {dead}"
