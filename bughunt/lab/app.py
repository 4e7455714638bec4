"""The app mode: every lesson's panel in one page, code hidden (`make app`, served by Voila).

A tab per lesson of the registry that has one (`Lesson.app_tab`: its panel, or, for lesson 9,
whose panel grades a file written in the notebook, a step of the notebook picked and graded).
Each tab is labelled with the lesson's `tab_title` in full ("3 · replay vs snapshot"): the labels
wrap onto a second row rather than being cut, and hovering one shows the lesson's heading. The
page has one heading, the app's. The first tab's panel (lesson 2, `FIRST`) runs its default
experiment when the app opens; every other panel runs the first time its tab is opened, so the
app is quick to appear. The lab's stylesheet (`static/custom.css`: listings that keep their
lines, the wrapping tab row) comes with the page, as Voila loads no custom stylesheet itself.
"""

from __future__ import annotations

import html

import ipywidgets as W

from . import registry
from .labstyle import css

FIRST = 2          # the lesson whose tab is shown when the app opens
TITLE = "BugHunt Recovery Lab"


class App:
    def __init__(self, lessons: tuple[registry.Lesson, ...] | None = None):
        self.lessons = [x for x in lessons or registry.lessons() if x.app_tab is not None]
        self.panels = [None] * len(self.lessons)
        self.boxes = [W.VBox([W.Label("Loading...")]) for _ in self.lessons]
        self.pages = W.Stack(children=self.boxes)
        self.tabs = W.ToggleButtons(options=[(x.tab_title, i) for i, x in enumerate(self.lessons)],
                                    tooltips=[x.heading for x in self.lessons], value=None,
                                    style={"button_width": "auto"})
        self.tabs.add_class("bughunt-lesson-tabs")
        self.tabs.observe(self._on_tab, names="value")
        self.header = W.HTML(
            f"<style>{css()}</style><h1>{html.escape(TITLE)}</h1><p>Every panel kills a real "
            "worker process with SIGKILL and resumes it. Pick a lesson, change the settings, "
            "press Run. The notebooks explain each experiment.</p>")

    def titles(self) -> list[str]:
        """The tabs' labels, in order."""
        return [label for label, _ in self.tabs.options]

    def open(self, i: int):
        """Build (once) and run the panel of tab `i`."""
        if self.panels[i] is None:
            panel = self.lessons[i].app_tab()
            self.panels[i] = panel
            self.boxes[i].children = [panel.show()]
        return self.panels[i]

    def _on_tab(self, change) -> None:
        if change["new"] is not None:
            self.pages.selected_index = change["new"]
            self.open(change["new"])

    def widget(self) -> W.VBox:
        first = next((i for i, x in enumerate(self.lessons) if x.number == FIRST), 0)
        self.tabs.value = first
        return W.VBox([self.header, self.tabs, self.pages])


def app() -> W.VBox:
    return App().widget()
