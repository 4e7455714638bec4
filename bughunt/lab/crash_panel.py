"""The sweep panel of lessons 1 to 6: knobs, a crash-point slider, Run sweep, Reset, Export CSV.

- Moving the crash-point slider (or any knob) re-runs that one crash+resume pair (two real
  processes, a fraction of a second) and shows what happened at that point.
- Run sweep kills every crash point of the current settings in parallel, with a progress bar, then
  draws the lesson's figure with the chosen point highlighted.

Everything else (layout, Reset, progress, the status line, errors) is the `Panel` base's.
"""

from __future__ import annotations

import dataclasses
import html
import re
from pathlib import Path
from typing import Callable

import ipywidgets as W
from IPython.display import Image

from ..config import ConfigError, RunConfig
from ..crashpoints import LABELS
from ..experiment import crash_point as find_point
from ..experiment import CrashRun, crash_points, frame, summarize
from . import results
from .panel import KNOBS, Panel, Result, failure_sentence, in_widget_words
from .plots import describe_config
from .style import png
from .views import html_table

PlotFn = Callable[..., "object"]   # (DataFrame, RunConfig, highlight: str) -> Figure


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
    return html_table(rows)


def sweep_table(df):
    """A sweep's summary as a one-row table (`views.Table`: headers in words, averages to 2
    decimals), only the columns that mean something here; counts checked to be counts. An
    average or maximum a sweep did not measure (no resume finished, no replay) shows "-"."""
    from .claims import Invariants
    from .views import summary_table

    s = summarize(df)
    keep = ["crash_points", "avg_redone_model_calls", "avg_replayed_events", "max_replayed_events",
            "duplicate_points", "lost_points", "three_way_failures", "correct_runs"]
    return summary_table([{k: s[k] for k in keep}], "the sweep's summary",
                         Invariants(counts=("crash_points", "duplicate_points", "lost_points",
                                            "three_way_failures", "correct_runs"),
                                    may_be_empty=("avg_redone_model_calls",
                                                  "avg_replayed_events",
                                                  "max_replayed_events")))


def sweep_sentence(records) -> str:
    """The status line after a sweep (the browser tests read exactly this)."""
    s = summarize(records)
    return (f"{s['crash_points']} crash points: {s['correct_runs']} correct, "
            f"{s['duplicate_points']} with a duplicate, {s['lost_points']} with a lost report, "
            f"{s['three_way_failures']} failing the three-way check")


def slug(config: RunConfig) -> str:
    """A file-name-safe summary of a configuration, for exported CSVs."""
    parts = [f"{f.name}-{getattr(config, f.name)}" for f in dataclasses.fields(config)
             if not f.metadata["hidden"]]
    return re.sub(r"[^A-Za-z0-9_.-]", "_", "_".join(parts))


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


class CrashPanel(Panel):
    """A lesson's sweep panel. `knobs` name entries of `panel.KNOBS`; `plot(df, config,
    highlight) -> Figure`, where `highlight` is the chosen crash point's name;
    `point_plot(config, name) -> Figure`, if given, draws the single crash point too."""

    run_label = "Run sweep"
    run_tooltip = "crash at every point with these settings, resume, measure"
    running = "Running: each crash point is a real worker killed and resumed..."

    def __init__(self, *, name: str, base: RunConfig, knobs: list[str], plot: PlotFn,
                 title: str = "", crash_point: str = "p1.after_model_call",
                 results_dir: Path = Path("results"),
                 point_plot: Callable[[RunConfig, str], object] | None = None):
        self.name, self.base, self.plot_fn, self.point_plot = name, base, plot, point_plot
        self.knobs, self.title = list(knobs), title
        self.labels = {k: KNOBS[k].label for k in self.knobs}
        self.results_dir = Path(results_dir)
        start = find_point(base, crash_point).name    # refuses a point `base` lacks
        # The slider shows names: p3.after_submit is the same moment whatever the settings.
        self.crash_point = W.SelectionSlider(options=[p.name for p in crash_points(base)],
                                             value=start, description="crash point",
                                             continuous_update=False,
                                             layout=W.Layout(width="560px"))
        self.point_note = ""     # said when a settings change moved the slider
        self.point_info = W.HTML()
        self.point_out = W.Output()
        self.export_button = W.Button(description="Export CSV", icon="download", disabled=True)
        self.df = None           # the last sweep, as a DataFrame
        self.df_config = None    # the settings it was run with
        self.record = None       # the last single crash point
        super().__init__()
        self.progress.description = "sweep"
        self.export_button.on_click(lambda _: self.export())

    def make_controls(self) -> dict:
        return {**{k: KNOBS[k].make(self.base) for k in self.knobs},
                "crash_point": self.crash_point}

    def extra(self) -> list:
        return [self.point_info, self.point_out]

    def buttons(self) -> list:
        return [self.export_button]

    # --- state ---

    @property
    def config(self) -> RunConfig:
        """The settings the knobs describe. Raises ConfigError for an impossible mix."""
        c = self.base
        for key in self.knobs:
            c = KNOBS[key].apply(c, self.controls[key].value)
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
        with self.quiet():
            self.crash_point.options = names
            self.crash_point.value = new
        self.point_note = ("" if new == old else
                           f"{old} does not exist with these settings; the slider moved to {new}.")

    def changed(self, name: str) -> None:
        if name == "crash_point":
            self.run_point()
            if self.df is not None and self.df_config == self.config:
                self.render(self._sweep_result(self.df, self.df_config))
            return
        self._sync_slider()
        try:
            config = self.config
        except ConfigError as e:
            self.run_button.disabled = True
            self.status.value = failure_sentence(e)
            return
        self.run_button.disabled = False
        self.run_point()
        # Said after the point has run, so the line always names the settings the panel now holds.
        moved = (f"Settings changed to {describe_config(config)}: press Run sweep for the full "
                 "picture." if self.df is not None and config != self.df_config else "")
        said = " ".join(x for x in (self.point_note, moved) if x)
        if said or self.error is None:
            self.status.value = said

    def restore(self, name: str, value) -> None:
        if name == "crash_point":          # the knobs are back: the slider gets their points first
            self._sync_slider()
        super().restore(name, value)

    # --- actions ---

    def run_point(self) -> CrashRun | None:
        """Crash at the slider's point, resume, and show what happened there."""
        try:
            config = self.config
        except ConfigError as e:
            self.point_info.value = html.escape(in_widget_words(e))
            return None
        try:
            self.record = results.point(config, self.crash_point.value)
            self.point_info.value = point_html(self.record)
            if self.point_plot is not None:
                fig = self.point_plot(config, self.crash_point.value)
                self.point_out.outputs = ()
                self.point_out.append_display_data(Image(data=png(fig), format="png"))
        except Exception as e:
            self.record = None
            self.point_info.value = ""
            self.fail(e, f"the crash point {self.crash_point.value}")
            return None
        return self.record

    def execute(self, settings: dict) -> Result:
        """Sweep every crash point of the current settings; the lesson's figure and the summary."""
        config = self.config
        self.tick(0, len(crash_points(config)))
        records = results.sweep_once(config, progress=self.tick)
        self.df, self.df_config = frame(records), config
        self.export_button.disabled = False
        return self._sweep_result(self.df, config, sweep_sentence(records))

    def _sweep_result(self, df, config: RunConfig, summary: str = "") -> Result:
        return Result(summary or self.status.value,
                      figures=[self.plot_fn(df, config, self.crash_point.value)],
                      tables=[sweep_table(df)], data=df)

    def reset(self) -> None:
        super().reset()
        self.point_note = ""
        self.df = self.df_config = self.record = None
        self.point_info.value = ""
        self.point_out.outputs = ()
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

    def show(self) -> W.VBox:
        """Run the default point and the default sweep, then return the widget to display."""
        self.run_point()
        return super().show()
