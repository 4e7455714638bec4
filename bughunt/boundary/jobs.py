"""The jobs the lab runs on a learner's store inside the boundary's child process.

Each is called as `job(context, **args)` and returns plain JSON; what the store does wrong on the
way (a refusal of the fence, an end of its process, a wrong return) stops the job with
`fence.StoreStopped` and is reported by the boundary.

- `conform_job`: the conformance suite (`bughunt.conformance.conform`) on the store, saying which
  crash state it checks as it goes;
- `sweep_job`: the real-SIGKILL sweep with the store (its workers are fenced too); the store is
  loaded, constructed and asked to `load()` an empty run directory once first, so that a store
  that cannot even start is refused once instead of failing at every crash point; a worker that
  does not end within the run's timeout stops the sweep with its crash point named;
- `worker_job`: the worker itself (`python -m bughunt run --store ...`).
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
from pathlib import Path

from ..stores import store_class
from ..config import is_store_file, shown
from . import child, fence as _fence, pristine


def conform_job(ctx, *, spec: str, config: dict, pages: int) -> dict:
    """The conformance suite on the store `spec`, with the run settings `config`."""
    from ..config import RunConfig
    from ..conformance import conform as suite

    cls = store_class(spec)
    name = shown(cls.name)                 # a 100,000-line `name` is not echoed whole
    ctx.status(store_name=name)
    config = RunConfig.from_json(config)
    child.set_state("while the suite records its run")
    report = suite(config, cls, pages=pages, on_state=lambda where: child.set_state(f"at {where}"),
                   fresh=spec if pristine.available() and is_store_file(spec) else None)
    return {"name": name, "report": report.to_json()}


#: What the sweep does before its first crash point (a store that fails here is refused once).
PROBING = "while the sweep tries the store once on an empty run directory"


def probe(cls, config) -> None:
    """Construct the store on an empty run directory, `load()` it and close it: what every run
    of a sweep does first. Whatever it raises is raised here, once."""
    import tempfile

    from ..diskio import Door

    with tempfile.TemporaryDirectory(prefix="bughunt-probe-") as tmp:
        run_dir = Path(tmp) / "run"
        run_dir.mkdir()
        store = cls(run_dir, config, Door(config.fsync))
        store.load()
        store.close()


#: Exit statuses a worker ends with by itself (see `bughunt.worker`): anything else, or a signal
#: but the planned SIGKILL, is the store's doing.
WORKER_EXITS = {0, 1, 2, 69, 74, 75, 130, 143, -9}


def _worker_end(record, point: str) -> dict | None:
    """How a crash run's worker ended, if not as a worker ends: (kind, sentence) as a record."""
    first = re.search(r"first run was not killed at the crash point \(exit (-?\d+)\)",
                      record.error or "")
    for code, which in ((int(first.group(1)) if first else None, "the run killed at"),
                        (record.resume_exit, "the resume after")):
        if code is None or code in WORKER_EXITS:
            continue
        import signal
        what = (f"died by {signal.Signals(-code).name}" if code < 0 else
                f"exited with status {code} (the store's os._exit({code})?)")
        return {"kind": "exit" if code >= 0 else "signal",
                "sentence": f"the worker of {which} {point} {what}", "where": ""}
    return None


def sweep_job(ctx, *, spec: str, config: dict, points: list[str] | None = None, workers: int = 0,
          run_timeout: float = 10.0, base_dir: str | None = None, model: dict | None = None,
          tag: str = "sweep") -> dict:
    """A worker killed at every crash point (or `points`) and resumed, with the store `spec`."""
    from .. import experiment
    from ..config import RunConfig

    config = RunConfig.from_json(config)
    cls = store_class(spec)
    child.set_state(PROBING)
    probe(cls, config)
    child.set_state(None)
    served = None
    if model:
        from ..llm import ServedModel
        served = ServedModel(model["url"], Path(model["bill"]), model["name"])
    all_points = experiment.crash_points(config, served is not None)
    if points is not None:
        all_points = [p for p in all_points if p.name in set(points)]
    seen = [0]

    def measure(cfg, point, run_dir):
        ctx.status(point=point.name, phase="begin", dir=str(run_dir))
        try:
            try:
                record = experiment.crash_and_resume(cfg, point, run_dir, model=served,
                                                     timeout=run_timeout)
            except subprocess.TimeoutExpired as e:
                which = "run killed at" if "--crash-at" in (e.cmd or []) else "resume after"
                raise _fence.StoreStopped({
                    "kind": "timeout", "where": "", "dir": str(run_dir),
                    "sentence": f"the worker of the {which} {point.name} did not finish within "
                                f"{run_timeout:g} s: a loop or a wait in the store? The lab "
                                "stopped it"}) from None
            except json.JSONDecodeError as e:     # a worker that exited 0 without its report
                raise _fence.StoreStopped({
                    "kind": "exit", "where": "", "dir": str(run_dir),
                    "sentence": f"the worker of the resume after {point.name} exited without its "
                                f"report ({e}): did the store end its process (os._exit)?"}) \
                    from None
            ended = _worker_end(record, point.name)
            if ended:
                raise _fence.StoreStopped({**ended, "dir": str(run_dir)})
            events = [e for e in ctx.events()[seen[0]:] if e.get("kind") != "damaged"]
            if events:                    # the fence refused or stopped the store in a worker
                raise _fence.StoreStopped(events[0])
            return record
        finally:
            ctx.status(point=point.name, phase="end")

    jobs = [(tag, config, p) for p in all_points]
    seen[0] = len(ctx.events())
    with experiment.work_dir(Path(base_dir) if base_dir else None, in_memory=True) as base:
        records = experiment.run_crash_jobs(
            jobs, base, workers or None, measure=measure,
            progress=lambda done, total: ctx.status(progress=[done, total]),
            discard=base_dir is None)
    return {"records": [dataclasses.asdict(r) for r in records],
            "call": served is not None}


def worker_job(ctx, *, argv: list[str]) -> dict:
    """The worker, as `python -m bughunt run ARGV` runs it (its report on this process's stdout)."""
    from .. import worker

    return {"code": worker.main(list(argv), prog="python -m bughunt run")}
