"""One process of a framework sweep: trace a clean run, crash at a point, resume, or rebuild.

    python -m bughunt.frameworks.child JOB_JSON        (or forked by the fork server)

The job names the adapter, its mode and resume style, the run directory, the world's settings and
the process's role:

- `trace`   run to the end, recording every crash point reached (name#occurrence, page, detail);
- `crash`   run until the named point, then die there by a real SIGKILL (if the run ends without
            reaching it, report that instead: a framework's background writer may not get there);
- `resume`  run to the end on the same directory (the adapter's resume code decides what to redo);
- `rebuild` read the final state back from the framework's store, without running the agent.

It prints one JSON object on stdout and exits 0; a crashing adapter prints its traceback and exits 1.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from .contract import World, WorldSettings, adapter_class, instrument

ROLES = ("trace", "crash", "resume", "rebuild")


class Tracer:
    """The sweep's reach: counts every point by name, records it, and kills at the target.

    Thread-safe, because frameworks reach their write points from background threads. The page of
    a point that names none (a framework write) is the page the world last worked on.
    """

    def __init__(self, target: str | None = None):
        self.target = target
        self.counts: Counter = Counter()
        self.events: list[dict] = []
        self.page = 0
        self._lock = threading.Lock()
        self._t0 = time.perf_counter_ns()

    def __call__(self, name: str, **detail) -> None:
        with self._lock:
            self.counts[name] += 1
            point = f"{name}#{self.counts[name]}"
            self.page = detail.pop("page", self.page)
            self.events.append({"point": point, "page": self.page,
                                "t_ms": (time.perf_counter_ns() - self._t0) / 1e6, **detail})
            if point == self.target:
                # A real SIGKILL, from whichever thread got here: no handler, no flush, no finally.
                os.kill(os.getpid(), signal.SIGKILL)


def run_job(job: dict) -> dict:
    """Do what the job says in this process; the JSON-able result."""
    role = job["role"]
    cls = adapter_class(job["adapter"])
    adapter = cls(mode=job["mode"], resume=job["resume"])
    run_dir = Path(job["run_dir"])
    if role == "rebuild":
        return {"rebuilt": adapter.rebuild(run_dir)}
    tracer = Tracer(job.get("target") if role == "crash" else None)
    instrument(adapter, tracer)
    world = World(run_dir, WorldSettings(**job["world"]), tracer)
    t0 = time.perf_counter()
    final = adapter.run(run_dir, world, tracer)
    seconds = time.perf_counter() - t0
    world.close()
    out = {"final": final, "seconds": seconds, "trace": tracer.events}
    if role == "crash":
        out["not_reached"] = True
    return out


def main(argv: list[str]) -> int:
    try:
        job = json.loads(argv[0])
        if job.get("role") not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}")
    except (IndexError, ValueError) as e:
        print(f"bughunt.frameworks.child: expected one JSON job argument ({e})", file=sys.stderr)
        return 2
    result = run_job(job)
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    # Frameworks leave threads behind (DBOS's queue and recovery threads); a fork-server child
    # ends with os._exit too, so both ways of starting a child end the same way.
    os._exit(code)
