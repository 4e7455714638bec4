"""Sweep your own framework: what an adapter promises, and what the lab gives it.

Lessons 1 to 8 kill the lab's own worker. This contract lets the same sweep kill an agent built on
any framework (LangGraph, DBOS, yours). The lab gives the adapter:

- a **world** (`World`): the lab's site, its billed mock model and its SQLite tracker, the same
  three things the worker uses. Every call to them is a crash point in user code, fired by the
  world itself right after the call returns: `ask_model.after` (the call is on the bill),
  `visit.after`, `submit.after` (the report is in the tracker). The agent's code has no crash
  switches in it.
- a **reach** (`Reach`): the function an adapter calls at any further point it wants swept. The
  sweep counts every name per process, so a point is a stable name plus its occurrence,
  `ask_model.after#3`, the same moment in every run that reaches it.

The adapter gives the lab:

- `run(run_dir, world, reach)`: start the agent, or resume it if `run_dir` holds an earlier run
  (the resume code is part of what is under test), and return its final state;
- `rebuild(run_dir)`: the final state read back from the framework's own store, by code that does
  not run the agent: the third witness, beside the tracker and the state in memory;
- optionally `instrument(reach)`: hook the framework's own durable writes, through its public
  extension points where it has them, so that the sweep can also kill it inside them.

A **final state** is a plain dict, the same for every adapter (see `final_state`): the pages the
agent filed a report for, in the order it recorded them (a page twice is a wrong state), the model
tokens it counted, and how many pages it finished.
"""

from __future__ import annotations

import importlib
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Protocol, runtime_checkable

from ..world import MockModel, Site, Tracker, report_key

#: reach(name, **detail): a crash point. `detail` (e.g. page=3, write_ns=41000) goes to the trace.
Reach = Callable[..., None]


def no_reach(name: str, **detail: Any) -> None:
    """A reach that does nothing: the agent run outside any sweep."""


def final_state(findings: list[int], tokens: int, pages_done: int) -> dict:
    """The one shape every adapter's `run` and `rebuild` return."""
    return {"findings": [int(p) for p in findings], "tokens": int(tokens),
            "pages_done": int(pages_done)}


@runtime_checkable
class Adapter(Protocol):
    """One agent on one framework, in one durability mode, with one way of resuming.

    Class attributes: `name`; `modes`, the framework's durability modes, its default first;
    `resume_styles`, the documented way to resume first, then mistakes worth sweeping.
    The adapter is built as `Adapter(mode=..., resume=...)` in the process that runs it: building
    the framework's objects (connections, threads) happens in `run`, never before a fork.
    """

    name: ClassVar[str]
    modes: ClassVar[tuple[str, ...]]
    resume_styles: ClassVar[tuple[str, ...]]

    def run(self, run_dir: Path, world: "World", reach: Reach) -> dict:
        """Run the agent to its end in `run_dir`, resuming what an earlier process left there.

        Promises: every model call, visit and report goes through `world` (so each is billed,
        counted and a crash point); the function returns only when the agent is done, with its
        `final_state` as the agent holds it in memory. A SIGKILL may end the process at any
        reach; the next call on the same `run_dir` must carry on from what is durable.
        """
        ...

    def rebuild(self, run_dir: Path) -> dict | None:
        """The final state as the framework's store holds it, read without running the agent and
        without changing a byte; None if the framework keeps nothing there."""
        ...


def instrument(adapter: Adapter, reach: Reach) -> bool:
    """Let `adapter` hook its framework's writes, if it can (`instrument(reach)` is optional)."""
    hook = getattr(adapter, "instrument", None)
    if hook is None:
        return False
    hook(reach)
    return True


#: The adapters the lab ships, by name; "module:Class" also names a learner's own.
ADAPTERS = {
    "langgraph": "bughunt.frameworks.langgraph_agent:LangGraphAgent",
    "dbos": "bughunt.frameworks.dbos_agent:DBOSAgent",
    "fake": "bughunt.frameworks.fake:FakeFramework",
    "lab": "bughunt.frameworks.lab_worker:LabWorker",
}


class AdapterError(ValueError):
    """An adapter that cannot be found or does not fit the contract; the message says which."""


def adapter_class(spec: str) -> type:
    """The adapter class for a name in ADAPTERS or a "module:Class" spec."""
    target = ADAPTERS.get(spec, spec)
    module, _, attr = target.partition(":")
    if not attr:
        raise AdapterError(f"--framework {spec!r}: expected one of {', '.join(ADAPTERS)} "
                           "or module:Class")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError, ValueError, TypeError) as e:
        # ValueError: an empty module name (":X"); TypeError: a relative one ("..x:X")
        raise AdapterError(f"--framework {spec!r}: cannot load {target} ({e})") from None
    except Exception as e:            # a learner's module may raise anything while importing
        raise AdapterError(f"--framework {spec!r}: importing {module} raised "
                           f"{type(e).__name__}: {e}") from None
    missing = [a for a in ("name", "modes", "resume_styles", "run", "rebuild")
               if not hasattr(cls, a)]
    if missing:
        raise AdapterError(f"--framework {spec!r}: {target} lacks {', '.join(missing)} "
                           "(see bughunt.frameworks.contract.Adapter)")
    return cls


# --- the world, as the adapters see it -----------------------------------------------------------

@dataclass(frozen=True)
class WorldSettings:
    """What the sweep varies about the world: the idempotency key and how long each call takes."""

    pages: int = 12
    idempotency_key: bool = True
    latency_ms: float = 0.0


class World:
    """The lab's world for one process: billed model, site, tracker; each call a crash point.

    `latency_ms` makes every call take that long before it returns (a model answers in seconds,
    not microseconds), which changes what a framework's background writer gets done meanwhile.
    The tracker is opened once per thread: a framework may run the agent's steps on a thread of
    its own (DBOS does), and a SQLite connection belongs to the thread that made it.
    """

    def __init__(self, run_dir: Path, settings: WorldSettings, reach: Reach = no_reach):
        self.run_dir = Path(run_dir)
        self.settings = settings
        self.site = Site.load(settings.pages)
        self.reach = reach
        self._model: MockModel | None = None      # opened at the first call: nothing on disk before
        self._local = threading.local()
        self._trackers: list[Tracker] = []
        self._lock = threading.Lock()

    @property
    def pages(self) -> int:
        return self.settings.pages

    @property
    def task_id(self) -> str:
        return self.site.task_id

    def _wait(self) -> None:
        if self.settings.latency_ms > 0:
            time.sleep(self.settings.latency_ms / 1000)

    def ask(self, page: int) -> tuple[str, int]:
        """Ask the model what to do on `page`: (reply, tokens). Billed when it returns."""
        self._wait()
        with self._lock:
            if self._model is None:
                self._model = MockModel(self.run_dir, self.site)
        reply, tokens = self._model.ask(page)
        self.reach("ask_model.after", page=page)
        return reply, tokens

    def visit(self, page: int) -> str | None:
        """Visit `page`; the bug's title, or None. Safe to repeat."""
        self._wait()
        bug = self.site.visit(page)
        self.reach("visit.after", page=page)
        return bug

    def submit(self, page: int, title: str) -> bool:
        """File the report for `page` (with the deterministic key if the key is on)."""
        self._wait()
        key = report_key(self.task_id, page) if self.settings.idempotency_key else None
        stored = self._tracker().submit(page, title, key)
        self.reach("submit.after", page=page)
        return stored

    def _tracker(self) -> Tracker:
        tracker = getattr(self._local, "tracker", None)
        if tracker is None:
            tracker = self._local.tracker = Tracker(self.run_dir)
            with self._lock:
                self._trackers.append(tracker)
        return tracker

    def close(self) -> None:
        if self._model is not None:
            self._model.close()
        for t in self._trackers:
            try:
                t.close()
            except Exception:
                pass
