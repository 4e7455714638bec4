"""The panel, driven as a learner drives it: set values, click buttons, read widget state."""

import pandas as pd
import pytest

from bughunt.config import RunConfig
from bughunt.experiment import summarize, sweep_records
from bughunt.lab.lessons import l02_granularity as granularity
from bughunt.crashpoints import NoSuchPoint
from bughunt.lab import results
from bughunt.lab.crash_panel import CrashPanel, slug
from bughunt.lab.plots import plot_points

SMALL = RunConfig(store="snapshot", intent=False, pages=4)    # 17 crash points


@pytest.fixture
def panel(tmp_path):
    results.reset()
    return CrashPanel(name="test", base=SMALL, plot=plot_points, results_dir=tmp_path,
                      knobs=["checkpoint", "write_mode", "idempotency_key", "intent"])


def test_slider_runs_one_real_crash_and_shows_it(panel):
    panel.crash_point.value = "p3.after_submit"
    assert panel.record.crash_point == "p3.after_submit"
    assert panel.record.redone_model_calls == 1 and panel.record.duplicate_reports == 0
    assert "p3.after_submit" in panel.point_info.value
    assert "three-way check" in panel.point_info.value


def test_run_sweeps_draws_and_matches_a_direct_call(panel):
    panel.controls["idempotency_key"].value = False
    df = panel.run()
    assert len(df) == 17 and panel.progress.value == panel.progress.max == 17
    assert len(panel.out.outputs) == 2                   # the figure, then the summary table
    assert panel.out.outputs[0]["data"]["image/png"]
    direct = summarize(sweep_records(SMALL.replace(idempotency_key=False)))
    assert summarize(df) == direct
    assert f"{direct['duplicate_points']} with a duplicate" in panel.status.value
    assert not panel.run_button.disabled


def test_knobs_change_the_configuration_and_the_slider_range(panel):
    assert len(panel.crash_point.options) == 17
    panel.controls["intent"].value = True
    assert panel.config.intent and len(panel.crash_point.options) == 18
    assert "p3.after_intent" in panel.crash_point.options
    panel.controls["checkpoint"].value = "op"
    assert panel.config.granularity == "op" and panel.config.store == "snapshot"
    panel.controls["checkpoint"].value = "none"
    assert panel.config.store == "none"


def test_reset_restores_the_lesson_settings_and_clears_results(panel):
    panel.controls["write_mode"].value = "torn"
    panel.run()
    panel.reset()
    assert panel.config == SMALL and panel.df is None and panel.out.outputs == ()
    assert panel.export_button.disabled


def test_export_writes_the_last_sweep_as_csv(panel, tmp_path):
    assert panel.export() is None
    panel.run()
    path = panel.export()
    assert path.parent == tmp_path and slug(SMALL) in path.name
    assert len(pd.read_csv(path)) == 17


def test_flipping_intent_keeps_the_named_point_and_says_when_it_cannot(panel):
    panel.crash_point.value = "p4.after_visit"
    panel.controls["intent"].value = True        # every number after page 3 shifts by one
    assert panel.crash_point.value == "p4.after_visit"
    assert panel.record.crash_point == "p4.after_visit" and panel.record.index == 16
    assert panel.point_note == ""
    panel.crash_point.value = "p3.after_intent"
    panel.controls["intent"].value = False       # that point does not exist without intents
    assert panel.crash_point.value == "p3.after_submit"
    assert "p3.after_intent does not exist" in panel.status.value
    assert "p3.after_submit" in panel.status.value
    assert panel.record.crash_point == "p3.after_submit"


def test_a_panel_refuses_a_default_point_its_settings_lack():
    with pytest.raises(NoSuchPoint, match="intents are off"):
        CrashPanel(name="t", base=SMALL, plot=plot_points, knobs=[],
                   crash_point="p3.after_intent")


def test_cached_point_refuses_numbers_out_of_range():
    for bad in (0, -1, 18):
        with pytest.raises(NoSuchPoint):
            results.point(SMALL, bad)


def test_lesson_2_panel_builds_with_the_lesson_defaults():
    p = granularity.panel()
    assert p.config == granularity.DESIGNS["per page"] and len(p.crash_point.options) == 51
    assert p.knobs == ["checkpoint", "write_mode", "idempotency_key", "intent"]
    assert set(p.controls) == {*p.knobs, "crash_point"}      # the slider is a setting too


def test_settings_that_cannot_run_are_said_in_the_panels_words():
    p2 = CrashPanel(name="t", base=RunConfig(store="log", snapshot_every=2, pages=4),
                    plot=plot_points, knobs=["store", "snapshot_every"])
    p2.controls["store"].value = "snapshot"        # the slider still says 2: it wins
    p2.controls["snapshot_every"].value = 3
    assert p2.run_button.disabled
    assert p2.status.value == ("These settings cannot run. The 'snapshot every' setting applies "
                               "only when the 'store' setting is log (the snapshot store "
                               "snapshots every page).")
    assert "--" not in p2.status.value and "snapshot_every" not in p2.status.value
