"""Lesson 6: what kill -9 leaves, what fsync changes under it, and what each write costs."""

import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.figure import Figure

from bughunt.bufferdemo import LINE
from bughunt.diskio import Door
from bughunt.lab import durability as D
from bughunt.lab.exercises import judge
from bughunt.lab.panel import clear_caches

SMALL = {name: cfg.replace(pages=4) for name, cfg in D.POLICIES.items()}   # 18 points each


@pytest.fixture(scope="module")
def small_sweeps():
    return D.kill9_sweeps(SMALL)


@pytest.fixture(scope="module")
def buffers():
    return D.buffer_table()


@pytest.fixture(scope="module")
def lat():
    return D.measure_latencies(samples=20)


# --- the buffer demo: real processes, real SIGKILL -------------------------------------------

def test_unflushed_line_dies_with_the_process():
    assert D.buffer_demo("write")["bytes on disk"] == 0


@pytest.mark.parametrize("how", ["flush", "os-write", "fsync"])
def test_line_handed_to_the_kernel_survives_kill9(how):
    r = D.buffer_demo(how)
    assert r["bytes on disk"] == len(LINE) == 12 and r["intact"]


def test_bufferdemo_dies_by_sigkill_not_by_exit(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "bughunt.bufferdemo", str(tmp_path / "x"),
                           "--flush"], capture_output=True, cwd=tmp_path)
    assert proc.returncode == -signal.SIGKILL
    assert (tmp_path / "x").read_bytes() == LINE


def test_bufferdemo_refuses_zero_lines(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "bughunt.bufferdemo", str(tmp_path / "x"),
                           "--lines", "0"], capture_output=True, text=True)
    assert proc.returncode == 2 and "--lines" in proc.stderr


def test_unflushed_buffer_keeps_only_whole_lines_of_a_prefix(buffers):
    row = buffers.loc["3000 x f.write(), no flush"]
    on_disk = row["bytes on disk after kill -9"]
    assert 0 < on_disk < 36000 and on_disk % len(LINE) == 0


def test_buffer_table_puts_the_lesson_beside_the_measurement(buffers):
    assert buffers.loc["f.write(), no flush", "lesson"] == 0
    assert buffers.loc["f.write() + flush()", "lesson"] == 12


# --- kill -9 with and without fsync ------------------------------------------------------------

def test_fsync_changes_no_verdict_under_kill9(small_sweeps):
    never = small_sweeps[small_sweeps["fsync"] == "fsync never"]
    always = small_sweeps[small_sweeps["fsync"] == "fsync always"]
    assert len(never) == len(always) == 18
    assert list(never["verdict"]) == list(always["verdict"]) == ["correct"] * 18
    assert list(never["replayed_events"]) == list(always["replayed_events"])
    table = D.kill9_table(small_sweeps)
    assert list(table["recovered correctly"]) == [18, 18]
    assert list(table["lesson (fsync never)"]) == [54, 54]


def test_same_outcome_counts_a_point_that_differs(small_sweeps):
    assert "verdict under both policies: 18 of 18" in D.same_outcome(small_sweeps)
    broken = small_sweeps.copy()
    broken.loc[broken.index[-1], "verdict"] = "lost"     # the last point of "fsync always"
    assert "verdict under both policies: 17 of 18" in D.same_outcome(broken)


def test_sweep_times_cover_both_sweeps(small_sweeps):
    times = D.sweep_times(small_sweeps)
    assert list(times.index) == ["fsync never", "fsync always"]
    assert (times["crash + resume pairs"] == 18).all() and (times["seconds"] > 0).all()


# --- write latencies through the door ----------------------------------------------------------

def test_every_kind_of_write_is_timed_at_the_workers_record_size(lat):
    recs = D.worker_records()
    counts = lat.groupby("kind", observed=True).size()
    assert list(counts.index) == list(D.KINDS) and (counts == 20).all()
    assert (lat["latency_ms"] > 0).all()
    assert set(lat.loc[lat["kind"] == D.APPEND, "bytes"]) == {len(recs["page_done"])}
    assert set(lat.loc[lat["kind"] == D.SNAPSHOT_LESSON, "bytes"]) == {len(recs["snapshot"])}


def test_lesson_door_skips_only_the_directory_fsync(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(Door, "_fsync", lambda self, fd: calls.append("file"))
    monkeypatch.setattr(Door, "_fsync_dir", lambda self, d: calls.append("dir"))
    Door().write_atomic(tmp_path / "a.json", b"{}\n", fsync=True)
    assert calls == ["file", "dir"]
    calls.clear()
    D.LessonDoor().write_atomic(tmp_path / "b.json", b"{}\n", fsync=True)
    assert calls == ["file"] and (tmp_path / "b.json").read_bytes() == b"{}\n"


def test_latency_table_compares_with_the_lesson_medians(lat):
    table = D.latency_table(lat)
    assert table.loc[D.APPEND, "x append"] == 1
    assert table.loc[D.SNAPSHOT_LESSON, "lesson median ms"] == 0.228
    assert table.loc[D.APPEND_FSYNC, "lesson rerun ms"] == 0.037
    assert table.loc[D.SNAPSHOT_DIR_FSYNC, "lesson median ms"] == "-"
    assert D.fsync_ratio(lat) > 1      # an fsync waits for the disk; a plain append does not


def test_survival_table_cites_the_measurements(buffers, small_sweeps):
    table = D.survival_table(buffers, small_sweeps)
    assert table.loc["f.write(), no flush (user-space buffer)", "kill -9"].startswith(
        "lost (here: 0 of 12 bytes")
    assert "18 of 18 runs correct" in table.loc["write() or flush(), no fsync (page cache)",
                                                "kill -9"]
    assert table.loc["rename, no directory fsync", "power cut"] == "rename may be lost"


# --- figures -----------------------------------------------------------------------------------

def _labelled(fig):
    assert isinstance(fig, Figure)
    assert any(ax.get_title() for ax in fig.axes)
    assert fig.axes[-1].get_xlabel() and all(ax.get_ylabel() or ax.get_yticklabels()
                                             for ax in fig.axes)
    return fig.axes


def test_kill9_figure_shows_both_policies_and_the_lesson_average(small_sweeps):
    top, bottom = _labelled(D.plot_kill9(small_sweeps))
    assert [t.get_text() for t in top.get_yticklabels()] == ["fsync never", "fsync always"]
    assert bottom.get_ylabel() == "replayed events (events)"
    assert any("lesson avg" in t.get_text() for t in bottom.get_legend().get_texts())


def test_buffer_figure_labels_bytes_and_marks_the_lesson(buffers):
    (ax,) = _labelled(D.plot_buffer(buffers))
    assert "%" in ax.get_xlabel()
    assert any("lesson" in t.get_text() for t in ax.get_legend().get_texts())


def test_latency_figure_is_log_scale_in_ms_with_lesson_marks(lat):
    (ax,) = _labelled(D.plot_latencies(lat))
    assert ax.get_xscale() == "log" and "ms" in ax.get_xlabel()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["lesson median (macOS)", "lesson rerun"]


def test_panel_plot_shows_verdicts_and_write_latencies(small_sweeps):
    d = small_sweeps[small_sweeps["fsync"] == "fsync always"]
    top, bottom = _labelled(D.panel_plot(d, SMALL["fsync always"], highlight="p3.after_submit"))
    assert bottom.get_xscale() == "log"
    assert any("append, fsync always" in t.get_text() for t in bottom.get_yticklabels())


def test_panel_plot_says_so_when_nothing_is_written():
    cfg = D.LOG.replace(store="none", intent=False, pages=4)
    d = pd.DataFrame([{"crash_point": f"p{(i + 3) // 4}.x{i}", "index": i, "page": (i + 3) // 4,
                       "verdict": "correct"}
                      for i in range(1, 5)])
    fig = D.panel_plot(d, cfg, None)
    assert "nothing is written" in fig.axes[1].texts[0].get_text()


# --- the panel ---------------------------------------------------------------------------------

def test_lesson_6_panel_builds_with_the_lesson_defaults():
    p = D.panel()
    assert p.config == D.LOG and len(p.crash_point.options) == 54
    assert p.crash_point.value == "p7.after_submit"
    assert set(p.controls) == {"store", "fsync", "write_mode", "snapshot_every"}


def test_panel_fsync_knob_sweeps_and_draws(tmp_path):
    clear_caches()
    p = D.panel(base=SMALL["fsync never"], crash_point="p3.after_submit")
    p.results_dir = tmp_path
    p.controls["fsync"].value = "always"
    assert p.config.fsync == "always" and p.record["label"] == "after_submit"
    df = p.run()
    assert len(df) == 18 and (df["verdict"] == "correct").all()
    assert p.plot_out.outputs[0]["data"]["image/png"]
    assert "18 correct" in p.status.value


def test_panel_shows_a_sweep_the_notebook_already_ran_without_killing_again(small_sweeps,
                                                                              monkeypatch):
    from bughunt.lab import panel as panel_module
    clear_caches()
    p = D.panel(base=SMALL["fsync never"], crash_point="p3.after_submit", sweep=small_sweeps)

    def no_second_sweep(*args, **kwargs):
        raise AssertionError("the panel swept again")
    monkeypatch.setattr(panel_module, "sweep_records", no_second_sweep)
    df = p.run()
    never = small_sweeps[small_sweeps["fsync"] == "fsync never"]
    assert list(df["verdict"]) == list(never["verdict"]) and len(df) == 18
    clear_caches()


# --- exercises ---------------------------------------------------------------------------------

def test_exercise_6_1_accepts_the_measured_survivors_only():
    assert judge("6.1", {"b", "c", "d"})
    assert judge("6.1", "b, c, d")
    assert not judge("6.1", {"a", "b", "c", "d"})
    assert not judge("6.1", {"d"})


def _fake_latencies(append_ms, fsync_ms):
    def measure(samples=300, kinds=D.KINDS, base_dir=None):
        return pd.DataFrame([{"kind": D.APPEND, "bytes": 82, "latency_ms": append_ms},
                             {"kind": D.APPEND_FSYNC, "bytes": 82, "latency_ms": fsync_ms}])
    return measure


def test_exercise_6_2_accepts_within_a_factor_of_2_of_the_measured_ratio(monkeypatch):
    monkeypatch.setattr(D, "measure_latencies", _fake_latencies(0.001, 0.1))    # ratio 100
    assert judge("6.2", 100) and judge("6.2", 60) and judge("6.2", "190")
    assert not judge("6.2", 16.5)       # the lesson's Mac, not this machine
    assert not judge("6.2", 250)
    assert not judge("6.2", "fast")


def test_exercise_6_2_accepts_a_ratio_measured_here():
    ratio = D.fsync_ratio(D.measure_latencies(200, kinds=(D.APPEND, D.APPEND_FSYNC)))
    assert judge("6.2", ratio)
    assert not judge("6.2", ratio * 100)


# --- where the writes are timed ----------------------------------------------------------------

def test_file_system_is_named_from_the_mount_table(tmp_path):
    name = D.file_system(tmp_path)
    assert name and " " not in name
    if Path("/proc/mounts").exists() and Path("/dev/shm").is_dir():
        assert D.file_system(Path("/dev/shm")) == "tmpfs"


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs a tmpfs at /dev/shm")
def test_latencies_are_not_timed_on_a_file_system_in_memory(tmp_path, monkeypatch):
    monkeypatch.setattr(D.tempfile, "gettempdir", lambda: "/dev/shm")
    monkeypatch.chdir(tmp_path)
    with D._on_a_disk(None) as d:
        assert d.parent == tmp_path
