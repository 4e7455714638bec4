"""Lesson 7, durable tasks: the lesson's examples run as real processes, the tasks table read live.

Every story here runs `python -m bughunt.durable ...` in a fresh temp directory: a first process that
dies by SIGKILL, then a resume. Between them the SQLite tasks table is read with a read-only
connection (which changes no byte) at each moment the lesson shows: after the crash, after the open
(recovery), after the finish.
"""

from __future__ import annotations

import html
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import ipywidgets as W
from IPython.display import HTML, Image

from ..durable import DEFAULT_RESTART_LIMIT, DurableStore, read_tasks
from .exercises import exercise
from .style import COLORS, new_figure, png

COLUMNS = ["id", "kind", "status", "restarts", "phase", "n", "replay", "memos", "outcome"]


def durable(*args: str) -> tuple[int, list[dict]]:
    """Run `python -m bughunt.durable ARGS --json`; return its exit code and its JSON events."""
    proc = subprocess.run([sys.executable, "-m", "bughunt.durable", *args, "--json"],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode not in (0, -9):
        raise RuntimeError(f"bughunt.durable {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.returncode, [json.loads(line) for line in proc.stdout.splitlines()]


def tasks_table(db: Path, columns: list[str] | None = None):
    """The lesson's "storage in practice" table, read-only, as a DataFrame."""
    import pandas as pd

    rows = read_tasks(db)
    df = pd.DataFrame(rows, columns=COLUMNS, dtype=object)
    df = df.where(df.notna(), "—")
    return df[columns or [c for c in COLUMNS if (df[c] != "—").any() or c in ("restarts",)]]


def open_store(db: Path) -> list[int]:
    """Open the store the way a restarting runtime does (recovery), then drop it as a crash would."""
    store = DurableStore(db)
    recovered = store.recovered
    store.db.close()
    return recovered


@dataclass
class Story:
    """One example, crashed and resumed, with the tasks table at each moment."""

    moments: dict = field(default_factory=dict)      # moment -> DataFrame
    printed: dict = field(default_factory=dict)      # process -> what it printed
    exits: dict = field(default_factory=dict)        # process -> exit code (-9 = SIGKILL)
    result: object = None
    notes: list = field(default_factory=list)


def count_story(crash_tick: int = 2, *, where: str = "after-print", to: int = 5) -> Story:
    """Count to `to`, killed at tick `crash_tick` (after its print, or between memo and print)."""
    flag = {"after-print": "--crash-after-tick", "before-print": "--crash-before-print"}[where]
    story = Story()
    with tempfile.TemporaryDirectory(prefix="bughunt-durable-") as tmp:
        db = Path(tmp) / "count.db"
        code, events = durable("count", "--db", str(db), "--to", str(to), flag, str(crash_tick))
        story.exits["first"], story.printed["first"] = code, _ticks(events)
        story.moments["after the crash"] = tasks_table(db)
        open_store(db)
        story.moments["after open"] = tasks_table(db)
        code, events = durable("count", "--db", str(db), "--to", str(to))
        story.exits["resume"], story.printed["resume"] = code, _ticks(events)
        story.result = events[-1]["outcome"].get("result")
        story.moments["after the finish"] = tasks_table(db)
    return story


def _ticks(events: list[dict]) -> list[int]:
    return [e["n"] for e in events if e["event"] == "tick"]


def tool_story(replay: str = "unsafe") -> Story:
    """The tool probe: append "hello" to notes.txt, killed after the append, then resumed."""
    story = Story()
    with tempfile.TemporaryDirectory(prefix="bughunt-durable-") as tmp:
        db = Path(tmp) / "probe.db"
        cols = ["id", "kind", "status", "restarts", "phase", "replay", "outcome"]
        code, _ = durable("tool-probe", "--db", str(db), "--replay", replay, "--crash-in-execute")
        story.exits["first"] = code
        story.moments["after the crash"] = tasks_table(db, cols)
        open_store(db)
        story.moments["after open"] = tasks_table(db, cols)
        code, events = durable("tool-probe", "--db", str(db), "--replay", replay)
        story.exits["resume"] = code
        story.moments["after the finish"] = tasks_table(db, cols)
        out = {e["event"]: e for e in events}
        story.result = out["tool"]["outcome"]
        story.notes = out["notes"]["lines"]
    return story


def read_only_proof() -> dict:
    """Kill a count run, then open its database read-only: what it sees, and that no byte changed.

    The bytes compared are the database file and its write-ahead log; the `-shm` file is SQLite's
    shared-memory index of the log, rebuilt by any reader, holding no data.
    """
    import hashlib

    from ..durable import ReadOnlyError, Runtime

    def digest(db: Path) -> dict:
        return {p.name.replace(db.name, "DB"): hashlib.sha256(p.read_bytes()).hexdigest()[:12]
                for p in sorted(db.parent.glob(db.name + "*")) if not p.name.endswith("-shm")}

    with tempfile.TemporaryDirectory(prefix="bughunt-durable-") as tmp:
        db = Path(tmp) / "count.db"
        durable("count", "--db", str(db), "--crash-after-tick", "2")
        before = digest(db)
        store = DurableStore(db, read_only=True)
        seen = store.get(1)["state"]["status"]
        refused = []
        for what, attempt in (("commit", lambda: store.put(store.get(1))),
                              ("resume", lambda: Runtime(store, []).run())):
            try:
                attempt()
                refused.append(f"{what}: allowed (!)")
            except ReadOnlyError as e:
                refused.append(f"{what}: {type(e).__name__}: ...{str(e).split(':', 1)[-1]}")
        store.close()
        after = digest(db)
    return {"status seen": seen, "files": sorted(before), "unchanged": before == after,
            "refused": refused}


def close_vs_crash():
    """The same running task, ended once by a clean close and once by a crash, then reopened."""
    import pandas as pd

    rows = []
    with tempfile.TemporaryDirectory(prefix="bughunt-durable-") as tmp:
        for how in ("clean close", "crash (no close)"):
            db = Path(tmp) / f"{how[:5]}.db"
            store = DurableStore(db)
            tid = store.create("count", {"to": 5}, {"phase": "tick", "n": 3})
            rec = store.get(tid)
            rec["state"]["status"] = "running"
            store.put(rec)
            if how == "clean close":
                store.close()
            else:
                store.db.close()          # the connection just goes away, as on SIGKILL
            after_end = read_tasks(db)[0]
            open_store(db)
            after_open = read_tasks(db)[0]
            rows.append({"how the process ended": how, "status on disk": after_end["status"],
                         "after the next open": after_open["status"],
                         "restarts": after_open["restarts"] or 0, "n": after_open["n"]})
    return pd.DataFrame(rows).set_index("how the process ended")


def restart_limit_story(limit: int | None = DEFAULT_RESTART_LIMIT, runs: int = 8):
    """Start a task whose step always dies, again and again, until it ends or `runs` is reached."""
    import pandas as pd

    rows = []
    with tempfile.TemporaryDirectory(prefix="bughunt-durable-") as tmp:
        db = Path(tmp) / "loop.db"
        flag = ["--restart-limit", "unlimited" if limit is None else str(limit)]
        seen = 0          # restarts the runtime counted when this process opened the store
        for attempt in range(1, runs + 1):
            code, events = durable("crash-loop", "--db", str(db), *flag)
            row = read_tasks(db)[0]
            rows.append({"start": attempt, "restarts at open": seen,
                         "exit": "SIGKILL" if code == -9 else code, "status after": row["status"],
                         "outcome": (events[-1]["outcome"]["detail"]["reason"]
                                     if events else "—")})
            if code == 0:
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


#: Crash-loop policies of durable-execution peers (../shared/research/anchors-durable-peers.md).
PEERS = [
    {"system": "Temporal", "policy": "activities: unlimited attempts by default; workflow tasks "
     "retried indefinitely", "at the limit": "never stops by itself"},
    {"system": "DBOS", "policy": "max_recovery_attempts = 100, counting every dispatch",
     "at the limit": "MAX_RECOVERY_ATTEMPTS_EXCEEDED (dead letter); reset only by an explicit "
                     "resume"},
    {"system": "Restate", "policy": "max-attempts = 70 per invocation",
     "at the limit": "paused until resumed by hand"},
    {"system": "Inngest", "policy": "4 retries per step (5 attempts)",
     "at the limit": "the step fails"},
    {"system": "this lesson (Pi, newer version)", "policy": "5 restarts in a row without progress; "
     "progress resets the count", "at the limit": "faulted, reason restart_limit"},
]


def peers_table():
    import pandas as pd

    return pd.DataFrame(PEERS).set_index("system")


# --- the panel -----------------------------------------------------------------------------------

class DurablePanel:
    """Crash tick, where it falls, replay policy, restart limit; Run re-runs all three stories."""

    def __init__(self):
        self.crash_tick = W.IntSlider(value=2, min=1, max=5, description="crash at tick",
                                      continuous_update=False)
        self.where = W.ToggleButtons(options=[("after the print", "after-print"),
                                              ("between memo and print", "before-print")],
                                     value="after-print")
        self.replay = W.ToggleButtons(options=["unsafe", "safe"], value="unsafe",
                                      description="tool replay")
        self.limit = W.IntSlider(value=DEFAULT_RESTART_LIMIT, min=1, max=7,
                                 description="restart limit", continuous_update=False)
        self.unlimited = W.Checkbox(value=False, description="no limit")
        self.run_button = W.Button(description="Run", button_style="primary", icon="play")
        self.reset_button = W.Button(description="Reset", icon="undo")
        self.progress = W.IntProgress(value=0, min=0, max=3)
        self.status = W.Label()
        self.count_out, self.tool_out, self.loop_out = W.Output(), W.Output(), W.Output()
        self.run_button.on_click(lambda _: self.run())
        self.reset_button.on_click(lambda _: self.reset())
        self.results: dict = {}

    def run(self) -> dict:
        self.run_button.disabled = True
        self.progress.value = 0
        try:
            count = count_story(self.crash_tick.value, where=self.where.value)
            self._show(self.count_out, count, f"count to 5, killed at tick {self.crash_tick.value} "
                       f"({self.where.label}): first process printed {count.printed['first']}, "
                       f"the resume printed {count.printed['resume']}")
            self.progress.value = 1
            tool = tool_story(self.replay.value)
            self._show(self.tool_out, tool, f"tool probe, replay {self.replay.value}: "
                       f"{tool.result['status']}; notes.txt has {len(tool.notes)} line(s)")
            self.progress.value = 2
            limit = None if self.unlimited.value else self.limit.value
            loop = restart_limit_story(limit, runs=8)
            label = "no limit" if limit is None else f"limit {limit}"
            self.loop_out.outputs = ()
            self.loop_out.append_display_data(
                Image(data=png(plot_restart_limits({label: loop})), format="png"))
            self.loop_out.append_display_data(loop)
            self.progress.value = 3
            self.results = {"count": count, "tool": tool, "loop": loop}
            self.status.value = "Done: every table was read from the real SQLite file."
        finally:
            self.run_button.disabled = False
        return self.results

    @staticmethod
    def _show(out: W.Output, story: Story, headline: str) -> None:
        out.outputs = ()
        out.append_display_data(HTML(f"<b>{html.escape(headline)}</b>"))
        for moment, df in story.moments.items():
            out.append_display_data(HTML(f"<i>{html.escape(moment)}</i>"))
            out.append_display_data(df)

    def reset(self) -> None:
        self.crash_tick.value, self.where.value = 2, "after-print"
        self.replay.value, self.limit.value, self.unlimited.value = "unsafe", 5, False
        for out in (self.count_out, self.tool_out, self.loop_out):
            out.outputs = ()
        self.progress.value = 0
        self.results = {}
        self.status.value = "Reset."

    def widget(self) -> W.VBox:
        tabs = W.Tab(children=[self.count_out, self.tool_out, self.loop_out])
        for i, title in enumerate(["count to 5", "tool probe", "crash loop"]):
            tabs.set_title(i, title)
        return W.VBox([W.HBox([self.crash_tick, self.where]), self.replay,
                       W.HBox([self.limit, self.unlimited]),
                       W.HBox([self.run_button, self.reset_button, self.progress]), self.status,
                       tabs])

    def show(self) -> W.VBox:
        self.run()
        return self.widget()


def panel() -> DurablePanel:
    return DurablePanel()


# --- exercises -----------------------------------------------------------------------------------

@exercise("7.1", "Count to 5 is killed between tick 4's memo and its print. Which ticks are printed, "
          "by both processes together? Answer with a list, e.g. [1, 2, 3].",
          "[1, 2, 3, 5]. The memo printed-4 is durable before the print, so the re-run of tick 4 "
          "sees it and skips the print: tick 4 is lost, never doubled (at most once).")
def _ex_7_1(answer):
    story = count_story(4, where="before-print")
    truth = story.printed["first"] + story.printed["resume"]
    if list(answer) == truth:
        return True, f"Measured just now: {truth}."
    return False, "Which of memo and print comes first in the tick step?"


@exercise("7.2", "A tool declared replay 'safe' when it started is declared 'unsafe' after an "
          "upgrade, then the process is killed inside the tool and restarted. Does the tool run "
          "again? Answer True or False.",
          "False. Recovery re-runs a tool only if the policy stored with the intent AND the current "
          "declaration are both 'safe'; either one saying 'unsafe' means the result is "
          "'interrupted and may have partially run'.")
def _ex_7_2(answer):
    from ..durable.examples import append_tool
    from ..durable.runtime import Runtime
    with tempfile.TemporaryDirectory() as tmp:
        notes = Path(tmp) / "notes.txt"
        notes.write_text("hello\n")
        store = DurableStore(Path(tmp) / "t.db")
        args = {"path": str(notes), "text": "hello"}
        store.create("tool", {"name": "append", "arguments": args},
                     {"phase": "execute", "arguments": args, "replay": "safe"})
        Runtime(store, [], [append_tool("unsafe", crash=False)]).run()
        store.close()
        truth = len(notes.read_text().splitlines()) == 2
    if answer is truth:
        return True, "Measured: the file still has one line."
    return False, "Both the stored and the current policy must be 'safe' for a re-run."
