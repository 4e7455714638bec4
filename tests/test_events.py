"""The pure core: apply_event is the only way state changes, and replay is the same code as live."""

import copy

import pytest

from bughunt.events import apply_event, initial_state, replay


def lesson_events():
    """The 15 events of a clean 12-page run with intents: the lesson's event log."""
    events, seq = [], 0
    for page in range(1, 13):
        if page in (3, 7, 10):
            seq += 1
            events.append({"seq": seq, "t": "intent", "page": page, "key": f"bughunt:p{page:02d}"})
        seq += 1
        events.append({"seq": seq, "t": "page_done", "page": page, "tokens": 10,
                       "finding": page in (3, 7, 10)})
    return events


def test_a_clean_run_has_the_lessons_fifteen_events():
    assert len(lesson_events()) == 15


def test_apply_event_never_modifies_its_input():
    """Every state a run passes through is kept and checked after the whole run: an event that
    changed an earlier state in place (say, appending to its findings) shows up here."""
    states, events = [initial_state()], lesson_events()
    copies = [copy.deepcopy(states[0])]
    for event in events:
        states.append(apply_event(states[-1], event))
        copies.append(copy.deepcopy(states[-1]))
    assert states == copies
    for event in events:                       # the events are not changed either
        assert "seq" in event and event["t"] in ("intent", "page_done")
    assert states[-1]["findings"] == [3, 7, 10] and states[0]["findings"] == []


def test_replay_from_any_prefix_reaches_the_same_state_as_live():
    events = lesson_events()
    live = initial_state()
    for e in events:
        live = apply_event(live, e)
    for cut in range(len(events) + 1):
        assert replay(events[cut:], replay(events[:cut])) == live


def test_intent_opens_the_danger_window_and_page_done_closes_it():
    s = apply_event(initial_state(), {"seq": 1, "t": "intent", "page": 1, "key": "k"})
    assert s["pending"] == {"page": 1, "key": "k"}
    s = apply_event(s, {"seq": 2, "t": "page_done", "page": 1, "tokens": 5, "finding": True})
    assert s["pending"] is None and s["next_page"] == 2 and s["tokens"] == 5


def test_aborted_moves_on_without_a_finding():
    s = apply_event(initial_state(), {"seq": 1, "t": "intent", "page": 1, "key": "k"})
    s = apply_event(s, {"seq": 2, "t": "aborted", "page": 1})
    assert s["aborted"] == [1] and s["findings"] == [] and s["next_page"] == 2
    assert s["pending"] is None


def test_operation_events_keep_progress_inside_a_page():
    s = apply_event(initial_state(), {"seq": 1, "t": "answered", "page": 1, "tokens": 7})
    s = apply_event(s, {"seq": 2, "t": "visited", "page": 1, "finding": True})
    s = apply_event(s, {"seq": 3, "t": "submitted", "page": 1})
    assert s["in_flight"] == {"page": 1, "tokens": 7, "finding": True, "submitted": True}
    s = apply_event(s, {"seq": 4, "t": "page_done", "page": 1, "tokens": 7, "finding": True})
    assert s["in_flight"] is None and s["findings"] == [1]


def test_unknown_event_type_is_refused():
    with pytest.raises(ValueError, match="unknown event type"):
        apply_event(initial_state(), {"seq": 1, "t": "page_skipped", "page": 1})
