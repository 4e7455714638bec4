"""One name, one thing: a reader who meets a class or function name outside the lessons' views
(`bughunt/lab/`) finds exactly one definition of it in the package."""

import ast
from collections import defaultdict
from pathlib import Path

import bughunt

PACKAGE = Path(bughunt.__file__).resolve().parent
#: Every command-line module has its own `main` (what `python -m bughunt.X` runs): one meaning.
ENTRY_POINTS = {"main"}


def definitions(package: Path) -> dict[str, list[str]]:
    """Module-level classes and functions by name, with the modules that define them."""
    where = defaultdict(list)
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package)
        if relative.parts[0] == "lab":
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                where[node.name].append(str(relative))
    return where


def test_every_class_and_function_name_outside_the_views_is_defined_once():
    twice = {name: files for name, files in definitions(PACKAGE).items()
             if len(files) > 1 and name not in ENTRY_POINTS}
    assert twice == {}, f"defined more than once: {twice}"


def test_the_check_sees_a_name_defined_twice(tmp_path):
    (tmp_path / "a.py").write_text("class CrashRun:\n    pass\n")
    (tmp_path / "b.py").write_text("def summarize():\n    pass\n\nclass CrashRun:\n    pass\n")
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "c.py").write_text("def summarize():\n    pass\n")
    assert {n: f for n, f in definitions(tmp_path).items() if len(f) > 1} == {
        "CrashRun": ["a.py", "b.py"]}
