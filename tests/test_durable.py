"""Lesson 7's durable task runtime: every rule, with real SIGKILLed processes where it is about crashes."""

import hashlib
import json
import subprocess
import sys

import pytest

from bughunt.durable import MISSING, DurableStore, Kind, ReadOnlyError, Runtime, read_tasks
from bughunt.durable.examples import append_tool


def durable(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "bughunt.durable", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=60)


def events(proc):
    return [json.loads(line) for line in proc.stdout.splitlines()]


def ticks(proc):
    return [e["n"] for e in events(proc) if e["event"] == "tick"]


# --- count to 5 ----------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 4])
def test_count_killed_after_tick_n_resumes_at_n_plus_1_and_never_prints_n_twice(tmp_path, n):
    db = tmp_path / "count.db"
    first = durable("count", "--db", str(db), "--to", "5", "--crash-after-tick", str(n), "--json")
    assert first.returncode == -9 and ticks(first) == list(range(1, n + 1))
    row = read_tasks(db)[0]
    assert (row["status"], row["n"]) == ("running", n)
    assert json.loads(row["memos"]) == {f"printed-{i}": True for i in range(1, n + 1)}
    second = durable("count", "--db", str(db), "--to", "5", "--json")
    assert second.returncode == 0 and ticks(second) == list(range(n + 1, 6))
    assert events(second)[-1]["outcome"] == {"status": "completed", "result": "counted to 5"}
    done = read_tasks(db)[0]
    assert done["status"] == "terminal" and done["memos"] is None and done["restarts"] is None


def test_a_crash_between_memo_and_print_loses_that_print(tmp_path):
    db = tmp_path / "count.db"
    first = durable("count", "--db", str(db), "--crash-before-print", "2", "--json")
    second = durable("count", "--db", str(db), "--json")
    assert ticks(first) == [1] and ticks(second) == [3, 4, 5]      # tick 2: at most once


def test_open_turns_running_back_to_pending_keeps_the_checkpoint_and_counts_a_restart(tmp_path):
    db = tmp_path / "count.db"
    durable("count", "--db", str(db), "--crash-after-tick", "3")
    store = DurableStore(db)
    assert store.recover() == [1]
    store.close(abandon=True)                  # recovery's commit is durable without a clean close
    row = read_tasks(db)[0]
    assert (row["status"], row["n"], row["restarts"]) == ("pending", 3, 1)


def test_a_clean_close_is_not_a_crash(tmp_path):
    store = DurableStore(tmp_path / "t.db")
    tid = store.create("k", {}, {"phase": "a"})
    rec = store.get(tid)
    rec["state"]["status"] = "running"
    store.put(rec)
    store.close()
    rec = DurableStore(tmp_path / "t.db", read_only=True).get(tid)
    assert rec["state"]["status"] == "pending" and "restarts" not in rec


# --- read-only -----------------------------------------------------------------------------------

def _bytes(db):
    """The database's bytes: the main file and its write-ahead log. (The `-shm` file is SQLite's
    shared-memory index of the WAL, which every reader may rebuild; it holds no data.)"""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(db.parent.glob(db.name + "*")) if not p.name.endswith("-shm")}


def test_read_only_open_changes_no_byte_and_refuses_commits_and_resume(tmp_path):
    db = tmp_path / "count.db"
    durable("count", "--db", str(db), "--crash-after-tick", "2")    # killed: WAL files left
    before = _bytes(db)
    assert any(name.endswith("-wal") for name in before)
    store = DurableStore(db, read_only=True)
    assert store.get(1)["state"]["status"] == "running"            # not recovered
    with pytest.raises(ReadOnlyError, match="read-only"):
        store.put(store.get(1))
    with pytest.raises(ReadOnlyError, match="cannot resume"):
        Runtime(store, []).run()
    read_tasks(db)
    store.close()
    assert _bytes(db) == before


# --- memo, sleep_until, progress -----------------------------------------------------------------

def test_memo_first_write_wins_and_memos_vanish_at_the_end(tmp_path):
    seen = []

    def step(s):
        seen.append(s.memo("id", "first"))
        seen.append(s.memo("id", "second"))
        seen.append(s.memo("id"))
        seen.append(s.memo("other"))
        s.finish("ok")
    with DurableStore(tmp_path / "t.db") as store:
        rt = Runtime(store, [Kind("k", {"a": step})])
        tid = rt.submit("k", {}, {"phase": "a"})
        rt.run()
        assert seen == ["first", "first", "first", MISSING]
        assert "memos" not in store.get(tid)


def test_sleep_until_commits_the_next_checkpoint_and_the_wake_time_together(tmp_path):
    clock = [100.0]
    slept = []

    def a(s):
        s.sleep_until(s.now() + 5, {"phase": "b"})

    def b(s):
        s.finish(s.now())
    with DurableStore(tmp_path / "t.db") as store:
        rt = Runtime(store, [Kind("k", {"a": a, "b": b})], clock=lambda: clock[0],
                     sleep=lambda d: (slept.append(d), clock.__setitem__(0, clock[0] + d)))
        tid = rt.submit("k", {}, {"phase": "a"})
        rt._dispatch(store.get(tid))
        assert store.get(tid)["state"] == {"status": "sleeping", "checkpoint": {"phase": "b"},
                                           "wake_at": 105.0}
        rt.run()
        assert slept == [5.0] and store.get(tid)["state"]["outcome"]["result"] == 105.0


def test_a_step_without_a_new_checkpoint_faults_instead_of_looping(tmp_path):
    with DurableStore(tmp_path / "t.db") as store:
        rt = Runtime(store, [Kind("k", {"a": lambda s: None})])
        tid = rt.submit("k", {}, {"phase": "a"})
        rt.run()
        assert store.get(tid)["state"]["outcome"]["detail"]["reason"] == "no durable progress"


# --- the restart limit ---------------------------------------------------------------------------

def _crash_loop(db, *limit):
    return durable("crash-loop", "--db", str(db), "--json", *limit)


def test_a_step_that_always_dies_faults_after_five_restarts_by_default(tmp_path):
    db = tmp_path / "loop.db"
    codes = [_crash_loop(db).returncode for _ in range(5)]
    assert codes == [-9] * 5 and read_tasks(db)[0]["restarts"] == 4
    last = _crash_loop(db)
    assert last.returncode == 0
    assert events(last)[-1]["outcome"] == {"status": "faulted",
                                           "detail": {"reason": "restart_limit", "restarts": 5}}


def test_restart_limit_is_configurable_and_may_be_unlimited(tmp_path):
    assert [_crash_loop(tmp_path / "a.db", "--restart-limit", "2").returncode
            for _ in range(3)] == [-9, -9, 0]
    assert [_crash_loop(tmp_path / "b.db", "--restart-limit", "unlimited").returncode
            for _ in range(8)] == [-9] * 8


def test_progress_resets_the_restart_count(tmp_path):
    with DurableStore(tmp_path / "t.db") as store:
        rt = Runtime(store, [Kind("k", {"a": lambda s: s.commit({"phase": "b"}),
                                        "b": lambda s: s.finish("done")})], restart_limit=5)
        tid = rt.submit("k", {}, {"phase": "a"})
        rec = store.get(tid)
        rec["restarts"] = 4                    # four cut-offs so far, no progress
        store.put(rec)
        rt = Runtime(store, [Kind("k", {"a": lambda s: s.commit({"phase": "b"}),
                                        "b": lambda s: s.finish("done")})], restart_limit=5)
        seen = []
        orig = rt.kinds["k"].steps["b"]
        rt.kinds["k"].steps["b"] = lambda s: (seen.append(s.record.get("restarts")), orig(s))
        rt.run()
        assert seen == [None] and store.get(tid)["state"]["outcome"]["status"] == "completed"


# --- tools ---------------------------------------------------------------------------------------

def _interrupted_tool(tmp_path, stored: str, current: str | None):
    """A tool task as a crash left it: intent recorded, partial output persisted, file appended."""
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n")
    store = DurableStore(tmp_path / "t.db")
    tid = store.create("tool", {"name": "append", "arguments": {"path": str(notes),
                                                                "text": "hello"}},
                       {"phase": "execute", "arguments": {"path": str(notes), "text": "hello"},
                        "replay": stored})
    rec = store.get(tid)
    rec["output"] = "working\n"
    store.put(rec)
    tools = [append_tool(current)] if current else []
    Runtime(store, [], tools).run()
    outcome = store.get(tid)["state"]["outcome"]
    store.close()
    return outcome, notes.read_text().splitlines()


@pytest.mark.parametrize("stored, current, reruns", [
    ("safe", "safe", True), ("safe", "unsafe", False), ("unsafe", "safe", False),
    ("unsafe", "unsafe", False), ("safe", None, False)])
def test_a_tool_reruns_only_if_stored_and_current_policy_are_both_safe(tmp_path, stored, current,
                                                                      reruns):
    outcome, lines = _interrupted_tool(tmp_path, stored, current)
    if reruns:
        assert outcome["status"] == "completed" and outcome["result"]["content"] == "appended"
        assert lines == ["hello", "hello"]
    else:
        assert outcome["status"] == "failed" and outcome["is_error"]
        assert outcome["message"] == "Tool append was interrupted and may have partially run"
        assert outcome["content"].startswith("working\n<harness>\n[error] Tool append was")
        assert lines == ["hello"]


@pytest.mark.parametrize("replay, lines, status", [("unsafe", 1, "failed"),
                                                   ("safe", 2, "completed")])
def test_tool_probe_unsafe_gives_one_line_safe_gives_two(tmp_path, replay, lines, status):
    db = tmp_path / "probe.db"
    first = durable("tool-probe", "--db", str(db), "--replay", replay, "--crash-at", "in-execute")
    assert first.returncode == -9
    tool = read_tasks(db)[1]
    assert (tool["status"], tool["phase"], tool["replay"]) == ("running", "execute", replay)
    second = durable("tool-probe", "--db", str(db), "--replay", replay, "--json")
    out = {e["event"]: e for e in events(second)}
    assert len(out["notes"]["lines"]) == lines and out["tool"]["outcome"]["status"] == status
    if replay == "unsafe":
        assert out["tool"]["outcome"]["content"].startswith("working\n<harness>")


def test_bad_flags_are_refused_naming_the_flag(tmp_path):
    proc = durable("crash-loop", "--db", str(tmp_path / "x.db"), "--restart-limit", "0")
    assert proc.returncode == 2 and "--restart-limit" in proc.stderr
    proc = durable("tasks", "--db", str(tmp_path / "missing.db"))
    assert proc.returncode == 2 and "missing.db" in proc.stderr and "no such" in proc.stderr
    assert not (tmp_path / "missing.db").exists()


# --- the lesson's close, and two writers of one memo ---------------------------------------------

def test_a_clean_close_after_tick_2_leaves_the_texts_table(tmp_path):
    db = tmp_path / "count.db"
    first = durable("count", "--db", str(db), "--close-after-tick", "2", "--json")
    assert first.returncode == 0 and ticks(first) == [1, 2]
    row = read_tasks(db)[0]
    assert (row["status"], row["n"], row["restarts"]) == ("pending", 2, None)
    assert json.loads(row["memos"]) == {"printed-1": True, "printed-2": True}
    assert ticks(durable("count", "--db", str(db), "--json")) == [3, 4, 5]


def test_two_writers_of_one_memo_both_get_the_first_writers_value(tmp_path):
    db = tmp_path / "m.db"
    first = durable("memo", "--db", str(db), "--candidate", "A", "--crash-after-memo", "--json")
    second = durable("memo", "--db", str(db), "--candidate", "B", "--json")
    assert first.returncode == -9 and second.returncode == 0
    assert [e["winner"] for e in events(first) + events(second) if e["event"] == "memo"] == \
        ["A", "A"]
    assert events(second)[-1]["outcome"]["result"] == "A"


# --- restarts reset by progress, built-in tasks at the limit -------------------------------------

def test_progress_resets_the_restart_count_so_a_flaky_task_completes_past_the_limit(tmp_path):
    db = tmp_path / "f.db"
    codes, died = [], 0
    for _ in range(10):
        proc = durable("flaky", "--db", str(db), "--dies", "2", "--steps", "3",
                       "--restart-limit", "3", "--json")
        codes.append(proc.returncode)
        died += sum(e["event"] == "dies" for e in events(proc))
        if proc.returncode == 0:
            break
    assert codes[-1] == 0 and died == 6 > 3
    assert events(proc)[-1]["outcome"] == {"status": "completed", "result": "3 steps done"}


def test_an_extension_task_at_the_limit_is_faulted_and_reported_task_faulted(tmp_path):
    db = tmp_path / "loop.db"
    assert _crash_loop(db, "--restart-limit", "1").returncode == -9
    last = _crash_loop(db, "--restart-limit", "1")
    assert [e for e in events(last) if e["event"] == "report"] == [
        {"event": "report", "type": "task_faulted", "task": 1, "kind": "crash-loop",
         "reason": "restart_limit"}]


def test_a_tool_cut_off_at_the_limit_gets_a_restart_limit_error_result_not_a_rerun(tmp_path):
    db = tmp_path / "p.db"
    runs = [durable("tool-probe", "--db", str(db), "--crash-at", "in-call", "--restart-limit", "2",
                    "--json") for _ in range(3)]
    assert [r.returncode for r in runs] == [-9, -9, 0]
    out = {e["event"]: e for e in events(runs[-1])}
    assert out["tool"]["outcome"]["message"] == "restart_limit"
    assert "cut off too often (restart_limit)" in out["tool"]["outcome"]["content"]
    assert out["notes"]["lines"] == []                          # the tool itself never ran
    assert (out["report"]["type"], out["report"]["kind"], out["report"]["reason"]) == (
        "task_interrupted", "tool", "restart_limit")


def test_a_generation_cut_off_at_the_limit_ends_with_runfailure_restart_limit(tmp_path):
    db = tmp_path / "g.db"
    runs = [durable("generate", "--db", str(db), "--crash-before-send", "--restart-limit", "2",
                    "--json") for _ in range(3)]
    assert [r.returncode for r in runs] == [-9, -9, 0]
    out = {e["event"]: e for e in events(runs[-1])}
    assert out["done"]["outcome"]["message"] == "runFailure"
    assert (out["done"]["outcome"]["reason"], out["done"]["outcome"]["input"]) == (
        "restart_limit", "unanswered")
    assert out["bill"]["requests"] == []                        # nothing was ever sent
    assert out["report"]["type"] == "task_interrupted"


# --- a model request in flight -------------------------------------------------------------------

def test_a_request_killed_mid_stream_is_retried_once_and_its_half_answer_kept_aborted(tmp_path):
    db = tmp_path / "g.db"
    first = durable("generate", "--db", str(db), "--crash-mid-stream", "--json")
    assert first.returncode == -9
    assert read_tasks(db)[0]["phase"] == "stream"              # in flight, on disk
    second = durable("generate", "--db", str(db), "--json")
    out = {e["event"]: e for e in events(second)}
    result = out["done"]["outcome"]["result"]
    assert result["attempt"] == 2
    assert result["aborted"] == [{"attempt": 1, "text": "Page 3 has a bug: "}]
    requests = out["bill"]["requests"]
    assert [r["request"] for r in requests] == [1, 2]
    assert requests[0]["messages"] == requests[1]["messages"]   # the half answer is never sent


def test_a_request_stopped_by_a_clean_close_is_sent_again_as_the_same_attempt(tmp_path):
    db = tmp_path / "g.db"
    first = durable("generate", "--db", str(db), "--close-mid-stream", "--json")
    assert first.returncode == 0 and read_tasks(db)[0]["status"] == "pending"
    out = {e["event"]: e for e in events(durable("generate", "--db", str(db), "--json"))}
    assert out["done"]["outcome"]["result"]["attempt"] == 1
    assert len(out["bill"]["requests"]) == 2


def test_a_request_killed_at_every_attempt_ends_runfailure_interrupted_unanswered(tmp_path):
    db = tmp_path / "g.db"
    codes = [durable("generate", "--db", str(db), "--retries", "1", "--crash-mid-stream",
                     "--json") for _ in range(3)]
    assert [c.returncode for c in codes] == [-9, -9, 0]
    out = {e["event"]: e for e in events(codes[-1])}
    outcome = out["done"]["outcome"]
    assert (outcome["status"], outcome["message"], outcome["reason"], outcome["input"]) == (
        "failed", "runFailure", "interrupted", "unanswered")
    assert [a["attempt"] for a in outcome["aborted"]] == [1, 2]
    assert len(out["bill"]["requests"]) == 2
    assert (out["report"]["type"], out["report"]["reason"]) == ("task_interrupted", "interrupted")


# --- the four checkpoints of one tool call -------------------------------------------------------

def _probe(db, *args):
    return {e["event"]: e for e in events(durable("tool-probe", "--db", str(db), "--json", *args))}


def test_killed_before_the_intent_the_call_phase_and_beforetool_rerun_the_tool_runs_once(tmp_path):
    db = tmp_path / "p.db"
    assert durable("tool-probe", "--db", str(db), "--crash-at", "in-call").returncode == -9
    assert read_tasks(db)[1]["phase"] == "call"
    out = _probe(db)
    assert out["hooks"]["runs"] == ["hook run 1: approved in hook run 1",
                                    "hook run 2: approved in hook run 1"]
    assert out["notes"]["lines"] == ["hello"] and out["tool"]["outcome"]["status"] == "completed"


def test_killed_after_the_intent_an_unsafe_tool_that_never_ran_is_reported_interrupted(tmp_path):
    db = tmp_path / "p.db"
    assert durable("tool-probe", "--db", str(db), "--crash-at", "after-intent").returncode == -9
    out = _probe(db)
    assert out["notes"]["lines"] == []
    assert out["tool"]["outcome"]["message"] == "Tool append was interrupted and may have partially run"


def test_killed_after_the_tool_result_only_the_agent_step_reruns(tmp_path):
    db = tmp_path / "p.db"
    assert durable("tool-probe", "--db", str(db), "--crash-at", "after-result").returncode == -9
    tasks = read_tasks(db)
    assert (tasks[0]["status"], tasks[1]["status"]) == ("running", "terminal")
    out = _probe(db)
    assert out["notes"]["lines"] == ["hello"] and out["hooks"]["runs"] == [
        "hook run 1: approved in hook run 1"]
    assert out["tool"]["outcome"]["status"] == "completed"


@pytest.mark.parametrize("stored, current, lines", [("safe", "safe", 2), ("safe", "unsafe", 1),
                                                    ("unsafe", "safe", 1),
                                                    ("unsafe", "unsafe", 1)])
def test_stored_times_current_replay_with_real_processes(tmp_path, stored, current, lines):
    db = tmp_path / "p.db"
    assert durable("tool-probe", "--db", str(db), "--replay", stored,
                   "--crash-at", "in-execute").returncode == -9
    out = _probe(db, "--replay", current)
    assert len(out["notes"]["lines"]) == lines
    assert out["tool"]["outcome"]["status"] == ("completed" if lines == 2 else "failed")


def test_a_clean_close_leaves_a_crashed_processs_running_task_for_recovery(tmp_path):
    db = tmp_path / "c.db"
    durable("count", "--db", str(db), "--crash-after-tick", "2")
    DurableStore(db).close()                   # opened and closed, never recovered
    assert read_tasks(db)[0]["status"] == "running"
    with DurableStore(db) as store:
        assert store.recover() == [1] and store.get(1)["restarts"] == 1


def test_a_creation_cut_off_before_its_link_leaves_only_a_leftover_the_next_open_removes(tmp_path):
    db = tmp_path / "c.db"
    (tmp_path / "c.db.new").write_bytes(b"half a database")   # what a kill mid-creation leaves
    with DurableStore(db) as store:
        assert store.all() == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.db", "c.db.lock"]


def test_a_clean_close_puts_back_only_the_tasks_this_process_set_running(tmp_path):
    db = tmp_path / "p.db"
    durable("tool-probe", "--db", str(db), "--crash-at", "in-execute")   # tool task 2 left running
    store = DurableStore(db)
    tid = store.create("mine", {}, {"phase": "a"})
    rec = store.get(tid)
    rec["state"]["status"] = "running"
    store.put(rec)
    store.close()
    assert [r["status"] for r in read_tasks(db)] == ["waiting", "running", "pending"]
