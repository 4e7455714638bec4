"""Lesson 11, the call in flight: its tables, figures, exercises and panel, over the engine.

The engine is `bughunt.modelserver` (a local OpenAI-compatible server that bills every request at
arrival), `bughunt.llm` (the model through the real `openai` SDK) and `bughunt.inflight` (a call
killed inside itself, and what the SDK does by itself against injected faults). This module runs
them for the notebook and turns their typed records into DataFrames and figures.

Its experiments run in the lesson's world, `inflight.shared_lab()`: a model server and a fork
parent of the call processes, started once per kernel and stopped with it (by the lifeline if the
kernel is killed). This module starts no process itself.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import ipywidgets as W

from ... import inflight
from ...config import RunConfig
from ...experiment import CallCrashRun, CrashRun, crash_points, frame, sweep_records
from ...inflight import CallKilled, SdkBehaviour, shared_lab
# The SDK's attempts and a stream's timeline are measured by the engine; the notebook calls them
# from here, beside the tables and figures made of them.
from ...inflight import (Attempt, Timeline, attempts_of_a_timed_out_call,  # noqa: F401
                         stream_timeline, timelines)
from ...llm import DEFAULT_MODEL, ServedModel, page_messages
from ...modelserver import answer_words, prompt_tokens, read_server_bill
from ...world import Site
from .. import results
from ..panel import Panel, Result
from ..judges import Measured, assess, defined_in, exercise, statement
from ..registry import Lesson
from ..views import html_table

PAGE = 3                    # the lesson's first bug page: its call is the one killed here
PENDING = inflight.PENDING  # what a resume does with the call in flight: redo | abort


# --- the answer of a page, and the moments inside its call ----------------------------------------

def answer_of(page: int = PAGE) -> list[str]:
    """The words the server answers to page `page`'s prompt (one word per token, per chunk)."""
    return answer_words(DEFAULT_MODEL, page_messages(Site.load(), page))


def points_of(page: int = PAGE, stream: bool = True) -> list[str]:
    """Every crash point inside page `page`'s call. Streamed, the chunks are the role chunk, one
    per word, the finish chunk and the usage chunk; not streamed, the answer arrives whole."""
    return inflight.call_points(len(answer_of(page)) + 3) if stream else ["last_chunk"]


def clean_call(page: int = PAGE) -> dict:
    """One call that nobody kills, and the line the server wrote on its bill for it."""
    lab_ = shared_lab()
    start = len(read_server_bill(lab_.bill))
    result = lab_.forks.run(inflight.call_args(lab_.base_url, lab_.run_dir() / "j.jsonl",
                                               page=page))
    if result.returncode != 0:
        raise RuntimeError(f"the clean call failed: {result.stderr.strip()}")
    answer = json.loads(result.stdout)
    line = read_server_bill(lab_.bill)[start:][-1]
    return {"reply": answer["reply"], "tokens": answer["tokens"],
            "bill": {k: line[k] for k in ("model", "prompt_tokens", "completion_tokens",
                                          "total_tokens", "stream", "retry")}}


def kill_page_call(crash_point: str, pending: str = "redo", *, stream: bool = True,
                 page: int = PAGE) -> CallKilled:
    """Kill page `page`'s call at `crash_point` (a real SIGKILL inside the call), then resume it
    with `pending` (redo | abort); judged by the server's bill."""
    lab_ = shared_lab()
    run_dir = lab_.run_dir()
    return inflight.kill_in_call(crash_point, pending=pending, stream=stream, page=page,
                                 base_url=lab_.base_url, bill=lab_.bill, run_dir=run_dir,
                                 runner=lab_.forks.run)


def kill_sweep(page: int = PAGE, pendings: tuple[str, ...] = PENDING,
               points: list[str] | None = None, progress=None) -> list[CallKilled]:
    """`kill_in_call` at every point inside the call, for each resume choice (one at a time: the
    bill is read per prompt, so two runs of one page must not overlap)."""
    points = points or points_of(page)
    jobs = [(p, pending) for pending in pendings for p in points]
    records = []
    for i, (point, pending) in enumerate(jobs, start=1):
        records.append(kill_page_call(point, pending, page=page))
        if progress:
            progress(i, len(jobs))
    return records


KILL_COLUMNS = ["crash_point", "pending", "died_by_sigkill", "chunks_held", "prefix_held",
                "killed_call_billed", "billed_calls", "redone_model_calls", "billed_tokens",
                "outcome", "reply_matches_clean"]


def kill_table(records: list[CallKilled]):
    """The kills as a table: what the killed process held, what the server billed, what the resume
    ended with. (Request ids are left out: they differ on every run.)"""
    df = frame(records)
    return df[KILL_COLUMNS]


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _words(text: str | None) -> int:
    return len((text or "").split())


def plot_kill_sweep(records: list[CallKilled], page: int = PAGE):
    """Per crash point inside the call: the calls the server billed for each resume choice (top),
    and the answer words the killed process held against the whole answer (bottom)."""
    from ..style import COLORS, new_figure

    df = frame(records)
    points = list(dict.fromkeys(df["crash_point"]))
    x = range(len(points))
    fig, (top, bottom) = new_figure(10, 5.6, nrows=2, sharex=True)
    styles = {"redo": (COLORS["red"], "o", "-"), "abort": (COLORS["blue"], "s", "--")}
    for pending, d in df.groupby("pending", sort=False):
        d = d.set_index("crash_point").loc[points]
        color, marker, line = styles.get(pending, (COLORS["grey"], "^", ":"))
        label = {"redo": "redo: call again (at least once)",
                 "abort": "abort: record it aborted with the prefix (at most once)"}.get(pending,
                                                                                      pending)
        top.plot(x, d["billed_calls"], marker=marker, linestyle=line, color=color, label=label)
    top.axhline(1, color=COLORS["grey"], linestyle=":", linewidth=1.2,
                label="a clean call: billed once")
    top.set_ylabel("calls billed for this page\n(server's bill)")
    top.set_ylim(0, max(2.0, float(df["billed_calls"].max())) + 0.8)
    top.set_yticks(range(0, int(top.get_ylim()[1]) + 1))
    top.legend(fontsize=8, loc="upper left", ncols=3)
    top.set_title(f"A call killed in flight (page {page}): the server billed it whole, the client "
                  "held only a prefix", fontsize=10)
    held = df.drop_duplicates("crash_point").set_index("crash_point").loc[points]
    whole = len(answer_of(page))
    got = [_words(p) for p in held["prefix_held"]]
    bottom.bar(x, got, color=COLORS["green"],
               label="held by the killed process (its journal)")
    bottom.bar(x, [whole - g for g in got], bottom=got, color=COLORS["orange"], hatch="//",
               edgecolor="white", label="billed, never received: only on the server")
    bottom.set_ylim(0, whole * 1.5)
    bottom.set_yticks(range(0, whole + 1, 2))
    bottom.set_ylabel("answer words\n(1 word = 1 token)")
    bottom.set_xticks(list(x), points, rotation=60, ha="right", fontsize=8)
    bottom.set_xlabel("crash point inside the call (in the order a streamed call reaches them)")
    bottom.legend(fontsize=8, loc="upper left", ncols=2)
    return fig


# --- what the SDK does by itself ------------------------------------------------------------------

def sdk_measurements() -> list[SdkBehaviour]:
    """The engine's seven cases with its defaults: timeout, 429, cut stream, cut body, malformed
    chunk, slow stream, stalled stream (about 5 s, mostly the SDK's own backoff sleeps)."""
    lab_ = shared_lab()
    return inflight.sdk_behaviours(base_url=lab_.base_url, bill=lab_.bill)


def _sdk_outcome(r: SdkBehaviour) -> str:
    if r.raised is None:
        return "answered, whole" if r.complete else "answered, incomplete"
    caught = ("caught by except openai.APIError" if r.caught_by_api_error
              else "NOT caught by except openai.APIError")
    return f"raised {r.raised} ({caught})"


def _holds(r: SdkBehaviour) -> str:
    """What the caller collected, said so that it does not depend on the answer's length (each
    measurement asks a fresh prompt, so its answer has 6 to 15 words)."""
    if r.complete:
        return "the whole answer"
    return f"{_plural(_words(r.prefix), 'word')} ({_plural(r.chunks, 'chunk')}), then nothing"


def sdk_table(records: list[SdkBehaviour]):
    """One row per case: the attempts the SDK sent, the statuses they got, the attempts the server
    billed, and what reached the caller. (Times are in `sdk_timing`: they vary between runs.)"""
    import pandas as pd

    rows = []
    for r in records:
        rows.append({"case": r.case, "fault": r.fault, "stream": r.stream,
                     "timeout_s": r.timeout_s, "max_retries": r.max_retries,
                     "requests_sent": r.requests_sent,
                     "statuses": " ".join(map(str, r.statuses)) or "(none)",
                     "billed": r.billed, "the caller holds": _holds(r),
                     "what reached the caller": _sdk_outcome(r)})
    return pd.DataFrame(rows)


def sdk_timing(records: list[SdkBehaviour]):
    """How long each case took against its timeout (varies between runs and machines)."""
    import pandas as pd

    return pd.DataFrame([{"case": r.case, "timeout_s": r.timeout_s, "elapsed_s": r.elapsed_s,
                          "elapsed / timeout": round(r.elapsed_s / r.timeout_s, 1)}
                         for r in records])


def plot_sdk(records: list[SdkBehaviour]):
    """Per case: the attempts the SDK sent beside the attempts the server billed, and what the
    caller got."""
    from ..style import COLORS, new_figure

    fig, ax = new_figure(10, 0.7 + 0.62 * len(records))
    y = list(range(len(records)))
    sent = [r.requests_sent for r in records]
    billed = [r.billed for r in records]
    ax.barh([i - 0.19 for i in y], sent, height=0.36, color=COLORS["blue"],
            label="attempts the SDK sent (counted outside it)")
    ax.barh([i + 0.19 for i in y], billed, height=0.36, color=COLORS["orange"], hatch="//",
            edgecolor="white", label="attempts the server billed")
    for i, r in enumerate(records):
        ax.text(max(r.requests_sent, r.billed) + 0.08, i, _sdk_outcome(r), va="center", fontsize=8,
                color=COLORS["red"] if r.caught_by_api_error is False else COLORS["black"])
    ax.set_yticks(y, [f"{r.case} ({r.fault}{'' if r.stream else ', not streamed'})"
                      for r in records], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, max(sent + billed) + 4.2)
    ax.set_xticks(range(0, max(sent + billed) + 1))
    ax.set_xlabel("HTTP requests for one call (attempts)")
    ax.set_ylabel("injected fault")
    ax.set_title("What the openai SDK does by itself (max_retries=2), against the server's bill",
                 fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0, -0.16), ncols=2)
    return fig


def attempts_table(attempts: list[Attempt]):
    """Each attempt of one SDK call, as it left the client and as the server billed it."""
    df = frame(attempts)
    df["idempotency_header"] = df["idempotency_header"].replace("", "(none sent)")
    df["status"] = df["status"].replace("", "(timed out)")
    return df.set_index("attempt")


def plot_timelines(lines: list[Timeline]):
    """Chunks received over time, with each call's timeout marked: a slow stream outlives its
    timeout, a stalled one dies of it."""
    from ..style import COLORS, SERIES, new_figure

    fig, ax = new_figure(9, 3.8)
    for i, t in enumerate(lines):
        color = SERIES[i % len(SERIES)]
        ax.step([0, *t.arrivals], range(len(t.arrivals) + 1), where="post", color=color,
                marker="o", markersize=3,
                label=f"{t.label}: {t.delay_s:g} s before each chunk, timeout {t.timeout_s:g} s")
        ax.axvline(t.timeout_s, color=color, linestyle=":", linewidth=1.2)
        ax.annotate(f"{t.label}: timeout {t.timeout_s:g} s (per read)",
                    (t.timeout_s, 1 - 0.08 * (i + 1)), xycoords=("data", "axes fraction"),
                    xytext=(4, 0), textcoords="offset points", fontsize=8, color=color)
        end = (f"{t.raised} after {t.ended_s:.2f} s" if t.raised
               else f"whole answer after {t.ended_s:.2f} s")
        ax.plot([t.ended_s], [len(t.arrivals)], marker="X" if t.raised else "*", markersize=11,
                color=COLORS["red"] if t.raised else color, linestyle="none")
        ax.annotate(end, (t.ended_s, len(t.arrivals)), xytext=(6, 4), textcoords="offset points",
                    fontsize=8)
    ax.set_xlim(0, max(t.ended_s for t in lines) * 1.45)
    ax.set_ylim(-0.5, max(len(t.arrivals) for t in lines) * 1.6 + 2)
    ax.set_xlabel("time since the request was sent (s)")
    ax.set_ylabel("chunks received (count)")
    ax.set_title("The SDK's timeout limits each read, not the whole call", fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0, -0.16), ncols=2)
    return fig


# --- the choices for the call in flight -----------------------------------------------------------

def call_choices_table(records: list[CallKilled], crash_point: str = "chunk#5", page: int = PAGE):
    """The three answers to a call killed at `crash_point`, with their costs: redo and abort as
    measured; resume-from-prefix computed from the measured prefix with the server's own token
    counting (neither the OpenAI Chat Completions API nor this server continues an answer)."""
    import pandas as pd

    by = {r.pending: r for r in records if r.crash_point == crash_point}
    redo, abort = by["redo"], by["abort"]
    messages = page_messages(Site.load(), page)
    words = answer_of(page)
    prefix = abort.prefix_held
    clean_tokens = prompt_tokens(messages) + len(words)
    cont_prompt = prompt_tokens(messages + [{"role": "assistant", "content": prefix}])
    cont_tokens = cont_prompt + len(words) - _words(prefix)
    return pd.DataFrame([
        {"choice": "redo: send the call again", "calls billed": redo.billed_calls,
         "tokens billed": redo.billed_tokens, "the agent ends with": "the whole answer",
         "guarantee (lesson 4)": "at least once", "source": "measured"},
        {"choice": "abort: record it aborted with its prefix, tell the model",
         "calls billed": abort.billed_calls, "tokens billed": abort.billed_tokens,
         "the agent ends with": f"{_words(prefix)} of {len(words)} words, marked aborted",
         "guarantee (lesson 4)": "at most once", "source": "measured"},
        {"choice": "resume from the prefix (an API that continues a final assistant message)",
         "calls billed": 2, "tokens billed": clean_tokens + cont_tokens,
         "the agent ends with": "prefix + a continuation (not the lost words, unless sampling "
                                "is deterministic)",
         "guarantee (lesson 4)": "at least once (the first call stays billed)",
         "source": "computed from the measured prefix"},
    ]).set_index("choice")


def lesson2_contrast():
    """Lesson 2's finest store beside this lesson's points: a worker with a snapshot after every
    operation, killed right after its model call returned (the in-process model), and the points
    inside the call (measured here)."""
    import pandas as pd

    from ...config import RunConfig
    from ...experiment import crash_and_resume, crash_point

    config = RunConfig(store="snapshot", granularity="op", intent=False)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bughunt-call-l2-") as tmp:
        for name in (f"p{PAGE}.after_model_call", f"p{PAGE}.after_visit"):
            r = crash_and_resume(config, crash_point(config, name), Path(tmp) / name)
            rows.append({"crash point": name, "where": "lesson 2 worker, per-operation "
                         "snapshots", "redone model calls": r.redone_model_calls})
    for point in ("sent", "chunk#5", "last_chunk"):
        r = kill_page_call(point, "redo")
        rows.append({"crash point": point, "where": "inside the call (this lesson), resume "
                     "redoes it", "redone model calls": r.redone_model_calls})
    return pd.DataFrame(rows).set_index("crash point")


# --- the real worker, killed inside its call ------------------------------------------------------

#: The lesson's design that recovers correctly (lesson 4): a log, intents, the idempotency key.
WORKER_CONFIG = RunConfig(store="log", intent=True, idempotency_key=True)


@dataclass(frozen=True)
class WorkerSweep:
    """One page's crash points of the real worker, swept with each model."""

    page: int
    over_http: list[CallCrashRun]      # asking this lesson's server (`--model-url`)
    in_process: list[CrashRun]         # asking the in-process model, as every other lesson does
    over_http_s: float                 # wall time of each sweep (varies between runs)
    in_process_s: float


def worker_sweep(page: int = PAGE, config: RunConfig = WORKER_CONFIG) -> WorkerSweep:
    """The real worker (`python -m bughunt.worker`, the agent of lessons 1 to 8) killed by SIGKILL
    at every crash point of page `page` and resumed, twice: asking this lesson's model server over
    HTTP (`--model-url`: the points inside the call join the scheme, the server's bill counts the
    redone calls, the worker's call journal says what it held) and asking the in-process model."""
    lab_ = shared_lab()
    model = ServedModel(lab_.base_url, lab_.bill)
    t0 = time.perf_counter()
    http = sweep_records(config, model=model, tag="over HTTP",
                         points=[p.name for p in crash_points(config, True) if p.page == page])
    t1 = time.perf_counter()
    mock = sweep_records(config, tag="in-process",
                         points=[p.name for p in crash_points(config) if p.page == page])
    return WorkerSweep(page, http, mock, t1 - t0, time.perf_counter() - t1)


def worker_table(sweep: WorkerSweep):
    """Per crash point of the page, in the order the worker reaches them: the calls redone on each
    model's bill, what the killed worker held of the call (over HTTP), and the witnesses' verdict."""
    import pandas as pd

    mock = {r.crash_point: r for r in sweep.in_process}
    whole = len(answer_of(sweep.page))
    none = "(no such point)"
    rows = []
    for r in sweep.over_http:
        m = mock.get(r.crash_point)
        rows.append({
            "crash point": r.crash_point,
            "in-process: redone calls": m.redone_model_calls if m else none,
            "over HTTP: redone calls (server's bill)": r.redone_model_calls,
            "over HTTP: answer words held": f"{_words(r.prefix_held)} of {whole}",
            "in-process: verdict": m.verdict if m else none,
            "over HTTP: verdict": r.verdict})
    return pd.DataFrame(rows).set_index("crash point")


def worker_timing(sweep: WorkerSweep):
    """Wall time per crash+resume pair of each sweep (varies between runs and machines)."""
    import pandas as pd

    rows = [("over HTTP (openai SDK, local server)", len(sweep.over_http), sweep.over_http_s),
            ("in-process model", len(sweep.in_process), sweep.in_process_s)]
    df = pd.DataFrame([{"model": m, "pairs": n, "seconds": round(t, 2),
                        "ms per pair": round(1000 * t / n)} for m, n, t in rows])
    return df.set_index("model")


# --- a real local model ---------------------------------------------------------------------------

#: Local servers that speak the same API (their documentation's default address).
REAL_SERVERS = {
    "Ollama": ("http://localhost:11434/v1", "llama3.2"),
    "vLLM (vllm serve)": ("http://localhost:8000/v1", "the model you serve"),
    "llama.cpp (llama-server)": ("http://localhost:8080/v1", "any name (one model is loaded)"),
}


def real_servers_table():
    """What changes and what the lesson loses when the same code talks to a real local model."""
    import pandas as pd

    rows = [{"server": name, "base_url": url, "model": model,
             "deterministic answers": "no", "a bill to judge by": "no (count from your journal)",
             "X-Bughunt-Fault header": "ignored"} for name, (url, model) in REAL_SERVERS.items()]
    rows.insert(0, {"server": "this lab's model server", "base_url": "its ready line",
                    "model": DEFAULT_MODEL, "deterministic answers": "yes",
                    "a bill to judge by": "yes (billed at arrival)",
                    "X-Bughunt-Fault header": "obeyed"})
    return pd.DataFrame(rows).set_index("server")


# --- the panel ------------------------------------------------------------------------------------

#: The panel's faults: label -> (fault spec, the SDK's timeout in seconds).
FAULTS = {
    "none": ("", 10.0),
    "slow first byte (0.6 s, timeout 0.2 s)": ("ttfb=0.6", 0.2),
    "429 twice (Retry-After 0.05 s)": ("rate_limit=2,retry_after=0.05", 10.0),
    "connection cut after 3 chunks": ("cut=3", 10.0),
    "malformed chunk 3": ("malformed=3", 10.0),
    "slow stream (0.1 s per chunk, timeout 0.4 s)": ("delay=0.1", 0.4),
    "stalled stream (0.6 s per chunk, timeout 0.2 s)": ("delay=0.6", 0.2),
}


@results.memoized
def cached_kill(crash_point: str, pending: str, stream: bool) -> CallKilled:
    return kill_page_call(crash_point, pending, stream=stream)


@results.memoized
def cached_sdk(fault: str, stream: bool, max_retries: int) -> SdkBehaviour:
    spec, timeout = FAULTS[fault]
    lab_ = shared_lab()
    return inflight.sdk_call("panel", base_url=lab_.base_url, bill=lab_.bill, fault=spec,
                             stream=stream, timeout=timeout, max_retries=max_retries)


def kill_html(r: CallKilled) -> str:
    rows = [("crash point", f"{r.crash_point} ({'streamed' if r.stream else 'not streamed'})"),
            ("killed by SIGKILL", "yes" if r.died_by_sigkill else "NO"),
            ("the killed process held", f"{r.chunks_held} chunks: “{r.prefix_held}”"),
            ("the server billed the killed call", "yes" if r.killed_call_billed else "no"),
            ("calls billed for this page", f"{r.billed_calls} ({r.redone_model_calls} redone)"),
            ("the resume", f"{r.pending}: {r.outcome}"
                           + (f", “{r.reply}”" if r.reply else ", no answer")),
            ]
    return html_table(rows)


def sdk_html(r: SdkBehaviour) -> str:
    rows = [("fault", r.fault or "none"),
            ("attempts sent / billed", f"{r.requests_sent} / {r.billed}"),
            ("statuses", " ".join(map(str, r.statuses)) or "(none: no response)"),
            ("the caller got", f"{r.chunks} chunks, {_words(r.prefix)} words; {_sdk_outcome(r)}"),
            ("took", f"{r.elapsed_s:.2f} s (timeout {r.timeout_s:g} s per read)")]
    return html_table(rows)


def plot_panel(kill: CallKilled | None, sdk: SdkBehaviour | None):
    """The panel's picture: the kill's bill and prefix (left), the SDK's attempts (right)."""
    from ..style import COLORS, new_figure

    fig, (left, right) = new_figure(10, 3.4, ncols=2)
    if kill is not None:
        whole = len(answer_of(PAGE))
        left.barh([1], [kill.billed_calls * whole], color=COLORS["orange"], hatch="//",
                  edgecolor="white", label="answer words billed (all calls)")
        left.barh([0], [_words(kill.prefix_held)], color=COLORS["green"],
                  label="answer words the killed process held")
        left.text(kill.billed_calls * whole + 0.3, 1, f"{kill.billed_calls} call(s)",
                  va="center", fontsize=8)
        left.text(_words(kill.prefix_held) + 0.3, 0,
                  f"{_plural(_words(kill.prefix_held), 'word')} in "
                  f"{_plural(kill.chunks_held, 'chunk')}", va="center", fontsize=8)
        left.set_yticks([0, 1], ["held", "billed"])
        left.set_xlim(0, 2 * whole * 1.35 + 1)
        left.set_title(f"killed at {kill.crash_point}, resume: {kill.pending}", fontsize=9)
        left.legend(fontsize=7, loc="lower right")
    left.set_xlabel("answer words (1 word = 1 token)")
    if sdk is not None:
        right.bar([0, 1], [sdk.requests_sent, sdk.billed],
                  color=[COLORS["blue"], COLORS["orange"]], hatch="//", edgecolor="white")
        right.set_xticks([0, 1], ["sent by the SDK", "billed by the server"])
        top = max(sdk.requests_sent, sdk.billed, 1)
        right.set_ylim(0, top + 1.5)
        right.set_yticks(range(0, top + 2))
        right.text(0.5, max(sdk.requests_sent, sdk.billed, 1) + 0.6, _sdk_outcome(sdk),
                   ha="center", fontsize=7, wrap=True)
        right.set_title(f"SDK alone: {sdk.fault or 'no fault'}, max_retries={sdk.max_retries}",
                        fontsize=9)
    right.set_ylabel("HTTP requests (attempts)")
    fig.suptitle("The call in flight: what a kill and a fault cost on the server's bill",
                 fontsize=10)
    return fig


class CallPanel(Panel):
    """Crash point inside the call, what the resume does, fault, retries, stream on/off.

    Moving a control re-runs the experiment it belongs to (a kill and its resume: two real
    processes; or one SDK call against the fault; stream on/off: both); Run re-runs both; Reset
    goes back to the lesson's settings and forgets every cached result. A part that fails is said
    in the status line, the other part still shown.
    """

    run_tooltip = ("kill the call at the crash point and resume it; make one SDK call against the "
                   "fault")
    running = "Running: a call process killed inside the call, resumed; one SDK call..."
    KILL, SDK = ("crash_point", "pending"), ("fault", "max_retries")

    def __init__(self):
        self.kill_info, self.sdk_info = W.HTML(), W.HTML()
        self.kill: CallKilled | None = None
        self.sdk: SdkBehaviour | None = None
        self._parts, self._note = ("kill", "sdk"), ""
        super().__init__()
        for name, widget in self.controls.items():
            setattr(self, name, widget)

    def make_controls(self) -> dict:
        return {
            "stream": W.ToggleButtons(options=[("stream on", True), ("stream off", False)],
                                      value=True, description="stream"),
            "crash_point": W.SelectionSlider(options=points_of(PAGE, True), value="chunk#5",
                                             description="crash point", continuous_update=False,
                                             layout=W.Layout(width="520px")),
            "pending": W.ToggleButtons(options=["redo", "abort"], value="redo",
                                       description="resume"),
            "fault": W.Dropdown(options=list(FAULTS), value="connection cut after 3 chunks",
                                description="fault", layout=W.Layout(width="440px")),
            "max_retries": W.IntSlider(value=2, min=0, max=4, description="max_retries",
                                       continuous_update=False),
        }

    def rows(self) -> list:
        c = self.controls
        kill_box = W.VBox([W.HTML("<b>Kill inside the call</b> (a real SIGKILL, then a resume)"),
                           c["crash_point"], c["pending"], self.kill_info])
        sdk_box = W.VBox([W.HTML("<b>The SDK alone</b> (its own retries and timeout)"),
                          c["fault"], c["max_retries"], self.sdk_info])
        return [c["stream"], W.HBox([kill_box, sdk_box])]

    # --- controls ---

    def changed(self, name: str) -> None:
        if name in self.KILL:
            self.run(sdk=False)
        elif name in self.SDK:
            self.run(kill=False)
        else:
            self.run(note=self._sync_points())

    def _sync_points(self) -> str:
        """The points of a streamed call are not those of a whole one: keep the slider's point
        when it exists, else move to last_chunk (the one point both have) and say so."""
        slider = self.controls["crash_point"]
        names = points_of(PAGE, self.controls["stream"].value)
        old = slider.value
        if list(slider.options) == names:
            return ""
        new = old if old in names else "last_chunk"
        with self.quiet():
            slider.options, slider.value = names, new
        return ("" if new == old else f"{old} does not exist when the answer arrives whole; the "
                f"crash point moved to {new}.")

    def restore(self, name: str, value) -> None:
        if name == "crash_point":           # the stream is back: its points first
            self.controls[name].options = points_of(PAGE, self.controls["stream"].value)
        super().restore(name, value)

    # --- actions ---

    def run(self, *, kill: bool = True, sdk: bool = True, note: str = "") -> dict:
        """Run the chosen experiments with the controls' settings; show them; return them."""
        self._parts = tuple(part for part, on in (("kill", kill), ("sdk", sdk)) if on)
        self._note = note
        super().run()
        return {"kill": self.kill, "sdk": self.sdk}

    def execute(self, settings: dict) -> Result:
        said = [self._note] if self._note else []
        if "kill" in self._parts:
            try:
                self.kill = cached_kill(settings["crash_point"], settings["pending"],
                                        settings["stream"])
                self.kill_info.value = kill_html(self.kill)
            except Exception as e:
                self.kill, self.kill_info.value = None, ""
                said.append(self.note_failure(e, f"the kill at {settings['crash_point']}"))
        if "sdk" in self._parts:
            try:
                self.sdk = cached_sdk(settings["fault"], settings["stream"],
                                      settings["max_retries"])
                self.sdk_info.value = sdk_html(self.sdk)
            except Exception as e:
                self.sdk, self.sdk_info.value = None, ""
                said.append(self.note_failure(e, "the SDK call"))
        shown = [plot_panel(self.kill, self.sdk)] if self.kill or self.sdk else []
        return Result(" ".join(said or [self._summary()]), figures=shown,
                      data={"kill": self.kill, "sdk": self.sdk})

    def _summary(self) -> str:
        bits = []
        if self.kill is not None:
            k = self.kill
            bits.append(f"Killed at {k.crash_point} holding {k.chunks_held} chunks; with "
                        f"{k.pending}, {k.billed_calls} call(s) billed.")
        if self.sdk is not None:
            s = self.sdk
            bits.append(f"SDK against '{self.controls['fault'].value}': {s.requests_sent} sent, "
                        f"{s.billed} billed, {_sdk_outcome(s)}.")
        return " ".join(bits)

    def reset(self) -> None:
        super().reset()
        self.kill = self.sdk = None
        self.kill_info.value = self.sdk_info.value = ""


def panel() -> CallPanel:
    return CallPanel()


# --- exercises ------------------------------------------------------------------------------------

@exercise("11.1", "Page 3's streamed call is killed at chunk#5, and the resume redoes it "
          "(--pending redo). How many calls does the server bill for page 3, both processes "
          "together? Predict a number.",
          "2. The server billed the killed call when it arrived, before the first chunk left: "
          "the answer was decided and paid for, and only a prefix of it reached the client. The "
          "resume cannot get the rest (the other half is on the server, and the connection is "
          "gone), so it sends the call again and pays again.")
def _ex_11_1(answer):
    r = kill_page_call("chunk#5", "redo")
    said = f" The killed process held {r.chunks_held} chunks (“{r.prefix_held}”)."
    return assess(answer, r.billed_calls, what="calls billed for page 3").reply(
        said, hint=" When does this server bill: at arrival, or at the last chunk?")


@exercise("11.2", "The server takes 0.6 s to its first byte; the SDK's timeout is 0.2 s and "
          "max_retries is 2 (its default). How many attempts does the server bill for this one "
          "call? Predict a number.",
          "3. The SDK's retry loop covers sending the request and waiting for the response's "
          "headers, so a timeout there is retried: 1 try + 2 retries. The server billed each "
          "attempt when it arrived, and no idempotency key tells it that the three are one call.")
def _ex_11_2(answer):
    lab_ = shared_lab()
    r = inflight.sdk_on_timeout(base_url=lab_.base_url, bill=lab_.bill)
    said = f" {r.requests_sent} attempts were sent, and the call ended {r.raised}."
    return assess(answer, r.billed, what="attempts billed").reply(
        said, hint=" A timeout is one of the errors the SDK retries by itself.")


@exercise("11.3", "A streamed call's connection is cut after 4 chunks; max_retries is 2. How "
          "many requests does the SDK send for this call? Predict a number.",
          "1. The retry loop ends when the response's headers arrive; the stream's body is read "
          "after it, in your loop over the chunks. A connection lost there is raised to you "
          "(openai.APIConnectionError) and never retried: the partial answer exists only in "
          "what your code collected.")
def _ex_11_3(answer):
    lab_ = shared_lab()
    r = inflight.sdk_on_cut_stream(base_url=lab_.base_url, bill=lab_.bill, cut=4)
    said = f" {r.billed} billed, {r.chunks} chunks received, then {r.raised}."
    return assess(answer, r.requests_sent, what="requests sent").reply(
        said, hint=" Where does the SDK's retry loop end for a streamed call?")


@exercise("11.4", "The third chunk of a streamed answer is not valid JSON. Does `except "
          "openai.APIError:` catch what the SDK raises? Predict True or False.",
          "False. The SDK parses each event with json.loads and does not wrap the error: a "
          "json.JSONDecodeError reaches your code, past `except openai.APIError`. Catch it too "
          "(or catch Exception around the stream) if a broken proxy or server may garble a "
          "chunk.")
def _ex_11_4(answer):
    lab_ = shared_lab()
    r = inflight.sdk_on_malformed_chunk(base_url=lab_.base_url, bill=lab_.bill, at=3)
    return assess(answer, r.caught_by_api_error, what=f"except openai.APIError catches {r.raised}"
                  ).reply(hint=" Which exception does json.loads raise?")



# --- common wrong statements ----------------------------------------------------------------------

@statement("Q11.1", "The SDK's automatic retries make a model call happen exactly once.",
           "False. A retry is a new request, and the server bills every request that arrives: "
           "a call that timed out twice is paid three times. The attempts carry the same body and "
           "no idempotency key (only a retry counter), so the provider cannot tell a retry from a "
           "new call. Retries make a call at least once, never exactly once.")
def _q11_1():
    r = cached_sdk("slow first byte (0.6 s, timeout 0.2 s)", True, 2)
    return Measured(r.billed <= 1, f"Measured just now: the SDK sent {r.requests_sent} attempts "
                                   f"for one call and the server billed {r.billed}.")


@statement("Q11.2", "With a timeout of 0.4 s, no call can take longer than 0.4 s.",
           "False. The SDK's timeout is httpx's: it limits each network read (and connect, "
           "write, pool wait), not the whole call. A stream that sends a chunk every 0.1 s never "
           "waits 0.4 s for one read, so it runs to its end however long that takes. Bound the "
           "whole call yourself if you need a deadline.")
def _q11_2():
    r = cached_sdk("slow stream (0.1 s per chunk, timeout 0.4 s)", True, 2)
    return Measured(not (r.complete and r.elapsed_s > 0.4),
                    f"Measured just now: the call {'completed' if r.complete else 'did not complete'}"
                    f" after {r.elapsed_s:.1f} s with a 0.4 s timeout, {r.chunks} chunks.")


@statement("Q11.3", "If the process dies after the last chunk has arrived, the resume has "
           "nothing to pay for.",
           "False, if the resume redoes the call: the answer was in memory (and in the journal), "
           "but no checkpoint said the call was done, so a redo asks again and the provider "
           "bills it again. Only a record of the answer, written before the kill, would spare the "
           "second call: the danger window of lesson 4, with a model call as the side effect.")
def _q11_3():
    r = cached_kill("last_chunk", "redo", True)
    return Measured(r.billed_calls <= 1,
                    f"Measured just now: killed at last_chunk holding {r.chunks_held} chunks, the "
                    f"resume redid the call; the server billed {r.billed_calls} calls.")


LESSON = Lesson(
    number=11,
    notebook="11_call_in_flight",
    title="The call in flight: what a kill, a timeout, a cut stream or a 429 costs",
    short_title="the call in flight",
    question="What do a kill, a timeout, a cut stream or a 429 cost on a real server's bill?",
    teaches="a local OpenAI-compatible model server and the real `openai` SDK: a kill "
            "mid-stream, timeouts, cut streams, 429s, against the server's bill",
    objectives=(
        "say where a call's answer is at each moment of a stream (the server, the client's "
        "prefix) and what a `kill -9` there costs on the provider's bill;",
        "choose between redoing a killed call, recording it as aborted, and resuming from its "
        "prefix, and name each choice's guarantee (lesson 4) and cost;",
        "predict what the `openai` SDK retries by itself (a timeout, a 429, a cut body) and "
        "what it does not (a cut stream), which exception escapes `except openai.APIError`, "
        "and what its timeout limits;",
        "point the same code at a real local model (Ollama, vLLM, llama.cpp) and say what the "
        "lesson then loses.",
    ),
    minutes=35,
    prerequisites="Lessons 2, 4 and 7 (granularity, the danger window, the durable runtime's "
                  "model request); Python exceptions; what an HTTP request and a streamed "
                  "response are.",
    panel=panel,
    exercises=defined_in(__name__),
)

