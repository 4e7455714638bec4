"""The app mode: every lesson's panel in one page, code hidden (`make app`, served by Voila).

A tab per lesson that has a panel (not lesson 9, whose store the learner writes in the notebook).
Lesson 2's panel runs its default sweep when the app opens; every other panel
runs the first time its tab is opened, so the app is quick to appear.
"""

from __future__ import annotations

import ipywidgets as W

LESSONS = [
    ("1 · killed at page 7", "restart"),
    ("2 · granularity", "granularity"),
    ("3 · replay vs snapshot", "replay"),
    ("4 · danger window", "danger"),
    ("5 · torn writes", "torn"),
    ("6 · kill -9 vs power loss", "durability"),
    ("7 · durable tasks", "durable_tasks"),
    ("8 · beyond the lesson", "beyond"),
    ("10 · frameworks", "frameworks"),
    ("11 · the call in flight", "call_in_flight"),
]
# Lesson 9 (your own store) has no tab: the learner writes the store in the notebook.
FIRST = 1          # the tab shown when the app opens (lesson 2)


class App:
    def __init__(self):
        import importlib

        self.modules = [importlib.import_module(f"bughunt.lab.{m}") for _, m in LESSONS]
        self.panels = [None] * len(LESSONS)
        self.boxes = [W.VBox([W.Label("Loading...")]) for _ in LESSONS]
        self.tabs = W.Tab(children=self.boxes)
        for i, (title, _) in enumerate(LESSONS):
            self.tabs.set_title(i, title)
        self.tabs.observe(self._on_tab, names="selected_index")
        self.header = W.HTML(
            "<h2>BugHunt Recovery Lab</h2><p>Every panel kills a real worker process with SIGKILL "
            "and resumes it. Pick a lesson, change the settings, press Run. The notebooks "
            "explain each experiment.</p>")

    def open(self, i: int):
        """Build (once) and run the panel of lesson tab `i`."""
        if self.panels[i] is None:
            panel = self.modules[i].panel()
            self.panels[i] = panel
            self.boxes[i].children = [panel.show()]
        return self.panels[i]

    def _on_tab(self, change) -> None:
        if change["new"] is not None:
            self.open(change["new"])

    def widget(self) -> W.VBox:
        self.tabs.selected_index = FIRST
        self.open(FIRST)
        return W.VBox([self.header, self.tabs])


def app() -> W.VBox:
    return App().widget()
