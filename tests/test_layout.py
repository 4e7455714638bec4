"""Listings and tables as a learner sees them, drawn by Debian's Chromium (issue 23).

- In JupyterLab, as `make lab` serves it (the lab's stylesheet included) with the file browser
  open, at 1024 and 1280 px: no line of a listing (a code block in a cell or an output, printed
  text) wraps, so none is cut inside a word; a listing wider than its box scrolls sideways inside
  it; no table runs past its cell.
- In the built book, every lesson's page at 1280 px: the same for its listings and tables, with a
  screenshot of each page saved (to $BUGHUNT_SCREENSHOTS when set, else to the test's temporary
  folder: never into the repository) for a person to look at.

What is measured is what Chromium drew (tests/layout.py). The stored notebooks are opened as
they are, never run. Skipped without Chromium, as the other browser tests are
(tests/test_browser.py; BUGHUNT_REQUIRE_BROWSER=1 makes it a failure).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from layout import LISTINGS_JS, TABLES_JS
from test_browser import (ROOT, TIMEOUT_MS, _free_port, _need_browser, _serve, _stop, book_site,
                          browser)

from bughunt.lab import registry

WIDTHS = (1280, 1024)
#: A marker in the environment of the JupyterLab this module starts (and of its kernels).
MARKER = "BUGHUNT_LAYOUT_TEST"

__all__ = ["book_site", "browser"]      # fixtures shared with tests/test_browser.py


@pytest.fixture(scope="module")
def learner_lab(tmp_path_factory):
    """`make lab` as the README runs it (rooted at the repository, the lab's stylesheet), headless
    on a free port, with Jupyter folders of its own; every cell drawn (no windowing)."""
    _need_browser()
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    root = tmp_path_factory.mktemp("make-lab")
    settings = root / "settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    (settings / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}')
    port = _free_port()
    env = {**os.environ, MARKER: str(root), "JUPYTER_CONFIG_DIR": str(root / "config"),
           "JUPYTER_RUNTIME_DIR": str(root / "runtime"), "JUPYTER_DATA_DIR": str(root / "data")}
    args = (f"--no-browser --ServerApp.port={port} --ServerApp.ip=127.0.0.1 "
            f"--IdentityProvider.token= --LabApp.user_settings_dir={root / 'settings'} "
            f"--LabApp.workspaces_dir={root / 'workspaces'}")
    proc = _serve(["make", "-C", str(ROOT), "--no-print-directory", "lab", f"LAB_ARGS={args}"],
                  f"http://127.0.0.1:{port}/api", root / "lab.log", env=env)
    yield f"http://127.0.0.1:{port}"
    _stop(proc)


def _stored_cells(notebook: Path) -> list[dict]:
    """Each cell of a stored notebook: its type, and whether it has outputs to draw."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return [{"markdown": c["cell_type"] == "markdown", "outputs": bool(c.get("outputs"))}
            for c in cells]


#: The open notebook, drawn: as many cells as it stores, every Markdown cell rendered, every
#: stored output in its place, the fonts loaded.
DRAWN_JS = """(cells) => {
  const panel = [...document.querySelectorAll('.jp-NotebookPanel')]
      .find(p => p.checkVisibility());
  const drawn = panel ? [...panel.querySelectorAll('.jp-Notebook .jp-Cell')] : [];
  return document.fonts.status === 'loaded' && drawn.length === cells.length &&
    drawn.every((c, i) => cells[i].markdown ? !!c.querySelector('.jp-RenderedMarkdown')
                          : !cells[i].outputs || !!c.querySelector('.jp-OutputArea-output'));
}"""


#: The notebook on screen (a hidden tab's is not drawn).
VISIBLE_NOTEBOOK = ".jp-NotebookPanel:visible .jp-Notebook"


def _measure(page, root: str, content: str) -> dict:
    handle = page.locator(root).first.element_handle()
    listings = page.evaluate(LISTINGS_JS, [handle, content])
    tables = page.evaluate(TABLES_JS, [handle, content])
    return {**listings, **{f"table_{k}": v for k, v in tables.items()}}


#: Shut down the kernels JupyterLab started for the notebooks opened (nothing runs in them), as
#: the page itself asks the server (its XSRF cookie along).
CLOSE_SESSIONS_JS = """async () => {
  const xsrf = (document.cookie.match(/_xsrf=([^;]+)/) || [])[1] || '';
  const sessions = await (await fetch('/api/sessions')).json();
  for (const s of sessions) {
    const r = await fetch(`/api/sessions/${s.id}`, {method: 'DELETE',
                                                     headers: {'X-XSRFToken': xsrf}});
    if (!r.ok) throw new Error(`DELETE /api/sessions/${s.id}: ${r.status}`);
  }
  return sessions.length;
}"""


@pytest.mark.slow
def test_listings_in_jupyterlab_keep_their_lines_at_1024_and_1280_px(browser, learner_lab):
    page = browser.new_page(viewport={"width": WIDTHS[0], "height": 900})
    seen: dict[tuple[str, int], dict] = {}
    try:
        for lesson in registry.lessons():
            cells = _stored_cells(ROOT / "notebooks" / lesson.file)
            page.set_viewport_size({"width": WIDTHS[0], "height": 900})
            # A workspace of its own, reset: the notebook is the only one open.
            page.goto(f"{learner_lab}/lab/workspaces/layout-{lesson.number}/tree/notebooks/"
                      f"{lesson.file}?reset")
            page.wait_for_function(DRAWN_JS, arg=cells, timeout=TIMEOUT_MS)
            assert page.locator("#filebrowser").is_visible()     # the learner's layout
            for width in WIDTHS:
                page.set_viewport_size({"width": width, "height": 900})
                page.wait_for_function(
                    "(w) => [...document.querySelectorAll('.jp-NotebookPanel')].some(p =>"
                    " p.checkVisibility() && p.getBoundingClientRect().right <= w)", arg=width,
                    timeout=60_000)
                seen[lesson.notebook, width] = _measure(page, VISIBLE_NOTEBOOK, ".jp-Cell")
            page.evaluate(CLOSE_SESSIONS_JS)
    finally:
        page.close()
    problems = [f"{nb} at {w} px: {p}" for (nb, w), m in seen.items()
                for p in m["problems"] + m["table_problems"]]
    assert problems == []
    # What was measured: every listing of the workbook, some of them wider than their box at
    # 1024 px (lesson 4's page loop is), which scroll instead of wrapping.
    for width in WIDTHS:
        assert sum(m["listings"] for (nb, w), m in seen.items() if w == width) >= 50
        assert sum(m["table_tables"] for (nb, w), m in seen.items() if w == width) >= 20
    assert seen["04_danger_window", 1024]["scrolling"] >= 1


def _screenshots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("BUGHUNT_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.mark.slow
def test_every_lesson_page_of_the_book_at_1280_px_cuts_no_table_and_wraps_no_listing(
        browser, book_site, tmp_path):
    from bughunt.book import toc

    folder = _screenshots(tmp_path)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    seen = {}
    try:
        for p in toc():
            page.goto(f"{book_site}/{p.docname}.html", wait_until="load")
            page.wait_for_function("() => document.fonts.status === 'loaded'", timeout=60_000)
            seen[p.docname] = _measure(page, "article.bd-article", "article.bd-article")
            page.screenshot(path=str(folder / f"{p.docname}.png"), full_page=True)
    finally:
        page.close()
    print(f"screenshots of {len(seen)} pages at 1280 px: {folder}")
    problems = [f"{name}: {p}" for name, m in seen.items()
                for p in m["problems"] + m["table_problems"]]
    assert problems == []
    assert sum(m["listings"] for m in seen.values()) >= 50
    assert sum(m["table_tables"] for m in seen.values()) >= 20
    assert len(list(folder.glob("*.png"))) >= len(seen)
