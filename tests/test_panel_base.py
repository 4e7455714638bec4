"""The one Panel base, driven through a panel of two controls: defaults declared once, Reset that
retypes nothing, errors said in one sentence with their details on demand, nothing printed, and
the static picture regen stores for viewers that cannot run widgets."""

import ipywidgets as W
import pytest
from matplotlib.figure import Figure

from bughunt.config import ConfigError, RunConfig
from bughunt.lab.panel import Panel, Result, in_widget_words, toggle
from bughunt.lab.regen import WIDGET_VIEW, static_panel


def figure(title: str) -> Figure:
    fig = Figure(figsize=(2, 1))
    fig.subplots().set_title(title)
    return fig


class Pages(Panel):
    """A panel as small as a lesson's can be: two controls and an execute."""

    title = "pages"
    labels = {"pages": "pages"}

    def __init__(self, fails: Exception | None = None):
        self.fails, self.runs, self.changes = fails, [], []
        super().__init__()

    def make_controls(self):
        return {"pages": W.IntSlider(value=4, min=1, max=12),
                "store": toggle(["log", "snapshot"], "log", description="store")}

    def changed(self, name):
        self.changes.append(name)
        super().changed(name)

    def execute(self, settings):
        self.runs.append(dict(settings))
        if self.fails is not None:
            raise self.fails
        RunConfig(store=settings["store"], pages=settings["pages"])      # refuses a bad mix
        self.tick(1, 1)
        return Result(f"{settings['pages']} pages on the {settings['store']} store.",
                      figures=[figure("one")], tables=["<i>caption</i>", [1, 2]],
                      notes=["<b>headline</b>"], data=settings["pages"])


def test_run_shows_notes_figures_tables_in_order_and_returns_what_it_measured(capsys):
    p = Pages()
    assert p.run() == 4 and p.status.value == "4 pages on the log store."
    kinds = [sorted(o["data"]) for o in p.out.outputs]
    assert kinds == [["text/html", "text/plain"], ["image/png", "text/plain"],
                     ["text/html", "text/plain"], ["text/plain"]]
    assert len(p.images()) == 1 and p.progress.value == p.progress.max and p.error is None
    assert capsys.readouterr().out == ""                  # a panel never prints


def test_reset_restores_the_declared_defaults_without_running_or_retyping_them():
    p = Pages()
    p.run()
    p.controls["pages"].value, p.controls["store"].value = 9, "snapshot"
    assert p.changes == ["pages", "store"] and p.status.value.startswith("Settings changed")
    p.reset()
    assert p.settings == {"pages": 4, "store": "log"} == p.defaults
    assert p.changes == ["pages", "store"] and len(p.runs) == 1     # nothing ran while it reset
    assert p.out.outputs == () and p.status.value == "Reset." and p.result is None


def test_settings_that_cannot_run_are_one_sentence_in_the_widgets_words():
    p = Pages(fails=ConfigError("snapshot_every", "applies only when `store` is log"))
    assert p.run() is None
    assert p.status.value == ("These settings cannot run. The 'snapshot every' setting applies "
                              "only when the 'store' setting is log.")
    assert isinstance(p.error, ConfigError) and p.out.outputs == ()
    assert "--" not in p.status.value and "snapshot_every" not in p.status.value


def test_a_failed_experiment_keeps_its_details_behind_a_button_and_a_later_run_clears_them():
    p = Pages(fails=RuntimeError("resume failed:\nbughunt: /tmp/bughunt-x/run/events.jsonl:3: "
                                 "expected event 3, found 5"))
    p.run()
    assert p.status.value == "The experiment stopped. Events.jsonl:3: expected event 3, found 5."
    assert p.details_button.layout.display is None and p.details.layout.display == "none"
    p.details_button.value = True                          # the learner asks for the details
    assert p.details.layout.display is None
    assert "Traceback" in p.details.outputs[0]["text"] and "resume failed" in \
        p.details.outputs[0]["text"]
    p.fails = None
    p.run()
    assert p.error is None and p.details.outputs == () and p.details_button.layout.display == "none"


def test_a_bug_of_the_lab_is_said_as_one_and_never_swallowed():
    p = Pages(fails=KeyError("after_abort"))
    p.run()
    assert p.status.value.startswith("The lab failed (KeyError): 'after_abort'.")
    assert isinstance(p.error, KeyError) and "KeyError" in p.details.outputs[0]["text"]


def test_a_result_in_sections_is_one_tab_each_and_a_reset_removes_them():
    class Parts(Pages):
        def execute(self, settings):
            return Result("two parts", sections={"first": Result("", figures=[figure("a")]),
                                                 "second": Result("", tables=["b"])})
    p = Parts()
    p.run()
    assert len(p.section("first").outputs) == 1 and p.section("second").outputs
    assert len(p.images()) == 1 and p.section("third") is None
    p.reset()
    assert p.section("first") is None and p.sections.children == (p.out,)


def test_the_static_picture_shows_the_settings_the_status_and_the_figures():
    p = Pages()
    view = p.widget()
    p.run()
    state = W.Widget.get_manager_state(drop_defaults=False)["state"]
    shown = static_panel([{"output_type": "display_data",
                           "data": {WIDGET_VIEW: {"model_id": view.model_id}}}], state)
    note = shown[0]["data"]["text/markdown"]
    assert "pages: **4**" in note and "store: **log**" in note
    assert "> 4 pages on the log store." in note
    assert sum("image/png" in o["data"] for o in shown) == 1


@pytest.mark.parametrize("message, said", [
    ("--pages: must be at least 1", "The 'pages' setting must be at least 1."),
    ("--snapshot-every applies to --store log only",
     "The 'snapshot every' setting applies to the log store only."),
    ("bughunt: /tmp/run/events.jsonl: cannot write", "Events.jsonl: cannot write."),
])
def test_messages_are_said_with_the_settings_labels_and_no_paths(message, said):
    assert in_widget_words(message) == said
