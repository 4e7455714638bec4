"""The lab's one cache of results: in a kernel, each experiment runs once per settings, until
`reset()` (a panel's Reset button calls it).

A lesson's default experiment, its panel and its exercise checks often need the same sweep; the
cache makes sure a crash point already killed with these settings is not killed again. Everything
in it is a real measurement of this kernel's session, never a stored figure.

- `sweep(config)`, `sweeps({name: config})`: every crash point of a configuration (several run
  together in one pool);
- `point(config, "p3.after_submit")`: one crash+resume;
- `seed(config, records)`: hand over a sweep a cell already ran by other means;
- `memoized`: the same for any other experiment function of a lesson module.
"""

from __future__ import annotations

import functools
import tempfile
import threading
from pathlib import Path

from ..config import RunConfig
from ..experiment import (CrashRun, crash_and_resume, crash_point, crash_points, run_crash_jobs,
                          work_dir)

_STORE: dict = {}
_LOCK = threading.RLock()


def reset() -> None:
    """Forget every result: the next call of anything here runs for real again."""
    with _LOCK:
        for key in list(_STORE):
            if key[0] == "table":
                _STORE[key].clear()        # a module holds it: empty it, keep the object
            else:
                del _STORE[key]


def table(name: str) -> dict:
    """A dict of results a lesson module keeps its own way (by its own keys), emptied by
    `reset()` like everything else here."""
    with _LOCK:
        return _STORE.setdefault(("table", name), {})


def remember(key, compute):
    """The result cached under `key`, computed by `compute()` the first time."""
    with _LOCK:
        if key in _STORE:
            return _STORE[key]
    value = compute()
    with _LOCK:
        return _STORE.setdefault(key, value)


def memoized(fn):
    """Cache `fn`'s results by its arguments (which must be hashable; a `progress` callback is
    not part of the key) until `reset()`."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        key = (fn.__module__, fn.__qualname__, args,
               tuple(sorted((k, v) for k, v in kwargs.items() if k != "progress")))
        return remember(key, lambda: fn(*args, **kwargs))
    return wrapper


def point(config: RunConfig, spec: str | int) -> CrashRun:
    """One crash+resume at `spec` (a name like "p3.after_submit", or its number). Raises
    NoSuchPoint for a point `config` does not have."""
    target = crash_point(config, spec)

    def run() -> CrashRun:
        with tempfile.TemporaryDirectory(prefix="bughunt-point-") as tmp:
            return crash_and_resume(config, target, Path(tmp) / "run")
    return remember(("point", config, target.name), run)


def _cache_key(config: RunConfig, measure) -> tuple:
    return ("sweep", config) if measure is None else ("sweep", config, measure.__module__,
                                                      measure.__qualname__)


def sweep_once(config: RunConfig, progress=None, *, measure=None) -> list[CrashRun]:
    """Every crash point of `config`, killed and resumed (`measure`: another way to measure each
    point than `crash_and_resume`, with the same arguments)."""
    return sweeps_once({"sweep": config}, progress, measure=measure)["sweep"]


def sweeps_once(configs: dict[str, RunConfig], progress=None, *,
           measure=None) -> dict[str, list[CrashRun]]:
    """Several sweeps by name; those not run yet run together, in one pool."""
    with _LOCK:
        todo = {name: cfg for name, cfg in configs.items()
                if _cache_key(cfg, measure) not in _STORE}
    tags = {name: f"s{i}" for i, name in enumerate(todo)}
    jobs = [(tags[name], cfg, p) for name, cfg in todo.items() for p in crash_points(cfg)]
    if jobs:
        with work_dir(in_memory=True) as base:
            records = run_crash_jobs(jobs, base, progress=progress, measure=measure)
        for name, cfg in todo.items():
            mine = [r for r in records if r.sweep == tags[name]]
            remember(_cache_key(cfg, measure), lambda mine=mine: mine)
    with _LOCK:
        return {name: _STORE[_cache_key(cfg, measure)] for name, cfg in configs.items()}


def cached(config: RunConfig, *, measure=None) -> list[CrashRun] | None:
    """The sweep of `config` this kernel already ran (with `measure`), or None: nothing runs."""
    with _LOCK:
        return _STORE.get(_cache_key(config, measure))


def seed(config: RunConfig, records: list[CrashRun]) -> None:
    """Hand over a sweep of `config` a cell already ran, so a panel's first Run shows it without
    killing every point again."""
    with _LOCK:
        _STORE[("sweep", config)] = list(records)
