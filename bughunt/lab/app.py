"""The app mode: every lesson's panel in one page, code hidden (`make app`, served by Voila).

A tab per lesson of the registry that has a panel and a place in the app (not lesson 9, whose
store the learner writes in the notebook), titled by its record. The first tab's panel (lesson 2,
`FIRST`) runs its default experiment when the app opens; every other panel runs the first time its
tab is opened, so the app is quick to appear.
"""

from __future__ import annotations

import ipywidgets as W

from . import registry

FIRST = 2          # the lesson whose tab is shown when the app opens


class App:
    def __init__(self, lessons: tuple[registry.Lesson, ...] | None = None):
        self.lessons = [x for x in lessons or registry.lessons() if x.panel is not None and x.in_app]
        self.panels = [None] * len(self.lessons)
        self.boxes = [W.VBox([W.Label("Loading...")]) for _ in self.lessons]
        self.tabs = W.Tab(children=self.boxes)
        for i, lesson in enumerate(self.lessons):
            self.tabs.set_title(i, lesson.tab_title)
        self.tabs.observe(self._on_tab, names="selected_index")
        self.header = W.HTML(
            "<h2>BugHunt Recovery Lab</h2><p>Every panel kills a real worker process with SIGKILL "
            "and resumes it. Pick a lesson, change the settings, press Run. The notebooks "
            "explain each experiment.</p>")

    def open(self, i: int):
        """Build (once) and run the panel of tab `i`."""
        if self.panels[i] is None:
            panel = self.lessons[i].panel()
            self.panels[i] = panel
            self.boxes[i].children = [panel.show()]
        return self.panels[i]

    def _on_tab(self, change) -> None:
        if change["new"] is not None:
            self.open(change["new"])

    def widget(self) -> W.VBox:
        first = next((i for i, x in enumerate(self.lessons) if x.number == FIRST), 0)
        self.tabs.selected_index = first
        self.open(first)
        return W.VBox([self.header, self.tabs])


def app() -> W.VBox:
    return App().widget()
