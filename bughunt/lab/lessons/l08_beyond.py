"""Lesson 8, beyond the source text: tables and figures for each failure the first source text
left untested.

The experiments live in `bughunt.beyond`; this module turns their records into DataFrames with no
machine paths in them, draws them, and offers a panel to re-run any of them with other settings.
"""

from __future__ import annotations

import html
import re
import shutil
import tempfile
from pathlib import Path

import ipywidgets as W

from ... import beyond as B
from ...config import RunConfig
from ...conformance import ConformanceReport, conform
from ...experiment import crash_point, crash_points, run_worker, work_dir
from ...instruments import mutants
from ...stores import LOG_FILE, SNAPSHOT_FILE, StoreDamage, rebuild_from_disk
from ...stores.contract import RULES
from .. import results
from ..claims import Claims, Invariants
from ..judges import Measured, assess, defined_in, exercise, statement
from ..practice import NUMBER, YES_NO, Answer, Problem, as_exercise, choice, drawn
from ..panel import KNOBS, Panel, Result
from ..plots import describe_config
from ..style import COLORS, new_figure
from ..views import Table, plain_message, summary_table
from ..registry import Lesson

#: Small sites keep the sweeps of this lesson within a minute; the shape of the results is the same.
CHAIN = B.SAFE.replace(pages=3)
RACE = B.SAFE.replace(pages=4)
DISK = B.SAFE


# --- crash during recovery -----------------------------------------------------------------------

@results.memoized
def chain(config: RunConfig = CHAIN, progress=None):
    """Every (first crash, second crash) pair of `config`, as a DataFrame (once per kernel)."""
    import pandas as pd

    df = pd.DataFrame(B.chain_sweep(config, progress=progress))
    return df


CHAIN_VERDICTS = Invariants(
    total="pairs", parts=("correct", "wrong"),
    within=("second crash really happened", "duplicates", "lost reports", "three-way failures",
            "differs from a single resume", "a no-op resume changed files", "errors"))


def chain_table(df, config: RunConfig = CHAIN):
    """One row: the pairs of the sweep, how many ended correct or wrong (they add up to the
    pairs), and how many showed each kind of failure (each at most the pairs)."""
    s = B.chain_summary(df.to_dict("records"))
    s["wrong"] = sum(not c for c in df["correct"])
    return summary_table([{"design": describe_run(config), **s}], "crash during recovery",
                         CHAIN_VERDICTS, index="design")


def plot_chain(df, config: RunConfig = CHAIN):
    """First crash x second crash: every pair that ran, its outcome, and whether the second kill
    really happened (a point the resume never reaches leaves it running to the end)."""
    points = crash_points(config)
    labels = [p.name for p in points]
    # the points a resume can reach, then the steps of recovery itself that this sweep crashed in
    seconds = [p.name for p in points] + [r for r in B.RECOVERY_LABELS if r in set(df["second"])]
    fig, ax = new_figure(10, 6)
    for _, r in df.iterrows():
        x = seconds.index(r["second"])
        y = r["first"] - 1
        color = COLORS["green"] if r["correct"] else COLORS["red"]
        marker = "s" if r["second_killed"] else "o"
        ax.scatter([x], [y], marker=marker, s=60 if r["second_killed"] else 25, color=color,
                   alpha=0.9 if r["second_killed"] else 0.5)
    ax.set_xticks(range(len(seconds)), seconds, rotation=90, fontsize=7)
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("second crash: a point the resume reaches, or a step of recovery itself")
    ax.set_ylabel("first crash")
    n, ok = len(df), int(df["correct"].sum())
    ax.set_title(f"A crash during recovery, then a final resume: {ok} of {n} pairs correct "
                 f"({describe_run(config)})", fontsize=10)
    from matplotlib.lines import Line2D
    handles = [Line2D([], [], marker="s", linestyle="", color=COLORS["green"],
                      label="correct, second kill happened"),
               Line2D([], [], marker="o", linestyle="", color=COLORS["green"], alpha=0.5,
                      label="correct, resume never reached that point"),
               Line2D([], [], marker="s", linestyle="", color=COLORS["red"], label="wrong")]
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def describe_run(config: RunConfig) -> str:
    from ..plots import describe_config
    return f"{config.pages} pages, " + describe_config(config)


# --- two resumers --------------------------------------------------------------------------------

@results.memoized
def races(config: RunConfig = RACE, trials: int = 10, seed: int = 0):
    """Two resumers started together on a crashed run, `trials` times with the run lock and
    `trials` times without (once per kernel)."""
    import pandas as pd

    rows = []
    for lock in (True, False):
        for r in B.two_resumers(config, trials=trials, seed=seed, lock=lock):
            rows.append({"lock": "flock" if lock else "none (unsafe)", **r})
    return pd.DataFrame(rows)


RACE_VERDICTS = Invariants(
    total="trials", parts=("exactly one proceeded", "both proceeded", "neither proceeded"),
    within=("trials with repeated events", "rebuild refused", "three-way failures"))


def race_table(df):
    """Per lock: the trials, split by how many resumers went on (they add up to the trials),
    and how many trials showed repeated events, a refused rebuild, a three-way failure."""
    rows = []
    for lock, d in df.groupby("lock", sort=False):
        rows.append({"lock": lock, "trials": len(d),
                     "exactly one proceeded": int((d["proceeded"] == 1).sum()),
                     "both proceeded": int((d["proceeded"] == 2).sum()),
                     "neither proceeded": int((d["proceeded"] == 0).sum()),
                     "trials with repeated events": int((d["duplicate_events"] > 0).sum()),
                     "rebuild refused": int(d["rebuild_refused"].sum()),
                     "three-way failures": int((~d["three_way_check"].astype(bool)).sum())})
    return summary_table(rows, "two resumers", RACE_VERDICTS, index="lock")


def plot_races(df):
    fig, ax = new_figure(8, 3.2)
    table = race_table(df).df
    cols = ["exactly one proceeded", "both proceeded", "trials with repeated events",
            "rebuild refused"]
    colors = [COLORS["green"], COLORS["red"], COLORS["orange"], COLORS["purple"]]
    width = 0.2
    for i, (col, color) in enumerate(zip(cols, colors)):
        xs = [j + (i - 1.5) * width for j in range(len(table))]
        bars = ax.bar(xs, table[col], width=width, color=color, label=col)
        ax.bar_label(bars, fontsize=8)
    ax.set_xticks(range(len(table)), [f"lock: {x}" for x in table.index])
    ax.set_ylabel("trials")
    ax.set_ylim(0, table["trials"].max() * 1.3)
    ax.set_title(f"Two resumers started at the same moment, {int(table['trials'].iloc[0])} "
                 "trials each")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


@results.memoized
def lock_demos(config: RunConfig = RACE):
    """What the run lock does when its holder is paused, and when its holder dies while a forked
    child still holds the lock's descriptor: each a real run of real workers."""
    import pandas as pd

    paused = B.paused_holder(config)
    inherited = B.inherited_lock(config)
    rows = [
        {"the holder": paused["holder"],
         "a second worker": f"exit {paused['second worker exit']}: "
                            f"{_reason(paused['second worker says'])}",
         "afterwards": f"the holder, let go, finishes ({paused['holder, after SIGCONT']})"},
        {"the holder": inherited["holder"],
         "a second worker": f"exit {inherited['worker while the child lives: exit']}: "
                            f"{_reason(inherited['it says'])}",
         "afterwards": "once the child has ended, a worker takes the run: exit "
                       f"{inherited['worker after the child ended: exit']}"},
    ]
    return pd.DataFrame(rows).set_index("the holder")


def _reason(message: str) -> str:
    """A worker's refusal without the program name and the run directory: "run is busy: ..."."""
    message = plain_message(message)
    return message[message.index("run is busy"):] if "run is busy" in message else message


# --- disk full and failed fsync ------------------------------------------------------------------

@results.memoized
def disk_full(config: RunConfig = DISK, errno_name: str = "ENOSPC"):
    """The k-th write fails (a short write, then no space), for every k (once per kernel)."""
    import pandas as pd

    df = pd.DataFrame(B.disk_full_sweep(config, errno_name=errno_name))
    df["message"] = df["message"].map(plain_message)
    return df


@results.memoized
def fsync_failures(config: RunConfig = DISK.replace(fsync="always")):
    """The k-th fsync fails with an I/O error, for every k (once per kernel)."""
    import pandas as pd

    df = pd.DataFrame(B.fsync_failure_sweep(config))
    df["message"] = df["message"].map(plain_message)
    return df


#: The worker names the file that failed first: "RUN_DIR/events.jsonl: cannot write (...)",
#: "RUN_DIR: fsync failed (...)" (the run directory itself: a directory fsync).
FAILING_FILE = re.compile(r"^(?:bughunt: )?(\S+?): (?:cannot write|fsync failed)")


def failing_file(message: str) -> str | None:
    """The file a worker's I/O failure names: `events.jsonl`, `config.json.tmp`, or the run
    directory itself (a failed directory fsync)."""
    m = FAILING_FILE.search(message)
    if not m:
        return None
    path = m.group(1)
    return "the run directory" if path == "RUN_DIR" else path.rsplit("/", 1)[-1]


def fault_table(df):
    """One row per k: the file that failed, the exit, what the tracker had acknowledged before the
    failure and whether all of it was kept, and whether the next resume finished correctly."""
    cols = ["k", "exit", "acknowledged_before", "acknowledged_kept", "correct_after_resume"]
    if "retried" in df:
        cols.insert(2, "retried")
    out = df[cols].copy()
    out.insert(1, "failing file", df["message"].map(failing_file))
    return out.set_index("k")


def fault_summary(**sweeps):
    """Per experiment and failing file: which k hit it, and what happened every time.

    `sweeps`: name -> DataFrame of `disk_full` or `fsync_failures`, e.g. `write=..., fsync=...`.
    """
    import pandas as pd

    rows = []
    for name, df in sweeps.items():
        t = fault_table(df).reset_index()
        for file, d in t.groupby("failing file", sort=False):
            ks = list(d["k"])
            rows.append({
                "failure": name, "failing file": file,
                "k": f"{ks[0]}" if len(ks) == 1 else f"{ks[0]}-{ks[-1]}" if ks == list(
                    range(ks[0], ks[-1] + 1)) else ", ".join(map(str, ks)),
                "runs": len(d),
                "stopped with exit 74": int((d["exit"] == 74).sum()),
                "kept every acknowledged report": int(d["acknowledged_kept"].sum()),
                "fsynced again after the failure": (int(d["retried"].sum()) if "retried" in d
                                                    else None),
                "correct after resume": int(d["correct_after_resume"].sum())})
    df = pd.DataFrame(rows).set_index(["failure", "failing file"])
    return Table(df, "full disk and failed fsync", FAULT_COUNTS)


#: Each count in the fault summary is of runs: at most the runs of its row.
FAULT_COUNTS = Invariants(total="runs", within=("stopped with exit 74",
                                                "kept every acknowledged report",
                                                "correct after resume"),
                          # a failed write calls no fsync to count: empty when only writes failed
                          may_be_empty=("fsynced again after the failure",))


# --- power loss ----------------------------------------------------------------------------------

@results.memoized
def power_loss(variants=tuple(B.POWER_VARIANTS), samples_per_cut: int = 3, seed: int = 0,
               progress=None):
    """Every variant through the power-loss simulation (once per kernel): one journaled clean
    run each, then the states a power cut may leave, each recovered by a real worker."""
    import pandas as pd

    rows = []
    for i, v in enumerate(variants, 1):
        rows.extend(B.power_loss_sweep(v, samples_per_cut=samples_per_cut, seed=seed))
        if progress:
            progress(i, len(variants))
    return pd.DataFrame(rows)


def is_refused(r) -> bool:
    """Recovery refused this state's files. A refusal is a message (a str); where there is none a
    record holds None, and a DataFrame row NaN (pandas 3): neither is a refusal."""
    return isinstance(r["refused"], str)


#: The power table's verdicts partition the states: each state is in exactly one of them.
POWER_VERDICTS = Invariants(
    total="states explored",
    parts=("correct", "refused by recovery", "lost committed pages silently", "wrong otherwise"),
    within=("states with duplicates",), counts=("most committed pages lost",))


def power_rows(df, refused=is_refused) -> list[dict]:
    """Per variant: the states explored and, counted each on its own, the four verdicts (correct;
    the files refused; a committed page lost although recovery accepted the files; wrong in some
    other way). `refused`: the test of a refusal (the tests put the old one here)."""
    rows = []
    for name, g in df.groupby("variant", sort=False):
        recs = g.to_dict("records")
        rows.append({
            "variant": name, "states explored": len(recs),
            "correct": sum(bool(r["correct"]) for r in recs),
            "refused by recovery": sum(refused(r) for r in recs),
            "lost committed pages silently": sum(not refused(r) and r["committed_pages_lost"] > 0
                                                 for r in recs),
            "wrong otherwise": sum(not r["correct"] and not refused(r)
                                   and r["committed_pages_lost"] == 0 for r in recs),
            "most committed pages lost": max((int(r["committed_pages_lost"]) for r in recs),
                                             default=0),
            "states with duplicates": sum(r["duplicate_reports"] > 0 for r in recs)})
    return rows


def power_table(df, refused=is_refused) -> Table:
    """The power-loss table, checked: its verdicts add up to the states explored."""
    return summary_table(power_rows(df, refused), "power loss", POWER_VERDICTS, index="variant")


def plot_power(df):
    table = power_table(df).df
    fig, ax = new_figure(10, 3.8)
    y = list(range(len(table)))
    total = table["states explored"]
    left = 0
    for col, color, label in (("correct", COLORS["green"], "correct after resume"),
                              ("refused by recovery", COLORS["purple"],
                               "refused by recovery (pages lost, loudly)"),
                              ("lost committed pages silently", COLORS["red"],
                               "lost a committed page silently"),
                              ("wrong otherwise", COLORS["orange"], "wrong otherwise")):
        share = table[col] / total * 100
        ax.barh(y, share, left=left, color=color, label=label)
        left = left + share
    for i, (name, row) in enumerate(table.iterrows()):
        lost = int(row["refused by recovery"] + row["lost committed pages silently"]
                   + row["wrong otherwise"])
        most = row["most committed pages lost"]
        ax.text(102, i, f"{lost} of {row['states explored']} states wrong"
                + (f", up to {most} pages lost" if most else ""), va="center", fontsize=8)
    ax.set_yticks(y, list(table.index), fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 190)
    ax.set_xticks([0, 25, 50, 75, 100])
    ax.set_xlabel("power-cut states explored (%)")
    ax.set_title("Power loss, simulated from the door's journal: who loses a committed page?")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


# --- damaged files -------------------------------------------------------------------------------

@results.memoized
def damage_demo():
    """A few damages to a finished run's files (pure log, and log + snapshot every 4), and what
    recovery makes of each."""
    import pandas as pd

    log, snap = B.SAFE, B.SAFE.replace(snapshot_every=4)
    cases = [
        ("log: tail cut off mid-record", log, LOG_FILE, lambda b: b[:-30]),
        ("log: one bit flipped in line 5", log, LOG_FILE, lambda b: _flip_in_line(b, 4)),
        ("log: a line zeroed in the middle", log, LOG_FILE, lambda b: _zero_line(b, 6)),
        ("log: garbage appended", log, LOG_FILE, lambda b: b + b"\x00\xffnot json"),
        ("snapshot: cut in half", snap, SNAPSHOT_FILE, lambda b: b[:len(b) // 2]),
        ("snapshot: one bit flipped", snap, SNAPSHOT_FILE, lambda b: _flip(b, len(b) // 3)),
    ]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bughunt-damage-") as tmp:
        cleans = {}
        for config in (log, snap):
            clean = Path(tmp) / f"clean{len(cleans)}"
            proc = run_worker(clean, config)
            assert proc.returncode == 0, proc.stderr
            cleans[config] = (clean, rebuild_from_disk(clean, config).state)
        for what, config, name, damage in cases:
            clean, full = cleans[config]
            run_dir = Path(tmp) / f"case{len(rows)}"
            shutil.copytree(clean, run_dir)
            path = run_dir / name
            path.write_bytes(damage(path.read_bytes()))
            try:
                rec = rebuild_from_disk(run_dir, config)
                state = rec.state
                verdict = ("the full state" if state == full else
                           f"an earlier state (page {state['next_page'] - 1} done)")
                note = ", ".join(filter(None, [
                    f"{rec.torn_lines_skipped} torn line(s) skipped" if rec.torn_lines_skipped
                    else "", f"snapshot fallback: {rec.snapshot_fallback}"
                    if rec.snapshot_fallback else ""]))
            except StoreDamage as e:
                verdict, note = "refused", plain_message(str(e))
            rows.append({"damage": what, "recovery gives": verdict, "detail": note})
    return pd.DataFrame(rows).set_index("damage")


def _flip(b: bytes, i: int, bit: int = 0x01) -> bytes:
    return b[:i] + bytes([b[i] ^ bit]) + b[i + 1:]


def _flip_in_line(b: bytes, n: int) -> bytes:
    """Flip the lowest bit of the page number in line n+1: still valid JSON, a different page."""
    lines = b.split(b"\n")
    start = sum(len(x) + 1 for x in lines[:n])
    return _flip(b, start + lines[n].index(b'"page":') + len(b'"page":'))


def _zero_line(b: bytes, n: int) -> bytes:
    lines = b.split(b"\n")
    lines[n] = b"\0" * len(lines[n])
    return b"\n".join(lines)


# --- planted bugs --------------------------------------------------------------------------------

@results.memoized
def bugs(pages: int = 3, progress=None):
    """Each planted bug against the check meant to catch it, with the conformance suite's
    verdict (once per kernel)."""
    import pandas as pd

    return pd.DataFrame(B.planted_bugs(pages=pages, progress=progress)).set_index("bug")


class PlantedBugs:
    """Each planted bug as its diff, beside what the lab's checks said about it: the sweep meant
    to catch it (failures with the bug, and on the correct worker) and the conformance suite."""

    def __init__(self, table):
        self.table = table

    def cards(self) -> list[tuple[str, str, str]]:
        """(heading, verdicts, diff) per bug, every figure from `table`, every diff from the
        mutant's patch applied to the real source now."""
        out = []
        for i, (bug, row) in enumerate(self.table.iterrows(), 1):
            caught = "caught" if row["caught"] else "NOT caught"
            suite = row["conformance suite"]
            suite = ("no store rule broken: only a sweep of real processes can see it"
                     if suite == "no store rule broken"
                     else "breaks " + ", ".join(f"`{r}`" for r in suite.split(", ")))
            verdicts = (f"| {row['caught by']} | the conformance suite |\n|---|---|\n"
                        f"| **{caught}**: {row['failures, with the bug']} failures with the bug, "
                        f"{row['failures, correct worker']} on the correct worker | {suite} |")
            out.append((f"**{i}. `{bug}`**: {row['what it does']}", verdicts, mutants.diff(bug)))
        return out

    def _repr_markdown_(self) -> str:
        return "\n\n".join(f"{head}\n\n{verdicts}\n\n```diff\n{diff.rstrip()}\n```"
                           for head, verdicts, diff in self.cards())

    def __repr__(self) -> str:
        return "\n\n".join(f"{head}\n{verdicts}\n{diff.rstrip()}"
                           for head, verdicts, diff in self.cards())


def planted_bug_cards(table) -> PlantedBugs:
    return PlantedBugs(table)


# --- the store contract and its conformance suite -------------------------------------------------

def contract_rules():
    """The store contract's promises, by the id the conformance suite checks them under."""
    import pandas as pd

    return pd.DataFrame([{"rule": rule, "the store promises": text}
                         for rule, text in RULES.items()]).set_index("rule")


@results.memoized
def conformance(config: RunConfig) -> ConformanceReport:
    """The conformance suite on the lab's store `config` names: every crash state of a run."""
    return conform(config)


def conformance_table(report: ConformanceReport):
    """One row per rule: how many crash states checked it, violations, the first one in words."""
    table = report.table()
    table.columns.name = f"{report.store}: {report.states} crash states"
    return table


# --- the panel -----------------------------------------------------------------------------------

#: Each experiment and the knobs it uses, in the order shown. A knob the experiment does not use is
#: not shown: every knob on screen changes what runs, and means one thing.
EXPERIMENTS = {
    "crash during recovery": ("store", "write_mode", "key", "intent", "pending", "pages"),
    "two resumers": ("lock", "store", "pages"),
    "disk full": ("store", "fsync", "key", "pages"),
    "failed fsync": ("store", "key", "pages"),
    "power loss": ("store", "write_mode", "fsync", "dir_fsync", "key", "pages"),
}
#: A knob shown only while another knob has a given value: what a pending intent is done with
#: matters only when intents are recorded; the directory fsync exists only when fsync is on.
SHOWN_ONLY_WHEN = {"pending": ("intent", True), "dir_fsync": ("fsync", "always")}
#: What each experiment fixes instead of offering a knob, and why (shown under the knobs).
FIXED = {
    "crash during recovery": "every pair of a first and a second crash; fsync never (kill -9 "
                             "cannot tell fsync from no fsync, lesson 6)",
    "two resumers": "8 races, each after a crash at a seeded random point; fsync never",
    "disk full": "the k-th write fails with 'no space left on device', for every k of one run",
    "failed fsync": "fsync always (an fsync must be called to fail); the k-th fsync fails with "
                    "an I/O error, for every k of one run",
    "power loss": "the power-cut states of one journaled clean run, 3 samples per cut",
}


class BeyondPanel(Panel):
    """Pick an experiment; only its knobs are shown; Run re-runs it for real and shows its table.

    `plan()` is what the controls describe (the experiment, its configuration and its options), so
    the panel logic can be tested without running anything.
    """

    running = "Running real processes..."

    def __init__(self):
        self.fixed = W.HTML()
        self.knob_box = W.VBox()
        self.df = None
        super().__init__()
        self.experiment = self.controls["experiment"]
        self.knobs = {n: w for n, w in self.controls.items() if n != "experiment"}
        self._show_knobs()

    def make_controls(self) -> dict:
        # The settings every panel offers (one per RunConfig field, `panel.KNOBS`), and the ones
        # only this lesson has: a two-store choice, the planted bug, the lock, a short site.
        start, shared = RunConfig(fsync="always", pages=3), {}
        for name, field in (("write_mode", "write_mode"), ("fsync", "fsync"),
                            ("key", "idempotency_key"), ("intent", "intent"),
                            ("pending", "pending")):
            shared[name] = KNOBS[field].make(start)
            shared[name].description = KNOBS[field].label
        return {
            "experiment": W.Dropdown(options=list(EXPERIMENTS), value="two resumers",
                                     description="experiment"),
            "store": W.ToggleButtons(options=["log", "snapshot"], value="log",
                                     description="store"),
            "write_mode": shared["write_mode"],
            "fsync": shared["fsync"],
            "dir_fsync": W.ToggleButtons(options=[("on", True), ("off (planted bug)", False)],
                                         value=True, description="directory fsync"),
            "key": shared["key"],
            "intent": shared["intent"],
            "pending": shared["pending"],
            "lock": W.ToggleButtons(options=[("flock", True), ("none (unsafe)", False)],
                                    value=True, description="run lock"),
            "pages": W.IntSlider(value=3, min=3, max=6, description="pages",
                                 continuous_update=False),
        }

    def rows(self) -> list:
        return [self.controls["experiment"], self.knob_box, self.fixed]

    def changed(self, name: str) -> None:
        self._show_knobs()
        super().changed(name)

    def restore(self, name: str, value) -> None:
        super().restore(name, value)
        self._show_knobs()

    # --- what the controls describe ---------------------------------------------------------------

    def shown(self) -> list[str]:
        """The knobs the chosen experiment uses, given the other knobs' values."""
        out = []
        for name in EXPERIMENTS[self.controls["experiment"].value]:
            other = SHOWN_ONLY_WHEN.get(name)
            if other and other[0] in out and self.controls[other[0]].value != other[1]:
                continue
            if other and other[0] not in out:
                continue
            out.append(name)
        return out

    def fixed_note(self) -> str:
        """What the chosen experiment fixes, in words, including the hidden knobs' values."""
        notes = [FIXED[self.controls["experiment"].value]]
        if "intent" not in self.shown():
            notes.append("intents on with the log store, off with the snapshot store")
        return "; ".join(notes) + "."

    def _show_knobs(self) -> None:
        self.knob_box.children = [self.controls[n] for n in self.shown()]
        self.fixed.value = f"<i>Fixed here: {html.escape(self.fixed_note())}</i>"

    def plan(self) -> tuple[str, RunConfig, dict]:
        """(experiment, configuration, options) from the shown knobs; hidden knobs play no part.

        Raises ConfigError for a mix of settings that cannot run.
        """
        what, shown = self.controls["experiment"].value, set(self.shown())

        def knob(name, default):
            return self.controls[name].value if name in shown else default

        store = knob("store", "log")
        intent = knob("intent", store == "log")
        fsync = "always" if what == "failed fsync" else knob("fsync", "never")
        config = RunConfig(store=store, write_mode=knob("write_mode", "atomic"), fsync=fsync,
                           idempotency_key=knob("key", True), intent=intent,
                           pending=knob("pending", "redo"), pages=knob("pages", 3))
        options = {}
        if what == "two resumers":
            options["lock"] = knob("lock", True)
        if what == "power loss":
            options["mutant"] = None if knob("dir_fsync", True) else "no-dir-fsync"
        return what, config, options

    # --- running ----------------------------------------------------------------------------------

    def _execute(self, what: str, config: RunConfig, options: dict):
        """Run one experiment; its records, its table and its figure (None: the table says it)."""
        import pandas as pd

        if what == "crash during recovery":
            df = pd.DataFrame(B.chain_sweep(config, progress=self.tick))
            return df, chain_table(df, config), plot_chain(df, config)
        if what == "two resumers":
            lock = options["lock"]
            df = pd.DataFrame([{"lock": "flock" if lock else "none (unsafe)", **r}
                               for r in B.two_resumers(config, trials=8, lock=lock,
                                                       progress=self.tick)])
            return df, race_table(df), plot_races(df)
        if what == "disk full":
            df = disk_full.__wrapped__(config)                  # run now, not cached
            return df, fault_table(df), None
        if what == "failed fsync":
            df = fsync_failures.__wrapped__(config)
            return df, fault_table(df), None
        v = B.Variant(describe_run(config) + (", no dir fsync" if options["mutant"] else ""), config,
                      options["mutant"])
        df = power_loss.__wrapped__((v,), progress=self.tick)   # run now, not cached
        return df, power_table(df), plot_power(df)

    def execute(self, settings: dict) -> Result:
        """Run the chosen experiment for real: its headline, its figure (if it has one), its
        table."""
        self.df = None
        what, config, options = self.plan()
        df, table, fig = self._execute(what, config, options)
        self.df = df
        return Result(f"Done: {len(df)} runs.", figures=[fig] if fig is not None else [],
                      tables=[table], data=df,
                      notes=[f"<b>{html.escape(what)}</b>: {html.escape(describe_run(config))}"])

    def reset(self) -> None:
        super().reset()
        self.df = None


def panel() -> BeyondPanel:
    return BeyondPanel()


# --- exercises -----------------------------------------------------------------------------------

#: The design section 6 puts through the conformance suite: the safe one, fsync always.
SUITE_DESIGN = B.SAFE.replace(fsync="always")
#: Exercise 8.3's store: the snapshot written in place (torn mode), fsync always.
TORN_SNAPSHOT = RunConfig(store="snapshot", intent=False, write_mode="torn", fsync="always")


@exercise("8.1", "Two workers resume the same crashed run at the same moment, without the run "
          "lock, 10 times. In how many of the 10 trials does the worker's reader refuse the log "
          "when the run is read back afterwards? Predict a number.",
          "10. Without the lock both workers resume from the same state and both append the same "
          "events with the same sequence numbers: the log forks in every trial. The reader checks "
          "the sequence numbers and refuses such a log, naming the line, so the damage is loud.")
def _ex_8_1(answer):
    t = race_table(races()).df.loc["none (unsafe)"]
    c = assess(answer, int(t["rebuild refused"]), what="trials whose log was refused")
    return c.reply(f" Both workers went on in {int(t['both proceeded'])} of {int(t['trials'])} "
                   "trials.", hint=" What do two workers appending from the same state write?")


#: Exercise 8.2's variant: the snapshot store, atomic, never fsynced, on the lesson's 6 pages.
NO_FSYNC = "snapshot, atomic, fsync never"


@exercise("8.2", "The snapshot store writes atomically (temp file, rename) but never fsyncs, on a "
          "6-page run. Of every power-cut state the simulation builds, at most how many committed "
          "pages does one state lose? Predict a number.",
          "6, every page of the run. Nothing is ever fsynced, so until the kernel flushes its "
          "cache on its own schedule the disk may still hold no snapshot at all: a cut at the end "
          "can lose every page whose commit had returned. kill -9 could never show this: the "
          "kernel keeps what a killed process wrote. Only fsync of the file and of the directory "
          "makes a returned commit survive a power cut.")
def _ex_8_2(answer):
    t = power_table(power_loss()).df.loc[NO_FSYNC]
    c = assess(answer, int(t["most committed pages lost"]), what="committed pages lost, at most")
    lost = int(t["refused by recovery"] + t["lost committed pages silently"])
    return c.reply(f" Simulated: {lost} of {int(t['states explored'])} states of the 6-page run "
                   "lose committed pages.",
                   hint=" Which of the run's writes is on the disk before any fsync?")


@exercise("8.3", "Transfer: the snapshot store writing its snapshot in place (write mode torn), "
          "fsync always. Which rules of the store contract does the conformance suite find "
          "broken? Predict a list of rule ids ([] for none).",
          "['kill-keeps-acknowledged', 'fsync-keeps-acknowledged']. Written in place, the "
          "snapshot is first truncated, then rewritten: a kill -9 (or a power cut) in between "
          "leaves no usable snapshot, and recovery starts from page 1 although commits had "
          "returned. What it returns is still a state the run passed through (the start), so "
          "crash-leaves-a-real-state holds; fsync makes no difference, the old snapshot is "
          "already gone. The atomic write (temp file, fsync, rename) breaks no rule.")
def _ex_8_3(answer):
    report = conformance(TORN_SNAPSHOT)
    truth = report.broken()
    if not isinstance(answer, (list, tuple, set)):
        return False, f"Answer with a list of rule ids (from the table above). Measured: {truth}."
    c = assess(list(answer), truth, what="rules broken")
    unknown = sorted(set(answer) - set(RULES))
    first = report.first(truth[0]) if truth else None
    return c.reply(f" No such rule: {unknown}." if unknown else "",
                   hint=f" The first violation: {first}." if first else "")


# --- common wrong statements, each answered by a run made just now ---------------------------------

@statement("Q8.1", "The run lock prevents duplicate reports when two workers resume the same "
           "crashed run.",
           "False. The lock lets one resumer in and turns the other away, so the log never "
           "forks. But the one that gets in still redoes the page the killed worker was on; if "
           "the kill fell in the danger window, that redo files the report again. Only the "
           "idempotency key makes the redo harmless.")
def _q8_1():
    config = RACE.replace(idempotency_key=False)
    with work_dir(in_memory=True) as base:
        r = B.two_resumers_trial(config, crash_point(config, "p3.after_submit"), base / "race")
    return Measured(r["duplicate_reports"] == 0,
                    f"Measured just now: a run killed at p3.after_submit (key off), two resumers "
                    f"started together with the lock: exits {r['exits']} ({r['proceeded']} went "
                    f"on, {r['refused_busy']} refused as busy), {r['duplicate_events']} repeated "
                    f"events in the log, and {r['duplicate_reports']} duplicate report(s) in the "
                    "tracker.")


def chain_counts() -> tuple[dict, int]:
    """Section 1's sweep, counted: its summary, and how many second kills fell inside recovery."""
    df = chain()
    return B.chain_summary(df.to_dict("records")), int(df["second"].isin(B.RECOVERY_LABELS).sum())


@statement("Q8.2", "A crash during recovery is a new kind of crash: recovery needs code of its "
           "own to survive it.",
           "False. Here recovery is the normal start-up path: read the files, repair the tail, "
           "append. It keeps no state of its own that a second crash could leave half done, so "
           "a crash inside it is one more crash like any other, and the next start handles it.")
def _q8_2():
    s, in_recovery = chain_counts()
    return Measured(s["correct"] < s["pairs"],
                    f"Measured in section 1's sweep ({describe_run(CHAIN)}): {s['correct']} of "
                    f"{s['pairs']} (first crash, second crash) pairs correct, {in_recovery} of "
                    f"them killed inside recovery itself; {s['differs from a single resume']} "
                    "ended differently from a single crash and resume.")


#: The configurations the power-loss simulation runs each planted bug on: both stores, fsync
#: always, the key on (as the safe design has it).
POWER_EXPOSURE = {"snapshot": RunConfig(store="snapshot", intent=False, fsync="always", pages=4),
                  "log": RunConfig(store="log", intent=True, fsync="always", pages=4)}


@results.memoized
def power_exposure() -> dict:
    """For each planted bug: of every state a power cut may leave (both stores), how many end
    wrong after recovery (a committed page lost, a duplicate, a three-way failure)."""
    out = {}
    for bug in mutants.MUTANTS:
        wrong = states = 0
        for config in POWER_EXPOSURE.values():
            recs = B.power_loss_sweep(B.Variant(bug, config, bug), samples_per_cut=1)
            wrong += sum(not r["correct"] for r in recs)
            states += len(recs)
        out[bug] = (wrong, states)
    return out


def cuts_for_95(wrong: int, states: int) -> int:
    """Random cuts, each landing on one of `states` at random, needed to see one of `wrong` with
    95% probability."""
    import math

    p = wrong / states
    return 1 if p >= 1 else math.ceil(math.log(0.05) / math.log(1 - p))


@statement("Q8.3", "Pulling the plug at random, often enough, would find every one of these "
           "planted bugs.",
           "False. A power cut shows only what the disk kept. Bugs about two processes at once, "
           "the order of two steps, or the bytes a second resume writes leave every power-cut "
           "state correct: no number of plug pulls shows them. Each needs its own check. And "
           "the rarer a bug's bad states, the more random cuts it takes to land on one, where "
           "enumerating every state finds it in one pass.")
def _q8_3():
    seen = power_exposure()
    shown = {b: ws for b, ws in seen.items() if ws[0]}
    hidden = [b for b, ws in seen.items() if not ws[0]]
    found = "; ".join(f"{b} in {w} of {n} states (about {cuts_for_95(w, n)} random cuts, each "
                      "landing on one of them, to see it with 95% probability)"
                      for b, (w, n) in shown.items())
    return Measured(not hidden,
                    f"Simulated just now: every state a power cut may leave, at every moment of "
                    f"a 4-page run, on both stores, with each planted bug. It shows {found}; "
                    f"{', '.join(hidden) or 'none'}: in no state at all.")


# --- what the lesson says its run found (each sentence checked against that run) -------------

CLAIMS = Claims(8)


@CLAIMS.claim("All {pairs} (first crash, second crash) pairs ended correct: no duplicate, no lost "
              "report, the three-way check passing; {same} of them ended exactly where a single "
              "crash and resume ends, and a further, empty resume changed no checkpoint file in "
              "{noop} of them. The second kill really happened in {killed} of the {pairs} pairs, "
              "{in_recovery} of them inside recovery itself.")
def every_chain_pair_correct():
    s, in_recovery = chain_counts()
    same = s["pairs"] - s["differs from a single resume"]
    noop = s["pairs"] - s["a no-op resume changed files"]
    return (s["correct"] == s["pairs"] == same == noop and s["errors"] == 0,
            {"pairs": s["pairs"], "same": same, "noop": noop, "in_recovery": in_recovery,
             "killed": s["second crash really happened"]})


@CLAIMS.claim("With the lock, exactly one resumer proceeded in {one} of {trials} trials; the other "
              "exited 75, \"run is busy\". Without the lock both proceeded in {both} of {trials}, "
              "and {repeated} of those logs hold the same events twice, with the same sequence "
              "numbers: the log forks. The worker's reader refused {refused} of those logs, "
              "naming the line, so the damage is loud.")
def the_lock_lets_one_in():
    t = race_table(races()).df
    locked, unlocked = t.loc["flock"], t.loc["none (unsafe)"]
    return (locked["exactly one proceeded"] == locked["trials"] and unlocked["both proceeded"] > 0
            and unlocked["trials with repeated events"] > 0,
            {"one": int(locked["exactly one proceeded"]), "trials": int(locked["trials"]),
             "both": int(unlocked["both proceeded"]),
             "repeated": int(unlocked["trials with repeated events"]),
             "refused": int(unlocked["rebuild refused"])})


@CLAIMS.claim("Each of the {writes} failed writes and {fsyncs} failed fsyncs stopped the worker "
              "with exit 74 ({exit74} runs), kept every report the tracker had acknowledged "
              "({kept}), and the next resume, on a healthy disk, finished correctly ({correct}). "
              "No failed fsync was retried: {retried} runs fsynced any file after the failure.")
def faults_stop_and_lose_nothing():
    disk, fsync = disk_full(), fsync_failures()
    both = [disk, fsync]
    n = sum(len(d) for d in both)
    exit74 = sum(int((d["exit"] == 74).sum()) for d in both)
    kept = sum(int(d["acknowledged_kept"].sum()) for d in both)
    correct = sum(int(d["correct_after_resume"].sum()) for d in both)
    retried = int(fsync["retried"].sum())
    return (exit74 == kept == correct == n and retried == 0,
            {"writes": len(disk), "fsyncs": len(fsync), "exit74": exit74, "kept": kept,
             "correct": correct, "retried": retried})


@CLAIMS.claim("The stopped holder kept the lock: a second worker {paused_second}, and the holder, "
              "let go, finished ({paused_after}). The forked child kept it after its parent died: "
              "a worker {child_second} while the child lived, and once the child had ended a "
              "worker took the run (exit {child_after}).")
def the_lock_outlives_a_pause_and_a_dead_parent():
    df = lock_demos()
    paused, child = df.iloc[0], df.iloc[1]
    after = re.search(r"exit (\d+)$", child["afterwards"])
    return (paused["a second worker"].startswith("exit 75") and child["a second worker"].startswith(
        "exit 75") and "exit 0" in paused["afterwards"] and after and after.group(1) == "0",
            {"paused_second": f"ended {paused['a second worker'].split(':', 1)[0]}, busy",
             "paused_after": paused["afterwards"].split("(", 1)[-1].rstrip(")"),
             "child_second": f"ended {child['a second worker'].split(':', 1)[0]}, busy",
             "child_after": after.group(1) if after else "?"})


@CLAIMS.claim("The first write and the first fsync of a run are the configuration's temp file "
              "(`{first}`); then, with fsync on, fsyncs {dir_ks} are of the run directory itself "
              "(after the configuration is renamed into place, and after the log file is "
              "created: their names live in the directory); after that, the log (`{log}`).")
def what_fails_first():
    disk, fsync = fault_table(disk_full()), fault_table(fsync_failures())
    dir_ks = [int(k) for k, f in fsync["failing file"].items() if f == "the run directory"]
    after = fsync.loc[fsync.index > max(dir_ks, default=1), "failing file"]
    return (disk.loc[1, "failing file"] == fsync.loc[1, "failing file"] == "config.json.tmp"
            and dir_ks == [2, 3] and set(after) == {LOG_FILE}
            and set(disk.loc[disk.index > 1, "failing file"]) == {LOG_FILE},
            {"first": "config.json.tmp", "dir_ks": " and ".join(map(str, dir_ks)), "log": LOG_FILE})


@CLAIMS.claim("A cut or garbage at the log's tail is a torn tail: skipped and counted ({tails}). A "
              "flipped bit inside a record fails its checksum, a zeroed line leaves a gap in the "
              "sequence numbers: both {inner}, naming the file and line. A damaged snapshot is "
              "never trusted: recovery replays the whole log instead ({snapshots}).")
def damage_is_skipped_refused_or_replayed():
    df = damage_demo()
    tails = df.loc[["log: tail cut off mid-record", "log: garbage appended"]]
    inner = df.loc[["log: one bit flipped in line 5", "log: a line zeroed in the middle"]]
    snaps = df.loc[["snapshot: cut in half", "snapshot: one bit flipped"]]
    return ((tails["detail"] == "1 torn line(s) skipped").all()
            and (inner["recovery gives"] == "refused").all()
            and inner["detail"].str.startswith(f"{LOG_FILE}:").all()
            and (snaps["recovery gives"] == "the full state").all()
            and (snaps["detail"] == "snapshot fallback: log").all(),
            {"tails": "; ".join(f"{k.split(': ')[1]}: {v}" for k, v in
                                tails["recovery gives"].items()),
             "inner": "refused" if (inner["recovery gives"] == "refused").all() else "not refused",
             "snapshots": "; ".join(f"{k.split(': ')[1]}: {v}" for k, v in
                                    snaps["recovery gives"].items())})


SAFE_POWER = ("snapshot, atomic, fsync always (+ dir fsync)", "log, atomic, fsync always")
UNSAFE_POWER = ("snapshot, atomic, fsync always, no dir fsync", NO_FSYNC,
                "snapshot, torn (in place), fsync always", "log, atomic, fsync never")


@CLAIMS.claim("The simulation built, from one journaled clean run of {pages} pages per design, the "
              "two extremes and {samples} seeded random mixes at every cut: {states} states in "
              "all, each recovered by a real worker. It samples the states, it does not list "
              "every one.")
def power_states_are_sampled():
    df = power_loss()
    pages = sorted({v.config.pages for v in B.POWER_VARIANTS})
    return (len(pages) == 1, {"pages": pages[0], "samples": 3, "states": len(df)})


@CLAIMS.claim("With fsync always, atomic snapshots (temp file, fsync, rename, directory fsync) "
              "and fsynced log appends lose no committed page in any of their {safe} states. "
              "Every other design loses some: {unsafe}.")
def only_fsync_everywhere_keeps_every_commit():
    t = power_table(power_loss()).df
    lost = t["refused by recovery"] + t["lost committed pages silently"]
    safe = {v: int(t.loc[v, "states explored"]) for v in SAFE_POWER}
    unsafe = {v: int(lost[v]) for v in UNSAFE_POWER}
    return (all(lost[v] == 0 and t.loc[v, "correct"] == t.loc[v, "states explored"]
                for v in SAFE_POWER) and all(n > 0 for n in unsafe.values()),
            {"safe": " and ".join(map(str, safe.values())),
             "unsafe": "; ".join(f"{v}: {n} of {int(t.loc[v, 'states explored'])} states, up to "
                                 f"{int(t.loc[v, 'most committed pages lost'])} pages"
                                 for v, n in unsafe.items())})


@CLAIMS.claim("With the idempotency key on, the lost pages are redone without a duplicate report: "
              "{dups} of the {states} states filed a report twice. The key turns a durability "
              "loss into wasted work instead of a wrong tracker.")
def the_key_keeps_lost_pages_from_duplicating():
    t = power_table(power_loss()).df
    dups = int(t["states with duplicates"].sum())
    return dups == 0, {"dups": dups, "states": int(t["states explored"].sum())}


@CLAIMS.claim("{caught} of {n} planted bugs were caught, each by the check meant for it, with no "
              "failure on the correct worker. The conformance suite alone sees {store_bugs}; "
              "{worker_bugs} break no store rule, and only sweeps of real processes, killed and "
              "resumed, see them.")
def planted_bugs_caught():
    t = bugs()
    suite = t["conformance suite"] != "no store rule broken"
    clean = (t["failures, correct worker"] == 0).all()
    return (bool(t["caught"].all()) and bool(clean) and bool(suite.any()) and bool((~suite).any()),
            {"caught": int(t["caught"].sum()), "n": len(t),
             "store_bugs": [f"`{b}`" for b in t.index[suite]],
             "worker_bugs": [f"`{b}`" for b in t.index[~suite]]})


@CLAIMS.claim("The suite checked the lab's log store at {states} crash states and found {broken} "
              "rule broken.")
def the_safe_design_breaks_no_rule():
    report = conformance(SUITE_DESIGN)
    broken = report.broken()
    return not broken, {"states": report.states, "broken": len(broken) or "no"}


# --- practice: a store, a fault or a site length the lesson did not run --------------------------

#: The failing files a worker can name (exercise answers, in the worker's words).
FAILING_FILES = ("config.json.tmp", "the run directory", LOG_FILE, SNAPSHOT_FILE + ".tmp",
                 SNAPSHOT_FILE)
PRACTICE_PAGES = (3, 5)            # the lesson runs 12 (faults), 6 (power loss), 4 and 3 (others)


def _practice_config(rng, *, fsync: str) -> RunConfig:
    store = rng.choice(["log", "snapshot"])
    return RunConfig(store=store, intent=store == "log", fsync=fsync,
                     pages=rng.choice(PRACTICE_PAGES))


def lesson_runs() -> set:
    """(experiment, configuration, planted bug) of every run this lesson makes: the practice
    draws none of them."""
    runs = {("write fails", DISK, None), ("fsync fails", DISK.replace(fsync="always"), None)}
    runs |= {("power loss", v.config, v.mutant) for v in B.POWER_VARIANTS}
    runs |= {("power loss", c, bug) for c in POWER_EXPOSURE.values()
             for bug in (None, *mutants.MUTANTS)}
    return runs


def practice_problem(seed: int) -> Problem:
    """A fault on a store and a site length the lesson did not run (the k-th write or fsync
    fails: which file does the worker name?), or a power-loss design on a site length it did not
    simulate (can a cut lose a committed page, or at most how many?)."""
    rng = drawn(seed, 8)
    kind = rng.choice(["write fails", "fsync fails", "power loss", "power loss"])
    if kind != "power loss":
        config = _practice_config(rng, fsync="always" if kind == "fsync fails" else
                                  rng.choice(["never", "always"]))
        k = rng.randint(1, 6)
        flag = (("--fail-write", f"{k}:ENOSPC") if kind == "write fails" else
                ("--fail-fsync", str(k)))
        what = "write" if kind == "write fails" else "fsync"
        setting = (f"{describe_config(config)}, on a {config.pages}-page site; the worker's "
                   f"{_nth(k)} {what} fails "
                   + ("(half written, then no space left)." if what == "write" else
                      "(an I/O error)."))

        def measure() -> Answer:
            with work_dir(in_memory=True) as base:
                r = B.fault_record(config, flag, k, base / "run")
            file = failing_file(plain_message(r["message"]))
            return Answer(file, f"the worker exited {r['exit']}: {plain_message(r['message'])}")
        return Problem(8, seed, setting, f"Which file does the worker name when its {_nth(k)} "
                       f"{what} fails?", choice(FAILING_FILES), measure,
                       "List the run's disk operations in order: the configuration first, then "
                       "the directory entries (with fsync on), then the checkpoint file.",
                       drawn={"kind": kind, "store": config.store, "fsync": config.fsync,
                              "pages": config.pages, "k": k})
    store = rng.choice(["log", "snapshot"])
    fsync = rng.choice(["always", "never"])
    write_mode = rng.choice(["atomic", "torn"]) if store == "snapshot" else "atomic"
    mutant = ("no-dir-fsync" if store == "snapshot" and fsync == "always"
              and write_mode == "atomic" and rng.random() < 0.5 else None)
    config = RunConfig(store=store, intent=store == "log", fsync=fsync, write_mode=write_mode,
                       pages=rng.choice(PRACTICE_PAGES))
    variant = B.Variant("practice", config, mutant)
    setting = (f"the {store} store, {write_mode} writes, fsync {fsync}"
               + (", with the directory fsync left out (the planted bug)" if mutant else "")
               + f", on a {config.pages}-page site; every power-cut state of one clean run (the "
               "two extremes and one seeded random mix per cut), each recovered by a real worker.")

    def sweep() -> dict:
        return B.power_summary(B.power_loss_sweep(variant, samples_per_cut=1))
    if rng.random() < 0.5:
        def measure() -> Answer:
            s = sweep()
            return Answer(s["states losing committed pages"] > 0,
                          f"{s['states losing committed pages']} of {s['states explored']} states "
                          "lose a committed page.")
        return Problem(8, seed, setting, "Can a power cut lose a page whose commit had returned?",
                       YES_NO, measure, "Which writes are on the disk before their fsync, and "
                       "which names before their directory's fsync?",
                       drawn={"kind": kind, "store": store, "fsync": fsync, "pages": config.pages,
                              "write_mode": write_mode, "mutant": mutant, "asks": "yes/no"})

    def measure() -> Answer:
        s = sweep()
        return Answer(s["most committed pages lost"],
                      f"of {s['states explored']} states, {s['states losing committed pages']} "
                      f"lose committed pages, at most {s['most committed pages lost']}.")
    return Problem(8, seed, setting, "At most how many committed pages does one power-cut state "
                   "lose?", NUMBER, measure, "What is the oldest state the disk may still hold "
                   "at the last cut?", unit="pages",
                   drawn={"kind": kind, "store": store, "fsync": fsync, "pages": config.pages,
                          "write_mode": write_mode, "mutant": mutant, "asks": "most"})


def _nth(k: int) -> str:
    return {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth", 6: "sixth"}[k]


def practice_run(problem: Problem) -> tuple:
    """(experiment, configuration, planted bug) a drawn problem runs (the test compares it with
    `lesson_runs`)."""
    d = problem.drawn
    if d["kind"] == "power loss":
        return ("power loss", RunConfig(store=d["store"], intent=d["store"] == "log",
                                        fsync=d["fsync"], write_mode=d["write_mode"],
                                        pages=d["pages"]), d["mutant"])
    return (d["kind"], RunConfig(store=d["store"], intent=d["store"] == "log", fsync=d["fsync"],
                                 pages=d["pages"]), None)


#: The transfer question: a design or a fault the lesson did not run (`practice_problem`).
TRANSFER_SEED = 12
TRANSFER = as_exercise("8.4", practice_problem(TRANSFER_SEED), __name__)


LESSON = Lesson(
    number=8,
    notebook="08_beyond",
    title="Beyond the source text: the failures it left untested",
    short_title="beyond the lesson",
    question="Crash during recovery, two resumers, a full disk, power loss, damaged files",
    teaches="what the source text left untested: a crash during recovery, two resumers, a "
            "full disk, a failed fsync, power loss (simulated from the I/O journal), damaged "
            "files, planted bugs as mutants",
    objectives=(
        "test the compound failures too (a crash during recovery, two resumers, a full disk, "
        "a failed fsync), and say why a recovery path that is the normal start-up path "
        "survives them;",
        "say what a run lock prevents and what it does not;",
        "build the disk states a power cut may leave from a journal of disk operations, and "
        "predict which designs lose a committed page;",
        "read a checkpoint store's contract and predict which of its rules a design breaks;",
        "judge a test suite by the planted bugs (mutants) it catches.",
    ),
    prerequisites="Lessons 4 to 6 (the danger window, torn writes, fsync). Terms, in English "
                  "and Chinese: the [glossary](glossary.md).",
    panel=panel,
    exercises=defined_in(__name__),
    claims=CLAIMS,
    practice=practice_problem,
    runs="its experiments run real processes for a few minutes",
)

