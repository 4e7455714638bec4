"""The commands that take a learner's store (`--store FILE.py:Class`), behind the boundary.

`python -m bughunt run`, `sweep` and `conformance` hand a learner's store to these functions
instead of running it in their own process. Each runs the job in a `Boundary`, says a problem in
one sentence on stderr (then what the store printed), and returns the exit code of the README's
table: 2 when the store file cannot be loaded (or, for a sweep, the store cannot even start on an
empty run directory: refused once, never summarised into numbers), 1 when the store misbehaved
(ended its process, hung, ran out of memory, was refused by the fence, returned the wrong thing).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from . import Boundary, Limits, Printed, StoreProblem, problem_of

EXIT_PROBLEM, EXIT_REFUSED = 1, 2
CONFORM_TIMEOUT_S = 120.0
SWEEP_TIMEOUT_S = 600.0
RUN_TIMEOUT_S = 30.0


def absolute(spec: str) -> str:
    """`my_store.py:MyStore` with the file's absolute path: the boundary's child runs elsewhere."""
    file, _, name = spec.rpartition(":")
    return f"{Path(file).expanduser().resolve()}:{name}"


def say(prog: str, spec: str, p: StoreProblem | None, printed: Printed) -> None:
    """The problem in one sentence, then what the store printed, on stderr."""
    if p is not None:
        print(f"{prog}: --store {spec}: {p.message}", file=sys.stderr)
    for line in printed.lines():
        print(line, file=sys.stderr)


def code_of(p: StoreProblem, *, refused_kinds=("spec", "load")) -> int:
    return EXIT_REFUSED if p.kind in refused_kinds or p.loading else EXIT_PROBLEM


def conform_store(prog: str, config, *, pages: int) -> tuple[dict | None, StoreProblem | None, Printed]:
    """The conformance suite on a learner's store: (the report as JSON, or None; the problem;
    what the store printed)."""
    spec = absolute(config.store)
    with Boundary(spec) as b:
        ended = b.call("bughunt.boundary.jobs:conform_job",
                       {"spec": spec, "config": config.replace(store=spec).to_json(),
                        "pages": pages}, timeout=CONFORM_TIMEOUT_S)
        p = problem_of(ended, b.tidy)
        report = ended.result.get("report") if ended.ok and p is None else None
        if report:
            report = _tidied(report, b.tidy)
        return report, p, ended.printed


def _tidied(value, tidy):
    if isinstance(value, str):
        return tidy(value)
    if isinstance(value, dict):
        return {k: _tidied(v, tidy) for k, v in value.items()}
    if isinstance(value, list):
        return [_tidied(v, tidy) for v in value]
    return value


def sweep_store(config, *, points=None, workers=None, base_dir=None, model=None, progress=None,
          run_timeout: float = 10.0) -> tuple[list, StoreProblem | None, Printed]:
    """A real-SIGKILL sweep with a learner's store: (the records, the problem, what it printed).
    A store that cannot start on an empty run directory is a problem with `loading` set: it is
    refused once (exit 2), never summarised into numbers."""
    from ..experiment import CallCrashRun, CrashRun
    from .jobs import PROBING

    spec = absolute(config.store)
    writable = [base_dir] if base_dir is not None else []
    served = ({"url": model.url, "bill": str(model.bill), "name": model.name}
              if model is not None else None)

    def on_status(message: dict) -> None:
        if progress is not None and "progress" in message:
            progress(*message["progress"])

    with Boundary(spec, writable=writable,
                  connect=[_model_port(model.url)] if model is not None else []) as b:
        ended = b.call("bughunt.boundary.jobs:sweep_job",
                       {"spec": spec, "config": config.replace(store=spec).to_json(),
                        "points": points, "workers": workers or 0, "run_timeout": run_timeout,
                        "base_dir": str(base_dir) if base_dir is not None else None,
                        "model": served}, timeout=SWEEP_TIMEOUT_S, on_status=on_status)
        p = problem_of(ended, b.tidy)
        if p is not None and PROBING in p.message:
            p = StoreProblem(p.kind, p.message, loading=True)       # refused once, before any run
        records = []
        if ended.ok and p is None:
            kind = CallCrashRun if ended.result.get("call") else CrashRun
            records = [kind(**{k: b.tidy(v) for k, v in r.items()})
                       for r in ended.result["records"]]
        return records, p, ended.printed


def _model_port(url: str | None) -> int | None:
    """The TCP port of a model server's URL: the one port the kernel lets the store's processes
    connect to (Landlock ABI 4 and later)."""
    from urllib.parse import urlsplit

    if not url:
        return None
    try:
        parts = urlsplit(url)
        return parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None


def _flag(argv: list[str], flag: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def run_store(argv: list[str], config, run_dir: Path) -> int:
    """`python -m bughunt run ARGV` with a learner's store: the worker runs behind the boundary,
    its stdout and stderr streamed to this process's (a learner's prints go to stderr when the
    report is JSON), its exit code returned; a planned SIGKILL at a crash point kills this
    process the same way, so that its caller sees what a worker's caller sees."""
    from ..interrupts import Interrupted

    spec = absolute(config.store)
    sys.stdout.flush()
    sys.stderr.flush()
    stdin = os.dup(0)
    try:
        with Boundary(spec, writable=[Path(run_dir).expanduser().resolve()],
                      limits=Limits(operation_s=RUN_TIMEOUT_S), stdin=stdin,
                      stream=(1, 2), cwd=os.getcwd(),   # ARGV's paths, as given
                      connect=[p for p in [_model_port(_flag(argv, "--model-url"))] if p]) as b:
            try:
                ended = b.call("bughunt.boundary.jobs:worker_job", {"argv": argv},
                               timeout=24 * 3600)
            except Interrupted as e:
                print(f"bughunt: {e.what} ({signal.Signals(e.signum).name}): the run stopped; "
                      f"run again on --dir {run_dir} to "
                      "resume", file=sys.stderr)
                return e.code
            p = problem_of(ended, b.tidy)
    finally:
        os.close(stdin)
    # Only a run given --crash-at kills itself at a planned point (argparse takes a flag's
    # unambiguous prefix too); any other SIGKILL came from outside, and is said so.
    planned = (ended.how == "signal" and ended.signal == signal.SIGKILL
               and not any(e.get("kind") == "note" for e in ended.events)
               and any(a.split("=", 1)[0] in {"--crash-at"[:n] for n in range(4, 11)}
                       for a in argv))
    if planned:                          # the crash point: die as the worker died
        sys.stdout.flush()
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    if p is not None:
        say("bughunt", config.store, p, Printed())
        return code_of(p)
    return int((ended.result or {}).get("code", EXIT_PROBLEM))
