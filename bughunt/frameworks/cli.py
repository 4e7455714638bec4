"""`python -m bughunt.frameworks`: the kill -9 sweep on LangGraph, DBOS, the lab's worker or yours.

Every chosen crash point is a run killed by a real SIGKILL there, resumed in a second process, and
read back by a third; the table shows, per sweep and per kind of point (the agent's own code, the
framework's writes), what the crashes cost. `--json` prints every record instead.

Examples:
    python -m bughunt.frameworks --framework langgraph --mode all --resume documented
    python -m bughunt.frameworks --framework dbos --resume all --key off
    python -m bughunt.frameworks --framework langgraph --mode async --repeat 3 --points user
    python -m bughunt.frameworks --framework mypkg.agent:MyAdapter     # sweep your own
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict

from .contract import ADAPTERS, AdapterError, adapter_class
from ..config import OneSentenceParser, _positive
from ..interrupts import Interrupted, interruptible
from ..experiment import summarize
from .sweep import (DEFAULT_TIMEOUT, SweepError, SweepSettings, sweep_many, sweep_timing,
                    varying_points)

PROG = "python -m bughunt.frameworks"
#: `--framework all`: the two frameworks and the lab's own worker, side by side.
ALL = ("langgraph", "dbos", "lab")


def frameworks_parser(prog: str = PROG) -> argparse.ArgumentParser:
    p = OneSentenceParser(prog=prog, description=__doc__.split("\n\n")[0],
                          epilog="Ctrl-C stops at once, removing every process and temp dir "
                                 "(exit 130).")
    p.add_argument("--framework", default="all", metavar="NAME",
                   help=f"{', '.join(ADAPTERS)}, all ({', '.join(ALL)}), or module:Class "
                        "(default: all)")
    p.add_argument("--mode", default="all", metavar="M[,M]",
                   help="durability modes: names, 'default' (each framework's default) or "
                        "'all' (default: all)")
    p.add_argument("--resume", default="documented", metavar="R[,R]",
                   help="resume styles: names, 'documented' (each framework's documented way) "
                        "or 'all' (default: documented)")
    p.add_argument("--key", default="on", choices=("on", "off", "both"),
                   help="the tracker's idempotency key (default: on)")
    p.add_argument("--latency-ms", type=_number, default=0.0, metavar="N",
                   help="every world call (model, visit, submit) takes N ms (default: 0)")
    p.add_argument("--repeat", type=_positive, default=1, metavar="N",
                   help="sweep every point N times and list the points whose verdict varies")
    p.add_argument("--points", metavar="P[,P]",
                   help="only these points: user, framework, all, or patterns such as "
                        "'ask_model.after#*' or 'framework.put.*', each optionally limited to "
                        "pages, as in 'user@p1-4' (default: all)")
    p.add_argument("--pages", type=_positive, default=12, metavar="N", help="site size (default 12)")
    p.add_argument("--workers", type=_positive, metavar="N", help="parallel crash runs "
                                                                "(default: CPU cores)")
    p.add_argument("--timeout", type=_seconds, default=DEFAULT_TIMEOUT, metavar="S",
                   help=f"kill a child that runs longer than S seconds (default {DEFAULT_TIMEOUT:g})")
    p.add_argument("--json", action="store_true", help="print every record as JSON")
    return p


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (value >= 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a number 0 or more, got {text!r}")
    return value


def _seconds(text: str) -> float:
    value = _number(text)
    if value == 0:
        raise argparse.ArgumentTypeError("expected a number of seconds above 0, got '0'")
    return value


def _names(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def plan(args) -> list[SweepSettings]:
    """The sweeps the flags ask for; AdapterError names the flag that cannot be met."""
    frameworks = list(ALL) if args.framework == "all" else [args.framework]
    classes = {f: adapter_class(f) for f in frameworks}
    keys = {"on": [True], "off": [False], "both": [True, False]}[args.key]

    def choose(flag: str, text: str, attr: str, first_word: str) -> dict[str, list[str]]:
        words = _names(text)
        if not words:
            raise AdapterError(f"{flag}: give at least one name, '{first_word}' or 'all'")
        chosen = {}
        for f, cls in classes.items():
            offered = list(getattr(cls, attr))
            if words == ["all"]:
                chosen[f] = offered
            elif words == [first_word]:
                chosen[f] = offered[:1]
            else:
                chosen[f] = [w for w in words if w in offered]
        unknown = [w for w in words if w not in ("all", first_word)
                   and not any(w in getattr(c, attr) for c in classes.values())]
        if unknown or not all(chosen.values()):
            offers = "; ".join(f"{c.name}: {', '.join(getattr(c, attr))}"
                               for c in classes.values())
            raise AdapterError(f"{flag} {text!r}: not offered by every chosen framework ({offers})")
        return chosen

    modes = choose("--mode", args.mode, "modes", "default")
    resumes = choose("--resume", args.resume, "resume_styles", "documented")
    out = [SweepSettings(f, m, r, k, args.latency_ms, args.pages)
           for f in frameworks for m in modes[f] for r in resumes[f] for k in keys]
    for s in out:
        s.resolved()           # the range checks (latency, pages)
    return out


COLUMNS = [("kind", "kind"), ("crash_points", "points"), ("not_reached", "not reached"),
           ("avg_redone_model_calls", "avg redone"), ("max_redone_model_calls", "max redone"),
           ("duplicate_points", "dup"), ("lost_points", "lost"), ("wrong_memory", "wrong mem"),
           ("wrong_disk", "wrong disk"), ("correct_runs", "correct"), ("errors", "errors"),
           ("pair_ms", "pair ms"), ("write_us", "write us")]


def rows(results) -> list[dict]:
    out = []
    for res in results:
        for kind in ("user", "framework"):
            recs = [r for r in res.records if r.kind == kind]
            if recs:
                out.append({"sweep": res.settings.label(), "kind": kind,
                            **kind_summary(recs, res.clean)})
    return out


def kind_summary(records, clean) -> dict:
    """The lab's summary of these crash runs (one kind of point), with what they cost in time."""
    return {**summarize(records), **sweep_timing(records, clean)}


def cell_text(key: str, value) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if key.startswith("avg_") else str(value)


def print_sweeps(results) -> None:
    last = None
    for row in rows(results):
        if row["sweep"] != last:
            print(f"\n{row['sweep']}")
            print("  " + "  ".join(f"{title:>11}" for _, title in COLUMNS))
            last = row["sweep"]
        print("  " + "  ".join(f"{cell_text(k, row[k]):>11}" for k, _ in COLUMNS))
    for res in results:
        varying = varying_points(res.records)
        if varying:
            print(f"\n{res.settings.label()}: {len(varying)} points vary between repeats: "
                  + ", ".join(v["point"] for v in varying[:12]) + (" ..." if len(varying) > 12
                                                                   else ""))
        for r in res.records:
            if r.error:
                print(f"error at {r.point}: {r.error}", file=sys.stderr)


def as_json(results) -> dict:
    return {"sweeps": [{"settings": asdict(res.settings), "clean": {
        "final": res.clean.final, "model_calls": res.clean.model_calls,
        "points": len(res.clean.points), "seconds": res.clean.seconds},
        "summary": {kind: kind_summary([r for r in res.records if r.kind == kind], res.clean)
                    for kind in ("user", "framework")},
        "varying_points": varying_points(res.records),
        "records": [{**asdict(r), "verdict": r.verdict} for r in res.records]}
        for res in results]}


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    parser = frameworks_parser(prog)
    args = parser.parse_args(argv)
    try:
        settings = plan(args)
    except AdapterError as e:
        parser.error(str(e))
    tty = sys.stderr.isatty()
    started = []

    def progress(done: int, total: int) -> None:
        if not started:
            started.append(total)
            print(f"bughunt frameworks: {total} crash runs in {len(settings)} sweep(s): "
                  + "; ".join(s.label() for s in settings), file=sys.stderr, flush=True)
        elif tty:
            print(f"\r{done}/{total} crash runs", end="", file=sys.stderr, flush=True)

    try:
        with interruptible():          # Ctrl-C and SIGTERM alike: the sweep cleans up, we say so
            results = sweep_many(settings, points=args.points, repeat=args.repeat,
                                 workers=args.workers, timeout=args.timeout, progress=progress)
    except Interrupted as e:
        print(f"\nbughunt frameworks: {e.what}; every child was killed and the temp dir "
              "removed", file=sys.stderr)
        return e.code
    except ValueError as e:               # --points that match nothing
        parser.error(str(e))
    except SweepError as e:
        print(f"bughunt frameworks: {e}", file=sys.stderr)
        return 1
    if tty:
        print(file=sys.stderr)
    if args.json:
        json.dump(as_json(results), sys.stdout)
        print()
    else:
        print_sweeps(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
