"""The agent's state and the one pure function that changes it.

Every change of state is an event, and `apply_event` is the only code that turns an event into a new
state. A live run applies each event as it commits it; a recovery replays the logged events through
the same function. So replaying and running live reach the same state by construction, which is what
lets the three-way check compare a resumed worker with a fresh rebuild from disk.

No I/O, no clock, no globals here: the function is pure, and the tests call it directly.
"""

from __future__ import annotations

from typing import Any

State = dict[str, Any]
Event = dict[str, Any]

#: Event types. `intent`, `page_done` and `aborted` are the lesson's; `answered`, `visited` and
#: `submitted` are the finer, per-operation checkpoints (granularity "op").
EVENT_TYPES = ("intent", "answered", "visited", "submitted", "page_done", "aborted")


def initial_state() -> State:
    """The state of a task that has done nothing yet."""
    return {
        "next_page": 1,       # the first page not yet done
        "tokens": 0,          # model tokens spent on pages that are done
        "findings": [],       # pages whose bug report is part of the result
        "aborted": [],        # pages given up after an interrupted side effect (at most once)
        "pending": None,      # an intent recorded, its report maybe filed: the danger window
        "in_flight": None,    # per-operation progress inside the current page (granularity "op")
        "seq": 0,             # sequence number of the last event applied
    }


def apply_event(state: State, event: Event) -> State:
    """Return the state after `event`; `state` itself is never modified.

    Raises ValueError for an event this function does not know, so that a damaged record can never
    be applied as if it were something else.
    """
    kind = event.get("t")
    if kind not in EVENT_TYPES:
        raise ValueError(f"unknown event type {kind!r}")
    page = event["page"]
    # A shallow copy: lists are never changed in place, only replaced when an event adds to them,
    # so the old state keeps its own (and a long replay does not copy every list at every event).
    s = {**state, "seq": event["seq"]}
    if kind == "intent":
        # The report for `page` is about to be filed with this key; until `page_done` we cannot
        # know whether it was.
        s["pending"] = {"page": page, "key": event["key"]}
    elif kind == "answered":
        s["in_flight"] = {"page": page, "tokens": event["tokens"]}
    elif kind == "visited":
        s["in_flight"] = {**(state["in_flight"] or {"page": page}), "finding": event["finding"]}
    elif kind == "submitted":
        # The report is known to be filed: the danger window of this page is closed.
        s["in_flight"] = {**(state["in_flight"] or {"page": page}), "submitted": True}
        s["pending"] = None
    elif kind == "page_done":
        s["next_page"] = page + 1
        s["tokens"] = state["tokens"] + event["tokens"]
        s["pending"] = None
        s["in_flight"] = None
        if event["finding"]:
            s["findings"] = [*state["findings"], page]
    elif kind == "aborted":
        s["next_page"] = page + 1
        s["pending"] = None
        s["in_flight"] = None
        s["aborted"] = [*state["aborted"], page]
    return s


def replay(events, state: State | None = None) -> State:
    """Apply `events` in order, starting from `state` (or the initial state)."""
    s = initial_state() if state is None else state
    for event in events:
        s = apply_event(s, event)
    return s
