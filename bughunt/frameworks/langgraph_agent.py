"""The BugHunt agent on LangGraph, with its SQLite checkpointer, as a LangGraph user writes it.

A node per step (ask the model, visit the page, file the report), a conditional edge for the loop,
reducers for the tokens and the findings, and `SqliteSaver` on a file in the run directory. The
thread id is fixed, so a second process on the same directory continues the same thread.

Durability modes (`invoke(..., durability=...)`, https://docs.langchain.com/oss/python/langgraph/
durable-execution#durability-modes): `async`, the default, writes each step's checkpoint in a
background thread while the next step runs; `sync` waits for it before the next step; `exit` writes
only when the graph exits. Independently of the mode's checkpoints, a node that finished has its
writes saved at once (`put_writes`, the "pending writes" of
https://docs.langchain.com/oss/python/langgraph/persistence), except in `exit` mode.

Three ways to resume (the first is documented, the two others are mistakes users make):

- `documented`: if the thread has a checkpoint, `invoke(None, config)` continues from it
  ("Resuming workflows" in the durable-execution page); otherwise start with the input.
- `next_empty_is_done`: read `get_state(config)` first and treat an empty `.next` as "finished".
  `.next` lists only tasks that still need to run, and a task whose writes were saved is not one
  of them, so `.next` is also empty between a node's saved writes and the step's checkpoint.
- `reinvoke_input`: always `invoke(input, config)`. On a thread with a checkpoint this starts a
  new run from START on top of the saved state: `page` is reset to 1, while the reducers add the
  new run's tokens and findings to those already accumulated.

The crash points in user code come from the world (after the model call, the visit, the submit).
The framework's own writes are reached through public extension points only: a `SqliteSaver`
subclass that wraps `put` (a step's checkpoint) and `put_writes` (a finished node's writes), and a
`sqlite3.Connection` subclass (the `factory=` of `sqlite3.connect`) whose `commit` is where rows are
inserted but not yet committed. No private LangGraph API is used. A node's writes are named after
the node (`framework.put_writes.submit.committed#1`: the first time `submit`'s results were saved),
read from the `task_path` argument LangGraph passes to `put_writes` (its text, "~__pregel_pull,
submit", is LangGraph's own format): commits from background threads may come in either order, and
a name per node stays the same moment in every run.
"""

from __future__ import annotations

import operator
import re
import sqlite3
import threading
import time
from pathlib import Path
from typing import Annotated, TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

from .contract import Reach, World, final_state, no_reach

DB_FILE = "langgraph.sqlite"
CONFIG = {"configurable": {"thread_id": "bughunt"}}


# --- the agent, as a LangGraph user writes it ----------------------------------------------------

class BugHuntState(TypedDict):
    page: int                                      # the page being worked on
    pages: int
    bug: str | None                                # what the visit found on this page
    tokens: Annotated[int, operator.add]           # reducer: each node's tokens are added
    findings: Annotated[list[int], operator.add]   # reducer: each report's page is appended


def build_graph(world: World, checkpointer):
    """The agent's graph. A page is done when its last node returns `page + 1`."""

    def ask_model(state: BugHuntState) -> dict:
        _reply, tokens = world.ask(state["page"])
        return {"tokens": tokens}

    def visit(state: BugHuntState) -> dict:
        bug = world.visit(state["page"])
        return {"bug": bug} if bug else {"bug": None, "page": state["page"] + 1}

    def submit(state: BugHuntState) -> dict:
        world.submit(state["page"], state["bug"])
        return {"findings": [state["page"]], "page": state["page"] + 1}

    def next_page(state: BugHuntState) -> str:
        return "ask_model" if state["page"] <= state["pages"] else END

    def after_visit(state: BugHuntState) -> str:
        return "submit" if state["bug"] else next_page(state)

    builder = StateGraph(BugHuntState)
    builder.add_node("ask_model", ask_model)
    builder.add_node("visit", visit)
    builder.add_node("submit", submit)
    builder.add_edge(START, "ask_model")
    builder.add_edge("ask_model", "visit")
    builder.add_conditional_edges("visit", after_visit, ["submit", "ask_model", END])
    builder.add_conditional_edges("submit", next_page, ["ask_model", END])
    return builder.compile(checkpointer=checkpointer)


def first_input(pages: int) -> dict:
    return {"page": 1, "pages": pages, "bug": None, "tokens": 0, "findings": []}


def resume_documented(graph, pages: int, durability: str | None) -> dict:
    """Continue the thread from its last checkpoint with `invoke(None, config)`; start it if new."""
    has_checkpoint = graph.checkpointer.get_tuple(CONFIG) is not None
    return graph.invoke(None if has_checkpoint else first_input(pages), CONFIG,
                        durability=durability)


def resume_next_empty_is_done(graph, pages: int, durability: str | None) -> dict:
    """A mistake: an empty `get_state().next` is taken to mean the run already finished."""
    snapshot = graph.get_state(CONFIG)
    if snapshot.created_at is not None and not snapshot.next:
        return snapshot.values
    return resume_documented(graph, pages, durability)


def resume_reinvoke_input(graph, pages: int, durability: str | None) -> dict:
    """A mistake: invoke with the original input again, as on the first run."""
    return graph.invoke(first_input(pages), CONFIG, durability=durability)


RESUMES = {"documented": resume_documented, "next_empty_is_done": resume_next_empty_is_done,
           "reinvoke_input": resume_reinvoke_input}


def langgraph_final_state(values: dict) -> dict:
    """LangGraph's state values in the contract's shape."""
    if not values:
        return final_state([], 0, 0)
    return final_state(values.get("findings", []), values.get("tokens", 0),
                       values.get("page", 1) - 1)


# --- instruments from outside: the framework's writes, through public extension points -----------

class WriteWatch:
    """Names each SQLite commit after the saver call it belongs to (`put` or `put_writes`), per
    thread, because `async` mode writes from background threads."""

    def __init__(self, reach: Reach):
        self.reach = reach
        self.local = threading.local()


class CommitHookConnection(sqlite3.Connection):
    """`sqlite3.connect(..., factory=CommitHookConnection)`: a crash point inside each commit,
    after the rows were inserted and before SQLite commits them."""

    watch: WriteWatch | None = None

    def commit(self) -> None:
        watch = self.watch
        what = getattr(watch.local, "what", None) if watch else None
        if what:
            watch.reach(f"framework.{what}.uncommitted")
        super().commit()


class WatchedSqliteSaver(SqliteSaver):
    """`SqliteSaver` with a crash point after each durable write, and the write's duration."""

    def __init__(self, conn: sqlite3.Connection, watch: WriteWatch):
        super().__init__(conn)
        self.watch = watch

    def _watched(self, what: str, call):
        self.watch.local.what = what
        t0 = time.perf_counter_ns()
        try:
            result = call()
        finally:
            self.watch.local.what = None
        self.watch.reach(f"framework.{what}.committed", write_ns=time.perf_counter_ns() - t0)
        return result

    def put(self, config, checkpoint, metadata, new_versions):
        return self._watched("put", lambda: super(WatchedSqliteSaver, self).put(
            config, checkpoint, metadata, new_versions))

    def put_writes(self, config, writes, task_id, task_path=""):
        return self._watched(f"put_writes.{node_of(task_path)}",
                             lambda: super(WatchedSqliteSaver, self).put_writes(
                                 config, writes, task_id, task_path))


def node_of(task_path: str) -> str:
    """The node a `put_writes` call saves, from its task path ("~__pregel_pull, visit")."""
    name = task_path.rsplit(",", 1)[-1].strip() if task_path else ""
    return re.sub(r"[^A-Za-z0-9_]", "", name) or "node"


# --- the adapter ---------------------------------------------------------------------------------

class LangGraphAgent:
    """The adapter: the agent above, one durability mode, one way of resuming."""

    name = "langgraph"
    modes = ("async", "sync", "exit")             # "async" is LangGraph's default
    resume_styles = tuple(RESUMES)

    def __init__(self, mode: str = "async", resume: str = "documented"):
        self.mode, self.resume = mode, resume
        self._write_reach: Reach = no_reach
        self._instrumented = False

    def instrument(self, reach: Reach) -> None:
        self._write_reach, self._instrumented = reach, True

    def _saver(self, run_dir: Path) -> SqliteSaver:
        path = Path(run_dir) / DB_FILE
        if not self._instrumented:
            return SqliteSaver(sqlite3.connect(path, check_same_thread=False))
        watch = WriteWatch(self._write_reach)
        conn = sqlite3.connect(path, check_same_thread=False, factory=CommitHookConnection)
        conn.watch = watch
        return WatchedSqliteSaver(conn, watch)

    def run(self, run_dir: Path, world: World, reach: Reach) -> dict:
        saver = self._saver(run_dir)
        graph = build_graph(world, saver)
        values = RESUMES[self.resume](graph, world.pages, self.mode)
        saver.conn.close()
        return langgraph_final_state(values)

    def rebuild(self, run_dir: Path) -> dict | None:
        """LangGraph's own reader, `get_state`, on a read-only connection: the state the thread's
        latest checkpoint and its saved writes describe. No node runs (the graph needs a world
        only to be built)."""
        path = Path(run_dir) / DB_FILE
        if not path.exists():
            return None
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        try:
            graph = build_graph(None, SqliteSaver(conn))
            snapshot = graph.get_state(CONFIG)
        finally:
            conn.close()
        return None if snapshot.created_at is None else langgraph_final_state(snapshot.values)
