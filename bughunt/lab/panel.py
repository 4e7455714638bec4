"""The interactive panel every lesson uses: knobs, a crash-point slider, Run, Reset, Export CSV.

It is the thinnest layer of the lab. It reads its controls, calls the plain experiment functions
(`crash_and_resume`, `sweep_records`), and changes only widget state: `Output.outputs`,
`append_display_data`, labels and the progress bar. It never prints, so it behaves the same in
JupyterLab, Voila, headless execution, nbval and plain pytest (where `.value = ...` and
`Button.click()` drive it).

- Moving the crash-point slider (or any knob) re-runs that one crash+resume pair (two real
  processes, a fraction of a second) and shows what happened at that point.
- Run sweeps every crash point of the current settings in parallel, with a progress bar, then draws
  the lesson's figure with the chosen point highlighted.
"""

from __future__ import annotations

import dataclasses
import html
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import ipywidgets as W
from IPython.display import Image

from ..config import ConfigError, RunConfig
from ..crashpoints import LABELS
from ..experiment import crash_point as find_point
from ..experiment import CrashRun, crash_points, frame, summarize
from . import results
from .plots import describe_config
from .style import png

PlotFn = Callable[..., "object"]   # (DataFrame, RunConfig, highlight: int) -> Figure


# --- knobs: one widget per configuration field the lessons vary ---------------------------------

@dataclass(frozen=True)
class Knob:
    label: str
    make: Callable[[RunConfig], W.ValueWidget]
    apply: Callable[[RunConfig, object], RunConfig]


def _toggle(options, value, tooltips=None) -> W.ToggleButtons:
    return W.ToggleButtons(options=options, value=value, tooltips=tooltips or [],
                           style={"button_width": "auto"})


def _checkpoint_value(c: RunConfig) -> str:
    return "none" if c.store == "none" else ("op" if c.granularity == "op" else "page")


def _apply_checkpoint(c: RunConfig, v: str) -> RunConfig:
    if v == "none":
        return c.replace(store="none", granularity="page", snapshot_every=0)
    return c.replace(store="snapshot", granularity=v, snapshot_every=0)


ON_OFF = [("on", True), ("off", False)]


def field_knob(f: dataclasses.Field) -> Knob:
    """The widget for one RunConfig field, as its `setting` describes it: a toggle for a choice
    or on/off, a slider for a count."""
    name, label = f.name, f.metadata["label"]
    if f.metadata["choices"]:
        make = (lambda c: _toggle(list(f.metadata["choices"]), getattr(c, name)))
    elif f.type in (bool, "bool"):
        make = (lambda c: _toggle(ON_OFF, getattr(c, name)))
    else:
        make = (lambda c: W.IntSlider(value=getattr(c, name), min=0, max=c.pages,
                                      continuous_update=False, description_allow_html=False))
    return Knob(label, make, lambda c, v: c.replace(**{name: v}))


#: Every setting a panel can offer: one per field of RunConfig, and two that set several fields
#: at once (the checkpoint design of lessons 1 and 2, the store and what it implies).
KNOBS: dict[str, Knob] = {
    **{f.name: field_knob(f) for f in dataclasses.fields(RunConfig)
       if not f.metadata["hidden"] and f.name not in ("store", "pages")},
    "checkpoint": Knob(
        "checkpoint",
        lambda c: _toggle([("none", "none"), ("per page", "page"), ("per operation", "op")],
                          _checkpoint_value(c)),
        _apply_checkpoint),
    "store": Knob("store", lambda c: _toggle(["none", "snapshot", "log"], c.store),
                  lambda c, v: c.replace(store=v, snapshot_every=c.snapshot_every if v == "log"
                                         else 0, granularity="page")),
}


def point_html(record: CrashRun) -> str:
    """What happened at one crash point, as a small HTML table."""
    ok = {True: "yes", False: "NO", None: "n/a"}
    rows = [
        ("crash point", f"{record.crash_point} (number {record.index} with these settings)"),
        ("verdict", record.verdict),
        ("redone model calls", record.redone_model_calls),
        ("replayed events", record.replayed_events),
        ("duplicate / lost reports", f"{record.duplicate_reports} / {record.lost_reports}"),
        ("tracker pages", record.tracker_pages),
        ("agent's findings (memory)", record.memory_findings),
        ("rebuild from disk agrees", ok[record.rebuild_ok] if not record.disk_error
         else "refused: " + record.disk_error.split(": ", 1)[-1]),
        ("three-way check", ok[record.three_way_check]),
    ]
    if record.aborted_pages:
        rows.append(("aborted pages", record.aborted_pages))
    if record.torn_lines_skipped:
        rows.append(("torn lines skipped", record.torn_lines_skipped))
    if record.error:
        rows.append(("error", record.error))
    body = "".join(f"<tr><td style='padding-right:1em'>{html.escape(str(k))}</td>"
                   f"<td><b>{html.escape(str(v))}</b></td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def summary_table(df):
    """The sweep's summary as a one-row DataFrame, only the columns that mean something here."""
    import pandas as pd

    s = summarize(df)
    keep = ["crash_points", "avg_redone_model_calls", "avg_replayed_events", "max_replayed_events",
            "duplicate_points", "lost_points", "three_way_failures", "correct_runs"]
    return pd.DataFrame([{k: s[k] for k in keep}])


def slug(config: RunConfig) -> str:
    """A file-name-safe summary of a configuration, for exported CSVs."""
    parts = [f"{f.name}-{getattr(config, f.name)}" for f in dataclasses.fields(config)
             if not f.metadata["hidden"]]
    return re.sub(r"[^A-Za-z0-9_.-]", "_", "_".join(parts))


def in_widget_words(error: ConfigError) -> str:
    """A configuration error said with the panel's labels: "the 'snapshot every' setting applies
    only when the 'store' setting is log", never a command-line flag or a field name."""
    labels = {f.name: f.metadata["label"] for f in dataclasses.fields(RunConfig)}
    reason = re.sub(r"`(\w+)`", lambda m: f"the '{labels.get(m.group(1), m.group(1))}' setting",
                    error.reason)
    return f"the '{labels.get(error.field, error.field)}' setting: {reason}."


def nearest_point(names: list[str], wanted: str) -> str:
    """The point of `names` a slider should move to when `wanted` no longer exists: the next step
    of the same page (p3.after_intent -> p3.after_submit), else the first point of a later page,
    else the last point."""
    page, _, label = wanted.partition(".")
    later = LABELS[LABELS.index(label) + 1:] if label in LABELS else ()
    for step in later:
        if f"{page}.{step}" in names:
            return f"{page}.{step}"
    n = int(page[1:])
    return next((x for x in names if int(x.split(".")[0][1:]) > n), names[-1])


class CrashPanel:
    """A lesson's panel. `knobs` name entries of KNOBS; `plot(df, config, highlight)` -> Figure,
    where `highlight` is the chosen crash point's name."""

    def __init__(self, *, name: str, base: RunConfig, knobs: list[str], plot: PlotFn,
                 title: str = "", crash_point: str = "p1.after_model_call",
                 results_dir: Path = Path("results"),
                 point_plot: Callable[[RunConfig, str], object] | None = None):
        """`point_plot(config, name) -> Figure`, if given, draws the single crash point too."""
        self.name, self.base, self.plot_fn, self.point_plot = name, base, plot, point_plot
        self.results_dir = Path(results_dir)
        start = find_point(base, crash_point).name    # refuses a point `base` lacks
        self._defaults = {"crash_point": start}
        self.controls = {k: KNOBS[k].make(base) for k in knobs}
        # The slider shows names: p3.after_submit is the same moment whatever the settings.
        self.crash_point = W.SelectionSlider(options=[p.name for p in crash_points(base)],
                                             value=start, description="crash point",
                                             continuous_update=False,
                                             layout=W.Layout(width="560px"))
        self.point_note = ""     # said when a settings change moved the slider
        self.point_info = W.HTML()
        self.point_out = W.Output()
        self.run_button = W.Button(description="Run sweep", button_style="primary", icon="play",
                                   tooltip="crash at every point with these settings, resume, "
                                           "measure")
        self.reset_button = W.Button(description="Reset", icon="undo")
        self.export_button = W.Button(description="Export CSV", icon="download", disabled=True)
        self.progress = W.IntProgress(value=0, min=0, max=1, description="sweep")
        self.status = W.Label()
        self.plot_out = W.Output(layout=W.Layout(min_height="300px"))
        self.table_out = W.Output()
        self.title = W.HTML(f"<h3>{html.escape(title)}</h3>" if title else "")
        self.df = None           # the last sweep, as a DataFrame
        self.df_config = None    # the settings it was run with
        self.record = None       # the last single crash point
        for w in self.controls.values():
            w.observe(self._on_knob, names="value")
        self.crash_point.observe(self._on_point, names="value")
        self.run_button.on_click(lambda _: self.run())
        self.reset_button.on_click(lambda _: self.reset())
        self.export_button.on_click(lambda _: self.export())
        self._sync_slider()

    # --- state ---

    @property
    def config(self) -> RunConfig:
        """The settings the controls describe. Raises ConfigError for an impossible mix."""
        c = self.base
        for key, w in self.controls.items():
            c = KNOBS[key].apply(c, w.value)
        return c

    def _sync_slider(self) -> None:
        """Give the slider this configuration's points, keeping the same named point when it
        exists here, else moving to the nearest one and saying so."""
        try:
            names = [p.name for p in crash_points(self.config)]
        except ConfigError:
            return
        if list(self.crash_point.options) == names:
            self.point_note = ""
            return
        old = self.crash_point.value
        new = old if old in names else nearest_point(names, old)
        self.crash_point.unobserve(self._on_point, names="value")
        try:
            self.crash_point.options = names
            self.crash_point.value = new
        finally:
            self.crash_point.observe(self._on_point, names="value")
        self.point_note = ("" if new == old else
                           f"{old} does not exist with these settings; the slider moved to {new}.")

    def _on_knob(self, change) -> None:
        self._sync_slider()
        try:
            config = self.config
        except ConfigError as e:
            self.run_button.disabled = True
            self.status.value = f"These settings cannot run: {in_widget_words(e)}"
            return
        self.run_button.disabled = False
        self.run_point()
        # Said after the point has run, so the line always names the settings the panel now holds.
        changed = (f"Settings changed to {describe_config(config)}: press Run sweep for the full "
                   "picture." if self.df is not None and config != self.df_config else "")
        self.status.value = " ".join(x for x in (self.point_note, changed) if x)

    def _on_point(self, change) -> None:
        self.run_point()
        if self.df is not None and self.df_config == self.config:
            self.draw()

    # --- actions ---

    def run_point(self) -> dict | None:
        """Crash at the slider's point, resume, and show what happened there."""
        try:
            config = self.config
        except ConfigError as e:
            self.point_info.value = html.escape(in_widget_words(e))
            return None
        self.record = results.point(config, self.crash_point.value)
        self.point_info.value = point_html(self.record)
        if self.point_plot is not None:
            fig = self.point_plot(config, self.crash_point.value)
            self.point_out.outputs = ()
            self.point_out.append_display_data(Image(data=png(fig), format="png"))
        return self.record

    def run(self):
        """Sweep every crash point of the current settings; draw; return the DataFrame."""
        config = self.config
        self.run_button.disabled = True
        self.status.value = "Running: each crash point is a real worker killed and resumed..."
        self.progress.value, self.progress.max = 0, len(crash_points(config))

        def tick(done: int, total: int) -> None:
            self.progress.max, self.progress.value = total, done

        try:
            records = results.sweep(config, progress=tick)
            self.progress.value = self.progress.max
            self.df = frame(records)
            self.df_config = config
            self.draw()
            s = summarize(records)
            self.status.value = (f"{s['crash_points']} crash points: {s['correct_runs']} correct, "
                                 f"{s['duplicate_points']} with a duplicate, {s['lost_points']} "
                                 f"with a lost report, {s['three_way_failures']} failing the "
                                 f"three-way check")
            self.export_button.disabled = False
        finally:
            self.run_button.disabled = False
        return self.df

    def draw(self) -> None:
        fig = self.plot_fn(self.df, self.df_config, self.crash_point.value)
        self.plot_out.outputs = ()
        self.plot_out.append_display_data(Image(data=png(fig), format="png"))
        self.table_out.outputs = ()
        self.table_out.append_display_data(summary_table(self.df))

    def reset(self) -> None:
        """Back to the lesson's settings; forget every cached result (`results.reset`)."""
        results.reset()
        for key, w in self.controls.items():
            w.unobserve(self._on_knob, names="value")
            fresh = KNOBS[key].make(self.base)
            w.value = fresh.value
            w.observe(self._on_knob, names="value")
        self._sync_slider()
        self.crash_point.value = self._defaults["crash_point"]
        self.point_note = ""
        self.df = self.df_config = self.record = None
        self.plot_out.outputs = ()
        self.table_out.outputs = ()
        self.point_info.value = ""
        self.point_out.outputs = ()
        self.progress.value = 0
        self.status.value = "Reset."
        self.export_button.disabled = True
        self.run_button.disabled = False

    def export(self) -> Path | None:
        """Write the last sweep to results/<lesson>-<settings>.csv."""
        if self.df is None:
            self.status.value = "Nothing to export yet: press Run sweep first."
            return None
        self.results_dir.mkdir(parents=True, exist_ok=True)
        path = self.results_dir / f"{self.name}-{slug(self.df_config)}.csv"
        self.df.to_csv(path, index=False)
        self.status.value = f"Saved {path}"
        return path

    def widget(self) -> W.VBox:
        knobs = [W.HBox([W.Label(KNOBS[k].label, layout=W.Layout(width="120px")), w])
                 for k, w in self.controls.items()]
        buttons = W.HBox([self.run_button, self.reset_button, self.export_button, self.progress])
        return W.VBox([self.title, *knobs, self.crash_point, self.point_info, self.point_out,
                       buttons,
                       self.status, self.plot_out, self.table_out])

    def show(self) -> W.VBox:
        """Run the default point and the default sweep, then return the widget to display."""
        self.run_point()
        self.run()
        return self.widget()
