"""The lab's code on screen: what a notebook shows of the package it runs, and of the source texts.

    show_source(apply_event)                   # the lab's code, read from the package itself
    show_source(worker_step("commit_page"))    # one rule of the worker's page loop, by name
    show_text_code("atomic_write")             # the source text's version, as it quotes it

What is shown is what runs: `show_source` reads the object's code with `inspect`, and refuses code
that holds a test switch or a path of this machine (neither belongs in code a learner reads).
"""

from __future__ import annotations

import html
import inspect
import re
import textwrap

#: What must never appear in code shown to a learner: the lab's test switches (planted bugs live
#: outside the code under test, as mutants) and paths of this machine.
TEST_HOOK = re.compile(r"\bbugs\b|plant", re.I)
MACHINE_PATH = re.compile(r"/tmp/|/home/|/root/|/Users/|/private/var/")


class Source:
    """Code shown in a notebook: Markdown with a Python fence (JupyterLab and GitHub highlight it);
    its plain-text form is the same code, so a terminal and nbval see exactly what is shown."""

    def __init__(self, title: str, code: str, note: str = "", language: str = "python"):
        self.title, self.code, self.note, self.language = title, code, note, language

    def _repr_markdown_(self) -> str:
        note = f"\n\n{self.note}" if self.note else ""
        return f"**{self.title}**{note}\n\n```{self.language}\n{self.code}\n```"

    def __repr__(self) -> str:
        return f"{self.title}\n\n{self.code}"


def qualified_name(obj) -> str:
    """`bughunt.events.apply_event`, `bughunt.worker.Agent.submit_report`: where to find it."""
    return f"{obj.__module__}.{obj.__qualname__}"


def _line_range(lines: list[str], spec) -> tuple[int, int]:
    """0-based [start, end) of `spec`: (first, last) 1-based line numbers, or (start text, end
    text): from the first line containing the start text to the next line containing the end
    text, both included."""
    first, last = spec
    if isinstance(first, str) and isinstance(last, str):
        try:
            start = next(i for i, line in enumerate(lines) if first in line)
            end = next(i for i in range(start, len(lines)) if last in lines[i])
        except StopIteration:
            raise ValueError(f"lines={spec!r}: no such lines in the source") from None
        return start, end + 1
    if isinstance(first, int) and isinstance(last, int) and 1 <= first <= last <= len(lines):
        return first - 1, last
    raise ValueError(f"lines={spec!r}: give (first, last) line numbers from 1 to {len(lines)}, "
                     f"or (start text, end text)")


def source_of(obj, *, lines=None) -> tuple[str, str]:
    """The code of `obj` as the package has it (dedented), optionally lines of it; and the range
    shown, in words ("" for all of it)."""
    code = textwrap.dedent(inspect.getsource(obj)).rstrip("\n")
    if lines is None:
        return code, ""
    all_lines = code.splitlines()
    start, end = _line_range(all_lines, lines)
    part = all_lines[start:end]
    indent = min((len(x) - len(x.lstrip()) for x in part if x.strip()), default=0)
    part = [x[indent:] for x in part]
    if start > 0:
        part.insert(0, "# ...")
    if end < len(all_lines):
        part.append("# ...")
    return "\n".join(part), f"lines {start + 1}-{end} of {len(all_lines)}"


def show_source(obj, *, lines=None, title: str | None = None, note: str = "") -> Source:
    """The lab's own code for `obj` (a function, method or class), read with `inspect` from the
    package the lab runs, so what the learner reads is what the experiment ran.

    `lines`: a part only, as (first, last) line numbers of the object's source, or as
    (start text, end text). Raises ValueError if the code shown holds a test switch or a path.
    """
    code, part = source_of(obj, lines=lines)
    name = qualified_name(obj)
    for pattern, what in ((TEST_HOOK, "a test switch"), (MACHINE_PATH, "a path of this machine")):
        if pattern.search(code):
            raise ValueError(f"{name}: its code holds {what} ({pattern.search(code).group()!r}); "
                             "the code a learner reads must not")
    heading = title or f"`{name}`" + (f" ({part})" if part else "")
    return Source(heading, code, note)


def show_code(code: str, title: str, note: str = "", language: str = "python") -> Source:
    """Code that is not the lab's (the source text's version, say), shown the same way;
    `language` names the fence ("typescript" for the second source text's runtime, "diff")."""
    return Source(title, textwrap.dedent(code).strip("\n"), note, language)


def worker_step(name: str):
    """The worker's function for one rule of the page loop, by name (`ask_model`, `visit_page`,
    `record_intent`, `submit_report`, `commit_page`, `run_page`): a function of `bughunt.worker`,
    or a method of its page loop (`Agent`). Lessons show the loop by these names."""
    from .. import worker

    found = getattr(worker, name, None)
    if found is None and hasattr(worker, "Agent"):
        found = getattr(worker.Agent, name, None)
    if not callable(found):
        raise LookupError(f"bughunt.worker has no function or Agent method named {name!r}")
    return found



def show_text_code(name: str) -> Source:
    """A source text's own version of `name`, as it quotes it (`reference.TEXT_CODE`: "apply_event",
    "atomic_write", "page_loop" from the first text; "recover", "tick", "execute", Pi's TypeScript,
    from the second)."""
    from .reference import TEXT_CODE

    if name not in TEXT_CODE:
        raise KeyError(f"no source-text code named {name!r} (known: {', '.join(TEXT_CODE)})")
    quoted = TEXT_CODE[name]
    return show_code(quoted.code, quoted.title, language=quoted.language)


def plain_message(message: str) -> str:
    """A worker's or a store's message as a learner reads it: without the program's name and
    without this machine's directories (`bughunt: /tmp/bughunt-x/run/events.jsonl:5: ...` becomes
    `events.jsonl:5: ...`), the same on every machine, as a notebook's stored output must be."""
    message = re.sub(r"(^|(?<=: ))bughunt: ", "", message)
    return re.sub(r"(/[^\s:]+/)+", "", message)


def html_table(rows) -> str:
    """(label, value) rows as a small HTML table, the value in bold: what a panel says about one
    run (a crash point, a call killed in flight)."""
    body = "".join(f"<tr><td style='padding-right:1em'>{html.escape(str(k))}</td>"
                   f"<td><b>{html.escape(str(v))}</b></td></tr>" for k, v in rows)
    return f"<table>{body}</table>"
