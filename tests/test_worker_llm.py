"""Lesson 11's worker mode: the worker asks its model over HTTP through the real openai SDK, the
call has crash points inside it, the server's bill judges what a kill cost, the call journal says
what the killed worker held, and no connection crosses a fork."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from bughunt.config import RunConfig
from bughunt.crashpoints import CALL_LABELS, LABELS, CrashPlan, NoSuchPoint, find, scheme
from bughunt.experiment import (SDK_PRELOAD, CallCrashRun, run_worker,
                                sweep_records)
from bughunt.forkserver import ForkServer
from bughunt.llm import (ForkedClientError, ServedModel, page_messages, read_call_journal,
                         run_project)
from bughunt.modelserver import ServerProcess, answer_words
from bughunt.worker import LabOptions, world_model
from bughunt.world import Site

from conftest import bughunt

BUGS = [3, 7, 10]
#: The lesson's design that recovers correctly: a log, intents, the idempotency key.
CONFIG = RunConfig(store="log", intent=True, idempotency_key=True)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    bill = tmp_path_factory.mktemp("server") / "bill.jsonl"
    with ServerProcess(bill) as s:
        yield s


@pytest.fixture(scope="module")
def model(server):
    return ServedModel(server.base_url, server.bill_path)


def words_of(page: int) -> list[str]:
    return answer_words("bughunt-mock", page_messages(Site.load(), page))


# --- the scheme -----------------------------------------------------------------------------------

def test_without_the_model_over_http_the_scheme_is_the_lessons_51_and_54():
    for intent, count in ((False, 51), (True, 54)):
        plain = scheme(12, BUGS, intent)
        assert len(plain) == count
        assert plain == scheme(12, BUGS, intent, call_in_flight=False)
        assert {p.label for p in plain} <= set(LABELS)


def test_the_points_inside_the_call_come_before_after_model_call_on_every_page():
    points = scheme(12, BUGS, intent=True, call_in_flight=True)
    assert len(points) == 54 + 3 * 12
    for page in range(1, 13):
        steps = [p.label for p in points if p.page == page]
        assert steps[:4] == [*CALL_LABELS, "after_model_call"]
    # Every name of the lesson's scheme still means the same step of the same page.
    lesson = [p.name for p in scheme(12, BUGS, intent=True)]
    assert [p.name for p in points if p.label in LABELS] == lesson


def test_every_in_call_point_name_round_trips_and_is_refused_without_the_mode():
    where = dict(pages=12, bug_pages=BUGS, intent=True)
    points = scheme(12, BUGS, intent=True, call_in_flight=True)
    for p in points:
        assert find(points, p.name, call_in_flight=True, **where) == p
        assert find(points, p.index, call_in_flight=True, **where) == p
    assert [p.name for p in points[:3]] == ["p1.call_sent", "p1.call_chunk3", "p1.call_last_chunk"]
    with pytest.raises(NoSuchPoint, match="inside the model call.*--model-url"):
        find(scheme(12, BUGS, intent=True), "p3.call_chunk3", **where)
    with pytest.raises(NoSuchPoint, match="'call_chunk5' is not a step"):
        find(points, "p3.call_chunk5", call_in_flight=True, **where)


# --- the sweep, judged by the server's bill --------------------------------------------------------

IN_CALL = [f"p{page}.{label}" for page in (3, 7) for label in CALL_LABELS]


@pytest.fixture(scope="module")
def in_call_sweep(model):
    return {r.crash_point: r for r in sweep_records(CONFIG, model=model, points=IN_CALL)}


@pytest.mark.slow
def test_a_kill_inside_the_call_costs_one_redone_call_on_the_servers_bill(in_call_sweep):
    assert sorted(in_call_sweep) == sorted(IN_CALL)
    for name, r in in_call_sweep.items():
        assert isinstance(r, CallCrashRun) and r.error is None, (name, r.error)
        assert r.redone_model_calls == 1, name
        assert r.killed_call_billed, name        # billed at arrival, before the first chunk


@pytest.mark.slow
def test_the_call_journal_holds_the_prefix_the_killed_worker_received(in_call_sweep):
    for page in (3, 7):
        words = words_of(page)
        held = {label: in_call_sweep[f"p{page}.{label}"] for label in CALL_LABELS}
        assert (held["call_sent"].prefix_held, held["call_sent"].chunks_held) == ("", 0)
        # 3 chunks: the role, then two words
        assert held["call_chunk3"].prefix_held == " ".join(words[:2])
        assert held["call_chunk3"].chunks_held == 3
        assert held["call_last_chunk"].prefix_held == " ".join(words)   # all of it, yet redone
        assert held["call_last_chunk"].chunks_held == len(words) + 3


def test_the_three_witnesses_agree_after_every_kill_inside_the_call(in_call_sweep):
    for name, r in in_call_sweep.items():
        assert r.three_way_check and r.rebuild_ok, name
        assert r.duplicate_reports == 0 and r.lost_reports == 0, name
        assert r.tracker_pages == BUGS and r.verdict == "correct", name


def test_each_run_is_billed_under_its_own_project(model, tmp_path):
    """Two runs on one server: each finds its own 12 calls on the bill, however many others
    share it (a resume finds the calls of the run it resumes)."""
    for i in range(2):
        assert run_worker(tmp_path / f"run{i}", CONFIG, model=model).returncode == 0
    assert [len(model.calls_of(tmp_path / f"run{i}")) for i in range(2)] == [12, 12]
    assert run_project(tmp_path / "run0") != run_project(tmp_path / "run1")
    assert run_project(tmp_path / "run0") == run_project(tmp_path / "x" / ".." / "run0")


def test_a_resume_after_a_kill_in_the_call_leaves_the_killed_prefix_then_a_whole_answer(
        model, tmp_path):
    run_dir = tmp_path / "run"
    killed = run_worker(run_dir, CONFIG, crash_at="p3.call_chunk3", model=model)
    assert killed.returncode == -9, killed.stderr
    resumed = run_worker(run_dir, CONFIG, model=model)
    assert resumed.returncode == 0, resumed.stderr
    page3 = [r for r in read_call_journal(run_dir) if r["page"] == 3]
    first, second = (sorted({r["request_id"] for r in page3 if r["pid"] == pid})
                     for pid in dict.fromkeys(r["pid"] for r in page3))
    assert len(first) == len(second) == 1 and first != second      # two calls, two processes
    billed = {b["request_id"] for b in model.calls_of(run_dir)}
    assert set(first + second) <= billed
    assert page3[-1]["t"] == "last_chunk" and page3[-1]["prefix"] == " ".join(words_of(3))
    assert json.loads(resumed.stdout)["model_calls"] == 10          # pages 3 to 12


# --- fork safety ------------------------------------------------------------------------------------

def _sockets(pid: int) -> list[str]:
    fds = Path(f"/proc/{pid}/fd")
    links = []
    for fd in fds.iterdir():
        try:
            links.append(os.readlink(fd))
        except OSError:
            pass
    return [link for link in links if link.startswith("socket:")]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_worker_forked_from_the_warmed_fork_server_opens_its_own_connections(model, tmp_path):
    """The sweeps' fork server has imported and warmed the SDK, and holds no socket: each child
    connects by itself, so no child can read another's answer off a shared connection."""
    fork = ForkServer(preload=SDK_PRELOAD)
    try:
        argv = ["--dir", str(tmp_path / "run"), *CONFIG.to_args(), "--json",
                *model.worker_flags()]
        proc = fork.run(argv)
        assert proc.returncode == 0, proc.stderr
        maps = Path(f"/proc/{fork.proc.pid}/maps").read_text()
        assert "pydantic_core" in maps               # the SDK (and its pydantic) is imported
        assert _sockets(fork.proc.pid) == []         # ... and no connection was ever kept
    finally:
        fork.close()
    calls = model.calls_of(tmp_path / "run")
    assert len(calls) == 12 and len({c["peer"] for c in calls}) == 12    # its own, each call


def _in_child(fn) -> int:
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            fn()
            code = 0
        except ForkedClientError:
            code = 3
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_the_workers_model_refuses_a_connection_pool_opened_in_another_process(server, tmp_path):
    lab = LabOptions(model_url=server.base_url)
    site = Site.load()
    model = world_model(tmp_path, site, lab, CrashPlan([]))
    model.ask(1)                           # this process's pool, opened
    assert _in_child(lambda: model.ask(2)) == 3
    fresh = world_model(tmp_path, site, lab, CrashPlan([]))
    assert _in_child(lambda: fresh.ask(2)) == 0    # made before the fork, first used after it
    model.close()


# --- the command line -----------------------------------------------------------------------------

@pytest.mark.slow
def test_sweep_command_starts_a_local_server_and_reports_the_prefix_held(tmp_path):
    proc = bughunt("sweep", "--model", "local-server", "--store", "snapshot", "--intent", "off",
                   "--points", "p7.call_chunk3,p7.after_model_call", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    rows = {r["crash_point"]: r for r in out["points"]}
    assert rows["p7.call_chunk3"]["redone_model_calls"] == 1
    assert rows["p7.call_chunk3"]["prefix_held"] == " ".join(words_of(7)[:2])
    assert rows["p7.after_model_call"]["prefix_held"] == " ".join(words_of(7))
    assert out["summary"]["correct_runs"] == 2


@pytest.mark.parametrize("args, says", [
    (["sweep", "--model-url", "localhost:8000"], "--model-url: expected an http:// or https://"),
    (["sweep", "--model-url", "http://127.0.0.1:9/v1"], "needs --model-bill FILE"),
    (["sweep", "--model-name", "llama3.2"], "--model-name llama3.2: only with --model-url"),
    (["sweep", "--points", "p3.call_sent"], "p3.call_sent: no such crash point here: it is "
                                            "inside the model call"),
    (["run", "--dir", "r", "--crash-at", "p3.call_last_chunk"], "inside the model call"),
    (["run", "--dir", "r", "--model-name", "m"], "--model-name m: names a model at --model-url"),
])
def test_bad_model_flags_are_refused_in_one_sentence_and_change_nothing(tmp_path, args, says):
    proc = bughunt(*args, cwd=tmp_path)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("make, says", [
    (lambda p: p.write_text("my notes\n"), "not a bill"),
    (lambda p: p.write_text('{"request_id": "chatcmpl-1"}\n[1]\n'), "not a bill"),
    (lambda p: p.mkdir(), "is a directory"),
])
def test_a_model_bill_that_is_not_a_bill_is_refused_in_one_sentence_untouched(tmp_path, make,
                                                                            says):
    bill = tmp_path / "foreign.txt"
    make(bill)
    before = bill.read_bytes() if bill.is_file() else None
    proc = bughunt("sweep", "--model-url", "http://127.0.0.1:9/v1", "--model-bill", str(bill),
                   "--points", "p1.after_model_call", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert f"--model-bill {bill}" in last and says in last and "no such file" not in last
    assert (bill.read_bytes() if bill.is_file() else None) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["foreign.txt"]


@pytest.mark.slow
def test_a_model_that_cannot_be_reached_stops_the_worker_with_exit_69(tmp_path):
    proc = bughunt("run", "--dir", str(tmp_path / "r"), "--model-url", "http://127.0.0.1:9/v1",
                   cwd=tmp_path)
    assert proc.returncode == 69, proc.stderr
    assert "--model-url http://127.0.0.1:9/v1: the model could not be reached" in proc.stderr
    assert "Traceback" not in proc.stderr
