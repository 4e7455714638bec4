"""`python -m bughunt.bench` (or `make bench`): what the lab costs, as ratios measured in one run.

These machines are noisy, so every figure is a ratio of two things measured in the same run, with
the absolute numbers beside it:

1. **Sweep throughput.** Crash+resume pairs per second for the lesson's five sweeps (fork server,
   one worker thread per core), against the naive way: a fresh interpreter for every process, one
   pair after the other. Targets: the whole lesson in 8 s or less, at least 4x the naive rate.
2. **Checkpoint write cost.** Each store's checkpoint write through the lab's I/O door, against the
   floor: the least code doing the same durable work (json.dumps of the same record + os.write;
   + os.fsync; a temp file, write, fsync, replace, directory fsync). Target: at most 1.5x the floor.
   Where the time goes: serialization, checksum, the write syscall, fsync.
3. **Recovery against log length.** Resume time (the worker's own recovery clock) and peak memory
   for 100 to 100,000 pages, pure log against log + snapshot every N pages. Target: at 100,000
   events, recovery with snapshots at least 50x faster than a full replay.
4. **The model over HTTP (lesson 11).** The local model server's start (process start to its
   ready line; target: under 0.5 s), one model call through the real `openai` SDK to it against
   one call of the in-process MockModel, and one crash+resume pair of the worker asking the
   server (`--model-url`) against the same pair with the in-process model, interleaved, on the
   same crash points: the ratios are why the other lessons' sweeps keep the in-process model.
5. **The book.** `make book` from the stored notebooks, never executed (target: under 2 minutes
   on 2 cores; tests/test_book.py builds it with every network connection refused).
6. **The explorer.** The CPU a program's run takes under strace against the same run without (the trace
   overhead, a ratio), and crash states checked per second (`python -m bughunt explore`, Linux).
7. **The tests.** `make test-fast` and `make test` (tests/tiers.py, in a checkout), each tier's
   wall time. Targets on 2 cores: the fast tier in 3 minutes, everything in 10. Last, and only
   from a checkout with tests/ (`--only tests` runs just this).

Results go to a CSV (`--csv`, default bench-results/bench.csv) and a printed table. POSIX only.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import statistics
import sys
import tempfile
import time
import zlib
from contextlib import contextmanager
from pathlib import Path

from .config import CONFIG_FILE, OneSentenceParser, RunConfig, dumps
from .diskio import Door
from .events import apply_event, initial_state
from .interrupts import Interrupted, deferred, how, interruptible
from .experiment import (LESSON_CONFIGS, crash_points, default_workers, kill_random, lesson,
                         ram_dir, run_crash_jobs, run_worker, work_dir)
from .stores import LOG_FILE, SNAPSHOT_FILE, records
from .stores.snapshot import SNAPSHOT_FORMAT, write_snapshot
from .world import BILL_FILE, TRACKER_FILE, Site, Tracker, report_key

ROWS: list[dict] = []        # every row measured in this process, in order


def take_rows(since: int) -> list[dict]:
    """The rows measured since `since` (len(ROWS) before a measurement)."""
    return ROWS[since:]


def row(section: str, case: str, value: float, unit: str, *, floor: float | None = None,
        ratio: float | None = None, target: str = "", met: bool | None = None, note: str = ""):
    r = {"section": section, "case": case, "value": round(value, 6), "unit": unit,
         "reference": None if floor is None else round(floor, 6),
         "ratio": None if ratio is None else round(ratio, 2), "target": target,
         "met": "" if met is None else ("yes" if met else "NO"), "note": note}
    ROWS.append(r)
    return r


@contextmanager
def forkserver_off():
    old = os.environ.get("BUGHUNT_FORKSERVER")
    os.environ["BUGHUNT_FORKSERVER"] = "0"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("BUGHUNT_FORKSERVER", None)
        else:
            os.environ["BUGHUNT_FORKSERVER"] = old


# --- 1. sweep throughput -------------------------------------------------------------------------

def _lesson_seconds(ram_dir: str | None = None) -> tuple[float, dict]:
    """One `python -m bughunt lesson` in this process (warm fork servers), its wall time."""
    old = os.environ.get("BUGHUNT_RAM_DIR")
    if ram_dir is not None:
        os.environ["BUGHUNT_RAM_DIR"] = ram_dir
    try:
        t0 = time.perf_counter()
        result = lesson()
        return time.perf_counter() - t0, result
    finally:
        if ram_dir is not None:
            if old is None:
                os.environ.pop("BUGHUNT_RAM_DIR", None)
            else:
                os.environ["BUGHUNT_RAM_DIR"] = old


def sweep_throughput(naive_pairs: int = 40, runs: int = 3) -> None:
    jobs = [(tag, cfg, p) for tag, cfg in LESSON_CONFIGS.items() for p in crash_points(cfg)]
    _lesson_seconds()                                    # start the fork servers
    times = []
    for _ in range(runs):
        seconds, result = _lesson_seconds()
        times.append(seconds)
    fast_s = statistics.median(times)
    disk_s, _ = _lesson_seconds("")                       # the same, run dirs on the disk
    fast_rate = result["pairs"] / fast_s
    sample = jobs[:: max(1, len(jobs) // naive_pairs)][:naive_pairs]
    with forkserver_off(), work_dir() as base:
        t0 = time.perf_counter()
        run_crash_jobs(sample, base, workers=1)
        naive_s = time.perf_counter() - t0
    naive_rate = len(sample) / naive_s
    row("sweep", f"python -m bughunt lesson (median of {runs}, fork server, all cores)", fast_s,
        "s", target="<= 3 s", met=fast_s <= 3,
        note=f"{result['pairs']} pairs, figures match the source text: "
             f"{result['figures'] == result['lesson']}; runs: "
             f"{', '.join(f'{t:.2f}' for t in times)} s; {default_workers()} cores")
    row("sweep", "the lesson with its run dirs on the disk vs in RAM (BUGHUNT_RAM_DIR)", disk_s,
        "s", floor=fast_s, ratio=disk_s / fast_s,
        note="a kill -9 leaves the same bytes on either; the disk adds SQLite's and the config's "
             "fsyncs and the unlinks")
    row("sweep", "pairs per second: fork server vs naive (fresh interpreter, sequential)",
        fast_rate, "pairs/s", floor=naive_rate, ratio=fast_rate / naive_rate, target=">= 4x",
        met=fast_rate / naive_rate >= 4,
        note=f"naive measured on {len(sample)} pairs: {1000 * naive_s / len(sample):.0f} ms/pair; "
             f"fork server {1000 * fast_s / result['pairs']:.1f} ms/pair (wall)")


# --- 2. checkpoint write cost --------------------------------------------------------------------

def _median_ns(fn, n: int) -> float:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - t0)
    return statistics.median(samples)


def _interleaved(ours, floor, n: int, rounds: int = 5) -> tuple[float, float]:
    """Medians of `ours` and `floor`, measured in alternating rounds so load hits both alike."""
    a, b = [], []
    for _ in range(rounds):
        a.append(_median_ns(ours, n // rounds))
        b.append(_median_ns(floor, n // rounds))
    return statistics.median(a), statistics.median(b)


def sample_event(page: int = 7) -> dict:
    return {"t": "page_done", "page": page, "tokens": 90, "finding": True, "seq": 9}


def sample_state() -> dict:
    s = initial_state()
    for e in ({"seq": 1, "t": "page_done", "page": 1, "tokens": 56, "finding": False},
              {"seq": 2, "t": "page_done", "page": 2, "tokens": 90, "finding": False},
              {"seq": 3, "t": "intent", "page": 3, "key": "bughunt:p03"},
              {"seq": 4, "t": "page_done", "page": 3, "tokens": 79, "finding": True}):
        s = apply_event(s, e)
    return s


@contextmanager
def scratch(prefix: str, dir=None):
    """A temporary folder, made and removed with Ctrl-C and SIGTERM held back (`deferred`), so
    a signal landing between mkdtemp and the `with`, or inside the removal, leaves none behind
    (TemporaryDirectory has both windows)."""
    path = None
    try:
        with deferred():                 # a signal held here is raised at its end, inside the try
            path = tempfile.mkdtemp(prefix=prefix, dir=dir)
        yield path
    finally:
        if path is not None:
            with deferred():
                shutil.rmtree(path, ignore_errors=True)


def write_costs(n: int = 1000, fsync_n: int = 300) -> None:
    """Each checkpoint write through the door against the least code doing the same durable work."""
    with scratch(prefix="bughunt-bench-", dir=Path.cwd()) as tmp:
        d = Path(tmp)
        event, state = sample_event(), sample_state()

        def append_case(sync: bool, count: int):
            door = Door("always" if sync else "never")
            fd = door.open_append(d / "ours.jsonl")
            raw = os.open(d / "floor.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

            def ours():
                door.append(fd, records.encode(event))

            def floor():
                os.write(raw, (json.dumps(event) + "\n").encode())
                if sync:
                    os.fsync(raw)
            result = _interleaved(ours, floor, count)
            door.close(fd)
            os.close(raw)
            return result

        def snapshot_case(sync: bool, count: int):
            door = Door("always" if sync else "never")
            path, fpath = d / "snap.json", d / "floor.json"
            payload = {"state": state, "log_offset": 1234}

            def ours():
                write_snapshot(door, path, payload, "atomic")

            def floor():
                tmp_path = fpath.with_name(fpath.name + ".tmp")
                fd = os.open(tmp_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.write(fd, (json.dumps({"format": SNAPSHOT_FORMAT, **payload}) + "\n").encode())
                if sync:
                    os.fsync(fd)
                os.close(fd)
                os.replace(tmp_path, fpath)
                if sync:
                    dfd = os.open(d, os.O_RDONLY)
                    os.fsync(dfd)
                    os.close(dfd)
            return _interleaved(ours, floor, count)

        def sqlite_case(sync: str, count: int):
            from .durable import DurableStore
            store = DurableStore(d / f"tasks-{sync}.db", synchronous=sync)
            tid = store.create("k", {}, {"phase": "a"})
            rec = store.get(tid)
            # The floor: plain sqlite3 executing the same statement in the same mode (WAL, the same
            # synchronous setting), one transaction per write, the record serialized and
            # checksummed as the store does; no validation, no recovery bookkeeping.
            floor_db = sqlite3.connect(d / f"floor-{sync}.db", isolation_level=None)
            floor_db.execute("PRAGMA journal_mode=WAL")
            floor_db.execute(f"PRAGMA synchronous={sync}")
            floor_db.execute("CREATE TABLE tasks (id INTEGER PRIMARY KEY, kind TEXT, status TEXT, "
                             "record TEXT, crc INTEGER)")
            floor_db.execute("INSERT INTO tasks VALUES (1, 'k', 'pending', '{}', 0)")

            def ours():
                rec["state"]["checkpoint"]["n"] = rec["state"]["checkpoint"].get("n", 0) + 1
                store.put(rec)

            def floor():
                rec["state"]["checkpoint"]["n"] = rec["state"]["checkpoint"].get("n", 0) + 1
                text = json.dumps(rec, separators=(",", ":"))
                floor_db.execute("UPDATE tasks SET kind=?, status=?, record=?, crc=? WHERE id=?",
                                 ("k", "pending", text, zlib.crc32(text.encode()), 1))
            result = _interleaved(ours, floor, count)
            store.close()
            floor_db.close()
            return result

        cases = [
            ("log append (flush only)", lambda: append_case(False, n)),
            ("log append + fsync", lambda: append_case(True, fsync_n)),
            ("snapshot: tmp + rename, no fsync", lambda: snapshot_case(False, n)),
            ("snapshot: tmp + fsync + rename + dir fsync", lambda: snapshot_case(True, fsync_n)),
            ("SQLite WAL, synchronous NORMAL (lesson 7)", lambda: sqlite_case("NORMAL", n)),
            ("SQLite WAL, synchronous FULL (lesson 7)", lambda: sqlite_case("FULL", fsync_n)),
        ]
        for name, case in cases:
            ours, floor = case()
            row("write", name, ours / 1000, "us", floor=floor / 1000, ratio=ours / floor,
                target="<= 1.5x floor", met=ours / floor <= 1.5)
        breakdown(d, event, n)


def _encode_sorted(obj: dict) -> bytes:
    """records.encode before this benchmark: sorted keys, so reading had to re-serialize."""
    body = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    return body[:-1] + b',"crc":%d}\n' % zlib.crc32(body)


def _decode_sorted(raw: bytes) -> dict:
    obj = json.loads(raw)
    crc = obj.pop("crc")
    if crc != zlib.crc32(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()):
        raise ValueError("checksum mismatch")
    return obj


def breakdown(d: Path, event: dict, n: int) -> None:
    """Where an append's time goes: serialization, checksum, the write syscall, fsync; and the
    record format against the one it replaced (measured here, in the same run)."""
    body = json.dumps(event, separators=(",", ":")).encode()
    line = records.encode(event)
    new_enc, old_enc = _interleaved(lambda: records.encode(event), lambda: _encode_sorted(event), n)
    row("record format", "encode: CRC over the bytes as written vs sorted-key canonical form",
        new_enc / 1000, "us", floor=old_enc / 1000, ratio=new_enc / old_enc,
        note="reference = the previous format, measured in the same run")
    old_line = _encode_sorted(event)[:-1]
    new_dec, old_dec = _interleaved(lambda: records.decode(line[:-1]),
                                    lambda: _decode_sorted(old_line), n)
    row("record format", "decode: one CRC + one json.loads vs parse + re-serialize", new_dec / 1000,
        "us", floor=old_dec / 1000, ratio=new_dec / old_dec,
        note="reference = the previous format, measured in the same run")
    fd = os.open(d / "parts.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    parts = [
        ("json.dumps of the record (the floor's serialization)", lambda: json.dumps(event)),
        ("records.encode (serialization + CRC-32, ours)", lambda: records.encode(event)),
        ("zlib.crc32 of the record", lambda: zlib.crc32(body)),
        ("os.write of one line", lambda: os.write(fd, line)),
    ]
    for name, fn in parts:
        row("where the time goes", name, _median_ns(fn, n) / 1000, "us")
    row("where the time goes", "os.fsync after one line",
        _median_ns(lambda: (os.write(fd, line), os.fsync(fd)), 200) / 1000, "us")
    os.close(fd)


# --- 3. recovery against log length --------------------------------------------------------------

def synthetic_run(run_dir: Path, config: RunConfig) -> int:
    """Write a finished run of `config` directly (no processes): config, log, snapshot, and
    the tracker with the report of every bug page.

    The files are exactly what a worker would have written for a clean run; only the bill is left
    out, since recovery never reads it (the tracker it does: every report the checkpoint counts
    must be there). Returns the number of events.
    """
    run_dir.mkdir(parents=True)
    (run_dir / CONFIG_FILE).write_bytes(dumps(config))
    site = Site.load(config.pages)
    bugs = set(site.bug_pages)
    state, size, n, chunks = initial_state(), 0, 0, []      # n: events, and lines
    snapshot = None
    for page in range(1, config.pages + 1):
        events = []
        if page in bugs:
            events.append({"t": "intent", "page": page, "key": report_key(config.task_id, page)})
        events.append({"t": "page_done", "page": page, "tokens": 50, "finding": page in bugs})
        for e in events:
            n += 1
            e = {**e, "seq": n}
            state = apply_event(state, e)
            line = records.encode(e)
            chunks.append(line)
            size += len(line)
        every = config.snapshot_every
        if every and page % every == 0:
            snapshot = {"state": state, "log_offset": size, "log_line": n}
    (run_dir / LOG_FILE).write_bytes(b"".join(chunks))
    if snapshot is not None:
        (run_dir / SNAPSHOT_FILE).write_bytes(records.encode({"format": SNAPSHOT_FORMAT,
                                                              **snapshot}))
    tracker = sqlite3.connect(run_dir / TRACKER_FILE)       # one transaction, not one per report
    tracker.execute(Tracker.SCHEMA)
    tracker.executemany("INSERT INTO reports (page, idempotency_key, title, pid, filed_at) "
                        "VALUES (?, ?, ?, 0, 0)", [(p, report_key(config.task_id, p),
                                                    site.page(p).bug) for p in sorted(bugs)])
    tracker.commit()
    tracker.close()
    # its calls are not billed here: an empty bill (a missing one beside reports is refused)
    (run_dir / BILL_FILE).touch()
    return n


def recovery_scaling(sizes=(100, 1_000, 10_000, 100_000), every: int = 100) -> None:
    with work_dir() as base:
        for pages in sizes:
            results = {}
            for name, config in (("pure log", RunConfig(pages=pages)),
                                 (f"log + snapshot every {every}",
                                  RunConfig(pages=pages, snapshot_every=every))):
                run_dir = base / f"{pages}-{config.snapshot_every}"
                events = synthetic_run(run_dir, config)
                with forkserver_off():            # a fresh interpreter: peak memory is its own
                    proc = run_worker(run_dir, config, timeout=600)
                report = json.loads(proc.stdout)
                results[name] = report
                row("recovery", f"{name}, {pages} pages ({events} events)",
                    report["recovery_ns"] / 1e6, "ms",
                    note=f"replayed {report['replayed_events']}, peak memory "
                         f"{report['peak_rss_kb'] / 1024:.1f} MiB")
            full, snap = results["pure log"], results[f"log + snapshot every {every}"]
            ratio = full["recovery_ns"] / snap["recovery_ns"]
            row("recovery", f"full replay vs snapshot, {pages} pages", ratio, "x",
                floor=snap["recovery_ns"] / 1e6, ratio=ratio,
                target=">= 50x at 100,000 pages" if pages >= 100_000 else "",
                met=(ratio >= 50) if pages >= 100_000 else None,
                note=f"memory {full['peak_rss_kb'] / 1024:.1f} vs "
                     f"{snap['peak_rss_kb'] / 1024:.1f} MiB")


# --- 4. the model over HTTP ----------------------------------------------------------------------

def model_call_cost(calls: int = 200, starts: int = 5) -> None:
    """Lesson 11's model server and SDK against the in-process mock model, measured in one run."""
    import subprocess

    from .llm import OpenAIModel
    from .modelserver import ServerProcess
    from .world import MockModel

    with scratch(prefix="bughunt-bench-") as tmp:
        d = Path(tmp)
        start_s = []
        for i in range(starts):
            t0 = time.perf_counter()
            server = ServerProcess(d / f"start-{i}.jsonl")
            start_s.append(time.perf_counter() - t0)
            server.stop()
        start = statistics.median(start_s)
        row("model", "model server start: process start to ready line", start * 1000, "ms",
            target="< 500 ms", met=start < 0.5, note=f"median of {starts}")
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import openai"], check=True)
        row("model", "a fresh interpreter that imports openai", (time.perf_counter() - t0) * 1000,
            "ms", note="what a call process pays before its first call, unless forked warm")
        import openai

        from .llm import warm_sdk

        warm_sdk()
        build = _median_ns(lambda: openai.OpenAI(api_key="x", base_url="http://127.0.0.1:9/v1")
                           .close(), 5)
        row("model", "building the SDK's client, imports already warm", build / 1e6, "ms",
            note="what each worker process pays once before its first call (its connection "
                 "pool must not come from a fork): mostly httpx building a TLS context")
        site = Site.load()
        mock = MockModel(d, site)
        pages = [1 + i % site.pages for i in range(calls)]
        with ServerProcess(d / "bill.jsonl") as server:
            for stream in (True, False):
                llm = OpenAIModel(site, base_url=server.base_url, stream=stream)
                llm.ask(1)                                  # the connection, opened once
                http_s, mock_s = [], []
                for page in pages:                          # interleaved: load hits both alike
                    t0 = time.perf_counter()
                    llm.ask(page)
                    http_s.append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    mock.ask(page)
                    mock_s.append(time.perf_counter() - t0)
                llm.close()
                h, m = statistics.median(http_s), statistics.median(mock_s)
                how = "streamed" if stream else "not streamed, keep-alive"
                row("model", f"one call over HTTP ({how}, openai SDK) vs in-process MockModel",
                    h * 1e6, "us",
                    floor=m * 1e6, ratio=h / m, note=f"median of {calls} each" + (
                        "; the SDK's sync stream stops reading at [DONE], so every streamed call "
                        "opens a new connection" if stream else ""))
        mock.close()


def model_pair_cost(pairs: int = 24) -> None:
    """A crash+resume pair of the worker that asks the model server over HTTP against the same
    pair with the in-process model: the same crash points, interleaved, one pair at a time, both
    forked from warm fork servers (the HTTP one has the SDK preloaded)."""
    from .experiment import crash_and_resume
    from .llm import ServedModel
    from .modelserver import ServerProcess

    config = RunConfig(store="log", intent=True, idempotency_key=True)
    points = crash_points(config)
    sample = [points[i * len(points) // pairs] for i in range(pairs)]
    with work_dir() as base, ServerProcess(base / "server-bill.jsonl") as server:
        model = ServedModel(server.base_url, server.bill_path)
        for warm in ("warm-mock", "warm-http"):          # start both fork servers first
            crash_and_resume(config, points[0], base / warm,
                             model=model if warm == "warm-http" else None)
        http_s, mock_s, redone_ok = [], [], True
        for i, point in enumerate(sample):
            t0 = time.perf_counter()
            r = crash_and_resume(config, point, base / f"http-{i}", model=model)
            http_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            m = crash_and_resume(config, point, base / f"mock-{i}")
            mock_s.append(time.perf_counter() - t0)
            redone_ok &= r.redone_model_calls == m.redone_model_calls and r.correct and m.correct
    h, m = statistics.median(http_s), statistics.median(mock_s)
    row("model", "crash+resume pair: worker asking the server over HTTP vs in-process model",
        h * 1000, "ms", floor=m * 1000, ratio=h / m,
        note=f"median of {pairs} pairs each, the same crash points, one pair at a time; "
             f"both judged alike (same redone calls, correct): {redone_ok}")


# --- report --------------------------------------------------------------------------------------

# --- 5. the conformance suite, interrupts, random kills ------------------------------------------

def conformance_cost() -> None:
    """The whole conformance suite over every design of the lab's stores, in this process."""
    from .conformance import conform, lab_designs

    t0 = time.perf_counter()
    reports = [conform(cfg) for cfg in lab_designs().values()]
    seconds = time.perf_counter() - t0
    states = sum(r.states for r in reports)
    row("conformance", f"every rule at every crash state, {len(reports)} designs", seconds, "s",
        target="<= 3 s", met=seconds <= 3,
        note=f"{states} crash states ({states / seconds:.0f} per second); designs breaking a "
             f"rule by design: {sum(not r.ok for r in reports)}")


def interrupt_latency(tries: int = 10) -> None:
    """SIGINT to a running `python -m bughunt lesson`, `tries` times, spread evenly over its whole
    run (from its imports and first fork servers to its last pairs): the worst time until it has
    exited, every worker stopped and every temp dir removed. Each try has a TMPDIR of its own
    and, where the machine has one, a RAM dir of its own for the run directories, as a lesson
    run keeps them there (on a disk a worker inside its config's fsync cannot die until the
    fsync returns)."""
    ram = ram_dir()

    @contextmanager
    def folders():
        with scratch(prefix="bughunt-bench-int-") as tmp, \
                scratch(prefix="bughunt-bench-int-", dir=ram) as runs:
            yield tmp, runs

    def start(tmp: str, runs: str) -> subprocess.Popen:
        env = {**os.environ, "TMPDIR": tmp, "BUGHUNT_RAM_DIR": runs}
        return subprocess.Popen([sys.executable, "-m", "bughunt", "lesson"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    with folders() as (tmp, runs):
        t0 = time.perf_counter()
        start(tmp, runs).communicate(timeout=600)
        whole = time.perf_counter() - t0          # one uninterrupted run, start to exit
    moments = [whole * (i + 0.5) / tries for i in range(tries)]
    times, codes, finished, left, said = [], set(), 0, 0, set()
    for at in moments:
        for _attempt in range(4):                 # every try an interrupt, not a finished run
            with folders() as (tmp, runs):
                proc = start(tmp, runs)
                time.sleep(at)                    # a moment of the run: a time, by design
                if proc.poll() is not None:       # this run was faster than the first: again,
                    finished += 1                 # a little earlier
                    proc.communicate()
                    at *= 0.6
                    continue
                t0 = time.perf_counter()
                proc.send_signal(signal.SIGINT)
                _, err = proc.communicate(timeout=60)
                times.append(time.perf_counter() - t0)
                codes.add(proc.returncode)
                left += len(os.listdir(tmp)) + len(os.listdir(runs))
                said.add("a traceback" if "Traceback" in err else
                         "one line" if len(err.strip().splitlines()) == 1 else "more lines")
                break
    worst = max(times, default=0.0)
    clean = codes <= {130} and not left and said <= {"one line"}
    row("interrupt", f"Ctrl-C to exit, a running lesson (worst of {len(times)})", worst, "s",
        target="<= 1 s", met=len(times) >= tries and worst <= 1 and clean,
        note=f"at {', '.join(f'{t:.1f}' for t in moments)} s of a {whole:.1f} s run; median "
             f"{statistics.median(times) if times else 0:.2f} s; run dirs in {ram or 'TMPDIR'}; "
             f"exits {sorted(codes)}; stderr {', '.join(sorted(said))}; temp dirs left {left}; "
             f"runs that finished before their signal (tried again earlier) {finished}")


def grade_cost(runs: int = 3) -> None:
    """Grading lesson 9's reference solution, behind the boundary: the suite and the sweep, the
    processes started and ended (median of `runs`)."""
    from .lab.lessons.l09_your_own_store import REFERENCE
    from .grader import grade

    seconds = []
    with scratch(prefix="bughunt-bench-grade-") as tmp:
        path = Path(tmp) / "reference_store.py"
        path.write_text(REFERENCE)
        for _ in range(runs):
            g = grade(f"{path}:MyStore")
            seconds.append(g.seconds)
    median = statistics.median(seconds)
    row("grade", f"lesson 9's reference solution, graded (median of {runs})", median, "s",
        target="<= 15 s", met=median <= 15 and g.passed,
        note=f"{g.states} crash states, {len(g.records)} crash points; passed: {g.passed}")


def grade_interrupt_latency(tries: int = 3) -> None:
    """SIGINT to `python -m bughunt.grader` and SIGTERM to `python -m bughunt conformance
    --store`, while the suite runs a slow store: the time until the command has exited, the
    store's processes ended and the temporary folders removed."""
    from .lab.lessons.l09_your_own_store import REFERENCE

    signature = "    def commit(self, state, event, *, mid):\n"
    slow = REFERENCE.replace(signature, signature + "        __import__('time').sleep(0.05)\n")
    for label, argv, signum, code in (
            ("Ctrl-C to exit, a running grade", ["-m", "bughunt.grader"], signal.SIGINT, 130),
            ("SIGTERM to exit, conformance --store", ["-m", "bughunt", "conformance"],
             signal.SIGTERM, 143)):
        worst, codes, left = 0.0, set(), []
        for _ in range(tries):
            with scratch(prefix="bughunt-bench-gint-") as tmp:
                (Path(tmp) / "slow_store.py").write_text(slow)
                work = Path(tmp) / "tmp"
                work.mkdir()
                env = {**os.environ, "TMPDIR": str(work), "BUGHUNT_RAM_DIR": str(work)}
                proc = subprocess.Popen([sys.executable, *argv, "--store", "slow_store.py:MyStore"],
                                        cwd=tmp, env=env, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and proc.poll() is None and not _suite_in(work):
                    time.sleep(0.01)
                t0 = time.perf_counter()
                proc.send_signal(signum)
                proc.wait(timeout=60)
                worst = max(worst, time.perf_counter() - t0)
                codes.add(proc.returncode)
                left += list(work.iterdir())
        row("interrupt", f"{label} (worst of {tries})", worst, "s", target="<= 1 s",
            met=worst <= 1 and not left and codes == {code},
            note=f"exit {sorted(codes)}; temp dirs left: {len(left)}")


def _suite_in(folder: Path) -> bool:
    """A conformance suite is checking crash states somewhere under `folder`."""
    try:
        return any(True for _ in folder.glob("**/bughunt-conformance-*/s1"))
    except OSError:                      # a folder removed while it was listed
        return False


def random_kill_placement(tries: int = 40) -> None:
    """Where 40 random kills land: the share of real kills inside the page loop (1 to 11 model
    calls billed), which the random-kill experiment needs to mean anything."""
    result = kill_random(LESSON_CONFIGS["snapshot"], tries=tries, seed=1)
    kills = [r for r in result["runs"] if r["killed"]]
    inside = sum(1 <= r["calls_before_kill"] <= 11 for r in kills)
    share = inside / len(kills) if kills else 0.0
    row("random kills", f"real kills with 1-11 model calls billed ({tries} tries)", share * 100,
        "%", target=">= 50 %", met=share >= 0.5,
        note=f"{len(kills)} real kills, {result['kills_in_page_loop']} in the page loop, "
             f"{result['duplicates_hit']} duplicates; a run's life {result['run_life_ms']:.0f} ms")


# --- 6. the explorer (python -m bughunt explore) --------------------------------------------------

def _children_cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def explore_cost(runs: int = 3, workloads=("json-dump", "sqlite-wal-full")) -> None:
    """What strace costs a program (its run under the explorer's strace against the same run
    without, interleaved, medians), and how many crash states the explorer checks per second
    (each check is one run of the workload's own reader on a copy of the state). Linux only."""
    import shutil as _shutil

    from .explore import trace as T
    from .explore.workloads import explore_workload, workload_command

    if not sys.platform.startswith("linux") or _shutil.which("strace") is None:
        row("explore", "trace overhead", 0, "x", note="skipped: needs Linux and strace")
        return
    def worker(d):
        return [sys.executable, "-m", "bughunt", "run", "--dir", str(d), "--store", "log",
                "--pages", "5"]

    programs = {name: (lambda d, name=name: workload_command(name, d)[0]) for name in workloads}
    programs["the lab's worker, 5 pages"] = worker
    for name, program_in in programs.items():
        plain, traced = [], []
        walls = []
        for i in range(runs + 1):             # the first pair warms the caches, uncounted
            with scratch(prefix="bughunt-bench-explore-") as tmp:
                c0, t0 = _children_cpu(), time.perf_counter()
                subprocess.run(program_in(Path(tmp) / "a"), check=True,
                               stdout=subprocess.DEVNULL)
                c1, t1 = _children_cpu(), time.perf_counter()
                (Path(tmp) / "w").mkdir()
                T.run_traced(program_in(Path(tmp) / "b"), Path(tmp) / "w")
                c2, t2 = _children_cpu(), time.perf_counter()
                if i:
                    plain.append(c1 - c0)
                    traced.append(c2 - c1)
                    walls.append((t1 - t0, t2 - t1))
        p, t = statistics.median(plain), statistics.median(traced)
        wall_p, wall_t = (statistics.median(w[k] for w in walls) for k in (0, 1))
        # CPU seconds (the program's and strace's, user + system): less shaken than wall time
        # by the other programs sharing a loaded machine.
        row("explore", f"{name}: CPU of a run under strace vs without", t, "s", floor=p,
            ratio=t / p, target="<= 12x", met=t / p <= 12,
            note=f"wall {wall_t:.2f} s vs {wall_p:.2f} s; tracing slows most where a program "
                 "makes many small system calls")
        if name not in workloads:
            continue
        with scratch(prefix="bughunt-bench-explore-") as tmp:
            r = explore_workload(name, Path(tmp) / "d")
        states = r.kill.states + sum(m.states for m in r.power.values())
        row("explore", f"{name}: crash states checked per second", states / r.seconds, "1/s",
            note=f"{states} states ({r.checks} distinct disks, each read by the workload's "
                 f"checker) in {r.seconds:.1f} s, the trace included")

def book_build() -> None:
    """`make book`'s build, timed: Sphinx over every stored notebook, into a temp dir."""
    try:
        import myst_nb  # noqa: F401
    except ImportError:
        print("bench: the book's tools are not installed (make setup-book): book not measured",
              file=sys.stderr)
        return
    with scratch(prefix="bughunt-bench-book-") as tmp:
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "bughunt.book", "--out", tmp,
                               "--repository", ""], capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        pages = len(list(Path(tmp, "html").glob("*.html")))
    row("book", f"make book: {pages} pages from the stored notebooks, {os.cpu_count()} cores",
        seconds, "s", target="<= 120 s", met=proc.returncode == 0 and seconds <= 120,
        note="" if proc.returncode == 0 else f"the build failed: {proc.stderr.strip()[-300:]}")


def tier_times(tiers: Path | None = None) -> None:
    """Both test tiers, as `make test-fast` and `make test` run them (tests/tiers.py), timed by
    the tiers' own report: one row per tier, then each one's total against its target."""
    tiers = tiers or Path(__file__).resolve().parent.parent / "tests" / "tiers.py"
    if not tiers.is_file():
        print("bench: no tests/tiers.py here (an installed package): tests not measured",
              file=sys.stderr)
        return
    for tier, make in (("fast", "make test-fast"), ("full", "make test")):
        with scratch(prefix="bughunt-bench-tiers-") as tmp:
            report = Path(tmp) / "tiers.json"
            # Not captured: the tiers' own output (each tier's progress and failures) is shown.
            # Stopped here (Ctrl-C, SIGTERM), the tiers are asked to stop by SIGTERM, which they
            # handle (their pytest runs, kernels and folders ended), never killed out of hand.
            proc = subprocess.Popen([sys.executable, str(tiers), tier, "--report", str(report)],
                                    cwd=tiers.parent.parent)
            try:
                proc.wait()
            except BaseException:
                proc.send_signal(signal.SIGTERM)
                proc.wait()
                raise
            if not report.is_file() or not report.read_text().strip():
                row("tests", make, 0, "s", note=f"did not report (exit {proc.returncode})")
                continue
            done = json.loads(report.read_text())
        for t in done["tiers"]:
            row("tests", f"{make}: {t['name']}", t["seconds"], "s",
                note="" if t["exit"] == 0 else f"failed (exit {t['exit']})")
        ok = proc.returncode == 0
        row("tests", f"{make}, {os.cpu_count()} cores, wall", done["seconds"], "s",
            target=f"<= {done['target_s']} s", met=ok and done["seconds"] <= done["target_s"],
            note="" if ok else f"a tier failed (exit {proc.returncode})")


def print_table(rows: list[dict]) -> None:
    cols = ["section", "case", "value", "unit", "reference", "ratio", "target", "met"]
    text = [[str("" if r[c] is None else r[c]) for c in cols] for r in rows]
    widths = [max(len(c), *(len(t[i]) for t in text)) for i, c in enumerate(cols)]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
    for t in text:
        print("  ".join(v.ljust(w) for v, w in zip(t, widths)).rstrip())
    for r in rows:
        if r["note"]:
            print(f"  - {r['case']}: {r['note']}")


SECTIONS = ["sweep", "conformance", "grade", "interrupt", "random", "write", "recovery", "model",
            "explore", "book", "tests"]


def main(argv: list[str] | None = None) -> int:
    parser = OneSentenceParser(prog="python -m bughunt.bench", description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--csv", type=Path, default=Path("bench-results/bench.csv"))
    parser.add_argument("--quick", action="store_true",
                        help="small sizes (a smoke test, not a measurement)")
    parser.add_argument("--only", choices=SECTIONS, action="append")
    args = parser.parse_args(argv)
    if args.csv.exists() and not args.csv.is_file():
        parser.error(f"--csv {args.csv}: not a file")
    only = set(args.only or SECTIONS)
    try:
        with interruptible():
            measure(only, args.quick)
    except Interrupted as e:
        print(f"bench: {e.what} by {how(e.signum)}: nothing written to {args.csv}, every temporary "
              "folder removed", file=sys.stderr)
        return e.code
    args.csv.parent.mkdir(parents=True, exist_ok=True)
    with open(args.csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(ROWS[0]))
        w.writeheader()
        w.writerows(ROWS)
    print_table(ROWS)
    print(f"\n(written to {args.csv})")
    return 0


def measure(only: set[str], quick: bool) -> None:
    """Every section in `only` (ROWS gets their rows)."""
    if "sweep" in only:
        sweep_throughput(naive_pairs=6 if quick else 40, runs=1 if quick else 3)
    if "conformance" in only:
        conformance_cost()
    if "grade" in only:
        grade_cost(runs=1 if quick else 3)
    if "interrupt" in only:
        interrupt_latency(tries=3 if quick else 10)
        grade_interrupt_latency(tries=1 if quick else 3)
    if "random" in only:
        random_kill_placement(tries=10 if quick else 40)
    if "write" in only:
        write_costs(n=100 if quick else 2000, fsync_n=20 if quick else 300)
    if "recovery" in only:
        recovery_scaling((100, 1_000) if quick else (100, 1_000, 10_000, 100_000))
    if "model" in only:
        model_call_cost(calls=10 if quick else 200, starts=1 if quick else 5)
        model_pair_cost(pairs=4 if quick else 24)
    if "explore" in only:
        explore_cost(runs=1, workloads=("json-dump",)) if quick else explore_cost()
    if "book" in only:
        book_build()
    if "tests" in only and quick:
        print("bench: the test tiers are not measured with --quick", file=sys.stderr)
    elif "tests" in only:
        tier_times()


if __name__ == "__main__":
    sys.exit(main())
