"""Lesson 6: what kill -9 leaves, what fsync changes under it, and what each write costs."""

import re
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.figure import Figure

from bughunt.bufferdemo import LINE
from bughunt.diskio import Door, Files
from bughunt.bufferdemo import run_killed
from bughunt.lab.lessons import l06_kill9_vs_power_loss as D
from bughunt.lab.judges import EXERCISES, judge
from bughunt.lab import results

SMALL = {name: cfg.replace(pages=4) for name, cfg in D.POLICIES.items()}   # 18 points each


@pytest.fixture(scope="module")
def small_sweeps():
    return D.kill9_sweeps(SMALL)


@pytest.fixture(scope="module")
def buffers():
    return D.buffer_table().df


@pytest.fixture(scope="module")
def lat():
    return D.measure_latencies(samples=20)


# --- the buffer demo: real processes, real SIGKILL -------------------------------------------

def test_unflushed_line_dies_with_the_process():
    assert run_killed("write")["bytes on disk"] == 0


@pytest.mark.parametrize("how", ["flush", "os-write", "fsync"])
def test_line_handed_to_the_kernel_survives_kill9(how):
    r = run_killed(how)
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


def test_buffer_table_puts_the_source_text_beside_the_measurement(buffers):
    assert buffers.loc["f.write(), no flush", "source text (macOS)"] == 0
    assert buffers.loc["f.write() + flush()", "source text (macOS)"] == 12
    assert pd.isna(buffers.loc["os.write(), no Python buffer", "source text (macOS)"])


# --- kill -9 with and without fsync ------------------------------------------------------------

def test_fsync_changes_no_verdict_under_kill9(small_sweeps):
    never = small_sweeps[small_sweeps["fsync"] == "fsync never"]
    always = small_sweeps[small_sweeps["fsync"] == "fsync always"]
    assert len(never) == len(always) == 18
    assert list(never["verdict"]) == list(always["verdict"]) == ["correct"] * 18
    assert list(never["replayed_events"]) == list(always["replayed_events"])
    table = D.kill9_table(small_sweeps).df
    assert list(table["correct"]) == [18, 18]
    # the source text ran only without fsync: its figure is not repeated on the other row
    assert table.loc["fsync never", "source text: correct"] == 54
    assert pd.isna(table.loc["fsync always", "source text: correct"])


def test_the_kill9_table_refuses_verdicts_that_do_not_add_up(small_sweeps, monkeypatch):
    """The mutant: counting a verdict twice breaks the partition and the table is never shown."""
    from bughunt.lab.claims import TableError

    real = D.summary_table

    def double_count(rows, name, inv, **kw):
        rows = [{**r, "lost": r["lost"] + 1} for r in rows]
        return real(rows, name, inv, **kw)

    monkeypatch.setattr(D, "summary_table", double_count)
    with pytest.raises(TableError, match="kill -9 with and without fsync.*does not add up"):
        D.kill9_table(small_sweeps)


def test_same_outcome_counts_a_point_that_differs(small_sweeps):
    assert "verdict under both policies: 18 of 18" in D.same_outcome(small_sweeps)
    broken = small_sweeps.copy()
    broken.loc[broken.index[-1], "verdict"] = "lost"     # the last point of "fsync always"
    assert "verdict under both policies: 17 of 18" in D.same_outcome(broken)


def test_sweep_times_cover_both_sweeps(small_sweeps):
    times = D.sweep_times(small_sweeps).df
    assert list(times.index) == ["fsync never", "fsync always"]
    assert (times["crash + resume pairs"] == 18).all() and (times["seconds"] > 0).all()


# --- write latencies through the door ----------------------------------------------------------

def test_every_kind_of_write_is_timed_at_the_workers_record_size(lat):
    recs = D.worker_records()
    counts = lat.groupby("kind", observed=True).size()
    assert list(counts.index) == list(D.KINDS) and (counts == 20).all()
    assert set(lat.loc[lat["kind"] == D.APPEND, "bytes"]) == {len(recs["page_done"])}
    assert set(lat.loc[lat["kind"] == D.SNAPSHOT_NO_DIR_FSYNC, "bytes"]) == {len(recs["snapshot"])}
    assert (lat["latency_us"] > 0).all()


def test_the_source_texts_atomic_write_skips_only_the_directory_fsync(tmp_path, monkeypatch):
    import os
    import stat
    synced = []
    real_fsync = os.fsync

    def fsync(fd):
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)
    monkeypatch.setattr(os, "fsync", fsync)
    Door(files=Files()).write_atomic(tmp_path / "a.json", b"{}\n", fsync=True)
    assert synced == ["file", "dir"]
    synced.clear()
    Door(files=D.WithoutDirFsync()).write_atomic(tmp_path / "b.json", b"{}\n", fsync=True)
    assert synced == ["file"] and (tmp_path / "b.json").read_bytes() == b"{}\n"


def test_latency_table_puts_the_source_text_medians_on_the_rows_of_the_same_kind(lat):
    table = D.latency_table(lat).df
    assert table.loc[D.APPEND, "x append"] == 1
    assert table.loc[D.SNAPSHOT_NO_DIR_FSYNC, "source text median"] == "228 µs"
    assert table.loc[D.APPEND_FSYNC, "source text rerun"] == "37 µs"
    assert pd.isna(table.loc[D.SNAPSHOT_DIR_FSYNC, "source text median"])
    assert pd.isna(table.loc[D.SNAPSHOT_NO_FSYNC, "source text median"])
    assert all(v.endswith(" µs") for v in table["median"])     # one format for the column


def test_survival_table_cites_the_measurements(buffers, small_sweeps):
    table = D.survival_table(buffers, small_sweeps).df
    assert table.loc["f.write(), no flush (user-space buffer)", "kill -9"].startswith(
        "lost (here: 0 of 12 bytes")
    assert "18 of 18 runs correct" in table.loc["write() or flush(), no fsync (page cache)",
                                                "kill -9"]
    assert table.loc["rename, no directory fsync", "power cut"] == "rename may be undone"


def test_survival_table_says_a_new_file_needs_its_directory_fsynced(buffers, small_sweeps):
    """fsync(2): fsync of a file does not make its directory entry durable."""
    table = D.survival_table(buffers, small_sweeps).df
    new = table.loc["new file: write() + fsync, no directory fsync"]
    assert new["kill -9"] == "survives" and new["power cut"] == "the file may be missing"
    assert table.loc["new file: write() + fsync + directory fsync", "power cut"] == "survives *"


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
    assert bottom.get_ylabel() == "replayed events"
    assert any("source text avg" in t.get_text() for t in bottom.get_legend().get_texts())


def test_buffer_figure_labels_bytes_and_marks_the_lesson(buffers):
    (ax,) = _labelled(D.plot_buffer(buffers))
    assert "%" in ax.get_xlabel()
    assert any("source text" in t.get_text() for t in ax.get_legend().get_texts())


def test_latency_figure_is_in_us_on_an_axis_fitted_to_the_whiskers(lat):
    (ax,) = _labelled(D.plot_latencies(lat))
    assert ax.get_xscale() == "log" and "µs" in ax.get_xlabel()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["source text median (macOS)", "source text rerun (macOS)"]
    lo, hi = ax.get_xlim()
    p1 = lat.groupby("kind", observed=True)["latency_us"].quantile(0.01).min()
    p99 = lat.groupby("kind", observed=True)["latency_us"].quantile(0.99).max()
    assert lo >= min(p1, 2.0) / 2 and hi <= max(p99, 300.0) * 2   # no empty decades around
    medians = [t.get_text() for t in ax.texts if t.get_text().startswith("median")]
    assert len(medians) == len(D.KINDS) and all(m.endswith(" µs") for m in medians)
    assert not any("e-" in m or "ms" in m for m in medians)


def test_us_reads_as_a_plain_number_of_microseconds():
    assert D.us(0.5643) == "0.564 µs"
    assert D.us(1.3421) == "1.34 µs"
    assert D.us(33.04) == "33 µs"
    assert D.us(4612.7) == "4,610 µs"
    assert D.us(999.6) == "1,000 µs"


def test_source_figures_sit_only_on_rows_of_the_kind_they_measured(lat):
    """The source text's snapshot had no directory fsync: never drawn on the dir-fsync row."""
    marks = D.source_medians_us(D.KINDS)
    assert set(marks) == {D.APPEND, D.APPEND_FSYNC, D.SNAPSHOT_NO_DIR_FSYNC}
    (ax,) = D.plot_latencies(lat).axes
    rows = {t.get_text(): y for t, y in zip(ax.get_yticklabels(), ax.get_yticks())}
    diamonds = [line for line in ax.lines if line.get_marker() == "D"]
    on = {y for line in diamonds for y in line.get_ydata()}
    assert rows[D.SNAPSHOT_DIR_FSYNC] not in on and rows[D.SNAPSHOT_NO_DIR_FSYNC] in on


def test_panel_write_kinds_never_call_the_labs_snapshot_the_source_texts():
    snap_synced = D.LOG.replace(store="snapshot", intent=False, fsync="always")
    assert D.write_kind("snapshot", snap_synced) == D.SNAPSHOT_DIR_FSYNC
    assert D.write_kind("snapshot", snap_synced.replace(fsync="never")) == D.SNAPSHOT_NO_FSYNC
    assert D.write_kind("append", D.LOG) == D.APPEND
    assert D.write_kind("append", D.LOG.replace(fsync="always")) == D.APPEND_FSYNC
    assert D.write_kind("append", D.LOG.replace(write_mode="torn")) is None


def test_panel_plot_shows_verdicts_and_write_latencies(small_sweeps):
    d = small_sweeps[small_sweeps["fsync"] == "fsync always"]
    top, bottom = _labelled(D.panel_plot(d, SMALL["fsync always"], highlight="p3.after_submit"))
    assert bottom.get_xscale() == "log" and "µs" in bottom.get_xlabel()
    assert any("append, fsync always" in t.get_text() for t in bottom.get_yticklabels())
    lo, hi = bottom.get_xlim()
    assert hi / lo < 1e4          # fitted to the writes, not a fixed 0.001 to 100 ms


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
    assert set(p.knobs) == {"store", "fsync", "write_mode", "snapshot_every"}


def test_panel_fsync_knob_sweeps_and_draws(tmp_path):
    results.reset()
    p = D.panel(base=SMALL["fsync never"], crash_point="p3.after_submit")
    p.results_dir = tmp_path
    p.controls["fsync"].value = "always"
    assert p.config.fsync == "always" and p.record.label == "after_submit"
    df = p.run()
    assert len(df) == 18 and (df["verdict"] == "correct").all()
    assert p.images()
    assert "18 correct" in p.status.value


def test_panel_shows_a_sweep_the_notebook_already_ran_without_killing_again(monkeypatch):
    results.reset()
    never = D.kill9_sweeps({"fsync never": SMALL["fsync never"]})
    p = D.panel(base=SMALL["fsync never"], crash_point="p3.after_submit")

    def no_second_sweep(*args, **kwargs):
        raise AssertionError("the panel swept again")
    monkeypatch.setattr("bughunt.lab.results.run_crash_jobs", no_second_sweep)
    df = p.run()
    assert list(df["verdict"]) == list(never["verdict"]) and len(df) == 18
    results.reset()


# --- exercises ---------------------------------------------------------------------------------

def test_exercise_6_1_accepts_the_measured_whole_lines_only():
    whole = run_killed("write", D.MANY_LINES)["whole lines on disk"]
    assert 0 < whole < D.MANY_LINES
    assert judge("6.1", whole) and not judge("6.1", D.MANY_LINES) and not judge("6.1", 0)


def _fake_latencies(append_us, fsync_us):
    def measure(samples=300, kinds=D.KINDS, base_dir=None):
        return pd.DataFrame([{"kind": D.APPEND, "bytes": 82, "latency_us": append_us}]
                            + [{"kind": k, "bytes": 82, "latency_us": fsync_us}
                               for k in kinds if k != D.APPEND])
    return measure


def test_exercise_6_2_accepts_the_measured_ratio_by_order_of_magnitude(monkeypatch):
    monkeypatch.setattr(D, "measure_latencies", _fake_latencies(1, 100))    # ratio 100
    assert judge("6.2", 100) and judge("6.2", 60) and judge("6.2", "190")
    assert judge("6.2", 16.5)           # the source text's Mac: within a factor of 10 of 100
    assert not judge("6.2", 5)          # 20 times too small
    assert not judge("6.2", 2000)
    assert not judge("6.2", "fast")


@pytest.mark.slow
def test_exercise_6_3_fsync_changes_no_verdict_in_the_full_sweeps():
    assert D.verdicts_changed_by_fsync() == []
    assert judge("6.3", 0) and not judge("6.3", 54) and not judge("6.3", 12)


def test_exercise_6_3_is_judged_from_the_sweeps(monkeypatch):
    monkeypatch.setattr(D, "verdicts_changed_by_fsync", lambda: ["p1.mid_commit"])
    assert judge("6.3", 1) and not judge("6.3", 0)


@pytest.mark.slow
def test_fsync_does_not_close_the_danger_window():
    twice = D.duplicates_with_fsync()
    assert len(twice) == 6
    assert {p.split(".")[1] for p in twice} == {"after_submit", "mid_commit"}


def test_transfer_6_4_is_the_generators_problem_judged_live():
    p = D.TRANSFER
    assert p.seed == D.TRANSFER_SEED and p.drawn["kind"] == "point"
    truth = p.measure().value
    assert judge("6.4", "yes" if truth else "no") and not judge("6.4", "no" if truth else "yes")


def test_practice_draws_only_what_the_lesson_did_not_run():
    ran = set(D.POLICIES.values()) | {D.NO_KEY_FSYNC}
    for seed in range(50):
        p = D.practice_problem(seed)
        if p.drawn["kind"] == "buffer":
            assert p.drawn["lines"] not in {n for _, _, n in D.BUFFER_CASES}, seed
        else:
            assert p.drawn["config"] not in ran and p.drawn["config"].pages != 12, seed


def test_practice_buffer_answer_is_measured_live(monkeypatch):
    """The mutant: a stored answer would not follow the run; patched, the answer follows."""
    seed = next(s for s in range(50) if D.practice_problem(s).drawn["kind"] == "buffer")
    p = D.practice_problem(seed)
    monkeypatch.setattr(D, "run_killed", lambda how, lines: {
        "whole lines on disk": 7, "bytes on disk": 84, "bytes written": 12 * lines})
    assert p.measure().value == 7


# --- common wrong statements -------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("id", ["Q6.1", "Q6.2", "Q6.3"])
def test_lesson_6_statements_are_false_by_measurement_and_say_why(id):
    right, feedback = EXERCISES[id].judge(False)
    assert right, feedback
    assert not EXERCISES[id].judge(True)[0]
    assert feedback.startswith("The statement is false. Measured") and re.search(r"\d", feedback)


def test_a_power_cut_can_lose_an_unsynced_append_and_never_a_synced_one():
    t = D.power_cut_after_append()
    unsynced, synced = t.iloc[0], t.iloc[1]
    assert unsynced["line missing or torn"] > 0 and unsynced["line whole"] > 0
    assert synced["line missing or torn"] == 0 and synced["disk states"] > 0


def test_q6_1_would_be_true_if_fsync_closed_the_window(monkeypatch):
    monkeypatch.setattr(D, "duplicates_with_fsync", lambda config=None: [])
    assert judge("Q6.1", True)


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


# --- what an fsync timing measures: read from the machine, not assumed -------------------------

def _fake_sys(tmp_path, cache: str, device_path: str, flags: str):
    """A /sys/dev/block and /proc/cpuinfo for the device holding tmp_path."""
    import os
    st = os.stat(tmp_path)
    disk = tmp_path / "devices" / device_path
    (disk / "queue").mkdir(parents=True)
    (disk / "queue" / "write_cache").write_text(cache + "\n")
    block = tmp_path / "sys_dev_block"
    block.mkdir()
    (block / f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}").symlink_to(disk)
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor : 0\nflags : fpu vme {flags}\n")
    return block, cpuinfo


def test_storage_names_a_virtual_disk_with_a_volatile_cache_under_a_hypervisor(tmp_path):
    block, cpu = _fake_sys(tmp_path, "write back", "pci0/virtio1/block/vda", "sse hypervisor")
    where = D.storage(tmp_path, sys_dev_block=block, cpuinfo=cpu)
    assert (where.device, where.virtual_disk, where.write_cache, where.hypervisor) == (
        "vda", True, "write back", True)
    assert "a virtual disk" in where.describe() and "volatile write cache" in where.describe()


def test_storage_says_a_laptop_disk_is_not_virtual(tmp_path):
    block, cpu = _fake_sys(tmp_path, "write through", "pci0/nvme/nvme0/nvme0n1", "sse avx")
    where = D.storage(tmp_path, sys_dev_block=block, cpuinfo=cpu)
    assert (where.device, where.virtual_disk, where.write_cache, where.hypervisor) == (
        "nvme0n1", False, "write through", False)
    assert "no hypervisor" in where.describe() and "virtual" not in where.describe()


def test_storage_says_unknown_where_the_machine_does_not_tell(tmp_path):
    where = D.storage(tmp_path, sys_dev_block=tmp_path / "none", cpuinfo=tmp_path / "none",
                      mounts=tmp_path / "none")
    assert where.device is None and where.write_cache is None
    text = where.describe()
    assert "unknown" in text and "does not say whether it has a write cache" in text


def test_what_was_measured_reports_this_machines_storage(lat):
    assert D.what_was_measured(lat) == f"The timed writes went to {lat.attrs['storage'].describe()}."


def test_doctor_says_what_its_rename_and_fsync_checks_tried_not_just_works(tmp_path):
    from bughunt.doctor import check_folder
    checks = {c.name: c for c in check_folder(tmp_path)}
    rename = checks["rename over an existing file (os.replace)"]
    assert rename.ok and "atomic" not in rename.name
    assert "not tested here" in rename.detail and rename.detail != "works"
    assert all(c.detail != "works" for c in checks.values())
