"""The model over HTTP: the real `openai` SDK, streamed, against an OpenAI-compatible server.

`OpenAIModel` has the interface of `bughunt.world.MockModel` (`ask(page) -> (reply, tokens)`,
`.calls`, `.close()`), so a worker can swap one for the other. The difference is the lesson: this
call has a *call in flight* (在途调用). Between "request sent" and "answer recorded" the answer
exists in three places that a SIGKILL separates: on the server (which has already billed it), in
the bytes the client has received so far (the prefix), and nowhere else. `on_chunk` sees every
moment of that window, so the caller can journal the prefix it holds and fire the crash points
inside the call:

    sent          the request is on the wire and the server has answered with its headers
                  (so it is already on the server's bill); no chunk received yet
    chunk#k       k chunks received (k counts every chunk, the first one carries only the role)
    last_chunk    the stream has ended ([DONE]); the whole answer is here, not yet recorded

Without streaming (`stream=False`) the answer arrives whole or not at all: only `last_chunk` fires.

**Fork safety.** The SDK's client holds an httpx connection pool: open keep-alive sockets. After a
`fork()` the child shares those very sockets with its parent, and two processes writing requests on
one TCP connection and reading each other's answers off it is how one worker gets another's answer.
So the client is created lazily, in the process that makes the first call, and a model whose client
was created in another process refuses to be used (`ForkedClientError`). A fork-server parent may
import and warm the SDK (`warm_sdk()`: imports, no connection) but never holds an open connection
across a fork.

**A real local model.** Ollama (`http://localhost:11434/v1`), vLLM (`http://localhost:8000/v1`)
and llama.cpp's `llama-server` (`http://localhost:8080/v1`) speak the same API: pass their
`base_url` and a model name they serve. The lesson then loses what only the mock server gives:
deterministic answers (the same page may get another reply, so a resumed run cannot be compared
to a clean one word for word), the server-side bill (a local server keeps no invoice; count from
your journal or the server's logs instead), and the injected faults (the `X-Bughunt-Fault` header
is ignored). Servers that do not send usage in the stream report tokens as the number of content
chunks.

**In the worker** (lesson 11's worker mode, `python -m bughunt run --model-url URL`): each run
names itself on the server's bill with the SDK's `project` setting, sent as the `OpenAI-Project`
header (`run_project`): the OpenAI API reference's "Authentication" section says usage from a
request "will count as usage for the specified organization and project", so a provider's invoice
is split by project, and the lab's server writes it on every bill line. `ServedModel.calls_of(run_dir)`
reads one run's calls from the server's bill, so redone calls are still counted by the world, never
by the worker. What the worker received is kept in its call journal (`CallJournal`, `calls.jsonl` in
the run directory): one line per moment of each call, written before the crash point there fires.

SDK facts this module relies on (openai-python's README, https://github.com/openai/openai-python,
"Retries" and "Timeouts"): requests are retried twice by default on connection errors, 408, 409,
429 and 5xx, with a short exponential backoff; the default timeout is 10 minutes (this model's is
60 s). The SDK's synchronous stream stops reading at `[DONE]` and closes the response, so over
HTTP/1.1 each streamed call opens a new connection; a non-streamed call reuses its keep-alive one.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .modelserver import FAULT_HEADER, Fault
from .world import Site

DEFAULT_MODEL = "bughunt-mock"
DEFAULT_API_KEY = "bughunt-local"      # the mock server accepts any key; the SDK insists on one
SYSTEM_PROMPT = "You are BugHunt, an agent that explores a web site for bugs. Answer briefly."


def page_messages(site: Site, page: int) -> list[dict]:
    """The chat messages for "what next?" on `page`: the same prompt MockModel pretends to send."""
    p = site.page(page)
    return [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"{site.task_id} page {page} {p.path}: what next?"}]


@dataclass(frozen=True)
class Received:
    """One moment inside a call in flight, as `on_chunk` sees it."""

    point: str          # "sent", "chunk" or "last_chunk"
    page: int
    request_id: str     # the server's id for this call (x-request-id, else the chunks' id)
    chunks: int         # chunks received so far
    prefix: str         # the answer text received so far

    @property
    def name(self) -> str:
        """The crash point's name: `sent`, `chunk#k` or `last_chunk`."""
        return f"chunk#{self.chunks}" if self.point == "chunk" else self.point


@dataclass(frozen=True)
class ModelReply:
    reply: str
    tokens: int
    request_id: str
    chunks: int


class ForkedClientError(RuntimeError):
    """A model whose connection pool was opened in one process was used in another."""


def warm_sdk() -> None:
    """Import the SDK and build (and close) one client, so that a fork-server parent pays the
    imports once. Opens no connection: nothing is shared by the children it forks."""
    import openai
    import openai.types.chat  # noqa: F401  (the streamed chunk types)
    openai.OpenAI(api_key=DEFAULT_API_KEY, base_url="http://127.0.0.1:9/v1").close()


class OpenAIModel:
    """The model through the real `openai` SDK; the interface of `world.MockModel`.

    `calls` counts the calls this process asked for. The SDK may have sent more (its retries):
    those are on the server's bill, never in this counter.
    """

    def __init__(self, site: Site, *, base_url: str, model: str = DEFAULT_MODEL,
                 api_key: str = DEFAULT_API_KEY, stream: bool = True, timeout: float = 60.0,
                 max_retries: int = 2, on_chunk: Callable[[Received], None] | None = None,
                 fault: Fault | str | None = None, project: str | None = None):
        self.site = site
        self.base_url, self.model, self.api_key = base_url, model, api_key
        self.project = project            # the name this client's calls carry on the bill
        self.stream, self.timeout, self.max_retries = stream, timeout, max_retries
        self.on_chunk = on_chunk or (lambda received: None)
        spec = fault.spec() if isinstance(fault, Fault) else (fault or "")
        self._headers = {FAULT_HEADER: spec} if spec else {}
        self.calls = 0
        self._client = None
        self._client_pid: int | None = None

    def _sdk(self):
        """The SDK client of this process, created at first use (never inherited by a fork)."""
        if self._client is None:
            import openai
            self._client = openai.OpenAI(base_url=self.base_url, api_key=self.api_key,
                                         timeout=self.timeout, max_retries=self.max_retries,
                                         project=self.project)
            self._client_pid = os.getpid()
        elif self._client_pid != os.getpid():
            raise ForkedClientError(
                f"this model's connection pool was opened by process {self._client_pid} and "
                f"process {os.getpid()} (a fork) tried to use it; create the model in the "
                "process that calls it")
        return self._client

    def ask(self, page: int) -> tuple[str, int]:
        """Ask "what next?" on `page`. Returns (reply, tokens). Raises the SDK's errors as they
        are (a cut stream is `openai.APIConnectionError`; what `on_chunk` saw is all there is)."""
        answer = self.complete(page_messages(self.site, page), page=page)
        return answer.reply, answer.tokens

    def complete(self, messages: list[dict], *, page: int = 0) -> ModelReply:
        client = self._sdk()
        self.calls += 1
        if not self.stream:
            r = client.chat.completions.create(model=self.model, messages=messages,
                                               extra_headers=self._headers)
            reply = r.choices[0].message.content or ""
            tokens = r.usage.total_tokens if r.usage else 1
            self.on_chunk(Received("last_chunk", page, r.id, 1, reply))
            return ModelReply(reply, tokens, r.id, 1)
        stream = client.chat.completions.create(
            model=self.model, messages=messages, stream=True,
            stream_options={"include_usage": True}, extra_headers=self._headers)
        with stream:
            request_id = stream.response.headers.get("x-request-id", "")
            self.on_chunk(Received("sent", page, request_id, 0, ""))
            parts: list[str] = []
            chunks, usage = 0, None
            for chunk in stream:
                chunks += 1
                request_id = request_id or chunk.id
                if chunk.choices and chunk.choices[0].delta.content:
                    parts.append(chunk.choices[0].delta.content)
                if chunk.usage is not None:
                    usage = chunk.usage
                self.on_chunk(Received("chunk", page, request_id, chunks, "".join(parts)))
        reply = "".join(parts)
        self.on_chunk(Received("last_chunk", page, request_id, chunks, reply))
        tokens = usage.total_tokens if usage is not None else len(parts)
        return ModelReply(reply, tokens, request_id, chunks)

    def close(self) -> None:
        """Close this process's connections. In a forked child the pool is the parent's: it is
        forgotten, not closed, so the parent's sockets stay as they were."""
        if self._client is not None and self._client_pid == os.getpid():
            self._client.close()
        self._client = None
        self._client_pid = None


# --- the worker's model over HTTP: its name on the bill, its journal ------------------------------

CALL_JOURNAL_FILE = "calls.jsonl"


def run_project(run_dir: Path) -> str:
    """The run's name on the server's bill (the `OpenAI-Project` header): the same for every
    process of one run directory, different for every other run directory."""
    digest = hashlib.sha256(str(Path(run_dir).resolve()).encode()).hexdigest()[:16]
    return f"bughunt-run-{digest}"


class CallJournal:
    """What the worker received of each call: one JSON line per moment (`sent`, every `chunk`,
    `last_chunk`) with the request id, the chunks so far, the answer text so far (the prefix) and
    the process id.

    Written like the bill and the trace, not through the I/O door: recovery never reads it (a
    resumed worker redoes a call the checkpoint does not hold, whatever the journal says), so it
    is a witness of what the process held, not checkpoint state, and it must not change what the
    door counts (lesson 8's faults, the power-loss journal) or times (lesson 6). Each line is one
    `os.write` on an O_APPEND descriptor, made before the crash point of that moment fires: a
    SIGKILL there leaves exactly what the process held, in the page cache, which a kill does not
    lose. Opened per line, so it holds no descriptor between calls.
    """

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / CALL_JOURNAL_FILE

    def write(self, received: Received) -> None:
        line = json.dumps({"t": received.point, "page": received.page,
                           "request_id": received.request_id, "chunks": received.chunks,
                           "prefix": received.prefix, "pid": os.getpid()}) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


def read_call_journal(run_dir: Path) -> list[dict]:
    """The call journal's lines, in order (an empty list when the run never called over HTTP)."""
    path = Path(run_dir) / CALL_JOURNAL_FILE
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


@dataclass(frozen=True)
class ServedModel:
    """A world setting, never part of a run's configuration: the worker's model is served at
    `url` (OpenAI-compatible) and billed on the server's `bill`, the witness redone calls are read
    from. A real local server (Ollama, vLLM, llama.cpp) keeps no bill: `bill` None, and nothing can
    count what a crash cost there."""

    url: str
    bill: Path | None = None
    name: str = DEFAULT_MODEL

    def worker_flags(self) -> tuple[str, ...]:
        return ("--model-url", self.url, "--model-name", self.name)

    def calls_of(self, run_dir: Path) -> list[dict]:
        """Every call the server billed for this run (its project), in order."""
        from .modelserver import read_server_bill

        if self.bill is None:
            raise ValueError(f"the model at {self.url} has no bill to read: a real server keeps "
                             "none, so redone calls cannot be counted there")
        project = run_project(run_dir)
        return [b for b in read_server_bill(self.bill) if b.get("project") == project]


def call_failure(e: BaseException) -> str | None:
    """What went wrong with a model call, in words, when `e` is one of the ways a call over HTTP
    fails (the SDK's errors; a chunk that is not JSON, which the SDK lets escape as
    json.JSONDecodeError); None for any other exception."""
    openai = sys.modules.get("openai")
    if openai is not None and isinstance(e, openai.APIConnectionError):
        return f"the model could not be reached or its answer broke off ({type(e).__name__})"
    if openai is not None and isinstance(e, openai.APIError):
        return f"the model call failed ({type(e).__name__}: {e})"
    if isinstance(e, json.JSONDecodeError):
        return f"a chunk of the model's answer is not valid JSON ({e})"
    return None
