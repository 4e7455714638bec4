"""The model through the real openai SDK: MockModel's interface, the moments of a call in flight,
and the fork-safety rule (a connection pool never crosses a fork)."""

import os

import openai
import pytest

from bughunt.inflight import call_points
from bughunt.llm import ForkedClientError, OpenAIModel, page_messages, warm_sdk
from bughunt.modelserver import (ModelServer, ServerProcess, answer_text, answer_words,
                                 read_server_bill)
from bughunt.world import Site


@pytest.fixture
def server(tmp_path):
    with ModelServer(tmp_path / "bill.jsonl") as s:
        yield s


@pytest.fixture(scope="module")
def site():
    return Site.load()


def test_openai_model_answers_like_mock_model_and_the_server_bills_it(server, site):
    seen = []
    model = OpenAIModel(site, base_url=server.base_url, on_chunk=seen.append)
    reply, tokens = model.ask(3)
    model.close()
    [billed] = server.read_bill()
    assert reply == answer_text("bughunt-mock", page_messages(site, 3))
    assert tokens == billed["total_tokens"] and model.calls == 1
    assert billed["request_id"] == seen[0].request_id


def test_on_chunk_sees_sent_every_chunk_and_last_chunk_in_order(server, site):
    seen = []
    model = OpenAIModel(site, base_url=server.base_url, on_chunk=seen.append)
    reply, _ = model.ask(7)
    chunks = len(answer_words("bughunt-mock", page_messages(site, 7))) + 3   # role, finish, usage
    assert [r.name for r in seen] == call_points(chunks)
    assert seen[0].prefix == "" and seen[-1].prefix == reply
    assert all(reply.startswith(r.prefix) for r in seen)


def test_without_streaming_only_last_chunk_fires(server, site):
    seen = []
    reply, _ = OpenAIModel(site, base_url=server.base_url, stream=False,
                           on_chunk=seen.append).ask(2)
    assert [(r.name, r.prefix) for r in seen] == [("last_chunk", reply)]


def test_calls_counts_what_the_caller_asked_the_bill_what_the_sdk_sent(server, site):
    model = OpenAIModel(site, base_url=server.base_url, stream=False, max_retries=1, fault="cut=1")
    with pytest.raises(openai.APIConnectionError):
        model.ask(1)
    assert model.calls == 1 and [b["retry"] for b in server.read_bill()] == [0, 1]


def _in_child(fn) -> int:
    """Run fn() in a forked child; its exit status (0 when fn returned normally)."""
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


def test_a_forked_child_refuses_the_parents_connection_pool(tmp_path, site):
    with ServerProcess(tmp_path / "bill.jsonl") as server:
        model = OpenAIModel(site, base_url=server.base_url, stream=False)
        model.ask(1)                          # the parent's pool now holds a keep-alive socket
        assert _in_child(lambda: model.ask(2)) == 3
        child_model_in_child = _in_child(lambda: OpenAIModel(site, base_url=server.base_url).ask(2))
        model.ask(3)
        model.close()
    assert child_model_in_child == 0
    assert len(read_server_bill(tmp_path / "bill.jsonl")) == 3       # the refused call never left


def test_a_model_created_but_never_used_before_a_fork_works_in_the_child(tmp_path, site):
    warm_sdk()                                # imports and a client, but no connection
    with ServerProcess(tmp_path / "bill.jsonl") as server:
        model = OpenAIModel(site, base_url=server.base_url)
        assert _in_child(lambda: model.ask(4)) == 0
    assert len(read_server_bill(tmp_path / "bill.jsonl")) == 1


def test_why_it_matters_an_unguarded_fork_shares_the_parents_tcp_connection(tmp_path):
    """Parent and child talk on one TCP connection (the server sees one peer address): two
    processes, one byte stream, and nothing but luck keeps one's answer from the other."""
    messages = [{"role": "user", "content": "hi"}]
    with ServerProcess(tmp_path / "bill.jsonl") as server:
        raw = openai.OpenAI(base_url=server.base_url, api_key="x")
        raw.chat.completions.create(model="m", messages=messages)
        assert _in_child(lambda: raw.chat.completions.create(model="m", messages=messages)) == 0
        raw.chat.completions.create(model="m", messages=messages)
        guarded = OpenAIModel(Site.load(), base_url=server.base_url)
        assert _in_child(lambda: guarded.ask(1)) == 0
        raw.close()
    bill = read_server_bill(tmp_path / "bill.jsonl")
    parent, child, parent_again, own = bill
    assert parent["peer"] == child["peer"] == parent_again["peer"]   # one connection, two processes
    assert own["peer"] != parent["peer"]          # a model made in the child: its own connection
