"""The lessons' diagrams: labelled, in the palette, and grounded in the code they picture."""

import inspect

import pytest
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from bughunt.durable.store import STATUSES
from bughunt.lab import diagrams
from bughunt.lab.style import COLORS


# --- diagrams -----------------------------------------------------------------------------------

def texts(fig: Figure) -> str:
    return "\n".join(t.get_text() for ax in fig.axes for t in ax.texts)


def palette_only(fig: Figure) -> None:
    allowed = {to_hex(c) for c in COLORS.values()} | {"#ffffff"}
    for ax in fig.axes:
        for patch in ax.patches:
            if patch.get_facecolor()[3] > 0:
                assert to_hex(patch.get_facecolor(), keep_alpha=False) in allowed


def test_byte_places_diagram_names_each_place_and_what_survives_which_crash():
    fig = diagrams.plot_byte_places({"write": 0, "flush": 12})
    assert fig.axes[0].get_title()
    t = texts(fig)
    for word in ("user-space buffer", "kernel page cache", "disk", "kill -9", "power loss",
                 "flush()", "fsync()", "0 bytes", "12 after flush()"):
        assert word in t
    assert t.count("✓ survives") == 3 and t.count("✗ lost") == 3
    palette_only(fig)


def test_danger_window_diagram_names_the_operations_and_the_crash_points():
    from bughunt.crashpoints import scheme
    for intent in (True, False):
        fig = diagrams.plot_danger_window(intent=intent)
        assert "danger window" in fig.axes[0].get_title()
        t = texts(fig)
        assert "report filed, page not committed" in t
        for op in ("model call", "visit", "submit", "commit"):
            assert op in t
        assert ("intent" in t.split("\n")) is intent
        for p in (p for p in scheme(12, [3, 7, 10], intent) if p.page == 3):
            assert p.name in t
        palette_only(fig)
    with pytest.raises(ValueError, match="no bug"):
        diagrams.plot_danger_window(page=4)


def test_task_state_diagram_draws_every_status_and_transition():
    fig = diagrams.plot_task_states()
    assert fig.axes[0].get_title()
    t = texts(fig).replace("\n", " ")
    for status in STATUSES:
        assert status in t
    for _src, _dst, label, _code, _line in diagrams.TASK_TRANSITIONS:
        assert label.replace("\n", " ") in t
    palette_only(fig)


@pytest.mark.parametrize("src, dst, label, code, line", diagrams.TASK_TRANSITIONS,
                         ids=[t[2].split("\n")[0] for t in diagrams.TASK_TRANSITIONS])
def test_each_drawn_transition_is_implemented_by_the_code_it_names(src, dst, label, code, line):
    assert line in inspect.getsource(diagrams.resolve(code))


def test_a_crash_recovery_and_a_clean_close_both_lead_back_to_pending_and_only_recover_counts():
    recover = inspect.getsource(diagrams.resolve("bughunt.durable.store.DurableStore.recover"))
    close = inspect.getsource(diagrams.resolve("bughunt.durable.store.DurableStore.close"))
    assert '"restarts"' in recover and '"restarts"' not in close
