"""The BugHunt agent on DBOS Transact, with its system database on a SQLite file, as a DBOS user
writes it: one workflow, one step per external call.

DBOS records each step's output in the system database when the step returns; a workflow that
was cut off is re-run from its start, and every step whose output is recorded returns that output
instead of running again (https://docs.dbos.dev/explanations/how-workflows-work). A step that ran
but whose output was not recorded runs again: steps are at least once
(https://docs.dbos.dev/explanations/concurrent-executions). A workflow ID makes a start
idempotent: a second start with the same ID does not run the workflow twice
(https://docs.dbos.dev/python/tutorials/idempotency-tutorial). Restarting the process recovers
every workflow it left PENDING (https://docs.dbos.dev/self-hosting).

Three ways to resume after SIGKILL, each in a new process that launches DBOS again:

- `workflow_id`: start the workflow again under the same workflow ID (the same code as the first
  start) and wait for its result;
- `recovery`: start nothing; let launch's recovery run the workflow and wait for it by its ID;
- `new_id`: a mistake: start the workflow again without an ID (DBOS gives it a new one), while
  launch's recovery also runs the old one.

Tuned for a sweep (what each process would otherwise wait, and why it is safe to shorten):

- recovery puts a PENDING workflow back on DBOS's internal queue, which is polled once a second
  (`DEFAULT_QUEUE_POLLING_INTERVAL_SEC = 1.0` in dbos/_queue.py). DBOS 3.4 has no setting for
  the internal queue (`Queue.set_polling_interval_sec` is for database-backed queues only), so we
  set its `_polling_interval_sec` to 10 ms before launch: a PRIVATE attribute.
- waiting for a result polls the database once a second by default; `get_result(
  polling_interval_sec=0.01)` (public) polls every 10 ms.

Crash points in DBOS's own writes exist only through PRIVATE API: we wrap the `SystemDatabase`
methods that record a step's output (`record_operation_result`), create the workflow's row
(`init_workflow`) and record its outcome (`update_workflow_outcome`); inside their transactions a
SQLAlchemy `commit` event listener (public SQLAlchemy API) marks the moment rows are written but
not yet committed. Every such point is named `framework.*` (a step's output after its step:
`framework.step_output.submit.committed#1`) and labelled private in the lesson.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from pathlib import Path

from dbos import DBOS, SetWorkflowID

from .contract import Reach, World, final_state, no_reach

DB_FILE = "dbos.sqlite"
WORKFLOW_ID = "bughunt-1"
APP_VERSION = "bughunt-1"
POLL_S = 0.01

#: The world of this process. DBOS steps are module-level functions registered at import; the
#: world they call is set by `run`, in the process that runs them (after the fork).
_world: World | None = None


# --- the agent, as a DBOS user writes it ---------------------------------------------------------

@DBOS.step()
def ask_model(page: int) -> dict:
    _reply, tokens = _world.ask(page)
    return {"page": page, "tokens": tokens}


@DBOS.step()
def visit(page: int) -> dict:
    return {"page": page, "bug": _world.visit(page)}


@DBOS.step()
def submit(page: int, title: str) -> dict:
    _world.submit(page, title)
    return {"page": page}


@DBOS.workflow()
def bughunt(pages: int) -> dict:
    findings, tokens = [], 0
    for page in range(1, pages + 1):
        tokens += ask_model(page)["tokens"]
        bug = visit(page)["bug"]
        if bug:
            submit(page, bug)
            findings.append(page)
    return final_state(findings, tokens, pages)


def resume_workflow_id(pages: int) -> dict:
    """Start under the fixed workflow ID: runs it, or waits for the run recovery started."""
    with SetWorkflowID(WORKFLOW_ID):
        handle = DBOS.start_workflow(bughunt, pages)
    return handle.get_result(polling_interval_sec=POLL_S)


def resume_recovery(pages: int) -> dict:
    """Start only if there is nothing to recover; otherwise wait for what recovery runs."""
    if DBOS.get_workflow_status(WORKFLOW_ID) is None:
        return resume_workflow_id(pages)
    return DBOS.retrieve_workflow(WORKFLOW_ID).get_result(polling_interval_sec=POLL_S)


def resume_new_id(pages: int) -> dict:
    """A mistake: start the workflow with a new ID every time the program starts."""
    return DBOS.start_workflow(bughunt, pages).get_result(polling_interval_sec=POLL_S)


RESUMES = {"workflow_id": resume_workflow_id, "recovery": resume_recovery,
           "new_id": resume_new_id}


def dbos_config(run_dir: Path) -> dict:
    return {"name": "bughunt", "system_database_url": f"sqlite:///{Path(run_dir) / DB_FILE}",
            "application_version": APP_VERSION, "log_level": "ERROR"}


# --- instruments from outside: DBOS's writes, through PRIVATE SystemDatabase methods -------------

PRIVATE_WRITES = {"record_operation_result": "step_output", "init_workflow": "workflow_status",
                  "update_workflow_outcome": "workflow_outcome"}


def watch_writes(sys_db, reach: Reach) -> None:
    """Wrap this SystemDatabase's write methods (private API, DBOS 3.4) with crash points."""
    from sqlalchemy import event

    local = threading.local()

    def on_commit(_conn) -> None:
        what = getattr(local, "what", None)
        if what:
            reach(f"framework.{what}.uncommitted")

    event.listen(sys_db.engine, "commit", on_commit)
    for method, what in PRIVATE_WRITES.items():
        original = getattr(sys_db, method)

        def watched(*args, _original=original, _what=what, **kwargs):
            if _what == "step_output":          # named after the step: step_output.submit
                _what += "." + args[0]["function_name"].rsplit(".", 1)[-1]
            local.what = _what
            t0 = time.perf_counter_ns()
            try:
                result = _original(*args, **kwargs)
            finally:
                local.what = None
            reach(f"framework.{_what}.committed", write_ns=time.perf_counter_ns() - t0)
            return result

        setattr(sys_db, method, watched)


# --- the adapter ---------------------------------------------------------------------------------

class DBOSAgent:
    """The adapter: launch DBOS on the run directory's SQLite file, then resume or start."""

    name = "dbos"
    modes = ("sqlite",)               # DBOS has one durability behaviour: every step recorded
    resume_styles = tuple(RESUMES)

    def __init__(self, mode: str = "sqlite", resume: str = "workflow_id"):
        self.mode, self.resume = mode, resume
        self._write_reach: Reach = no_reach
        self._instrumented = False

    def instrument(self, reach: Reach) -> None:
        self._write_reach, self._instrumented = reach, True

    def run(self, run_dir: Path, world: World, reach: Reach) -> dict:
        global _world
        _world = world
        dbos = DBOS(config=dbos_config(run_dir))
        # PRIVATE: DBOS 3.4 offers no setting for its internal queue's 1 s polling interval.
        dbos._registry.get_internal_queue()._polling_interval_sec = POLL_S
        DBOS.launch()
        if self._instrumented:
            watch_writes(dbos._sys_db, self._write_reach)      # PRIVATE: SystemDatabase
        # No DBOS.destroy(): it waits for background threads; the process simply ends (os._exit).
        return RESUMES[self.resume](world.pages)

    def rebuild(self, run_dir: Path) -> dict | None:
        """The final state from the steps DBOS recorded, read by DBOS's public reader
        (`DBOSClient.list_workflow_steps`), without changing a byte of the run directory.

        The system database keeps SQLite's rollback journal. A process that ended inside a
        transaction leaves a hot journal, which the next opener must roll back first, and a
        read-only connection cannot: then the database and its journal are read from a copy.
        """
        path = Path(run_dir) / DB_FILE
        if not path.exists():
            return None
        journal = path.with_name(DB_FILE + "-journal")
        if journal.exists() and journal.stat().st_size > 0:
            with tempfile.TemporaryDirectory(prefix="bughunt-dbos-") as tmp:
                shutil.copy2(path, Path(tmp) / DB_FILE)
                shutil.copy2(journal, Path(tmp) / journal.name)
                return read_final_state(f"sqlite:///{Path(tmp) / DB_FILE}")
        return read_final_state(f"sqlite:///file:{path}?mode=ro&uri=true")


def read_final_state(url: str) -> dict | None:
    """The agent's final state from the steps recorded in the system database at `url`."""
    from dbos import DBOSClient

    client = DBOSClient(system_database_url=url)
    try:
        # The agent's workflow: the fixed ID, or (the new_id mistake) the newest one.
        ids = [w.workflow_id for w in client.list_workflows(
            sort_desc=True, load_input=False, load_output=False)]
        if not ids:
            return None
        steps = client.list_workflow_steps(WORKFLOW_ID if WORKFLOW_ID in ids else ids[0])
    except Exception as e:                 # no schema yet: DBOS never got that far
        if "no such table" in str(e):
            return None
        raise
    finally:
        client.destroy()
    named = [(s["function_name"].rsplit(".", 1)[-1], s["output"]) for s in steps]
    tokens = sum(o["tokens"] for n, o in named if n == "ask_model")
    findings = [o["page"] for n, o in named if n == "submit"]
    bugs = {o["page"]: o["bug"] for n, o in named if n == "visit"}
    done = 0            # pages whose last step is recorded
    while done + 1 in bugs and (not bugs[done + 1] or done + 1 in findings):
        done += 1
    return final_state(findings, tokens, done)
