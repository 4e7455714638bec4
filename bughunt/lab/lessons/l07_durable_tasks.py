"""Lesson 7, durable tasks: the lesson's examples run as real processes, the tasks table read live.

Every story runs `python -m bughunt.durable ...` in a fresh temp folder (with relative paths, so
that what the processes print names `c.db`, never a temp path): a first process that dies by
SIGKILL (or closes, or is refused), then a resume. Between them the tasks table is read with a
checked read-only connection, which changes no byte, at each moment the lesson shows.
"""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import ipywidgets as W
from matplotlib.colors import to_rgba
from matplotlib.patches import Rectangle

from ...durable import DEFAULT_RESTART_LIMIT, DurableStore, read_only_connection, read_tasks
from ...durable.examples import PAUSE_BANNER, TOOL_CRASH_POINTS, WAIT_BANNER
from ..panel import Panel, Result
from ..judges import Measured, assess, defined_in, exercise, statement
from ..style import COLORS, new_figure
from ..registry import Lesson

COLUMNS = ["id", "kind", "status", "restarts", "phase", "n", "replay", "memos", "outcome"]
DB = "c.db"


@dataclass
class Run:
    """One process of a story: how it ended, what it printed (JSON events), its one-line error."""

    code: int                 # exit code; -9 = killed by SIGKILL
    events: list
    error: str

    @property
    def ended(self) -> str:
        return {-9: "killed (SIGKILL)", 0: "exit 0", 2: "refused (exit 2)",
                75: "busy (exit 75)", 130: "Ctrl-C (exit 130)"}.get(self.code, f"exit {self.code}")

    def of(self, event: str) -> list[dict]:
        return [e for e in self.events if e["event"] == event]


def durable(folder: Path, *args: str, expect=(0, -9)) -> Run:
    """Run `python -m bughunt.durable ARGS --db c.db --json` in `folder`."""
    cmd, rest = args[0], args[1:]
    proc = subprocess.run([sys.executable, "-m", "bughunt.durable", cmd, "--db", DB, *rest,
                           "--json"], capture_output=True, text=True, timeout=120, cwd=folder)
    if proc.returncode not in expect:
        raise RuntimeError(f"bughunt.durable {' '.join(args)} ended {proc.returncode}: "
                           f"{proc.stderr.strip()}")
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return Run(proc.returncode, events, proc.stderr.strip())


def tasks_table(db: Path, columns: list[str] | None = None):
    """The lesson's "storage in practice" table, read-only, as a DataFrame."""
    import pandas as pd

    df = pd.DataFrame(read_tasks(db), columns=COLUMNS, dtype=object)
    df = df.where(df.notna(), "—")
    return df[columns or [c for c in COLUMNS if (df[c] != "—").any() or c in ("restarts",)]]


#: The lesson text's own "storage in practice" (存储实况) queries, verbatim.
TEXT_QUERIES = {
    "example 12": """SELECT id, status, record ->> '$.state.checkpoint.n' AS n,
       record ->> '$.memos' AS memos, record ->> '$.restarts' AS restarts
FROM tasks;""",
    "tool probe": """SELECT id, kind, status, record ->> '$.restarts' AS restarts,
       record ->> '$.state.checkpoint.phase' AS phase,
       record ->> '$.state.checkpoint.replay' AS replay
FROM tasks ORDER BY id;""",
}


def text_query(db: Path, sql: str):
    """Run one of the text's SQL queries with pandas on a read-only connection.

    `->>` needs SQLite 3.38 or newer; on older builds the same query runs as `json_extract`.
    """
    import sqlite3

    import pandas as pd

    if sqlite3.sqlite_version_info < (3, 38):
        sql = re.sub(r"(\w+) ->> ('[^']*')", r"json_extract(\1, \2)", sql)
    with read_only_connection(db) as conn:
        df = pd.read_sql_query(sql, conn)
    for column in df.columns:              # SQL NULL makes pandas turn whole numbers into floats
        if df[column].dtype.kind == "f" and (df[column].dropna() % 1 == 0).all():
            df[column] = df[column].astype("Int64")
    return df.astype(object).where(df.notna(), "—")


# --- count to 5 ----------------------------------------------------------------------------------

@dataclass
class Story:
    """One example, stopped and resumed, with the tasks table at each moment."""

    moments: dict = field(default_factory=dict)      # moment -> DataFrame
    printed: dict = field(default_factory=dict)      # process -> ticks it printed
    exits: dict = field(default_factory=dict)        # process -> how it ended
    result: object = None
    notes: list = field(default_factory=list)
    queries: dict = field(default_factory=dict)      # moment -> the text's query, as a DataFrame


WHERE = {"after-print": "--crash-after-tick", "before-print": "--crash-before-print",
         "close": "--close-after-tick"}


def count_story(crash_tick: int = 2, *, where: str = "after-print", to: int = 5) -> Story:
    """Count to `to`, stopped at tick `crash_tick`: killed after its print, killed between memo and
    print, or closed cleanly after its print (the lesson's own example)."""
    story = Story()
    with tempfile.TemporaryDirectory(prefix="bughunt-durable-") as tmp:
        folder, db = Path(tmp), Path(tmp) / DB
        first = durable(folder, "count", "--to", str(to), WHERE[where], str(crash_tick))
        story.exits["first"], story.printed["first"] = first.ended, _ticks(first)
        stopped = "after the close" if where == "close" else "after the crash"
        story.moments[stopped] = tasks_table(db)
        story.queries[stopped] = text_query(db, TEXT_QUERIES["example 12"])
        durable(folder, "recover")
        story.moments["after open"] = tasks_table(db)
        story.queries["after open"] = text_query(db, TEXT_QUERIES["example 12"])
        resume = durable(folder, "count", "--to", str(to))
        story.exits["resume"], story.printed["resume"] = resume.ended, _ticks(resume)
        story.result = resume.of("done")[-1]["outcome"].get("result")
        story.moments["after the finish"] = tasks_table(db)
    return story


def _ticks(run: Run) -> list[int]:
    return [e["n"] for e in run.of("tick")]


def close_vs_crash():
    """The same count stopped after tick 2, once by a clean close and once by SIGKILL, reopened."""
    import pandas as pd

    rows = []
    for how, flag in (("clean close", "--close-after-tick"), ("crash (SIGKILL)",
                                                              "--crash-after-tick")):
        with tempfile.TemporaryDirectory(prefix="bughunt-durable-") as tmp:
            folder, db = Path(tmp), Path(tmp) / DB
            durable(folder, "count", flag, "2")
            at_end = read_tasks(db)[0]
            durable(folder, "recover")
            after = read_tasks(db)[0]
            rows.append({"how the process ended": how, "status on disk": at_end["status"],
                         "after the next open": after["status"], "n": after["n"],
                         "restarts": after["restarts"] or 0})
    return pd.DataFrame(rows).set_index("how the process ended")


def read_only_proof() -> dict:
    """Kill a count run, then open its database read-only: what it sees, and that no byte changed.

    The bytes compared are the database file and its write-ahead log; the `-shm` file is SQLite's
    shared-memory index of the log, rebuilt by any reader, holding no data.
    """
    import hashlib

    from ...durable import ReadOnlyError, Runtime

    def digest(db: Path) -> dict:
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()[:12]
                for p in sorted(db.parent.glob(db.name + "*")) if not p.name.endswith("-shm")}

    with tempfile.TemporaryDirectory(prefix="bughunt-durable-") as tmp:
        folder, db = Path(tmp), Path(tmp) / DB
        durable(folder, "count", "--crash-after-tick", "2")
        before = digest(db)
        with DurableStore(db, read_only=True) as store:
            seen = store.get(1)["state"]["status"]
            refused = []
            for what, attempt in (("commit", lambda: store.put(store.get(1))),
                                  ("resume", lambda: Runtime(store, []).run())):
                try:
                    attempt()
                    refused.append(f"{what}: allowed (!)")
                except ReadOnlyError as e:
                    refused.append(f"{what}: {type(e).__name__}: ...{str(e).split(':', 1)[-1]}")
        after = digest(db)
    return {"status seen": seen, "files": sorted(before), "unchanged": before == after,
            "refused": refused}


# --- memo: two writers of one memo ---------------------------------------------------------------

def memo_story():
    """Two processes propose different values for the same memo; the first write wins."""
    import pandas as pd

    rows = []
    with tempfile.TemporaryDirectory(prefix="bughunt-durable-") as tmp:
        folder = Path(tmp)
        for writer, (candidate, extra) in enumerate((("A", ["--crash-after-memo"]),
                                                     ("B", [])), start=1):
            run = durable(folder, "memo", "--candidate", candidate, *extra)
            memo = run.of("memo")[0]
            done = run.of("done")
            rows.append({"writer": f"process {writer}", "proposed": memo["candidate"],
                         "memo holds": memo["winner"], "process ended": run.ended,
                         "task result": done[0]["outcome"]["result"] if done else "—"})
    return pd.DataFrame(rows).set_index("writer").fillna("—")


# --- the crash-loop limit ------------------------------------------------------------------------

def restart_limit_story(limit: int | None = DEFAULT_RESTART_LIMIT, runs: int = 8):
    """Start a task whose step always dies, again and again, until it ends or `runs` is reached."""
    import pandas as pd

    rows = []
    with tempfile.TemporaryDirectory(prefix="bughunt-durable-") as tmp:
        folder, db = Path(tmp), Path(tmp) / DB
        flag = ["--restart-limit", "unlimited" if limit is None else str(limit)]
        seen = 0          # restarts the runtime counted when this process opened the store
        for attempt in range(1, runs + 1):
            run = durable(folder, "crash-loop", *flag)
            row = read_tasks(db)[0]
            rows.append({"start": attempt, "restarts at open": seen,
                         "exit": "SIGKILL" if run.code == -9 else run.code,
                         "status after": row["status"],
                         "outcome": (run.of("done")[0]["outcome"]["detail"]["reason"]
                                     if run.code == 0 else "—"),
                         "report": (run.of("report")[0]["type"] if run.of("report") else "—")})
            if run.code == 0:
                break
            seen = (row["restarts"] or 0) + 1
    return pd.DataFrame(rows).set_index("start")


def plot_restart_limits(stories: dict):
    """One lane per restart limit: each start of a step that always dies, until the limit ends it.

    A cross is a process killed inside the step; the number above it is the restart count the
    runtime saw when that process opened the store; a square is the start that faulted instead.
    """
    fig, ax = new_figure(9, 1.0 + 0.9 * len(stories))
    for lane, (label, df) in enumerate(stories.items()):
        killed = df[df["exit"] == "SIGKILL"]
        ax.scatter(killed.index, [lane] * len(killed), marker="x", s=70, color=COLORS["red"],
                   label="killed by SIGKILL inside the step" if lane == 0 else None)
        ended = df[df["outcome"] != "—"]
        ax.scatter(ended.index, [lane] * len(ended), marker="s", s=90, color=COLORS["blue"],
                   label="faulted: restart_limit (not run)" if lane == 0 else None)
        for start, restarts in df["restarts at open"].items():
            ax.annotate(str(restarts), (start, lane), xytext=(0, 8), textcoords="offset points",
                        ha="center", fontsize=8)
        if ended.empty:
            ax.annotate("... and on", (df.index.max(), lane), xytext=(12, -3),
                        textcoords="offset points", fontsize=9)
    ax.set_yticks(range(len(stories)), list(stories))
    ax.set_ylim(len(stories) - 0.4, -0.6)
    ax.set_xticks(range(1, max(df.index.max() for df in stories.values()) + 1))
    ax.set_xlim(0.5, max(df.index.max() for df in stories.values()) + 1.2)
    ax.set_xlabel("start of the process (1 = first run); numbers: restarts counted at open")
    ax.set_ylabel("restart limit")
    ax.set_title("A step that always dies: the crash-loop limit ends it, no limit never does")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def reset_story(dies: int = 2, steps: int = 3, limit: int = 3):
    """Steps that each die `dies` times before they get through: the count of restarts in a row
    resets at every step's progress, so the task finishes although it was cut off more often in
    total than the limit allows in a row."""
    import pandas as pd

    rows = []
    with tempfile.TemporaryDirectory(prefix="bughunt-durable-") as tmp:
        folder = Path(tmp)
        total = 0
        for start in range(1, dies * steps + steps + 2):
            run = durable(folder, "flaky", "--dies", str(dies), "--steps", str(steps),
                          "--restart-limit", str(limit))
            for e in run.events:
                if e["event"] in ("dies", "progress"):
                    total += e["event"] == "dies"
                    rows.append({"start": start, "step": e["step"],
                                 "restarts in a row": e["restarts"],
                                 "what happened": "killed" if e["event"] == "dies" else "progress",
                                 "cut-offs in total": total})
            if run.code == 0:
                outcome = run.of("done")[0]["outcome"]
                rows.append({"start": start, "step": "—", "restarts in a row": "—",
                             "what happened": f"task {outcome['status']}",
                             "cut-offs in total": total})
                break
    return pd.DataFrame(rows)


def plot_reset(df, limit: int = 3):
    """Restarts in a row (reset by progress) against cut-offs in total, per step the runtime ran;
    if the limit ended the task, the start where it did, with the count it found there."""
    runs = df[df["step"] != "—"].reset_index(drop=True)
    ended = df.iloc[-1]["what happened"]
    fig, ax = new_figure(9, 3.6)
    x = list(range(1, len(runs) + 1))
    bars = ax.bar(x, runs["restarts in a row"], color=COLORS["blue"],
                  label="restarts in a row when the step started (the runtime's count)")
    ax.bar_label(bars, fontsize=8)
    labels = [f"{i}\nstep {step}\n{what}" for i, (step, what) in
              enumerate(zip(runs["step"], runs["what happened"]), start=1)]
    if ended == "task faulted":
        # The last start ran no step: the runtime found the count at the limit and ended the task.
        count = int(runs["restarts in a row"].iloc[-1]) + 1
        last = ax.bar([len(x) + 1], [count], color=COLORS["red"], hatch="//", edgecolor="white",
                      label="the start where the count in a row reached the limit: no step ran")
        ax.bar_label(last, fontsize=8)
        labels.append(f"{len(x) + 1}\n(no step)\nfaulted")
        x = x + [len(x) + 1]
        title = (f"No progress: the count in a row reaches the limit ({limit}), and the task "
                 "ends faulted")
    else:
        title = (f"Progress resets the count in a row: {ended} after "
                 f"{df.iloc[-1]['cut-offs in total']} cut-offs, more than the limit")
    ax.plot(range(1, len(runs) + 1), runs["cut-offs in total"], marker="o",
            color=COLORS["orange"],
            label="cut-offs in total, after this start (a count that never resets)")
    ax.axhline(limit, color=COLORS["red"], linestyle="--", label=f"restart limit {limit}")
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_ylim(0, max(limit, int(runs["cut-offs in total"].max())) + 2.5)
    ax.set_xlabel("each start of a step, in order (killed = SIGKILL inside the step)")
    ax.set_ylabel("count (restarts)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    return fig


def builtin_limit_story(kind: str = "tool", limit: int = 2):
    """A built-in task cut off at the same place every time until the restart limit ends it."""
    import pandas as pd

    args = {"tool": ["tool-probe", "--crash-at", "in-call"],
            "generation": ["generate", "--crash-before-send"]}[kind]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bughunt-durable-") as tmp:
        folder = Path(tmp)
        for start in range(1, limit + 3):
            run = durable(folder, *args, "--restart-limit", str(limit))
            if run.code != 0:
                rows.append({"start": start, "ended": run.ended, "result": "—", "report": "—"})
                continue
            if kind == "tool":
                outcome = run.of("tool")[0]["outcome"]
                result = f"{outcome['status']}: {outcome['message']}: {outcome['content']!r}"
            else:
                outcome = run.of("done")[0]["outcome"]
                result = (f"{outcome['status']}: {outcome['message']}, reason "
                          f"{outcome['reason']}, input {outcome['input']}")
            report = run.of("report")[0]
            rows.append({"start": start, "ended": run.ended, "result": result,
                         "report": f"{report['type']} ({report['kind']}, {report['reason']})"})
            break
    return pd.DataFrame(rows).set_index("start")


# --- tools: the four checkpoints, and stored x current replay -------------------------------------

TOOL_COLUMNS = ["id", "kind", "status", "restarts", "phase", "replay", "outcome"]


def tool_story(stored: str = "unsafe", current: str | None = None,
               crash_at: str = "in-execute") -> Story:
    """The tool probe: killed at `crash_at` with the tool declared `stored`, resumed with it
    declared `current` (default: unchanged). Tables at each moment; notes.txt; beforeTool runs."""
    current = current or stored
    story = Story()
    with tempfile.TemporaryDirectory(prefix="bughunt-durable-") as tmp:
        folder, db = Path(tmp), Path(tmp) / DB
        first = durable(folder, "tool-probe", "--replay", stored, "--crash-at", crash_at)
        story.exits["first"] = first.ended
        story.moments["after the crash"] = tasks_table(db, TOOL_COLUMNS)
        story.queries["after the crash"] = text_query(db, TEXT_QUERIES["tool probe"])
        durable(folder, "recover")
        story.moments["after open"] = tasks_table(db, TOOL_COLUMNS)
        story.queries["after open"] = text_query(db, TEXT_QUERIES["tool probe"])
        resume = durable(folder, "tool-probe", "--replay", current)
        story.exits["resume"] = resume.ended
        story.moments["after the finish"] = tasks_table(db, TOOL_COLUMNS)
        story.result = resume.of("tool")[0]["outcome"]
        story.notes = resume.of("notes")[0]["lines"]
        story.printed["beforeTool"] = resume.of("hooks")[0]["runs"]
    return story


def tool_checkpoints(replay: str = "unsafe"):
    """Kill one tool call right after each of its checkpoints (and inside the tool), resume, and
    measure: what ran again, what the agent got."""
    import pandas as pd

    where = {"in-call": "① in call, after beforeTool",
             "after-intent": "② after the intent, before the tool",
             "in-execute": "② inside the tool, after the append",
             "after-result": "③ after the result, before the agent"}
    rows = []
    for crash_at in TOOL_CRASH_POINTS:
        story = tool_story(replay, crash_at=crash_at)
        table = story.moments["after the crash"]
        tool = table[table["kind"] == "tool"].iloc[0]
        result = story.result
        rows.append({"killed": where[crash_at],
                     "tool task on disk": f"{tool['status']} at {tool['phase']}",
                     "beforeTool ran": len(story.printed["beforeTool"]),
                     "its memo decision": story.printed["beforeTool"][-1].split(": ", 1)[1],
                     "notes.txt lines": len(story.notes),
                     "the agent got": result["status"] + ": " + (result.get("message") or
                                                                 result["result"]["content"])})
    return pd.DataFrame(rows).set_index("killed")


def replay_cell(stored: str, current: str) -> dict:
    """One cell of the stored x current table, measured: killed inside the tool, resumed."""
    story = tool_story(stored, current)
    ran_again = len(story.notes) == 2
    return {"stored": stored, "current": current, "tool ran again": ran_again,
            "notes.txt lines": len(story.notes), "result": story.result["status"],
            "message": story.result.get("message") or story.result["result"]["content"]}


def replay_table(cells: list[dict] | None = None):
    """The 2x2 table: stored policy (rows) x current policy (columns), every cell measured."""
    import pandas as pd

    cells = cells or [replay_cell(s, c) for s in ("safe", "unsafe") for c in ("safe", "unsafe")]
    df = pd.DataFrame(cells)
    df["cell"] = df.apply(lambda r: ("ran again: " if r["tool ran again"] else "not run: ")
                          + f"{r['notes.txt lines']} line(s), {r['result']}", axis=1)
    table = df.pivot(index="stored", columns="current", values="cell")
    table.index.name, table.columns.name = "stored with the intent ↓", "declared now →"
    return table


def plot_replay(cells: list[dict], highlight: tuple | None = None):
    """The 2x2 grid: a filled cell re-ran the tool (its effect doubled), an empty cell did not."""
    fig, ax = new_figure(5.6, 3.6)
    order = ("safe", "unsafe")
    for c in cells:
        x, y = order.index(c["current"]), order.index(c["stored"])
        ran = c["tool ran again"]
        fill = to_rgba(COLORS["orange"] if ran else COLORS["sky"], 0.9 if ran else 0.35)
        ax.add_patch(Rectangle((x - 0.48, y - 0.48), 0.96, 0.96, facecolor=fill,
                               hatch="//" if ran else "", edgecolor=COLORS["black"],
                               linewidth=3 if highlight == (c["stored"], c["current"]) else 0))
        ax.text(x, y, ("re-ran the tool\n" if ran else "not re-run:\n'interrupted'\n")
                + f"notes.txt: {c['notes.txt lines']} line(s)", ha="center", va="center",
                fontsize=9, bbox={"facecolor": "white", "alpha": 0.85, "edgecolor": "none"})
    ax.set_xlim(-0.5, 1.5)
    ax.set_ylim(1.5, -0.5)
    ax.set_xticks([0, 1], order)
    ax.set_yticks([0, 1], order)
    ax.set_xlabel("replay declared by the tool now (after the restart)")
    ax.set_ylabel("replay stored with the intent")
    reran = [f"{c['stored']} × {c['current']}" for c in cells if c["tool ran again"]]
    ax.set_title("Killed inside the tool: run again only in " + (", ".join(reran) or "no cell")
                 if len(cells) == 4 else f"Killed inside the tool: {len(cells)} of 4 cells run")
    return fig


# --- a model request in flight -------------------------------------------------------------------

def generation_story(mode: str = "crash", retries: int = 2) -> dict:
    """One model request, stopped mid-stream (`crash`: SIGKILL once; `close`: a clean close;
    `exhaust`: SIGKILL at every attempt), then resumed until the task ends."""
    import pandas as pd

    flag = {"crash": "--crash-mid-stream", "close": "--close-mid-stream",
            "exhaust": "--crash-mid-stream"}[mode]
    processes, tables = [], {}
    with tempfile.TemporaryDirectory(prefix="bughunt-durable-") as tmp:
        folder, db = Path(tmp), Path(tmp) / DB
        for start in range(1, retries + 4):
            stop = start == 1 or mode == "exhaust"
            run = durable(folder, "generate", "--retries", str(retries),
                          *([flag] if stop else []))
            task = read_only_task(db)
            processes.append({"process": start, "ended": run.ended,
                              "checkpoint after": json.dumps(task["state"]["checkpoint"]),
                              "status after": task["state"]["status"]})
            if start == 1:
                tables["after the first process"] = tasks_table(db, ["id", "kind", "status",
                                                                     "restarts", "phase"])
            if run.code == 0 and task["state"]["status"] == "terminal":
                break
        bill = [json.loads(line) for line in (folder / "bill.jsonl").read_text().splitlines()]
        outcome = task["state"]["outcome"]
        reports = run.of("report")
    requests = pd.DataFrame([{"request": b["request"], "messages sent": len(b["messages"]),
                              "what the model was sent": b["messages"][-1]["content"],
                              "digest": b["digest"]} for b in bill]).set_index("request")
    return {"processes": pd.DataFrame(processes).set_index("process"), "requests": requests,
            "outcome": outcome, "reports": reports, "tables": tables}


def read_only_task(db: Path) -> dict:
    with DurableStore(db, read_only=True) as store:
        return store.all()[0]


# --- one runtime per database --------------------------------------------------------------------

def lock_story():
    """A runtime holds c.db (paused after tick 1); a second is refused; a third waits (--wait)
    and takes over the moment the first one is killed."""
    import pandas as pd

    def start(folder, *args):
        return subprocess.Popen([sys.executable, "-m", "bughunt.durable", "count", "--db", DB,
                                 "--to", "3", *args], cwd=folder, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def banner(proc, prefix):
        for line in proc.stderr:
            if line.startswith(prefix):
                return line.strip()
        raise RuntimeError(f"bughunt.durable ended before {prefix!r}")

    rows = []
    with tempfile.TemporaryDirectory(prefix="bughunt-durable-") as tmp:
        folder = Path(tmp)
        holder = start(folder, "--pause-after-tick", "1")
        banner(holder, PAUSE_BANNER)
        second = subprocess.run([sys.executable, "-m", "bughunt.durable", "count", "--db", DB,
                                 "--to", "3"], cwd=folder, capture_output=True, text=True,
                                timeout=60)
        waiter = start(folder, "--wait")
        waited = banner(waiter, WAIT_BANNER)
        holder_out = holder.stdout.readline()
        holder.kill()
        holder.communicate()
        waiter_out, waiter_err = waiter.communicate(timeout=60)
        rows.append({"process": "1: holds c.db (paused after tick 1)", "printed": holder_out.strip(),
                     "ended": "killed (SIGKILL) while holding it", "said": "—"})
        rows.append({"process": "2: started while 1 holds it", "printed": second.stdout.strip()
                     or "—", "ended": f"exit {second.returncode}",
                     "said": second.stderr.strip().split(": ", 1)[1]})
        rows.append({"process": "3: started with --wait", "printed": " / ".join(
            waiter_out.split("\n")).strip(" /"), "ended": f"exit {waiter.returncode}",
            "said": waited.split(": ", 1)[1]})
    return pd.DataFrame(rows).set_index("process")


def refusals():
    """Bad inputs a hostile or careless user could give the CLI: each refused in one sentence,
    every file left as it was."""
    import hashlib
    import sqlite3

    import pandas as pd

    def files(folder: Path) -> dict:
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()
                if p.is_file() and not p.name.endswith("-shm")}

    def cli(folder, *args):
        proc = subprocess.run([sys.executable, "-m", "bughunt.durable", *args], cwd=folder,
                              capture_output=True, text=True, timeout=60)
        return proc.returncode, proc.stderr.strip().split(": ", 1)[-1]

    rows = []
    with tempfile.TemporaryDirectory(prefix="bughunt-durable-") as tmp:
        folder = Path(tmp)
        other = sqlite3.connect(folder / "other_app.db")
        other.execute("CREATE TABLE notes (text TEXT)")
        other.commit()
        other.close()
        (folder / "notes.txt").write_text("not a database\n")
        durable(folder, "tool-probe", "--crash-at", "in-execute")
        cases = [("another program's database", ["count", "--db", "other_app.db"]),
                 ("a text file", ["count", "--db", "notes.txt"]),
                 ("a wake time of 1e308 ms", ["count", "--db", "new.db", "--sleep-ms", "1e308"]),
                 ("a task of a kind count does not run", ["count", "--db", DB])]
        for what, args in cases:
            before = files(folder)
            code, said = cli(folder, *args)
            rows.append({"given": what, "exit": code, "the one sentence": said,
                         "files unchanged": files(folder) == before})
    return pd.DataFrame(rows).set_index("given")


# --- peers ---------------------------------------------------------------------------------------

#: Crash-loop policies of durable-execution peers, from their public documentation.
PEERS = [
    {"system": "Temporal", "policy": "activities retry with unlimited attempts by default; "
     "workflow tasks retry until the workflow times out (unlimited by default)",
     "at the limit": "never stops by itself", "source": "docs.temporal.io/encyclopedia/"
     "retry-policies"},
    {"system": "DBOS", "policy": "max_recovery_attempts = 100, counting every attempt",
     "at the limit": "status MAX_RECOVERY_ATTEMPTS_EXCEEDED; reset only by an explicit resume",
     "source": "docs.dbos.dev/python/reference/decorators"},
    {"system": "Restate", "policy": "unlimited retries by default; max attempts configurable",
     "at the limit": "pause (resume by hand) or kill, as configured",
     "source": "docs.restate.dev/services/configuration"},
    {"system": "Inngest", "policy": "4 retries per step (5 attempts)",
     "at the limit": "the step fails", "source": "inngest.com/docs/features/inngest-functions/"
     "error-retries/retries"},
    {"system": "this lesson's runtime (and the text's)", "policy": "5 restarts in a row without "
     "progress; progress resets the count", "at the limit": "faulted, reason restart_limit "
     "(built-in tasks: their own result)", "source": "bughunt/durable/runtime.py"},
]


def peers_table():
    import pandas as pd

    return pd.DataFrame(PEERS).set_index("system")


# --- the panel -----------------------------------------------------------------------------------

class DurablePanel(Panel):
    """Count (crash tick, where), the tool (stored x current replay, where it is killed), the
    restart limit and the model request; Run re-runs the stories as real processes."""

    def __init__(self):
        self._cells: dict = {}       # the stored x current cells measured so far
        super().__init__()
        for name, widget in self.controls.items():
            setattr(self, name, widget)

    def make_controls(self) -> dict:
        return {
            "crash_tick": W.IntSlider(value=2, min=1, max=5, description="stop at tick",
                                      continuous_update=False),
            "where": W.ToggleButtons(options=[("killed after the print", "after-print"),
                                              ("killed between memo and print", "before-print"),
                                              ("clean close", "close")],
                                     value="after-print", style={"button_width": "auto"}),
            "stored": W.ToggleButtons(options=["safe", "unsafe"], value="unsafe",
                                      description="stored"),
            "current": W.ToggleButtons(options=["safe", "unsafe"], value="unsafe",
                                       description="declared now"),
            "tool_crash": W.Dropdown(options=list(TOOL_CRASH_POINTS), value="in-execute",
                                     description="tool killed"),
            "limit": W.IntSlider(value=DEFAULT_RESTART_LIMIT, min=1, max=7,
                                 description="restart limit", continuous_update=False),
            "unlimited": W.Checkbox(value=False, description="no limit"),
            "generation": W.ToggleButtons(options=["crash", "close", "exhaust"], value="crash",
                                          description="request"),
        }

    def rows(self) -> list:
        c = self.controls
        return [W.HBox([c["crash_tick"], c["where"]]),
                W.HBox([c["stored"], c["current"], c["tool_crash"]]),
                W.HBox([c["limit"], c["unlimited"], c["generation"]])]

    def execute(self, settings: dict) -> Result:
        where_label = dict((v, k) for k, v in self.controls["where"].options)[settings["where"]]
        count = count_story(settings["crash_tick"], where=settings["where"])
        self.tick(1, 4)
        stored, current, crash_at = settings["stored"], settings["current"], settings["tool_crash"]
        tool = tool_story(stored, current, crash_at)
        figures = []
        if crash_at == "in-execute":
            self._cells[(stored, current)] = {
                "stored": stored, "current": current, "tool ran again": len(tool.notes) == 2,
                "notes.txt lines": len(tool.notes), "result": tool.result["status"]}
            figures = [plot_replay(list(self._cells.values()), highlight=(stored, current))]
        self.tick(2, 4)
        limit = None if settings["unlimited"] else settings["limit"]
        loop = restart_limit_story(limit, runs=8)
        self.tick(3, 4)
        gen = generation_story(settings["generation"])
        self.tick(4, 4)
        sections = {
            "count to 5": self._story(count, f"count to 5, stopped at tick "
                                      f"{settings['crash_tick']} ({where_label}): the first "
                                      f"process printed {count.printed['first']}, the resume "
                                      f"printed {count.printed['resume']}"),
            "tool probe": self._story(tool, f"tool probe killed {crash_at}, stored {stored}, "
                                      f"declared now {current}: {tool.result['status']}; "
                                      f"notes.txt has {len(tool.notes)} line(s); beforeTool ran "
                                      f"{len(tool.printed['beforeTool'])} time(s)", figures),
            "crash loop": Result("", figures=[plot_restart_limits(
                {"no limit" if limit is None else f"limit {limit}": loop})], tables=[loop]),
            "model request": Result("", notes=[
                f"<b>model request, {html.escape(settings['generation'])}: "
                f"{html.escape(gen['outcome']['status'])}</b>"],
                tables=[gen["processes"], gen["requests"]]),
        }
        return Result("Done: every table was read from the real SQLite file.", sections=sections,
                      data={"count": count, "tool": tool, "loop": loop, "generation": gen})

    @staticmethod
    def _story(story: Story, headline: str, figures: list = ()) -> Result:
        tables = []
        for moment, df in story.moments.items():
            tables += [f"<i>{html.escape(moment)}</i>", df]
        return Result("", notes=[f"<b>{html.escape(headline)}</b>"], figures=list(figures),
                      tables=tables)

    def reset(self) -> None:
        super().reset()
        self._cells = {}


def panel() -> DurablePanel:
    return DurablePanel()


# --- exercises: predict, then run ----------------------------------------------------------------

@exercise("7.1", "Count to 5 is killed between tick 4's memo and its print, then resumed. Which "
          "ticks are printed, by both processes together? Predict a list, e.g. [1, 2, 3].",
          "[1, 2, 3, 5]. The memo printed-4 is durable before the print, so the re-run of tick 4 "
          "sees it and skips the print: tick 4 is lost, never doubled (at most once).")
def _ex_7_1(answer):
    story = count_story(4, where="before-print")
    truth = story.printed["first"] + story.printed["resume"]
    if not isinstance(answer, (list, tuple)):
        return False, f"Answer with a list of ticks, e.g. [1, 2, 3]. Measured just now: {truth}."
    if list(answer) == truth:
        return True, f"Measured just now: {truth}."
    return False, (f"Measured just now: {truth}, you predicted {list(answer)}. Which of memo and "
                   "print comes first in the tick step?")


@exercise("7.2", "The tool probe (replay 'unsafe') is killed right after its intent {execute} "
          "is committed, before the tool starts. After the restart, how many lines does "
          "notes.txt have, and is the tool's result 'completed' or 'failed'? Predict a tuple, "
          "e.g. (1, 'completed').",
          "(0, 'failed'). The tool never ran, but recovery cannot know that: all it has is the "
          "intent, which says the tool may have started. An unsafe tool is not re-run, so the "
          "model is told it 'was interrupted and may have partially run' although nothing "
          "happened: honest uncertainty.")
def _ex_7_2(answer):
    story = tool_story("unsafe", crash_at="after-intent")
    truth = (len(story.notes), story.result["status"])
    said = f"Measured just now: {truth[0]} line(s) in notes.txt, the tool's result {truth[1]!r}."
    if not isinstance(answer, (list, tuple)) or len(answer) != 2:
        return False, "Answer with a tuple: (lines, 'completed' or 'failed'). " + said
    if answer[0] == truth[0] and str(answer[1]).strip().lower() == truth[1]:
        return True, said
    return False, said + " What does recovery know about a tool whose intent is recorded?"


@exercise("7.3", "A tool was declared replay 'unsafe' when its intent was recorded; after an "
          "upgrade it is declared 'safe'. The process was killed inside the tool. Does the tool "
          "run again after the restart? Predict True or False.",
          "False. Recovery re-runs a tool only if the policy stored with the intent AND the "
          "current declaration are both 'safe': the old intent was recorded under a promise that "
          "did not allow a re-run, and an upgrade cannot change what the old attempt already did.")
def _ex_7_3(answer):
    cell = replay_cell("unsafe", "safe")
    truth = cell["tool ran again"]
    said = f"Measured just now: notes.txt has {cell['notes.txt lines']} line(s), {cell['result']}."
    if not isinstance(answer, bool):
        return False, "Answer True or False (without quotes). " + said
    if answer is truth:
        return True, said
    return False, said + " Both the stored and the current policy must be 'safe' for a re-run."


@exercise("7.4", "Transfer: with --restart-limit 3, a flaky task has 2 steps, and each step dies "
          "3 times before it gets through (flaky --dies 3 --steps 2). Does the task finish "
          "'completed' or end 'faulted'? Predict one of the two words.",
          "'faulted'. The first step dies at restarts 0, 1 and 2; at the fourth start its count "
          "in a row is 3, the limit, so the runtime ends the task instead of running the step. "
          "Progress would have reset the count, but the step never got through.")
def _ex_7_4(answer):
    df = reset_story(dies=3, steps=2, limit=3)
    truth = df.iloc[-1]["what happened"].split()[-1]
    c = assess(answer, truth, what="the task ended")
    said = f" The task was cut off {df.iloc[-1]['cut-offs in total']} times in all."
    return c.reply(said, hint=" Count the restarts in a row the first step reaches.")


@exercise("7.5", "Transfer: a model request is killed mid-stream at every attempt, with 1 retry "
          "(generate --retries 1 --crash-mid-stream, started until the task ends). How many "
          "requests does the provider bill? Predict a number.",
          "2. Attempt 1 is killed; the next process counts it as failed, keeps the half answer "
          "as an aborted entry and sends attempt 2 after the backoff; attempt 2 is killed too; "
          "the retries are used up, so the next process ends the task with runFailure (reason "
          "interrupted) without sending a third request.")
def _ex_7_5(answer):
    gen = generation_story("exhaust", retries=1)
    truth = len(gen["requests"])
    c = assess(answer, truth, what="requests billed")
    said = f" The task ended {gen['outcome']['message']} ({gen['outcome']['reason']})."
    return c.reply(said, hint=" Count attempts: the first one plus the retries.")


# --- common wrong statements, each answered by a run made just now --------------------------------

@statement("Q7.1", "After a crash, a task carries on from the line of its step where the process "
           "died.",
           "False. The checkpoint records which step to enter, not how far inside it the task "
           "got. The resume runs the whole step again from its start; only a memo keeps what the "
           "step already did from happening twice.")
def _q7_1():
    story = count_story(2, where="before-print")
    n = story.moments["after the crash"].iloc[0]["n"]
    resumed = story.printed["resume"]
    return Measured(2 in resumed, f"Measured just now: count to 5 killed between tick 2's memo "
                    f"and its print, so the next line would have printed tick 2. The stored "
                    f"checkpoint still said n = {n}, and the resumed process printed {resumed}: "
                    "it entered tick 2's step from its start, found the memo printed-2 set, and "
                    "skipped the print (lost, never doubled).")


@statement("Q7.2", "A clean close counts as a restart, just like a crash.",
           "False. Both put the task back to pending with its checkpoint kept, but only a real "
           "cut-off counts toward the crash-loop limit: a close is the runtime's own decision, "
           "so nothing went wrong.")
def _q7_2():
    df = close_vs_crash()
    close, crash = (int(df.loc[how, "restarts"]) for how in ("clean close", "crash (SIGKILL)"))
    return Measured(close >= 1, f"Measured just now: count stopped after tick 2, then opened "
                    f"again: after a clean close restarts = {close}, after SIGKILL restarts = "
                    f"{crash}. On disk before the open: {df.loc['clean close', 'status on disk']} "
                    f"vs {df.loc['crash (SIGKILL)', 'status on disk']}.")


@statement("Q7.3", "Opening a crashed database read-only, just to look, changes no byte of it.",
           "True. A read-only open sees the task as the crash left it (still running), refuses "
           "commits and resume, and writes nothing: it is how to inspect a crashed run without "
           "recovering it.")
def _q7_3():
    proof = read_only_proof()
    return Measured(proof["unchanged"], f"Measured just now: after a kill, a read-only open saw "
                    f"the task {proof['status seen']!r}; the bytes of "
                    f"{' and '.join(proof['files'])} were "
                    f"{'unchanged' if proof['unchanged'] else 'CHANGED'}; it refused "
                    f"{sum('allowed' not in r for r in proof['refused'])} of 2 writes (commit, "
                    "resume).")


@statement("Q7.4", "After a crash mid-stream, the retry sends the model its half answer, so it "
           "can carry on from there.",
           "False. The half answer is kept in the task's result as an aborted entry, never sent: "
           "the retry sends exactly the messages of the first attempt.")
def _q7_4():
    gen = generation_story("crash")
    requests = gen["requests"]
    same = requests["digest"].nunique() == 1
    aborted = gen["outcome"]["result"]["aborted"]
    return Measured(not same, f"Measured just now: {len(requests)} requests on the provider's "
                    f"bill, with {'the same' if same else 'different'} messages (digest); the "
                    f"half answer is in the result as aborted: {aborted[0]['text']!r}.")


LESSON = Lesson(
    number=7,
    notebook="07_durable_tasks",
    title="Durable tasks: a checkpoint is where a step starts",
    short_title="durable tasks",
    question="How does a task runtime resume steps, memos and tools?",
    teaches="a durable task runtime on SQLite: checkpoint = step entry, memo, restart limit, "
            "tool replay policy, a model request in flight, the tasks table read live",
    objectives=(
        "explain why a checkpoint records the *entry* of a step, and make a step safe to run "
        "again with a first-write-wins memo;",
        "tell a clean close from a crash in the tasks table, and read that table with SQL and "
        "pandas;",
        "say when a crash loop ends a task, and why progress resets the count;",
        "predict, for each of the four checkpoints of a tool call, what a crash there "
        "re-runs, and fill in the stored × current replay table;",
        "say what happens to a model request that was streaming when the process died.",
    ),
    minutes=45,
    prerequisites="Lessons 2 and 4 (checkpoints, the danger window, idempotency keys); basic "
                  "SQL and pandas. Terms, in English and Chinese: the "
                  "[glossary](glossary.md).",
    panel=panel,
    exercises=defined_in(__name__),
)

