"""Issue 28, the command lines: no hang, no traceback, the README's exit code, one sentence.

Each test reproduces one attack of the issue: a FIFO among a run directory's files, a flag
value no command expected, a file system that refuses, Ctrl-C at the start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bughunt.config import RunConfig

from conftest import bughunt, run

LOG = RunConfig(store="log", pages=3)


def no_traceback(proc) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr


# --- kill-random: a bound on nothing is said to be one ----------------------------------------

def test_the_rule_of_three_with_fewer_than_three_kills_bounds_nothing():
    """issue 28: `kill-random --tries 2` printed "below about 3/2 = 150.0%"."""
    from bughunt.cli import rule_of_three_sentence
    from bughunt.experiment import rule_of_three

    for n in (1, 2, 3):
        said = rule_of_three_sentence(n, rule_of_three(n), 1 - 0.05 ** (1 / n))
        assert "too few" in said and "exact 95% bound" in said, said
        assert not any(float(p) > 100 for p in
                       [w.rstrip("%,;") for w in said.split() if w.endswith(("%", "%,", "%;"))])
    assert rule_of_three_sentence(40, rule_of_three(40), 0.07).endswith("3/40 = 7.5%")


def test_kill_random_with_two_kills_in_the_loop_prints_no_rate_above_100_percent(
        capsys, monkeypatch):
    from bughunt import experiment
    from bughunt.cli import main

    def two_kills(config, tries, **kw):            # where two real kills landed, as measured
        return {"tries": 2, "real_kills": 2, "kills_in_page_loop": 2, "duplicates_hit": 0,
                "rule_of_three_bound": experiment.rule_of_three(2),
                "exact_95_bound": 1 - 0.05 ** 0.5,
                "runs": [{"landed": "p10.waiting_for_model"}, {"landed": "p11.after_visit"}]}

    monkeypatch.setattr(experiment, "kill_random", two_kills)
    assert main(["kill-random", "--tries", "2"]) == 0
    out = capsys.readouterr().out
    assert "150.0%" not in out and "rule of three: 2 kills in the page loop are too few" in out


# --- no hang: a FIFO (or any file that is not a regular one) among the run directory's files -----

@pytest.fixture(scope="module")
def finished_log_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("log") / "run"
    proc = run(run_dir, LOG)
    assert proc.returncode == 0, proc.stderr
    return run_dir


def contents(run_dir: Path) -> dict:
    return {p.name: (p.read_bytes() if p.is_file() and not p.is_symlink() else p.lstat().st_mode)
            for p in sorted(run_dir.iterdir())}


@pytest.mark.parametrize("name, make", [
    ("events.jsonl", os.mkfifo), ("config.json", os.mkfifo), ("bill.jsonl", os.mkfifo),
    ("config.json.tmp", os.mkfifo), ("tracker.db-wal", os.mkfifo), ("run.lock", os.mkdir),
    ("events.jsonl", os.mkdir)])
def test_a_lab_file_that_is_not_a_regular_file_is_refused_without_blocking(
        finished_log_run, tmp_path, name, make):
    """issue 28: a FIFO as events.jsonl, config.json or bill.jsonl blocked the worker for ever
    (as config.json.tmp did a new run); run.lock made a directory gave 74, not 2. Now each is
    refused at once, as tracker.db already was, by the same check (`diskio.not_a_file`), with
    nothing changed."""
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(finished_log_run, run_dir)
    if name == "config.json.tmp":          # a new run: the only time config.json.tmp is opened
        shutil.rmtree(run_dir)
        run_dir.mkdir()
    (run_dir / name).unlink(missing_ok=True)
    make(run_dir / name)
    before = contents(run_dir)
    proc = bughunt("run", "--dir", str(run_dir), *LOG.to_args(), timeout=60)
    assert proc.returncode == 2, proc.stderr
    no_traceback(proc)
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"bughunt: {run_dir / name}: is a ") and "nothing was changed" in line
    assert contents(run_dir) == before


def test_the_tracker_and_the_run_directory_share_one_check_for_special_files(tmp_path):
    from bughunt import diskio
    from bughunt.world import TrackerError, check_tracker

    os.mkfifo(tmp_path / "tracker.db")
    with pytest.raises(TrackerError, match="tracker.db: is not a file \\(a named pipe"):
        check_tracker(tmp_path)
    assert diskio.not_a_file(tmp_path / "tracker.db") == "a named pipe (FIFO)"
    assert diskio.not_a_file(tmp_path / "nothing") is None
    (tmp_path / "file").write_text("x")
    assert diskio.not_a_file(tmp_path / "file") is None


# --- Ctrl-C or SIGTERM in the first milliseconds: the handlers are in before the imports ---------

START_SIGNAL = Path(__file__).with_name("start_signal.py")


@pytest.mark.parametrize("module, importing, args", [
    ("bughunt.durable", "sqlite3", ["count", "--db", "t.db", "--to", "3"]),
    ("bughunt.durable", "bughunt.durable.examples", ["count", "--db", "t.db", "--to", "3"]),
    ("bughunt.modelserver", "http.server", ["--bill", "bill.jsonl"]),
])
@pytest.mark.parametrize("sig, code, how", [("SIGINT", 130, "Ctrl-C (SIGINT)"),
                                            ("SIGTERM", 143, "SIGTERM")])
def test_a_signal_while_the_command_still_imports_is_one_sentence_and_the_readme_code(
        tmp_path, module, importing, args, sig, code, how):
    """issue 28: Ctrl-C in the first 100 ms of `python -m bughunt.durable` or of the model
    server was a KeyboardInterrupt traceback: the signal here comes at a named import."""
    proc = subprocess.run([sys.executable, str(START_SIGNAL), module, importing, sig, *args],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    no_traceback(proc)
    assert proc.returncode == code, proc.stderr
    assert proc.stderr == f"python -m {module}: stopped by {how} while starting; nothing was " \
        + ("opened\n" if module == "bughunt.durable" else "served or billed\n")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("importing, said", [
    # while `python -m bughunt.grader` imports its modules: nothing was run yet
    ("json", "python -m bughunt.grader: stopped by {how} while starting; no store was run\n"),
    ("bughunt.boundary", "python -m bughunt.grader: stopped by {how} while starting; no store "
                         "was run\n"),
    # as the verdict is put together (its first pandas import), the boundary's child still there
    ("pandas", "bughunt.grader: {what}; the store's processes were stopped and the grade's "
               "temporary folder removed\n"),
])
@pytest.mark.parametrize("sig, code, how, what", [
    ("SIGINT", 130, "Ctrl-C (SIGINT)", "interrupted"), ("SIGTERM", 143, "SIGTERM", "terminated")])
def test_a_signal_while_the_grader_starts_is_one_sentence_and_leaves_nothing(
        tmp_path, importing, said, sig, code, how, what):
    """issue 28: Ctrl-C in the first 100 ms of `python -m bughunt.grader --store ...` was a
    KeyboardInterrupt traceback. Its boundary's folder goes to TMPDIR here (no RAM dir), so that
    what is left of it, and of its processes, can be looked for."""
    from leftovers import MARK, left_behind

    token = f"grader-start-{importing}-{sig}"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "BUGHUNT_RAM_DIR": "", MARK: token}
    proc = subprocess.run([sys.executable, str(START_SIGNAL), "bughunt.grader", importing, sig,
                           "--store", "log"], capture_output=True, text=True, cwd=tmp_path,
                          env=env, timeout=120)
    no_traceback(proc)
    assert proc.returncode == code, proc.stderr
    assert proc.stderr == said.format(how=how, what=what)
    assert proc.stdout == ""
    assert left_behind(token, [tmp]) == []


def test_the_model_server_exits_with_the_readme_codes_its_docstring_states():
    """issue 28: the README said 130/143, the server's docstring 0; both say 130/143 now."""
    from bughunt import modelserver

    assert "exits 143 or 130" in modelserver.__doc__
    assert "130 after Ctrl-C (SIGINT), 143\n    after SIGTERM" in modelserver.main.__doc__


# --- the durable runtime under a file size limit: the disk refused a write (74) -----------------

@pytest.mark.parametrize("kib", [4, 16, 32])
def test_a_file_size_limit_under_the_durable_runtime_exits_74(tmp_path, kib):
    """issue 28: under `ulimit -f 16` the runtime said "SQLite cannot use it" with exit 2."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (kib * 1024, kib * 1024))

    proc = subprocess.run([sys.executable, "-m", "bughunt.durable", "count", "--db", "t.db",
                           "--to", "50"], capture_output=True, text=True, cwd=tmp_path,
                          preexec_fn=limit, timeout=120)
    no_traceback(proc)
    assert proc.returncode == 74, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("python -m bughunt.durable count: t.db: ")


# --- sweep: a dead model server, a RAM dir that cannot hold the runs -----------------------------

def test_a_sweep_at_a_model_url_where_nothing_listens_is_refused_with_69(tmp_path, capsys):
    """issue 28: `sweep --model-url` at a dead server exited 0 with every point an error."""
    import socket

    from bughunt.cli import main

    with socket.socket() as s:                 # a port nothing listens on once it is closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    bill = tmp_path / "bill.jsonl"
    bill.write_text("")
    url = f"http://127.0.0.1:{port}/v1"
    assert main(["sweep", "--pages", "2", "--model-url", url, "--model-bill", str(bill)]) == 69
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"python -m bughunt sweep: --model-url {url}: the model "
                                        "cannot be reached (")
    assert "nothing was run" in err and len(err.strip().splitlines()) == 1
    assert bill.read_text() == ""


@pytest.mark.parametrize("make", ["missing", "file", "read-only"])
def test_a_ram_dir_that_cannot_hold_the_runs_is_one_sentence_and_exit_2(
        tmp_path, monkeypatch, capsys, make):
    """issue 28: `sweep` with BUGHUNT_RAM_DIR missing or read-only died with a traceback."""
    import errno
    import tempfile

    from bughunt.cli import main

    where = tmp_path / "ram"
    if make == "file":
        where.write_text("")
    elif make == "read-only":                 # as a read-only mount answers, even to root
        where.mkdir()
        real = tempfile.mkdtemp

        def mkdtemp(*args, dir=None, **kw):
            if dir == str(where):
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), dir)
            return real(*args, dir=dir, **kw)
        monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    monkeypatch.setenv("BUGHUNT_RAM_DIR", str(where))
    with pytest.raises(SystemExit) as e:
        main(["sweep", "--pages", "2"])
    assert e.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert f"BUGHUNT_RAM_DIR={where}: cannot hold the sweep's run directories (" in line
    assert "nothing was run" in line


# --- the book: an --out the disk will not write ------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("errno_name, where", [("EROFS", "mkdir"), ("ENOSPC", "copy")])
def test_a_book_out_that_is_read_only_or_full_is_one_sentence_and_74(
        tmp_path, monkeypatch, capsys, errno_name, where):
    """issue 28: `book --out` on a read-only or a full disk ended with a traceback."""
    import errno
    import shutil

    from bughunt import book

    out = tmp_path / "book"
    code = getattr(errno, errno_name)
    if where == "mkdir":                     # as a read-only mount answers, even to root
        real = Path.mkdir

        def mkdir(self, *args, **kw):
            if self == out:
                raise OSError(code, os.strerror(code), str(self))
            return real(self, *args, **kw)
        monkeypatch.setattr(Path, "mkdir", mkdir)
    else:
        def copy2(src, dst, **kw):
            raise OSError(code, os.strerror(code), str(dst))
        monkeypatch.setattr(shutil, "copy2", copy2)
    assert book.main(["--out", str(out), "--repository", "example-org/bughunt-lab"]) == 74
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"book: --out {out}: the disk refused a write (") and \
        os.strerror(code) in line


# --- doctor, run by a Python without the lab's packages ------------------------------------------

def test_doctor_outside_the_venv_names_the_interpreter_to_use(tmp_path):
    """issue 28: `python -m bughunt doctor` run by a Python without the lab's venv listed the
    missing packages only; it now says which Python has them."""
    from bughunt.doctor import Check, check_interpreter, lab_python

    missing = [Check("package pandas", False, "not installed")]
    assert check_interpreter([Check("package pandas", True, "2.2")], tmp_path) == []
    (none,) = check_interpreter(missing, tmp_path)           # no venv made yet
    assert not none.ok and "make setup" in none.fix and str(lab_python(tmp_path)) in none.fix
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (other,) = check_interpreter(missing, tmp_path)           # a venv, not this Python's
    assert not other.ok and other.fix.startswith(f"run {lab_python(tmp_path)} -m bughunt doctor")
    assert sys.executable in other.detail


def test_doctor_run_by_the_base_python_says_to_use_the_venv():
    from conftest import ROOT

    base = getattr(sys, "_base_executable", None)
    if not base or Path(sys.prefix) != ROOT / ".venv" or subprocess.run(
            [base, "-c", "import pandas"], capture_output=True).returncode == 0:
        pytest.skip("needs the lab's venv and a base Python without the lab's packages")
    proc = subprocess.run([base, "-m", "bughunt", "doctor"], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    no_traceback(proc)
    assert proc.returncode == 1
    assert f"what to do: run {ROOT / '.venv' / 'bin' / 'python'} -m bughunt doctor" in proc.stdout


# --- a bill that is not the lab's; a refusal that says what it changed ---------------------------

@pytest.fixture(scope="module")
def crashed_log_run(tmp_path_factory) -> Path:
    """A log-store run killed at p3.after_submit: two pages done and billed, page 3's report
    filed, the tracker's write-ahead log left by the kill."""
    run_dir = tmp_path_factory.mktemp("crashed") / "run"
    proc = run(run_dir, RunConfig(store="log", pages=4), "--crash-at", "p3.after_submit")
    assert proc.returncode == -9, proc.stderr
    return run_dir


@pytest.mark.parametrize("garbage", [b"garbage\n", b'{"page": 2', b'{"tokens": 3}\n',
                                     b"\xff\xfe\n"])
def test_a_garbage_line_in_the_bill_is_refused_as_a_foreign_bill(crashed_log_run, tmp_path,
                                                                  garbage):
    """issue 28: a garbage line appended to bill.jsonl was taken; the README refuses a bill that
    is not the lab's (2), with nothing changed."""
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(crashed_log_run, run_dir)
    with open(run_dir / "bill.jsonl", "ab") as f:
        f.write(garbage)
    before = contents(run_dir)
    proc = bughunt("run", "--dir", str(run_dir), *RunConfig(store="log", pages=4).to_args())
    no_traceback(proc)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"bughunt: {run_dir / 'bill.jsonl'}") and "not the lab's bill" in line
    assert line.endswith("; nothing was changed")
    assert contents(run_dir) == before


def _without_shm(contents: dict) -> dict:
    return {name: data for name, data in contents.items() if not name.endswith("-shm")}


def test_a_deleted_bill_beside_a_tracker_with_reports_is_refused_as_a_foreign_bill(
        crashed_log_run, tmp_path):
    """issue 28: bill.jsonl removed from a run whose tracker holds a report (filed after its
    page's billed call) was taken as a new bill: every call counted as the first."""
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(crashed_log_run, run_dir)
    (run_dir / "bill.jsonl").unlink()
    before = contents(run_dir)
    proc = bughunt("run", "--dir", str(run_dir), *RunConfig(store="log", pages=4).to_args())
    no_traceback(proc)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"bughunt: {run_dir / 'bill.jsonl'}: missing, though the tracker "
                           "holds 1 report") and "not the lab's bill" in line, line
    assert _without_shm(contents(run_dir)) == _without_shm(before)   # -shm: said in the line


def test_a_junk_tracker_with_a_surviving_write_ahead_log_is_refused_unchanged(
        crashed_log_run, tmp_path):
    """issue 28: a tracker.db that is not SQLite, beside the -wal a kill left, was rebuilt from
    the log (SQLite reads page 1 from the log and checkpoints it over the junk) instead of
    refused as a damaged tracker."""
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(crashed_log_run, run_dir)
    assert (run_dir / "tracker.db-wal").stat().st_size > 0
    (run_dir / "tracker.db").write_bytes(b"junk junk junk, not sqlite at all\n")
    before = contents(run_dir)
    proc = bughunt("run", "--dir", str(run_dir), *RunConfig(store="log", pages=4).to_args())
    no_traceback(proc)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"bughunt: {run_dir / 'tracker.db'}: not a usable tracker database "
                           "(it does not begin with SQLite's header"), line
    assert contents(run_dir) == before


def test_a_refusal_after_reading_the_tracker_names_the_index_sqlite_may_rebuild(
        finished_log_run, tmp_path):
    """issue 28: a refusal said "nothing was changed" while tracker.db-shm had changed (SQLite
    rebuilds that index when it reads through the log); every other byte is unchanged."""
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(finished_log_run, run_dir)
    lose = ("import os, sqlite3, sys; db = sqlite3.connect(sys.argv[1]); "
            "db.execute('DELETE FROM reports'); db.commit(); os.kill(os.getpid(), 9)")
    subprocess.run([sys.executable, "-c", lose, str(run_dir / "tracker.db")], timeout=60)
    assert (run_dir / "tracker.db-wal").exists()       # the log a kill leaves
    before = {k: v for k, v in contents(run_dir).items() if k != "tracker.db-shm"}
    proc = bughunt("run", "--dir", str(run_dir), *LOG.to_args())
    no_traceback(proc)
    assert proc.returncode == 2, proc.stderr
    assert "the tracker lost it" in proc.stderr
    assert proc.stderr.rstrip().endswith("; nothing was changed but SQLite's index "
                                         "tracker.db-shm, which it rebuilds from the log when it "
                                         "reads the tracker (it holds no report)")
    assert {k: v for k, v in contents(run_dir).items() if k != "tracker.db-shm"} == before


# --- run --store: a store writing through door.files is not "0 checkpoint writes" ----------------


DOOR_FILES_STORES = Path(__file__).resolve().parent / "door_files_stores.py"


def test_run_store_writing_through_door_files_reports_its_commits(tmp_path):
    """issue 28: `run --store` said "checkpoint writes: 0" for a store that wrote a checkpoint
    at every commit, through door.files."""
    proc = bughunt("run", "--dir", str(tmp_path / "run"), "--pages", "3", "--store",
                   f"{DOOR_FILES_STORES}:ThroughFiles", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.splitlines()[-1]
    assert last == ("checkpoint writes: 4 commits, none through the door's timed write methods "
                    "(writes through door.files or the store's own calls are not timed); the "
                    "store's files: state.json"), last
    proc = bughunt("run", "--dir", str(tmp_path / "lab"), "--pages", "3", "--store", "log")
    assert proc.stdout.splitlines()[-1] == "checkpoint writes: 4"


# --- argparse's refusals: one sentence, once ------------------------------------------------------

@pytest.mark.parametrize("args, says", [
    (["run", "--bogus"], "python -m bughunt run: the following arguments are required: --dir"),
    (["run", "--dir", "d", "--bogus"], "python -m bughunt run: unrecognized arguments: --bogus"),
    (["run", "--dir", "d", "--store", "x.py:X", "--pages", "many"],
     "python -m bughunt run: argument --pages: expected a whole number, got 'many'"),
    (["sweep", "--pages", "x"], "python -m bughunt sweep: argument --pages"),
    (["conformance", "--bogus"], "python -m bughunt.conformance: unrecognized arguments: --bogus"),
    (["nonsense"], "python -m bughunt: argument COMMAND: invalid choice: 'nonsense'"),
])
def test_a_bad_flag_is_one_sentence_printed_once_with_exit_2(tmp_path, args, says):
    """issue 28: argparse printed its usage block before the refusal, and `run` (which parses its
    flags once to find a learner's store, then again in the worker) printed both twice."""
    proc = bughunt(*args, cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith(says), proc.stderr
    assert "usage:" not in proc.stderr and proc.stdout == ""
    assert list(tmp_path.iterdir()) == []


def test_run_help_is_printed_once(tmp_path):
    proc = bughunt("run", "--help", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.count("usage:") == 1, proc.stdout


SLOW_STORE = '''
import json, os, time
from bughunt.events import initial_state
from bughunt.stores import Recovered, Repairs


class Slow:
    name = "slow"

    def __init__(self, run_dir, config, door):
        self.path = run_dir / "state.json"

    def load(self):
        if not self.path.exists():
            return Recovered(initial_state())
        return Recovered(json.loads(self.path.read_text()))

    def open_for_append(self):
        return Repairs()

    def commit(self, state, event, *, mid):
        time.sleep(0.2)
        mid()
        self.path.write_text(json.dumps(state))

    def close(self):
        pass
'''


@pytest.mark.parametrize("sig, code, name", [("SIGINT", 130, "interrupted (SIGINT)"),
                                             ("SIGTERM", 143, "terminated (SIGTERM)")])
def test_run_store_stopped_by_a_signal_says_so_once_naming_the_signal(tmp_path, sig, code, name):
    """issue 28: `run --store` stopped by Ctrl-C printed two sentences, the worker's "terminated"
    (the boundary stops its child with SIGTERM) and the lab's "interrupted"."""
    import signal
    import time

    (tmp_path / "slow.py").write_text(SLOW_STORE)
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "bughunt", "run", "--dir", str(run_dir),
                             "--store", "slow.py:Slow"], cwd=tmp_path, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not (run_dir / "state.json").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(getattr(signal, sig))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert err == f"bughunt: {name}: the run stopped; run again on --dir {run_dir} to resume\n"


@pytest.mark.parametrize("args", [["run", "--dir", ""], ["run", "--store", "s.py:S", "--dir", ""],
                                  ["sweep", "--work-dir", ""], ["doctor", "--dir", ""],
                                  ["explore", "--check", "true {state}", "--dir", "", "--", "true"]])
def test_an_empty_path_flag_is_refused_naming_the_flag(tmp_path, args):
    """issue 28: `--dir ''` was taken as the current directory (`Path("")` is `.`)."""
    proc = bughunt(*args, cwd=tmp_path)
    flag = args[args.index("") - 1]
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        f"python -m bughunt {args[0]}: argument {flag}: expected a path, got an empty string "
        "(see --help)"]
    assert list(tmp_path.iterdir()) == []


SHADOWS = ("json", "tempfile", "sqlite3", "selectors", "socket")


def test_a_store_folder_with_modules_named_like_the_librarys_does_not_shadow_them(tmp_path):
    """issue 28: a json.py, tempfile.py or sqlite3.py beside the store (a learner's folder) was
    imported in place of the standard library's, by the lab's own process started there
    (`python -m` puts the current directory first) and by the boundary's child; a bughunt.py
    there broke the child's start. The store is imported from its file, its folder last."""
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "slow.py").write_text(SLOW_STORE.replace("time.sleep(0.2)", "pass"))
    for name in SHADOWS:
        (folder / f"{name}.py").write_text(f"raise RuntimeError('the folder\\'s {name}.py')\n")
    proc = bughunt("run", "--dir", "run", "--pages", "2", "--store", "slow.py:Slow", cwd=folder)
    no_traceback(proc)
    assert proc.returncode == 0 and proc.stdout.startswith("done: pages 1-2"), proc.stderr
    # A bughunt.py is found before any of the lab's code runs, unless Python is told (-P) to
    # leave the current directory out; the boundary's child is told so too.
    (folder / "bughunt.py").write_text("raise RuntimeError('the folder\\'s bughunt.py')\n")
    proc = subprocess.run([sys.executable, "-P", "-m", "bughunt", "run", "--dir", "again",
                           "--pages", "2", "--store", "slow.py:Slow"], cwd=folder,
                          capture_output=True, text=True, timeout=120)
    no_traceback(proc)
    assert proc.returncode == 0 and proc.stdout.startswith("done: pages 1-2"), proc.stderr


@pytest.mark.parametrize("kind, make, says", [("directory", os.mkdir, "is a directory"),
                                               ("fifo", os.mkfifo, "is a named pipe (FIFO)")])
@pytest.mark.parametrize("command", [["conformance"], ["run", "--dir", "run"]])
def test_a_store_file_that_is_a_directory_or_a_fifo_is_refused_without_blocking(
        tmp_path, kind, make, says, command):
    """issue 28: `--store` naming a directory said "no such file"; naming a FIFO, the import
    blocked on it until the 10 s limit."""
    make(tmp_path / "store.py")
    proc = bughunt(*command, "--store", "store.py:S", cwd=tmp_path, timeout=30)
    no_traceback(proc)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        f"bughunt{'.conformance' if command == ['conformance'] else ''}: --store store.py:S: "
        f"store.py {says}, not a regular file: FILE.py names the Python file the store is in"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store.py"]
    proc = subprocess.run([sys.executable, "-m", "bughunt.grader", "--store", "store.py:S"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=30)
    assert proc.returncode == 2 and f"store.py {says}, not a regular file" in proc.stderr


MEMORY_STORE = '''
from bughunt.events import initial_state
from bughunt.stores import Recovered, Repairs

_LATEST = [initial_state()]       # everything in memory: no file is ever written


class Mem:
    name = "memory"

    def __init__(self, run_dir, config, door):
        pass

    def load(self):
        return Recovered(_LATEST[-1])

    def open_for_append(self):
        return Repairs()

    def commit(self, state, event, *, mid):
        mid()
        _LATEST.append(state)

    def close(self):
        pass
'''


def test_run_store_keeping_its_state_in_memory_says_nothing_reached_the_disk(tmp_path):
    """issue 28: `run --store` said "checkpoint writes: 4 commits, written through door.files"
    for a store that never wrote a byte."""
    (tmp_path / "mem.py").write_text(MEMORY_STORE)
    proc = bughunt("run", "--dir", str(tmp_path / "run"), "--pages", "3", "--store", "mem.py:Mem",
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == (
        "checkpoint writes: none reached the disk (4 commits, and no file of the store's in the "
        "run directory: a state kept in memory is lost at a kill)")
