"""`make book`: the workbook as a static site, built offline from the stored notebooks.

The whole book is built once per session (conftest's `book`), with every network connection of the
build refused; these tests read the built pages. tests/test_browser.py opens them in Chromium.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from bughunt import book as bk
from conftest import BOOK_REPOSITORY, OFFLINE, ROOT, build_book

NOTEBOOKS = ROOT / "notebooks"


class Page(HTMLParser):
    """What a built page refers to: its links, and the resources it loads."""

    def __init__(self, text: str):
        super().__init__()
        self.links: list[tuple[str, str]] = []        # (class, href)
        self.loads: list[str] = []                    # src/href of script, link, img, iframe
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "a" and a.get("href"):
            self.links.append((a.get("class") or "", a["href"]))
        if tag in ("script", "img", "iframe", "source", "video", "audio") and a.get("src"):
            self.loads.append(a["src"])
        if tag == "link" and a.get("href"):
            self.loads.append(a["href"])


def page(html: Path, name: str) -> Page:
    return Page((html / name).read_text(encoding="utf-8"))


def panel_cells(notebook: Path) -> int:
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return sum("panel" in c.get("metadata", {}).get("tags", []) for c in cells)


def notebook(tmp: Path, cells: list[dict]) -> None:
    """A minimal lesson folder for a small book: one notebook of these cells, and a glossary."""
    nb = {"cells": cells, "metadata": {"kernelspec": {"name": "python3", "language": "python",
                                                      "display_name": "Python 3"},
                                       "language_info": {"name": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    for i, c in enumerate(cells):
        c.setdefault("id", f"c{i}")
        c.setdefault("metadata", {})
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "00_only.ipynb").write_text(json.dumps(nb))
    (tmp / "glossary.md").write_text("# Glossary\n\n[Start](00_only.ipynb)\n")


def md(text: str) -> dict:
    return {"cell_type": "markdown", "source": text}


# --- the table of contents ------------------------------------------------------------------------

def test_toc_lists_every_lesson_notebook_in_order_titled_by_its_first_heading():
    pages = bk.toc()
    lessons = sorted(p.name for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    assert [p.notebook for p in pages] == lessons
    assert pages[0].notebook == "00_start_here.ipynb" and pages[-1].label == "A"
    for p in pages:
        first = next(c for c in json.loads((NOTEBOOKS / p.notebook).read_text())["cells"]
                     if c["cell_type"] == "markdown")
        assert "".join(first["source"]).splitlines()[0] == f"# {p.title}"


def test_toc_of_another_folder_refuses_a_notebook_without_a_title_naming_it(tmp_path):
    notebook(tmp_path, [md("no heading here")])
    with pytest.raises(bk.BookError, match=r"00_only\.ipynb: its first markdown cell has no"):
        bk.toc(tmp_path)
    (tmp_path / "00_only.ipynb").write_text("{not json")
    with pytest.raises(bk.BookError, match=r"00_only\.ipynb: not a readable notebook"):
        bk.toc(tmp_path)


def test_the_labs_toc_is_the_registrys_and_refuses_a_missing_or_stale_notebook(tmp_path):
    from bughunt.lab.registry import lessons

    assert [(p.number, p.notebook, p.title) for p in bk.toc()] == [
        (x.number, x.file, x.heading) for x in lessons()]
    with pytest.raises(bk.BookError, match=r"00_start_here\.ipynb: no such notebook \(lesson 0"):
        bk.registry_toc(tmp_path)
    for nb in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"):
        (tmp_path / nb.name).write_bytes(nb.read_bytes())
    assert bk.registry_toc(tmp_path) == bk.toc()
    stale = json.loads((tmp_path / "04_danger_window.ipynb").read_text())
    first = next(c for c in stale["cells"] if c["cell_type"] == "markdown")
    first["source"] = "# Lesson 4 · an old title\n"
    (tmp_path / "04_danger_window.ipynb").write_text(json.dumps(stale))
    with pytest.raises(bk.BookError, match=r"04_danger_window\.ipynb: its heading is 'Lesson 4 "
                                           r"· an old title', the registry's is"):
        bk.registry_toc(tmp_path)


# --- the whole book -------------------------------------------------------------------------------

@pytest.mark.slow
def test_book_has_a_page_per_lesson_and_the_glossary_in_the_tocs_order(book):
    pages = bk.toc()
    order = ["index.html"] + [f"{p.docname}.html" for p in pages] + ["glossary.html"]
    for name in order:
        assert (book / name).is_file(), name
    # The sidebar lists them in this order (a page links itself as "#") ...
    nav = [href for cls, href in page(book, "04_danger_window.html").links
           if "reference internal" in cls and "#" not in href]
    assert [h for h in dict.fromkeys(nav) if h in order] == [
        h for h in order if h != "04_danger_window.html"]
    # ... and prev/next walk through them one by one.
    for before, name, after in zip([None] + order, order, order[1:] + [None]):
        links = page(book, name).links
        assert [h for c, h in links if c == "left-prev"] == ([before] if before else []), name
        assert [h for c, h in links if c == "right-next"] == ([after] if after else []), name


def test_book_loads_nothing_from_the_internet_and_has_no_live_code(book):
    built = sorted(book.glob("*.html"))
    assert len(built) >= len(bk.toc()) + 3          # + index, glossary, search
    for html in built:
        text = html.read_text(encoding="utf-8")
        remote = [u for u in Page(text).loads if re.match(r"(https?:)?//", u)]
        assert remote == [], f"{html.name} loads {remote}"
        assert "thebe" not in text.lower() and "mathjax" not in text.lower(), html.name
    assert (book / "searchindex.js").is_file()


def test_book_shows_every_panel_as_its_stored_picture(book):
    total = 0
    for p in bk.toc():
        want = panel_cells(NOTEBOOKS / p.notebook)
        text = (book / f"{p.docname}.html").read_text(encoding="utf-8")
        cells = re.split(r'<div class="cell tag_panel', text)[1:]
        assert len(cells) == want, p.notebook
        for cell in cells:
            cell = cell.split('<div class="cell ', 1)[0]
            pictures = re.findall(r'<img [^>]*src="(_images/[^"]+\.png)"', cell)
            assert pictures, f"a panel of {p.notebook} has no picture"
            assert all((book / src).stat().st_size > 1000 for src in pictures)
        total += want
    assert total >= 10


def test_book_says_on_every_lesson_page_how_to_launch_it_and_what_it_needs(book):
    for p in bk.toc():
        text = (book / f"{p.docname}.html").read_text(encoding="utf-8")
        binder = bk.binder_url(BOOK_REPOSITORY, "main", p.notebook)
        assert binder == (f"https://mybinder.org/v2/gh/{BOOK_REPOSITORY}/main"
                          f"?urlpath=lab/tree/notebooks/{p.notebook}")
        hrefs = [h for _, h in Page(text).links]
        assert binder in hrefs, p.notebook
        note = re.sub(r"<[^>]+>", "", text.split('bughunt-run', 1)[1].split("</div>", 1)[0])
        assert "POSIX" in note and f"notebooks/{p.notebook}" in note and "make lab" in note


def test_book_links_the_notebooks_jupyterlab_style_section_anchors(book):
    # Lesson 4 links "#What-to-remember" (JupyterLab's anchor); in the book it lands on the section.
    source = (NOTEBOOKS / "04_danger_window.ipynb").read_text(encoding="utf-8")
    assert "(#What-to-remember)" in source
    text = (book / "04_danger_window.html").read_text(encoding="utf-8")
    assert 'href="#What-to-remember"' not in text
    target = re.search(r'<a class="reference internal" href="#([^"]+)">What to remember</a>', text)
    assert target and f'id="{target.group(1)}"' in text


# --- small books: what the builder does with bad and odd input ----------------------------------

@pytest.mark.slow
def test_book_shows_the_stored_outputs_and_never_runs_a_cell(tmp_path):
    code = {"cell_type": "code", "execution_count": 1, "source": "print('ran ' + 'now')",
            "outputs": [{"output_type": "stream", "name": "stdout",
                         "text": "stored, never re-run\n"}]}
    notebook(tmp_path / "nb", [md("# A lesson\n\ntext"), code])
    # Saved widget state, as a notebook saved from JupyterLab has: it must not pull the widget
    # manager and require.js from a CDN into the page.
    nb = json.loads((tmp_path / "nb" / "00_only.ipynb").read_text())
    nb["metadata"]["widgets"] = {"application/vnd.jupyter.widget-state+json": {
        "state": {"m0": {"model_name": "LabelModel", "model_module": "@jupyter-widgets/controls",
                         "model_module_version": "2.0.0", "state": {"value": "a label"}}},
        "version_major": 2, "version_minor": 0}}
    (tmp_path / "nb" / "00_only.ipynb").write_text(json.dumps(nb))
    proc = build_book(tmp_path / "out", "--notebooks", str(tmp_path / "nb"), "--repository", "",
                      offline=tmp_path / "offline")
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "out" / "html" / "00_only.html").read_text()
    assert "stored, never re-run" in text and "ran now" not in text
    # No repository known: no Binder link, still how to run it locally.
    words = re.sub(r"<[^>]+>", "", text)
    assert "mybinder.org" not in text and "make lab" in words and "POSIX" in words
    assert [u for u in Page(text).loads if re.match(r"(https?:)?//", u)] == []


@pytest.mark.slow
def test_book_build_fails_on_a_broken_link_with_one_sentence(tmp_path):
    notebook(tmp_path / "nb", [md("# A lesson\n\nSee [the end](#Nowhere-at-all).")])
    proc = build_book(tmp_path / "out", "--notebooks", str(tmp_path / "nb"))
    assert proc.returncode == 1
    assert "Nowhere-at-all" in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("book: sphinx-build found problems")
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_book_refuses_a_bad_repository_or_branch_and_a_folder_that_is_not_its_own(tmp_path):
    proc = build_book(tmp_path / "out", "--repository", "not a repo")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == ("book: --repository 'not a repo': expected OWNER/NAME of a "
                                   "GitHub repository")
    proc = build_book(tmp_path / "out", "--branch", "main; rm -rf /")
    assert proc.returncode == 2 and "--branch 'main; rm -rf /': not a branch name" in proc.stderr
    mine = tmp_path / "mine"
    (mine / "src").mkdir(parents=True)
    (mine / "src" / "notes.txt").write_text("a learner's notes")
    proc = build_book(mine)
    assert proc.returncode == 2 and "refusing to replace them" in proc.stderr
    assert (mine / "src" / "notes.txt").read_text() == "a learner's notes"
    assert not (mine / "html").exists()


def test_the_offline_switch_refuses_every_connection(tmp_path):
    """The book fixture's network switch really switches it off (else 'built offline' proves
    nothing)."""
    (tmp_path / "sitecustomize.py").write_text(OFFLINE)
    probe = ("import urllib.request\n"
             "try:\n    urllib.request.urlopen('http://127.0.0.1:9/', timeout=5)\n"
             "except Exception as e:\n    print(type(e).__name__, e)\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}).stdout
    assert "the network is switched off" in out


def test_the_book_build_directory_is_ignored_by_git():
    out = subprocess.run(["git", "check-ignore", "build/book/html/index.html"], cwd=ROOT,
                         capture_output=True, text=True)
    if out.returncode == 128:
        pytest.skip("not a git checkout")
    assert out.returncode == 0
