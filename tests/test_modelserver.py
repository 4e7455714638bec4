"""The local model server: the API's shape through the real SDK, its 400s, its bill, its faults."""

import hashlib
import http.client
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time

import openai
import pytest

from bughunt import inflight
from bughunt.modelserver import (FAULT_HEADER, Fault, FaultSpecError, ModelServer, ServerProcess,
                                 StartError, answer_text, answer_words, prompt_hash,
                                 read_server_bill, serve)

MESSAGES = [{"role": "system", "content": "You are a test."},
            {"role": "user", "content": "What next on page 3?"}]


@pytest.fixture
def server(tmp_path):
    with ModelServer(tmp_path / "bill.jsonl") as s:
        yield s


def sdk(server, **options) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="unused", **options)


def raw(server, body, *, method="POST", path="/v1/chat/completions", headers=None):
    """One request on its own connection: (status, headers, body bytes or partial bytes, cut?)."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn.request(method, path, body=data if method == "POST" else None,
                 headers={"Content-Type": "application/json", **(headers or {})})
    resp = conn.getresponse()
    try:
        payload, cut = resp.read(), False
    except http.client.IncompleteRead as e:
        payload, cut = e.partial, True
    conn.close()
    return resp.status, resp.headers, payload, cut


def events(payload: bytes) -> list[str]:
    return [e[len("data: "):] for e in payload.decode().split("\n\n") if e.startswith("data: ")]


def request(content="What next on page 3?", **extra) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": content}], **extra}


# --- process life ---------------------------------------------------------------------------------

def test_server_process_announces_its_address_serves_and_stops_cleanly_on_sigterm(tmp_path):
    bill = tmp_path / "bill.jsonl"
    with ServerProcess(bill) as server:
        assert server.base_url.startswith("http://127.0.0.1:") and server.base_url.endswith("/v1")
        r = openai.OpenAI(base_url=server.base_url, api_key="x").chat.completions.create(
            model="m", messages=MESSAGES)
        assert r.choices[0].message.content == answer_text("m", MESSAGES)
        code = server.stop()
    assert code == 143              # the README's code for SIGTERM, as the module doc says
    assert "Traceback" not in server.stderr() and "stopped" in server.stderr()
    assert [b["request_id"] for b in read_server_bill(bill)] == [r.id]


def test_ctrl_c_stops_the_server_without_a_traceback(tmp_path):
    server = ServerProcess(tmp_path / "bill.jsonl")
    os.kill(server.pid, signal.SIGINT)
    assert server.proc.wait(10) == 130            # the README's code for Ctrl-C
    server.stop()
    assert "Traceback" not in server.stderr()


@pytest.mark.parametrize("args, flag", [
    (["--port", "http"], "--port"),
    (["--port", "70000"], "--port"),
    (["--fault", "cut=x"], "cut=x"),
    (["--fault", "explode=1"], "explode=1"),
    (["--fault", "delay=-1"], "delay=-1"),
    (["--bill", "NO_SUCH_DIR/bill.jsonl"], "--bill"),
    (["--bill", "."], "--bill"),
    (["--fault", "ttfb=1e308"], "ttfb=1e308"),
    (["--fault", "delay=1e300"], "delay=1e300"),
    (["--fault", "retry_after=1e308"], "retry_after=1e308"),
])
def test_bad_flags_exit_2_with_one_sentence_naming_the_flag(tmp_path, args, flag):
    base = ["--bill", str(tmp_path / "bill.jsonl")]
    args = [a.replace("NO_SUCH_DIR", str(tmp_path / "missing")) for a in args]
    proc = subprocess.run([sys.executable, "-m", "bughunt.modelserver", *base, *args],
                          capture_output=True, text=True, cwd=tmp_path, timeout=30)
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert flag in last and "Traceback" not in proc.stderr
    assert not (tmp_path / "bill.jsonl").exists() or "--bill" in args


def test_a_port_in_use_is_refused_by_name_and_no_bill_is_created(tmp_path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    proc = subprocess.run([sys.executable, "-m", "bughunt.modelserver", "--port", str(port),
                           "--bill", str(tmp_path / "bill.jsonl")],
                          capture_output=True, text=True, timeout=30)
    taken.close()
    assert proc.returncode == 2 and f"--port {port}: address already in use" in proc.stderr
    assert not (tmp_path / "bill.jsonl").exists()


def test_a_bill_that_is_not_a_bill_is_refused_at_start_with_its_bytes_unchanged(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\nfor tomorrow\n")
    before = hashlib.sha256(notes.read_bytes()).hexdigest()
    proc = subprocess.run([sys.executable, "-m", "bughunt.modelserver", "--bill", str(notes)],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert f"--bill {notes}" in last and "not a bill" in last and ":1" in last
    assert hashlib.sha256(notes.read_bytes()).hexdigest() == before
    with pytest.raises(StartError, match="not a bill"):
        ModelServer(notes)


def test_an_existing_bill_is_carried_on_and_an_empty_file_is_a_new_bill(tmp_path):
    bill = tmp_path / "bill.jsonl"
    for expected in (1, 2):
        with ModelServer(bill) as server:
            sdk(server).chat.completions.create(model="m", messages=MESSAGES)
        assert len(read_server_bill(bill)) == expected
    empty = tmp_path / "empty.jsonl"
    empty.touch()
    with ModelServer(empty) as server:
        sdk(server).chat.completions.create(model="m", messages=MESSAGES)
    assert len(read_server_bill(empty)) == 1

# --- the API's shape, through the real SDK --------------------------------------------------------

def test_a_non_streamed_answer_is_a_chat_completion_with_the_billed_usage(server):
    r = sdk(server).chat.completions.create(model="m", messages=MESSAGES)
    [billed] = server.read_bill()
    assert r.object == "chat.completion" and r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.role == "assistant"
    assert r.id == billed["request_id"] == r._request_id
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (
        billed["prompt_tokens"], billed["completion_tokens"], billed["total_tokens"])
    assert billed["prompt_hash"] == prompt_hash("m", MESSAGES) and billed["stream"] is False
    assert r.usage.completion_tokens == len(r.choices[0].message.content.split())


def test_a_streamed_answer_is_chunks_then_usage_then_done(server):
    stream = sdk(server).chat.completions.create(model="m", messages=MESSAGES, stream=True,
                                                 stream_options={"include_usage": True})
    chunks = list(stream)
    [billed] = server.read_bill()
    assert all(c.object == "chat.completion.chunk" and c.id == billed["request_id"]
               for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == billed["total_tokens"]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == answer_text("m", MESSAGES)
    assert len(chunks) == len(answer_words("m", MESSAGES)) + 3
    status, headers, payload, cut = raw(server, {**request(), "stream": True})
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    assert events(payload)[-1] == "[DONE]" and not cut


def test_the_same_messages_get_the_same_answer_and_tokens_others_do_not(server):
    client = sdk(server)
    a, b = (client.chat.completions.create(model="m", messages=MESSAGES) for _ in range(2))
    other = client.chat.completions.create(model="m", messages=MESSAGES[:1])
    assert a.choices[0].message.content == b.choices[0].message.content
    assert a.usage == b.usage and a.id != b.id
    assert other.choices[0].message.content != a.choices[0].message.content


def test_max_tokens_truncates_the_answer_with_finish_reason_length(server):
    r = sdk(server).chat.completions.create(model="m", messages=MESSAGES, max_tokens=2)
    assert r.usage.completion_tokens == 2 and r.choices[0].finish_reason == "length"


# --- validation: the API's 400, never billed ------------------------------------------------------

@pytest.mark.parametrize("body, param, code", [
    (b"{not json", None, None),
    (b"", None, None),
    ([1, 2], None, "invalid_type"),
    ({"messages": [{"role": "user", "content": "hi"}]}, "model", None),
    ({**request(), "model": 7}, "model", "invalid_type"),
    ({"model": "m"}, "messages", "missing_required_parameter"),
    ({"model": "m", "messages": "hi"}, "messages", "invalid_type"),
    ({"model": "m", "messages": []}, "messages", "empty_array"),
    ({"model": "m", "messages": ["hi"]}, "messages[0]", "invalid_type"),
    ({"model": "m", "messages": [{"content": "hi"}]}, "messages[0].role",
     "missing_required_parameter"),
    ({"model": "m", "messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role",
     "invalid_value"),
    ({"model": "m", "messages": [{"role": "user", "content": 5}]}, "messages[0].content",
     "invalid_type"),
    ({"model": "m", "messages": [{"role": "user"}]}, "messages[0].content",
     "missing_required_parameter"),
    ({**request(), "stream": "yes"}, "stream", "invalid_type"),
    ({**request(), "stream_options": {"include_usage": True}}, "stream_options", "invalid_value"),
    ({**request(), "max_tokens": 0}, "max_tokens", "integer_below_min_value"),
    ({**request(), "temperatur": 1}, "temperatur", None),
])
def test_an_invalid_request_gets_the_apis_400_and_is_not_billed(server, body, param, code):
    status, _, payload, _ = raw(server, body)
    error = json.loads(payload)["error"]
    assert status == 400 and set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["message"]
    assert (error["param"], error["code"]) == (param, code)
    assert server.read_bill() == []


DEEP = 100_000


@pytest.mark.parametrize("body, param", [
    pytest.param(request([{"text": 5}]), "messages[0].content[0].text", id="text-5"),
    pytest.param(request([{"type": "text", "text": 5}]), "messages[0].content[0].text",
                 id="typed-text-5"),
    pytest.param(request([{"text": ["a"]}]), "messages[0].content[0].text", id="text-list"),
    pytest.param(request("a\ud800b"), "messages[0].content", id="surrogate-content"),
    pytest.param(request([{"type": "text", "text": "\udfff"}]), "messages[0].content[0].text",
                 id="surrogate-part"),
    pytest.param({**request(), "model": "m\ud800"}, "model", id="surrogate-model"),
    pytest.param(b'{"model": "m", "messages": ' + b"[" * DEEP + b"]" * DEEP + b"}", None,
                 id="nested-100000-deep"),
    pytest.param({**request(), "n": True}, "n", id="n-true"),
    pytest.param({**request(), "n": 1.0}, "n", id="n-1.0"),
    pytest.param({**request(), "n": 2}, "n", id="n-2"),
    pytest.param(json.dumps(request()).replace("}]", '}], "temperature": NaN', 1).encode(), None,
                 id="temperature-NaN"),
    pytest.param({**request(), "temperature": "hot"}, "temperature", id="temperature-hot"),
    pytest.param({**request(), "temperature": 9}, "temperature", id="temperature-9"),
])
def test_input_the_handler_died_on_gets_a_400_in_the_error_envelope_unbilled(server, body, param,
                                                                            capsys):
    status, _, payload, _ = raw(server, body)
    error = json.loads(payload)["error"]
    assert status == 400 and set(error) == {"message", "type", "param", "code"}, payload
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert server.read_bill() == []
    assert raw(server, request())[0] == 200             # and the server still answers
    assert "error answering" not in capsys.readouterr().err


@pytest.mark.parametrize("spec", ["ttfb=1e308", "delay=1e300", "rate_limit=1,retry_after=1e308",
                                  "retry_after=inf", "ttfb=3601", "cut=\u00b2"])
def test_a_fault_header_no_server_can_wait_out_is_a_400_and_not_billed(server, spec, capsys):
    status, _, payload, _ = raw(server, {**request(), "stream": True},
                                headers={FAULT_HEADER: spec})
    error = json.loads(payload)["error"]
    assert status == 400 and error["param"] == FAULT_HEADER and spec.split(",")[-1] in \
        error["message"]
    assert server.read_bill() == []
    assert "error answering" not in capsys.readouterr().err


def test_a_bad_fault_header_is_a_400_naming_the_header_and_is_not_billed(server):
    status, _, payload, _ = raw(server, request(), headers={FAULT_HEADER: "cut=soon"})
    assert status == 400 and FAULT_HEADER in json.loads(payload)["error"]["message"]
    assert server.read_bill() == []


def test_a_retry_count_that_is_not_ascii_digits_is_billed_as_unknown(server, capsys):
    status, _, _, _ = raw(server, request(), headers={"x-stainless-retry-count": "\u00b2"})
    assert status == 200 and [b["retry"] for b in server.read_bill()] == [None]
    assert "error answering" not in capsys.readouterr().err


@pytest.mark.parametrize("method, path", [("GET", "/v1/models"), ("POST", "/v1/completions"),
                                          ("GET", "/v1/chat/completions")])
def test_unknown_paths_are_404_and_not_billed(server, method, path):
    status, _, payload, _ = raw(server, request(), method=method, path=path)
    assert status == 404
    assert json.loads(payload)["error"]["message"] == f"Invalid URL ({method} {path})"
    assert server.read_bill() == []


def test_a_body_sent_in_chunks_is_read_whole_and_the_connection_stays_in_step(server):
    conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
    body = json.dumps(request()).encode()
    for _ in range(2):                  # the second request on the same connection still parses
        conn.request("POST", "/v1/chat/completions", body=iter([body[:10], body[10:]]),
                     headers={"Content-Type": "application/json"}, encode_chunked=True)
        resp = conn.getresponse()
        assert resp.status == 200 and json.loads(resp.read())["object"] == "chat.completion"
    conn.close()
    assert len(server.read_bill()) == 2


def test_a_body_too_large_is_a_413_before_it_is_read_and_not_billed(server):
    conn = socket.create_connection((server.host, server.port))
    conn.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                 b"Content-Length: 8388609\r\n\r\n")             # 8 MiB + 1, never sent
    answer = conn.makefile("rb").read()                              # until the server closes
    conn.close()
    assert answer.startswith(b"HTTP/1.1 413 ") and b"Connection: close" in answer
    assert server.read_bill() == []


def test_serve_gives_a_running_server_in_a_thread_or_a_process(tmp_path):
    for in_thread in (True, False):
        with serve(tmp_path / f"bill-{in_thread}.jsonl", in_thread=in_thread) as server:
            openai.OpenAI(base_url=server.base_url, api_key="x").chat.completions.create(
                model="m", messages=MESSAGES)
        assert len(read_server_bill(tmp_path / f"bill-{in_thread}.jsonl")) == 1


def test_the_sdk_raises_bad_request_and_does_not_retry_it(server):
    with pytest.raises(openai.BadRequestError) as e:
        sdk(server).chat.completions.create(model="m", messages=[])
    assert e.value.code == "empty_array" and e.value.param == "messages"
    assert server.read_bill() == []


# --- the bill -------------------------------------------------------------------------------------

def test_the_bill_is_exact_under_concurrent_clients(server):
    ids, errors = [], []
    lock = threading.Lock()

    def client(n: int):
        try:
            c = sdk(server)
            for i in range(5):
                msgs = [{"role": "user", "content": f"client {n} call {i}"}]
                if i % 2:
                    got = {ch.id for ch in c.chat.completions.create(model="m", messages=msgs,
                                                                     stream=True)}
                else:
                    got = {c.chat.completions.create(model="m", messages=msgs).id}
                with lock:
                    ids.extend(got)
            c.close()
        except Exception as e:      # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    bill = server.read_bill()
    assert len(bill) == 40 and sorted(b["request_id"] for b in bill) == sorted(ids)


@pytest.mark.slow
def test_the_bill_is_exact_when_clients_are_killed_mid_stream(tmp_path):
    """Every valid request that arrived is on the bill once, whatever happened to its client."""
    points = ["sent", "chunk#1", "chunk#4", "last_chunk"]
    with ServerProcess(tmp_path / "bill.jsonl") as server:
        children = [subprocess.Popen(
            [sys.executable, "-m", "bughunt.inflight", *inflight.call_args(
                server.base_url, tmp_path / f"journal{i}.jsonl", page=i + 1, crash_at=point,
                fault="delay=0.01")], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for i, point in enumerate(points)]
        codes = [c.wait(60) for c in children]
        for c in children:
            c.stdout.close(), c.stderr.close()
        # The server outlived its killed clients: it still answers.
        alive = openai.OpenAI(base_url=server.base_url, api_key="x").chat.completions.create(
            model="m", messages=MESSAGES)
    assert codes == [-signal.SIGKILL] * len(points)
    journaled = [inflight.pending_call(inflight.read_client_journal(tmp_path / f"journal{i}.jsonl"),
                                       i + 1)["request_id"] for i in range(len(points))]
    bill = read_server_bill(tmp_path / "bill.jsonl")
    assert sorted(b["request_id"] for b in bill) == sorted(journaled + [alive.id])


def test_a_request_is_billed_before_the_first_byte_of_its_answer(tmp_path):
    server = ModelServer(tmp_path / "bill.jsonl").start()
    conn = socket.create_connection((server.host, server.port))
    body = json.dumps(request()).encode()
    conn.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                 b"application/json\r\n%s: ttfb=30\r\nContent-Length: %d\r\n\r\n%s"
                 % (FAULT_HEADER.encode(), len(body), body))
    deadline = time.monotonic() + 10
    while not server.read_bill() and time.monotonic() < deadline:
        time.sleep(0.01)                # waiting for a condition, not for a crash
    try:
        assert len(server.read_bill()) == 1
        assert select.select([conn], [], [], 0)[0] == []     # not one byte of the answer yet
    finally:
        server.stop()                   # wakes the handler: it abandons the answer
        conn.close()


# --- faults ---------------------------------------------------------------------------------------

def test_cut_closes_the_stream_after_k_chunks_and_the_call_is_still_billed(server):
    status, _, payload, cut = raw(server, {**request(), "stream": True},
                                  headers={FAULT_HEADER: "cut=3"})
    assert status == 200 and cut and len(events(payload)) == 3
    assert len(server.read_bill()) == 1


def test_cut_without_stream_closes_halfway_through_the_body(server):
    status, headers, payload, cut = raw(server, request(), headers={FAULT_HEADER: "cut=1"})
    assert status == 200 and cut and 0 < len(payload) < int(headers["Content-Length"])


def test_malformed_makes_the_kth_chunk_broken_json_and_the_rest_flow(server):
    _, _, payload, cut = raw(server, {**request(), "stream": True},
                             headers={FAULT_HEADER: "malformed=2"})
    data = events(payload)
    json.loads(data[0])
    with pytest.raises(ValueError):
        json.loads(data[1])
    assert data[-1] == "[DONE]" and not cut and len(data) == len(answer_words("m", [
        {"role": "user", "content": "What next on page 3?"}])) + 3


def test_rate_limit_answers_429_with_retry_after_until_served_and_bills_only_the_answer(server):
    answers = [raw(server, request(), headers={FAULT_HEADER: "rate_limit=2,retry_after=1.5"})
               for _ in range(3)]
    assert [a[0] for a in answers] == [429, 429, 200]
    headers, payload = answers[0][1], answers[0][2]
    assert headers["Retry-After"] == "2" and headers["retry-after-ms"] == "1500"
    assert json.loads(payload)["error"]["code"] == "rate_limit_exceeded"
    assert len(server.read_bill()) == 1


def test_delay_spaces_every_chunk(server):
    t0 = time.perf_counter()
    _, _, payload, _ = raw(server, {**request(), "stream": True},
                           headers={FAULT_HEADER: "delay=0.02"})
    chunks = len(events(payload)) - 1
    assert time.perf_counter() - t0 >= 0.02 * chunks


def test_a_server_wide_fault_applies_and_a_request_header_overrides_it(tmp_path):
    with ModelServer(tmp_path / "bill.jsonl", fault="cut=2") as server:
        _, _, default, _ = raw(server, {**request(), "stream": True})
        _, _, overridden, _ = raw(server, {**request(), "stream": True},
                                  headers={FAULT_HEADER: "cut=5"})
        _, _, none, cut = raw(server, {**request(), "stream": True},
                              headers={FAULT_HEADER: "cut=99"})
    assert len(events(default)) == 2 and len(events(overridden)) == 5
    assert events(none)[-1] == "[DONE]" and not cut


def test_a_fault_spec_parses_back_from_its_own_spec():
    fault = Fault.parse("delay=0.05,cut=3,rate_limit=2,retry_after=0.5,malformed=4,ttfb=1")
    assert Fault.parse(fault.spec()) == fault and Fault.parse("none") == Fault()
    assert Fault.parse("cut=4", base=Fault(delay=1.0)) == Fault(delay=1.0, cut=4)
    for bad in ("cut", "cut=-1", "delay=soon", "delay=nan", "boom=1"):
        with pytest.raises(FaultSpecError):
            Fault.parse(bad)
