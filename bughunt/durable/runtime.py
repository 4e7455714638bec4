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
- generation tasks (a model request) record `{phase: "stream", attempt}` before sending. Recovery in
  `stream` after a crash counts the attempt as failed, keeps the half answer as an `aborted` entry
  the model is never sent, and retries with backoff until the retries run out (`runFailure`,
  reason `interrupted`); after a clean close it sends the same attempt again.
- a crash-loop limit: a task cut off `restart_limit` times in a row without progress ends instead
  of running again: a task of your own kind as `faulted` (reason `restart_limit`, report
  `task_faulted`); a built-in tool or generation task with its own visible result (report
  `task_interrupted`). Progress (a new checkpoint) resets the count.

Statuses: pending, running, waiting (on other tasks), sleeping (until a time), terminal.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

from .store import DurableStore, InvalidValue, ReadOnlyError, StoreRefused, to_json

MISSING: Any = type("Missing", (), {"__repr__": lambda self: "MISSING"})()
DEFAULT_RESTART_LIMIT = 5
MAX_SLEEP_S = 366 * 24 * 3600          # sleep_until accepts wake times up to a year ahead
SLEEP_CHUNK_S = 60.0                   # the runtime sleeps at most this long at a time
REPLAY_POLICIES = ("safe", "unsafe")


@dataclass(frozen=True)
class Tool:
    """A tool the agent can call. `replay` says whether running it again is harmless."""

    name: str
    run: Callable[["Step", dict], str]
    replay: str = "unsafe"

    def __post_init__(self):
        if self.replay not in REPLAY_POLICIES:
            raise InvalidValue(f"tool {self.name}: replay must be 'safe' or 'unsafe', "
                               f"got {self.replay!r}")


@dataclass(frozen=True)
class Kind:
    """A kind of task: one handler per phase (`__restart_limit__`: what ends it at the limit)."""

    name: str
    steps: dict[str, Callable[["Step"], None]]


@dataclass(frozen=True)
class Retry:
    """How a generation task retries a model request cut off by a crash: `max_retries` more
    attempts, the n-th after `backoff_s * 2**(n-1)` seconds."""

    max_retries: int = 2
    backoff_s: float = 0.05

    def __post_init__(self):
        if not isinstance(self.max_retries, int) or isinstance(self.max_retries, bool) \
                or not 0 <= self.max_retries <= 100:
            raise InvalidValue(f"retry.max_retries must be a whole number from 0 to 100, "
                               f"got {self.max_retries!r}")
        if not isinstance(self.backoff_s, (int, float)) or isinstance(self.backoff_s, bool) \
                or not math.isfinite(self.backoff_s) or not 0 <= self.backoff_s <= 3600:
            raise InvalidValue(f"retry.backoff_s must be a number of seconds from 0 to 3600, "
                               f"got {self.backoff_s!r}")


@dataclass(frozen=True)
class Report:
    """What `on_report` receives when a task ends the hard way (the lesson's onReport)."""

    type: str            # task_faulted | task_interrupted
    task: int
    kind: str
    reason: str          # restart_limit | interrupted

    def to_dict(self) -> dict:
        return asdict(self)


class Closed(Exception):
    """The runtime was closed while a step ran: the step stops here, its checkpoint kept."""


#: A model: (messages, emit) -> answer; it calls emit(text) for each piece it streams.
Model = Callable[[list, Callable[[str], None]], str]


class Step:
    """What a step handler sees and may do. Every method that changes state is one commit."""

    def __init__(self, runtime: "Runtime", record: dict):
        self.runtime = runtime
        self.store: DurableStore = runtime.store
        self.id: int = record["id"]
        self.kind: str = record["kind"]
        self.input = record["input"]
        self.checkpoint: dict = record["state"]["checkpoint"]
        self.restarts: int = record.get("restarts", 0)    # cut-offs in a row without progress
        self.progressed = False

    @property
    def record(self) -> dict:
        return self.store.get(self.id)

    def now(self) -> float:
        return self.runtime.clock()

    def _commit(self, state: dict, *, progress: bool = True) -> None:
        """The step-entry commit: the task's next state replaces the old one in one transaction."""
        if self.runtime.closing:
            raise Closed(f"task {self.id}: the runtime is closing")
        with self.store.transaction() as tx:
            rec = tx.get(self.id)
            rec["state"] = state
            if progress:
                rec.pop("restarts", None)      # progress resets the crash-loop count
            if state["status"] == "terminal":
                rec.pop("memos", None)         # memos vanish when the task ends
            tx.put(rec)
        self.checkpoint = state["checkpoint"]
        self.progressed = self.progressed or progress

    def _checked(self, checkpoint: Any) -> dict:
        """The checkpoint, if it names a step of this task's kind (else InvalidValue)."""
        steps = self.runtime.kinds[self.kind].steps
        if not isinstance(checkpoint, dict) or checkpoint.get("phase") not in _phases(steps):
            raise InvalidValue(f"task {self.id}: checkpoint {checkpoint!r} does not name a step of "
                               f"kind {self.kind} ({', '.join(_phases(steps))})")
        to_json(checkpoint, f"task {self.id}: checkpoint")
        return checkpoint

    def memo(self, name: str, value: Any = MISSING) -> Any:
        """Read memo `name` (MISSING if unset); with a value, set it unless already set.

        First write wins: reading the winner and inserting a candidate are one commit, so a step
        that runs twice gets the same answer both times.
        """
        if not isinstance(name, str) or not name:
            raise InvalidValue(f"task {self.id}: a memo name must be a non-empty string, "
                               f"got {name!r}")
        if value is MISSING:
            return self.record.get("memos", {}).get(name, MISSING)
        to_json(value, f"task {self.id}: memo {name}")
        if self.runtime.closing:
            raise Closed(f"task {self.id}: the runtime is closing")
        with self.store.transaction() as tx:
            rec = tx.get(self.id)
            memos = rec.setdefault("memos", {})
            if name not in memos:
                memos[name] = value
                tx.put(rec)
            return memos[name]

    def commit(self, checkpoint: dict) -> None:
        """Enter the next step: the new checkpoint is durable before it runs."""
        self._commit({"status": "running", "checkpoint": self._checked(checkpoint)})

    def sleep_until(self, t: float, checkpoint: dict) -> None:
        """Commit the next checkpoint and when to run it, together. Nothing runs while asleep."""
        now = self.now()
        if not isinstance(t, (int, float)) or isinstance(t, bool) or not math.isfinite(t) \
                or t > now + MAX_SLEEP_S:
            raise InvalidValue(f"task {self.id}: sleep_until needs a finite wake time at most a "
                               f"year ahead (now {now:.0f}), got {t!r}")
        self._commit({"status": "sleeping", "checkpoint": self._checked(checkpoint),
                      "wake_at": float(t)})

    def wait_for(self, task_ids: list[int], checkpoint: dict) -> None:
        """Commit the next checkpoint, to run once every task in `task_ids` is terminal."""
        known = {r["id"] for r in self.store.all()}
        ids = list(task_ids) if isinstance(task_ids, (list, tuple)) else None
        if not ids or any(t not in known or t == self.id for t in ids):
            raise InvalidValue(f"task {self.id}: wait_for needs ids of other tasks in the store, "
                               f"got {task_ids!r}")
        self._commit({"status": "waiting", "checkpoint": self._checked(checkpoint), "on": ids})

    def spawn_and_wait(self, kind: str, input: Any, checkpoint: dict, next_checkpoint: dict) -> int:
        """Create a child task and wait for it, in one commit (never a child without a waiter)."""
        self.runtime.check_start(kind, checkpoint)
        next_checkpoint = self._checked(next_checkpoint)
        if self.runtime.closing:
            raise Closed(f"task {self.id}: the runtime is closing")
        with self.store.transaction() as tx:
            child = tx.create(kind, input, checkpoint)
            rec = tx.get(self.id)
            rec["state"] = {"status": "waiting", "checkpoint": next_checkpoint, "on": [child]}
            rec.pop("restarts", None)
            tx.put(rec)
        self.progressed = True
        return child

    def finish(self, result: Any) -> None:
        self._end({"status": "completed", "result": result})

    def fail(self, message: str, **detail) -> None:
        self._end({"status": "failed", "message": str(message), **detail})

    def fault(self, reason: str, **detail) -> None:
        self._end({"status": "faulted", "detail": {"reason": reason, **detail}})

    def _end(self, outcome: dict) -> None:
        to_json(outcome, f"task {self.id}: outcome")
        self._commit({"status": "terminal", "checkpoint": self.checkpoint, "outcome": outcome})

    def output(self, text: str) -> None:
        """Persist partial output now (not progress): a crash later still leaves it on disk."""
        self._set_output(lambda old: old + str(text))

    def discard_output(self) -> None:
        """Drop the partial output of an interrupted attempt (not progress)."""
        self._set_output(lambda old: "")

    def _set_output(self, change: Callable[[str], str]) -> None:
        if self.runtime.closing:
            raise Closed(f"task {self.id}: the runtime is closing")
        with self.store.transaction() as tx:
            rec = tx.get(self.id)
            rec["output"] = change(rec.get("output", ""))
            if not rec["output"]:
                rec.pop("output")
            tx.put(rec)


def _phases(steps: dict) -> list[str]:
    return [p for p in steps if not p.startswith("__")]


class Runtime:
    """Runs the tasks of one store until none can run. One runtime per store (the store's lock).

    Opening a runtime on a writable store checks that it can run every live task (a task of a kind
    or phase it does not know is refused, naming the task, before anything is written), then
    recovers the store: tasks cut off mid-step go back to `pending` with one more restart.
    """

    def __init__(self, store: DurableStore, kinds: list[Kind], tools: list[Tool] = (), *,
                 restart_limit: int | None = DEFAULT_RESTART_LIMIT,
                 clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep,
                 before_tool: Callable[[Step, str, dict], dict | None] | None = None,
                 model: Model | None = None, retry: Retry = Retry(),
                 before_request: Callable[[Step, list], list] | None = None,
                 on_report: Callable[[Report], None] | None = None):
        if restart_limit is not None and (not isinstance(restart_limit, int)
                                          or isinstance(restart_limit, bool) or restart_limit < 1):
            raise InvalidValue(f"restart_limit must be a whole number of at least 1, or None for "
                               f"no limit, got {restart_limit!r}")
        self.store = store
        self.kinds = {k.name: k for k in [*kinds, TOOL_KIND, GENERATION_KIND]}
        self.tools = {t.name: t for t in tools}
        self.restart_limit = restart_limit
        self.clock, self.sleep = clock, sleep
        self.before_tool, self.model, self.retry = before_tool, model, retry
        self.before_request = before_request
        self.on_report = on_report
        self.closing = False
        self.recovered: list[int] = []
        if not store.read_only:
            self._check_live_tasks()
            self.recovered = store.recover()

    def _check_live_tasks(self) -> None:
        for rec in self.store.all():
            if rec["state"]["status"] == "terminal":
                continue
            kind, phase = rec["kind"], rec["state"]["checkpoint"]["phase"]
            if kind not in self.kinds:
                raise StoreRefused(self.store.path, f"task {rec['id']} is of kind {kind!r}, which "
                                   f"this runtime does not run (it runs {', '.join(self.kinds)})")
            if phase not in self.kinds[kind].steps or phase.startswith("__"):
                raise StoreRefused(self.store.path, f"task {rec['id']} (kind {kind}) is at phase "
                                   f"{phase!r}, which this runtime's kind {kind} does not have")

    def check_start(self, kind: str, checkpoint: Any) -> None:
        """InvalidValue unless a task of `kind` can start at `checkpoint`."""
        if kind not in self.kinds:
            raise InvalidValue(f"unknown task kind {kind!r} (this runtime runs "
                               f"{', '.join(self.kinds)})")
        steps = self.kinds[kind].steps
        if not isinstance(checkpoint, dict) or checkpoint.get("phase") not in _phases(steps):
            raise InvalidValue(f"checkpoint {checkpoint!r} does not name a step of kind {kind} "
                               f"({', '.join(_phases(steps))})")

    def submit(self, kind: str, input: Any, checkpoint: dict) -> int:
        """A new pending task of `kind` at `checkpoint`; its id."""
        self.check_start(kind, checkpoint)
        return self.store.create(kind, input, checkpoint)

    def close(self) -> None:
        """Stop: the running step's next commit raises Closed, and `run()` returns."""
        self.closing = True

    def report(self, report: Report) -> None:
        if self.on_report:
            self.on_report(report)

    def run(self) -> None:
        """Run every runnable task; sleep until the next wake time; stop when nothing is left."""
        if self.store.read_only:
            raise ReadOnlyError(f"{self.store.path} was opened read-only: cannot resume")
        try:
            while not self.closing:
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
                self.sleep(min(max(0.0, min(sleeping) - now), SLEEP_CHUNK_S))
        except Closed:
            return

    @staticmethod
    def _ready(rec: dict, by_id: dict, now: float) -> bool:
        state = rec["state"]
        if state["status"] == "pending":
            return True
        if state["status"] == "sleeping":
            return state["wake_at"] <= now
        if state["status"] == "waiting":
            return all(t not in by_id or by_id[t]["state"]["status"] == "terminal"
                       for t in state["on"])
        return False

    def _dispatch(self, rec: dict) -> None:
        kind = self.kinds[rec["kind"]]
        if self.restart_limit is not None and rec.get("restarts", 0) >= self.restart_limit:
            # A crash loop: cut off this often without progress, it would only die again.
            step = Step(self, rec)
            cut_off = kind.steps.get("__restart_limit__")
            if cut_off:
                cut_off(step)
                self.report(Report("task_interrupted", rec["id"], rec["kind"], "restart_limit"))
            else:
                step.fault("restart_limit", restarts=rec["restarts"])
                self.report(Report("task_faulted", rec["id"], rec["kind"], "restart_limit"))
            return
        with self.store.transaction() as tx:
            current = tx.get(rec["id"])
            current["state"]["status"] = "running"
            tx.put(current)
        while True:
            step = Step(self, self.store.get(rec["id"]))
            try:
                kind.steps[step.checkpoint["phase"]](step)
            except (Closed, StoreRefused, ReadOnlyError):
                raise
            except Exception as e:
                if _is_store_error(e):
                    raise
                Step(self, self.store.get(rec["id"])).fault(
                    "uncaught error", phase=step.checkpoint["phase"],
                    error=f"{type(e).__name__}: {e}")
                return
            after = self.store.get(rec["id"])
            if not step.progressed:
                # A step that returns without a new checkpoint would run forever.
                Step(self, after).fault("no durable progress", phase=step.checkpoint["phase"])
                return
            if after["state"]["status"] != "running":
                return


def _is_store_error(e: Exception) -> bool:
    """SQLite errors are the store's (the disk, a lock), not the step's: they stop the runtime."""
    import sqlite3
    return isinstance(e, sqlite3.Error)


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
    try:
        content = tool.run(step, arguments)
    except (Closed, ReadOnlyError):
        raise
    except Exception as e:                        # a tool's own error is its result, not a crash
        if _is_store_error(e):
            raise
        message = f"Tool {tool.name} failed: {type(e).__name__}: {e}"
        _tool_result(step, "failed", message, _harness_error(step, message), True)
        return
    _tool_result(step, "completed", None, str(content), False)


def _tool_call(step: Step) -> None:
    """Resolve the tool, run the beforeTool hook, record the intent, run the tool."""
    name, arguments = step.input["name"], step.input.get("arguments", {})
    tool = step.runtime.tools.get(name)
    if tool is None:
        _tool_result(step, "failed", "tool_unavailable", f"Tool {name} is not available", True)
        return
    if step.runtime.before_tool is not None:
        # Runs again if the process dies before the intent below: it must be safe to re-run.
        arguments = step.runtime.before_tool(step, name, arguments)
        if arguments is None:
            _tool_result(step, "failed", "blocked", f"Tool {name} was blocked by beforeTool", True)
            return
    # The intent: from here on, recovery knows the tool may have started.
    step.commit({"phase": "execute", "arguments": arguments, "replay": tool.replay})
    _run_tool(step, tool, arguments)


def _tool_execute(step: Step) -> None:
    """Reached only by recovery: the tool may have run, fully or in part."""
    name, checkpoint = step.input["name"], step.checkpoint
    tool = step.runtime.tools.get(name)          # a tool no longer registered counts as unsafe
    if checkpoint["replay"] == "safe" and tool is not None and tool.replay == "safe":
        step.discard_output()                    # the interrupted attempt's partial output
        _run_tool(step, tool, checkpoint["arguments"])
        return
    message = interrupted_message(name)
    _tool_result(step, "failed", message, _harness_error(step, message), True)


def _tool_restart_limit(step: Step) -> None:
    message = f"Tool {step.input['name']} was cut off too often (restart_limit)"
    _tool_result(step, "failed", "restart_limit", _harness_error(step, message), True)


TOOL_KIND = Kind("tool", {"call": _tool_call, "execute": _tool_execute,
                          "__restart_limit__": _tool_restart_limit})


# --- generation tasks (one model request) --------------------------------------------------------

def _generation_request(step: Step) -> None:
    """Record that the request is in flight, then send it and stream the answer."""
    model = step.runtime.model
    if model is None:
        step.fail("runFailure", reason="no_model", input="unanswered")
        return
    if step.record.get("output"):
        step.discard_output()                    # already kept as an aborted entry
    messages = step.input["messages"]
    if step.runtime.before_request is not None:
        # Runs again if the process dies before the request is recorded: safe to re-run.
        messages = step.runtime.before_request(step, messages)
    attempt, aborted = step.checkpoint.get("attempt", 1), step.checkpoint.get("aborted", [])
    step.commit({"phase": "stream", "attempt": attempt, "aborted": aborted})
    answer = model(messages, step.output)
    step.finish({"answer": answer, "attempt": attempt, "aborted": aborted})


def _generation_stream(step: Step) -> None:
    """Reached only by recovery: the request was in flight when the process stopped."""
    attempt, aborted = step.checkpoint["attempt"], list(step.checkpoint["aborted"])
    partial = step.record.get("output", "")
    if partial:                                  # the half answer: kept, never sent to the model
        aborted.append({"attempt": attempt, "text": partial})
    if step.restarts == 0:                       # a clean close: send the same attempt again
        step.commit({"phase": "request", "attempt": attempt, "aborted": aborted})
        return
    retry = step.runtime.retry                   # a crash: this attempt failed
    if attempt > retry.max_retries:
        step.fail("runFailure", reason="interrupted", input="unanswered", aborted=aborted)
        step.runtime.report(Report("task_interrupted", step.id, step.kind, "interrupted"))
        return
    step.sleep_until(step.now() + retry.backoff_s * 2 ** (attempt - 1),
                     {"phase": "request", "attempt": attempt + 1, "aborted": aborted})


def _generation_restart_limit(step: Step) -> None:
    step.fail("runFailure", reason="restart_limit", input="unanswered",
              aborted=step.checkpoint.get("aborted", []))


GENERATION_KIND = Kind("generation", {"request": _generation_request,
                                      "stream": _generation_stream,
                                      "__restart_limit__": _generation_restart_limit})
