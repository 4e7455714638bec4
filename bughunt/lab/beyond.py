"""Lesson 8, beyond the lesson: tables and figures for each failure the first lesson left untested.

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
from IPython.display import HTML, Image

from .. import beyond as B
from ..config import RunConfig
from ..experiment import crash_points, run_worker
from ..stores import LOG_FILE, SNAPSHOT_FILE, StoreDamage, rebuild_from_disk
from .exercises import exercise
from .style import COLORS, new_figure, png

#: Small sites keep the sweeps of this lesson within a minute; the shape of the results is the same.
CHAIN = B.SAFE.replace(pages=3)
RACE = B.SAFE.replace(pages=4)
DISK = B.SAFE


def tidy(message: str) -> str:
    """A worker's message without the machine's temp path: only file names and the reason."""
    message = re.sub(r"^bughunt: ", "", message)
    return re.sub(r"(/[^\s:]+/)+", "", message)


# --- crash during recovery -----------------------------------------------------------------------

def chain(config: RunConfig = CHAIN, progress=None):
    import pandas as pd

    df = pd.DataFrame(B.chain_sweep(config, progress=progress))
    return df


def chain_table(df):
    import pandas as pd

    return pd.DataFrame([B.chain_summary(df.to_dict("records"))]).T.rename(columns={0: "pairs"})


def plot_chain(df, config: RunConfig = CHAIN):
    """First crash x second crash: every pair that ran, its outcome, and whether the second kill
    really happened (a point the resume never reaches leaves it running to the end)."""
    points = crash_points(config)
    labels = [p.name for p in points]
    seconds = [p.name for p in points] + ["after_repair"]
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
                 f"({describe(config)})", fontsize=10)
    from matplotlib.lines import Line2D
    handles = [Line2D([], [], marker="s", linestyle="", color=COLORS["green"],
                      label="correct, second kill happened"),
               Line2D([], [], marker="o", linestyle="", color=COLORS["green"], alpha=0.5,
                      label="correct, resume never reached that point"),
               Line2D([], [], marker="s", linestyle="", color=COLORS["red"], label="wrong")]
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def describe(config: RunConfig) -> str:
    from .plots import describe_config
    return f"{config.pages} pages, " + describe_config(config)


# --- two resumers --------------------------------------------------------------------------------

def races(config: RunConfig = RACE, trials: int = 10, seed: int = 0):
    import pandas as pd

    rows = []
    for lock in (True, False):
        for r in B.two_resumers(config, trials=trials, seed=seed, lock=lock):
            rows.append({"lock": "flock" if lock else "none (unsafe)", **r})
    return pd.DataFrame(rows)


def race_table(df):
    g = df.groupby("lock", sort=False)
    return g.agg(trials=("trial", "count"),
                 **{"exactly one proceeded": ("exactly_one", "sum"),
                    "both proceeded": ("proceeded", lambda s: int((s == 2).sum())),
                    "trials with repeated events": ("duplicate_events",
                                                    lambda s: int((s > 0).sum())),
                    "rebuild refused": ("rebuild_refused", "sum"),
                    "three-way failures": ("three_way_ok", lambda s: int((~s).sum()))})


def plot_races(df):
    fig, ax = new_figure(8, 3.2)
    table = race_table(df)
    cols = ["exactly one proceeded", "both proceeded", "trials with repeated events",
            "rebuild refused"]
    colors = [COLORS["green"], COLORS["red"], COLORS["orange"], COLORS["purple"]]
    width = 0.2
    for i, (col, color) in enumerate(zip(cols, colors)):
        xs = [j + (i - 1.5) * width for j in range(len(table))]
        bars = ax.bar(xs, table[col], width=width, color=color, label=col)
        ax.bar_label(bars, fontsize=8)
    ax.set_xticks(range(len(table)), [f"lock: {x}" for x in table.index])
    ax.set_ylabel("trials (count)")
    ax.set_ylim(0, table["trials"].max() * 1.3)
    ax.set_title(f"Two resumers started at the same moment, {int(table['trials'].iloc[0])} "
                 "trials each")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


# --- disk full and failed fsync ------------------------------------------------------------------

def disk_full(config: RunConfig = DISK, errno_name: str = "ENOSPC"):
    import pandas as pd

    df = pd.DataFrame(B.disk_full_sweep(config, errno_name=errno_name))
    df["message"] = df["message"].map(tidy)
    return df


def fsync_failures(config: RunConfig = DISK.replace(fsync="always")):
    import pandas as pd

    df = pd.DataFrame(B.fsync_failure_sweep(config))
    df["message"] = df["message"].map(tidy)
    return df


def fault_table(df):
    cols = ["k", "exit", "acknowledged_before", "acknowledged_kept", "correct_after_resume"]
    if "retried" in df:
        cols.insert(2, "retried")
    out = df[cols].copy()
    failing = df["message"].str.extract(r"^(?:\S*/)?([^/\s]+?): (?:cannot write|fsync)")[0]
    out.insert(1, "failing file", failing.replace("RUN_DIR", "(the run directory)"))
    return out.set_index("k")


def plot_faults(disk, fsync):
    """One bar per k: green when the worker stopped with exit 74 and the next resume finished
    correctly, red otherwise."""
    from matplotlib.ticker import MaxNLocator

    fig, axes = new_figure(10, 3.0, nrows=1, ncols=2)
    for ax, df, what in ((axes[0], disk, "write (ENOSPC)"), (axes[1], fsync, "fsync (EIO)")):
        good = (df["exit"] == 74) & df["correct_after_resume"]
        ax.bar(df["k"], [1] * len(df), color=[COLORS["green"] if g else COLORS["red"]
                                            for g in good])
        ax.set_yticks([])
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(f"k: the failing {what.split()[0]}, counted from the start (count)")
        ax.set_title(f"k-th {what} fails: {int(good.sum())} of {len(df)} recovered", fontsize=10)
    fig.suptitle("A failure at every k: the worker stops with exit 74, the next resume finishes "
                 "correctly (green)", fontsize=11)
    return fig


# --- power loss ----------------------------------------------------------------------------------

def power_loss(variants=B.POWER_VARIANTS, samples_per_cut: int = 3, seed: int = 0, progress=None):
    import pandas as pd

    rows = []
    for i, v in enumerate(variants, 1):
        rows.extend(B.power_loss_sweep(v, samples_per_cut=samples_per_cut, seed=seed))
        if progress:
            progress(i, len(variants))
    return pd.DataFrame(rows)


def power_table(df):
    import pandas as pd

    rows = [{"variant": name, **B.power_summary(g.to_dict("records"))}
            for name, g in df.groupby("variant", sort=False)]
    return pd.DataFrame(rows).set_index("variant")


def plot_power(df):
    table = power_table(df)
    fig, ax = new_figure(10, 3.6)
    y = range(len(table))
    total = table["states explored"]
    ax.barh(y, table["correct"] / total * 100, color=COLORS["green"], label="correct after resume")
    ax.barh(y, table["states losing committed pages"] / total * 100,
            left=table["correct"] / total * 100, color=COLORS["red"],
            label="lost a committed page")
    for i, (name, row) in enumerate(table.iterrows()):
        most = row["most committed pages lost"]
        ax.text(101, i, f"{row['states losing committed pages']} of {row['states explored']} "
                f"states lose pages" + (f" (up to {most})" if most else ""), va="center",
                fontsize=8)
    ax.set_yticks(list(y), list(table.index), fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 180)
    ax.set_xticks([0, 25, 50, 75, 100])
    ax.set_xlabel("power-cut states explored (%)")
    ax.set_title("Power loss, simulated from the door's journal: who loses a committed page?")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


# --- damaged files -------------------------------------------------------------------------------

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
                verdict, note = "refused", tidy(str(e))
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

def bugs(pages: int = 3, progress=None):
    import pandas as pd

    return pd.DataFrame(B.planted_bugs(pages=pages, progress=progress)).set_index("bug")


# --- the panel -----------------------------------------------------------------------------------

EXPERIMENTS = ["crash during recovery", "two resumers", "disk full", "failed fsync", "power loss"]


class BeyondPanel:
    """Pick an experiment and a configuration; Run re-runs it for real and shows its table."""

    def __init__(self):
        self.experiment = W.Dropdown(options=EXPERIMENTS, value="two resumers",
                                     description="experiment")
        self.store = W.ToggleButtons(options=["log", "snapshot"], value="log",
                                     description="store")
        self.write_mode = W.ToggleButtons(options=["atomic", "torn", "no-newline"],
                                          value="atomic", description="write mode")
        self.fsync = W.ToggleButtons(options=["never", "always"], value="always",
                                     description="fsync")
        self.key = W.ToggleButtons(options=[("on", True), ("off", False)], value=True,
                                   description="idempotency key")
        self.pending = W.ToggleButtons(options=["redo", "abort"], value="redo",
                                       description="pending")
        self.lock = W.ToggleButtons(options=[("flock", True), ("none (unsafe)", False)],
                                    value=True, description="run lock")
        self.pages = W.IntSlider(value=3, min=3, max=6, description="pages",
                                 continuous_update=False)
        self.run_button = W.Button(description="Run", button_style="primary", icon="play")
        self.reset_button = W.Button(description="Reset", icon="undo")
        self.progress = W.IntProgress(value=0, min=0, max=1)
        self.status = W.Label()
        self.out = W.Output()
        self.run_button.on_click(lambda _: self.run())
        self.reset_button.on_click(lambda _: self.reset())
        self.df = None

    @property
    def config(self) -> RunConfig:
        return RunConfig(store=self.store.value, write_mode=self.write_mode.value,
                         fsync=self.fsync.value, idempotency_key=self.key.value,
                         intent=self.store.value == "log" or self.pending.value == "abort",
                         pending=self.pending.value, pages=self.pages.value)

    def _tick(self, done: int, total: int) -> None:
        self.progress.max, self.progress.value = total, done

    def run(self):
        import pandas as pd

        self.run_button.disabled = True
        self.status.value = "Running real processes..."
        try:
            config, what = self.config, self.experiment.value
            if what == "crash during recovery":
                df = pd.DataFrame(B.chain_sweep(config, progress=self._tick))
                table, fig = chain_table(df), plot_chain(df, config)
            elif what == "two resumers":
                df = pd.DataFrame([{"lock": "flock" if self.lock.value else "none (unsafe)", **r}
                                   for r in B.two_resumers(config, trials=8, lock=self.lock.value,
                                                           progress=self._tick)])
                table, fig = race_table(df), plot_races(df)
            elif what == "disk full":
                df = disk_full(config)
                table, fig = fault_table(df), plot_faults(df, fsync_failures(config))
            elif what == "failed fsync":
                fs = fsync_failures(config.replace(fsync="always"))
                df, table, fig = fs, fault_table(fs), plot_faults(disk_full(config), fs)
            else:
                bugs_ = ("no-dir-fsync",) if not self.lock.value else ()
                v = B.Variant(describe(config), config, bugs_)
                df = power_loss([v], progress=self._tick)
                table, fig = power_table(df), plot_power(df)
            self.df = df
            self.out.outputs = ()
            self.out.append_display_data(HTML(f"<b>{html.escape(what)}</b>: "
                                              f"{html.escape(describe(config))}"))
            self.out.append_display_data(Image(data=png(fig), format="png"))
            self.out.append_display_data(table)
            self.status.value = f"Done: {len(df)} runs."
        except Exception as e:       # an impossible mix of settings: say so in the panel
            self.status.value = f"Could not run: {e}"
        finally:
            self.run_button.disabled = False
        return self.df

    def reset(self) -> None:
        self.experiment.value, self.store.value, self.write_mode.value = (
            "two resumers", "log", "atomic")
        self.fsync.value, self.key.value, self.pending.value = "always", True, "redo"
        self.lock.value, self.pages.value = True, 3
        self.out.outputs = ()
        self.progress.value = 0
        self.df = None
        self.status.value = "Reset."

    def widget(self) -> W.VBox:
        note = W.HTML("<i>power loss: 'run lock: none' plants the no-dir-fsync bug instead</i>")
        return W.VBox([self.experiment, self.store, self.write_mode, self.fsync, self.key,
                       self.pending, self.lock, note, self.pages,
                       W.HBox([self.run_button, self.reset_button, self.progress]), self.status,
                       self.out])

    def show(self) -> W.VBox:
        self.run()
        return self.widget()


def panel() -> BeyondPanel:
    return BeyondPanel()


# --- exercises -----------------------------------------------------------------------------------

@exercise("8.1", "The snapshot store writes atomically (temp file, rename) but never fsyncs. Can a "
          "power cut lose a page whose commit had already returned? Answer True or False.",
          "True. The rename and the data are only in the page cache until an fsync; a power cut "
          "can leave the old snapshot (or none at all). kill -9 could never show this: the kernel "
          "keeps what a killed process wrote. Only fsync of the file and of the directory makes "
          "a returned commit survive a power cut.")
def _ex_8_1(answer):
    v = B.Variant("check", RunConfig(store="snapshot", intent=False, fsync="never", pages=3))
    truth = B.power_summary(B.power_loss_sweep(v, samples_per_cut=1))[
        "states losing committed pages"] > 0
    if answer is truth:
        return True, "The simulation found power-cut states that lose committed pages."
    return False, "What makes a rename survive a power cut?"


@exercise("8.2", "Two workers resume the same run at the same moment, with the run lock. How many "
          "of them go on to work on the run?",
          "1. The first to take the flock holds it until it ends (the kernel drops it even on "
          "SIGKILL); the other exits 75, 'run is busy'. Without the lock both work, and the log "
          "gets every event twice with the same sequence numbers.")
def _ex_8_2(answer):
    r = B.two_resumers(RACE.replace(pages=3), trials=1)[0]
    if answer == r["proceeded"]:
        return True, f"Measured just now: exits {r['exits']}."
    return False, "What does flock do to the second process?"
