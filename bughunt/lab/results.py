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

**One test run, each experiment once.** `make test` runs every lesson three ways: the notebooks
(each in its own kernel), the tests, and `python -m bughunt claims`. It names a folder in
`BUGHUNT_RESULTS_DIR` that lives for that run only (made before, removed after); then a result
computed in one process is kept there too, and a later process of the same run reads it instead of
killing every point again. A result is filed under its key and a digest of the lab's code and data
(`code_digest`), so it is never one an older version of the lab produced. Nothing outside such a
run reads or writes it (a learner's kernel has no such variable), and a `reset()` stops this
process reading it. The test process only reads it (`use_disk(write=False)`): its tests patch the
experiment layer on purpose, and a faked sweep must never reach a notebook or the claims. A test
that patches below the cache and expects a fresh run calls `reset()` first, as it must anyway for
this process's own cache; one that forgets gets a real result, and fails.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import tempfile
import threading
from pathlib import Path

from ..config import RunConfig
from ..experiment import (CrashRun, crash_and_resume, crash_point, crash_points, run_crash_jobs,
                          work_dir)

_STORE: dict = {}
_LOCK = threading.RLock()
RUN_DIR_VARIABLE = "BUGHUNT_RESULTS_DIR"
_DISK = {"read": True, "write": True}


def use_disk(*, read: bool = True, write: bool = True) -> None:
    """Whether this process reads, and writes, the test run's folder of results (when there is
    one): the test process only reads it (see the module's doc)."""
    _DISK.update(read=read, write=write)


def reading() -> bool:
    """Whether this process still reads the test run's folder of results (`reset()` stops it)."""
    return _DISK["read"]


def digest_of(folders) -> str:
    """One digest of every file in `folders` (names and bytes; `__pycache__` left out)."""
    h = hashlib.sha256()
    for folder in folders:
        for path in sorted(Path(folder).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                h.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


@functools.cache
def code_digest() -> str:
    """A digest of every source and data file of the lab (the package and `data/`): results of
    another version of the code are never taken for this one's."""
    package = Path(__file__).resolve().parent.parent
    return digest_of((package, package.parent / "data"))


def _disk_path(key) -> Path | None:
    """Where the test run keeps the result of `key`, or None: no run folder, this process does
    not use it, or the key does not name the same thing in another process (an object's id)."""
    folder = os.environ.get(RUN_DIR_VARIABLE)
    if not folder:
        return None
    text = repr(key)
    if " at 0x" in text:
        return None
    name = hashlib.sha256(f"{code_digest()}\0{text}".encode()).hexdigest()
    return Path(folder) / f"{name}.pickle"


def _read_kept(path: Path | None):
    if path is None or not _DISK["read"]:
        return _MISSING
    try:
        return pickle.loads(path.read_bytes())
    except FileNotFoundError:
        return _MISSING
    except Exception:                    # noqa: BLE001 - a damaged entry: measure again
        return _MISSING


def _write_kept(path: Path | None, value) -> None:
    """Written whole or not at all (a temporary file renamed), so a reader never sees half."""
    if path is None or not _DISK["write"]:
        return
    try:
        data = pickle.dumps(value)
    except Exception:                    # noqa: BLE001 - not picklable: this process keeps it
        return
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".part-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        return                           # the folder went away (the run ended): keep it here


_MISSING = object()


def reset() -> None:
    """Forget every result: the next call of anything here runs for real again (and this process
    no longer reads the test run's folder of results, if there is one)."""
    _DISK["read"] = False
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
    """The result cached under `key`, computed by `compute()` the first time (or read from the
    test run's folder, when another process of the run computed it)."""
    with _LOCK:
        if key in _STORE:
            return _STORE[key]
    path = _disk_path(key)
    value = _read_kept(path)
    if value is _MISSING:
        value = compute()
        _write_kept(path, value)
    with _LOCK:
        return _STORE.setdefault(key, value)


def recall(key, *, share: bool = True):
    """What `keep(key, ...)` kept in this process, or (`share`) another process of the test run;
    else None. For a lesson module that keeps results its own way (by its own keys)."""
    with _LOCK:
        if key in _STORE:
            return _STORE[key]
    found = _read_kept(_disk_path(key)) if share else _MISSING
    if found is _MISSING:
        return None
    with _LOCK:
        return _STORE.setdefault(key, found)


def keep(key, value, *, share: bool = True) -> None:
    """Keep `value` under `key` until `reset()` (and, `share`, for the rest of the test run)."""
    with _LOCK:
        _STORE[key] = value
    if share:
        _write_kept(_disk_path(key), value)


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
        for cfg in configs.values():
            key = _cache_key(cfg, measure)
            if key not in _STORE:
                found = _read_kept(_disk_path(key))
                if found is not _MISSING:
                    _STORE[key] = found
        todo = {name: cfg for name, cfg in configs.items()
                if _cache_key(cfg, measure) not in _STORE}
    tags = {name: f"s{i}" for i, name in enumerate(todo)}
    jobs = [(tags[name], cfg, p) for name, cfg in todo.items() for p in crash_points(cfg)]
    if jobs:
        with work_dir(in_memory=True) as base:
            records = run_crash_jobs(jobs, base, progress=progress, measure=measure)
        for name, cfg in todo.items():
            mine = [r for r in records if r.sweep == tags[name]]
            key = _cache_key(cfg, measure)
            with _LOCK:
                if key not in _STORE:        # what this process measured (and showed), kept
                    _STORE[key] = mine
                    _write_kept(_disk_path(key), mine)
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
