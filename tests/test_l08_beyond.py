"""Lesson 8's lab layer: tables without machine paths, figures, the panel, the exercises."""

import re

import pytest
from matplotlib.figure import Figure

from bughunt import beyond as B
from bughunt.lab.lessons import l08_beyond as beyond
from bughunt.lab.judges import EXERCISES, judge
from bughunt.lab.panel import in_widget_words
from bughunt.lab.views import plain_message


def test_tidy_removes_machine_paths_but_keeps_file_and_reason():
    msg = "bughunt: /tmp/bughunt-x1/k003: cannot write events.jsonl: No space left on device"
    assert plain_message(msg) == "k003: cannot write events.jsonl: No space left on device"


def test_fault_tables_name_the_failing_file_and_show_every_k_recovered():
    disk = beyond.disk_full(B.SAFE.replace(pages=3))
    table = beyond.fault_table(disk)
    assert list(table.index) == list(range(1, len(disk) + 1))
    assert set(table["failing file"]) == {"config.json.tmp", "events.jsonl"}
    assert table["correct_after_resume"].all() and not disk.message.str.contains("/tmp/").any()
    fsync = beyond.fsync_failures(B.SAFE.replace(pages=3, fsync="always"))
    files = list(beyond.fault_table(fsync)["failing file"])
    assert files[:3] == ["config.json.tmp", "the run directory", "the run directory"]
    assert "the" not in files and None not in files
    summary = beyond.fault_summary(write=disk, fsync=fsync).df
    assert summary.loc[("fsync", "the run directory"), "k"] == "2-3"
    assert (summary["correct after resume"] == summary["runs"]).all()


def test_a_fault_summary_that_counts_more_runs_than_it_has_is_refused():
    # a mutant of the summary's arithmetic: a row claims more correct resumes than runs
    from bughunt.lab.claims import TableError
    from bughunt.lab.views import Table

    df = beyond.fault_summary(write=beyond.disk_full(B.SAFE.replace(pages=3))).df.copy()
    df.iloc[0, df.columns.get_loc("correct after resume")] = int(df.iloc[0]["runs"]) + 1
    with pytest.raises(TableError, match="'correct after resume' is .*more than 'runs'"):
        Table(df, "full disk and failed fsync", beyond.FAULT_COUNTS)


def test_failing_file_reads_every_message_the_worker_writes():
    assert beyond.failing_file("RUN_DIR: fsync failed (I/O error); stopping") == \
        "the run directory"
    assert beyond.failing_file("RUN_DIR/events.jsonl: fsync failed (I/O error)") == \
        "events.jsonl"
    assert beyond.failing_file("RUN_DIR/config.json.tmp: cannot write (No space left on "
                               "device); stopped") == "config.json.tmp"


def test_a_paused_holder_and_a_forked_child_both_keep_the_run_lock():
    """flock belongs to the open file: a stopped holder keeps it, and so does a forked child after
    its parent's SIGKILL; the run is free again only once the child has ended."""
    paused = B.paused_holder(B.SAFE.replace(pages=3))
    assert paused["second worker exit"] == 75 and "run is busy" in paused["second worker says"]
    inherited = B.inherited_lock(B.SAFE.replace(pages=3))
    assert inherited["holder"].startswith("killed by signal 9")
    assert inherited["worker while the child lives: exit"] == 75
    assert inherited["worker after the child ended: exit"] == 0
    table = beyond.lock_demos(B.SAFE.replace(pages=3))
    assert list(table["a second worker"]) == ["exit 75: run is busy: another worker holds "
                                              "run.lock"] * 2


def test_damage_demo_refuses_inner_damage_and_skips_a_torn_tail():
    df = beyond.damage_demo()
    assert df.loc["log: one bit flipped in line 5", "recovery gives"] == "refused"
    assert "checksum" in df.loc["log: one bit flipped in line 5", "detail"]
    assert df.loc["log: tail cut off mid-record", "recovery gives"].startswith("an earlier state")
    assert df.loc["snapshot: cut in half", "detail"] == "snapshot fallback: log"


@pytest.mark.slow
def test_race_table_and_plot_from_real_races():
    races = beyond.races(B.SAFE.replace(pages=3), trials=3)
    table = beyond.race_table(races).df
    assert table.loc["flock", "exactly one proceeded"] == 3
    assert table.loc["none (unsafe)", "both proceeded"] == 3
    assert isinstance(beyond.plot_races(races), Figure)


def test_power_and_chain_plots_have_titles_and_labels():
    v = B.Variant("log, fsync always", B.SAFE.replace(pages=3, fsync="always"))
    power = beyond.power_loss((v,), samples_per_cut=1)
    fig = beyond.plot_power(power)
    assert "Power loss" in fig.axes[0].get_title() and fig.axes[0].get_xlabel()
    row = beyond.power_table(power).df.loc[v.name]
    assert row["correct"] == row["states explored"] and row["most committed pages lost"] == 0
    first = B.crash_points(B.SAFE.replace(pages=3))[8]
    import pandas as pd
    chain = pd.DataFrame(B.chain_sweep(B.SAFE.replace(pages=3), pairs=[(first, "p3.after_visit"),
                                                                       (first, "after_repair")]))
    fig = beyond.plot_chain(chain, B.SAFE.replace(pages=3))
    assert "2 of 2 pairs correct" in fig.axes[0].get_title()


@pytest.mark.slow
def test_panel_runs_the_chosen_experiment():
    p = beyond.panel()
    p.experiment.value, p.knobs["lock"].value = "two resumers", False
    df = p.run()
    assert len(df) == 8 and (df["proceeded"] == 2).all()
    assert len(p.out.outputs) == 3 and "Done" in p.status.value and p.error is None
    p.reset()
    assert p.df is None and p.out.outputs == ()


# --- the panel's knobs: only those the experiment uses, each meaning one thing ------------------

def shown_words(p):
    return [w.description for w in p.knob_box.children]


def test_panel_shows_only_the_knobs_of_the_chosen_experiment():
    p = beyond.panel()
    p.experiment.value = "two resumers"
    assert shown_words(p) == ["run lock", "store", "pages"]
    p.experiment.value = "failed fsync"
    assert shown_words(p) == ["store", "idempotency key", "pages"]
    assert "fsync always" in p.fixed.value
    p.experiment.value = "power loss"
    assert shown_words(p) == ["store", "write mode", "fsync", "directory fsync",
                              "idempotency key", "pages"]
    p.knobs["fsync"].value = "never"          # no fsync at all: no directory fsync to drop
    assert "directory fsync" not in shown_words(p)
    p.experiment.value = "crash during recovery"
    assert "pending intent" in shown_words(p) and "run lock" not in shown_words(p)
    p.knobs["intent"].value = False           # no intents: nothing pending to redo or abort
    assert "pending intent" not in shown_words(p)


def test_every_shown_knob_changes_what_runs_and_no_hidden_one_does():
    p = beyond.panel()
    for experiment in beyond.EXPERIMENTS:
        p.reset()
        p.experiment.value = experiment
        for name, knob in p.knobs.items():
            before = p.plan()
            shown = name in p.shown()
            original = knob.value
            other = next(v for v in (knob.options if hasattr(knob, "options") else [4, 5])
                         if (v[1] if isinstance(v, tuple) else v) != original)
            knob.value = other[1] if isinstance(other, tuple) else other
            after = p.plan()
            assert (after != before) == shown, (experiment, name)
            knob.value = original


def test_directory_fsync_off_plants_the_missing_dir_fsync_and_run_lock_does_not():
    p = beyond.panel()
    p.experiment.value = "power loss"
    p.knobs["dir_fsync"].value = False
    assert p.plan()[2] == {"mutant": "no-dir-fsync"}
    p.knobs["dir_fsync"].value, p.knobs["lock"].value = True, False
    assert p.plan()[2] == {"mutant": None}


def test_failed_fsync_always_fsyncs_whatever_the_other_experiments_chose():
    p = beyond.panel()
    p.experiment.value = "disk full"
    p.knobs["fsync"].value = "never"
    assert p.plan()[1].fsync == "never"
    p.experiment.value = "failed fsync"
    assert p.plan()[1].fsync == "always"


def test_config_errors_are_said_in_the_widgets_words():
    from bughunt.config import ConfigError, RunConfig
    bad = [dict(store="x"), dict(write_mode="x"), dict(fsync="x"), dict(pending="x"),
           dict(pages=0), dict(snapshot_every=-1), dict(store="snapshot", snapshot_every=2),
           dict(granularity="op"), dict(granularity="x"), dict(intent="on")]
    for kw in bad:
        try:
            RunConfig(**kw)
        except ConfigError as e:
            said = in_widget_words(str(e))
            assert "--" not in said and said[0].isupper() and said.endswith("."), said
        else:
            raise AssertionError(f"RunConfig({kw}) was accepted")
    assert in_widget_words("--snapshot-every applies to --store log only") == \
        "The 'snapshot every' setting applies to the log store only."


def test_panel_says_why_settings_cannot_run_and_swallows_nothing(monkeypatch):
    from bughunt.config import ConfigError
    p = beyond.panel()
    p.experiment.value = "disk full"

    def refuse():
        raise ConfigError("pages", "must be at least 1")
    monkeypatch.setattr(p, "plan", refuse)
    p.run_button.click()
    assert p.status.value == "These settings cannot run. The 'pages' setting must be at least 1."
    assert isinstance(p.error, ConfigError) and p.df is None

    def worker_fails(*args):
        raise RuntimeError("journaled run failed: bughunt: /tmp/bughunt-x/run: --write-mode "
                           "must be one of atomic, torn, no-newline")
    monkeypatch.undo()
    monkeypatch.setattr(p, "_execute", worker_fails)
    p.run_button.click()
    assert p.status.value == ("The experiment stopped. Journaled run failed: run: the 'write mode' "
                              "setting must be one of atomic, torn, no-newline.")
    assert isinstance(p.error, RuntimeError)

    def broken(*args):
        raise KeyError("after_abort")
    monkeypatch.undo()
    monkeypatch.setattr(p, "_execute", broken)
    p.run_button.click()
    assert p.status.value.startswith("The lab failed (KeyError)")
    assert "Traceback" in p.details.outputs[-1]["text"] and isinstance(p.error, KeyError)


@pytest.mark.slow
def test_exercises_8_accept_the_measured_truth_only():
    assert judge("8.1", 10) and not judge("8.1", 1) and not judge("8.1", "10")
    assert judge("8.2", 6) and not judge("8.2", 5) and not judge("8.2", True)
    broken = ["kill-keeps-acknowledged", "fsync-keeps-acknowledged"]
    assert judge("8.3", broken) and judge("8.3", tuple(reversed(broken)))
    assert not judge("8.3", broken[:1]) and not judge("8.3", [])
    assert not judge("8.3", broken + ["load-reads-only"])
    assert not judge("8.3", "kill-keeps-acknowledged, fsync-keeps-acknowledged")


def test_transfer_8_3_is_measured_on_the_torn_snapshot_and_the_safe_design_breaks_nothing():
    torn = beyond.conformance(beyond.TORN_SNAPSHOT)
    assert torn.broken() == ["kill-keeps-acknowledged", "fsync-keeps-acknowledged"]
    assert beyond.conformance(beyond.SUITE_DESIGN).broken() == []
    table = beyond.conformance_table(torn)
    assert "crash states" in table.columns.name and len(table) == len(beyond.contract_rules())


def test_planted_bug_cards_show_each_diff_and_both_verdicts():
    import pandas as pd
    table = pd.DataFrame([
        {"bug": "no-dir-fsync", "what it does": "skips the directory fsync", "caught by":
         "power-loss sweep", "caught": True, "failures, with the bug": 3,
         "failures, correct worker": 0, "conformance suite": "fsync-keeps-acknowledged"},
        {"bug": "no-lock", "what it does": "takes no run lock", "caught by": "two resumers",
         "caught": False, "failures, with the bug": 0, "failures, correct worker": 0,
         "conformance suite": "no store rule broken"}]).set_index("bug")
    text = beyond.planted_bug_cards(table)._repr_markdown_()
    assert "**1. `no-dir-fsync`**" in text and "breaks `fsync-keeps-acknowledged`" in text
    assert "**NOT caught**: 0 failures" in text and "only a sweep of real processes" in text
    assert text.count("```diff") == 2 and "_fsync_dir" in text


QUIZ_8 = {"Q8.1": False, "Q8.2": False, "Q8.3": False}


@pytest.mark.slow
@pytest.mark.parametrize("id", sorted(QUIZ_8))
def test_quiz_8_is_judged_by_a_run_made_just_now_and_explained_with_it(id):
    truth = QUIZ_8[id]
    right, feedback = EXERCISES[id].judge(truth)
    assert right, feedback
    assert f"The statement is {'true' if truth else 'false'}." in feedback
    assert re.search(r"(Measured|Simulated) (just now|in section)", feedback)
    assert re.search(r"\d", feedback)
    assert not EXERCISES[id].judge(not truth)[0] and not EXERCISES[id].judge("False")[0]


def test_q8_1_counts_the_duplicate_report_the_lock_lets_through():
    right, feedback = EXERCISES["Q8.1"].judge(False)
    assert "1 went on, 1 refused as busy" in feedback and "1 duplicate report(s)" in feedback


@pytest.mark.slow
def test_q8_3_names_the_bugs_no_power_cut_shows():
    seen = beyond.power_exposure()
    assert {b for b, (wrong, _) in seen.items() if not wrong} == {
        "repair-not-idempotent", "submit-before-intent", "no-lock"}
    assert beyond.cuts_for_95(1, 1) == 1 and beyond.cuts_for_95(1, 2) == 5
    assert beyond.cuts_for_95(4, 38) > beyond.cuts_for_95(37, 75)


# --- the power table adds up; claims; practice ------------------------------------------------------

def _power_records():
    """Power-loss records as a DataFrame holds them: a refusal is a message, none is NaN."""
    import pandas as pd

    rows = []
    for variant, n, correct, refused, lost in (("safe", 4, 4, 0, 0), ("no fsync", 6, 2, 2, 2)):
        for i in range(n):
            r = {"variant": variant, "correct": i < correct, "duplicate_reports": 0,
                 "refused": "snapshot.json: not JSON" if correct <= i < correct + refused
                 else None,
                 "committed_pages_lost": 0 if i < correct else 2}
            rows.append(r)
    df = pd.DataFrame(rows)
    df["refused"] = df["refused"].astype("str").where(df["refused"].notna())   # pandas 3: NaN
    return df


def test_the_power_table_partitions_the_states():
    t = beyond.power_table(_power_records()).df
    assert t.loc["no fsync"].to_dict() == {
        "states explored": 6, "correct": 2, "refused by recovery": 2,
        "lost committed pages silently": 2, "wrong otherwise": 0, "most committed pages lost": 2,
        "states with duplicates": 0}


def test_the_old_pandas_3_counting_breaks_the_power_tables_invariant():
    # the counting lesson 8 once shipped: `r["refused"] is not None`, on DataFrame rows, where a
    # missing refusal is NaN; every state counted refused ("32 explored, 32 correct, 32 refused")
    from bughunt.lab.claims import TableError

    records = _power_records()
    assert records["refused"].isna().any()
    with pytest.raises(TableError, match=r"the table 'power loss' does not add up: row 'safe': "
                                         r"correct 4 \+ refused by recovery 4"):
        beyond.power_table(records, refused=lambda r: r["refused"] is not None)


@pytest.mark.slow
def test_every_claim_of_lesson_8_holds_and_a_broken_run_is_said(monkeypatch):
    found = beyond.CLAIMS.check_all()
    assert len(found) >= 5 and all(f.holds for f in found), [f for f in found if not f.holds]
    broken = beyond.disk_full().assign(exit=1)               # a mutant: no failure exits 74
    monkeypatch.setattr(beyond, "disk_full", lambda: broken)
    finding = beyond.CLAIMS["faults_stop_and_lose_nothing"].on()
    assert not finding.holds and "did not hold" in finding.markdown()


def test_practice_draws_only_configurations_the_lesson_did_not_run():
    runs = beyond.lesson_runs()
    drawn = [beyond.practice_problem(seed) for seed in range(50)]
    for p in drawn:
        assert beyond.practice_run(p) not in runs, (p.seed, p.drawn)
    assert len({p.setting + p.question for p in drawn[:20]}) >= 8
    assert {p.drawn["kind"] for p in drawn} == {"write fails", "fsync fails", "power loss"}


def test_practice_answer_is_the_file_the_worker_names_now(monkeypatch):
    p = next(beyond.practice_problem(s) for s in range(50)
             if beyond.practice_problem(s).drawn["kind"] == "write fails")
    truth = p.measure().value
    assert truth in beyond.FAILING_FILES and p.check(truth)[0]
    # a mutant of the measure: another message, another verdict: nothing is stored
    real = B.fault_record
    monkeypatch.setattr(B, "fault_record", lambda *a: {
        **real(*a), "message": "bughunt: RUN_DIR/zzz.json: cannot write (injected)"})
    assert not p.check(truth)[0]
