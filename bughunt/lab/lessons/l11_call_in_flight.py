"""Lesson 11, the call in flight: its tables, figures, exercises and panel, over the engine; the
sentences in which the notebook states what its run found (`CLAIMS`, each checked on that run);
and its practice problems (`practice_problem(seed)`: a page, a crash point or a fault the lesson
did not run).

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
from ...modelserver import answer_words, prompt_hash, prompt_tokens, read_server_bill
from ...world import Site
from .. import results
from ..claims import Claims, Invariants
from ..panel import Panel, Result
from ..judges import Measured, assess, defined_in, exercise, statement
from ..practice import NUMBER, Answer, Problem, as_exercise, drawn
from ..registry import Lesson
from ..views import Table, html_table, summary_table

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


@results.memoized
def call_sweep(page: int = PAGE) -> list[CallKilled]:
    """Every crash point inside page `page`'s call, killed and resumed with each rule: the
    lesson's sweep (run once per kernel; its claims are checked on this run)."""
    return kill_sweep(page)


@results.memoized
def timed_out_attempts() -> list[Attempt]:
    """The attempts of one timed-out call (run once per kernel)."""
    return attempts_of_a_timed_out_call()


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


#: The kill table's columns, in words (request ids are left out: they differ on every run).
KILL_COLUMNS = {"crash_point": "crash point", "pending": "resume", "died_by_sigkill":
                "killed by SIGKILL", "chunks_held": "chunks held", "prefix_held": "prefix held",
                "killed_call_billed": "killed call billed", "billed_calls": "calls billed",
                "redone_model_calls": "redone calls", "billed_tokens": "tokens billed",
                "outcome": "the resume ends", "reply_matches_clean": "reply = a clean call's"}


def _redone_is_billed_less_one(df) -> list[str]:
    """A kill's redone calls are its billed calls less the one a clean call pays."""
    return [f"row {i!r}: redone calls {int(r['redone calls'])} but calls billed "
            f"{int(r['calls billed'])} (a clean call is billed once)"
            for i, r in df.iterrows() if r["redone calls"] != r["calls billed"] - 1]


KILL_INVARIANTS = Invariants(counts=("chunks held", "calls billed", "redone calls",
                                     "tokens billed"), extra=(_redone_is_billed_less_one,))


def kill_table(records: list[CallKilled]) -> Table:
    """The kills as a table: what the killed process held, what the server billed, what the resume
    ended with. (Request ids are left out: they differ on every run.)"""
    df = frame(records)[list(KILL_COLUMNS)].rename(columns=KILL_COLUMNS)
    return Table(df.set_index(["crash point", "resume"]), "kills inside the call",
                 KILL_INVARIANTS)


def kill_sweep_summary(records: list[CallKilled], page: int = PAGE) -> Table:
    """Per resume rule, over every crash point inside the call: at how many the server billed the
    page once, twice, or more (these partition the points), at how many the killed process held
    the whole answer, and the tokens billed."""
    df = frame(records)
    whole = " ".join(answer_of(page))
    rows = []
    for pending, d in df.groupby("pending", sort=False):
        rows.append({"resume": pending, "crash points": len(d),
                     "billed once": int((d["billed_calls"] == 1).sum()),
                     "billed twice": int((d["billed_calls"] == 2).sum()),
                     "billed 3 times or more": int((d["billed_calls"] >= 3).sum()),
                     "held the whole answer": int((d["prefix_held"] == whole).sum()),
                     "avg tokens billed": round(float(d["billed_tokens"].mean()), 2)})
    return summary_table(rows, "the kill sweep, by resume rule", SWEEP_INVARIANTS, index="resume")


#: The sweep summary's promise: the three billing columns partition its crash points.
SWEEP_INVARIANTS = Invariants(total="crash points", parts=("billed once", "billed twice",
                                                           "billed 3 times or more"),
                              within=("held the whole answer",))


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
    top.set_title(f"A call killed in flight (page {page}): this server billed it whole at arrival, "
                  "the client held only a prefix", fontsize=10)
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

@results.memoized
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


def sdk_table(records: list[SdkBehaviour]) -> Table:
    """One row per case: the attempts the SDK sent, the statuses they got, the attempts the server
    billed (never more than were sent), and what reached the caller. (Times are in `sdk_timing`:
    they vary between runs.)"""
    rows = []
    for r in records:
        rows.append({"case": r.case, "fault": r.fault, "stream": r.stream,
                     "timeout (s)": r.timeout_s, "max_retries": r.max_retries,
                     "requests sent": r.requests_sent,
                     "statuses": " ".join(map(str, r.statuses)) or "(none)",
                     "billed": r.billed, "the caller holds": _holds(r),
                     "what reached the caller": _sdk_outcome(r)})
    return summary_table(rows, "what the SDK does by itself",
                         Invariants(total="requests sent", within=("billed",),
                                    counts=("max_retries",)), index="case")


def sdk_timing(records: list[SdkBehaviour]) -> Table:
    """How long each case took against its timeout (varies between runs and machines). The
    figure of the slow and the stalled stream (`plot_timelines(sdk_timelines(records))`) is drawn
    from these same calls."""
    rows = [{"case": r.case, "timeout (s)": r.timeout_s, "elapsed (s)": r.elapsed_s,
             "elapsed / timeout": round(r.elapsed_s / r.timeout_s, 2)} for r in records]
    return summary_table(rows, "how long each SDK call took", index="case")


def sdk_timelines(records: list[SdkBehaviour],
                  cases: tuple[str, ...] = ("slow_stream", "stalled_stream")) -> list[Timeline]:
    """The chunk arrivals of the slow and the stalled stream, from the very calls `sdk_table` and
    `sdk_timing` show (one measurement, so the table's times are the figure's)."""
    from ...modelserver import Fault

    by = {r.case: r for r in records}
    return [Timeline(case.replace("_", " "), Fault.parse(by[case].fault).delay or 0.0,
                     by[case].timeout_s, by[case].arrivals,
                     by[case].raised, by[case].elapsed_s) for case in cases]


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


def attempts_table(attempts: list[Attempt]) -> Table:
    """Each attempt of one SDK call, as it left the client and as the server billed it."""
    df = frame(attempts).rename(columns={"retry_count_header": "x-stainless-retry-count sent",
                                         "idempotency_header": "idempotency header",
                                         "same_body_as_first": "same body as the first"})
    df["idempotency header"] = df["idempotency header"].replace("", "(none sent)")
    df["status"] = df["status"].replace("", "(timed out)")
    return Table(df.set_index("attempt"), "the attempts of a timed-out call")


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
    rows = [
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
    ]
    return summary_table(rows, "the choices for the call in flight",
                         Invariants(counts=("calls billed", "tokens billed")), index="choice")


@results.memoized
def lesson2_runs() -> dict[str, int]:
    """Lesson 2's finest store beside this lesson's points: a worker with a snapshot after every
    operation, killed right after its model call returned (the in-process model), and the points
    inside the call (measured here): the calls each resume redid."""
    from ...config import RunConfig
    from ...experiment import crash_and_resume, crash_point

    config = RunConfig(store="snapshot", granularity="op", intent=False)
    redone = {}
    with tempfile.TemporaryDirectory(prefix="bughunt-call-l2-") as tmp:
        for name in (f"p{PAGE}.after_model_call", f"p{PAGE}.after_visit"):
            r = crash_and_resume(config, crash_point(config, name), Path(tmp) / name)
            redone[name] = r.redone_model_calls
    for point in ("sent", "chunk#5", "last_chunk"):
        redone[point] = cached_kill(point, "redo", True).redone_model_calls
    return redone


def lesson2_contrast() -> Table:
    """`lesson2_runs` as a table: where each point is, and the calls its resume redid."""
    rows = [{"crash point": name,
             "where": ("lesson 2 worker, per-operation snapshots" if name.startswith("p")
                       else "inside the call (this lesson), resume redoes it"),
             "redone model calls": n} for name, n in lesson2_runs().items()]
    return summary_table(rows, "lesson 2's finest store beside the call in flight",
                         Invariants(counts=("redone model calls",)), index="crash point")


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


@results.memoized
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


def worker_table(sweep: WorkerSweep) -> Table:
    """Per crash point of the page, in the order the worker reaches them: the calls redone on each
    model's bill, what the killed worker held of the call (over HTTP), and the witnesses' verdict."""
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
    return summary_table(rows, "the real worker killed inside its call",
                         Invariants(counts=("over HTTP: redone calls (server's bill)",)),
                         index="crash point")


def worker_timing(sweep: WorkerSweep) -> Table:
    """Wall time per crash+resume pair of each sweep (varies between runs and machines)."""
    rows = [("over HTTP (openai SDK, local server)", len(sweep.over_http), sweep.over_http_s),
            ("in-process model", len(sweep.in_process), sweep.in_process_s)]
    return summary_table([{"model": m, "pairs": n, "seconds": round(t, 2),
                           "ms per pair": round(1000 * t / n)} for m, n, t in rows],
                         "time per crash+resume pair", Invariants(counts=("pairs",)),
                         index="model")


# --- a real local model ---------------------------------------------------------------------------

#: Local servers that speak the same API (their documentation's default address).
REAL_SERVERS = {
    "Ollama": ("http://localhost:11434/v1", "llama3.2"),
    "vLLM (vllm serve)": ("http://localhost:8000/v1", "the model you serve"),
    "llama.cpp (llama-server)": ("http://localhost:8080/v1", "any name (one model is loaded)"),
}


def real_servers_table() -> Table:
    """What changes and what the lesson loses when the same code talks to a real local model."""
    rows = [{"server": name, "base_url": url, "model": model,
             "deterministic answers": "no", "a bill to judge by": "no (count from your journal)",
             "X-Bughunt-Fault header": "ignored"} for name, (url, model) in REAL_SERVERS.items()]
    rows.insert(0, {"server": "this lab's model server", "base_url": "its ready line",
                    "model": DEFAULT_MODEL, "deterministic answers": "yes",
                    "a bill to judge by": "yes (billed at arrival)",
                    "X-Bughunt-Fault header": "obeyed"})
    return summary_table(rows, "real local servers", index="server")


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

@results.memoized
def kill_twice(first: str, second: str, last: str = "redo", page: int = PAGE) -> dict:
    """Page `page`'s call killed at `first`; the resume (a redo) killed in its own call at
    `second`; a third process resumes with `last`. What the server billed for the page, and what
    the last process ended with."""
    lab_ = shared_lab()
    journal = lab_.run_dir() / "call-journal.jsonl"
    start = len(read_server_bill(lab_.bill))
    for crash_at in (first, second):
        died = lab_.forks.run(inflight.call_args(lab_.base_url, journal, page=page,
                                                 crash_at=crash_at, pending="redo"))
        if died.returncode != -9:
            raise RuntimeError(f"the call process killed at {crash_at} ended with "
                               f"{died.returncode}: {died.stderr.strip()}")
    done = lab_.forks.run(inflight.call_args(lab_.base_url, journal, page=page, pending=last))
    if done.returncode != 0:
        raise RuntimeError(f"the last resume failed ({done.returncode}): {done.stderr.strip()}")
    key = prompt_hash(DEFAULT_MODEL, page_messages(Site.load(), page))
    billed = [b for b in read_server_bill(lab_.bill)[start:] if b["prompt_hash"] == key]
    return {"billed_calls": len(billed), "outcome": json.loads(done.stdout)["outcome"]}


@results.memoized
def sdk_case(case: str, fault: str, stream: bool, timeout: float, max_retries: int
             ) -> SdkBehaviour:
    """One SDK call against `fault` with these settings (run once per kernel)."""
    lab_ = shared_lab()
    return inflight.sdk_call(case, base_url=lab_.base_url, bill=lab_.bill, fault=fault,
                             stream=stream, timeout=timeout, max_retries=max_retries)


#: The exercises' configurations, none of which the lesson runs above them.
EX_TWICE = ("chunk#5", "chunk#3", "redo")
EX_RATE = ("exercise 11.2", "rate_limit=3,retry_after=0.05", True, 10.0, 2)
EX_CUT_BODY = ("exercise 11.3", "cut=3", False, 10.0, 1)
EX_MALFORMED_BODY = ("exercise 11.4", "malformed=1", False, 10.0, 2)


@exercise("11.1", "Page 3's streamed call is killed at chunk#5; the resume redoes the call and is "
          "itself killed at chunk#3 of its own call; a third process resumes with --pending "
          "redo. How many calls does the server bill for page 3, the three processes together? "
          "Predict a number.",
          "3. The server bills each request when it arrives. The first process's call is billed "
          "and killed; the resume finds a call in flight and sends it again (billed), and dies; "
          "the third finds a call in flight again (the second one) and sends it a third time "
          "(billed). Each kill inside the call costs one whole call, however little of it the "
          "client held.")
def _ex_11_1(answer):
    r = kill_twice(*EX_TWICE)
    return assess(answer, r["billed_calls"], what="calls billed for page 3").reply(
        f" The last process ended {r['outcome']}.",
        hint=" Count the requests that reached the server: one per process that called.")


@exercise("11.2", "The server answers the first three tries of a call with 429 (Retry-After 0.05 "
          "s); max_retries is 2 (the default). How many attempts does the server bill for this "
          "call? Predict a number.",
          "0. The SDK tries 1 + 2 times, and all three are refused: a 429 is not billed, and "
          "the SDK gives up before the fourth try that would have been answered. The caller gets "
          "openai.RateLimitError and no answer; the money is safe, the work is not done.")
def _ex_11_2(answer):
    r = sdk_case(*EX_RATE)
    said = f" {r.requests_sent} attempts were sent ({' '.join(map(str, r.statuses))}), and " \
           f"the call ended {r.raised or 'with an answer'}."
    return assess(answer, r.billed, what="attempts billed").reply(
        said, hint=" How many tries does max_retries=2 allow, and is a refused try billed?")


@exercise("11.3", "A call that is not streamed has its connection cut halfway through the "
          "response's body; max_retries is 1. How many attempts does the server bill? Predict a "
          "number.",
          "2. Not streamed, the SDK reads the body inside its retry loop, so a connection lost "
          "there is retried like one lost before the headers: 1 try + 1 retry, each billed when "
          "it arrived, and both cut. The caller gets openai.APIConnectionError.")
def _ex_11_3(answer):
    r = sdk_case(*EX_CUT_BODY)
    said = f" {r.requests_sent} sent, then {r.raised or 'an answer'}."
    return assess(answer, r.billed, what="attempts billed").reply(
        said, hint=" Where is a body that is not streamed read: inside the retry loop or after it?")


@exercise("11.4", "A call that is not streamed gets a response whose body is not valid JSON. "
          "Does `except openai.APIError:` catch what the SDK raises? Predict True or False.",
          "False. Not streamed, the SDK reads the whole body (a 200) and parses it as JSON; the "
          "json.JSONDecodeError reaches your code unwrapped, is not an openai.APIError, and is "
          "not retried (one attempt, billed). The "
          "stream's malformed chunk above escaped the same way: catch it too, or catch Exception "
          "around the call, if a broken proxy or server may garble a response.")
def _ex_11_4(answer):
    r = sdk_case(*EX_MALFORMED_BODY)
    return assess(answer, r.caught_by_api_error, what=f"except openai.APIError catches "
                  f"{r.raised}").reply(hint=" Which exception does the SDK raise when it cannot "
                                            "parse a body it read inside its retry loop?")


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


# --- what the lesson says its run found (each sentence checked against that run) -------------

CLAIMS = Claims(11)


def _whole_answer(page: int = PAGE) -> str:
    return " ".join(answer_of(page))


@CLAIMS.claim("The killed process held {chunks} chunks: the role, then {words} words "
              "(“{prefix}”). The server had billed its call already (the killed call is on the "
              "bill: {billed}): it decided the whole answer at arrival and charged it. Those "
              "words are all the client will ever have of it: the rest was on the server, and the "
              "connection is gone. The resume paid for the same answer again: **{calls} calls "
              "billed** for one page, and its answer is word for word a clean call's ({same}), "
              "because this server is deterministic.")
def redo_pays_twice():
    r = cached_kill("chunk#5", "redo", True)
    words = _words(r.prefix_held)
    return (r.killed_call_billed and r.billed_calls == 2 and r.reply_matches_clean
            and words == r.chunks_held - 1,
            {"chunks": r.chunks_held, "words": words, "prefix": r.prefix_held,
             "billed": r.killed_call_billed, "calls": r.billed_calls,
             "same": r.reply_matches_clean})


@CLAIMS.claim("With `abort`, {calls} call billed and no answer: the agent keeps {words} words and "
              "a record that says {outcome}.")
def abort_pays_once():
    r = cached_kill("chunk#5", "abort", True)
    return (r.billed_calls == 1 and r.outcome == "aborted" and r.reply is None,
            {"calls": r.billed_calls, "words": _words(r.prefix_held), "outcome": r.outcome})


def _billed_by_rule() -> dict[str, set[int]]:
    by: dict[str, set[int]] = {}
    for r in call_sweep():
        by.setdefault(r.pending, set()).add(r.billed_calls)
    return by


@CLAIMS.claim("Every one of the {points} crash points costs the same: redo is billed {redo} calls "
              "for the page, abort {abort}. Where the kill falls only changes how much of the "
              "answer the client held (the green bars); the server charged the whole answer "
              "either way.")
def every_point_costs_the_same():
    by = _billed_by_rule()
    return (by.get("redo") == {2} and by.get("abort") == {1},
            {"points": len({r.crash_point for r in call_sweep()}),
             "redo": sorted(by.get("redo", ())), "abort": sorted(by.get("abort", ()))})


@CLAIMS.claim("At {points} the journal already held the **whole** answer, yet the redo paid "
              "again ({calls} calls billed at each), because the resume treats only a recorded "
              "`answer` as done. That is lesson 4's danger window in small: the effect (the "
              "answer) happened, its record did not.")
def whole_answer_held_still_paid():
    held = [r for r in call_sweep() if r.pending == "redo" and r.prefix_held == _whole_answer()]
    return (bool(held) and all(r.billed_calls == 2 for r in held),
            {"points": [f"`{r.crash_point}`" for r in held],
             "calls": sorted({r.billed_calls for r in held})})


def _sdk(case: str) -> SdkBehaviour:
    return next(r for r in sdk_measurements() if r.case == case)


@CLAIMS.claim("**timeout** (the server is slower to its first byte than the timeout): {sent} "
              "attempts, **all {billed} billed**. Each retry is a new request to the server, and "
              "it pays for each.")
def sdk_timeout_retries_are_billed():
    r = _sdk("timeout")
    return (r.requests_sent == r.billed == r.max_retries + 1,
            {"sent": r.requests_sent, "billed": r.billed})


@CLAIMS.claim("**rate_limit** (429 twice, with `Retry-After`): {sent} sent, {billed} billed. A "
              "refusal costs nothing; the SDK waited as the server asked (`retry-after-ms`, else "
              "`Retry-After`, when 0 to 120 s).")
def sdk_refusals_are_not_billed():
    r = _sdk("rate_limit")
    return (r.billed == 1 and r.requests_sent == 3 and r.complete,
            {"sent": r.requests_sent, "billed": r.billed})


@CLAIMS.claim("**cut_stream**: {sent} sent, no retry. The SDK's retry loop ends when the "
              "response's headers arrive; the stream's body is read later, in your `for chunk in "
              "stream`, so a connection lost there reaches you as `{raised}`. The partial answer "
              "({words} words) exists only in what your loop collected.")
def sdk_cut_stream_is_not_retried():
    r = _sdk("cut_stream")
    return (r.requests_sent == 1 and r.raised == "openai.APIConnectionError",
            {"sent": r.requests_sent, "raised": r.raised, "words": _words(r.prefix)})


@CLAIMS.claim("**cut_body** (the same cut, not streamed): the body is read *inside* the retry "
              "loop, so it is retried, and billed, {billed} times.")
def sdk_cut_body_is_retried():
    r = _sdk("cut_body")
    return r.billed == r.requests_sent == r.max_retries + 1, {"billed": r.billed}


@CLAIMS.claim("**malformed_chunk**: `{raised}`, which is **not** an `openai.APIError`: an `except "
              "openai.APIError:` around the stream lets it through.")
def sdk_malformed_chunk_escapes():
    r = _sdk("malformed_chunk")
    return r.caught_by_api_error is False, {"raised": r.raised}


@CLAIMS.claim("The same body {n} times, each billed ({billed} of {n}), and **no idempotency "
              "key** ({headers}).")
def retries_carry_no_key():
    attempts = timed_out_attempts()
    headers = sorted({a.idempotency_header or "no such header" for a in attempts})
    return (all(a.same_body_as_first and a.billed and not a.idempotency_header
                for a in attempts) and len(attempts) > 1,
            {"n": len(attempts), "billed": sum(a.billed for a in attempts), "headers": headers})


@CLAIMS.claim("Resuming from the prefix bills {resume} tokens against redo's {redo}: it re-sends "
              "the prompt plus the prefix as input, so on this bill (every token costs the same) "
              "it is dearer than a redo.")
def resume_from_prefix_is_dearer():
    df = call_choices_table(call_sweep()).df
    redo, resume = (int(df.iloc[i]["tokens billed"]) for i in (0, 2))
    return resume > redo, {"resume": resume, "redo": redo}


@CLAIMS.claim("Lesson 2's finest store redoes {after} call when killed at `p3.after_model_call` "
              "(the answer returned, not yet saved) and {visit} at `p3.after_visit`; inside the "
              "call, every point redoes {inside}: no store can help there at all.")
def finest_store_cannot_cover_the_call():
    r = lesson2_runs()
    inside = sorted({r[p] for p in ("sent", "chunk#5", "last_chunk")})
    return (r[f"p{PAGE}.after_model_call"] == 1 and r[f"p{PAGE}.after_visit"] == 0
            and inside == [1],
            {"after": r[f"p{PAGE}.after_model_call"], "visit": r[f"p{PAGE}.after_visit"],
             "inside": inside})


def _inside_call(sweep: WorkerSweep) -> list[CallCrashRun]:
    return [r for r in sweep.over_http if ".call_" in r.crash_point]


@CLAIMS.claim("Over HTTP, the {n} points inside the call cost what `after_model_call` costs: "
              "**{redone} call redone**, on the server's bill, whatever the worker held. At "
              "`call_last_chunk` it held {held} of {whole} words, and still paid again: the "
              "answer was in memory, not in a checkpoint.")
def worker_pays_the_call_in_flight_once():
    sweep = worker_sweep()
    inside = _inside_call(sweep)
    after = next(r for r in sweep.over_http if r.crash_point.endswith(".after_model_call"))
    last = next(r for r in inside if r.crash_point.endswith("call_last_chunk"))
    redone = sorted({r.redone_model_calls for r in inside})
    return (redone == [after.redone_model_calls] and last.redone_model_calls >= 1,
            {"n": len(inside), "redone": redone, "held": _words(last.prefix_held),
             "whole": len(answer_of(sweep.page))})


@CLAIMS.claim("The store does not see inside the call, so it treats the whole call as one step: "
              "at the {n} points both models share, the in-process model's redone calls are the "
              "HTTP ones ({differ} differ).")
def in_process_figures_are_the_same():
    sweep = worker_sweep()
    mock = {r.crash_point: r.redone_model_calls for r in sweep.in_process}
    shared = [r for r in sweep.over_http if r.crash_point in mock]
    differ = [r.crash_point for r in shared if r.redone_model_calls != mock[r.crash_point]]
    return not differ and bool(shared), {"n": len(shared), "differ": len(differ)}


@CLAIMS.claim("The witnesses agree everywhere (the verdict is {verdicts} at all {n} points over "
              "HTTP): a call in flight costs money, not correctness, as long as the report it "
              "leads to carries its key.")
def witnesses_agree_over_http():
    verdicts = sorted({r.verdict for r in worker_sweep().over_http})
    return verdicts == ["correct"], {"verdicts": verdicts, "n": len(worker_sweep().over_http)}


# Timing claims: their values vary from run to run, so the notebook shows them in cells whose
# output is not compared; their predicates hold however loaded the machine is.

@CLAIMS.claim("On this run the slow stream (a chunk every {delay} s) took {elapsed} s, "
              "{ratio} times its {timeout} s timeout, and ended with the whole answer; the "
              "stalled one raised `{raised}` after {stalled} s, with {chunks} chunks.")
def slow_stream_outlives_its_timeout():
    slow, stalled = sdk_timelines(sdk_measurements())
    return (slow.raised is None and slow.ended_s > slow.timeout_s and _sdk("slow_stream").complete
            and stalled.raised == "openai.APITimeoutError",
            {"delay": slow.delay_s, "elapsed": slow.ended_s, "timeout": slow.timeout_s,
             "ratio": f"{slow.ended_s / slow.timeout_s:.1f}", "raised": stalled.raised,
             "stalled": stalled.ended_s, "chunks": len(stalled.arrivals)})


@CLAIMS.claim("On this run a crash+resume pair took {http} ms over HTTP against {mock} ms with "
              "the in-process model ({ratio} times as long).")
def http_costs_time():
    t = worker_timing(worker_sweep()).df
    http, mock = (int(t.iloc[i]["ms per pair"]) for i in (0, 1))
    return http > mock, {"http": http, "mock": mock, "ratio": f"{http / max(mock, 1):.0f}"}


# --- practice: a call, a crash point or a fault the lesson did not run ---------------------------

#: The SDK configurations the lesson runs, (fault, stream, max_retries): its seven cases, the
#: attempts of a timed-out call, the exercises and the statements. Practice draws none of these.
LESSON_SDK_RUNS = frozenset({
    ("ttfb=0.6", False, 2), ("rate_limit=2,retry_after=0.05", True, 2), ("cut=3", True, 2),
    ("cut=3", False, 2), ("malformed=3", True, 2), ("delay=0.1", True, 2), ("delay=0.6", True, 2),
    ("ttfb=0.6", True, 2),
    *((spec, stream, retries) for _, spec, stream, _, retries in (EX_RATE, EX_CUT_BODY,
                                                                  EX_MALFORMED_BODY))})
#: The page whose call the lesson kills (at every point, with both rules): practice kills others.
LESSON_KILL_PAGES = frozenset({PAGE})
PRACTICE_PAGES = tuple(p for p in range(1, 13) if p not in LESSON_KILL_PAGES)


def _kill_problem(seed: int, rng) -> Problem:
    page = rng.choice(PRACTICE_PAGES)
    points = points_of(page)
    words = len(answer_of(page))
    kind = rng.choice(["held", "billed"])
    if kind == "held":
        point, pending = rng.choice(points), rng.choice(PENDING)
        setting = (f"Page {page}'s streamed call (its answer has {words} words, one per chunk after "
                   f"the role chunk) is killed at `{point}`; the resume runs with --pending "
                   f"{pending}.")

        def measure() -> Answer:
            r = kill_page_call(point, pending, page=page)
            return Answer(_words(r.prefix_held), f"killed at {point}, the process held "
                          f"{r.chunks_held} chunks: “{r.prefix_held}” ({_words(r.prefix_held)} "
                          f"words); the server billed {r.billed_calls} call(s) for the page.")
        return Problem(11, seed, setting, "How many words of the answer does the killed process "
                       "hold in its journal?", NUMBER, measure,
                       "The first chunk carries only the role; then one word per chunk; then a "
                       "finish chunk and a usage chunk. `sent` is before any chunk.",
                       unit="words", drawn={"kind": kind, "page": page, "point": point,
                                            "pending": pending})
    first = rng.choice(points)
    second = rng.choice(points)
    last = rng.choice(PENDING)
    setting = (f"Page {page}'s streamed call is killed at `{first}`; the resume redoes it and is "
               f"killed at `{second}` of its own call; a third process resumes with --pending "
               f"{last}.")

    def measure() -> Answer:
        r = kill_twice(first, second, last, page)
        return Answer(r["billed_calls"], f"the server billed {r['billed_calls']} calls for page "
                      f"{page}; the last process ended {r['outcome']}.")
    return Problem(11, seed, setting, f"How many calls does the server bill for page {page}, the "
                   "three processes together?", NUMBER, measure,
                   "The server bills a request when it arrives. Which processes sent one?",
                   unit="calls", drawn={"kind": kind, "page": page, "points": (first, second),
                                        "pending": last})


def _sdk_problem(seed: int, rng) -> Problem:
    fault = rng.choice(["rate_limit", "cut_body", "timeout", "cut_stream"])
    while True:
        retries = rng.randrange(0, 4)
        if fault == "rate_limit":
            refusals = rng.randrange(1, 5)
            spec, stream = f"rate_limit={refusals},retry_after=0.05", True
            said = (f"The server answers the first {refusals} tries of a streamed call with 429 "
                    "(Retry-After 0.05 s)")
        elif fault == "cut_body":
            spec, stream = "cut=3", False
            said = "A call that is not streamed has its connection cut halfway through the body"
        elif fault == "timeout":
            spec, stream = "ttfb=0.6", False
            said = ("The server takes 0.6 s to its first byte; the call is not streamed and its "
                    "timeout is 0.2 s")
        else:
            cut = rng.choice([1, 2, 4, 5])
            spec, stream = f"cut={cut}", True
            said = f"A streamed call's connection is cut after {cut} chunks"
        if (spec, stream, retries) not in LESSON_SDK_RUNS:
            break
    timeout = 0.2 if fault == "timeout" else 10.0
    ask = rng.choice(["billed", "sent"])
    setting = f"{said}; max_retries is {retries}."

    def measure() -> Answer:
        lab_ = shared_lab()
        r = inflight.sdk_call(f"practice {seed}", base_url=lab_.base_url, bill=lab_.bill,
                              fault=spec, stream=stream, timeout=timeout, max_retries=retries)
        value = r.billed if ask == "billed" else r.requests_sent
        return Answer(value, f"the SDK sent {r.requests_sent} attempts (statuses "
                      f"{' '.join(map(str, r.statuses)) or 'none'}), the server billed "
                      f"{r.billed}; the call ended {r.raised or 'with the whole answer'}.")
    question = ("How many attempts does the server bill for this call?" if ask == "billed"
                else "How many requests does the SDK send for this call?")
    return Problem(11, seed, setting, question, NUMBER, measure,
                   "Which errors does the SDK retry by itself, how many tries does max_retries "
                   "allow, and which tries does the server bill?", unit="attempts",
                   drawn={"kind": "sdk", "fault": spec, "stream": stream,
                          "max_retries": retries, "ask": ask})


def practice_problem(seed: int) -> Problem:
    """A call killed on a page the lesson did not kill (words held, or calls billed after two
    kills), or an SDK call against a fault with retries the lesson did not run (attempts billed
    or sent)."""
    rng = drawn(seed, 11)
    return (_kill_problem if rng.random() < 0.5 else _sdk_problem)(seed, rng)


#: The transfer question: a configuration the lesson did not run (`practice_problem`).
TRANSFER_SEED = 9
TRANSFER = as_exercise("11.5", practice_problem(TRANSFER_SEED), __name__)


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
    prerequisites="Lessons 2, 4 and 7 (granularity, the danger window, the durable runtime's "
                  "model request); Python exceptions; what an HTTP request and a streamed "
                  "response are.",
    runs="the notebook runs in one to two minutes",
    panel=panel,
    exercises=defined_in(__name__),
    claims=CLAIMS,
    practice=practice_problem,
)

