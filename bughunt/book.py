"""`make book`: the whole workbook as a static site, built from the stored notebooks, offline.

    python -m bughunt.book [--out build/book] [--repository OWNER/NAME] [--branch main]

Sphinx reads the notebooks with myst-nb and lays them out with sphinx-book-theme: a table of
contents, full-text search, previous/next links, and on every page a note on how to run it (a
Binder link when the book knows its GitHub repository, and `make lab`). The notebooks are never
re-executed (myst-nb's `nb_execution_mode = "off"`): the book shows the outputs `make regen` stored,
the same ones strict nbval checks, and each panel as the picture regen keeps of it.

Nothing is fetched, at build time or when a page is read: no live code (thebe), no MathJax or
ipywidgets script from a CDN. The configuration (`conf.py`) and the landing page with the table of
contents (`index.md`) are generated into the build directory from `toc()`, the one place that says
which pages the book has and in which order; nothing generated is written next to the sources.

POSIX only, like the lab: the book builds anywhere Sphinx runs, but what it teaches runs on Linux
and macOS.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .interrupts import Interrupted, deferred, interruptible
from .lab.labstyle import STYLESHEET

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
GLOSSARY = "glossary.md"
BUILD = ROOT / "build" / "book"
BINDER = "https://mybinder.org"
STYLESHEET_NAME = "bughunt.css"           # the lab's stylesheet, in the book's _static/
# The book's icon, written into the build: without one the browser asks for /favicon.ico, which a
# static host answers with a 404 in every page's console.
FAVICON = ('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">'
           '<rect width="16" height="16" rx="3" fill="#0072b2"/>'
           '<text x="8" y="12" font-size="11" text-anchor="middle" fill="#fff" '
           'font-family="sans-serif">B</text></svg>\n')
# What a launched or local session needs; said on every page of the book.
NEEDS = ("The lab needs a POSIX system (Linux or macOS; on Windows, WSL): it kills real worker "
         "processes with SIGKILL and measures fsync and rename. Python 3.11 or newer.")


class BookError(Exception):
    """A book that cannot be built as asked: one sentence naming the file or the flag, and the exit
    code (2: refused, nothing built; 1: the build found problems in the sources; 74: the disk
    refused a write under --out)."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class BookPage:
    """One page of the book: a lesson notebook in notebooks/."""

    number: int           # 0 to 13; 99 for the appendix
    notebook: str         # "04_danger_window.ipynb"
    title: str            # its first heading, "Lesson 4 · The danger window: ..."

    @property
    def docname(self) -> str:
        return Path(self.notebook).stem

    @property
    def label(self) -> str:
        return "A" if self.number == 99 else str(self.number)


def toc(notebooks: Path = NOTEBOOKS) -> list[BookPage]:
    """The book's pages in reading order. The lab's own notebooks: the lesson registry's lessons
    (`registry_toc`). Another folder (`--notebooks DIR`): its notebooks `NN_*.ipynb` in name
    order, each titled by its first heading."""
    if Path(notebooks).resolve() == NOTEBOOKS.resolve():
        return registry_toc(notebooks)
    pages = [BookPage(int(nb.name[:2]), nb.name, notebook_title(nb))
             for nb in sorted(Path(notebooks).glob("[0-9][0-9]_*.ipynb"))]
    if not pages:
        raise BookError(f"{notebooks}: no lesson notebooks (NN_name.ipynb) to make a book of")
    return pages


def registry_toc(notebooks: Path = NOTEBOOKS) -> list[BookPage]:
    """The lesson registry's lessons, in order, each titled by its heading, which must be the
    first heading of its built notebook in `notebooks` (else the notebook is out of date)."""
    from .lab.registry import lessons

    pages = []
    for lesson in lessons():
        path = Path(notebooks) / lesson.file
        if not path.is_file():
            raise BookError(f"{path}: no such notebook (lesson {lesson.label} of the registry); "
                            "build it with `make regen`")
        title = notebook_title(path)
        if title != lesson.heading:
            raise BookError(f"{path}: its heading is {title!r}, the registry's is "
                            f"{lesson.heading!r}; rebuild it with `make regen`")
        pages.append(BookPage(lesson.number, lesson.file, title))
    return pages


def notebook_title(path: Path) -> str:
    """The text of the notebook's first `# ` heading, in its first markdown cell."""
    try:
        cells = json.loads(Path(path).read_text(encoding="utf-8"))["cells"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise BookError(f"{path}: not a readable notebook ({e})") from None
    first = next((c for c in cells if c.get("cell_type") == "markdown"), None)
    source = "".join(first.get("source", "")) if first else ""
    m = re.search(r"^# +(.+?) *$", source, re.MULTILINE)
    if not m:
        raise BookError(f"{path}: its first markdown cell has no '# title' heading")
    return m.group(1)


# --- where the book points a reader who wants to run a page --------------------------------------

def github_repository(root: Path = ROOT) -> str | None:
    """OWNER/NAME of the checkout's `origin` when it is on GitHub, else None."""
    try:
        url = subprocess.run(["git", "-C", str(root), "remote", "get-url", "origin"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.fullmatch(r"(?:https://github\.com/|git@github\.com:)([\w.-]+/[\w.-]+?)(?:\.git)?/?",
                     url)
    return m.group(1) if m else None


def check_link_target(repository: str | None, branch: str) -> None:
    """The repository and branch go into every page's links: refuse what a URL cannot hold."""
    if repository is not None and not re.fullmatch(r"[\w.-]+/[\w.-]+", repository):
        raise BookError(f"--repository {repository!r}: expected OWNER/NAME of a GitHub repository")
    if not re.fullmatch(r"[\w.-]+(/[\w.-]+)*", branch):
        raise BookError(f"--branch {branch!r}: not a branch name (letters, digits, . _ - and /)")


def binder_url(repository: str, branch: str, notebook: str) -> str:
    """Binder's link that builds the repository (it reads requirements.txt and runtime.txt) and
    opens `notebooks/NOTEBOOK` in JupyterLab (mybinder.org's documented `urlpath` form)."""
    return f"{BINDER}/v2/gh/{repository}/{branch}?urlpath=lab/tree/notebooks/{notebook}"


# --- the generated sources: conf.py and index.md ------------------------------------------------

def sphinx_config(pages: list[BookPage], repository: str | None, branch: str) -> dict:
    """Every Sphinx setting of the book (written into the build directory's conf.py)."""
    theme = {
        "home_page_in_toc": True,
        "show_navbar_depth": 1,
        "use_download_button": True,
        "use_fullscreen_button": False,
        "navigation_with_keys": False,
        # No version switcher, announcement or icon fetched from anywhere.
        "icon_links": [],
    }
    if repository:
        theme.update({
            "repository_url": f"https://github.com/{repository}",
            "repository_branch": branch,
            "path_to_docs": "notebooks",
            "use_repository_button": True,
            "launch_buttons": {"binderhub_url": BINDER, "notebook_interface": "jupyterlab"},
        })
    return {
        "project": "BugHunt Recovery Lab",
        "author": "the BugHunt Recovery Lab authors",
        "copyright": "the BugHunt Recovery Lab authors",
        "language": "en",
        "extensions": ["myst_nb", "bughunt.book"],
        "root_doc": "index",
        "exclude_patterns": ["_build", "**.ipynb_checkpoints"],
        "html_theme": "sphinx_book_theme",
        "html_title": "BugHunt Recovery Lab",
        "html_favicon": "favicon.svg",
        # The lab's stylesheet: a listing keeps its lines (a panel's stored notes included).
        "html_static_path": ["_static"],
        "html_css_files": [STYLESHEET_NAME],
        "html_theme_options": theme,
        # Stated, so the theme's script does not log "invalid theme mode" on a first visit.
        "html_context": {"default_mode": "light"},
        # The page's own notebook, for the theme's download button (`_sources/NN_name.ipynb`).
        "html_show_sourcelink": False,
        "html_copy_source": True,
        "html_sourcelink_suffix": "",
        "html_last_updated_fmt": None,
        # The stored outputs, as regen left them: never executed here.
        "nb_execution_mode": "off",
        "nb_output_stderr": "show",
        # Markdown outputs (the closing's checklist links each lesson) are read as MyST, so their
        # links to other notebooks become links to those pages, as in the lessons' own text.
        "nb_render_markdown_format": "myst",
        # No require.js or ipywidgets manager from a CDN: the stored panels are pictures.
        "nb_ipywidgets_js": {},
        # Headings get anchors, so the glossary's `#saving-progress` links resolve (GitHub style);
        # the notebooks' JupyterLab-style links (`#What-to-remember`) are added by this module.
        "myst_heading_anchors": 6,
        "myst_enable_extensions": ["colon_fence"],
        "bughunt_repository": repository,
        "bughunt_branch": branch,
        "bughunt_pages": [p.notebook for p in pages],
    }


def write_conf(path: Path, config: dict) -> None:
    lines = ['"""The book\'s Sphinx configuration, generated by bughunt.book: do not edit."""',
             ""]
    lines += [f"{key} = {value!r}" for key, value in config.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def index_page(pages: list[BookPage], repository: str | None, branch: str) -> str:
    """The landing page: what the book is, how to run it, the lessons, and the table of contents
    (Sphinx's toctree, which makes the sidebar and the previous/next links)."""
    rows = "\n".join(f"| {p.label} | [{p.title}]({p.notebook}) |" for p in pages)
    if repository:
        start = binder_url(repository, branch, pages[0].notebook)
        launch = (f"[launch the start notebook on Binder]({start}) (it builds the environment "
                  "from `requirements.txt`, which takes a few minutes), or clone "
                  f"[the repository](https://github.com/{repository}) and")
    else:
        launch = "clone the repository and"
    toctree = "\n".join(f"{p.title} <{p.docname}>" for p in pages)
    return f"""# BugHunt Recovery Lab

A Jupyter workbook that teaches how a long-running AI agent survives `kill -9`: each lesson kills
a real worker process at every crash point, resumes it, and measures what each checkpoint design
costs and whether it loses or duplicates anything.

This book is the workbook to read: every lesson with the outputs stored when its notebook was last
run, and each interactive panel as a picture of how it looked then. To run the lessons, {launch}
run `make lab`, which opens JupyterLab on the start notebook. {NEEDS}

| | lesson |
|---|---|
{rows}
| | [Glossary · 术语表]({GLOSSARY}) |

```{{toctree}}
:hidden:
:caption: The workbook
:maxdepth: 1

{toctree}
```

```{{toctree}}
:hidden:
:caption: Reference
:maxdepth: 1

{Path(GLOSSARY).stem}
```
"""


MARKER = ".bughunt-book"


def claim(out: Path) -> None:
    """Make `out` the book's build directory, refusing a folder that holds anything else: the
    build replaces its `src` and `html`, and must never replace a learner's files."""
    out = Path(out)
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise BookError(f"--out {out}: not a plain directory; give the book a folder of its own")
    if out.exists() and any(out.iterdir()) and not (out / MARKER).is_file():
        raise BookError(f"--out {out}: this folder holds files that are not a book build (no "
                        f"{MARKER} in it); refusing to replace them, give the book a folder of "
                        "its own")
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("a build of the book (python -m bughunt.book): safe to delete\n",
                              encoding="utf-8")


def prepare(out: Path, repository: str | None, branch: str,
            notebooks: Path = NOTEBOOKS) -> Path:
    """Lay out the book's sources in `out/src`: copies of the notebooks and the glossary, and the
    generated conf.py and index.md. Returns the source directory."""
    pages = toc(notebooks)
    glossary = Path(notebooks) / GLOSSARY
    if not glossary.is_file():
        raise BookError(f"{glossary}: the glossary is missing")
    claim(out)
    src = Path(out) / "src"
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    for p in pages:
        shutil.copy2(Path(notebooks) / p.notebook, src / p.notebook)
    shutil.copy2(glossary, src / GLOSSARY)
    (src / "favicon.svg").write_text(FAVICON, encoding="utf-8")
    (src / "_static").mkdir()
    shutil.copy2(STYLESHEET, src / "_static" / STYLESHEET_NAME)
    write_conf(src / "conf.py", sphinx_config(pages, repository, branch))
    (src / "index.md").write_text(index_page(pages, repository, branch), encoding="utf-8")
    return src


def build_site(out: Path = BUILD, repository: str | None = None, branch: str = "main",
          notebooks: Path = NOTEBOOKS, jobs: str = "auto") -> Path:
    """Build the book into `out/html`; returns its index.html. Any Sphinx warning (a broken link,
    an output it cannot show) fails the build: the book a reader gets has none.

    Sphinx runs as a child process in a session of its own, so Ctrl-C or SIGTERM stops it with the
    lab's one sentence (exit 130 or 143) instead of Sphinx's traceback, and nothing is left running.
    """
    check_link_target(repository, branch)
    html = Path(out) / "html"
    try:
        src = prepare(out, repository, branch, notebooks)
        if html.exists():
            shutil.rmtree(html)
    except OSError as e:             # read-only, full, an I/O error: the README's 74
        where = f" ({e.filename})" if e.filename else ""
        raise BookError(f"--out {out}: the disk refused a write{where}: {e.strerror or e}; "
                        "give a writable folder with room, or free some", 74) from None
    argv = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-W", "--keep-going", "-j", jobs,
            "-d", str(Path(out) / "doctrees"), str(src), str(html)]
    with interruptible():
        with deferred():
            proc = subprocess.Popen(argv, start_new_session=True)
        try:
            code = proc.wait()
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    if code != 0:
        raise BookError(f"sphinx-build found problems in the book's sources in {src} "
                        "(listed above): fix them in notebooks/ and run `make book` again",
                        code=1)
    return html / "index.html"


# --- the Sphinx extension (listed in the generated conf.py) -------------------------------------

def jupyterlab_anchor(title: str) -> str:
    """The id JupyterLab gives a Markdown heading: its text with each space made a hyphen
    (JupyterLab's rendermime `createHeaderId`). The notebooks link their own sections this way."""
    return title.replace(" ", "-")


def _transform_class():
    from sphinx.transforms import SphinxTransform

    class AddJupyterLabAnchors(SphinxTransform):
        """Each heading is also known by its JupyterLab anchor, so the notebooks' in-page and
        cross-page section links resolve in the book as they do in JupyterLab. Runs before MyST
        resolves `[text](#anchor)` links (its ResolveAnchorIds, priority 879)."""

        default_priority = 870

        def apply(self, **kwargs) -> None:
            slugs = getattr(self.document, "myst_slugs", None)
            if not slugs:
                return
            for slug, (line, section_id, text) in list(slugs.items()):
                slugs.setdefault(jupyterlab_anchor(text), (line, section_id, text))

    return AddJupyterLabAnchors


def _run_note(app, doctree) -> None:
    """On every page, under its title: how to run it, and what a session needs."""
    from docutils import nodes

    docname = app.env.docname
    notebook = f"{docname}.ipynb" if f"{docname}.ipynb" in app.config.bughunt_pages else None
    if notebook is None:
        return
    section = doctree.next_node(nodes.section)
    if section is None:
        return
    repository, branch = app.config.bughunt_repository, app.config.bughunt_branch
    para = nodes.paragraph()
    para += nodes.Text("This page shows the outputs stored when the notebook was last run; a "
                       "panel is a picture of how it looked. To run it, ")
    if repository:
        para += nodes.reference("", "launch it on Binder",
                                refuri=binder_url(repository, branch, notebook))
        para += nodes.Text(" (built from requirements.txt; the first start takes minutes), or ")
    para += nodes.Text("clone the repository, run ")
    para += nodes.literal("make lab", "make lab")
    para += nodes.Text(" and open ")
    para += nodes.literal(f"notebooks/{notebook}", f"notebooks/{notebook}")
    para += nodes.Text(". " + NEEDS)
    note = nodes.admonition(classes=["bughunt-run", "tip"])
    note += nodes.title("Run this lesson", "Run this lesson")
    note += para
    title = section.next_node(nodes.title)
    section.insert(section.index(title) + 1 if title is not None else 0, note)


def setup(app) -> dict:
    app.add_config_value("bughunt_repository", None, "env")
    app.add_config_value("bughunt_branch", "main", "env")
    app.add_config_value("bughunt_pages", [], "env")
    app.add_transform(_transform_class())
    app.connect("doctree-read", _run_note)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def main(argv: list[str] | None = None) -> int:
    from .config import OneSentenceParser, given_path
    parser = OneSentenceParser(prog="python -m bughunt.book", description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=given_path, default=BUILD,
                        help="the build directory (default: build/book; the site is OUT/html)")
    parser.add_argument("--repository", default=None,
                        help="OWNER/NAME on GitHub, for the Binder and repository links "
                        "(default: the checkout's origin, when it is on GitHub)")
    parser.add_argument("--branch", default="main", help="the branch Binder launches (main)")
    parser.add_argument("--notebooks", type=Path, default=NOTEBOOKS,
                        help="the folder of lesson notebooks and glossary.md (default: notebooks/)")
    args = parser.parse_args(argv)
    if not args.notebooks.is_dir():
        parser.error(f"--notebooks {args.notebooks}: not a directory")
    repository = args.repository if args.repository is not None else github_repository()
    t0 = time.perf_counter()
    try:
        index = build_site(args.out, repository or None, args.branch, args.notebooks)
    except BookError as e:
        print(f"book: {e}", file=sys.stderr)
        return e.code
    except Interrupted as e:
        print(f"book: {e.what}; the build in {args.out} is incomplete, run `make book` again",
              file=sys.stderr)
        return e.code
    pages = len(list(index.parent.glob("*.html")))
    print(f"book: {index} ({pages} pages, built in {time.perf_counter() - t0:.1f} s"
          f"{'' if repository else '; no GitHub repository known, so no Binder links'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
