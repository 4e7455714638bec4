"""Lesson 8: crash during recovery, two resumers, disk full, failed fsync, power loss, planted bugs.

Sized for CI (3- or 4-page sites); the notebook and the benchmarks run the full sweeps.
"""

import base64

import pytest

from bughunt import beyond as B
from bughunt.experiment import crash_points
from bughunt.powerloss import crash_states

SMALL = B.SAFE.replace(pages=3)            # one bug page, 14 crash points


@pytest.mark.slow
def test_a_crash_during_recovery_loses_and_duplicates_nothing():
    points = crash_points(SMALL)
    page3 = [p for p in points if p.page == 3]
    pairs = [(f, s) for f in page3 for s in [str(p.index) for p in page3] + ["after_repair"]]
    records = B.chain_sweep(SMALL, pairs=pairs)
    summary = B.chain_summary(records)
    assert summary["pairs"] == len(pairs) and summary["second crash really happened"] > 20
    assert summary["correct"] == len(pairs), [r for r in records if not r["correct"]][:2]


def test_resuming_twice_ends_where_resuming_once_does_with_abort_too():
    config = SMALL.replace(pending="abort")
    first = next(p for p in crash_points(config) if p.label == "after_intent")
    records = B.chain_sweep(config, pairs=[(first, "after_abort"), (first, "after_repair")])
    for r in records:
        assert r["second_killed"] and r["same_as_single"] and not r["noop_resume_changed_files"]
        assert r["final_state"]["aborted"] == [3]          # aborted once, not twice


@pytest.mark.slow
def test_two_resumers_with_the_lock_exactly_one_proceeds_every_time():
    records = B.two_resumers(SMALL, trials=6, seed=3)
    assert all(r["exactly_one"] and r["three_way_check"] for r in records)
    assert all(r["duplicate_events"] == 0 for r in records)


def test_two_resumers_without_the_lock_fork_the_log():
    records = B.two_resumers(SMALL, trials=3, seed=3, lock=False)
    assert all(r["proceeded"] == 2 for r in records)
    assert all(r["duplicate_events"] > 0 and r["rebuild_refused"] for r in records)


@pytest.mark.parametrize("errno_name", ["ENOSPC", "EFBIG"])
def test_a_failed_write_at_every_k_stops_clearly_and_the_next_resume_finishes(errno_name):
    records = B.disk_full_sweep(SMALL, errno_name=errno_name)
    assert len(records) >= 5
    for r in records:
        assert r["exit"] == 74 and r["names_the_file"], r["message"]
        assert ("No space left" if errno_name == "ENOSPC" else "too large") in r["message"]
        assert r["acknowledged_kept"] and r["correct_after_resume"], r


def test_a_failed_fsync_is_fatal_and_never_retried():
    records = B.fsync_failure_sweep(SMALL.replace(fsync="always"))
    assert len(records) >= 5
    for r in records:
        assert r["exit"] == 74 and "without retrying" in r["message"]
        assert not r["retried"] and r["fsyncs_after_failure"] == r["k"] - 1
        assert r["correct_after_resume"]


def _journal(*ops):
    return [dict(op) for op in ops]


def _write(path, offset, data):
    return {"op": "write", "path": path, "offset": offset, "data": base64.b64encode(data).decode()}


def test_power_loss_model_keeps_only_what_was_synced_and_may_tear_the_last_write():
    journal = _journal({"op": "create", "path": "f"}, {"op": "fsync_dir"},
                       _write("f", 0, b"aaaa\n"), {"op": "fsync", "path": "f"},
                       _write("f", 5, b"bbbb\n"))
    final = [s for s in crash_states(journal, samples_per_cut=20, dedupe=False)
             if s.cut == len(journal)]
    contents = {s.files["f"] for s in final}
    assert contents == {b"aaaa\n", b"aaaa\nbb", b"aaaa\nbbbb\n"}


def test_power_loss_model_may_lose_a_rename_without_a_directory_fsync():
    journal = _journal({"op": "create", "path": "old"}, {"op": "fsync_dir"},
                       _write("old", 0, b"x"), {"op": "fsync", "path": "old"},
                       {"op": "rename", "src": "old", "dst": "new"})
    names = {tuple(sorted(s.files)) for s in crash_states(journal, dedupe=False)
             if s.cut == len(journal)}
    assert names == {("old",), ("new",)}
    synced = journal + [{"op": "fsync_dir"}]
    names = {tuple(sorted(s.files)) for s in crash_states(synced, dedupe=False)
             if s.cut == len(synced)}
    assert names == {("new",)}


@pytest.mark.parametrize("variant", [v for v in B.POWER_VARIANTS if "atomic, fsync always" in v.name
                                     and not v.mutant], ids=lambda v: v.name)
def test_fsync_always_with_atomic_writes_loses_no_committed_page_on_power_loss(variant):
    v = B.Variant(variant.name, variant.config.replace(pages=4))
    summary = B.power_summary(B.power_loss_sweep(v, samples_per_cut=2))
    assert summary["states explored"] > 10
    assert summary["states losing committed pages"] == 0 and summary["correct"] == \
        summary["states explored"]


@pytest.mark.parametrize("variant", [v for v in B.POWER_VARIANTS if v.mutant or "never" in v.name
                                     or "torn" in v.name], ids=lambda v: v.name)
def test_weaker_variants_lose_committed_pages_on_power_loss(variant):
    v = B.Variant(variant.name, variant.config.replace(pages=4), variant.mutant)
    assert B.power_summary(B.power_loss_sweep(v, samples_per_cut=2))[
        "states losing committed pages"] > 0


@pytest.mark.slow
def test_every_planted_bug_is_caught_by_its_sweep_and_the_correct_worker_passes():
    records = B.planted_bugs(pages=3)
    assert [r["bug"] for r in records] == list(B.CHECKS)
    for r in records:
        assert r["failures, correct worker"] == 0, r
        assert r["caught"], r
    suite = {r["bug"]: r["conformance suite"] for r in records}
    assert suite["no-fsync"] == suite["no-dir-fsync"] == "fsync-keeps-acknowledged"
    assert suite["repair-not-idempotent"] == "repair-is-idempotent"
    assert suite["no-key"] == suite["no-lock"] == "no store rule broken"
    assert B.suite_verdict(None) == "no store rule broken"      # no false alarm on real code


def test_power_summary_of_dataframe_rows_counts_only_real_refusals():
    # pandas 3 stores a missing message as NaN, not None, in a column that also holds a string:
    # a summary of DataFrame rows must not count it (lesson 8's table once said "32 explored,
    # 32 correct, 32 refused").
    import pandas as pd

    row = {"correct": True, "refused": None, "committed_pages_lost": 0, "duplicate_reports": 0}
    records = [row, row, {**row, "correct": False, "refused": "events.jsonl: line 2 is torn"}]
    s = B.power_summary(pd.DataFrame(records).to_dict("records"))
    assert s == B.power_summary(records)
    assert (s["states explored"], s["correct"], s["refused"]) == (3, 2, 1)
