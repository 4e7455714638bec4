"""Rebuild the lesson notebooks from their sources, executed and normalized.

    python -m bughunt.lab.regen [NAME ...]      (or: make regen)

The sources are `notebooks/src/NN_name.py` in jupytext's percent format: easy to review and diff.
Each one becomes `notebooks/NN_name.ipynb`, executed top to bottom in a fresh kernel with
PYTHONHASHSEED=0, then normalized so that strict nbval can compare its stored outputs:

- per-cell execution timestamps and saved widget state are removed;
- cells tagged `panel` lose their stored output: a stored widget shows in JupyterLab only as a
  `VBox(...)` text until re-run, so the learner should see an empty cell to run instead.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def sources(names: list[str] | None = None) -> list[Path]:
    found = sorted((NOTEBOOKS / "src").glob("[0-9][0-9]_*.py"))
    if names:
        found = [p for p in found if any(p.stem.startswith(n) for n in names)]
    return found


def read_source(src: Path) -> nbformat.NotebookNode:
    nb = jupytext.read(src)
    nb.metadata = {"kernelspec": KERNELSPEC,
                   "language_info": {"name": "python"}}
    return nb


def normalize(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code" and "panel" in cell.metadata.get("tags", []):
            cell.outputs = []
    return nb


def build(src: Path, timeout: int = 600) -> Path:
    out = NOTEBOOKS / f"{src.stem}.ipynb"
    nb = read_source(src)
    os.environ["PYTHONHASHSEED"] = "0"
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    nbformat.write(normalize(nb), out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bughunt.lab.regen", description=__doc__)
    parser.add_argument("names", nargs="*", help="notebook name prefixes, e.g. 02 (default: all)")
    args = parser.parse_args(argv)
    srcs = sources(args.names)
    if not srcs:
        parser.error(f"no notebook sources match {args.names} in {NOTEBOOKS / 'src'}")
    for src in srcs:
        t0 = time.perf_counter()
        out = build(src)
        print(f"{out.relative_to(ROOT)}: executed in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
