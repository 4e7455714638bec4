"""Lesson 4, the danger window: real kills inside the window, the three choices, the timeline,
random kills, the panel and the exercises. Small sites (4 pages, one bug page: 3) keep it fast."""

import pytest
from matplotlib.figure import Figure

from bughunt.experiment import kill_random
from bughunt.lab.lessons import l04_danger_window as danger
from bughunt.lab.judges import judge
from bughunt.lab import results

SMALL_KEY = {name: cfg.replace(pages=4) for name, cfg in danger.KEY_SWEEPS.items()}   # 17 points
SMALL_CHOICES = {name: cfg.replace(pages=4) for name, cfg in danger.CHOICES.items()}  # 18 points


@pytest.fixture(scope="module")
def key_df():
    return danger.danger_sweeps(SMALL_KEY)


@pytest.fixture(scope="module")
def choices_df():
    return danger.danger_sweeps(SMALL_CHOICES)


def mark(t_us, page, label):
    return {"pid": 1, "t": 1000.0 + t_us / 1e6, "page": page, "label": label}


# --- inside the window ---------------------------------------------------------------------------

def test_resume_inside_danger_window_files_a_duplicate_without_the_key_and_none_with_it():
    off = danger.inside_the_window(SMALL_KEY["key off"])
    on = danger.inside_the_window(SMALL_KEY["key on"])
    for r in (off, on):      # paused: the tracker has the report, the checkpoint says "not done"
        assert r["tracker pages (paused)"] == [3] and r["checkpoint: next page"] == 3
        assert r["killed by signal"] == 9 and r["resume exit"] == 0
    assert off["tracker pages (after resume)"] == [3, 3] and off["duplicate reports"] == 1
    assert on["tracker pages (after resume)"] == [3] and on["duplicate reports"] == 0


# --- sweeps and tables ---------------------------------------------------------------------------

def test_without_key_duplicates_fall_exactly_in_the_window_and_the_key_removes_them(key_df):
    dup = danger.duplicate_points(key_df, "key off")
    assert list(zip(dup["page"], dup["label"])) == [(3, "after_submit"), (3, "mid_commit")]
    assert danger.duplicate_points(key_df, "key on").empty
    table = danger.key_table(key_df).df
    assert table.loc["off", "file a report twice"] == 2
    assert table.loc["off", "lesson: file twice"] == 6
    assert table.loc["on", "recover correctly"] == table.loc["on", "crash points"] == 17


def test_three_choices_lose_duplicate_or_get_it_right(choices_df):
    table = danger.choices_table(choices_df).df
    most, least, eff = (table.loc[n] for n in ("at most once", "at least once",
                                               "effectively once"))
    assert (most["duplicate"], most["lost"], most["tracker disagrees"]) == (0, 1, 2)
    assert (least["duplicate"], least["lost"]) == (2, 0)
    assert eff["correct"] == eff["crash points"] == 18 and eff["lesson: correct"] == 54
    # one knob at a time: the key is off for both at most once and at least once
    assert (most["key"], least["key"], eff["key"]) == ("off", "off", "on")


def test_the_choices_table_refuses_verdicts_that_do_not_add_up(choices_df):
    """The mutant: a verdict counted twice (a run both lost and in another column) breaks the
    partition, and the table is never shown."""
    from bughunt.lab.claims import TableError

    broken = choices_df.copy()
    broken.loc[broken["verdict"] == "tracker disagrees", "verdict"] = "lost"
    danger.choices_table(broken)          # still a partition: fine
    original = danger.CHOICE_VERDICTS
    try:
        danger.CHOICE_VERDICTS = ("correct", "duplicate", "lost", "lost")
        with pytest.raises(TableError, match="three choices.*does not add up"):
            danger.choices_table(choices_df)
    finally:
        danger.CHOICE_VERDICTS = original


def test_at_most_once_loses_at_after_intent_and_disagrees_with_the_tracker_after_submit(
        choices_df):
    by_label = danger.verdicts_by_label(choices_df).df
    assert by_label.loc["at most once", "after_intent"] == "lost"
    assert by_label.loc["at most once", "after_submit"] == "tracker disagrees"
    assert by_label.loc["at least once", "mid_commit"] == "duplicate"
    assert set(by_label.loc["effectively once"]) == {"correct"}


def test_sweeps_already_run_are_reused_not_rerun(key_df):
    before = results.sweep_once(SMALL_KEY["key off"])
    again = danger.danger_sweeps({"key off": SMALL_KEY["key off"]})
    assert results.sweep_once(SMALL_KEY["key off"]) is before
    assert len(again) == 17


# --- the timeline --------------------------------------------------------------------------------

SYNTHETIC_TRACE = [mark(0, 1, "start"), mark(10, 1, "after_model_call"), mark(12, 1, "after_visit"),
                   mark(15, 1, "after_intent"), mark(115, 1, "after_submit"),
                   mark(120, 1, "mid_commit"), mark(140, 1, "after_commit"),
                   mark(150, 2, "after_model_call"), mark(152, 2, "after_visit"),
                   mark(160, 2, "mid_commit"), mark(170, 2, "after_commit"), mark(171, 2, "end")]


def test_operations_run_from_the_previous_mark_and_the_commit_spans_mid_commit():
    ops = danger.operations(SYNTHETIC_TRACE)
    assert list(ops["op"]) == ["model call", "visit", "intent", "submit", "commit",
                               "model call", "visit", "commit"]
    commit = ops[(ops["page"] == 1) & (ops["op"] == "commit")].iloc[0]
    assert commit["start_us"] == pytest.approx(115) and commit["end_us"] == pytest.approx(140)
    assert ops[ops["op"] == "submit"]["dur_us"].iloc[0] == pytest.approx(100)


def test_danger_window_runs_from_the_end_of_the_submit_to_the_end_of_the_commit():
    windows = danger.danger_windows(danger.operations(SYNTHETIC_TRACE))
    assert list(windows["page"]) == [1]
    assert windows["start_us"].iloc[0] == pytest.approx(115)
    assert windows["width_us"].iloc[0] == pytest.approx(25)
    assert windows["width_with_submit_us"].iloc[0] == pytest.approx(125)   # from 15: the submit
    share = danger.window_share([SYNTHETIC_TRACE])
    assert share["life_us"] == pytest.approx(171)          # ready (here: start) to end
    assert share["share_of_life"] == pytest.approx(25 / 171)
    assert share["share_with_submit"] == pytest.approx(125 / 171)


def test_a_real_traced_run_has_one_window_per_bug_page_inside_the_run():
    trace = danger.traced_run(SMALL_CHOICES["at least once"])
    ops = danger.operations(trace)
    windows = danger.danger_windows(ops)
    assert list(windows["page"]) == [3]
    assert (ops["dur_us"] >= 0).all() and (windows["width_us"] > 0).all()
    share = danger.window_share([trace])
    assert 0 < share["share_of_life"] < share["share_with_submit"] < 1
    fig = danger.plot_window_timeline(ops, windows, pages=(3,))
    assert isinstance(fig, Figure) and "danger window" in fig.get_suptitle()
    xlabels = [ax.get_xlabel() for ax in fig.axes]
    assert any(x.startswith("time since page 1 began (ms") for x in xlabels)
    assert "µs since the page began" in xlabels


# --- figures -------------------------------------------------------------------------------------

def test_verdict_figures_have_titles_labels_and_the_lessons_figure(key_df, choices_df):
    for fig, lesson in ((danger.plot_key(key_df), "lesson: 6"),
                        (danger.plot_choices(choices_df), "lesson: 54 of 54")):
        ax = fig.axes[0]
        assert isinstance(fig, Figure) and lesson in ax.get_title()
        assert "crash point" in ax.get_xlabel() and ax.get_legend() is not None


def test_random_kills_figure_and_table_use_the_real_kills_for_the_rule_of_three(key_df):
    result = kill_random(SMALL_KEY["key off"], tries=3, seed=1)
    share = danger.window_share([danger.traced_run(SMALL_KEY["key off"], result["latency_ms"])])
    table = danger.random_summary(result, share, key_df).df
    n, loop, hits = result["real_kills"], result["kills_in_page_loop"], result["duplicates_hit"]
    assert table.loc["real kills (died before its end)", "random kills"] == n
    assert table.loc["kills inside the page loop", "random kills"] == loop
    bound = "95% upper bound on the hit rate per kill (exact, from the hits)"
    assert table.loc[bound, "random kills"] == (f"{danger.upper_bound(hits, loop):.1%}"
                                                if loop else "-")
    # the rule of three is a bound for zero failures only: shown only when nothing failed
    assert ("rule of three (no failure): 3/kills in the loop" in table.index) == (hits == 0)
    assert sum(danger.landing_table(result).df["kills"]) == 3
    fig = danger.plot_random_vs_exhaustive(result, share, key_df, SMALL_KEY["key off"])
    assert isinstance(fig, Figure) and "random kills" in fig.get_suptitle()
    assert all(ax.get_title() and ax.get_ylabel() for ax in fig.axes)


# --- the panel -----------------------------------------------------------------------------------

def test_lesson_4_panel_starts_inside_the_window_with_its_knobs():
    p = danger.panel()
    assert p.config == danger.CHOICES["effectively once"] and len(p.crash_point.options) == 54
    assert p.crash_point.value == "p3.after_submit"
    assert set(p.knobs) == {"store", "idempotency_key", "intent", "pending"}


def test_panel_runs_a_sweep_and_shows_duplicates_when_the_key_is_switched_off(tmp_path):
    results.reset()
    p = danger.panel(base=SMALL_CHOICES["effectively once"], crash_point="p3.after_submit")
    p.results_dir = tmp_path
    p.controls["idempotency_key"].value = False
    assert p.record.label == "after_submit" and p.record.duplicate_reports == 1
    p.run_button.click()
    assert p.progress.value == p.progress.max == 18
    assert "2 with a duplicate" in p.status.value
    assert p.images()


def test_panel_abort_loses_the_report_killed_at_after_intent():
    results.reset()
    p = danger.panel(base=SMALL_CHOICES["effectively once"], crash_point="p3.after_intent")
    p.controls["pending"].value = "abort"
    assert p.record.label == "after_intent" and p.record.lost_reports == 1


def test_panel_is_handed_the_sweeps_this_kernel_already_ran(monkeypatch):
    results.reset()
    ran = danger.danger_sweeps(SMALL_CHOICES)
    monkeypatch.setattr("bughunt.lab.results.run_crash_jobs",
                        lambda *a, **k: pytest.fail("the panel swept again"))
    p = danger.panel(base=SMALL_CHOICES["effectively once"])
    cfg = SMALL_CHOICES["effectively once"]
    mine = ran[ran["sweep"] == "effectively once"]
    assert [r.crash_point for r in results.sweep_once(cfg)] == list(mine["crash_point"])
    assert len(p.run()) == 18                              # served from the cache, not re-run


def test_panel_plot_marks_the_chosen_point(choices_df):
    d = choices_df[choices_df["sweep"] == "at least once"]
    fig = danger.panel_plot(d, SMALL_CHOICES["at least once"], "p3.after_submit")
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "p3.after_submit" in labels and "duplicate" in labels


# --- exercises -----------------------------------------------------------------------------------

def test_exercise_4_1_accepts_the_window_points_as_names_or_steps():
    window = [f"p{page}.{step}" for page in (3, 7, 10) for step in ("after_submit", "mid_commit")]
    assert judge("4.1", window)
    assert judge("4.1", ["mid_commit", "after_submit"])
    assert not judge("4.1", window[:2])
    assert not judge("4.1", ["after_submit"])
    assert not judge("4.1", [11, 12, 28, 29, 41, 42])       # numbers shift between schemes
    assert not judge("4.1", "p3.after_submit")


def test_the_exact_bound_is_the_rule_of_three_for_no_failure_and_wider_after_failures():
    assert abs(danger.upper_bound(0, 39) - (1 - 0.05 ** (1 / 39))) < 1e-6    # 7.4%, 3/39 = 7.7%
    assert 0.18 < danger.upper_bound(3, 38) < 0.20                           # Clopper-Pearson
    assert danger.upper_bound(1, 39) > danger.upper_bound(0, 39)
    assert danger.upper_bound(0, 0) is None and danger.upper_bound(5, 5) == 1.0


def test_exercise_4_2_accepts_only_at_most_once():
    assert judge("4.2", "at most once")
    assert not judge("4.2", "at least once")
    assert not judge("4.2", "effectively once")


# --- the tracker's deduplication -------------------------------------------------------------------

def test_the_tracker_skips_only_a_second_report_with_the_same_key(tmp_path):
    """ON CONFLICT(idempotency_key) DO NOTHING: a duplicate key is skipped, while a row that breaks
    NOT NULL still raises (INSERT OR IGNORE would drop it silently)."""
    import sqlite3

    from bughunt.world import Tracker

    tracker = Tracker(tmp_path)
    try:
        assert tracker.submit(3, "bug", "bughunt:p03") is True
        assert tracker.submit(3, "bug", "bughunt:p03") is False
        assert tracker.submit(3, "bug", None) is True and tracker.submit(3, "bug", None) is True
        with pytest.raises(sqlite3.IntegrityError, match="NOT NULL"):
            tracker.submit(7, None, "bughunt:p07")
    finally:
        tracker.close()


# --- the whole-run timeline ----------------------------------------------------------------------

def close_windows_trace():
    """Four pages, each with a window, the first three 66 µs apart on an axis of 100 ms: their
    labels would print on top of each other on one lane."""
    marks, t = [mark(0, 1, "ready"), mark(5000, 1, "start")], 5000.0
    for page in range(1, 5):
        for label, dt in (("after_model_call", 10 if page < 4 else 100_000), ("after_visit", 2),
                          ("after_intent", 2), ("after_submit", 50), ("mid_commit", 1),
                          ("after_commit", 1)):
            t += dt            # page 4's long model call stretches the axis: the rest crowd
            marks.append(mark(t, page, label))
    marks.append(mark(t + 1, 4, "end"))
    return marks


def test_timeline_starts_at_the_page_loop_and_its_share_divides_by_the_loop():
    ops = danger.operations(close_windows_trace())
    windows = danger.danger_windows(ops)
    share = danger.timeline_share(ops, windows)
    start, end = danger.loop_span(ops)
    assert start == pytest.approx(5000.0) and share["loop_us"] == end - start   # no set-up
    assert share["share"] == pytest.approx(windows["width_us"].sum() / (end - start))
    fig = danger.plot_window_timeline(ops, windows, pages=(1, 2))
    top = next(ax for ax in fig.axes if "page loop" in ax.get_title())
    assert top.get_xlim()[0] >= 0 and f"{share['share']:.1%}" in top.get_title()


@pytest.mark.parametrize("trace", ["close", "real"])
def test_the_timelines_window_labels_never_overlap(trace):
    """Measured on the drawn figure: no two page labels' text extents intersect. The mutant (no
    separation) overlaps on the close trace."""
    marks = close_windows_trace() if trace == "close" else danger.traced_run(
        danger.CHOICES["at least once"])
    ops = danger.operations(marks)
    windows = danger.danger_windows(ops)
    pages = tuple(windows["page"])[:3]
    fig = danger.plot_window_timeline(ops, windows, pages=pages)
    labels = [t for ax in fig.axes for t in ax.texts if t.get_gid() == danger.WINDOW_LABEL]
    assert len(labels) == len(windows)
    assert danger.label_overlaps(fig) == []


# --- practice --------------------------------------------------------------------------------------

def test_practice_draws_only_configurations_the_lesson_did_not_run():
    ran = set(danger.SWEEPS.values()) | {danger.ABORT_WITH_KEY}
    for seed in range(50):
        p = danger.practice_problem(seed)
        config = p.drawn["config"]
        assert config not in ran and config.pages != 12, (seed, config)
        assert str(config.pages) in p.setting


def test_practice_answers_are_measured_live(monkeypatch):
    """The mutant: a measure that returns a stored number is caught, because the answer follows
    the run: with the sweep patched to find one duplicate, the count is 1."""
    seed = next(s for s in range(50) if danger.practice_problem(s).drawn["kind"] == "duplicates")
    p = danger.practice_problem(seed)
    real = p.measure().value
    fake = [r for r in results.sweep_once(p.drawn["config"])][:1]
    import dataclasses
    fake = [dataclasses.replace(fake[0], duplicate_reports=1)]
    monkeypatch.setattr(danger.results, "sweep_once", lambda config: fake)
    assert p.measure().value == 1 and isinstance(real, int)
