"""The lesson's examples as real programs that a real SIGKILL can cut off.

    python -m bughunt.durable count --db DB --to 5 [--crash-after-tick N | --crash-before-print N]
    python -m bughunt.durable tool-probe --db DB --replay safe|unsafe [--crash-in-execute]
    python -m bughunt.durable crash-loop --db DB [--restart-limit N|unlimited]
    python -m bughunt.durable tasks --db DB          (the tasks table, read-only)

Running again on the same database resumes. Each prints what happened; `--json` prints JSON lines.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from pathlib import Path

from .runtime import DEFAULT_RESTART_LIMIT, MISSING, Kind, Runtime, Step, Tool
from .store import DurableStore, read_tasks


def die() -> None:
    """A real SIGKILL: no cleanup, no clean close, exactly like the OOM killer."""
    os.kill(os.getpid(), signal.SIGKILL)


class Out:
    """Prints events as text or JSON lines, flushed at once: a kill must not eat printed lines."""

    def __init__(self, as_json: bool):
        self.as_json = as_json

    def __call__(self, event: str, text: str, **data) -> None:
        line = json.dumps({"event": event, **data}) if self.as_json else text
        print(line, flush=True)


# --- count to N (the lesson's example 12) --------------------------------------------------------

def count_kind(out: Out, crash_after_tick: int | None, crash_before_print: int | None,
               sleep_s: float) -> Kind:
    def tick(step: Step) -> None:
        n, to = step.checkpoint["n"], step.input["to"]
        if step.memo(f"printed-{n}") is MISSING:
            # Memo first, then print: a crash between them loses this print (at most once),
            # but a re-run of this step can never print it twice.
            step.memo(f"printed-{n}", True)
            if crash_before_print == n:
                die()
            out("tick", f"tick {n}", n=n)
        if crash_after_tick == n:
            die()               # printed, next checkpoint not yet committed
        if n == to:
            step.finish(f"counted to {n}")
            return
        step.sleep_until(step.now() + sleep_s, {"phase": "tick", "n": n + 1})
    return Kind("count", {"tick": tick})


def first_task(store: DurableStore, rt: Runtime, kind: str, input, checkpoint) -> int:
    """The task of this kind already in the store (a resume), or a new one."""
    for rec in store.all():
        if rec["kind"] == kind:
            return rec["id"]
    return rt.submit(kind, input, checkpoint)


def cmd_count(args, out: Out) -> int:
    kind = count_kind(out, args.crash_after_tick, args.crash_before_print, args.sleep_ms / 1000)
    with DurableStore(args.db, synchronous=args.synchronous) as store:
        rt = Runtime(store, [kind], restart_limit=args.restart_limit)
        task = first_task(store, rt, "count", {"to": args.to}, {"phase": "tick", "n": 1})
        rt.run()
        outcome = store.get(task)["state"].get("outcome", {})
    out("done", outcome.get("result") or json.dumps(outcome), outcome=outcome)
    return 0


# --- tool probe (the lesson's tool-crash probe) --------------------------------------------------

def append_tool(replay: str, crash: bool) -> Tool:
    """Appends a line to a file: not safe to run twice, whatever it is declared as."""
    def run(step: Step, args: dict) -> str:
        step.output("working\n")                 # progress output, persisted before the effect
        with open(args["path"], "a") as f:
            f.write(args["text"] + "\n")
            f.flush()
            os.fsync(f.fileno())
        if crash:
            die()                                # the effect is done, the result not recorded
        return "appended"
    return Tool("append", run, replay=replay)


def probe_kind() -> Kind:
    def start(step: Step) -> None:
        step.spawn_and_wait("tool", step.input, {"phase": "call"}, {"phase": "tools"})

    def tools(step: Step) -> None:
        child = step.store.get(step.record["state"]["on"][0])
        step.finish({"tool": child["id"], "outcome": child["state"]["outcome"]})
    return Kind("agent", {"start": start, "tools": tools})


def cmd_tool_probe(args, out: Out) -> int:
    notes = Path(args.notes) if args.notes else Path(args.db).with_name("notes.txt")
    with DurableStore(args.db, synchronous=args.synchronous) as store:
        rt = Runtime(store, [probe_kind()], [append_tool(args.replay, args.crash_in_execute)],
                     restart_limit=args.restart_limit)
        task = first_task(store, rt, "agent",
                          {"name": "append", "arguments": {"path": str(notes), "text": "hello"}},
                          {"phase": "start"})
        rt.run()
        result = store.get(task)["state"]["outcome"]["result"]["outcome"]
    lines = notes.read_text().splitlines() if notes.exists() else []
    verdict = result.get("message") or result.get("result", {}).get("content")
    out("tool", f"tool append: {result['status']}: {verdict}", outcome=result)
    out("notes", f"{notes.name}: {len(lines)} line(s): {lines}", lines=lines)
    return 0


# --- a step that always dies (the crash-loop limit) ----------------------------------------------

def crash_loop_kind() -> Kind:
    def boom(step: Step) -> None:
        die()
    return Kind("crash-loop", {"boom": boom})


def cmd_crash_loop(args, out: Out) -> int:
    with DurableStore(args.db, synchronous=args.synchronous) as store:
        rt = Runtime(store, [crash_loop_kind()], restart_limit=args.restart_limit)
        task = first_task(store, rt, "crash-loop", {}, {"phase": "boom"})
        rt.run()                                 # dies inside, unless the limit ends the task
        rec = store.get(task)
    outcome = rec["state"]["outcome"]
    out("done", f"task {outcome['status']}: {outcome.get('detail')}", outcome=outcome)
    return 0


def cmd_tasks(args, out: Out) -> int:
    rows = read_tasks(Path(args.db))
    if args.json:
        print(json.dumps(rows))
    else:
        for row in rows:
            print(row)
    return 0


def _limit(value: str) -> int | None:
    if value == "unlimited":
        return None
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'unlimited', got {value!r}")
    if n < 1:
        raise argparse.ArgumentTypeError("expected at least 1")
    return n


def _tick(value: str) -> int:
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError("ticks start at 1")
    return n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bughunt.durable", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p, runs=True):
        p.add_argument("--db", required=True, type=Path, help="the SQLite task database")
        p.add_argument("--json", action="store_true", help="print JSON lines")
        if runs:
            p.add_argument("--restart-limit", type=_limit, default=DEFAULT_RESTART_LIMIT,
                           metavar="N|unlimited",
                           help=f"restarts without progress before a task faults "
                                f"(default {DEFAULT_RESTART_LIMIT})")
            p.add_argument("--synchronous", default="FULL", choices=["NORMAL", "FULL"],
                           help="SQLite synchronous setting (default FULL: survives power loss)")

    p = sub.add_parser("count", help="count to N, one durable tick at a time")
    common(p)
    p.add_argument("--to", type=_tick, default=5)
    p.add_argument("--sleep-ms", type=float, default=10, help="sleep between ticks")
    crash = p.add_mutually_exclusive_group()
    crash.add_argument("--crash-after-tick", type=_tick, metavar="N",
                       help="SIGKILL after printing tick N, before the next checkpoint")
    crash.add_argument("--crash-before-print", type=_tick, metavar="N",
                       help="SIGKILL after tick N's memo, before its print")

    p = sub.add_parser("tool-probe", help="a tool that appends 'hello' to notes.txt")
    common(p)
    p.add_argument("--replay", choices=["safe", "unsafe"], default="unsafe")
    p.add_argument("--crash-in-execute", action="store_true",
                   help="SIGKILL after the append, before the result is recorded")
    p.add_argument("--notes", help="the file to append to (default: notes.txt beside --db)")

    p = sub.add_parser("crash-loop", help="a step that always dies")
    common(p)

    p = sub.add_parser("tasks", help="print the tasks table (read-only)")
    common(p, runs=False)

    args = parser.parse_args(argv)
    if args.command != "tasks" and args.db.exists() and args.db.is_dir():
        parser.error(f"--db {args.db}: is a directory")
    if args.command == "tasks" and not args.db.exists():
        parser.error(f"--db {args.db}: no such file")
    out = Out(args.json)
    commands = {"count": cmd_count, "tool-probe": cmd_tool_probe, "crash-loop": cmd_crash_loop,
                "tasks": cmd_tasks}
    return commands[args.command](args, out)
