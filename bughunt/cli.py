"""`python -m bughunt COMMAND` (POSIX only).

- `run`          run or resume the worker in a run directory (see `bughunt.worker`)
- `points`       list the crash points of a configuration
- `sweep`        crash at every point, resume, measure; a table or `--json`
- `kill-random`  SIGKILL from outside at seeded random moments; the rule-of-three bound
- `lesson`       the source text's experiments, its figures beside this machine's
- `conformance`  a checkpoint store against every crash state, rule by rule
- `frameworks`   the same sweep on LangGraph, DBOS, or your own adapter
- `explore`      the kill -9 and power-cut states of any program, from its system calls (Linux)
- `claims`       every lesson's findings checked against a run made now
- `practice`     a new problem for a lesson, from a seed, answered by a live run
- `doctor`       check that this machine and folder can run the lab
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .config import (ConfigError, OneSentenceParser, _latency, _positive, add_config_arguments,
                     config_from_args, given_path)
from .experiment import RANDOM_KILL_LATENCY_MS
from .worker import EXIT_MODEL       # the README's 69: the model over HTTP cannot be reached

PROG = "python -m bughunt"


def _parser() -> argparse.ArgumentParser:
    parser = OneSentenceParser(prog=PROG, description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("run", help="run or resume the worker (all flags: run --help)", add_help=False)
    sub.add_parser("doctor", help="check this machine and folder can run the lab", add_help=False)
    sub.add_parser("conformance", help="a checkpoint store against every crash state "
                   "(all flags: conformance --help)", add_help=False)
    sub.add_parser("frameworks", help="the same sweep on LangGraph, DBOS or your adapter "
                   "(all flags: frameworks --help)", add_help=False)
    sub.add_parser("explore", help="the crash states of any program, from its system calls "
                   "(Linux; all flags: explore --help)", add_help=False)
    sub.add_parser("claims", help="check every lesson's findings against a run made now "
                   "(all flags: claims --help)", add_help=False)
    sub.add_parser("practice", help="a new problem for a lesson, from a seed "
                   "(all flags: practice --help)", add_help=False)

    p = sub.add_parser("points", help="list the crash points of a configuration")
    p.set_defaults(parser=p)
    add_config_arguments(p)
    p.add_argument("--model", choices=MODELS, default="in-process",
                   help="local-server: also list the points inside each model call, which exist "
                        "when the model is reached over HTTP (lesson 11)")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("sweep", help="crash at every point, resume, measure")
    p.set_defaults(parser=p)
    add_config_arguments(p)
    p.add_argument("--points", metavar="P,Q,...",
                   help="only these crash points: names like p3.after_submit, or numbers")
    _add_model(p)
    _add_common(p)

    p = sub.add_parser("kill-random", help="SIGKILL from outside after random delays")
    p.set_defaults(parser=p)
    add_config_arguments(p)
    p.add_argument("--tries", type=_positive, default=40, metavar="N",
                   help="random kills to try (one at a time: a parallel run would skew the timing)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--latency-ms", type=_latency, default=RANDOM_KILL_LATENCY_MS, metavar="MS",
                   help="each model answer takes MS ms, as a real agent mostly waits for its "
                        f"model (default {RANDOM_KILL_LATENCY_MS:g})")
    _add_common(p, workers=False)

    p = sub.add_parser("lesson", help="the lesson's table: lesson vs this machine")
    p.set_defaults(parser=p)
    _add_common(p)
    return parser


MODELS = ("in-process", "local-server")


def _add_model(p: argparse.ArgumentParser) -> None:
    from .worker import _model_url

    g = p.add_argument_group("the model (a world setting, never part of the configuration)")
    g.add_argument("--model", choices=MODELS, default="in-process",
                   help="in-process (default, every lesson's sweeps) or local-server: start the "
                        "lab's model server and call it over HTTP through the openai SDK; the "
                        "calls get crash points inside them (lesson 11)")
    g.add_argument("--model-url", type=_model_url, metavar="URL",
                   help="call a model server you started (python -m bughunt.modelserver) at URL; "
                        "needs --model-bill")
    g.add_argument("--model-bill", type=given_path, metavar="FILE",
                   help="that server's bill (its --bill FILE): redone calls are counted there")
    g.add_argument("--model-name", metavar="NAME", help="the model to ask (default: bughunt-mock)")


def _served_model(parser, args, stack):
    """The sweep's model server (a `ServedModel`), or None for the in-process model. With
    `--model local-server` the server is started here and stopped when `stack` closes."""
    from .llm import DEFAULT_MODEL, ServedModel

    name = args.model_name or DEFAULT_MODEL
    if args.model_url is not None:
        if args.model == "local-server":
            parser.error(f"--model-url {args.model_url}: give either --model local-server (the "
                         "lab starts its own server) or --model-url URL (yours), not both")
        if args.model_bill is None:
            parser.error(f"--model-url {args.model_url}: needs --model-bill FILE, the server's "
                         "bill, where redone calls are counted (a real server keeps none, so "
                         "it cannot be swept)")
        if args.model_bill.is_dir():
            parser.error(f"--model-bill {args.model_bill}: is a directory, not the server's bill "
                         "(its --bill FILE)")
        if not args.model_bill.is_file():
            parser.error(f"--model-bill {args.model_bill}: no such file (the server creates it "
                         "when it starts: python -m bughunt.modelserver --bill FILE)")
        from .modelserver import BillError, check_bill
        try:
            check_bill(args.model_bill)
        except BillError as e:
            parser.error(f"--model-bill {e}")
        return ServedModel(args.model_url, args.model_bill, name)
    if args.model_bill is not None:
        parser.error(f"--model-bill {args.model_bill}: only with --model-url URL, a server you "
                     "started (--model local-server keeps its own bill)")
    if args.model_name is not None and args.model == "in-process":
        parser.error(f"--model-name {args.model_name}: only with --model-url URL or --model "
                     "local-server")
    if args.model == "in-process":
        return None
    import tempfile

    from .modelserver import ServerProcess

    tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bughunt-server-")))
    server = stack.enter_context(ServerProcess(tmp / "server-bill.jsonl"))
    return ServedModel(server.base_url, server.bill_path, name)


def _add_common(p: argparse.ArgumentParser, workers: bool = True) -> None:
    if workers:
        p.add_argument("--workers", type=_positive, metavar="N",
                       help="parallel runs (default: CPU cores)")
    p.add_argument("--work-dir", type=given_path, metavar="DIR",
                   help="keep the run directories in DIR (new or empty); default: a temp dir, "
                        "removed afterwards")
    p.add_argument("--json", action="store_true")


def _progress(total_hint: str):
    """A tqdm bar on stderr when it is a terminal; nothing otherwise."""
    try:
        from tqdm import tqdm
    except ImportError:
        return None, lambda: None
    bar = tqdm(desc=total_hint, unit="run", disable=None, file=sys.stderr)

    def update(done: int, total: int) -> None:
        bar.total = total
        bar.n = done
        bar.refresh()

    return update, bar.close


def _config(parser, args):
    try:
        return config_from_args(args)
    except ConfigError as e:
        parser.error(e.as_flag())


def cmd_points(parser, args) -> int:
    from .experiment import crash_points

    config = _config(parser, args)
    points = crash_points(config, args.model != "in-process")
    if args.json:
        json.dump([{"crash_point": p.name, "index": p.index, "page": p.page, "label": p.label}
                   for p in points], sys.stdout)
        print()
    else:
        print(_table([{"crash_point": p.name, "index": p.index, "page": p.page, "label": p.label}
                      for p in points], ["crash_point", "index", "page", "label"]))
        print(f"{len(points)} crash points (the name means the same moment in every "
              "configuration; the index is this configuration's count)")
        print("inside recovery itself, before the first page of every resume (not counted): "
              "after_repair" + (", after_abort (pending intent abort)" if config.intent else ""))
    return 0


def _table(rows: list[dict], columns: list[str]) -> str:
    """Plain-text table: text columns left-aligned, numbers right-aligned."""
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in columns}
    text = {c: all(isinstance(r[c], str) for r in rows) for c in columns}

    def cell(c, v):
        return str(v).ljust(widths[c]) if text[c] else str(v).rjust(widths[c])

    lines = ["  ".join(cell(c, c) for c in columns)]
    lines += ["  ".join(cell(c, r[c]) for c in columns) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


SWEEP_COLUMNS = ["crash_point", "index", "redone_model_calls", "replayed_events",
                 "duplicate_reports", "lost_reports", "three_way_check"]
#: With the model over HTTP: what the killed worker held of its crash page's call.
CALL_COLUMNS = ["chunks_held", "killed_call_billed"]


def cmd_sweep(parser, args) -> int:
    from contextlib import ExitStack

    from .config import is_store_file
    from .experiment import summarize, sweep_records, work_dir

    from .crashpoints import NoSuchPoint
    from .experiment import crash_point

    config = _config(parser, args)
    in_call = args.model != "in-process" or args.model_url is not None
    points = None
    if args.points is not None:
        points = [x.strip() for x in args.points.split(",")]
        if not all(points):
            parser.error(f"--points: expected crash-point names or numbers separated by commas, "
                         f"got {args.points!r}")
        try:
            points = [crash_point(config, x, in_call).name for x in points]
        except NoSuchPoint as e:
            parser.error(f"--points: {e}")
    with ExitStack() as stack:
        model = _served_model(parser, args, stack)
        if args.model_url is not None:
            why = unreachable(args.model_url)
            if why is not None:
                print(f"{PROG} sweep: --model-url {args.model_url}: the model cannot be reached "
                      f"({why}); nothing was run: start the server (python -m "
                      "bughunt.modelserver --bill FILE) or give its URL", file=sys.stderr)
                return EXIT_MODEL
        update, close = _progress("sweep")
        try:
            if is_store_file(config.store):       # a learner's store runs behind the boundary
                from .boundary import commands

                if args.work_dir is not None:
                    with work_dir(args.work_dir):       # refuses a file or a full folder here
                        pass
                records, problem, printed = commands.sweep_store(
                    config, points=points, workers=args.workers, base_dir=args.work_dir,
                    model=model, progress=update)
                commands.say(f"{PROG} sweep", config.store, problem, printed)
                if problem is not None:
                    return commands.code_of(problem)
            else:
                records = sweep_records(config, points=points, workers=args.workers,
                                        progress=update, base_dir=args.work_dir, model=model)
        except FileExistsError as e:
            parser.error(str(e))
        finally:
            close()
    if args.model_url is not None and records and all(
            r.error and f"(exit {EXIT_MODEL})" in r.error for r in records):
        # The server went away during the sweep: every point is the model's failure, and a
        # summary of them would be numbers about nothing.
        print(f"{PROG} sweep: --model-url {args.model_url}: the model stopped answering during "
              f"the sweep (all {len(records)} points failed calling it); no result",
              file=sys.stderr)
        return EXIT_MODEL
    columns = SWEEP_COLUMNS + (CALL_COLUMNS if in_call else [])
    summary = summarize(records)
    if args.json:
        extra = ["prefix_held"] if in_call else []
        json.dump({"summary": summary,
                   "points": [{c: getattr(r, c) for c in columns + extra} | {"error": r.error}
                              for r in records]}, sys.stdout)
        print()
    else:
        print(_table([{c: getattr(r, c) for c in columns} for r in records], columns))
        print()
        for k, v in summary.items():
            print(f"{k}: {v}")
    return 0


def unreachable(url: str, timeout: float = 5.0) -> str | None:
    """Why nothing listens at `url`'s host and port (a TCP connect, no request, nothing billed),
    or None when something does."""
    import socket
    import urllib.parse

    split = urllib.parse.urlsplit(url)
    try:
        port = split.port or (443 if split.scheme == "https" else 80)
    except ValueError as e:
        return str(e)
    try:
        socket.create_connection((split.hostname, port), timeout=timeout).close()
    except OSError as e:
        return e.strerror or type(e).__name__
    return None


def cmd_kill_random(parser, args) -> int:
    from .experiment import kill_random, landing_order

    config = _config(parser, args)
    from .config import is_store_file
    if is_store_file(config.store):      # its kills are timed from outside a boundary
        parser.error(f"--store {config.store}: kill-random takes the lab's stores only; a "
                     "learner's store runs behind the lab's boundary: sweep it (sweep --store) "
                     "or grade it (python -m bughunt.grader)")
    update, close = _progress("kill-random")
    try:
        result = kill_random(config, tries=args.tries, seed=args.seed, base_dir=args.work_dir,
                             progress=update, latency_ms=args.latency_ms)
    except FileExistsError as e:
        parser.error(str(e))
    finally:
        close()
    if args.json:
        json.dump(result, sys.stdout)
        print()
    else:
        bound, loop = result["rule_of_three_bound"], result["kills_in_page_loop"]
        print(f"tries {result['tries']}, real kills {result['real_kills']} ({loop} inside the "
              f"page loop), runs with a duplicate report {result['duplicates_hit']}")
        landed = {}
        for r in sorted(result["runs"], key=lambda r: landing_order(r["landed"])):
            where = r["landed"].split(".")[0] if "." in r["landed"] else r["landed"]
            landed[where] = landed.get(where, 0) + 1
        print("where the kills landed: " + ", ".join(f"{k} {v}" for k, v in landed.items()))
        if bound is not None:
            print(rule_of_three_sentence(loop, bound, result["exact_95_bound"]))
    return 0


def rule_of_three_sentence(loop: int, bound: float, exact: float) -> str:
    """What `loop` kills in the page loop without a failure show. Below 3 kills the rule's 3/n is
    100% or more, which bounds nothing (a rate is at most 100%): that is said, with the exact 95%
    bound, instead of "below about 150%"."""
    kills = f"{loop} kill{'s' if loop != 1 else ''} in the page loop"
    if bound >= 1:
        return (f"rule of three: {kills} are too few for it (3/{loop} is 100% or more, a bound "
                f"on nothing); without a failure the exact 95% bound is {exact:.1%}; give "
                "--tries 30 or more for a useful bound")
    return (f"rule of three: {kills} without a failure would only show the failure rate is "
            f"below about 3/{loop} = {bound:.1%}")


def cmd_lesson(parser, args) -> int:
    from .experiment import LESSON_ROWS, lesson

    update, close = _progress("lesson")
    t0 = time.perf_counter()
    try:
        result = lesson(workers=args.workers, progress=update, base_dir=args.work_dir)
    except FileExistsError as e:
        parser.error(str(e))
    finally:
        close()
    if args.json:
        json.dump(result["figures"], sys.stdout)
        print()
        return 0
    rows = [{"figure": fig, "configuration": conf, "lesson": result["lesson"][key],
             "lab": result["figures"][key],
             "match": "yes" if result["figures"][key] == result["lesson"][key] else "NO"}
            for key, fig, conf in LESSON_ROWS]
    print(_table(rows, ["figure", "configuration", "lesson", "lab", "match"]))
    nn = result["no_newline"]
    print()
    print(f"no-newline log sweep ({nn['crash_points']} points): the resumed run is right in "
          f"{nn['resume_correct']}; the rebuild from disk fails in {nn['rebuild_failures']}, at "
          f"the mid-commit points {', '.join(nn['rebuild_failure_points'])}.")
    print(f"  The lesson's reader (skip what does not parse, no sequence numbers) fails in "
          f"{nn['lesson_reader_failures']}: on the 3 bug pages the record lost to the glued line "
          f"is a repeated intent, so it happens to rebuild right; sequence numbers catch all "
          f"{nn['rebuild_failures']}.")
    print(f"\n{result['pairs']} crash+resume pairs in {time.perf_counter() - t0:.1f} s",
          file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    from .interrupts import Interrupted, interruptible

    try:
        with interruptible():
            return _main(argv)
    except Interrupted as e:
        # The sweep's pool has already killed its workers; its work_dir has removed the temp dirs.
        print(f"bughunt: {e.what}; every worker was stopped and the temporary run directories "
              "removed", file=sys.stderr)
        return e.code
    except BrokenPipeError:          # `... | head`: the reader left; not an error of ours
        sys.stderr.close()
        return 0


def _learner_store(argv: list[str]):
    """(config, run dir) when `run ARGV` names a learner's store file, else None (the worker then
    parses, and refuses, its own flags)."""
    from .config import is_store_file
    from .worker import worker_parser

    import contextlib
    import io

    if any(a in ("-h", "--help") for a in argv):
        return None                   # the worker prints its help, once
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            args = worker_parser(f"{PROG} run").parse_args(argv)   # the worker says why, once
        config = config_from_args(args)
    except (SystemExit, ConfigError):
        return None
    return (config, args.dir) if is_store_file(config.store) else None


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["run"]:
        from . import worker   # the worker parses its own flags: `run --help` shows them all

        store = _learner_store(argv[1:])
        if store is not None:          # a learner's store runs behind the boundary
            from .boundary import commands

            return commands.run_store(argv[1:], *store)
        return worker.main(argv[1:], prog=f"{PROG} run")
    if argv[:1] == ["doctor"]:
        from . import doctor

        return doctor.main(argv[1:])
    if argv[:1] == ["conformance"]:
        from . import conformance

        return conformance.main(argv[1:])
    if argv[:1] == ["explore"]:
        from .explore import cli as explore

        return explore.main(argv[1:], prog=f"{PROG} explore")
    if argv[:1] == ["claims"]:
        from .lab import claims

        return claims.main(argv[1:])
    if argv[:1] == ["practice"]:
        from .lab import practice

        return practice.main(argv[1:])
    if argv[:1] == ["frameworks"]:
        from .frameworks import cli as frameworks

        return frameworks.main(argv[1:], prog=f"{PROG} frameworks")
    parser = _parser()
    args = parser.parse_args(argv)
    commands = {"points": cmd_points, "sweep": cmd_sweep, "kill-random": cmd_kill_random,
                "lesson": cmd_lesson}
    return commands[args.command](args.parser, args)
