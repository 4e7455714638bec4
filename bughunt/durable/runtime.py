"""A small durable task runtime in the second lesson's style.

A task is a durable state machine. Its checkpoint names the **entry of a step** (`{"phase": ...}`),
not progress inside the step: after a crash the whole step runs again from its start, so every step
must be safe to run again. Tools that make that possible:

- `memo(name)` / `memo(name, value)`: a small first-writer-wins value kept with the task, to make
  "did I already do this?" a question a re-run step can ask. Memos vanish when the task ends.
- `sleep_until(t, next_checkpoint)`: commits the next checkpoint and the wake time together.
- tool tasks record `{phase: "execute", arguments, replay}` before running a tool. Recovery in
  `execute` re-runs the tool only if both the stored and the current replay policy are `safe`;
  otherwise the result says the tool "was interrupted and may have partially run".
- a crash-loop limit: a task cut off `restart_limit` times in a row without progress ends as
  `faulted` with reason `restart_limit` instead of running again. Progress resets the count.

Statuses: pending, running, waiting (on other tasks), sleeping (until a time), terminal.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from .store import DurableStore, ReadOnlyError

MISSING: Any = type("Missing", (), {"__repr__": lambda self: "MISSING"})()
DEFAULT_RESTART_LIMIT = 5


@dataclass(frozen=True)
class Tool:
    """A tool the agent can call. `replay` says whether running it again is harmless."""

    name: str
    run: Callable[["Step", dict], str]
    replay: str = "unsafe"


@dataclass(frozen=True)
class Kind:
    """A kind of task: one handler per phase."""

    name: str
    steps: dict[str, Callable[["Step"], None]]


class Step:
    """What a step handler sees and may do. Every method that changes state is one commit."""

    def __init__(self, runtime: "Runtime", record: dict):
        self.runtime = runtime
        self.store: DurableStore = runtime.store
        self.id: int = record["id"]
        self.input = record["input"]
        self.checkpoint: dict = record["state"]["checkpoint"]
        self.progressed = False

    @property
    def record(self) -> dict:
        return self.store.get(self.id)

    def now(self) -> float:
        return self.runtime.clock()

    def _commit(self, state: dict, *, progress: bool = True) -> None:
        rec = self.record
        rec["state"] = state
        if progress:
            rec.pop("restarts", None)      # progress resets the crash-loop count
            self.progressed = True
        if state["status"] == "terminal":
            rec.pop("memos", None)         # memos vanish when the task ends
            rec.pop("restarts", None)
        self.store.put(rec)

    def memo(self, name: str, value: Any = MISSING) -> Any:
        """Read memo `name` (MISSING if unset); with a value, set it unless already set.

        First write wins: reading the winner and inserting a candidate are one commit, so a step
        that runs twice gets the same answer both times.
        """
        if value is MISSING:
            return self.record.get("memos", {}).get(name, MISSING)
        with self.store.transaction() as db:
            rec = self.store.get(self.id)
            memos = rec.setdefault("memos", {})
            if name not in memos:
                memos[name] = value
                self.store._put(db, rec)
            return memos[name]

    def commit(self, checkpoint: dict) -> None:
        """Enter the next step: the new checkpoint is durable before it runs."""
        self._commit({"status": "running", "checkpoint": checkpoint})

    def sleep_until(self, t: float, checkpoint: dict) -> None:
        """Commit the next checkpoint and when to run it, together. Nothing runs while asleep."""
        self._commit({"status": "sleeping", "checkpoint": checkpoint, "wake_at": t})

    def wait_for(self, task_ids: list[int], checkpoint: dict) -> None:
        """Commit the next checkpoint, to run once every task in `task_ids` is terminal."""
        self._commit({"status": "waiting", "checkpoint": checkpoint, "on": list(task_ids)})

    def spawn_and_wait(self, kind: str, input: Any, checkpoint: dict, next_checkpoint: dict) -> int:
        """Create a child task and wait for it, in one commit (never a child without a waiter)."""
        with self.store.transaction() as db:
            child = self.store.create(kind, input, checkpoint, db=db)
            rec = self.store.get(self.id)
            rec["state"] = {"status": "waiting", "checkpoint": next_checkpoint, "on": [child]}
            rec.pop("restarts", None)
            self.store._put(db, rec)
        self.progressed = True
        return child

    def finish(self, result: Any) -> None:
        self._end({"status": "completed", "result": result})

    def fail(self, message: str, **detail) -> None:
        self._end({"status": "failed", "message": message, **detail})

    def fault(self, reason: str, **detail) -> None:
        self._end({"status": "faulted", "detail": {"reason": reason, **detail}})

    def _end(self, outcome: dict) -> None:
        self._commit({"status": "terminal", "checkpoint": self.checkpoint, "outcome": outcome})

    def output(self, text: str) -> None:
        """Persist partial output now (not progress): a crash later still leaves it on disk."""
        rec = self.record
        rec["output"] = rec.get("output", "") + text
        self.store.put(rec)


class Runtime:
    """Runs the tasks of one store until none can run. One runtime per store at a time."""

    def __init__(self, store: DurableStore, kinds: list[Kind], tools: list[Tool] = (), *,
                 restart_limit: int | None = DEFAULT_RESTART_LIMIT,
                 clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep):
        if restart_limit is not None and restart_limit < 1:
            raise ValueError("restart_limit must be at least 1, or None for no limit")
        self.store = store
        self.kinds = {k.name: k for k in [*kinds, TOOL_KIND]}
        self.tools = {t.name: t for t in tools}
        self.restart_limit = restart_limit
        self.clock, self.sleep = clock, sleep

    def submit(self, kind: str, input: Any, checkpoint: dict) -> int:
        if kind not in self.kinds:
            raise KeyError(f"unknown task kind {kind!r}")
        return self.store.create(kind, input, checkpoint)

    def run(self) -> None:
        """Run every runnable task; sleep until the next wake time; stop when nothing is left."""
        if self.store.read_only:
            raise ReadOnlyError(f"{self.store.path} was opened read-only: cannot resume")
        while True:
            records = self.store.all()
            by_id = {r["id"]: r for r in records}
            now = self.clock()
            ready = [r for r in records if self._ready(r, by_id, now)]
            if ready:
                self._dispatch(ready[0])
                continue
            sleeping = [r["state"]["wake_at"] for r in records
                        if r["state"]["status"] == "sleeping"]
            if not sleeping:
                return
            self.sleep(max(0.0, min(sleeping) - now))

    @staticmethod
    def _ready(rec: dict, by_id: dict, now: float) -> bool:
        state = rec["state"]
        if state["status"] == "pending":
            return True
        if state["status"] == "sleeping":
            return state["wake_at"] <= now
        if state["status"] == "waiting":
            return all(by_id[t]["state"]["status"] == "terminal" for t in state["on"])
        return False

    def _dispatch(self, rec: dict) -> None:
        step = Step(self, rec)
        if self.restart_limit is not None and rec.get("restarts", 0) >= self.restart_limit:
            # A crash loop: cut off this often without progress, it would only die again.
            cut_off = self.kinds[rec["kind"]].steps.get("__restart_limit__")
            if cut_off:
                cut_off(step)
            else:
                step.fault("restart_limit", restarts=rec["restarts"])
            return
        rec["state"] = {**rec["state"], "status": "running"}
        self.store.put(rec)
        while True:
            step = Step(self, self.store.get(rec["id"]))
            self.kinds[rec["kind"]].steps[step.checkpoint["phase"]](step)
            after = self.store.get(rec["id"])
            if not step.progressed:
                # A step that returns without a new checkpoint would run forever.
                Step(self, after).fault("no durable progress", phase=step.checkpoint["phase"])
                return
            if after["state"]["status"] != "running":
                return


# --- tool tasks ----------------------------------------------------------------------------------

def interrupted_message(name: str) -> str:
    return f"Tool {name} was interrupted and may have partially run"


def _tool_result(step: Step, status: str, message: str | None, content: str, is_error: bool):
    outcome = {"content": content, "is_error": is_error}
    if status == "completed":
        step.finish(outcome)
    else:
        step.fail(message, **outcome)


def _harness_error(step: Step, message: str) -> str:
    partial = step.record.get("output", "")
    return f"{partial}<harness>\n[error] {message}\n</harness>"


def _run_tool(step: Step, tool: Tool, arguments: dict) -> None:
    content = tool.run(step, arguments)
    _tool_result(step, "completed", None, content, False)


def _tool_call(step: Step) -> None:
    name, arguments = step.input["name"], step.input.get("arguments", {})
    tool = step.runtime.tools.get(name)
    if tool is None:
        _tool_result(step, "failed", "tool_unavailable", f"Tool {name} is not available", True)
        return
    # The intent: from here on, recovery knows the tool may have started.
    step.commit({"phase": "execute", "arguments": arguments, "replay": tool.replay or "unsafe"})
    _run_tool(step, tool, arguments)


def _tool_execute(step: Step) -> None:
    """Reached only by recovery: the tool may have run, fully or in part."""
    name = step.input["name"]
    tool = step.runtime.tools.get(name)          # an unknown tool counts as unsafe
    if step.checkpoint.get("replay") == "safe" and tool is not None and tool.replay == "safe":
        rec = step.record
        rec.pop("output", None)                  # the interrupted attempt's partial output
        step.store.put(rec)
        _run_tool(step, tool, step.checkpoint["arguments"])
        return
    message = interrupted_message(name)
    _tool_result(step, "failed", message, _harness_error(step, message), True)


def _tool_restart_limit(step: Step) -> None:
    message = f"Tool {step.input['name']} was cut off too often (restart_limit)"
    _tool_result(step, "failed", "restart_limit", _harness_error(step, message), True)


TOOL_KIND = Kind("tool", {"call": _tool_call, "execute": _tool_execute,
                          "__restart_limit__": _tool_restart_limit})
