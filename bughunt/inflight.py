"""Lesson 11's engine: a model call killed in flight, and what the `openai` SDK does by itself.

Two experiments, each a plain function returning a typed record, each judged by the server's bill
(`bughunt.modelserver`), never by the client's memory:

1. **A call killed in flight.** `kill_in_call(crash_point, ...)` starts a real process that makes
   one streamed call through `bughunt.llm` and journals what it holds (one line per moment, through
   the lab's I/O door), then dies by SIGKILL at a named point inside the call: `sent`, `chunk#k` or
   `last_chunk`. A second process resumes from the journal. The call was in flight, so the resume
   must choose (the lesson's choice for a pending call):
   - `redo`: call again. The bill shows the call twice: the killed one was paid for in full, its
     answer exists only as the prefix in the journal (at least once, 至少一次);
   - `abort`: record the call as aborted with the prefix it held, and do not call again (at most
     once, as Codex writes "aborted" for an interrupted call; the next prompt can tell the model).
2. **What the SDK does by itself** (`sdk_on_timeout`, `sdk_on_rate_limit`, `sdk_on_cut_stream`,
   `sdk_on_malformed_chunk`, `sdk_on_slow_stream`, `sdk_on_stalled_stream`): one call against an
   injected fault, with the attempts the SDK sent counted from outside it (an httpx event hook) and
   the attempts the server billed read from its bill.

    python -m bughunt.inflight --base-url URL --journal FILE [--crash-at POINT]
                               [--pending redo|abort]

is the process of experiment 1 (it prints one JSON line: what it did).

What the SDK promises (openai-python's README, https://github.com/openai/openai-python#retries and
#timeouts): connection errors, 408, 409, 429 and 5xx are retried 2 times by default with a short
exponential backoff; requests time out after 10 minutes by default, and timed-out requests are
retried too. Its source (`openai/_base_client.py`, `openai/_streaming.py`, `openai/_constants.py`
of the pinned version) adds what the experiments show:

- the retry loop wraps sending the request and receiving the response *headers*; a streamed body
  is read after the loop, so a stream cut or timed out mid-body is raised to the caller, never
  retried, while a non-streamed body, read inside the loop, is retried (and billed) again;
- the wait before a retry is the server's `retry-after-ms`, else `Retry-After`, when it is between
  0 and 120 s; otherwise 0.5 s doubled per retry, at most 8 s, minus up to 25 % jitter; a
  `Retry-After` above 120 s means no retry at all;
- every attempt carries `x-stainless-retry-count` (0, 1, 2), which this lab's server writes on its
  bill: retries are visible there and nowhere in the caller's code;
- the timeout is httpx's: it limits each network read (and connect, write, pool wait), not the
  whole call, so a stream that keeps trickling outlives it;
- each event's data is parsed with `json.loads`, and a `json.JSONDecodeError` is not wrapped: a
  malformed chunk escapes `except openai.APIError`.
"""

from __future__ import annotations

import argparse
import atexit
import hashlib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from . import forkserver, lifeline
from .diskio import Door
from .llm import DEFAULT_API_KEY, DEFAULT_MODEL, OpenAIModel, Received, page_messages
from .modelserver import (FAULT_HEADER, Fault, FaultSpecError, ServerProcess, fault_flag,
                          prompt_hash, read_server_bill)
from .world import Site, SiteError

PROG = "python -m bughunt.inflight"
PENDING = ("redo", "abort")
_POINT = re.compile(r"^(sent|last_chunk|chunk#[1-9][0-9]*)$")


def is_call_point(name: str) -> bool:
    return bool(_POINT.match(name))


def call_points(chunks: int) -> list[str]:
    """Every crash point inside a streamed call that delivers `chunks` chunks, in order."""
    return ["sent"] + [f"chunk#{k}" for k in range(1, chunks + 1)] + ["last_chunk"]


# --- the journal: what the client held ------------------------------------------------------------

class JournalError(ValueError):
    """A --journal that is not a call journal (a folder, another program's file); the message
    names it, and the line."""


RECORD_TYPES = ("sent", "chunk", "last_chunk", "answer", "aborted")


def read_client_journal(path: Path) -> list[dict]:
    """The journal's records, in order. Each was one `os.write`, so a SIGKILL leaves whole lines.
    Raises JournalError for a file that is not a call journal: nothing is appended to it then."""
    path = Path(path)
    if path.is_dir():
        raise JournalError(f"{path}: is a directory, not a call journal")
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as e:
        raise JournalError(f"{path}: cannot be read ({e.strerror})") from None
    records = []
    for n, line in enumerate(text.split(b"\n"), 1):
        if not line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not (isinstance(record, dict) and record.get("t") in RECORD_TYPES
                and isinstance(record.get("page"), int)):
            raise JournalError(f"{path}:{n}: not a call journal (each line is a JSON record "
                               f"of one call: {', '.join(RECORD_TYPES)}); give a new --journal "
                               "file, or one this program wrote")
        records.append(record)
    return records


def pending_call(records: list[dict], page: int) -> dict | None:
    """The call on `page` that was in flight at the crash: started, neither answered nor aborted.
    Returns its last record (its request id and the prefix held), or None."""
    last = None
    for r in records:
        if r.get("page") != page:
            continue
        if r["t"] in ("answer", "aborted"):
            last = None
        elif r["t"] in ("sent", "chunk", "last_chunk"):
            last = r
    return last


# --- the process: one call, maybe killed inside it ------------------------------------------------

def run_call(*, base_url: str, journal: Path, page: int = 3, crash_at: str | None = None,
             pending: str = "redo", stream: bool = True, fault: str | None = None,
             model: str = DEFAULT_MODEL) -> dict:
    """Make (or resume) the call for `page`, journaling every moment of it; die by SIGKILL at
    `crash_at`."""
    door = Door("never")
    records = read_client_journal(journal)
    fd = door.open_append(Path(journal))

    def write(record: dict) -> None:
        door.append(fd, (json.dumps(record) + "\n").encode())

    try:
        return _call_or_resume(records, write, base_url=base_url, page=page, crash_at=crash_at,
                               pending=pending, stream=stream, fault=fault, model=model)
    finally:
        door.close(fd)


def _call_or_resume(records, write, *, base_url, page, crash_at, pending, stream, fault,
                    model) -> dict:
    done = [r for r in records if r.get("page") == page and r["t"] in ("answer", "aborted")]
    if done:
        return {"action": "done", **_result(done[-1]), "calls": 0}
    held = pending_call(records, page)
    if held is not None and pending == "abort":
        record = {"t": "aborted", "page": page, "request_id": held["request_id"],
                  "prefix": held["prefix"], "chunks": held["chunks"]}
        write(record)
        return {"action": "abort", **_result(record), "calls": 0}

    def on_chunk(received: Received) -> None:
        # Journal first, then maybe die: the journal holds exactly what this process had.
        write({"t": received.point, "page": page, "request_id": received.request_id,
               "chunks": received.chunks, "prefix": received.prefix})
        if received.name == crash_at:
            os.kill(os.getpid(), signal.SIGKILL)

    llm = OpenAIModel(Site.load(), base_url=base_url, model=model, stream=stream,
                      on_chunk=on_chunk, fault=fault)
    try:
        answer = llm.complete(page_messages(llm.site, page), page=page)
    finally:
        llm.close()
    record = {"t": "answer", "page": page, "request_id": answer.request_id, "reply": answer.reply,
              "tokens": answer.tokens, "chunks": answer.chunks}
    write(record)
    return {"action": "redo" if held is not None else "call", **_result(record),
            "calls": llm.calls}


def _result(record: dict) -> dict:
    return {"outcome": "answered" if record["t"] == "answer" else "aborted",
            "request_id": record["request_id"], "reply": record.get("reply"),
            "prefix": record.get("prefix", record.get("reply")), "tokens": record.get("tokens")}


def call_args(base_url: str, journal: Path, **options) -> list[str]:
    """The command-line arguments of this module's process for `run_call(**options)`."""
    cmd = ["--base-url", base_url, "--journal", str(journal)]
    for key, value in options.items():
        if value is None or value is True:
            continue
        if value is False:
            cmd.append("--no-" + key.replace("_", "-"))
        else:
            cmd += ["--" + key.replace("_", "-"), str(value)]
    return cmd


def fresh_interpreter(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    """Run `python -m bughunt.inflight ARGS` as a new process (it pays the SDK's imports)."""
    return subprocess.run([sys.executable, "-m", "bughunt.inflight", *args], capture_output=True,
                          text=True, timeout=timeout)


# --- experiment 1: a call killed in flight, then resumed -----------------------------------------

@dataclass(frozen=True)
class CallKilled:
    """One crash inside a model call and its resume, judged by the server's bill."""

    crash_point: str
    pending: str                   # what the resume did with the call in flight: redo | abort
    stream: bool
    died_by_sigkill: bool
    prefix_held: str               # the answer text in the killed process's journal
    chunks_held: int
    killed_request_id: str         # the id the killed process journaled ("" if none)
    killed_call_billed: bool       # that id is on the server's bill: the provider was paid
    billed_calls: int              # bill lines for this prompt, both processes
    redone_model_calls: int        # billed_calls - 1 (a clean run is billed once)
    billed_tokens: int
    outcome: str                   # answered | aborted
    reply: str | None
    reply_matches_clean: bool      # deterministic server: the redone answer is the clean one


def kill_in_call(crash_point: str, *, base_url: str, bill: Path, run_dir: Path,
                 pending: str = "redo", stream: bool = True, page: int = 3,
                 model: str = DEFAULT_MODEL, fault: str | None = None,
                 runner=fresh_interpreter) -> CallKilled:
    """Kill a call at `crash_point` (a real SIGKILL, from inside the call), then resume it.

    `runner(args)` starts one process of this module and returns its CompletedProcess (exit
    status negative for a signal); a fork server that has warmed the SDK can stand in for the
    default fresh interpreter."""
    if not is_call_point(crash_point):
        raise ValueError(f"crash point {crash_point!r}: expected sent, chunk#K or last_chunk")
    if pending not in PENDING:
        raise ValueError(f"pending {pending!r}: expected redo or abort")
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    journal = run_dir / "call-journal.jsonl"
    start = len(read_server_bill(bill))
    killed = runner(call_args(base_url, journal, page=page, crash_at=crash_point, stream=stream,
                              model=model, fault=fault))
    if killed.returncode == 0:
        raise ValueError(f"crash point {crash_point!r} was never reached (the call ended first)")
    if killed.returncode > 0:
        raise RuntimeError(f"the call process failed ({killed.returncode}) before "
                           f"{crash_point}: {killed.stderr.strip()}")
    held = pending_call(read_client_journal(journal), page) or {}
    resumed = runner(call_args(base_url, journal, page=page, pending=pending, stream=stream,
                               model=model, fault=fault))
    if resumed.returncode != 0:
        raise RuntimeError(f"the resume failed ({resumed.returncode}): {resumed.stderr.strip()}")
    result = json.loads(resumed.stdout)
    key = prompt_hash(model, page_messages(Site.load(), page))
    lines = [b for b in read_server_bill(bill)[start:] if b["prompt_hash"] == key]
    clean = _clean_reply(model, page)
    return CallKilled(
        crash_point=crash_point, pending=pending, stream=stream,
        died_by_sigkill=killed.returncode == -signal.SIGKILL,
        prefix_held=held.get("prefix", ""), chunks_held=held.get("chunks", 0),
        killed_request_id=held.get("request_id", ""),
        killed_call_billed=any(b["request_id"] == held.get("request_id") for b in lines),
        billed_calls=len(lines), redone_model_calls=len(lines) - 1,
        billed_tokens=sum(b["total_tokens"] for b in lines),
        outcome=result["outcome"], reply=result["reply"],
        reply_matches_clean=result["reply"] == clean)


def _clean_reply(model: str, page: int) -> str:
    from .modelserver import answer_text
    return answer_text(model, page_messages(Site.load(), page))


# --- experiment 2: what the SDK does by itself 

@dataclass(frozen=True)
class SdkBehaviour:
    """One call through the SDK against one injected fault, judged by the server's bill."""

    case: str
    fault: str
    stream: bool
    max_retries: int
    timeout_s: float
    requests_sent: int             # attempts the SDK sent (an httpx event hook, outside the SDK)
    statuses: tuple[int, ...]      # the HTTP statuses those attempts received
    billed: int                    # attempts on the server's bill
    raised: str | None             # the exception that reached the caller, if any
    caught_by_api_error: bool | None   # would `except openai.APIError` have caught it
    chunks: int                    # chunks the caller received
    prefix: str                    # the answer text the caller holds
    complete: bool                 # the whole answer arrived
    elapsed_s: float
    arrivals: tuple[float, ...] = ()   # seconds from the request to each chunk the caller got


def sdk_call(case: str, *, base_url: str, bill: Path, fault: Fault | str, stream: bool = True,
             timeout: float = 60.0, max_retries: int = 2,
             model: str = DEFAULT_MODEL) -> SdkBehaviour:
    """One call with the SDK's own retry and timeout rules, and nothing of ours around them."""
    import openai

    fault = fault if isinstance(fault, Fault) else Fault.parse(fault)
    # A fresh prompt per measurement: the bill lines with its hash are this call's attempts.
    messages = [{"role": "user", "content": f"lesson 11, {case}: {uuid.uuid4().hex}"}]
    sent: list[int] = []
    statuses: list[int] = []
    http = openai.DefaultHttpxClient(event_hooks={
        "request": [lambda request: sent.append(1)],
        "response": [lambda response: statuses.append(response.status_code)]})
    client = openai.OpenAI(base_url=base_url, api_key=DEFAULT_API_KEY, timeout=timeout,
                           max_retries=max_retries, http_client=http)
    words = _answer_length(model, messages)
    parts: list[str] = []
    arrivals: list[float] = []
    chunks, raised, caught = 0, None, None
    t0 = time.perf_counter()
    try:
        if stream:
            s = client.chat.completions.create(
                model=model, messages=messages, stream=True,
                extra_headers={FAULT_HEADER: fault.spec() or "none"})
            with s:
                for chunk in s:
                    chunks += 1
                    arrivals.append(round(time.perf_counter() - t0, 3))
                    if chunk.choices and chunk.choices[0].delta.content:
                        parts.append(chunk.choices[0].delta.content)
        else:
            r = client.chat.completions.create(
                model=model, messages=messages,
                extra_headers={FAULT_HEADER: fault.spec() or "none"})
            chunks, parts = 1, [r.choices[0].message.content or ""]
    except Exception as e:            # noqa: BLE001  (which exception escapes is the measurement)
        raised = f"{type(e).__module__.split('.')[0]}.{type(e).__qualname__}"
        caught = isinstance(e, openai.APIError)
    finally:
        elapsed = time.perf_counter() - t0
        client.close()
    key = prompt_hash(model, messages)
    billed = sum(1 for b in read_server_bill(bill) if b["prompt_hash"] == key)
    prefix = "".join(parts)
    return SdkBehaviour(
        case=case, fault=fault.spec(), stream=stream, max_retries=max_retries, timeout_s=timeout,
        requests_sent=len(sent), statuses=tuple(statuses), billed=billed, raised=raised,
        caught_by_api_error=caught, chunks=chunks, prefix=prefix,
        complete=raised is None and len(prefix.split()) == words, elapsed_s=round(elapsed, 3),
        arrivals=tuple(arrivals))


def _answer_length(model: str, messages: list) -> int:
    from .modelserver import answer_words
    return len(answer_words(model, messages))


def sdk_on_timeout(*, base_url: str, bill: Path, timeout: float = 0.2, ttfb: float = 0.6,
                   max_retries: int = 2, stream: bool = False) -> SdkBehaviour:
    """The server is slower to its first byte than the timeout: the SDK retries, each try billed."""
    return sdk_call("timeout", base_url=base_url, bill=bill, fault=Fault(ttfb=ttfb),
                    stream=stream, timeout=timeout, max_retries=max_retries)


def sdk_on_rate_limit(*, base_url: str, bill: Path, refusals: int = 2, retry_after: float = 0.05,
                      max_retries: int = 2) -> SdkBehaviour:
    """429 with Retry-After: the SDK waits as told and retries; a refusal is not billed."""
    return sdk_call("rate_limit", base_url=base_url, bill=bill,
                    fault=Fault(rate_limit=refusals, retry_after=retry_after),
                    max_retries=max_retries)


def sdk_on_cut_stream(*, base_url: str, bill: Path, cut: int = 3, stream: bool = True,
                      max_retries: int = 2) -> SdkBehaviour:
    """The connection dies mid-answer. Streamed: no retry, the prefix is only what the caller
    collected. Not streamed: the body is read inside the SDK's retry loop, so it is retried."""
    return sdk_call("cut_stream" if stream else "cut_body", base_url=base_url, bill=bill,
                    fault=Fault(cut=cut), stream=stream, max_retries=max_retries)


def sdk_on_malformed_chunk(*, base_url: str, bill: Path, at: int = 3,
                           stream: bool = True) -> SdkBehaviour:
    """A chunk that is not JSON: which exception reaches the caller?"""
    return sdk_call("malformed_chunk" if stream else "malformed_body", base_url=base_url,
                    bill=bill, fault=Fault(malformed=at), stream=stream)


def sdk_on_slow_stream(*, base_url: str, bill: Path, timeout: float = 0.4,
                       delay: float = 0.1) -> SdkBehaviour:
    """Each chunk comes within the timeout, the whole call takes longer (at least 8 chunks, so
    0.8 s by default): the call completes."""
    return sdk_call("slow_stream", base_url=base_url, bill=bill, fault=Fault(delay=delay),
                    timeout=timeout)


def sdk_on_stalled_stream(*, base_url: str, bill: Path, timeout: float = 0.2,
                          delay: float = 0.6) -> SdkBehaviour:
    """The headers come at once, then a chunk is later than the timeout: the read times out inside
    the stream, after the retry loop is over, so it is not retried."""
    return sdk_call("stalled_stream", base_url=base_url, bill=bill, fault=Fault(delay=delay),
                    timeout=timeout)


def sdk_behaviours(*, base_url: str, bill: Path) -> list[SdkBehaviour]:
    """Every case above with its defaults (about 4 s, mostly the SDK's own backoff sleeps)."""
    b = dict(base_url=base_url, bill=bill)
    return [sdk_on_timeout(**b), sdk_on_rate_limit(**b), sdk_on_cut_stream(**b),
            sdk_on_cut_stream(stream=False, **b), sdk_on_malformed_chunk(**b),
            sdk_on_slow_stream(**b), sdk_on_stalled_stream(**b)]


# --- the lesson's world: one model server, one fork parent, one scratch folder -------------------

class ForkedCalls:
    """Runs `python -m bughunt.inflight ARGS` as children of one pre-imported parent: the lab's
    fork server (`bughunt.forkserver`), which has imported the SDK and built and closed one client
    (`llm.warm_sdk`), so it holds no connection a child could share, and runs no thread. A fresh
    interpreter pays about a second of imports per call process; a fork pays milliseconds, and
    each child is still its own process, killed by a real SIGKILL at its crash point.

    `run(args)` has the shape `kill_in_call` expects of its `runner`: it returns a
    `subprocess.CompletedProcess` whose return code is negative for a signal (-9: SIGKILL).
    One call at a time; a call that outlives `timeout` is killed and reported as a timeout.
    """

    ENTRY = "bughunt.inflight:main"

    def __init__(self):
        self.server = forkserver.ForkServer(preload=("bughunt.llm:warm_sdk",))
        self._lock = threading.Lock()

    def alive(self) -> bool:
        return self.server.proc.poll() is None

    def run(self, args: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
        with self._lock:
            return self.server.run(list(args), timeout, entry=self.ENTRY)

    def close(self) -> None:
        self.server.close()


class CallLab:
    """Lesson 11's world: the model server (a real process, with its bill), the fork parent of the
    call processes, and a scratch folder for their journals and the bill.

    A context manager. Its exit stops both processes and removes the folder; so does the
    interpreter's exit if no one closed it (a notebook's kernel shut down), and, when the process
    that started it is killed outright (nbval ends its kernels by SIGKILL), the lifeline
    (`bughunt.lifeline`). `close()` may be called more than once.
    """

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="bughunt-call-"))
        lifeline.watch_dir(self.dir)
        self.bill = self.dir / "server-bill.jsonl"
        self._closed = False
        self.forks = ForkedCalls()                 # imports the SDK while the server starts
        try:
            self.server = ServerProcess(self.bill)
        except BaseException:
            self.forks.close()
            self._remove_dir()
            raise
        lifeline.watch_group(self.server.pid)
        self._runs = itertools.count(1)
        atexit.register(self.close)

    def __enter__(self) -> "CallLab":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def base_url(self) -> str:
        return self.server.base_url

    def alive(self) -> bool:
        return not self._closed and self.server.proc.poll() is None and self.forks.alive()

    def run_dir(self) -> Path:
        """A fresh folder for one experiment's journal."""
        path = self.dir / f"call-{next(self._runs)}"
        path.mkdir()
        return path

    def close(self) -> None:
        """Stop the fork parent and the model server; remove the scratch folder."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        try:
            self.forks.close()
        finally:
            self.server.stop()
            lifeline.release_group(self.server.pid)
            self._remove_dir()

    def _remove_dir(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        lifeline.release_dir(self.dir)


_SHARED: CallLab | None = None


def shared_lab() -> CallLab:
    """This process's lab (a notebook kernel's), started at first use, and again if one of its
    processes died. The interpreter's exit closes it (or the lifeline, if the process is killed)."""
    global _SHARED
    if _SHARED is None or not _SHARED.alive():
        if _SHARED is not None:
            _SHARED.close()
        _SHARED = CallLab()
    return _SHARED


# --- what the SDK sends, attempt by attempt, and when a stream's chunks arrive ----------------------

@dataclass(frozen=True)
class Attempt:
    """One HTTP attempt of one SDK call, as it left the client and as the server billed it."""

    attempt: int
    retry_count_header: str        # x-stainless-retry-count, as sent
    idempotency_header: str        # the name of any header carrying an idempotency key, or ""
    same_body_as_first: bool
    status: str                    # the HTTP status it got ("" for a timeout)
    billed: bool                   # a line with this retry count is on the server's bill


def attempts_of_a_timed_out_call(timeout: float = 0.2, ttfb: float = 0.6,
                                 max_retries: int = 2) -> list[Attempt]:
    """The server is slower to its first byte than the timeout: look at every attempt the SDK
    sends (an httpx event hook, outside the SDK) and at the server's bill."""
    import openai

    lab_ = shared_lab()
    messages = [{"role": "user", "content": f"lesson 11, attempts: {uuid.uuid4().hex}"}]
    seen: list[tuple[dict, bytes]] = []
    statuses: dict[int, str] = {}

    def on_request(request):
        seen.append((dict(request.headers), hashlib.sha256(request.content).digest()))

    def on_response(response):
        statuses[len(seen)] = str(response.status_code)

    http = openai.DefaultHttpxClient(event_hooks={"request": [on_request],
                                                  "response": [on_response]})
    client = openai.OpenAI(base_url=lab_.base_url, api_key=DEFAULT_API_KEY, timeout=timeout,
                           max_retries=max_retries, http_client=http)
    try:
        client.chat.completions.create(model=DEFAULT_MODEL, messages=messages,
                                       extra_headers={FAULT_HEADER: Fault(ttfb=ttfb).spec()})
    except openai.APITimeoutError:
        pass
    finally:
        client.close()
    key = prompt_hash(DEFAULT_MODEL, messages)
    retries_billed = {b["retry"] for b in read_server_bill(lab_.bill) if b["prompt_hash"] == key}
    out = []
    for i, (headers, body) in enumerate(seen, start=1):
        count = headers.get("x-stainless-retry-count", "")
        idem = [h for h in headers if "idempotency" in h.lower()]
        out.append(Attempt(i, count, ", ".join(idem), body == seen[0][1], statuses.get(i, ""),
                           count.isdigit() and int(count) in retries_billed))
    return out


@dataclass(frozen=True)
class Timeline:
    """When each chunk of one streamed call arrived, against the SDK's timeout."""

    label: str
    delay_s: float                 # the server's pause before each chunk
    timeout_s: float
    arrivals: tuple[float, ...]    # seconds from the request to each chunk
    raised: str | None
    ended_s: float


def stream_timeline(delay: float, timeout: float, label: str) -> Timeline:
    """One streamed call whose server pauses `delay` s before each chunk, with the SDK's timeout
    `timeout` s: when did each chunk arrive, and did the call end by a timeout?"""
    import openai

    lab_ = shared_lab()
    client = openai.OpenAI(base_url=lab_.base_url, api_key=DEFAULT_API_KEY, timeout=timeout)
    messages = [{"role": "user", "content": f"lesson 11, {label}: {uuid.uuid4().hex}"}]
    arrivals, raised = [], None
    t0 = time.perf_counter()
    try:
        with client.chat.completions.create(
                model=DEFAULT_MODEL, messages=messages, stream=True,
                extra_headers={FAULT_HEADER: Fault(delay=delay).spec()}) as stream:
            for _ in stream:
                arrivals.append(time.perf_counter() - t0)
    except openai.APIError as e:
        raised = f"openai.{type(e).__name__}"
    finally:
        client.close()
    return Timeline(label, delay, timeout, tuple(arrivals), raised, time.perf_counter() - t0)


def timelines() -> list[Timeline]:
    """The two cases of "the timeout limits each read": a slow stream and a stalled one."""
    return [stream_timeline(0.1, 0.4, "slow stream"), stream_timeline(0.6, 0.2, "stalled stream")]



# --- command line ---------------------------------------------------------------------------------

def _point(text: str) -> str:
    if not is_call_point(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a crash point inside the call "
                                         "(sent, chunk#K with K >= 1, or last_chunk)")
    return text


def _fault_spec(text: str) -> str:
    """`--fault SPEC`, checked here and sent as written."""
    fault_flag(text)
    return text


def call_parser() -> argparse.ArgumentParser:
    from .config import OneSentenceParser
    parser = OneSentenceParser(prog=PROG, description="One model call through the openai SDK, "
                               "journaled, maybe killed inside it (lesson 11).")
    parser.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:PORT/v1")
    parser.add_argument("--journal", type=Path, required=True, metavar="FILE")
    parser.add_argument("--page", type=int, default=3)
    parser.add_argument("--crash-at", type=_point, metavar="POINT",
                        help="sent, chunk#K or last_chunk: die by SIGKILL there")
    parser.add_argument("--pending", choices=PENDING, default="redo",
                        help="what a resume does with a call in flight at the crash")
    parser.add_argument("--no-stream", dest="stream", action="store_false")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--fault", type=_fault_spec, metavar="SPEC", help="sent as X-Bughunt-Fault")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = call_parser()
    args = parser.parse_args(argv)
    if args.page < 1:
        parser.error(f"--page {args.page}: pages are numbered from 1")
    if not args.journal.parent.is_dir():
        parser.error(f"--journal {args.journal}: its folder does not exist")
    try:
        read_client_journal(args.journal)           # before any call: a foreign file gets nothing
    except JournalError as e:
        print(f"{PROG}: --journal {e}", file=sys.stderr)
        return 2
    import openai
    try:
        result = run_call(base_url=args.base_url, journal=args.journal, page=args.page,
                          crash_at=args.crash_at, pending=args.pending, stream=args.stream,
                          fault=args.fault, model=args.model)
    except SiteError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    except openai.APIError as e:
        print(f"{PROG}: the call failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except json.JSONDecodeError as e:
        # The SDK parses each streamed chunk with json.loads and lets this escape (lesson 11).
        print(f"{PROG}: the call failed: a chunk of the answer is not valid JSON "
              f"(json.JSONDecodeError: {e})", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
