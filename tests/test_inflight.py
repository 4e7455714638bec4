"""Lesson 11's experiments: a call killed in flight (real SIGKILL inside the call), and what the
openai SDK does by itself, each judged by the server's bill."""

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from bughunt import inflight
from bughunt.experiment import frame
from bughunt.llm import page_messages
from bughunt.modelserver import ModelServer, ServerProcess, answer_words, read_server_bill
from bughunt.world import Site


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory):
    """Three kills inside a redone call and one inside an aborted one, run two at a time."""
    tmp = tmp_path_factory.mktemp("inflight")
    cases = [("sent", "redo", 1), ("chunk#3", "redo", 2), ("last_chunk", "redo", 3),
             ("chunk#2", "abort", 4)]
    with ServerProcess(tmp / "bill.jsonl") as server:
        with ThreadPoolExecutor(2) as pool:
            records = list(pool.map(lambda c: inflight.kill_in_call(
                c[0], pending=c[1], page=c[2], base_url=server.base_url, bill=tmp / "bill.jsonl",
                run_dir=tmp / f"run{c[2]}"), cases))
    return {(r.crash_point, r.pending): r for r in records}


@pytest.mark.slow
@pytest.mark.parametrize("point", ["sent", "chunk#3", "last_chunk"])
def test_a_call_killed_in_flight_was_billed_and_the_redo_pays_it_again(killed_and_resumed, point):
    r = killed_and_resumed[(point, "redo")]
    assert r.died_by_sigkill and r.killed_call_billed
    assert (r.billed_calls, r.redone_model_calls) == (2, 1)
    assert r.outcome == "answered" and r.reply_matches_clean
    assert r.reply.startswith(r.prefix_held)


@pytest.mark.slow
def test_the_journal_holds_exactly_the_prefix_received_before_the_kill(killed_and_resumed):
    sent, mid, last = (killed_and_resumed[(p, "redo")] for p in ("sent", "chunk#3", "last_chunk"))
    assert (sent.chunks_held, sent.prefix_held) == (0, "")
    # chunk 1 carries the role only: three chunks are the first two words
    assert mid.chunks_held == 3 and mid.prefix_held == " ".join(mid.reply.split()[:2])
    assert last.prefix_held == last.reply


def test_abort_records_the_call_with_its_prefix_and_pays_nothing_more(killed_and_resumed):
    r = killed_and_resumed[("chunk#2", "abort")]
    assert r.died_by_sigkill and r.killed_call_billed
    assert (r.billed_calls, r.redone_model_calls) == (1, 0)
    assert r.outcome == "aborted" and r.reply is None
    assert r.prefix_held == answer_words("bughunt-mock", page_messages(Site.load(), 4))[0]


def test_a_resume_after_a_recorded_answer_calls_nothing(tmp_path):
    with ModelServer(tmp_path / "bill.jsonl") as server:
        first = inflight.run_call(base_url=server.base_url, journal=tmp_path / "j.jsonl", page=5)
        again = inflight.run_call(base_url=server.base_url, journal=tmp_path / "j.jsonl", page=5)
    assert (first["action"], again["action"]) == ("call", "done")
    assert again["reply"] == first["reply"] and len(read_server_bill(tmp_path / "bill.jsonl")) == 1


def test_a_crash_point_the_call_never_reaches_is_refused(tmp_path):
    with ModelServer(tmp_path / "bill.jsonl") as server:
        with pytest.raises(ValueError, match="never reached"):
            inflight.kill_in_call("chunk#99", base_url=server.base_url,
                                  bill=tmp_path / "bill.jsonl", run_dir=tmp_path / "r")


@pytest.mark.parametrize("args, flag", [(["--crash-at", "chunk#0"], "--crash-at"),
                                        (["--fault", "cut=x"], "--fault"),
                                        (["--page", "0"], "--page"),
                                        (["--pending", "later"], "--pending")])
def test_bad_flags_of_the_call_process_exit_2_naming_the_flag(tmp_path, args, flag):
    proc = subprocess.run([sys.executable, "-m", "bughunt.inflight", "--base-url",
                           "http://127.0.0.1:9/v1", "--journal", str(tmp_path / "j"), *args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and flag in proc.stderr.splitlines()[-1]
    assert "Traceback" not in proc.stderr and not (tmp_path / "j").exists()


def _journal_dir(path):
    path.mkdir()


def _foreign_text(path):
    path.write_text("my notes\n")


def _foreign_json(path):
    path.write_text('{"t": "sent", "page": 3}\n[1, 2]\n')


@pytest.mark.parametrize("make, words", [(_journal_dir, "is a directory"),
                                         (_foreign_text, "not a call journal"),
                                         (_foreign_json, "not a call journal")])
def test_a_journal_that_is_not_a_journal_is_refused_before_any_call(tmp_path, make, words):
    journal = tmp_path / "journal.jsonl"
    make(journal)
    before = journal.read_bytes() if journal.is_file() else None
    with ModelServer(tmp_path / "bill.jsonl") as server:
        proc = subprocess.run([sys.executable, "-m", "bughunt.inflight", "--base-url",
                               server.base_url, "--journal", str(journal)],
                              capture_output=True, text=True, timeout=60)
        assert server.read_bill() == []                       # no call was made
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"--journal {journal}" in lines[0] and words in lines[0], lines
    assert "valid JSON" not in lines[0]
    assert (journal.read_bytes() if journal.is_file() else None) == before


def test_a_malformed_chunk_fails_the_call_process_with_one_sentence_not_a_traceback(tmp_path):
    with ModelServer(tmp_path / "bill.jsonl") as server:
        proc = subprocess.run([sys.executable, "-m", "bughunt.inflight", "--base-url",
                               server.base_url, "--journal", str(tmp_path / "j.jsonl"),
                               "--fault", "malformed=3"], capture_output=True, text=True,
                              timeout=60)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "not valid JSON" in proc.stderr


# --- what the SDK does by itself ---------------------------------------------------------------

@pytest.fixture
def served(tmp_path):
    with ModelServer(tmp_path / "bill.jsonl") as server:
        yield {"base_url": server.base_url, "bill": tmp_path / "bill.jsonl"}


@pytest.mark.slow
def test_sdk_retries_a_timeout_twice_by_default_and_every_try_is_billed(served):
    r = inflight.sdk_on_timeout(**served)
    assert (r.requests_sent, r.billed) == (3, 3)
    assert r.raised == "openai.APITimeoutError" and r.caught_by_api_error


def test_sdk_retries_a_429_after_retry_after_and_refusals_are_not_billed(served):
    r = inflight.sdk_on_rate_limit(**served)
    assert r.statuses == (429, 429, 200) and r.billed == 1 and r.complete
    gave_up = inflight.sdk_on_rate_limit(refusals=3, **served)
    assert gave_up.raised == "openai.RateLimitError" and gave_up.billed == 0


def test_sdk_does_not_retry_a_cut_stream_the_prefix_is_all_the_caller_has(served):
    r = inflight.sdk_on_cut_stream(cut=3, **served)
    assert (r.requests_sent, r.billed, r.chunks) == (1, 1, 3)
    assert r.raised == "openai.APIConnectionError" and not r.complete
    assert len(r.prefix.split()) == 2


def test_sdk_retries_a_cut_body_when_not_streaming_and_bills_each_try(served):
    r = inflight.sdk_on_cut_stream(stream=False, max_retries=1, **served)
    assert (r.requests_sent, r.billed) == (2, 2) and r.raised == "openai.APIConnectionError"


def test_a_malformed_chunk_escapes_except_openai_api_error(served):
    r = inflight.sdk_on_malformed_chunk(at=3, **served)
    assert r.raised == "json.JSONDecodeError" and r.caught_by_api_error is False
    assert (r.requests_sent, r.billed, r.chunks) == (1, 1, 2)


@pytest.mark.slow
def test_the_timeout_limits_each_read_not_the_whole_call(served):
    r = inflight.sdk_on_slow_stream(**served)      # 0.1 s per chunk, 0.4 s timeout
    assert r.complete and r.raised is None and r.elapsed_s > r.timeout_s and r.billed == 1


def test_a_stream_stalled_past_the_timeout_fails_without_a_retry(served):
    r = inflight.sdk_on_stalled_stream(**served)
    assert r.raised == "openai.APITimeoutError" and (r.requests_sent, r.billed) == (1, 1)


def test_records_become_one_dataframe_row_each(served):
    rows = frame([inflight.sdk_on_rate_limit(**served),
                  inflight.sdk_on_malformed_chunk(**served)])
    assert list(rows["case"]) == ["rate_limit", "malformed_chunk"]
    assert list(rows["billed"]) == [1, 1]


def test_call_points_name_every_moment_of_a_streamed_call():
    site = Site.load()
    n = len(answer_words("bughunt-mock", page_messages(site, 3))) + 3
    points = inflight.call_points(n)
    assert points[0] == "sent" and points[-1] == "last_chunk" and len(points) == n + 2
    assert all(inflight.is_call_point(p) for p in points)
    assert not any(inflight.is_call_point(p) for p in ("chunk#0", "chunk#", "after_model_call"))
