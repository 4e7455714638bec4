"""Lesson 8's lab layer: tables without machine paths, figures, the panel, the exercises."""

from matplotlib.figure import Figure

from bughunt import beyond as B
from bughunt.lab import beyond
from bughunt.lab.exercises import judge


def test_tidy_removes_machine_paths_but_keeps_file_and_reason():
    msg = "bughunt: /tmp/bughunt-x1/k003: cannot write events.jsonl: No space left on device"
    assert beyond.tidy(msg) == "k003: cannot write events.jsonl: No space left on device"


def test_fault_tables_name_the_failing_file_and_show_every_k_recovered():
    disk = beyond.disk_full(B.SAFE.replace(pages=3))
    table = beyond.fault_table(disk)
    assert list(table.index) == list(range(1, len(disk) + 1))
    assert set(table["failing file"]) <= {"config.json.tmp", "events.jsonl"}
    assert table["correct_after_resume"].all() and not disk.message.str.contains("/tmp/").any()
    fsync = beyond.fsync_failures(B.SAFE.replace(pages=3, fsync="always"))
    files = set(beyond.fault_table(fsync)["failing file"])
    assert "(the run directory)" in files and "the" not in files
    assert isinstance(beyond.plot_faults(disk, fsync), Figure)


def test_damage_demo_refuses_inner_damage_and_skips_a_torn_tail():
    df = beyond.damage_demo()
    assert df.loc["log: one bit flipped in line 5", "recovery gives"] == "refused"
    assert "checksum" in df.loc["log: one bit flipped in line 5", "detail"]
    assert df.loc["log: tail cut off mid-record", "recovery gives"].startswith("an earlier state")
    assert df.loc["snapshot: cut in half", "detail"] == "snapshot fallback: log"


def test_race_table_and_plot_from_real_races():
    races = beyond.races(B.SAFE.replace(pages=3), trials=3)
    table = beyond.race_table(races)
    assert table.loc["flock", "exactly one proceeded"] == 3
    assert table.loc["none (unsafe)", "both proceeded"] == 3
    assert isinstance(beyond.plot_races(races), Figure)


def test_power_and_chain_plots_have_titles_and_labels():
    v = B.Variant("log, fsync always", B.SAFE.replace(pages=3, fsync="always"))
    power = beyond.power_loss([v], samples_per_cut=1)
    fig = beyond.plot_power(power)
    assert "Power loss" in fig.axes[0].get_title() and fig.axes[0].get_xlabel()
    assert beyond.power_table(power).loc[v.name, "states losing committed pages"] == 0
    first = B.crash_points(B.SAFE.replace(pages=3))[8]
    import pandas as pd
    chain = pd.DataFrame(B.chain_sweep(B.SAFE.replace(pages=3), pairs=[(first, "p3.after_visit"),
                                                                       (first, "after_repair")]))
    fig = beyond.plot_chain(chain, B.SAFE.replace(pages=3))
    assert "2 of 2 pairs correct" in fig.axes[0].get_title()


def test_panel_runs_the_chosen_experiment():
    p = beyond.panel()
    p.experiment.value, p.lock.value = "two resumers", False
    df = p.run()
    assert len(df) == 8 and (df["proceeded"] == 2).all()
    assert len(p.out.outputs) == 3 and "Done" in p.status.value
    p.reset()
    assert p.df is None and p.out.outputs == ()


def test_exercises_8_accept_the_truth_only():
    assert judge("8.1", True) and not judge("8.1", False)
    assert judge("8.2", 1) and not judge("8.2", 2)
