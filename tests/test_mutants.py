"""Planted bugs find their target by function and syntax tree, not by text: editing a comment, a
blank line or a line break near a target changes nothing; changing what the code does refuses."""

import ast
import re

import pytest

from bughunt.instruments import mutants
from bughunt.instruments.mutants import MUTANTS, PACKAGE, TargetGone


def _function_tree(text: str, qualname: str) -> str:
    return ast.dump(mutants._function(ast.parse(text), qualname))


def _edit_comments_near(text: str, mutant) -> str:
    """A copy of the source as a colleague might leave it: a comment line above the target, the
    comment at the end of its line rewritten (or one added), a blank line and a comment below."""
    first, last, indent = mutants.locate(mutant, text)
    lines = text.splitlines(keepends=True)
    pad = " " * indent
    end = lines[last - 1].rstrip("\n")
    end = (re.sub(r"#.*$", "# reworded: still the same statement", end) if "#" in end
           else end + "  # a new note on this line")
    return "".join(lines[:first - 1] + [f"{pad}# a comment a colleague added above\n"]
                   + lines[first - 1:last - 1] + [end + "\n", "\n",
                                                  f"{pad}# and one below, after a blank line\n"]
                   + lines[last:])


@pytest.mark.parametrize("name", MUTANTS)
def test_each_mutant_still_finds_its_target_after_a_comment_edit_near_it(name, tmp_path):
    mutant = MUTANTS[name]
    original = (PACKAGE / mutant.file).read_text()
    copy = tmp_path / mutant.file
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_text(_edit_comments_near(original, mutant))
    edited = copy.read_text()
    assert edited != original
    # The same statements are found, and the mutated function is the same code as before.
    patched_copy = mutants.apply(mutant, edited)
    patched_real = mutants.apply(mutant, original)
    assert patched_copy != edited
    assert (_function_tree(patched_copy, mutant.function)
            == _function_tree(patched_real, mutant.function)
            != _function_tree(original, mutant.function))
    # The comment lines a colleague added stay; only the target's own lines change.
    assert "# a comment a colleague added above" in patched_copy
    assert "# and one below, after a blank line" in patched_copy


@pytest.mark.parametrize("name", MUTANTS)
def test_a_mutant_whose_code_changed_refuses_naming_its_function(name):
    mutant = MUTANTS[name]
    original = (PACKAGE / mutant.file).read_text()
    first, last, _ = mutants.locate(mutant, original)
    lines = original.splitlines(keepends=True)
    # What the statement does changes (a call gets another argument): the mutant no longer fits.
    changed = lines[last - 1].replace(")", ", 0)", 1) if ")" in lines[last - 1] else \
        lines[last - 1].replace("False", "True")
    assert changed != lines[last - 1]
    text = "".join(lines[:last - 1] + [changed] + lines[last:])
    with pytest.raises(TargetGone, match=re.escape(mutant.function)):
        mutants.apply(mutant, text)


def test_a_mutant_refuses_when_its_function_is_gone():
    mutant = MUTANTS["no-lock"]
    text = (PACKAGE / mutant.file).read_text().replace("def claim_run_dir(", "def claim(")
    with pytest.raises(TargetGone, match="has no claim_run_dir"):
        mutants.locate(mutant, text)


def _changed(diff: str, sign: str) -> list[str]:
    return [line for line in diff.splitlines()
            if line.startswith(sign) and not line.startswith(sign * 3)]


def test_the_diff_a_lesson_shows_is_the_statement_and_nothing_else():
    assert _changed(mutants.diff("no-lock"), "-") == [
        "-    acquire_run_lock(run_dir)              # held until this process ends, however it ends"]
    assert _changed(mutants.diff("no-lock"), "+") == []
    swapped = mutants.diff("submit-before-intent")              # one line moved above two
    assert _changed(swapped, "+") == ["+            self.submit_report(page, key)"]
    assert _changed(swapped, "-") == ["-            self.submit_report(page, key)"]


def test_a_patch_that_would_not_parse_is_refused_before_any_copy_is_made():
    import dataclasses
    broken = dataclasses.replace(MUTANTS["no-lock"], new="if run_dir:")
    with pytest.raises(TargetGone, match="would not parse"):
        mutants.apply(broken, (PACKAGE / broken.file).read_text())
