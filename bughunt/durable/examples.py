"""The lesson's examples as real programs that a real SIGKILL can cut off.

    python -m bughunt.durable count      --db DB [--to 5] [--crash-after-tick N | --crash-before-print N
                                           | --close-after-tick N | --pause-after-tick N]
    python -m bughunt.durable tool-probe --db DB [--replay safe|unsafe] [--crash-at WHERE]
    python -m bughunt.durable generate   --db DB [--crash-mid-stream | --close-mid-stream
                                           | --crash-before-send] [--retries 2]
    python -m bughunt.durable memo       --db DB --candidate TEXT [--crash-after-memo]
    python -m bughunt.durable flaky      --db DB [--dies 2] [--steps 3]
    python -m bughunt.durable crash-loop --db DB [--restart-limit N|unlimited]
    python -m bughunt.durable recover    --db DB        (open = recovery, then a clean close)
    python -m bughunt.durable tasks      --db DB        (the tasks table, read-only)

Running again on the same database resumes. One runtime per database at a time: a second one is
refused at once (exit 75), or waits for the first with --wait. Each prints what happened;
--json prints JSON lines.

Exit codes: 0 done (or closed on purpose); 2 refused (a bad flag, or a --db that is not this
runtime's database, is damaged or holds other tasks: one sentence names it, nothing is changed);
74 the disk failed a read or write; 75 busy (another runtime holds the database); 130 stopped by
Ctrl-C (SIGINT), 143 stopped by SIGTERM (the database is consistent: run again to resume). A planned
crash is a real SIGKILL: the parent sees the process killed by signal 9.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import signal
import sqlite3
import sys
from contextlib import contextmanager
from pathlib import Path

from ..config import OneSentenceParser, given_path
from ..crashpoints import announce_and_wait
from .runtime import (DEFAULT_RESTART_LIMIT, MISSING, Kind, Report, Retry, Runtime, Step, Tool)
from .store import DurableStore, InvalidValue, StoreBusy, StoreRefused, read_tasks

PROG = "python -m bughunt.durable"
EXIT_OK, EXIT_REFUSED, EXIT_IO, EXIT_BUSY = 0, 2, 74, 75
EXIT_SIGINT, EXIT_SIGTERM = 128 + signal.SIGINT, 128 + signal.SIGTERM
PAUSE_BANNER = "bughunt.durable: paused"
WAIT_BANNER = "bughunt.durable: waiting"
TOOL_CRASH_POINTS = ("in-call", "after-intent", "in-execute", "after-result")


def die() -> None:
    """A real SIGKILL: no cleanup, no clean close, exactly like the OOM killer."""
    os.kill(os.getpid(), signal.SIGKILL)


def pause(where: str) -> None:
    """Announce the pause on stderr, then wait until stdin is closed (a handshake for tests)."""
    announce_and_wait(f"{PAUSE_BANNER} {where}")


class Out:
    """Prints events as text or JSON lines, flushed at once: a kill must not eat printed lines."""

    def __init__(self, as_json: bool):
        self.as_json = as_json

    def __call__(self, event: str, text: str, **data) -> None:
        line = json.dumps({"event": event, **data}) if self.as_json else text
        print(line, flush=True)

    def report(self, report: Report) -> None:
        self("report", f"report: {report.type} (task {report.task}, kind {report.kind}, reason "
                       f"{report.reason})", **report.to_dict())


@contextmanager
def runtime(args, out: Out, kinds: list[Kind], tools: list[Tool] = (), *, task: tuple, **options):
    """Open the store (lock, checks) and the runtime (kind checks, recovery); find or submit
    `task` = (kind, input, checkpoint); yield (store, runtime, task id); close cleanly.

    Every refusal comes before recovery's first write, and closes the store as it found it.
    """
    def waiting():
        sys.stderr.write(f"{WAIT_BANNER}: another durable runtime holds {args.db}; --wait: "
                         "waiting for it to finish\n")
        sys.stderr.flush()
    store = DurableStore(args.db, synchronous=args.synchronous, wait=args.wait, on_wait=waiting)
    try:
        existing = find_task(store, *task[:2], spawns={"tool"} if tools else set())
        rt = Runtime(store, kinds, tools, restart_limit=args.restart_limit,
                     on_report=out.report, **options)
    except BaseException:
        store.close(abandon=True)
        raise
    try:
        yield store, rt, existing or rt.submit(*task)
    finally:
        store.close()


def find_task(store: DurableStore, kind: str, input, spawns: set[str] = frozenset()
              ) -> int | None:
    """The task of this kind already in the store (a resume, with the same input), if any.

    Each command's database holds its own task and the tasks it spawns (`spawns`: tool-probe's
    tool) and nothing else: a database that holds finished tasks of another kind is another
    command's, and is refused before anything is written. (A live task of another kind is
    refused by the runtime itself, naming its phase.)
    """
    records = store.all()
    for rec in records:
        if rec["kind"] not in {kind, *spawns} and rec["state"]["status"] == "terminal":
            raise StoreRefused(store.path, f"it holds other tasks (task {rec['id']} is a "
                               f"finished {rec['kind']} task), and {PROG} runs one kind of task "
                               f"per database, {kind} here: use a new --db")
    for rec in records:
        if rec["kind"] == kind:
            if rec["input"] != input:
                raise StoreRefused(store.path, f"it holds a {kind} task with input "
                                   f"{json.dumps(rec['input'])}, not {json.dumps(input)}: resume "
                                   "it with the flags it was started with, or use a new --db")
            return rec["id"]
    return None


# --- count to N (the lesson's example 12) --------------------------------------------------------

def count_kind(out: Out, args) -> Kind:
    def tick(step: Step) -> None:
        n, to = step.checkpoint["n"], step.input["to"]
        if step.memo(f"printed-{n}") is MISSING and args.memo_after_print:
            # Print first, then memo (the other order): a crash between them prints this tick
            # again when the step re-runs (at least once), but never loses it.
            out("tick", f"tick {n}", n=n)
            if args.crash_before_memo == n:
                die()
            step.memo(f"printed-{n}", True)
        elif step.memo(f"printed-{n}") is MISSING:
            # Memo first, then print: a crash between them loses this print (at most once),
            # but a re-run of this step can never print it twice.
            step.memo(f"printed-{n}", True)
            if args.crash_before_print == n:
                die()
            out("tick", f"tick {n}", n=n)
        if args.crash_after_tick == n:
            die()               # printed, next checkpoint not yet committed
        if args.close_after_tick == n:
            step.runtime.close()           # the lesson's example: a clean close, not a crash
        if args.pause_after_tick == n:
            pause(f"after tick {n}, holding {args.db}")
        if n == to:
            step.finish(f"counted to {n}")
            return
        step.sleep_until(step.now() + args.sleep_ms / 1000, {"phase": "tick", "n": n + 1})
    return Kind("count", {"tick": tick})


def cmd_count(args, out: Out) -> int:
    with runtime(args, out, [count_kind(out, args)],
                 task=("count", {"to": args.to}, {"phase": "tick", "n": 1})) as (store, rt, task):
        rt.run()
        state = store.get(task)["state"]
    if state["status"] != "terminal":
        out("closed", f"closed: the task waits at tick {state['checkpoint']['n']} "
                      f"(run again to resume)", n=state["checkpoint"]["n"])
        return EXIT_OK
    outcome = state["outcome"]
    out("done", outcome.get("result") or json.dumps(outcome), outcome=outcome)
    return EXIT_OK


# --- tool probe (the lesson's tool-crash probe) --------------------------------------------------

def append_tool(replay: str, crash_at: str | None = None) -> Tool:
    """Appends a line to a file: not safe to run twice, whatever it is declared as."""
    def run(step: Step, args: dict) -> str:
        if crash_at == "after-intent":
            die()                                # the intent is recorded, the tool never started
        step.output("working\n")                 # progress output, persisted before the effect
        with open(args["path"], "a") as f:
            f.write(args["text"] + "\n")
            f.flush()
            os.fsync(f.fileno())
        if crash_at == "in-execute":
            die()                                # the effect is done, the result not recorded
        return "appended"
    if replay == "undeclared":                   # the tool says nothing: the default applies
        return Tool("append", run)
    return Tool("append", run, replay=replay)


def approve_hook(hooks: Path, crash_at: str | None = None):
    """A beforeTool hook: logs each run (an effect a re-run repeats) with the decision it got
    from a memo (first write wins, so every run gets the first run's decision)."""
    def before_tool(step: Step, name: str, arguments: dict) -> dict:
        run = (len(hooks.read_text().splitlines()) if hooks.exists() else 0) + 1
        decision = step.memo("beforeTool", f"approved in hook run {run}")
        with open(hooks, "a") as f:
            f.write(f"hook run {run}: {decision}\n")
        if crash_at == "in-call":
            die()                                # the hook ran, the intent is not recorded yet
        return arguments
    return before_tool


def probe_kind(crash_at: str | None = None) -> Kind:
    def start(step: Step) -> None:
        step.spawn_and_wait("tool", step.input, {"phase": "call"}, {"phase": "tools"})

    def tools(step: Step) -> None:
        if crash_at == "after-result":
            die()                                # the tool's result is durable, the agent's not
        child = step.store.get(step.record["state"]["on"][0])
        step.finish({"tool": child["id"], "outcome": child["state"]["outcome"]})
    return Kind("agent", {"start": start, "tools": tools})


def cmd_tool_probe(args, out: Out) -> int:
    notes = args.notes or args.db.with_name("notes.txt")
    hooks = args.db.with_name("hooks.txt")
    tools = [append_tool(args.replay, args.crash_at)]
    call = {"name": "append", "arguments": {"path": str(notes), "text": "hello"}}
    with runtime(args, out, [probe_kind(args.crash_at)], tools,
                 before_tool=approve_hook(hooks, args.crash_at),
                 task=("agent", call, {"phase": "start"})) as (store, rt, task):
        rt.run()
        result = store.get(task)["state"]["outcome"]["result"]["outcome"]
    lines = notes.read_text().splitlines() if notes.exists() else []
    hook_runs = hooks.read_text().splitlines() if hooks.exists() else []
    verdict = result.get("message") or result.get("result", {}).get("content")
    out("tool", f"tool append: {result['status']}: {verdict}", outcome=result)
    out("notes", f"{notes.name}: {len(lines)} line(s): {lines}", lines=lines)
    out("hooks", f"beforeTool ran {len(hook_runs)} time(s): {hook_runs}", runs=hook_runs)
    return EXIT_OK


# --- a model request in flight ------------------------------------------------------------------

ANSWER = ["Page 3 ", "has a bug: ", "the login form ", "drops the password."]


class StreamingModel:
    """A deterministic streaming model. Each request is billed (appended and fsynced to the bill)
    when it is sent, before any answer: the provider charges what it received."""

    def __init__(self, bill: Path, crash_mid_stream: bool = False, close_mid_stream: bool = False):
        self.bill = bill
        self.crash_mid_stream, self.close_mid_stream = crash_mid_stream, close_mid_stream
        self.runtime: Runtime | None = None

    def __call__(self, messages: list, emit) -> str:
        number = (len(self.bill.read_text().splitlines()) if self.bill.exists() else 0) + 1
        entry = {"request": number, "messages": messages,
                 "digest": hashlib.sha256(json.dumps(messages).encode()).hexdigest()[:12]}
        with open(self.bill, "a") as f:
            f.write(json.dumps(entry) + "\n")
            f.flush()
            os.fsync(f.fileno())
        for i, chunk in enumerate(ANSWER):
            emit(chunk)                          # the partial answer, persisted as it streams
            if i == 1 and self.crash_mid_stream:
                die()
            if i == 1 and self.close_mid_stream:
                self.runtime.close()             # the next emit stops the step (Closed)
        return "".join(ANSWER)


def cmd_generate(args, out: Out) -> int:
    bill = args.db.with_name("bill.jsonl")
    model = StreamingModel(bill, args.crash_mid_stream, args.close_mid_stream)

    def before_request(step: Step, messages: list) -> list:
        if args.crash_before_send:
            die()                                # preparing the request, nothing recorded yet
        return messages
    retry = Retry(max_retries=args.retries, backoff_s=args.backoff_ms / 1000)
    messages = [{"role": "user", "content": "Which page has a bug?"}]
    with runtime(args, out, [], model=model, retry=retry, before_request=before_request,
                 task=("generation", {"messages": messages},
                       {"phase": "request", "attempt": 1, "aborted": []})) as (store, rt, task):
        model.runtime = rt
        rt.run()
        state = store.get(task)["state"]
    billed = [json.loads(line) for line in bill.read_text().splitlines()] if bill.exists() else []
    out("bill", f"{bill.name}: {len(billed)} request(s) billed", requests=billed)
    if state["status"] != "terminal":
        out("closed", f"closed: the request waits at attempt {state['checkpoint']['attempt']} "
                      "(run again to resume)", checkpoint=state["checkpoint"])
        return EXIT_OK
    outcome = state["outcome"]
    text = (f"answer (attempt {outcome['result']['attempt']}): {outcome['result']['answer']}"
            if outcome["status"] == "completed" else
            f"{outcome['message']}: reason {outcome['reason']}, input {outcome['input']}")
    out("done", text, outcome=outcome)
    return EXIT_OK


# --- two writers of one memo ---------------------------------------------------------------------

def cmd_memo(args, out: Out) -> int:
    def pick(step: Step) -> None:
        winner = step.memo("pick", args.candidate)
        out("memo", f"proposed {args.candidate!r}; memo pick holds {winner!r}",
            candidate=args.candidate, winner=winner)
        if args.crash_after_memo:
            die()
        step.finish(winner)
    with runtime(args, out, [Kind("memo", {"pick": pick})],
                 task=("memo", {}, {"phase": "pick"})) as (store, rt, task):
        rt.run()
        outcome = store.get(task)["state"]["outcome"]
    out("done", f"the task ended with {outcome['result']!r}", outcome=outcome)
    return EXIT_OK


# --- restarts reset by progress, and a step that always dies -------------------------------------

def cmd_flaky(args, out: Out) -> int:
    def step_(step: Step) -> None:
        s = step.checkpoint["step"]
        if step.restarts < args.dies:
            out("dies", f"step {s}: dies (restarts so far: {step.restarts})", step=s,
                restarts=step.restarts)
            die()
        out("progress", f"step {s}: done after {step.restarts} restart(s)", step=s,
            restarts=step.restarts)
        if s == step.input["steps"]:
            step.finish(f"{s} steps done")
        else:
            step.commit({"phase": "step", "step": s + 1})
    with runtime(args, out, [Kind("flaky", {"step": step_})],
                 task=("flaky", {"steps": args.steps}, {"phase": "step", "step": 1})) \
            as (store, rt, task):
        rt.run()
        outcome = store.get(task)["state"]["outcome"]
    out("done", f"task {outcome['status']}: {outcome.get('result') or outcome.get('detail')}",
        outcome=outcome)
    return EXIT_OK


def cmd_crash_loop(args, out: Out) -> int:
    def boom(step: Step) -> None:
        die()
    with runtime(args, out, [Kind("crash-loop", {"boom": boom})],
                 task=("crash-loop", {}, {"phase": "boom"})) as (store, rt, task):
        rt.run()                                 # dies inside, unless the limit ends the task
        outcome = store.get(task)["state"]["outcome"]
    out("done", f"task {outcome['status']}: {outcome.get('detail')}", outcome=outcome)
    return EXIT_OK


# --- looking -------------------------------------------------------------------------------------

def cmd_recover(args, out: Out) -> int:
    with DurableStore(args.db, synchronous=args.synchronous, wait=args.wait) as store:
        ids = store.recover()
    out("recovered", f"recovered (running -> pending): {ids or 'none'}", tasks=ids)
    return EXIT_OK


def cmd_tasks(args, out: Out) -> int:
    rows = read_tasks(args.db)
    if args.json:
        print(json.dumps(rows))
    else:
        for row in rows:
            print(row)
    return EXIT_OK


# --- flags ---------------------------------------------------------------------------------------

def _whole_in(lo: int, hi: int, what: str = "a whole number"):
    def parse(value: str) -> int:
        try:
            n = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what} from {lo} to {hi}, "
                                             f"got {value!r}") from None
        if not lo <= n <= hi:
            raise argparse.ArgumentTypeError(f"expected {what} from {lo} to {hi}, got {n}")
        return n
    return parse


def _milliseconds(value: str) -> float:
    try:
        ms = float(value)
    except ValueError:
        ms = math.nan
    if not math.isfinite(ms) or not 0 <= ms <= 60_000:
        raise argparse.ArgumentTypeError(f"expected milliseconds from 0 to 60000, got {value!r}")
    return ms


def _limit(value: str) -> int | None:
    if value == "unlimited":
        return None
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'unlimited', got {value!r}") \
            from None
    if not 1 <= n <= 1000:
        raise argparse.ArgumentTypeError(f"expected 1 to 1000 or 'unlimited', got {n}")
    return n


def examples_parser() -> OneSentenceParser:
    parser = OneSentenceParser(prog=PROG, description=__doc__.split("\n\n")[0],
                               epilog=__doc__.split("\n\n", 1)[1],
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=OneSentenceParser)

    def common(p, runs=True):
        p.add_argument("--db", required=True, type=given_path, help="the SQLite task database")
        p.add_argument("--json", action="store_true", help="print JSON lines")
        if runs:
            p.add_argument("--wait", action="store_true",
                           help="if another runtime holds the database, wait for it (default: "
                                "refuse at once, exit 75)")
            p.add_argument("--restart-limit", type=_limit, default=DEFAULT_RESTART_LIMIT,
                           metavar="N|unlimited",
                           help=f"restarts without progress before a task ends "
                                f"(default {DEFAULT_RESTART_LIMIT})")
            p.add_argument("--synchronous", default="FULL", choices=["NORMAL", "FULL"],
                           help="SQLite synchronous setting (default FULL: survives power loss)")

    tick = _whole_in(1, 10_000, "a tick number")
    p = sub.add_parser("count", help="count to N, one durable tick at a time")
    common(p)
    p.add_argument("--to", type=_whole_in(1, 10_000), default=5, help="count to this (default 5)")
    p.add_argument("--sleep-ms", type=_milliseconds, default=10,
                   help="sleep between ticks, 0 to 60000 ms (default 10)")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--crash-after-tick", type=tick, metavar="N",
                      help="SIGKILL after printing tick N, before the next checkpoint")
    when.add_argument("--crash-before-print", type=tick, metavar="N",
                      help="SIGKILL after tick N's memo, before its print")
    when.add_argument("--crash-before-memo", type=tick, metavar="N",
                      help="with --memo-after-print: SIGKILL after tick N's print, before its "
                           "memo")
    when.add_argument("--close-after-tick", type=tick, metavar="N",
                      help="close cleanly after printing tick N (the lesson's example)")
    when.add_argument("--pause-after-tick", type=tick, metavar="N",
                      help="after tick N, hold the database until stdin is closed")
    p.add_argument("--memo-after-print", action="store_true",
                   help="print each tick before its memo, not after (at least once)")

    p = sub.add_parser("tool-probe", help="a tool that appends 'hello' to notes.txt")
    common(p)
    p.add_argument("--replay", choices=["safe", "unsafe", "undeclared"], default="unsafe",
                   help="the tool's replay declaration in this process (default unsafe; "
                        "undeclared: none, so the runtime's default, unsafe)")
    p.add_argument("--crash-at", choices=TOOL_CRASH_POINTS,
                   help="SIGKILL: in the call phase after beforeTool, after the intent is "
                        "recorded, inside execute after the append, or after the tool's result")
    p.add_argument("--notes", type=Path, help="the file to append to (default: notes.txt "
                                              "beside --db)")

    p = sub.add_parser("generate", help="one model request, streamed (the call in flight)")
    common(p)
    how = p.add_mutually_exclusive_group()
    how.add_argument("--crash-mid-stream", action="store_true",
                     help="SIGKILL after two pieces of the answer have streamed")
    how.add_argument("--close-mid-stream", action="store_true",
                     help="close cleanly after two pieces of the answer")
    how.add_argument("--crash-before-send", action="store_true",
                     help="SIGKILL while preparing the request, before it is recorded")
    p.add_argument("--retries", type=_whole_in(0, 10), default=2,
                   help="attempts after the first, for a request cut off by a crash (default 2)")
    p.add_argument("--backoff-ms", type=_milliseconds, default=20,
                   help="backoff before retry n: this x 2^(n-1) ms (default 20)")

    p = sub.add_parser("memo", help="a step that proposes a memo value (two writers, one memo)")
    common(p)
    p.add_argument("--candidate", required=True, help="the value this process proposes")
    p.add_argument("--crash-after-memo", action="store_true", help="SIGKILL after the memo")

    p = sub.add_parser("flaky", help="steps that die until restarted often enough")
    common(p)
    p.add_argument("--dies", type=_whole_in(0, 10), default=2,
                   help="each step dies while its restart count is below this (default 2)")
    p.add_argument("--steps", type=_whole_in(1, 10), default=3, help="how many steps (default 3)")

    p = sub.add_parser("crash-loop", help="a step that always dies")
    common(p)

    p = sub.add_parser("recover", help="open the database (recovery) and close it cleanly")
    common(p)

    p = sub.add_parser("tasks", help="print the tasks table (read-only)")
    common(p, runs=False)
    return parser


def _check_args(parser: OneSentenceParser, args) -> None:
    """Flags that only make sense together, checked before anything is opened."""
    if args.command == "count":
        if args.crash_before_memo is not None and not args.memo_after_print:
            parser.error("argument --crash-before-memo: only with --memo-after-print (by "
                         "default the memo comes first)")
        if args.crash_before_print is not None and args.memo_after_print:
            parser.error("argument --crash-before-print: not with --memo-after-print (the "
                         "print comes first there: use --crash-before-memo)")
        for flag in ("crash_after_tick", "crash_before_print", "crash_before_memo",
                     "close_after_tick", "pause_after_tick"):
            n = getattr(args, flag)
            if n is not None and n > args.to:
                parser.error(f"argument --{flag.replace('_', '-')}: tick {n} is past --to "
                             f"{args.to}, so it would never happen")
    if args.command == "tool-probe" and args.notes is not None:
        if args.notes.is_dir():
            parser.error(f"argument --notes: {args.notes} is a directory")
        if not args.notes.parent.is_dir():
            parser.error(f"argument --notes: the folder {args.notes.parent} does not exist")


COMMANDS = {"count": cmd_count, "tool-probe": cmd_tool_probe, "generate": cmd_generate,
            "memo": cmd_memo, "flaky": cmd_flaky, "crash-loop": cmd_crash_loop,
            "recover": cmd_recover, "tasks": cmd_tasks}


class Terminated(BaseException):
    """SIGTERM, raised like KeyboardInterrupt so that the store closes cleanly."""


def _on_sigterm(signum, frame):
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    """The CLI. Every failure is one sentence on stderr and an exit code (see the module doc)."""
    parser = examples_parser()
    args = parser.parse_args(argv)
    _check_args(parser, args)
    out = Out(args.json)

    def fail(message: str, code: int) -> int:
        sys.stderr.write(f"{PROG} {args.command}: {message}\n")
        return code
    try:
        return COMMANDS[args.command](args, out)
    except StoreBusy as e:
        hint = "" if getattr(args, "wait", True) else "; run again when it is done, or use --wait"
        return fail(f"{e}{hint}", EXIT_BUSY)
    except (StoreRefused, InvalidValue) as e:        # a disk that refused a write: 74
        return fail(str(e), getattr(e, "exit_code", EXIT_REFUSED))
    except KeyboardInterrupt:
        return fail(f"stopped by Ctrl-C (SIGINT); {args.db} is consistent: run again to resume",
                    EXIT_SIGINT)
    except Terminated:
        return fail(f"stopped by SIGTERM; {args.db} is consistent: run again to resume",
                    EXIT_SIGTERM)
    except (sqlite3.Error, OSError) as e:
        return fail(f"{args.db}: the disk or SQLite failed ({e}); nothing past the last commit "
                    "was kept", EXIT_IO)


def run_cli() -> int:
    """`python -m bughunt.durable`: main() with SIGTERM turned into a clean stop."""
    signal.signal(signal.SIGINT, signal.default_int_handler)    # even if started ignoring it
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return main()
    except KeyboardInterrupt:                        # a second signal during the clean close
        return EXIT_SIGINT
    except Terminated:
        return EXIT_SIGTERM
