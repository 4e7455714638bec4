"""Lesson 11's lab layer: the kill tables and figures, the SDK tables, the choices, the panel
driven by `.value` and `.click()`, and the exercises' judges."""

import os
import signal
import subprocess
from pathlib import Path

import pytest
from matplotlib.figure import Figure

from bughunt import inflight
from bughunt.inflight import SdkBehaviour
from bughunt.lab.lessons import l11_call_in_flight as cif
from bughunt.lab.judges import judge
from bughunt.lab.views import Table
from bughunt.modelserver import read_server_bill


@pytest.fixture(scope="module")
def lab():
    return cif.inflight.shared_lab()


@pytest.fixture(scope="module")
def at_chunk5(lab):
    """Page 3's call killed at chunk#5, resumed once with each rule."""
    return {p: cif.kill_page_call("chunk#5", p) for p in cif.PENDING}


def labelled(fig: Figure) -> bool:
    """A title (on an axis or the figure) and a label on every axis that has data."""
    titled = any(ax.get_title() for ax in fig.axes) or bool(fig.get_suptitle())
    drawn = [ax for ax in fig.axes if ax.has_data()]
    return titled and bool(drawn) and all(ax.get_xlabel() or ax.get_ylabel() for ax in drawn)


# --- the call, and the kill inside it -------------------------------------------------------------

def test_points_of_a_streamed_call_are_every_chunk_and_a_whole_answer_has_one():
    words = len(cif.answer_of(3))
    points = cif.points_of(3)
    assert points[0] == "sent" and points[-1] == "last_chunk" and len(points) == words + 5
    assert cif.points_of(3, stream=False) == ["last_chunk"]


def test_a_clean_call_is_billed_once_with_its_words_as_completion_tokens(lab):
    start = len(read_server_bill(lab.bill))
    clean = cif.clean_call()
    assert len(read_server_bill(lab.bill)) == start + 1
    assert clean["reply"] == " ".join(cif.answer_of())
    assert clean["bill"]["completion_tokens"] == len(cif.answer_of())
    assert clean["bill"]["retry"] == 0 and clean["bill"]["stream"] is True


def test_the_kill_table_shows_the_prefix_held_and_the_bill_for_each_rule(at_chunk5):
    df = cif.kill_table([at_chunk5["redo"], at_chunk5["abort"]]).df
    df = df.reset_index().set_index("resume")
    four = " ".join(cif.answer_of()[:4])           # chunk 1 carries only the role
    assert list(df["prefix held"]) == [four, four]
    assert list(df["calls billed"]) == [2, 1] and list(df["redone calls"]) == [1, 0]
    assert list(df["the resume ends"]) == ["answered", "aborted"]
    assert df["killed by SIGKILL"].all() and df["killed call billed"].all()
    assert "killed_request_id" not in df and "killed request id" not in df   # differs every run


def test_a_kill_table_whose_redone_calls_are_not_billed_less_one_is_refused(at_chunk5):
    from dataclasses import replace

    from bughunt.lab.claims import TableError

    broken = replace(at_chunk5["redo"], redone_model_calls=2)      # billed 2: redone must be 1
    with pytest.raises(TableError, match="redone calls 2 but calls billed 2"):
        cif.kill_table([broken])


def test_the_sweep_summary_partitions_the_points_by_what_was_billed(at_chunk5):
    from dataclasses import replace

    from bughunt.lab.claims import TableError

    records = [at_chunk5["redo"], replace(at_chunk5["redo"], crash_point="sent"),
               at_chunk5["abort"]]
    df = cif.kill_sweep_summary(records).df
    assert df.loc["redo", "crash points"] == 2 and df.loc["redo", "billed twice"] == 2
    assert df.loc["abort", "billed once"] == 1 and df.loc["abort", "held the whole answer"] == 0
    bad = df.copy()
    bad.loc["redo", "billed once"] = 1                  # 1 + 2 + 0 points, of 2
    with pytest.raises(TableError, match="billed once 1 \\+ billed twice 2"):
        Table(bad, "the kill sweep", cif.SWEEP_INVARIANTS)


@pytest.mark.slow
def test_a_sweep_runs_each_point_for_each_rule_and_its_figure_is_labelled(lab):
    seen = []
    records = cif.kill_sweep(points=["sent", "chunk#3", "last_chunk"],
                             progress=lambda done, total: seen.append((done, total)))
    assert [(r.crash_point, r.pending) for r in records] == [
        (p, rule) for rule in ("redo", "abort") for p in ("sent", "chunk#3", "last_chunk")]
    assert seen[-1] == (6, 6)
    assert [r.billed_calls for r in records] == [2, 2, 2, 1, 1, 1]
    fig = cif.plot_kill_sweep(records)
    assert labelled(fig) and "prefix" in fig.axes[0].get_title()
    assert "billed" in fig.axes[0].get_ylabel() and "words" in fig.axes[1].get_ylabel()
    assert "crash point" in fig.axes[1].get_xlabel()
    assert [t.get_text() for t in fig.axes[1].get_xticklabels()] == ["sent", "chunk#3",
                                                                      "last_chunk"]


# --- what the SDK does by itself ------------------------------------------------------------------

def _sdk(case, sent, billed, raised=None, caught=None, chunks=0, prefix="", complete=False,
         stream=True, statuses=()):
    return SdkBehaviour(case=case, fault="cut=3", stream=stream, max_retries=2, timeout_s=0.2,
                        requests_sent=sent, statuses=statuses, billed=billed, raised=raised,
                        caught_by_api_error=caught, chunks=chunks, prefix=prefix,
                        complete=complete, elapsed_s=0.42)


def test_the_sdk_table_says_what_the_caller_holds_without_the_answers_length_or_times():
    rows = cif.sdk_table([
        _sdk("ok", 3, 1, chunks=12, prefix="a b c d e f g h i", complete=True,
             statuses=(429, 429, 200)),
        _sdk("cut", 1, 1, "openai.APIConnectionError", True, chunks=3, prefix="a b"),
        _sdk("bad", 1, 1, "json.JSONDecodeError", False, chunks=2, prefix="a")]).df
    assert list(rows["the caller holds"]) == ["the whole answer", "2 words (3 chunks), then "
                                              "nothing", "1 word (2 chunks), then nothing"]
    assert list(rows["statuses"]) == ["429 429 200", "(none)", "(none)"]
    assert rows["what reached the caller"].iloc[2] == ("raised json.JSONDecodeError (NOT caught "
                                                       "by except openai.APIError)")
    assert "elapsed (s)" not in rows and "chunks" not in rows
    assert list(cif.sdk_timing([_sdk("t", 1, 1)]).df["elapsed / timeout"]) == [2.1]


def test_the_sdk_table_refuses_a_case_billed_more_often_than_it_was_sent():
    from bughunt.lab.claims import TableError

    with pytest.raises(TableError, match="'billed' is 4, more than 'requests sent' \\(3\\)"):
        cif.sdk_table([_sdk("timeout", 3, 4)])


def test_the_sdk_figure_draws_sent_beside_billed_for_every_case():
    records = [_sdk("timeout", 3, 3, "openai.APITimeoutError", True, stream=False),
               _sdk("bad", 1, 1, "json.JSONDecodeError", False)]
    fig = cif.plot_sdk(records)
    ax = fig.axes[0]
    widths = sorted(round(p.get_width()) for p in ax.patches)
    assert widths == [1, 1, 3, 3] and labelled(fig)
    assert any("not streamed" in t.get_text() for t in ax.get_yticklabels())


@pytest.mark.slow
def test_every_attempt_of_a_timed_out_call_is_billed_and_none_carries_an_idempotency_key(lab):
    attempts = cif.attempts_of_a_timed_out_call()
    assert [a.retry_count_header for a in attempts] == ["0", "1", "2"]
    assert all(a.billed and a.same_body_as_first and a.idempotency_header == ""
               for a in attempts)
    df = cif.attempts_table(attempts).df
    assert set(df["idempotency header"]) == {"(none sent)"} and set(df["status"]) == {
        "(timed out)"}


@pytest.mark.slow
def test_the_timeout_limits_each_read_a_slow_stream_outlives_it_a_stalled_one_does_not(lab):
    slow, stalled = cif.timelines()
    assert slow.raised is None and slow.ended_s > slow.timeout_s and len(slow.arrivals) >= 8
    assert all(b - a < slow.timeout_s for a, b in zip((0, *slow.arrivals), slow.arrivals))
    assert stalled.raised == "openai.APITimeoutError" and stalled.arrivals == ()
    assert labelled(cif.plot_timelines([slow, stalled]))


@pytest.mark.slow
def test_the_timing_table_and_the_timeline_figure_are_one_measurement(lab):
    lab_ = cif.shared_lab()
    records = [inflight.sdk_on_slow_stream(base_url=lab_.base_url, bill=lab_.bill),
               inflight.sdk_on_stalled_stream(base_url=lab_.base_url, bill=lab_.bill)]
    slow, stalled = cif.sdk_timelines(records)
    timing = cif.sdk_timing(records).df
    assert slow.ended_s == timing.loc["slow_stream", "elapsed (s)"] == records[0].elapsed_s
    assert stalled.ended_s == timing.loc["stalled_stream", "elapsed (s)"]
    assert len(slow.arrivals) == records[0].chunks and slow.raised is None
    assert slow.delay_s == 0.1 and stalled.raised == "openai.APITimeoutError"
    fig = cif.plot_timelines([slow, stalled])
    said = [t.get_text() for t in fig.axes[0].texts]
    assert f"whole answer after {records[0].elapsed_s:.2f} s" in said


# --- the choices, the ties, a real model ----------------------------------------------------------

def test_the_choices_put_measured_redo_and_abort_beside_a_computed_resume(at_chunk5):
    df = cif.call_choices_table(list(at_chunk5.values())).df
    redo, abort, resume = df.iloc[0], df.iloc[1], df.iloc[2]
    assert (redo["calls billed"], abort["calls billed"]) == (2, 1)
    assert redo["tokens billed"] == 2 * abort["tokens billed"]
    # the prompt (31) + the answer (12), then the prompt + the prefix as an assistant message
    # (4 + 4 words) + the remaining 8 words
    assert resume["tokens billed"] == 43 + (31 + 8) + 8
    assert list(df["source"]) == ["measured", "measured", "computed from the measured prefix"]
    assert abort["the agent ends with"] == "4 of 12 words, marked aborted"


def test_lesson_2s_finest_store_still_redoes_the_call_killed_after_it_returned(lab):
    df = cif.lesson2_contrast().df
    assert df.loc["p3.after_model_call", "redone model calls"] == 1
    assert df.loc["p3.after_visit", "redone model calls"] == 0
    assert list(df.loc[["sent", "chunk#5", "last_chunk"], "redone model calls"]) == [1, 1, 1]


def test_the_real_servers_table_names_their_addresses_and_what_is_lost():
    df = cif.real_servers_table().df
    assert df.loc["Ollama", "base_url"] == "http://localhost:11434/v1"
    assert set(df.drop(index="this lab's model server")["deterministic answers"]) == {"no"}
    assert df.loc["this lab's model server", "deterministic answers"] == "yes"


# --- the panel ------------------------------------------------------------------------------------

@pytest.fixture
def panel(lab, capsys):
    p = cif.panel()
    p.show()
    yield p
    assert capsys.readouterr().out == ""             # the panel never prints


def test_panel_shows_the_default_kill_and_fault(panel):
    assert (panel.kill.crash_point, panel.kill.pending, panel.kill.billed_calls) == (
        "chunk#5", "redo", 2)
    assert panel.sdk.fault == "cut=3" and panel.sdk.requests_sent == 1
    assert "Button field again header" in panel.kill_info.value
    assert len(panel.images()) == 1 and "2 call(s) billed" in panel.status.value


def test_moving_the_crash_point_reruns_the_kill_only(panel, monkeypatch):
    def no_sdk_call(*args, **kwargs):
        raise AssertionError("the SDK call ran again")
    monkeypatch.setattr(cif.inflight, "sdk_call", no_sdk_call)
    panel.crash_point.value = "chunk#9"
    assert panel.kill.crash_point == "chunk#9" and panel.kill.chunks_held == 9
    panel.pending.value = "abort"
    assert panel.kill.pending == "abort" and panel.kill.billed_calls == 1


def test_changing_the_fault_or_the_retries_reruns_the_sdk_call(panel):
    panel.fault.value = "429 twice (Retry-After 0.05 s)"
    assert (panel.sdk.requests_sent, panel.sdk.billed) == (3, 1)
    panel.max_retries.value = 1
    assert panel.sdk.raised == "openai.RateLimitError" and panel.sdk.billed == 0
    assert "RateLimitError" in panel.status.value


@pytest.mark.slow
def test_stream_off_moves_the_crash_point_to_last_chunk_and_says_so(panel):
    panel.stream.value = False
    assert list(panel.crash_point.options) == ["last_chunk"]
    assert panel.kill.crash_point == "last_chunk" and panel.kill.stream is False
    assert "chunk#5 does not exist" in panel.status.value and panel.sdk.stream is False
    panel.stream.value = True
    assert panel.crash_point.value == "last_chunk" and len(panel.crash_point.options) > 1


@pytest.mark.slow
def test_a_kill_that_fails_is_said_in_the_status_line(panel, monkeypatch):
    def fails(*args, **kwargs):
        raise RuntimeError("the call process failed (1) before chunk#7: boom")
    monkeypatch.setattr(cif, "kill_page_call", fails)
    panel.crash_point.value = "chunk#7"
    assert panel.kill is None and panel.kill_info.value == ""
    assert panel.status.value == ("The experiment stopped (the kill at chunk#7). The call process "
                                  "failed (1) before chunk#7: boom.")
    assert isinstance(panel.error, RuntimeError) and "boom" in panel.details.outputs[-1]["text"]


@pytest.mark.slow
def test_reset_goes_back_to_the_lessons_settings_and_forgets_results(panel, monkeypatch):
    panel.fault.value = "malformed chunk 3"
    panel.crash_point.value = "sent"
    panel.reset_button.click()
    assert (panel.crash_point.value, panel.fault.value, panel.max_retries.value) == (
        "chunk#5", "connection cut after 3 chunks", 2)
    assert panel.kill is None and panel.out.outputs == () and panel.status.value == "Reset."
    runs, real = [], cif.kill_page_call
    monkeypatch.setattr(cif, "kill_page_call", lambda *a, **k: runs.append(a) or real(*a, **k))
    panel.run_button.click()               # chunk#5 ran before the reset: it runs for real again
    assert panel.kill.crash_point == "chunk#5" and panel.sdk.fault == "cut=3"
    assert len(runs) == 1


def test_the_panel_figure_shows_the_bill_beside_the_prefix(at_chunk5):
    fig = cif.plot_panel(at_chunk5["abort"], _sdk("cut", 1, 1, "openai.APIConnectionError", True))
    assert labelled(fig) and len(fig.axes) == 2
    widths = sorted(round(p.get_width()) for p in fig.axes[0].patches)
    assert widths == [4, 12]                        # held 4 words; 1 call x 12 words billed


# --- exercises ------------------------------------------------------------------------------------

@pytest.mark.parametrize("id, right, wrong", [("11.1", 3, 2), ("11.2", 0, 1), ("11.3", 2, 3),
                                              ("11.4", False, True)])
def test_each_judge_measures_live_and_tells_right_from_wrong(lab, id, right, wrong):
    assert judge(id, right) and not judge(id, wrong)


@pytest.mark.parametrize("id, answer", [("11.1", "two"), ("11.3", None), ("11.4", "False")])
def test_a_judge_refuses_an_answer_of_the_wrong_kind_without_an_error(lab, id, answer):
    assert not judge(id, answer)


# --- practice: never a configuration the lesson ran ----------------------------------------------

def test_practice_never_draws_a_configuration_the_lesson_ran():
    seen = set()
    for seed in range(50):
        d = cif.practice_problem(seed).drawn
        seen.add(d["kind"])
        if d["kind"] == "sdk":
            assert (d["fault"], d["stream"], d["max_retries"]) not in cif.LESSON_SDK_RUNS, seed
        else:
            assert d["page"] not in cif.LESSON_KILL_PAGES, seed     # the lesson kills page 3
            points = d.get("points", (d.get("point"),))
            assert all(p in cif.points_of(d["page"]) for p in points), seed
    assert seen == {"held", "billed", "sdk"}
    assert ("ttfb=0.6", False, 2) in cif.LESSON_SDK_RUNS       # the set lists the lesson's runs


def test_the_transfer_question_is_the_generators_problem_for_its_seed():
    p = cif.practice_problem(cif.TRANSFER_SEED)
    assert cif.TRANSFER.setting == p.setting and cif.TRANSFER.question == p.question
    from bughunt.lab.judges import find_exercise
    assert find_exercise("11.5").question.endswith(p.question)


def test_practice_problems_are_answered_by_a_live_run(lab):
    for seed in (1, 9, 2):        # words held; two kills ending abort; 429 x3 with 1 retry
        p = cif.practice_problem(seed)
        answer = p.solution()
        right, said = p.check(answer.value)
        assert right, (seed, said)
    assert cif.practice_problem(9).solution().value == 2
    assert cif.practice_problem(2).solution().value == 0
