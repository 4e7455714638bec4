"""`python -m bughunt.modelserver`: a local OpenAI-compatible model server, with a bill and faults.

Lesson 11's model is a real server in a real process, reached over HTTP by the real `openai` SDK,
so that "the call in flight" (the answer half received when the client dies) is no simulation:

    python -m bughunt.modelserver --port 0 --bill runs/server-bill.jsonl [--fault SPEC]

It prints one line when it is ready, `bughunt.modelserver: ready at http://127.0.0.1:PORT/v1`
(port 0 picks a free port; a parent waits for this line, never sleeps), then serves until SIGTERM or
Ctrl-C, and exits 143 or 130 (the README's exit codes; 2 for a bad flag). Standard library only.

What it speaks: `POST /v1/chat/completions` as the OpenAI API reference describes it
(https://platform.openai.com/docs/api-reference/chat), `stream` false (one `chat.completion` with
`usage`) or true (server-sent events: `data: {chat.completion.chunk}` lines, `data: [DONE]` last;
with `stream_options.include_usage` a last chunk with empty `choices` carries the usage).

- **Deterministic answers.** The answer is computed from the request (model and messages): the
  same messages give the same text and the same token counts, on every run and every machine. A
  token here is a whitespace-separated word; one word is one streamed chunk.
- **Validation like the API's.** Bad JSON, a missing `model`, missing or empty `messages`, a bad
  role, a wrong type: a 400 with the API's error shape `{"error": {"message", "type", "param",
  "code"}}`, never billed. Other paths: 404 `Invalid URL (METHOD /path)`.
- **The bill** (the witness a provider's invoice is). Every valid request is billed when it arrives,
  before the first byte of its answer, by one `os.write` of one JSONL line on an O_APPEND
  descriptor: `request_id`, `model`, `prompt_hash`, `prompt_tokens`, `completion_tokens`,
  `total_tokens`, `project` (the `OpenAI-Project` request header, which the SDK sends for its
  `project` setting: a real provider's invoice counts usage per project, and the lab's worker
  names its run directory there), and for the lab `stream`, `retry` (the SDK's
  `x-stainless-retry-count`: 0 for a first try), `fault`, `peer` (the client's address and port:
  which TCP connection carried the call), `pid` (the server's) and `t`. A client killed mid-stream, a timed-out
  request, a cut stream: all were billed, in full, because the answer was decided at arrival (a real
  provider may bill only what it generated before it noticed the client had gone). The bill is
  append-only; nothing here ever rewrites it.
- **Faults**, server-wide (`--fault SPEC`, or `ModelServer(fault=...)`) or per request (the request
  header `X-Bughunt-Fault: SPEC`, which overrides the server-wide fields it names). A header rather
  than an `extra_body` field, because a real server ignores a header it does not know while the real
  API refuses unknown body fields: the same request then works against a real server too. SPEC is
  `key=value` pairs separated by commas, e.g. `cut=3` or `rate_limit=2,retry_after=0.05`:

      delay=S        sleep S seconds before each chunk (a slow but steady stream)
      ttfb=S         sleep S seconds between billing and the first byte (headers included)
      cut=K          stream: close the connection after K chunks, mid-body;
                     no stream: close it halfway through the body (K is ignored)
      rate_limit=N   answer the first N arrivals of each request (same model and messages) with
                     429 and Retry-After; not billed (a refused request costs nothing)
      retry_after=S  the 429's delay: `Retry-After` in whole seconds (rounded up, RFC 9110) and
                     `retry-after-ms`, which the openai SDK reads first (default 1)
      malformed=K    the K-th chunk is broken JSON (no stream: the body is)

From Python: `ServerProcess(bill)` runs it as its own process (a real process, which a test can
SIGKILL), `ModelServer(bill)` in a thread of this one; both are context managers with `.base_url`,
and `serve(bill, in_thread=...)` picks one. What is deliberately not real: any API key is accepted,
any model name is served.
"""

from __future__ import annotations

if __name__ == "__main__":
    # `python -m bughunt.modelserver`: Ctrl-C or SIGTERM while the modules below are still being
    # imported (most of the start) ends with one line and the README's code, never a traceback.
    from .interrupts import stop_while_starting

    stop_while_starting("python -m bughunt.modelserver", "nothing was served or billed")

import argparse  # noqa: E402
import errno
import hashlib
import json
import math
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import weakref
from dataclasses import dataclass, fields, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PROG = "python -m bughunt.modelserver"
READY = "bughunt.modelserver: ready at"
FAULT_HEADER = "X-Bughunt-Fault"
COMPLETIONS_PATH = "/v1/chat/completions"
MAX_BODY = 8 * 1024 * 1024

ROLES = ("system", "developer", "user", "assistant", "tool", "function")

#: The chat completion parameters the API knows. They are accepted (most of them are ignored, the
#: answer is deterministic); any other top-level field is refused, as the real API refuses it.
KNOWN_PARAMS = frozenset({
    "model", "messages", "stream", "stream_options", "max_tokens", "max_completion_tokens", "n",
    "temperature", "top_p", "seed", "stop", "user", "metadata", "store", "frequency_penalty",
    "presence_penalty", "logit_bias", "logprobs", "top_logprobs", "response_format", "tools",
    "tool_choice", "parallel_tool_calls", "service_tier", "reasoning_effort", "modalities", "audio",
    "prediction", "web_search_options", "safety_identifier", "prompt_cache_key", "verbosity",
    "functions", "function_call",
})

VOCABULARY = ("open", "the", "page", "check", "form", "login", "button", "error", "report",
              "next", "link", "field", "submit", "console", "log", "click", "menu", "search",
              "result", "broken", "image", "header", "footer", "cart", "price", "total", "then",
              "and", "look", "for", "again", "slowly")


# --- faults -------------------------------------------------------------------------------------

class FaultSpecError(ValueError):
    """A fault spec that cannot be parsed; the message names the bad part."""


#: The longest wait a fault may ask for, in seconds: an hour is more than any client waits (the
#: openai SDK's default timeout is 10 minutes), and a longer one (1e308) cannot even be slept.
MAX_FAULT_S = 3600.0


def _ascii_digits(text: str) -> bool:
    """ASCII digits only: str.isdigit() also accepts '²' and other digits int() refuses."""
    return text.isascii() and text.isdigit()


@dataclass(frozen=True)
class Fault:
    """What goes wrong with an answer. The default is nothing."""

    delay: float = 0.0
    ttfb: float = 0.0
    cut: int | None = None
    rate_limit: int = 0
    retry_after: float = 1.0
    malformed: int | None = None

    @classmethod
    def parse(cls, spec: str | None, base: "Fault | None" = None) -> "Fault":
        """`key=value,...` over `base` (default: no fault). Raises FaultSpecError."""
        fault = base or cls()
        if spec is None or not spec.strip() or spec.strip() == "none":
            return fault
        kinds = {f.name: f for f in fields(cls)}
        changes = {}
        for part in spec.split(","):
            key, sep, value = part.strip().partition("=")
            if not sep or key not in kinds:
                raise FaultSpecError(
                    f"{part.strip()!r} is not KEY=VALUE with KEY one of {', '.join(kinds)}")
            if key in ("delay", "ttfb", "retry_after"):
                try:
                    number = float(value)
                except ValueError:
                    number = math.nan
                if not 0 <= number <= MAX_FAULT_S:          # NaN fails this too
                    raise FaultSpecError(f"{key}={value}: {key} must be a number of seconds "
                                         f"from 0 to {MAX_FAULT_S:g}")
                changes[key] = number
            else:
                if not _ascii_digits(value):
                    raise FaultSpecError(f"{key}={value}: {key} must be a whole number >= 0")
                changes[key] = int(value)
        return replace(fault, **changes)

    def spec(self) -> str:
        """The spec that parses back to this fault ("" for none)."""
        parts = []
        for f in fields(self):
            value = getattr(self, f.name)
            if value != f.default:
                parts.append(f"{f.name}={value:g}" if isinstance(value, float)
                             else f"{f.name}={value}")
        return ",".join(parts)


# --- the deterministic model --------------------------------------------------------------------

def _canonical(model: str, messages: list) -> bytes:
    return json.dumps({"model": model, "messages": messages}, sort_keys=True,
                      separators=(",", ":"), ensure_ascii=False).encode()


def prompt_hash(model: str, messages: list) -> str:
    """The bill's name for a prompt: the same model and messages always give the same hash."""
    return hashlib.sha256(_canonical(model, messages)).hexdigest()[:16]


def _text_of(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def prompt_tokens(messages: list) -> int:
    """Words of every message, plus 4 per message and 3 for the reply's priming (the shape of
    OpenAI's own counting recipe, with words for tokens)."""
    return 3 + sum(4 + len(_text_of(m.get("content")).split()) for m in messages)


def answer_words(model: str, messages: list) -> list[str]:
    """The answer, one word per token: 6 to 15 words chosen by the request's SHA-256."""
    digest = hashlib.sha256(b"answer:" + _canonical(model, messages)).digest()
    words = [VOCABULARY[b % len(VOCABULARY)] for b in digest[1:1 + 6 + digest[0] % 10]]
    words[0] = words[0].capitalize()
    words[-1] += "."
    return words


def answer_text(model: str, messages: list) -> str:
    return " ".join(answer_words(model, messages))


# --- requests -----------------------------------------------------------------------------------

class BadRequest(Exception):
    """A request the API would refuse with 400; never billed."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message, self.param, self.code = message, param, code


def _type_name(value) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a decimal", str: "a string",
            list: "an array", dict: "an object"}.get(type(value), "a value")


def _expect(value, kind: type | tuple, param: str, expected: str) -> None:
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise BadRequest(f"Invalid type for '{param}': expected {expected}, but got "
                         f"{_type_name(value)} instead.", param, "invalid_type")


def _validate_message(i: int, m) -> None:
    where = f"messages[{i}]"
    _expect(m, dict, where, "an object")
    if "role" not in m:
        raise BadRequest(f"Missing required parameter: '{where}.role'.", f"{where}.role",
                         "missing_required_parameter")
    if m["role"] not in ROLES:
        raise BadRequest(f"Invalid value: {json.dumps(m['role'])}. Supported values are: "
                         + ", ".join(f"'{r}'" for r in ROLES) + ".", f"{where}.role",
                         "invalid_value")
    content = m.get("content")
    if content is None:
        if m["role"] in ("assistant",):
            return
        raise BadRequest(f"Missing required parameter: '{where}.content'.", f"{where}.content",
                         "missing_required_parameter")
    _expect(content, (str, list), f"{where}.content", "one of a string or array of objects")
    if isinstance(content, list):
        for j, part in enumerate(content):
            _expect(part, dict, f"{where}.content[{j}]", "an object")
            if part.get("type") == "text" or "text" in part:
                _expect(part.get("text"), str, f"{where}.content[{j}].text", "a string")


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")         # Python's json module accepts NaN, Infinity


#: Numbers the API bounds, with their ranges (platform.openai.com/docs/api-reference/chat).
RANGES = {"temperature": (0, 2), "top_p": (0, 1), "presence_penalty": (-2, 2),
          "frequency_penalty": (-2, 2)}


def _unpaired_surrogate(value, where: str) -> str | None:
    """The field holding a lone surrogate (\\ud800 in JSON is valid syntax, but not Unicode:
    the text cannot be encoded, hashed or answered), or None."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return where
        return None
    items = value.items() if isinstance(value, dict) else enumerate(value) \
        if isinstance(value, list) else ()
    for key, item in items:
        key_where = f"{where}[{key}]" if isinstance(key, int) else (
            f"{where}.{key}" if where else str(key))
        found = _unpaired_surrogate(key, key_where) if isinstance(key, str) else None
        found = found or _unpaired_surrogate(item, key_where)
        if found:
            return found
    return None


def validate(body: bytes) -> dict:
    """The request as the API would accept it, or BadRequest naming the field."""
    try:
        request = json.loads(body, parse_constant=_no_constant)
    except RecursionError:
        raise BadRequest("We could not parse the JSON body of your request: it is nested too "
                         "deeply.") from None
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("We could not parse the JSON body of your request. (HINT: This likely "
                         "means you aren't using your HTTP library correctly. The OpenAI API "
                         "expects a JSON payload, but what was sent was not valid JSON.)") from None
    if not isinstance(request, dict):
        raise BadRequest(f"Invalid type for the request body: expected an object, but got "
                         f"{_type_name(request)} instead.", None, "invalid_type")
    unknown = sorted(set(request) - KNOWN_PARAMS)
    if unknown:
        raise BadRequest(f"Unrecognized request argument supplied: {unknown[0]}", unknown[0])
    if "model" not in request:
        raise BadRequest("you must provide a model parameter", "model")
    _expect(request["model"], str, "model", "a string")
    if "messages" not in request:
        raise BadRequest("Missing required parameter: 'messages'.", "messages",
                         "missing_required_parameter")
    messages = request["messages"]
    _expect(messages, list, "messages", "an array of objects")
    if not messages:
        raise BadRequest("Invalid 'messages': empty array. Expected an array with minimum length "
                         "1, but got an empty array instead.", "messages", "empty_array")
    for i, m in enumerate(messages):
        _validate_message(i, m)
    if "stream" in request and request["stream"] is not None:
        _expect(request["stream"], bool, "stream", "a boolean")
    options = request.get("stream_options")
    if options is not None:
        _expect(options, dict, "stream_options", "an object")
        if not request.get("stream"):
            raise BadRequest("The 'stream_options' parameter is only allowed when 'stream' is "
                             "enabled.", "stream_options", "invalid_value")
        if "include_usage" in options:
            _expect(options["include_usage"], bool, "stream_options.include_usage", "a boolean")
    for key in ("max_tokens", "max_completion_tokens"):
        if request.get(key) is not None:
            _expect(request[key], int, key, "an integer")
            if request[key] < 1:
                raise BadRequest(f"Invalid '{key}': integer below minimum value. Expected a value "
                                 f">= 1, but got {request[key]} instead.", key,
                                 "integer_below_min_value")
    if request.get("n") is not None:
        _expect(request["n"], int, "n", "an integer")
        if request["n"] != 1:
            raise BadRequest("This server answers with one choice only: 'n' must be 1.", "n",
                             "invalid_value")
    for key, (low, high) in RANGES.items():
        if request.get(key) is not None:
            _expect(request[key], (int, float), key, "a decimal")
            if not low <= request[key] <= high:
                side = ("below minimum", f">= {low}") if request[key] < low else (
                    "above maximum", f"<= {high}")
                raise BadRequest(f"Invalid '{key}': decimal {side[0]} value. Expected a value "
                                 f"{side[1]}, but got {request[key]} instead.", key,
                                 f"decimal_{side[0].replace(' ', '_')}_value")
    where = _unpaired_surrogate(request, "")
    if where is not None:
        raise BadRequest(f"Invalid value for '{where}': it holds a lone surrogate (an unpaired "
                         "\\ud800-\\udfff escape), which is not valid Unicode.", where,
                         "invalid_value")
    return request


def error_body(message: str, type_: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> bytes:
    return json.dumps({"error": {"message": message, "type": type_, "param": param,
                                 "code": code}}).encode()


# --- the bill -----------------------------------------------------------------------------------

class BillError(ValueError):
    """A file given as a bill that is not one (and not empty); the message names it and the line."""


def check_bill(path: Path) -> None:
    """Read-only: refuse a file that is neither empty nor a bill, so that a server never appends
    its lines to somebody's notes, and a sweep never counts calls in them. A bill is JSON lines,
    each an object with a `request_id`, as `Bill.charge` writes them."""
    path = Path(path)
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return
    with f:
        for n, line in enumerate(f, 1):
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            if not isinstance(record, dict) or not isinstance(record.get("request_id"), str):
                raise BillError(f"{path}:{n}: not a bill (a bill's every line is a JSON object "
                                "with a request_id, one per billed call); give a new file, or "
                                "a bill this server wrote")


class Bill:
    """The server-side bill: one JSONL line per billed request, one `os.write` on O_APPEND.

    A line is written whole or not at all as far as readers of a local file are concerned, and a
    SIGKILL of the server right after the write leaves it on the bill. The lock only keeps `close`
    from pulling the descriptor out from under a handler thread that is still billing.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()

    def charge(self, line: dict) -> None:
        data = (json.dumps(line, separators=(",", ":")) + "\n").encode()
        with self._lock:
            if self._fd is None:
                raise OSError(errno.EBADF, "the bill is closed")
            os.write(self._fd, data)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def read_server_bill(path: Path) -> list[dict]:
    """Every request the server billed, in order (an empty list if nothing was billed yet)."""
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


# --- the HTTP side ------------------------------------------------------------------------------

class _ClientGone(Exception):
    """The client closed its connection (or was killed) while we answered."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"        # keep-alive and chunked streams, as the real API
    server_version = "bughunt-modelserver"
    sys_version = ""
    timeout = 120                        # an idle keep-alive connection is dropped after this
    server: "_HTTPServer"

    def setup(self) -> None:
        super().setup()
        # Each chunk leaves when it is written, as from a real API server: without this, Nagle's
        # algorithm holds a small write back until the previous one is acknowledged (~40 ms).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format, *args):   # quiet: the bill is the record
        pass

    # -- plumbing --
    def _send(self, data: bytes) -> None:
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError, OSError) as e:
            raise _ClientGone() from e

    def _reply(self, status: int, body: bytes, headers: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self._send(body)

    def _cut(self) -> None:
        """Close the connection now, mid-body, as a dying proxy or server does."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _wait(self, seconds: float) -> None:
        if seconds > 0 and self.server.stopping.wait(seconds):
            raise _ClientGone()          # the server is stopping: abandon this answer

    def _read_body(self) -> bytes | None:
        """The body, by its Content-Length or in chunks; None when it is too large or its chunks
        are malformed (the connection is then closed: the next request's start is unknown)."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked()
        length = self.headers.get("Content-Length")
        if length is None or not _ascii_digits(length):
            return b""
        if int(length) > MAX_BODY:
            self.close_connection = True
            return None
        return self.rfile.read(int(length))

    def _read_chunked(self) -> bytes | None:
        body = bytearray()
        while True:
            size_line = self.rfile.readline(64).split(b";")[0].strip()
            try:
                size = int(size_line, 16)
            except ValueError:
                size = -1
            if size < 0 or len(body) + size > MAX_BODY:
                self.close_connection = True
                return None
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass                    # trailer fields, ignored
                return bytes(body)
            body += self.rfile.read(size)
            self.rfile.readline(8)          # the CRLF after the chunk

    # -- verbs --
    def _not_found(self) -> None:
        if self.command == "POST":
            self._read_body()               # keep the connection in step
        path = self.path.split("?")[0]
        self._reply(404, error_body(f"Invalid URL ({self.command} {path})"))

    do_GET = do_PUT = do_DELETE = do_PATCH = _not_found

    def do_POST(self) -> None:
        try:
            self._post()
        except _ClientGone:
            self.close_connection = True

    def _post(self) -> None:
        if self.path.split("?")[0].rstrip("/") != COMPLETIONS_PATH:
            return self._not_found()
        body = self._read_body()
        if body is None:
            return self._reply(413, error_body(f"The request body must be at most {MAX_BODY} "
                                               "bytes, in well-formed chunks if chunked."),
                               {"Connection": "close"})
        try:
            request = validate(body)
            fault = Fault.parse(self.headers.get(FAULT_HEADER), self.server.fault)
        except BadRequest as e:
            return self._reply(400, error_body(e.message, param=e.param, code=e.code))
        except FaultSpecError as e:
            return self._reply(400, error_body(f"Invalid {FAULT_HEADER} header: {e}",
                                               param=FAULT_HEADER, code="invalid_value"))
        model, messages = request["model"], request["messages"]
        key = prompt_hash(model, messages)
        if self.server.refuse(key, fault.rate_limit):
            wait = fault.retry_after
            return self._reply(429, error_body(
                f"Rate limit reached for {model}. Please try again in {wait:g}s.", "requests",
                code="rate_limit_exceeded"),
                {"Retry-After": str(math.ceil(wait)), "retry-after-ms": str(round(wait * 1000))})

        words = answer_words(model, messages)
        limit = request.get("max_completion_tokens") or request.get("max_tokens")
        finish = "stop"
        if limit is not None and limit < len(words):
            words, finish = words[:limit], "length"
        usage = {"prompt_tokens": prompt_tokens(messages), "completion_tokens": len(words)}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        request_id = "chatcmpl-" + uuid.uuid4().hex[:24]
        stream = bool(request.get("stream"))
        retry = self.headers.get("x-stainless-retry-count")
        # Billed now, at arrival, before the first byte of the answer leaves.
        self.server.bill.charge({
            "request_id": request_id, "model": model, "prompt_hash": key, **usage,
            "project": self.headers.get("OpenAI-Project"), "stream": stream,
            "retry": int(retry) if retry and _ascii_digits(retry) else None,
            "fault": fault.spec(), "peer": "%s:%d" % self.client_address[:2],
            "pid": os.getpid(), "t": round(time.time(), 6)})
        self._wait(fault.ttfb)
        created = int(time.time())
        if stream:
            include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
            self._stream(request_id, created, model, words, finish, usage if include_usage
                         else None, fault)
        else:
            self._whole(request_id, created, model, words, finish, usage, fault)

    def _whole(self, request_id, created, model, words, finish, usage, fault: Fault) -> None:
        body = json.dumps({
            "id": request_id, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": " ".join(words),
                                                 "refusal": None},
                         "logprobs": None, "finish_reason": finish}],
            "usage": usage, "system_fingerprint": None}).encode()
        length = len(body)
        if fault.malformed is not None:
            body = body[: len(body) // 2]
            length = len(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(length))
        self.send_header("x-request-id", request_id)
        self.end_headers()
        if fault.cut is not None:
            self._send(body[: len(body) // 2])
            return self._cut()
        self._send(body)

    def _stream(self, request_id, created, model, words, finish, usage, fault: Fault) -> None:
        def chunk(delta: dict, finish_reason=None, choices=True) -> dict:
            c = {"id": request_id, "object": "chat.completion.chunk", "created": created,
                 "model": model, "system_fingerprint": None,
                 "choices": [{"index": 0, "delta": delta, "logprobs": None,
                              "finish_reason": finish_reason}] if choices else []}
            if usage is not None:
                c["usage"] = None
            return c

        chunks = [chunk({"role": "assistant", "content": "", "refusal": None})]
        chunks += [chunk({"content": w if i == 0 else " " + w}) for i, w in enumerate(words)]
        chunks.append(chunk({}, finish))
        if usage is not None:
            chunks.append({**chunk({}, choices=False), "usage": usage})

        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("x-request-id", request_id)
        self.end_headers()
        for k, c in enumerate(chunks, start=1):
            if fault.cut is not None and k > fault.cut:
                return self._cut()
            self._wait(fault.delay)
            data = json.dumps(c)
            if k == fault.malformed:
                data = data[: len(data) // 2]
            self._event(data)
        self._event("[DONE]")
        self._send(b"0\r\n\r\n")

    def _event(self, data: str) -> None:
        payload = f"data: {data}\n\n".encode()
        self._send(b"%x\r\n%s\r\n" % (len(payload), payload))


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address, bill: "Bill | None", fault: Fault):
        self.bill, self.fault = bill, fault
        self.stopping = threading.Event()
        self._refusals: dict[str, int] = {}
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        super().__init__(address, _Handler)

    def refuse(self, key: str, times: int) -> bool:
        """Refuse (429) the first `times` arrivals of the request named `key`."""
        with self._lock:
            seen = self._refusals.get(key, 0)
            if seen >= times:
                return False
            self._refusals[key] = seen + 1
            return True

    def process_request(self, request, client_address):
        with self._lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request):
        with self._lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self._lock:
            live = list(self._connections)
        for s in live:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)) or self.stopping.is_set():
            return                         # a client that went away is not the server's error
        print(f"bughunt.modelserver: error answering {client_address[0]}:{client_address[1]}: "
              f"{type(exc).__name__}: {exc}", file=sys.stderr)


# --- the server, in this process (a thread) -----------------------------------------------------

class StartError(OSError):
    """The server cannot start; `setting` names what is wrong ("port", "host" or "bill")."""

    def __init__(self, setting: str, message: str):
        super().__init__(f"{setting} {message}")
        self.setting, self.message = setting, message


class ModelServer:
    """The server in a thread of this process: for tests and notebooks that need no real kill.

        with ModelServer(bill_path) as server:
            client = openai.OpenAI(base_url=server.base_url, api_key="unused")

    Raises StartError (an OSError naming the setting) when the port is taken or the bill cannot
    be opened; nothing is created then.
    """

    def __init__(self, bill: Path, fault: Fault | str | None = None, *, port: int = 0,
                 host: str = "127.0.0.1"):
        self.fault = fault if isinstance(fault, Fault) else Fault.parse(fault)
        self.bill_path = Path(bill)
        try:
            self._httpd = _HTTPServer((host, port), None, self.fault)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise StartError("port", f"{port}: address already in use") from None
            raise StartError("host", f"{host} port {port}: cannot listen there "
                                     f"({e.strerror or e})") from None
        try:                            # opened after the port is ours: a refusal creates no file
            check_bill(self.bill_path)
            self._httpd.bill = self._bill = Bill(self.bill_path)
        except BillError as e:
            self._httpd.server_close()
            raise StartError("bill", str(e)) from None
        except OSError as e:
            self._httpd.server_close()
            why = {errno.ENOENT: "its folder does not exist", errno.EISDIR: "is a folder",
                   errno.EACCES: "not writable (permission denied)"}.get(e.errno, e.strerror)
            raise StartError("bill", f"{bill}: {why}") from None
        self.host, self.port = self._httpd.server_address[:2]
        self.base_url = f"http://{self.host}:{self.port}/v1"
        self._thread: threading.Thread | None = None

    def start(self) -> "ModelServer":
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={
            "poll_interval": 0.05}, name=f"modelserver:{self.port}", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._httpd.serve_forever(poll_interval=0.1)

    def stop(self) -> None:
        """Stop accepting, wake every handler that waits, close every connection and the bill."""
        self._httpd.stopping.set()
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join()
            self._thread = None
        self._httpd.server_close()
        self._httpd.close_connections()
        self._bill.close()

    def read_bill(self) -> list[dict]:
        return read_server_bill(self.bill_path)

    def __enter__(self) -> "ModelServer":
        return self if self._thread is not None else self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# --- the server, as its own process ---------------------------------------------------------------

class ServerProcess:
    """`python -m bughunt.modelserver` as a child process: a real process that can be SIGKILLed.

    The constructor returns when the server has printed its ready line (no sleeps), with
    `base_url` taken from it. `stop()` sends SIGTERM and waits; `kill()` sends SIGKILL.
    """

    def __init__(self, bill: Path, fault: Fault | str | None = None, *, port: int = 0,
                 host: str = "127.0.0.1", timeout: float = 30):
        spec = fault.spec() if isinstance(fault, Fault) else (fault or "")
        self.bill_path = Path(bill)
        self._stderr = tempfile.TemporaryFile(mode="w+")
        cmd = [sys.executable, "-m", "bughunt.modelserver", "--port", str(port), "--host", host,
               "--bill", str(bill)] + (["--fault", spec] if spec else [])
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._stderr,
                                     stdin=subprocess.DEVNULL, text=True,
                                     start_new_session=True)
        # Its own session keeps a notebook's interrupt from killing it; so stop it at our exit.
        weakref.finalize(self, _terminate, self.proc)
        self.base_url = self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            ready = select.select([self.proc.stdout], [], [], max(0.0, left))[0] if left > 0 else []
            if not ready:
                self.kill()
                raise TimeoutError(f"the model server printed no ready line in {timeout:g} s")
            line = self.proc.stdout.readline()
            if not line:
                self.proc.wait()
                self._stderr.seek(0)
                raise RuntimeError("the model server exited before it was ready: "
                                   + self._stderr.read().strip())
            if line.startswith(READY):
                return line[len(READY):].split()[0]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def read_bill(self) -> list[dict]:
        return read_server_bill(self.bill_path)

    def stop(self, timeout: float = 10) -> int:
        """SIGTERM, then wait; the server's exit status: 143 when SIGTERM stopped it cleanly (the
        README's code for SIGTERM), negative when it had to be killed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._close_pipes()
        return self.proc.returncode

    def kill(self) -> int:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._close_pipes()
        return self.proc.returncode

    def stderr(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read()

    def _close_pipes(self) -> None:
        if self.proc.stdout and not self.proc.stdout.closed:
            self.proc.stdout.close()

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _terminate(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def serve(bill: Path, fault: Fault | str | None = None, *, in_thread: bool = False,
          port: int = 0, host: str = "127.0.0.1"):
    """A running model server as a context manager with `.base_url`: its own process (default,
    it can be SIGKILLed) or a thread of this one (`in_thread=True`, for tests)."""
    if in_thread:
        return ModelServer(bill, fault, port=port, host=host).start()
    return ServerProcess(bill, fault, port=port, host=host)


# --- command line -------------------------------------------------------------------------------

def _port(text: str) -> int:
    if not _ascii_digits(text) or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0 to 65535; 0 picks a "
                                         "free port)")
    return int(text)


def fault_flag(text: str) -> Fault:
    """`--fault SPEC`, parsed; a bad spec is argparse's one-sentence error."""
    try:
        return Fault.parse(text)
    except FaultSpecError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def server_parser() -> argparse.ArgumentParser:
    from .config import OneSentenceParser, given_path
    parser = OneSentenceParser(
        prog=PROG, description="A local OpenAI-compatible model server with a server-side bill "
        "and injected faults (lesson 11).")
    parser.add_argument("--port", type=_port, default=0, help="0 (default) picks a free port")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--bill", type=given_path, required=True, metavar="FILE",
                        help="the append-only bill, one JSON line per billed request")
    parser.add_argument("--fault", type=fault_flag, default=Fault(), metavar="SPEC",
                        help="server-wide faults, e.g. 'cut=3' or 'delay=0.05,ttfb=1' "
                             "(per request: the X-Bughunt-Fault header)")
    return parser


class _Stop(Exception):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


_stopping = False


def _stop(signum, frame):
    """SIGTERM or Ctrl-C: leave the serving loop, once (a second signal while stopping is
    ignored)."""
    global _stopping
    if not _stopping:
        _stopping = True
        raise _Stop(signum)


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM or Ctrl-C; then stop (every connection closed, the bill closed) and
    exit as the README's table says every long command does: 130 after Ctrl-C (SIGINT), 143
    after SIGTERM. 2: a bad flag, or the port or the bill refused."""
    # The handlers first: a signal from here on stops the server cleanly, whenever it comes.
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    server = None
    try:
        parser = server_parser()
        args = parser.parse_args(argv)
        try:
            server = ModelServer(args.bill, args.fault, port=args.port, host=args.host)
        except StartError as e:
            parser.error(f"--{e.setting} {e.message}")
        print(f"{READY} {server.base_url} (bill: {args.bill})", flush=True)
        server.serve_forever()
    except _Stop as e:
        how = "Ctrl-C (SIGINT)" if e.signum == signal.SIGINT else "SIGTERM"
        code = 128 + e.signum
    else:                                   # serve_forever returns only once stopped
        how, code = "shutdown", 0
    finally:
        if server is not None:
            server.stop()
    print(f"bughunt.modelserver: stopped ({how})", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
