"""Lesson 7's experiments: the runtime's examples run as real processes, the tasks table read live.

Every story runs `python -m bughunt.durable ...` in a fresh temp folder: a first process that dies
by SIGKILL (or closes, or is refused), then a resume. Between them the tasks table is read with a
checked read-only connection, which changes no byte, at each moment the lesson shows. Each
process is waited for, or killed, before its story returns, and its folder removed, on success
and on error. Results are records and pandas DataFrames; `bughunt.lab`'s lesson 7 draws them.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from . import DEFAULT_RESTART_LIMIT, DurableStore, read_only_connection, read_tasks
from .examples import PAUSE_BANNER, TOOL_CRASH_POINTS, WAIT_BANNER

COLUMNS = ["id", "kind", "status", "restarts", "phase", "n", "replay", "memos", "outcome"]
DB = "c.db"


@dataclass
class CliRun:
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


def run_durable(folder: Path, *args: str, expect=(0, -9)) -> CliRun:
    """CliRun `python -m bughunt.durable ARGS --db c.db --json` in `folder`."""
    cmd, rest = args[0], args[1:]
    proc = subprocess.run([sys.executable, "-m", "bughunt.durable", cmd, "--db", DB, *rest,
                           "--json"], capture_output=True, text=True, timeout=120, cwd=folder)
    if proc.returncode not in expect:
        raise RuntimeError(f"bughunt.durable {' '.join(args)} ended {proc.returncode}: "
                           f"{proc.stderr.strip()}")
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return CliRun(proc.returncode, events, proc.stderr.strip())


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
    """CliRun one of the text's SQL queries with pandas on a read-only connection.

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
class TaskStory:
    """One example, stopped and resumed, with the tasks table at each moment."""

    moments: dict = field(default_factory=dict)      # moment -> DataFrame
    printed: dict = field(default_factory=dict)      # process -> ticks it printed
    exits: dict = field(default_factory=dict)        # process -> how it ended
    result: object = None
    notes: list = field(default_factory=list)
    queries: dict = field(default_factory=dict)      # moment -> the text's query, as a DataFrame


WHERE = {"after-print": "--crash-after-tick", "before-print": "--crash-before-print",
         "close": "--close-after-tick", "before-memo": "--crash-before-memo"}


def count_story(crash_tick: int = 2, *, where: str = "after-print", to: int = 5) -> TaskStory:
    """Count to `to`, stopped at tick `crash_tick`: killed after its print, killed between memo and
    print, closed cleanly after its print (the lesson's own example), or, with the print before
    the memo, killed between print and memo (`before-memo`)."""
    story = TaskStory()
    order = ["--memo-after-print"] if where == "before-memo" else []
    with tempfile.TemporaryDirectory(prefix="bughunt-durable-") as tmp:
        folder, db = Path(tmp), Path(tmp) / DB
        first = run_durable(folder, "count", "--to", str(to), *order, WHERE[where],
                            str(crash_tick))
        story.exits["first"], story.printed["first"] = first.ended, _ticks(first)
        stopped = "after the close" if where == "close" else "after the crash"
        story.moments[stopped] = tasks_table(db)
        story.queries[stopped] = text_query(db, TEXT_QUERIES["example 12"])
        run_durable(folder, "recover")
        story.moments["after open"] = tasks_table(db)
        story.queries["after open"] = text_query(db, TEXT_QUERIES["example 12"])
        resume = run_durable(folder, "count", "--to", str(to), *order)
        story.exits["resume"], story.printed["resume"] = resume.ended, _ticks(resume)
        story.result = resume.of("done")[-1]["outcome"].get("result")
        story.moments["after the finish"] = tasks_table(db)
    return story


def _ticks(run: CliRun) -> list[int]:
    return [e["n"] for e in run.of("tick")]


def close_vs_crash():
    """The same count stopped after tick 2, once by a clean close and once by SIGKILL, reopened."""
    import pandas as pd

    rows = []
    for how, flag in (("clean close", "--close-after-tick"), ("crash (SIGKILL)",
                                                              "--crash-after-tick")):
        with tempfile.TemporaryDirectory(prefix="bughunt-durable-") as tmp:
            folder, db = Path(tmp), Path(tmp) / DB
            run_durable(folder, "count", flag, "2")
            at_end = read_tasks(db)[0]
            run_durable(folder, "recover")
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

    from . import ReadOnlyError, Runtime

    def digest(db: Path) -> dict:
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()[:12]
                for p in sorted(db.parent.glob(db.name + "*")) if not p.name.endswith("-shm")}

    with tempfile.TemporaryDirectory(prefix="bughunt-durable-") as tmp:
        folder, db = Path(tmp), Path(tmp) / DB
        run_durable(folder, "count", "--crash-after-tick", "2")
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
            run = run_durable(folder, "memo", "--candidate", candidate, *extra)
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
            run = run_durable(folder, "crash-loop", *flag)
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
            run = run_durable(folder, "flaky", "--dies", str(dies), "--steps", str(steps),
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


def builtin_limit_story(kind: str = "tool", limit: int = 2):
    """A built-in task cut off at the same place every time until the restart limit ends it."""
    import pandas as pd

    args = {"tool": ["tool-probe", "--crash-at", "in-call"],
            "generation": ["generate", "--crash-before-send"]}[kind]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bughunt-durable-") as tmp:
        folder = Path(tmp)
        for start in range(1, limit + 3):
            run = run_durable(folder, *args, "--restart-limit", str(limit))
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
               crash_at: str = "in-execute") -> TaskStory:
    """The tool probe: killed at `crash_at` with the tool declared `stored`, resumed with it
    declared `current` (default: unchanged). Tables at each moment; notes.txt; beforeTool runs."""
    current = current or stored
    story = TaskStory()
    with tempfile.TemporaryDirectory(prefix="bughunt-durable-") as tmp:
        folder, db = Path(tmp), Path(tmp) / DB
        first = run_durable(folder, "tool-probe", "--replay", stored, "--crash-at", crash_at)
        story.exits["first"] = first.ended
        story.moments["after the crash"] = tasks_table(db, TOOL_COLUMNS)
        story.queries["after the crash"] = text_query(db, TEXT_QUERIES["tool probe"])
        run_durable(folder, "recover")
        story.moments["after open"] = tasks_table(db, TOOL_COLUMNS)
        story.queries["after open"] = text_query(db, TEXT_QUERIES["tool probe"])
        resume = run_durable(folder, "tool-probe", "--replay", current)
        story.exits["resume"] = resume.ended
        story.moments["after the finish"] = tasks_table(db, TOOL_COLUMNS)
        story.result = resume.of("tool")[0]["outcome"]
        story.notes = resume.of("notes")[0]["lines"]
        story.printed["beforeTool"] = resume.of("hooks")[0]["runs"]
    return story


def run_tool_checkpoints(replay: str = "unsafe"):
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
            run = run_durable(folder, "generate", "--retries", str(retries),
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

    rows, started = [], []
    with tempfile.TemporaryDirectory(prefix="bughunt-durable-") as tmp:
        folder = Path(tmp)
        try:
            holder = start(folder, "--pause-after-tick", "1")
            started.append(holder)
            banner(holder, PAUSE_BANNER)
            second = subprocess.run([sys.executable, "-m", "bughunt.durable", "count", "--db",
                                     DB, "--to", "3"], cwd=folder, capture_output=True,
                                    text=True, timeout=60)
            waiter = start(folder, "--wait")
            started.append(waiter)
            waited = banner(waiter, WAIT_BANNER)
            holder_out = holder.stdout.readline()
            holder.kill()
            holder.communicate()
            waiter_out, _ = waiter.communicate(timeout=60)
        finally:                   # a story that fails leaves no runtime behind
            for proc in started:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
                for pipe in (proc.stdin, proc.stdout, proc.stderr):
                    pipe.close()
        rows.append({"process": "1: holds c.db (paused after tick 1)",
                     "printed": holder_out.strip(), "ended": "killed (SIGKILL) while holding it",
                     "said": "—"})
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
        run_durable(folder, "tool-probe", "--crash-at", "in-execute")
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
