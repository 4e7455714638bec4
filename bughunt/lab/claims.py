"""What a lesson says it found, checked against what its run found.

A lesson's prose is typed once; its data are measured at every run. So every sentence in which a
lesson states what its own run found is a **claim**: the sentence, with the measured numbers filled
in, and a predicate over the lesson's results, declared side by side in the lesson's module. The
notebook renders the claim as prose. When the predicate does not hold on the run at hand, the
sentence says so where it stands ("On this run this did not hold: ..."), which changes the
notebook's stored output and fails strict nbval in CI; `python -m bughunt claims` checks every
claim of every lesson headless.

A fact from outside the lab (a man page, the SQLite docs, a framework's docs) is not a claim: it
carries its public source instead.

    CLAIMS = Claims(4)

    @CLAIMS.claim("Without the key, {n} of {points} crash points filed a report twice.")
    def no_key_duplicates():
        df = danger_sweeps()              # the lesson's own experiment (cached in the kernel)
        n = int((df.duplicate_reports > 0).sum())
        return n > 0, {"n": n, "points": len(df)}

    CLAIMS.say("no_key_duplicates")       # in the notebook: the sentence, checked

A check calls the lesson's own experiment functions, which the lab's results cache
(`bughunt.lab.results`) runs once per kernel: the claim is checked on exactly the run the
notebook showed above it, and `python -m bughunt claims` runs the same functions headless.

Tables get the same treatment: `checked_table` verifies a summary table's own arithmetic (parts
that add up to the total, counts that are non-negative integers, no column silently all NaN)
before anyone reads it, and raises naming the table, the row and the column.
"""

from __future__ import annotations

import math
import numbers
import string
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping


# --- claims -------------------------------------------------------------------------------------

class ClaimError(ValueError):
    """A claim that cannot even be checked: its text names a value its check did not give."""


@dataclass(frozen=True)
class Finding:
    """A claim checked on one run: whether it held, its sentence as rendered, and the values."""

    lesson: int
    key: str
    holds: bool
    sentence: str
    values: Mapping[str, Any]
    measured: str = ""       # what was measured, said when it did not hold

    def markdown(self) -> str:
        if self.holds:
            return self.sentence
        return (f"{self.sentence}\n\n> **On this run this did not hold:** {self.measured}"
                if self.measured else
                f"{self.sentence}\n\n> **On this run this did not hold** "
                f"(measured: {_show_values(self.values)}).")

    def _repr_markdown_(self) -> str:
        return self.markdown()

    def __str__(self) -> str:
        return self.markdown()

    def __repr__(self) -> str:
        return self.markdown()


@dataclass(frozen=True)
class Findings:
    """Claims checked together, shown as the notebook's prose: paragraphs, or a bulleted list."""

    found: tuple[Finding, ...]
    bullets: bool = False

    @property
    def holds(self) -> bool:
        return all(f.holds for f in self.found)

    def markdown(self) -> str:
        if self.bullets:
            return "\n".join("- " + f.markdown().replace("\n\n>", "\n\n  >")
                             for f in self.found)
        return "\n\n".join(f.markdown() for f in self.found)

    def _repr_markdown_(self) -> str:
        return self.markdown()

    def __repr__(self) -> str:
        return self.markdown()

    def __iter__(self):
        return iter(self.found)


Check = Callable[[], "tuple[bool, Mapping[str, Any]] | tuple[bool, Mapping[str, Any], str]"]


@dataclass(frozen=True)
class Claim:
    """A sentence a lesson states about its own run, and the check that makes it true or not.

    `check()` returns `(holds, values)` or `(holds, values, measured)`: whether the
    sentence is true on this run, the measured values its text names in braces, and optionally
    what to say when it does not hold (else the values are listed)."""

    lesson: int
    key: str
    text: str
    check: Check

    def fields(self) -> set[str]:
        return {name.split(".")[0].split("[")[0] for _, name, _, _ in
                string.Formatter().parse(self.text) if name}

    def on(self) -> Finding:
        """This claim checked on this kernel's run of the lesson's experiments."""
        out = self.check()
        if not (isinstance(out, tuple) and len(out) in (2, 3)):
            raise ClaimError(f"claim {self.lesson}.{self.key}: its check must return "
                             f"(holds, values) or (holds, values, measured), got {out!r}")
        holds, values = bool(out[0]), dict(out[1])
        # Said when it did not hold: a claim that holds says its sentence and values, never its
        # failure's template, whose holes are then empty ("at  the resume redid ...").
        measured = out[2] if len(out) == 3 and not holds else ""
        missing = self.fields() - set(values)
        if missing:
            raise ClaimError(f"claim {self.lesson}.{self.key}: its text names "
                             f"{', '.join(sorted(missing))}, which its check did not give")
        shown = {k: _as_text(v) for k, v in values.items()}
        return Finding(self.lesson, self.key, holds, self.text.format(**shown), values, measured)


class Claims:
    """A lesson's claims, in the order its notebook states them."""

    def __init__(self, lesson: int):
        self.lesson = lesson
        self._claims: dict[str, Claim] = {}

    def claim(self, text: str, key: str | None = None):
        """Register the decorated check as a claim whose sentence is `text` (its key: the
        function's name, or `key`)."""
        def register(check: Check) -> Check:
            name = key or check.__name__
            if name in self._claims:
                raise ClaimError(f"lesson {self.lesson} already has a claim {name!r}")
            self._claims[name] = Claim(self.lesson, name, text, check)
            return check
        return register

    def __iter__(self):
        return iter(self._claims.values())

    def __len__(self) -> int:
        return len(self._claims)

    def __getitem__(self, key: str) -> Claim:
        try:
            return self._claims[key]
        except KeyError:
            raise KeyError(f"lesson {self.lesson} has no claim {key!r}: it has "
                           f"{', '.join(self._claims) or 'none'}") from None

    def say(self, *keys: str, bullets: bool = False) -> "Findings":
        """The claims `keys`, checked, to display where the notebook states them: one paragraph
        each, or a bulleted list (`bullets`)."""
        return Findings(tuple(self[k].on() for k in keys), bullets)

    def check_all(self) -> list[Finding]:
        return [c.on() for c in self]


def _as_text(value) -> str:
    """A measured value as a sentence shows it: counts as integers, other numbers to 2 decimals
    , lists of pages as `3, 7 and 10`."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        v = float(value)
        if math.isnan(v):
            return "NaN"
        if v.is_integer():
            return str(int(v))
        return f"{v:.2f}" if abs(v) >= 0.01 else f"{v:.2g}"
    if isinstance(value, (list, tuple)) and not value:
        return "none"
    if isinstance(value, (list, tuple)) and all(isinstance(x, (str, int))
                                                          for x in value):
        items = [str(x) for x in value]
        return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"
    return str(value)


def _show_values(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} = {_as_text(v)}" for k, v in values.items()) or "nothing"


# --- tables that add up -------------------------------------------------------------------------

class TableError(ValueError):
    """A summary table whose own arithmetic is wrong: it is never shown."""


@dataclass(frozen=True)
class Invariants:
    """What a summary table promises about itself.

    - `total`: the column that counts the states or points of a row;
    - `parts`: columns that partition the total (each state in exactly one): they add up to it;
    - `within`: columns that count a subset of the total: each is at most the total;
    - `counts`: columns that are counts (non-negative integers); `total`, `parts` and `within`
      are counts too;
    - every column holds at least one value (never silently all NaN); `may_be_empty` lists the
      columns allowed to be all empty (a maximum over no values, say).
    """

    total: str | None = None
    parts: tuple[str, ...] = ()
    within: tuple[str, ...] = ()
    counts: tuple[str, ...] = ()
    may_be_empty: tuple[str, ...] = ()
    extra: tuple[Callable, ...] = field(default=())   # (df) -> list of "row r: ..." problems


def _is_count(v) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, numbers.Integral):
        return v >= 0
    if isinstance(v, numbers.Real):
        return math.isfinite(float(v)) and float(v).is_integer() and v >= 0
    return False


def table_problems(df, inv: Invariants) -> list[str]:
    """Every way `df` breaks `inv`, each naming the row and the column."""
    problems: list[str] = []
    columns = list(df.columns)
    need = [c for c in (inv.total, *inv.parts, *inv.within, *inv.counts) if c]
    for c in need:
        if c not in columns:
            problems.append(f"has no column {c!r}")
    if problems:
        return problems
    for c in columns:
        if c in inv.may_be_empty:
            continue
        if len(df) and df[c].isna().all():
            problems.append(f"column {c!r} is empty (NaN) in every row")
    for c in dict.fromkeys(need):
        for idx, v in df[c].items():
            if not _is_count(v):
                problems.append(f"row {idx!r}: {c!r} is {v!r}, not a count")
    if problems:
        return problems
    for idx, row in df.iterrows():
        if inv.total and inv.parts:
            got = sum(int(row[c]) for c in inv.parts)
            if got != int(row[inv.total]):
                parts = " + ".join(f"{c} {int(row[c])}" for c in inv.parts)
                problems.append(f"row {idx!r}: {parts} = {got}, but {inv.total!r} is "
                                f"{int(row[inv.total])}")
        if inv.total:
            for c in inv.within:
                if int(row[c]) > int(row[inv.total]):
                    problems.append(f"row {idx!r}: {c!r} is {int(row[c])}, more than "
                                    f"{inv.total!r} ({int(row[inv.total])})")
    for extra in inv.extra:
        problems.extend(extra(df))
    return problems


def checked_table(df, name: str, inv: Invariants):
    """`df`, after checking that its arithmetic holds (`Invariants`); raises `TableError` naming
    the table, the row and the column when it does not. The one gate every summary table passes
    before a learner sees it."""
    problems = table_problems(df, inv)
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more"
                                             if len(problems) > 5 else "")
        raise TableError(f"the table {name!r} does not add up: {shown}")
    return df


def checked_rows(rows: Iterable[Mapping], name: str, inv: Invariants, *, index: str | None = None):
    """`rows` (dicts) as a checked DataFrame, indexed by `index` if given."""
    import pandas as pd

    df = pd.DataFrame(list(rows))
    if index and index in df:
        df = df.set_index(index)
    return checked_table(df, name, inv)


# --- python -m bughunt claims --------------------------------------------------------------------

def check_lesson(lesson) -> list[Finding]:
    """Every claim of `lesson` (a registry record), checked on a run made now. A check that
    raises is a claim that could not be shown true: it counts as false, with the error said."""
    from ..interrupts import Interrupted

    found = []
    for c in lesson.claims:
        try:
            found.append(c.on())
        except (ClaimError, Interrupted):
            raise
        except Exception as e:            # noqa: BLE001 - the run failed: the claim is not shown
            found.append(Finding(c.lesson, c.key, False, c.text, {},
                                 f"its check failed: {type(e).__name__}: {e}"))
    return found


def main(argv: list[str] | None = None) -> int:
    import json
    import sys

    from .registry import by_number, lessons

    from ..config import OneSentenceParser
    parser = OneSentenceParser(
        prog="python -m bughunt claims",
        description="Run every lesson's experiments headless and check every sentence in which "
                    "a lesson states what its own run found. Exit 0 when every claim holds, 1 "
                    "when one does not.")
    parser.add_argument("--lesson", type=int, metavar="N", help="one lesson only (99: appendix)")
    parser.add_argument("--json", action="store_true", help="every finding as data")
    args = parser.parse_args(argv)
    try:
        chosen = [by_number(args.lesson)] if args.lesson is not None else list(lessons())
    except LookupError as e:
        parser.error(f"--lesson {args.lesson}: {e}")
    checked = false = 0
    out = []
    for lesson in chosen:           # Ctrl-C: `bughunt.cli.main` says so in one line, exit 130
        found = check_lesson(lesson)
        bad = [f for f in found if not f.holds]
        checked, false = checked + len(found), false + len(bad)
        out.append({"lesson": lesson.number, "title": lesson.short_title,
                        "claims": [{"key": f.key, "holds": f.holds, "sentence": f.sentence,
                                    "measured": f.measured or _show_values(f.values),
                                    "values": {k: _as_text(v) for k, v in f.values.items()}}
                               for f in found]})
        if not args.json:
            print(f"lesson {lesson.label} ({lesson.short_title}): {len(found)} claims, "
                  f"{len(bad)} false", flush=True)
            for f in bad:
                said = f.measured or f"measured: {_show_values(f.values)}"
                print(f"  {lesson.label}.{f.key}: {f.sentence} -- on this run this did not "
                      f"hold: {said}", flush=True)
    if args.json:
        json.dump({"lessons": out, "checked": checked, "false": false}, sys.stdout, indent=1)
        print()
    else:
        print(f"claims: {checked} checked, {false} false")
    return 1 if false else 0
