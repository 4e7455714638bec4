"""A tiny fake framework: the adapter contract at its smallest, for the contract's own tests.

It keeps one JSON checkpoint (`fake.json`, written to a temp file and renamed) and resumes from it.
Modes: `page` checkpoints after every page; `never` only at the end (a crash restarts from
scratch); `flaky` checkpoints a page only when a coin says so, with a fresh random coin in every
process: deliberately nondeterministic, so that `repeat` has something to find.
`HangingFramework` never returns from a resume, as a framework stuck on a lock would (for the
sweep's timeout).
"""

from __future__ import annotations

import json
import os
import random
import threading
from pathlib import Path

from .contract import Reach, World, final_state, no_reach

CHECKPOINT = "fake.json"


class FakeFramework:
    name = "fake"
    modes = ("page", "never", "flaky")
    resume_styles = ("load",)

    def __init__(self, mode: str = "page", resume: str = "load"):
        self.mode, self.resume = mode, resume
        self._write_reach: Reach = no_reach

    def instrument(self, reach: Reach) -> None:
        self._write_reach = reach

    def _save(self, run_dir: Path, state: dict) -> None:
        tmp = run_dir / (CHECKPOINT + ".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, run_dir / CHECKPOINT)      # kill -9 needs no fsync (lesson 6)
        self._write_reach("framework.save.committed")

    def run(self, run_dir: Path, world: World, reach: Reach) -> dict:
        state = self.rebuild(run_dir) or final_state([], 0, 0)
        coin = random.Random(os.urandom(8))
        for page in range(state["pages_done"] + 1, world.pages + 1):
            _reply, tokens = world.ask(page)
            bug = world.visit(page)
            if bug:
                world.submit(page, bug)
            state = final_state(state["findings"] + ([page] if bug else []),
                                state["tokens"] + tokens, page)
            if self.mode == "page" or (self.mode == "flaky" and coin.random() < 0.5):
                self._save(run_dir, state)
        self._save(run_dir, state)
        return state

    def rebuild(self, run_dir: Path) -> dict | None:
        path = Path(run_dir) / CHECKPOINT
        return json.loads(path.read_text()) if path.exists() else None


class HangingFramework(FakeFramework):
    """The fake framework, but a resume never returns (swept as `fake:HangingFramework`)."""

    name = "fake-hang"

    def run(self, run_dir: Path, world: World, reach: Reach) -> dict:
        if (Path(run_dir) / "bill.jsonl").exists():
            (Path(run_dir) / "hanging").touch()      # tells a watcher it is stuck now
            threading.Event().wait()
        return super().run(run_dir, world, reach)
