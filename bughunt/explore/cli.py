"""`python -m bughunt explore --dir DIR [...] -- PROGRAM ARGS` (Linux only)."""

from __future__ import annotations

import argparse
import json
import sys

from ..config import OneSentenceParser, _positive, given_path

#: The longest --timeout or --program-timeout: a day (an infinite one cannot be waited for).
MAX_TIMEOUT_S = 86400.0
#: Violating states the text report prints in full; `--json` lists every one.
SHOWN = 20

USAGE = ("python -m bughunt explore --dir DIR [--check 'CMD {state}'] [--ack-lines FILE[:fsync]] "
         "[--external GLOB]... [--allow-opaque GLOB]... [--json] -- PROGRAM ARGS")


def explore_parser(prog: str) -> argparse.ArgumentParser:
    from . import MAX_DIR_BYTES, MAX_DIR_ENTRIES

    p = OneSentenceParser(
        prog=prog, usage=USAGE,
        description="Run PROGRAM once under strace (Linux only), build its kill -9 and power-cut "
                    "states from its system calls below DIR, run the checker on a copy of each, "
                    "and compare what it recovered with what PROGRAM had acknowledged (flushed "
                    "'BEGIN key version' / 'ACK key version' lines on its stdout, or "
                    "--ack-lines). PROGRAM runs for real in DIR.",
        epilog="exit 0: no violation; 1: violations found; 2: refused (a bad flag, PROGRAM cannot "
               "start or fails, strace missing or blind, self-check failed), no verdict.")
    p.add_argument("--dir", required=True, metavar="DIR", type=given_path,
                   help="the directory PROGRAM writes its state to (created if missing; at "
                        f"most {MAX_DIR_BYTES >> 20} MiB and {MAX_DIR_ENTRIES:,} files and "
                        "directories: the explorer copies it for every state)")
    p.add_argument("--check", metavar="'CMD {state}'",
                   help="the program's reader: {state} becomes a copy of each state's DIR; it "
                        "prints {\"items\": {key: version}}, {\"error\": ...} or "
                        "{\"refused\": ...}")
    p.add_argument("--ack-lines", metavar="FILE[:fsync]",
                   help="FILE (below DIR): each complete line written (with :fsync, written and "
                        "fsynced) is an acknowledgement; without --check, its lines are checked")
    p.add_argument("--external", action="append", default=[], metavar="GLOB",
                   help="files of another system (a tracker database): kept as a kill leaves them")
    p.add_argument("--allow-opaque", action="append", default=[], metavar="GLOB",
                   help="files the program maps shared and writable but rebuilds (SQLite's *-shm)")
    p.add_argument("--samples", type=_positive, default=4, metavar="N",
                   help="random power-cut mixes per operation, besides the two extremes (4)")
    p.add_argument("--max-states", type=_positive, default=200, metavar="N",
                   help="power-cut states checked per directory model, at most (200)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=10.0, metavar="S",
                   help="a checker still running after S seconds is a hang (10)")
    p.add_argument("--program-timeout", type=float, default=600.0, metavar="S",
                   help="stop PROGRAM (and all it started) if it runs longer than S seconds "
                        "under strace (600)")
    p.add_argument("--json", action="store_true")
    return p


def main(argv: list[str], prog: str = "python -m bughunt explore") -> int:
    from . import Exploration, ExploreRefused, explore

    parser = explore_parser(prog)
    for stream in (sys.stdout, sys.stderr):
        # A file name that is not UTF-8 (Python holds its bytes as surrogates) is printed with
        # those bytes escaped (\udcff for 0xff), never as a UnicodeEncodeError.
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    if "--" in argv:
        cut = argv.index("--")
        argv, program = argv[:cut], argv[cut + 1:]
    else:
        program = []
    args = parser.parse_args(argv)
    if not program:
        parser.error("no PROGRAM: put it after --, e.g. -- python my_agent.py run DIR")
    for flag in ("timeout", "program_timeout"):
        value = getattr(args, flag)
        if not 0 < value <= MAX_TIMEOUT_S:          # nan and inf too: no timeout is no timeout
            parser.error(f"--{flag.replace('_', '-')} {value:g}: must be more than 0 seconds "
                         f"and at most {MAX_TIMEOUT_S:g} (a day)")
    try:
        result = explore(program, args.dir, check=args.check, ack_lines=args.ack_lines,
                         external=args.external, allow_opaque=args.allow_opaque,
                         samples_per_cut=args.samples, max_states=args.max_states,
                         seed=args.seed, timeout=args.timeout,
                         program_timeout=args.program_timeout)
    except ExploreRefused as e:
        if args.json:
            json.dump(Exploration(program, False, [str(e)]).to_json(), sys.stdout)
            print()
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(result.to_json(), sys.stdout)
        print()
    if not result.trace_complete:
        print(f"{prog}: no verdict: {result.why_not[0]}"
              + (f" (and {len(result.why_not) - 1} more)" if len(result.why_not) > 1 else ""),
              file=sys.stderr)
        return 2
    if not args.json:
        print(f"{len(result.ops)} operations traced below {args.dir} ({result.trace_seconds:.1f} s "
              f"under strace); self-check passed; {result.checks} checks "
              f"({result.check_seconds:.1f} s)")
        print(result.table().to_string())
        for v in result.violations[:SHOWN]:
            print(f"\n{v}")
            if v.last_ack:
                print(f"  last acknowledgement before it: {v.last_ack}")
            for what, ops in (("lost", v.lost_ops), ("torn", v.torn_ops),
                              ("unfinished since then", v.unfinished_ops)):
                if ops:
                    print(f"  {what}: " + "; ".join(ops))
        more = len(result.violations) - SHOWN
        if more > 0:
            print(f"\n... and {more} more violating state{'s' if more != 1 else ''} "
                  f"({len(result.violations)} in all): --json lists every one")
    return 1 if result.violations else 0
