"""The BugHunt worker: the agent process the lab kills and resumes.

    python -m bughunt run --dir RUN_DIR [options]      (or: python -m bughunt.worker --dir ...)

Per page: ask the model, visit the page, on a bug page (record an intent, then) file a report, then
commit the page's checkpoint. Resuming is running again on the same directory: the worker recovers
its state from the checkpoint store and carries on from the first page not done.

Exit codes: 0 done; 2 refused (bad flag, damaged checkpoint, configuration mismatch); 75 busy
(another worker holds the run). Death by a planned crash point is a real SIGKILL, so the parent
sees the process killed by signal 9, not an exit code.
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import json
import os
import sys
from pathlib import Path

from .config import (CONFIG_FILE, ConfigError, RunConfig, add_config_arguments, config_from_args,
                     dumps, read_config)
from .crashpoints import CrashPlan, scheme
from .diskio import Door
from .events import apply_event
from .stores import StoreDamage, make_store
from .world import MockModel, Site, SiteError, Tracker, report_key

EXIT_OK = 0
EXIT_REFUSED = 2
EXIT_BUSY = 75            # EX_TEMPFAIL: try again when the other worker is gone
LOCK_FILE = "run.lock"


class Refused(Exception):
    """The worker will not run; the message says why, naming the file or flag."""

    def __init__(self, message: str, code: int = EXIT_REFUSED):
        super().__init__(message)
        self.code = code


def acquire_run_lock(run_dir: Path) -> int:
    """One writer per run directory: an exclusive flock on `run.lock`, held until the process ends.

    The kernel drops a flock when its holder dies, even by SIGKILL, so a killed worker never leaves
    the run locked; a second worker started while the first lives is refused at once.
    """
    fd = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise Refused(f"{run_dir}: run is busy: another worker holds {LOCK_FILE}",
                          EXIT_BUSY) from None
        raise
    return fd


def prepare_run_dir(run_dir: Path, config: RunConfig, door: Door) -> None:
    """Claim a new run directory for `config`, or check that an existing one belongs to it."""
    path = run_dir / CONFIG_FILE
    if path.exists():
        try:
            stored = read_config(run_dir)
        except ConfigError as e:
            raise Refused(str(e)) from None
        diff = stored.differences(config)
        if diff:
            raise Refused(f"{path}: this run belongs to another configuration "
                          f"(stored vs given: {'; '.join(diff)}); resume it with the same flags "
                          "or use a new --dir")
        return
    # A kill while the config was being written leaves its temp file: ours, and replaced below.
    ours = {LOCK_FILE, CONFIG_FILE + ".tmp"}
    strangers = sorted(p.name for p in run_dir.iterdir() if p.name not in ours)
    if strangers:
        raise Refused(f"{run_dir}: not a BugHunt run directory (no {CONFIG_FILE}, but it holds "
                      f"{', '.join(strangers[:3])}); use an empty or new --dir")
    # Always made durable, whatever the fsync policy: a run must never forget its own design.
    door.write_atomic(path, dumps(config), kind="config", fsync=True)


TRACE_FILE = "trace.jsonl"


def run(run_dir: Path, config: RunConfig, crash_at: int | None = None,
        pause_at: int | None = None, trace: bool = False) -> dict:
    """Run (or resume) the task in `run_dir` to the end; return the final report."""
    try:
        site = Site.load(config.pages)
        points = scheme(config.pages, site.bug_pages, config.intent) if (
            crash_at is not None or pause_at is not None) else []
        plan = CrashPlan(points, crash_at, pause_at)
    except (SiteError, ValueError) as e:     # checked before anything touches the disk
        raise Refused(str(e)) from None
    run_dir.mkdir(parents=True, exist_ok=True)
    acquire_run_lock(run_dir)              # held until this process ends, however it ends
    door = Door(config.fsync)
    prepare_run_dir(run_dir, config, door)
    door.latencies_ns.clear()              # report checkpoint writes only

    store = make_store(run_dir, config, door)
    try:
        recovered = store.load()           # read-only: a refusal leaves every byte as it was
    except StoreDamage as e:
        raise Refused(f"damaged checkpoint: {e}; nothing was changed") from None
    for note in recovered.notes:
        print(f"bughunt: {note}", file=sys.stderr)
    repairs = store.open_for_append()
    model, tracker = MockModel(run_dir, site), Tracker(run_dir)
    if trace:
        plan.trace_to(run_dir / TRACE_FILE)
        plan.mark(recovered.state["next_page"], "start")
    state = recovered.state
    pending_at_start = state["pending"]
    reports_filed = 0

    def commit(event: dict, mid=lambda: None) -> None:
        nonlocal state
        event = {**event, "seq": state["seq"] + 1}
        new_state = apply_event(state, event)
        store.commit(new_state, event, mid=mid)
        state = new_state

    op = config.granularity == "op"
    if pending_at_start and config.pending == "abort":
        # At most once, as Codex does: we cannot know whether the report was filed, so we say the
        # page was aborted and move on rather than risk filing it twice.
        commit({"t": "aborted", "page": pending_at_start["page"]})

    for page in range(state["next_page"], config.pages + 1):
        done = state["in_flight"] if (state["in_flight"] or {}).get("page") == page else {}
        if "tokens" in done:
            tokens = done["tokens"]
        else:
            _reply, tokens = model.ask(page)
            plan.reach(page, "after_model_call")
            if op:
                commit({"t": "answered", "page": page, "tokens": tokens})
        if "finding" in done:
            finding = done["finding"]
        else:
            finding = site.visit(page) is not None
            plan.reach(page, "after_visit")
            if op:
                commit({"t": "visited", "page": page, "finding": finding})
        if finding and not done.get("submitted"):
            key = report_key(config.task_id, page) if config.idempotency_key else None
            if config.intent:
                commit({"t": "intent", "page": page, "key": key})
                plan.reach(page, "after_intent")
            reports_filed += tracker.submit(page, site.page(page).bug, key)
            plan.reach(page, "after_submit")
            if op:
                commit({"t": "submitted", "page": page})
        commit({"t": "page_done", "page": page, "tokens": tokens, "finding": finding},
               mid=lambda: plan.reach(page, "mid_commit"))
        plan.reach(page, "after_commit")

    plan.mark(config.pages, "end")
    store.close()
    model.close()
    tracker.close()
    return {
        "status": "done",
        "config": config.to_json(),
        "state": state,
        "findings": state["findings"],
        "aborted": state["aborted"],
        "tokens": state["tokens"],
        "model_calls": model.calls,
        "reports_filed": reports_filed,
        "replayed_events": recovered.replayed_events,
        "torn_lines_skipped": recovered.torn_lines_skipped,
        "tails_repaired": repairs.tails_repaired,
        "temp_files_removed": repairs.temp_files_removed,
        "snapshot_used": recovered.snapshot_used,
        "snapshot_fallback": recovered.snapshot_fallback,
        "pending_at_start": pending_at_start,
        "checkpoint_writes": {
            "count": sum(len(v) for v in door.latencies_ns.values()),
            "latencies_ns": dict(door.latencies_ns),
        },
    }


def build_parser(prog: str = "python -m bughunt run") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description="Run or resume the BugHunt agent in RUN_DIR (POSIX only).")
    parser.add_argument("--dir", required=True, type=Path, metavar="RUN_DIR",
                        help="the run directory; running again on it resumes")
    add_config_arguments(parser)
    parser.add_argument("--crash-at", type=int, metavar="I",
                        help="die by SIGKILL at crash point I (see `python -m bughunt points`)")
    parser.add_argument("--pause-at", type=int, metavar="I",
                        help="stop at crash point I and wait until stdin closes (or a kill)")
    parser.add_argument("--trace", action="store_true",
                        help=f"write every crash point reached, with its time, to {TRACE_FILE}")
    parser.add_argument("--json", action="store_true", help="print the final report as JSON")
    return parser


def print_report(report: dict) -> None:
    s = report["state"]
    print(f"done: pages 1-{s['next_page'] - 1}, findings on pages {report['findings'] or 'none'}"
          + (f", aborted {report['aborted']}" if report["aborted"] else ""))
    print(f"model calls by this process: {report['model_calls']}; reports filed: "
          f"{report['reports_filed']}; replayed events: {report['replayed_events']}")
    extras = {k: report[k] for k in ("torn_lines_skipped", "tails_repaired", "temp_files_removed")
              if report[k]}
    if report["snapshot_fallback"]:
        extras["snapshot_fallback"] = report["snapshot_fallback"]
    if extras:
        print("recovery: " + ", ".join(f"{k} {v}" for k, v in extras.items()))
    w = report["checkpoint_writes"]
    print(f"checkpoint writes: {w['count']}")


def main(argv: list[str] | None = None, prog: str = "python -m bughunt run") -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
    except ConfigError as e:
        parser.error(str(e))
    try:
        report = run(args.dir, config, crash_at=args.crash_at, pause_at=args.pause_at,
                     trace=args.trace)
    except Refused as e:
        print(f"bughunt: {e}", file=sys.stderr)
        return e.code
    if args.json:
        json.dump(report, sys.stdout)
        sys.stdout.write("\n")
    else:
        print_report(report)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main(prog="python -m bughunt.worker"))
