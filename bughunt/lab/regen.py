"""Rebuild the lesson notebooks from their sources, executed and normalized.

    python -m bughunt.lab.regen [NAME ...]      (or: make regen)
    python -m bughunt.lab.regen --links         (links and tables only: nothing is executed)

The sources are `notebooks/src/NN_name.py` in jupytext's percent format: easy to review and diff.
What lists lessons is not typed into them: a source holds a marker where the lesson registry
(`bughunt.lab.registry`) writes it, and regen fills it in:

- `<!-- lesson: header -->`: the notebook's heading and its prev/next line;
- `<!-- lesson: about -->`: its learning objectives, prerequisites and estimated time;
- `<!-- lesson: nav -->`: the prev/next line again, at the end;
- `<!-- lesson: table -->`: lesson 0's table of lessons.

Each source becomes `notebooks/NN_name.ipynb`, executed top to bottom in a fresh kernel with
PYTHONHASHSEED=0, then normalized so that strict nbval can compare its stored outputs:

- per-cell execution timestamps and saved widget state are removed;
- each cell's id is made from its source (not drawn at random), so a rebuild that changes no
  cell changes no id, and two branches that rebuild the same notebook do not conflict over ids;
- a cell tagged `panel` keeps, instead of its live widget (which GitHub, nbviewer and a notebook
  not yet run cannot show), a picture of the panel as it was when the notebook was built: its
  settings, what it said, and the figures it drew. Running the cell replaces it with the live
  panel.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import time
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
README = ROOT / "README.md"
MARKER = re.compile(r"<!-- lesson: (header|about|nav|table|time-rule) -->")
#: Where the README's table of lessons is written (between these two lines).
README_TABLE = ("<!-- lessons: begin (written by `make regen` from bughunt/lab/registry.py) -->",
                "<!-- lessons: end -->")
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def notebook_sources(names: list[str] | None = None) -> list[Path]:
    found = sorted((NOTEBOOKS / "src").glob("[0-9][0-9]_*.py"))
    if names:
        found = [p for p in found if any(p.stem.startswith(n) for n in names)]
    return found


def read_source(src: Path) -> nbformat.NotebookNode:
    """The notebook a source describes, its markers filled in from the registry."""
    nb = jupytext.read(src)
    nb.metadata = {"kernelspec": KERNELSPEC,
                   "language_info": {"name": "python"}}
    return fill(nb, src.stem)


def fill(nb: nbformat.NotebookNode, stem: str) -> nbformat.NotebookNode:
    """Write what the registry says where `nb`'s markdown cells hold a marker."""
    from . import registry

    every = registry.lessons()
    this = next((x for x in every if x.notebook == stem), None)
    if this is None:
        raise LookupError(f"notebooks/src/{stem}.py has no lesson in bughunt/lab/lessons/ "
                          f"(its record's notebook must be {stem!r})")
    text = {"header": lambda: f"# {this.heading}\n\n{registry.nav_line(this, every)}",
            "about": lambda: registry.about(this),
            "nav": lambda: registry.nav_line(this, every),
            "table": lambda: registry.lessons_table(every),
            "time-rule": registry.time_rule}
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = MARKER.sub(lambda m: text[m.group(1)](), cell.source)
    return nb


def relink(names: list[str] | None = None) -> list[Path]:
    """Write the registry's links and tables into built notebooks without executing them: each
    built notebook's markdown cells become its filled source's, where its code cells are still
    the source's (a notebook whose code changed needs a full `regen`). Also the README's table.
    Returns the files rewritten."""
    from . import registry

    changed = []
    for src in notebook_sources(names):
        out = NOTEBOOKS / f"{src.stem}.ipynb"
        if not out.exists():
            continue
        built, want = nbformat.read(out, as_version=4), read_source(src)
        code = [(c.cell_type, c.source if c.cell_type == "code" else "") for c in built.cells]
        if code != [(c.cell_type, c.source if c.cell_type == "code" else "") for c in want.cells]:
            print(f"{out.relative_to(ROOT)}: its code differs from its source; run "
                  f"`make regen NB={src.stem[:2]}`", file=sys.stderr)
            continue
        touched = False
        for have, new in zip(built.cells, want.cells):
            if have.cell_type == "markdown" and have.source != new.source:
                have.source, touched = new.source, True
        if touched:
            nbformat.write(built, out)
            changed.append(out)
    readme = README.read_text(encoding="utf-8")
    begin, end = README_TABLE
    if begin in readme and end in readme:
        head, rest = readme.split(begin, 1)
        new = f"{head}{begin}\n{registry.readme_table()}\n{end}{rest.split(end, 1)[1]}"
        if new != readme:
            README.write_text(new, encoding="utf-8")
            changed.append(README)
    return changed


WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def cell_id(source: str, seen: dict[str, int]) -> str:
    """A stable id for a cell: a hash of its source, numbered when the same source repeats."""
    digest = hashlib.sha1(source.encode()).hexdigest()[:8]
    seen[digest] = seen.get(digest, 0) + 1
    return digest if seen[digest] == 1 else f"{digest}-{seen[digest]}"


def normalize(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    state = nb.metadata.pop("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    seen: dict[str, int] = {}
    for cell in nb.cells:
        cell.id = cell_id(cell.source, seen)
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code" and "panel" in cell.metadata.get("tags", []):
            cell.outputs = static_panel(cell.outputs, state)
    return nb


def static_panel(outputs: list, state: dict) -> list:
    """The panel a cell displayed, as plain outputs any notebook viewer shows: a note with its
    settings and what it said, then each figure it drew (PNG) and each table (HTML)."""
    roots = [o["data"][WIDGET_VIEW]["model_id"] for o in outputs
             if o.get("output_type") in ("display_data", "execute_result")
             and WIDGET_VIEW in o.get("data", {})]
    settings, said, shown = [], [], []
    values = ("ToggleButtonsModel", "DropdownModel", "SelectionSliderModel", "IntSliderModel",
              "FloatSliderModel", "CheckboxModel")

    def model(ref) -> tuple[str, dict]:
        m = state.get(str(ref).removeprefix("IPY_MODEL_"), {})
        return m.get("model_name", ""), m.get("state", {})

    def value_of(s: dict):
        labels = s.get("_options_labels")
        return labels[s["index"]] if labels and isinstance(s.get("index"), int) else s.get("value")

    def walk(ref, label: str | None = None) -> None:
        name, s = model(ref)
        if name == "OutputModel":
            shown.extend(o for o in s.get("outputs", []) if o.get("output_type") in
                         ("display_data", "execute_result"))
        elif name in values:
            settings.append(f"{label or s.get('description') or 'setting'}: **{value_of(s)}**")
        elif name == "LabelModel" and s.get("value"):
            said.append(s["value"])
        elif name == "HTMLModel" and s.get("value"):
            shown.append({"output_type": "display_data", "data": {"text/html": s["value"]}})
        children = s.get("children", [])
        if name == "HBoxModel" and len(children) == 2 and model(children[0])[0] == "LabelModel" \
                and model(children[1])[0] in values:
            walk(children[1], model(children[0])[1].get("value"))     # a knob and its label
            return
        for child in children:
            walk(child)

    for root in roots:
        walk(root)
    if not roots:
        return []
    note = ("*The panel as it was when this notebook was built (a picture: run the cell for the "
            "live panel).*")
    lines = [note, ""] + ([" · ".join(settings), ""] if settings else []) + \
        [f"> {line}" for line in said]
    preview = [nbformat.v4.new_output("display_data", data={"text/markdown": "\n".join(lines),
                                                              "text/plain": note})]
    for o in shown:
        data = {k: v for k, v in o.get("data", {}).items()
                if k in ("image/png", "text/html", "text/plain")}
        if data:
            preview.append(nbformat.v4.new_output("display_data", data=data,
                                                  metadata=o.get("metadata", {})))
    return preview


def build(src: Path, timeout: int = 600) -> Path:
    """Execute `src` in notebooks/ (the kernel's folder, as for a learner) and store it built.
    Files the run writes there (lesson 9's `%%writefile` stores) are removed afterwards, so the
    next build starts from the folder a fresh clone has; files that were there stay."""
    out = NOTEBOOKS / f"{src.stem}.ipynb"
    nb = read_source(src)
    os.environ["PYTHONHASHSEED"] = "0"
    before = {p.name for p in NOTEBOOKS.iterdir()}
    try:
        NotebookClient(nb, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    finally:
        for p in NOTEBOOKS.iterdir():
            if p.name not in before and p.is_file() and p.suffix == ".py":
                p.unlink()
    nbformat.write(normalize(nb), out)
    return out


def main(argv: list[str] | None = None) -> int:
    from ..config import OneSentenceParser
    parser = OneSentenceParser(prog="python -m bughunt.lab.regen", description=__doc__)
    parser.add_argument("names", nargs="*", help="notebook name prefixes, e.g. 02 (default: all)")
    parser.add_argument("--links", action="store_true",
                        help="only write the registry's links and tables into the built notebooks "
                             "and the README (nothing is executed)")
    args = parser.parse_args(argv)
    srcs = notebook_sources(args.names)
    if not srcs:
        parser.error(f"no notebook sources match {args.names} in {NOTEBOOKS / 'src'}")
    if not args.links:
        for src in srcs:
            t0 = time.perf_counter()
            out = build(src)
            print(f"{out.relative_to(ROOT)}: executed in {time.perf_counter() - t0:.1f} s")
    for path in relink():          # every notebook: a new lesson changes its neighbours' links
        print(f"{path.relative_to(ROOT)}: links and tables rewritten from the registry")
    return 0


if __name__ == "__main__":
    sys.exit(main())
