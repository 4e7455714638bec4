"""Lesson 7's runtime refuses rather than guesses: one runtime per database, its own databases only,
no value that could poison a database, one sentence (never a traceback) for every bad input, and a
clean stop on Ctrl-C or SIGTERM. Real processes throughout; no sleeps (pause handshakes instead)."""

import hashlib
import json
import math
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bughunt.durable import (DurableStore, InvalidValue, Kind, Runtime, StoreBusy,
                             read_tasks)
from bughunt.durable.examples import PAUSE_BANNER, WAIT_BANNER
from bughunt.durable.store import APPLICATION_ID

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "bughunt.durable"]


def durable(*args, **kw):
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=60,
                          **kw)


def start(*args) -> subprocess.Popen:
    return subprocess.Popen([*CLI, *map(str, args)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_line(stream, prefix: str) -> str:
    """Read lines until one starts with `prefix` (the handshake); fail if the stream ends."""
    seen = []
    for line in stream:
        if line.startswith(prefix):
            return line
        seen.append(line)
    raise AssertionError(f"stream ended before {prefix!r}: {''.join(seen[-5:])}")


def ticks(text: str) -> list[int]:
    return [int(m) for m in re.findall(r"^tick (\d+)$", text, re.M)]


def snapshot(folder: Path, skip=("-shm",)) -> dict:
    """Every file in `folder` and its bytes' hash (SQLite's -shm index excepted: it holds no data
    and every reader may rebuild it)."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(folder.iterdir()) if not p.name.endswith(skip)}


def one_sentence(stderr: str, *names: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr and "_tick" not in stderr
    for name in names:
        assert name in lines[0], (name, lines[0])


# --- one runtime per database --------------------------------------------------------------------

@pytest.fixture
def holder(tmp_path):
    """A runtime paused after tick 1 of 3, holding c.db; closing its stdin lets it finish."""
    db = tmp_path / "c.db"
    proc = start("count", "--db", db, "--to", 3, "--pause-after-tick", 1)
    wait_for_line(proc.stderr, PAUSE_BANNER)
    yield db, proc
    if proc.poll() is None:
        proc.kill()
    proc.communicate()


def test_a_second_runtime_on_the_same_database_is_refused_at_once_with_exit_75(holder):
    db, proc = holder
    second = durable("count", "--db", db, "--to", 3)
    assert second.returncode == 75 and ticks(second.stdout) == []
    one_sentence(second.stderr, str(db), "busy", "--wait")
    out, _ = proc.communicate(input="")
    assert proc.returncode == 0 and ticks(out) == [1, 2, 3]       # every tick printed once


def test_with_wait_the_second_runtime_waits_and_takes_over_when_the_first_dies(holder):
    db, proc = holder
    waiter = start("count", "--db", db, "--to", 3, "--wait")
    wait_for_line(waiter.stderr, WAIT_BANNER)
    first_out = proc.stdout.readline()
    proc.kill()                                   # the kernel drops a dead holder's flock
    proc.communicate()
    out, err = waiter.communicate(timeout=60)
    assert waiter.returncode == 0, err
    assert ticks(first_out) == [1] and ticks(out) == [2, 3]
    assert read_tasks(db)[0]["outcome"] == "completed"


def test_read_only_opens_are_allowed_while_a_runtime_holds_the_database(holder):
    db, _ = holder
    proc = durable("tasks", "--db", db, "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)[0]["n"] == 1


def test_the_store_lock_refuses_a_second_writer_in_process_too(tmp_path):
    with DurableStore(tmp_path / "t.db"):
        with pytest.raises(StoreBusy, match="busy"):
            DurableStore(tmp_path / "t.db")
        with DurableStore(tmp_path / "t.db", read_only=True) as reader:
            assert reader.all() == []


# --- its own databases only ----------------------------------------------------------------------

def _foreign(path: Path, wal: bool) -> None:
    db = sqlite3.connect(path)
    if wal:
        db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)")
    db.execute("INSERT INTO notes (text) VALUES ('keep me')")
    db.commit()
    db.close()


@pytest.mark.parametrize("wal", [False, True], ids=["rollback-journal", "wal"])
@pytest.mark.parametrize("command", ["count", "tool-probe", "recover", "tasks"])
def test_another_programs_database_is_refused_untouched(tmp_path, wal, command):
    db = tmp_path / "other_app.db"
    _foreign(db, wal)
    before = snapshot(tmp_path, skip=())
    proc = durable(command, "--db", db)
    assert proc.returncode == 2
    one_sentence(proc.stderr, str(db), "another program")
    assert snapshot(tmp_path, skip=()) == before                  # no byte, no -wal, no -shm, no lock


def _ours_with(path: Path, ddl: str) -> None:
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA application_id={APPLICATION_ID}")
    db.execute("PRAGMA user_version=1")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(ddl)
    db.commit()
    db.close()


def test_a_database_whose_tasks_table_has_other_columns_is_refused_untouched(tmp_path):
    db = tmp_path / "c.db"
    _ours_with(db, "CREATE TABLE tasks (id INTEGER PRIMARY KEY, kind TEXT, status TEXT, "
                   "record TEXT, crc INTEGER, owner TEXT)")
    before = snapshot(tmp_path, skip=())
    proc = durable("count", "--db", db)
    assert proc.returncode == 2
    one_sentence(proc.stderr, str(db), "owner")
    assert snapshot(tmp_path, skip=()) == before


def test_a_task_of_an_unknown_kind_is_refused_naming_it_and_nothing_changes(tmp_path):
    db = tmp_path / "probe.db"
    assert durable("tool-probe", "--db", db, "--crash-at", "in-execute").returncode == -9
    before = snapshot(tmp_path)
    assert "probe.db-wal" in before                          # the crash left its write-ahead log
    proc = durable("count", "--db", db)
    assert proc.returncode == 2
    one_sentence(proc.stderr, str(db), "task 1", "'agent'")
    assert snapshot(tmp_path) == before
    assert read_tasks(db)[1]["status"] == "running"          # not recovered by the refused run


@pytest.mark.parametrize("command", [["memo", "--candidate", "x"], ["count"], ["generate"],
                                     ["crash-loop"], ["tool-probe"]])
def test_a_database_holding_finished_tasks_of_another_kind_is_refused_untouched(tmp_path,
                                                                               command):
    """As --help says: a --db that holds other tasks is refused, even when they are all done
    (the runtime itself only checks the live ones)."""
    db = tmp_path / "f.db"
    assert durable("flaky", "--db", db, "--dies", 0).returncode == 0
    assert read_tasks(db)[0]["status"] == "terminal"
    before = snapshot(tmp_path)
    proc = durable(command[0], "--db", db, *command[1:])
    assert proc.returncode == 2
    one_sentence(proc.stderr, str(db), "flaky")
    assert snapshot(tmp_path) == before and len(read_tasks(db)) == 1


def test_a_finished_task_of_its_own_kind_is_found_again_not_added(tmp_path):
    db = tmp_path / "t.db"
    for _ in range(2):
        assert durable("tool-probe", "--db", db).returncode == 0    # an agent and its tool
    assert [t["kind"] for t in read_tasks(db)] == ["agent", "tool"]


def test_resuming_with_other_flags_than_the_task_was_started_with_is_refused(tmp_path):
    db = tmp_path / "c.db"
    assert durable("count", "--db", db, "--to", 5, "--crash-after-tick", 2).returncode == -9
    before = snapshot(tmp_path)
    proc = durable("count", "--db", db, "--to", 7)
    assert proc.returncode == 2
    one_sentence(proc.stderr, str(db), '{"to": 5}')
    assert snapshot(tmp_path) == before


# --- no value that could poison a database -------------------------------------------------------

@pytest.mark.parametrize("flag, value", [
    ("--sleep-ms", "1e308"), ("--sleep-ms", "nan"), ("--sleep-ms", "inf"), ("--sleep-ms", "-1"),
    ("--to", "0"), ("--to", "1e3"), ("--to", "99999999999"), ("--crash-after-tick", "x"),
    ("--crash-after-tick", "9"), ("--restart-limit", "0"), ("--restart-limit", "many")])
def test_a_bad_count_flag_is_refused_naming_it_before_anything_is_written(tmp_path, flag, value):
    proc = durable("count", "--db", tmp_path / "c.db", "--to", 5, flag, value)
    assert proc.returncode == 2
    one_sentence(proc.stderr, flag)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", [["generate", "--retries", "-1"], ["generate", "--backoff-ms",
                                                                    "inf"],
                                  ["flaky", "--dies", "x"], ["tool-probe", "--crash-at", "later"]])
def test_other_bad_flags_are_refused_naming_them(tmp_path, args):
    proc = durable(args[0], "--db", tmp_path / "c.db", *args[1:])
    assert proc.returncode == 2
    one_sentence(proc.stderr, args[1])
    assert list(tmp_path.iterdir()) == []


def test_a_wake_time_that_cannot_be_slept_is_refused_and_the_database_stays_usable(tmp_path):
    def a(step):
        step.sleep_until(1e308, {"phase": "a"})
    def never(seconds):
        pytest.fail(f"the runtime went to sleep for {seconds} s")
    with DurableStore(tmp_path / "t.db") as store:
        rt = Runtime(store, [Kind("k", {"a": a})], sleep=never)
        tid = rt.submit("k", {}, {"phase": "a"})
        rt.run()
        outcome = store.get(tid)["state"]["outcome"]
        assert outcome["status"] == "faulted" and "sleep_until" in outcome["detail"]["error"]
    assert read_tasks(tmp_path / "t.db")[0]["status"] == "terminal"    # resumable, not poisoned


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, object(), b"bytes"])
def test_the_store_writes_no_value_json_cannot_hold(tmp_path, bad):
    with DurableStore(tmp_path / "t.db") as store:
        with pytest.raises(InvalidValue, match="input"):
            store.create("k", {"x": bad}, {"phase": "a"})
        tid = store.create("k", {}, {"phase": "a"})
        rec = store.get(tid)
        rec["state"] = {"status": "sleeping", "checkpoint": {"phase": "a"}, "wake_at": bad}
        with pytest.raises(InvalidValue, match=f"task {tid}"):
            store.put(rec)
        assert store.get(tid)["state"]["status"] == "pending"


@pytest.mark.parametrize("make, field", [
    (lambda s: Runtime(s, [], restart_limit=0), "restart_limit"),
    (lambda s: Runtime(s, [], restart_limit=True), "restart_limit"),
    (lambda s: Runtime(s, []).submit("nope", {}, {"phase": "a"}), "kind"),
    (lambda s: Runtime(s, [Kind("k", {"a": None})]).submit("k", {}, {"phase": "b"}), "phase"),
    (lambda s: DurableStore(s.path.with_name("u.db"), synchronous="SOMETIMES"), "synchronous")])
def test_the_python_api_refuses_bad_arguments_naming_the_field(tmp_path, make, field):
    with DurableStore(tmp_path / "t.db") as store:
        with pytest.raises(InvalidValue, match=field):
            make(store)
        assert store.all() == []


# --- a sentence, never a traceback ---------------------------------------------------------------

def _text_file(p):
    p.write_text("not a database\n")


def _binary(p):
    p.write_bytes(os.urandom(4096))


def _truncated_db(p):
    assert durable("count", "--db", p, "--to", 3).returncode == 0
    p.write_bytes(p.read_bytes()[:5000])


def _zeroed_page(p):
    assert durable("count", "--db", p, "--to", 3).returncode == 0
    data = bytearray(p.read_bytes())
    data[4096:8192] = bytes(4096)
    p.write_bytes(bytes(data))


BAD_DB = {
    "a directory": (lambda p: p.mkdir(), "directory"),
    "a text file": (_text_file, "not a SQLite database"),
    "random bytes": (_binary, "not a SQLite database"),
    "an empty file": (lambda p: p.touch(), "empty"),
    "a truncated database": (_truncated_db, "damaged"),
    "a zeroed page": (_zeroed_page, "damaged"),
}


@pytest.mark.parametrize("command", ["count", "tasks"])
@pytest.mark.parametrize("case", list(BAD_DB))
def test_a_bad_db_is_one_sentence_naming_it_and_unchanged(tmp_path, case, command):
    db = tmp_path / "c.db"
    make, words = BAD_DB[case]
    make(db)
    before = snapshot(tmp_path, skip=())
    proc = durable(command, "--db", db)
    assert proc.returncode == 2
    one_sentence(proc.stderr, str(db), words)
    assert snapshot(tmp_path, skip=()) == before


@pytest.mark.parametrize("path, words", [("missing/c.db", "does not exist"),
                                         ("file.txt/c.db", "not a folder")])
def test_a_db_in_a_folder_that_is_not_there_is_one_sentence(tmp_path, path, words):
    (tmp_path / "file.txt").write_text("x")
    proc = durable("count", "--db", tmp_path / path)
    assert proc.returncode == 2
    one_sentence(proc.stderr, words)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write any file")
def test_an_unwritable_db_is_one_sentence_and_can_still_be_read(tmp_path):
    db = tmp_path / "c.db"
    assert durable("count", "--db", db, "--to", 2).returncode == 0
    db.chmod(0o444)
    proc = durable("count", "--db", db, "--to", 2)
    assert proc.returncode == 2
    one_sentence(proc.stderr, str(db), "cannot be written")
    assert durable("tasks", "--db", db).returncode == 0


@pytest.mark.slow
def test_a_database_locked_by_another_program_is_busy_in_one_sentence(tmp_path):
    db = tmp_path / "c.db"
    assert durable("count", "--db", db, "--to", 2).returncode == 0
    other = subprocess.Popen(
        [sys.executable, "-c", "import sqlite3, sys; db = sqlite3.connect(sys.argv[1], "
         "isolation_level=None); db.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); "
         "sys.stdin.read()", str(db)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "locked"
        before = read_tasks(db)
        proc = durable("count", "--db", db, "--to", 2)
        assert proc.returncode == 75
        one_sentence(proc.stderr, str(db), "another program")
        assert read_tasks(db) == before
    finally:
        other.communicate(input="")


# --- Ctrl-C and SIGTERM --------------------------------------------------------------------------

@pytest.mark.parametrize("sig, code, name", [(signal.SIGINT, 130, "SIGINT"),
                                             (signal.SIGTERM, 143, "SIGTERM")])
def test_a_signal_stops_the_cli_cleanly_and_the_task_resumes(tmp_path, sig, code, name):
    db = tmp_path / "c.db"
    proc = start("count", "--db", db, "--to", 100, "--sleep-ms", 20)
    first = [int(wait_for_line(proc.stdout, "tick ").split()[1])]
    proc.send_signal(sig)
    sent = time.monotonic()
    out, err = proc.communicate(timeout=30)
    stopped_after = time.monotonic() - sent
    assert proc.returncode == code, err
    one_sentence(err, name, str(db), "consistent")
    row = read_tasks(db)[0]
    assert row["status"] in ("pending", "sleeping") and row["restarts"] is None   # not a crash
    printed = first + ticks(out)
    resume = durable("count", "--db", db, "--to", printed[-1] + 2)
    assert resume.returncode == 2                                  # (--to is the task's input)
    resume = durable("count", "--db", db, "--to", 100, "--sleep-ms", 0, "--synchronous", "NORMAL")
    again = ticks(resume.stdout)
    assert not set(printed) & set(again) and again[-1] == 100
    print(f"{name}: exited {stopped_after * 1000:.0f} ms after the signal")


def test_ctrl_c_while_waiting_for_the_lock_exits_130(holder):
    db, _ = holder
    waiter = start("count", "--db", db, "--to", 3, "--wait")
    wait_for_line(waiter.stderr, WAIT_BANNER)
    waiter.send_signal(signal.SIGINT)
    _, err = waiter.communicate(timeout=30)
    assert waiter.returncode == 130
    one_sentence(err, "SIGINT")


# --- the store's public API only -----------------------------------------------------------------

def test_nothing_outside_the_store_reaches_into_its_private_parts():
    for path in ["bughunt/durable/runtime.py", "bughunt/durable/examples.py",
                 "bughunt/durable/experiments.py", "bughunt/lab/lessons/l07_durable_tasks.py"]:
        source = (ROOT / path).read_text()
        reach_ins = re.findall(r"\b(?:store|tx|self\.store|step\.store)\._\w+", source)
        assert not reach_ins, (path, reach_ins)
        assert ".db.close()" not in source and "_put(" not in source, path


def test_the_store_contract_is_written_down():
    from bughunt.durable import store
    for name in ("DurableStore", "Transaction"):
        cls = getattr(store, name)
        public = [m for m in vars(cls) if not m.startswith("_")]
        assert all(getattr(cls, m).__doc__ for m in public if callable(getattr(cls, m))), name
    for promise in ("Its own files only", "One writer", "Refuse, don't guess",
                    "Nothing invalid is written", "Recovery is explicit",
                    "A read-only open changes nothing"):
        assert promise in store.__doc__


# --- a signal at every line of the tick ----------------------------------------------------------

def _count_interrupted_at(db: Path, n: int, handler) -> tuple[int, int, str, str]:
    """`count --to 2` in this process, with `handler` (SIGINT's or SIGTERM's) called at the `n`th
    line the runtime runs (any frame, from `Runtime.run`'s start to its end), as a signal arriving
    there would call it. Returns (exit code, line events seen, where it fired, what it printed)."""
    import contextlib
    import io

    from bughunt.durable import examples
    count, where = 0, ""

    def tracer(frame, event, arg):
        nonlocal count, where
        # The lab's lines and contextlib's (a transaction's COMMIT runs in its __exit__); not a
        # garbage collector's callback into another library, which comes when it likes.
        if event == "line" and frame.f_code.co_filename.startswith(COUNTED):
            count += 1
            if count == n:
                where = f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno}"
                handler(signal.SIGINT, frame)
        return tracer

    run = Runtime.run

    def traced_run(self):
        sys.settrace(tracer)                 # only the runtime's loop, not the CLI's set-up
        try:
            return run(self)
        finally:
            sys.settrace(None)

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()), \
            pytest.MonkeyPatch.context() as patch:
        patch.setattr(Runtime, "run", traced_run)
        code = examples.main(["count", "--db", str(db), "--to", "2", "--sleep-ms", "0",
                              "--synchronous", "NORMAL"])
    return code, count, where, out.getvalue()


COUNTED = (str(ROOT / "bughunt"), __import__("contextlib").__file__)


def _sigterm(signum, frame):
    from bughunt.durable.examples import Terminated
    raise Terminated()


@pytest.mark.slow          # about 2,000 interrupted runs, each resumed: 20 s or more per signal
@pytest.mark.parametrize("handler, code", [(signal.default_int_handler, 130), (_sigterm, 143)],
                         ids=["SIGINT", "SIGTERM"])
def test_a_signal_at_any_line_of_the_tick_leaves_no_task_running(tmp_path, handler, code):
    """Wherever in the runtime's loop the signal lands (inside a step, between a commit's UPDATE
    and its COMMIT, in the loop's own lines), the clean stop leaves the task pending, sleeping or
    done, never `running` (which the next run would count as a crash), and the task resumes
    without printing a tick twice. Fails on a store that forgets, on a rolled-back commit, which
    tasks it set running."""
    import tempfile
    ram = Path("/dev/shm") if Path("/dev/shm").is_dir() else None     # a thousand small stores
    with tempfile.TemporaryDirectory(prefix="bughunt-test-", dir=ram) as folder:
        _every_line(Path(folder), handler, code)


def _every_line(tmp_path: Path, handler, code: int) -> None:
    _, events, _, _ = _count_interrupted_at(tmp_path / "clean.db", 0, handler)
    assert events > 50                       # the tracer saw the tick's lines
    wrong = []
    for n in range(1, events + 2):
        db = tmp_path / f"c{n}.db"
        got, _, where, printed = _count_interrupted_at(db, n, handler)
        [row] = read_tasks(db)
        if got != (code if where else 0) or row["status"] == "running" \
                or row["restarts"] is not None:
            wrong.append((n, where, got, row["status"], row["restarts"]))
            continue
        if where:
            resumed, _, _, again = _count_interrupted_at(db, -1, handler)
            if resumed != 0 or set(ticks(printed)) & set(ticks(again)) \
                    or "counted to 2" not in again:
                wrong.append((n, where, "resume", resumed, again))
    assert not wrong, wrong[:5]


@pytest.mark.slow          # a second signal at every line of close(): a few hundred runs
def test_a_second_signal_at_any_line_of_the_clean_close_still_leaves_no_task_running(tmp_path):
    """The first Ctrl-C comes while the tick runs (the task is `running`); a second one lands
    at each line `DurableStore.close()` runs while it holds signals back (the rollback of what
    the first cut off, then the transaction that puts the task back to pending). It must still
    end pending, never `running`, and the command exits 130. (The few lines before the hold are
    a window no Python-level handler can shut: a signal there skips the reset.)"""
    import contextlib
    import io

    from bughunt.durable import examples
    from bughunt.durable.store import DurableStore
    from bughunt.interrupts import Held

    def once(db: Path, m: int) -> tuple[int, int]:
        seen = {"tick": False, "close": 0}
        close = DurableStore.close

        def tracer(frame, event, arg):
            if event == "line" and frame.f_code.co_filename.startswith(COUNTED):
                if frame.f_code.co_name == "tick" and not seen["tick"]:
                    seen["tick"] = True
                    signal.default_int_handler(signal.SIGINT, frame)    # the first Ctrl-C
                if seen["closing"] and isinstance(signal.getsignal(signal.SIGINT), Held):
                    seen["close"] += 1
                    if seen["close"] == m:
                        signal.getsignal(signal.SIGINT)(signal.SIGINT, frame)  # the second,
                        # to whatever handler is in place, as the signal would go
            return tracer

        def traced_close(self, **kw):
            seen["closing"] = True
            sys.settrace(tracer)            # again: a trace function that raised is unset
            try:
                return close(self, **kw)
            finally:
                seen["closing"] = False

        seen["closing"] = False
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()),\
                pytest.MonkeyPatch.context() as patch:
            patch.setattr(DurableStore, "close", traced_close)
            sys.settrace(tracer)
            try:
                code = examples.main(["count", "--db", str(db), "--to", "2", "--sleep-ms", "0",
                                      "--synchronous", "NORMAL"])
            except KeyboardInterrupt:
                code = 130                  # raised after main's own handler: run_cli's
            finally:
                sys.settrace(None)
        return code, seen["close"]

    _, lines = once(tmp_path / "first.db", 0)
    assert lines > 10
    wrong = []
    for m in range(1, lines + 1):
        db = tmp_path / f"c{m}.db"
        code, _ = once(db, m)
        [row] = read_tasks(db)
        if code != 130 or row["status"] == "running" or row["restarts"] is not None:
            wrong.append((m, code, row["status"], row["restarts"]))
        db.unlink()
    assert not wrong, wrong[:5]
