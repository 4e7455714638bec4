"""The lab's own worker, run through the adapter contract: it fits, in process.

`bughunt.worker.run` already starts or resumes a run directory and returns its state, and
`bughunt.stores.rebuild_from_disk` is its third witness, so `run` and `rebuild` are one call each.
The worker builds the same world itself (the billed `MockModel` and the `Tracker`, on the same
`bill.jsonl` and `tracker.db` in the run directory), so the world's latency does not apply to it.

Its crash points are the lesson's own (`bughunt.crashpoints`). They are hooked from outside, by
giving the worker a `CrashPlan` whose `reach` calls the sweep's reach, and named like the other
adapters' points: the three world calls by their world names, and the store's writes as
`framework.*` (the lab's checkpoint store is the "framework" here): `mid_commit` is
`framework.commit.uncommitted` (nothing of the page's commit is durable yet), `after_commit` is
`framework.commit.committed`, `after_intent` is `framework.intent.committed`.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from .. import worker
from ..config import RunConfig
from ..crashpoints import CrashPlan
from ..stores import rebuild_from_disk
from .contract import Reach, World, final_state

NAMES = {"after_model_call": "ask_model.after", "after_visit": "visit.after",
         "after_submit": "submit.after", "after_intent": "framework.intent.committed",
         "mid_commit": "framework.commit.uncommitted",
         "after_commit": "framework.commit.committed"}


@contextmanager
def reaching(reach: Reach):
    """Run the worker with every crash point of its plan reported to `reach`."""

    class SweptPlan(CrashPlan):
        def reach(self, page: int, label: str) -> None:
            if label in NAMES:         # recovery's own points are lesson 8's, not swept here
                reach(NAMES[label], page=page)

    saved = worker.CrashPlan
    worker.CrashPlan = SweptPlan
    try:
        yield
    finally:
        worker.CrashPlan = saved


def worker_final_state(state: dict) -> dict:
    """The worker's state in the contract's shape."""
    return final_state(state["findings"], state["tokens"], state["next_page"] - 1)


class LabWorker:
    name = "lab"
    modes = ("log", "snapshot", "none")     # log: with intents; the key comes from the world
    resume_styles = ("rerun",)              # running again on the same directory resumes

    def __init__(self, mode: str = "log", resume: str = "rerun"):
        self.mode, self.resume = mode, resume

    def config(self, pages: int, idempotency_key: bool) -> RunConfig:
        return RunConfig(store=self.mode, intent=self.mode == "log", pages=pages,
                         idempotency_key=idempotency_key)

    def run(self, run_dir: Path, world: World, reach: Reach) -> dict:
        config = self.config(world.pages, world.settings.idempotency_key)
        with reaching(reach):
            report = worker.run(Path(run_dir), config)
        return worker_final_state(report["state"])

    def rebuild(self, run_dir: Path) -> dict | None:
        if self.mode == "none":
            return None                      # no store, no third witness
        return worker_final_state(rebuild_from_disk(Path(run_dir)).state)
