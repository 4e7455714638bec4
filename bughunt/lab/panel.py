"""The one panel every lesson builds on: controls, Run and Reset, progress, a status line, errors,
and the results (figures and a table). A lesson's panel declares its controls and one
`execute(settings) -> Result`; everything else is here.

It is the thinnest layer of the lab (the jupyter-widgets tutorial's "separating concerns": the
model is the experiment, this is the view). A panel reads its controls, calls plain functions of
the lab, and changes only widget state: `Output.outputs`, `append_display_data`, labels and the
progress bar. It never prints, so it behaves the same in JupyterLab, Voila, headless execution,
nbval and plain pytest (where `.value = ...` and `Button.click()` drive it).

- **Defaults are declared once**: whatever the controls hold when the panel is built. Reset puts
  every control back to them (and forgets every cached result, `results.reset`).
- **Errors are said, never swallowed**: a run that fails leaves one sentence in the status line,
  in the widgets' words (the 'snapshot every' setting, never `--snapshot-every`), keeps the
  exception in `panel.error`, and its details (the traceback) behind a "details" button.
- **The static picture**: `regen.static_panel` turns what the panel shows into plain outputs for
  GitHub; it reads the controls' labels and values, the status line, HTML, and the figures and
  tables in the panel's outputs, so a panel shows its results only through those.
"""

from __future__ import annotations

import dataclasses
import html
import re
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

import ipywidgets as W
from IPython.display import HTML, Image

from ..config import ConfigError, RunConfig
from ..stores import StoreDamage
from . import results
from .style import png
from .views import plain_message


@dataclass
class Result:
    """What one run of a panel's experiment gives.

    `summary` is the status line's sentence; `notes` (HTML) come first, then each figure (a
    matplotlib Figure, shown as PNG), then each of `tables` (a DataFrame, anything Jupyter
    displays, or a string of HTML: a caption). `sections` splits the results into named parts,
    each shown in its own tab. `data` is what the run measured, for code that drives the panel (a
    DataFrame, records): `run()` returns it.
    """

    summary: str
    figures: list = field(default_factory=list)
    tables: list = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sections: dict[str, "Result"] = field(default_factory=dict)
    data: object = None


class Panel:
    """A lesson's panel. Subclasses declare `controls()` and `execute(settings)`; they may add
    `changed(name)` (a control moved), `rows()` (their own layout of the controls), `extra()`
    (widgets of their own under the controls), `buttons()`, `footer()` (widgets under the
    results) and `restore(name, value)`."""

    title: str = ""
    run_label: str = "Run"
    run_tooltip: str = ""
    running: str = "Running: real processes, killed and resumed..."     # the status while it runs
    labels: dict[str, str] = {}        # a control's label, shown to its left (else its description)

    def __init__(self):
        self._quiet = 0
        self.controls: dict[str, W.ValueWidget] = self.make_controls()
        self.defaults: dict = dict(self.settings)      # declared once: what Reset goes back to
        self.run_button = W.Button(description=self.run_label, button_style="primary",
                                   icon="play", tooltip=self.run_tooltip)
        self.reset_button = W.Button(description="Reset", icon="undo",
                                     tooltip="back to the lesson's settings; forget every result")
        self.progress = W.IntProgress(value=0, min=0, max=1)
        self.status = W.Label()
        self.details_button = W.ToggleButton(description="details", value=False, icon="info",
                                             layout=W.Layout(display="none"),
                                             tooltip="what went wrong, in full")
        self.details = W.Output(layout=W.Layout(display="none"))
        self.out = W.Output(layout=W.Layout(min_height="120px"))
        self.sections = W.VBox([self.out])
        self.result: Result | None = None
        self.error: BaseException | None = None
        for name, widget in self.controls.items():
            widget.observe(lambda change, name=name: self._on_change(name), names="value")
        self.run_button.on_click(lambda _: self.run())
        self.reset_button.on_click(lambda _: self.reset())
        self.details_button.observe(self._on_details, names="value")

    # --- what a lesson's panel declares --------------------------------------------------------

    def make_controls(self) -> dict[str, W.ValueWidget]:
        """The panel's settings, by name, each a widget whose value is the setting."""
        raise NotImplementedError

    def execute(self, settings: dict) -> Result:
        """Run the experiment the settings describe. Report progress with `self.tick(done,
        total)`; raise on failure (the panel says it)."""
        raise NotImplementedError

    def changed(self, name: str) -> None:
        """A control moved (not while the panel itself moves them). By default: say that the
        results shown are no longer those of the settings."""
        if self.result is not None:
            self.status.value = f"Settings changed: press {self.run_label} to see what they give."

    def rows(self) -> list[W.Widget]:
        """The controls as laid out: one row each, with its label if it has one."""
        return [W.HBox([W.Label(self.labels[n], layout=W.Layout(width="120px")), w])
                if n in self.labels else w for n, w in self.controls.items()]

    def extra(self) -> list[W.Widget]:
        """Widgets of the panel's own, shown under the controls."""
        return []

    def buttons(self) -> list[W.Widget]:
        """Buttons of the panel's own, after Run and Reset."""
        return []

    def footer(self) -> list[W.Widget]:
        """Widgets of the panel's own, under the results (to look into them)."""
        return []

    def restore(self, name: str, value) -> None:
        """Put control `name` back to `value` (Reset; no change handler runs)."""
        self.controls[name].value = value

    # --- state ---------------------------------------------------------------------------------

    @property
    def settings(self) -> dict:
        return {name: w.value for name, w in self.controls.items()}

    @contextmanager
    def quiet(self):
        """Move controls without running anything: the panel itself is moving them."""
        self._quiet += 1
        try:
            yield
        finally:
            self._quiet -= 1

    def _on_change(self, name: str) -> None:
        if not self._quiet:
            self.changed(name)

    def tick(self, done: int, total: int) -> None:
        """Progress: `done` of `total`."""
        self.progress.max, self.progress.value = max(total, 1), done

    # --- actions -------------------------------------------------------------------------------

    def run(self):
        """Run the experiment with the controls' settings; show it; return what it measured (None
        if it failed: the status line says why, `self.error` holds the exception)."""
        self.run_button.disabled = True
        self.clear_error()
        self.progress.value = 0
        self.status.value = self.running
        try:
            result = self.execute(self.settings)
        except Exception as e:
            self.result = None
            self.render(Result(""))
            self.fail(e)
            return None
        finally:
            self.run_button.disabled = False
        self.progress.value = self.progress.max
        self.result = result
        self.render(result)
        self.status.value = result.summary
        return result.data

    def render(self, result: Result) -> None:
        """Put `result` on screen: in the panel's output, or one tab per section."""
        if result.sections:
            tabs = W.Tab(children=[self._fill(W.Output(), part)
                                   for part in result.sections.values()])
            for i, name in enumerate(result.sections):
                tabs.set_title(i, name)
            self.out.outputs = ()
            self._fill(self.out, Result("", notes=result.notes))
            self.sections.children = [self.out, tabs]
        else:
            self.sections.children = [self._fill(self.out, result)]

    def images(self) -> list[bytes]:
        """The figures the panel shows now, as PNG data (in order, every section's too)."""
        outs = [self.out] + [w for tab in self.sections.children[1:] for w in tab.children]
        return [o["data"]["image/png"] for out in outs for o in out.outputs
                if "image/png" in o.get("data", {})]

    @staticmethod
    def _fill(out: W.Output, result: Result) -> W.Output:
        out.outputs = ()
        for note in result.notes:
            out.append_display_data(HTML(note))
        for fig in result.figures:
            out.append_display_data(Image(data=png(fig), format="png"))
        for table in result.tables:
            out.append_display_data(HTML(table) if isinstance(table, str) else table)
        return out

    def section(self, name: str) -> W.Output | None:
        """The output of the results' section `name` (None when the results have no such tab)."""
        for tabs in self.sections.children[1:]:
            for i, out in enumerate(tabs.children):
                if tabs.get_title(i) == name:
                    return out
        return None

    def fail(self, error: BaseException, what: str = "") -> str:
        """Say what went wrong in one sentence (the status line), keep the exception, and its
        traceback behind the details button. `what` names the part that failed. Returns the
        sentence."""
        sentence = self.note_failure(error, what)
        self.status.value = sentence
        return sentence

    def note_failure(self, error: BaseException, what: str = "") -> str:
        """Keep a failure of one part of a run (the exception, its traceback behind the details
        button) and return its sentence, for a run that goes on with its other parts and says it
        in its summary."""
        self.error = error
        self.details.append_stdout("".join(traceback.format_exception(error)))
        self.details_button.layout.display = None
        return failure_sentence(error, what)

    def clear_error(self) -> None:
        self.error = None
        self.details.outputs = ()
        self.details_button.value = False
        self.details_button.layout.display = "none"

    def _on_details(self, change) -> None:
        self.details.layout.display = None if change["new"] else "none"

    def reset(self) -> None:
        """Back to the lesson's settings; forget every cached result (`results.reset`)."""
        results.reset()
        with self.quiet():
            for name, value in self.defaults.items():
                self.restore(name, value)
        self.result = None
        self.clear_error()
        self.render(Result(""))
        self.progress.value = 0
        self.status.value = "Reset."

    def widget(self) -> W.VBox:
        head = [W.HTML(f"<h3>{html.escape(self.title)}</h3>")] if self.title else []
        return W.VBox([*head, *self.rows(), *self.extra(),
                       W.HBox([self.run_button, self.reset_button, *self.buttons(),
                               self.progress]),
                       self.status, self.details_button, self.details, self.sections,
                       *self.footer()])

    def show(self) -> W.VBox:
        """Run the default settings, then return the widget to display."""
        self.run()
        return self.widget()


# --- errors, in the widgets' words ---------------------------------------------------------------

#: The widgets' words for the worker's flags, so an error names what the learner moved.
WIDGET_WORDS = {
    "--store log": "the log store", "--store snapshot": "the snapshot store",
    "--granularity op": "per-operation checkpoints",
    **{f"--{f.name.replace('_', '-')}": f"the '{f.metadata['label']}' setting"
       for f in dataclasses.fields(RunConfig)},
}


def in_widget_words(message: str | ConfigError) -> str:
    """A message from the configuration or the worker as one sentence in the panel's words, its
    flags replaced by the settings' labels and its paths by file names: "The 'snapshot every'
    setting applies only when the 'store' setting is log (...)."."""
    if isinstance(message, ConfigError):
        message = message.as_flag()
    message = re.sub(r"^(--[\w-]+): ", r"\1 ", message)     # "--pages: must be" -> "... must be"
    for flag in sorted(WIDGET_WORDS, key=len, reverse=True):
        message = message.replace(flag, WIDGET_WORDS[flag])
    message = plain_message(message).strip()
    message = message[:1].upper() + message[1:]
    return message if message.endswith((".", "!", "?")) else message + "."


#: Failures of an experiment (a worker refused, a process timed out, a file is damaged), as
#: opposed to a bug of the lab.
EXPERIMENT_FAILURES = (RuntimeError, OSError, ValueError, TimeoutError, StoreDamage)


def failure_sentence(error: BaseException, what: str = "") -> str:
    """The status line for a failed run: settings that cannot run, an experiment that stopped, or
    the lab itself failing (a bug: please report it)."""
    where = f" ({what})" if what else ""
    if isinstance(error, ConfigError):
        return f"These settings cannot run{where}. {in_widget_words(error)}"
    if isinstance(error, EXPERIMENT_FAILURES):
        # A process's message can run to many lines (its stderr): the last says what happened;
        # the whole of it is behind the details button.
        lines = [x.strip() for x in str(error).splitlines() if x.strip()] or [type(error).__name__]
        return f"The experiment stopped{where}. {in_widget_words(lines[-1])}"
    return (f"The lab failed{where} ({type(error).__name__}): {error}. Press details for where; "
            "please report it.")


# --- controls: one widget per configuration field the lessons vary -------------------------------

def toggle(options, value, tooltips=None, **kw) -> W.ToggleButtons:
    """The lab's choice widget: a row of buttons, as wide as their labels."""
    return W.ToggleButtons(options=options, value=value, tooltips=tooltips or [],
                           style={"button_width": "auto"}, **kw)


ON_OFF = [("on", True), ("off", False)]


@dataclass(frozen=True)
class Knob:
    """A setting a panel can offer: its label, its widget for a configuration, and how its value
    changes a configuration."""

    label: str
    make: Callable[[RunConfig], W.ValueWidget]
    apply: Callable[[RunConfig, object], RunConfig]


def _checkpoint_value(c: RunConfig) -> str:
    return "none" if c.store == "none" else ("op" if c.granularity == "op" else "page")


def _apply_checkpoint(c: RunConfig, v: str) -> RunConfig:
    if v == "none":
        return c.replace(store="none", granularity="page", snapshot_every=0)
    return c.replace(store="snapshot", granularity=v, snapshot_every=0)


def field_knob(f: dataclasses.Field) -> Knob:
    """The widget for one RunConfig field, as its `setting` describes it: a toggle for a choice
    or on/off, a slider for a count."""
    name, label = f.name, f.metadata["label"]
    if f.metadata["choices"]:
        make = (lambda c: toggle(list(f.metadata["choices"]), getattr(c, name)))
    elif f.type in (bool, "bool"):
        make = (lambda c: toggle(ON_OFF, getattr(c, name)))
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
        lambda c: toggle([("none", "none"), ("per page", "page"), ("per operation", "op")],
                         _checkpoint_value(c)),
        _apply_checkpoint),
    "store": Knob("store", lambda c: toggle(["none", "snapshot", "log"], c.store),
                  lambda c, v: c.replace(store=v, snapshot_every=c.snapshot_every if v == "log"
                                         else 0, granularity="page")),
}
