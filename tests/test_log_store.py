"""The log store: newline repair, torn fragments skipped and counted, damage refused unchanged."""

import hashlib
import importlib
import inspect

import pytest

from bughunt.config import RunConfig
from bughunt.diskio import Door
from bughunt.stores import LOG_FILE, StoreDamage, make_store, records
from bughunt.stores.log import ensure_newline_terminated

from conftest import report, run

LOG = RunConfig(store="log", intent=True)


def test_newline_repair_is_idempotent(tmp_path):
    # Codex's append_repair_terminates_nonempty_rollout_tail: open twice, exactly one newline.
    path = tmp_path / LOG_FILE
    path.write_bytes(b'{"seq":1,"t":"page_do')
    door = Door()
    assert ensure_newline_terminated(path, door) is True
    assert ensure_newline_terminated(path, door) is False
    assert path.read_bytes() == b'{"seq":1,"t":"page_do\n'


def test_newline_repair_leaves_empty_and_missing_files_alone(tmp_path):
    door = Door()
    assert ensure_newline_terminated(tmp_path / "missing.jsonl", door) is False
    assert not (tmp_path / "missing.jsonl").exists()
    (tmp_path / "empty.jsonl").write_bytes(b"")
    assert ensure_newline_terminated(tmp_path / "empty.jsonl", door) is False
    assert (tmp_path / "empty.jsonl").read_bytes() == b""


def test_torn_mode_mid_commit_leaves_half_a_record_on_disk(run_dir):
    config = LOG.replace(write_mode="torn")
    proc = run(run_dir, config, "--crash-at", "3")          # page 1, mid_commit
    assert proc.returncode == -9
    data = (run_dir / LOG_FILE).read_bytes()
    whole = records.encode({"t": "page_done", "page": 1, "tokens": _tokens(run_dir, 1),
                            "finding": False, "seq": 1})
    assert data == whole[: len(whole) // 2] and not data.endswith(b"\n")


def _tokens(run_dir, page):
    import json
    return [json.loads(l)["tokens"] for l in (run_dir / "bill.jsonl").read_text().splitlines()
            if json.loads(l)["page"] == page][0]


def test_atomic_mode_mid_commit_leaves_no_byte_of_the_record(run_dir):
    proc = run(run_dir, LOG, "--crash-at", "3")
    assert proc.returncode == -9
    assert (run_dir / LOG_FILE).read_bytes() == b""


def test_resume_after_torn_write_repairs_skips_and_counts(run_dir):
    config = LOG.replace(write_mode="torn")
    assert run(run_dir, config, "--crash-at", "13").returncode == -9   # page 3, mid_commit
    r = report(run(run_dir, config, "--json"))
    assert r["tails_repaired"] == 1 and r["torn_lines_skipped"] == 1
    assert r["findings"] == [3, 7, 10]
    again = make_store(run_dir, config).load()       # the fragment is now a line of its own
    assert again.torn_lines_skipped == 1 and again.state == r["state"]


def test_no_newline_mode_glues_the_next_record_onto_the_fragment(run_dir):
    config = LOG.replace(write_mode="no-newline")
    assert run(run_dir, config, "--crash-at", "7").returncode == -9    # page 2, mid_commit
    r = report(run(run_dir, config, "--json"))
    assert r["tails_repaired"] == 0 and r["state"]["next_page"] == 13
    with pytest.raises(StoreDamage, match=r"events\.jsonl:3: expected event seq 2, found 3"):
        make_store(run_dir, config).load()


def test_no_newline_is_an_instrument_the_configuration_chooses_not_a_switch_in_the_store(
        tmp_path):
    from bughunt.instruments.no_newline import NoNewlineLogStore
    from bughunt.stores import store_for
    from bughunt.stores.log import LogStore

    assert store_for(LOG.replace(write_mode="no-newline")) is NoNewlineLogStore
    assert store_for(LOG.replace(write_mode="torn")) is LogStore is store_for(LOG)
    assert issubclass(NoNewlineLogStore, LogStore)
    assert [m for m in vars(NoNewlineLogStore) if not m.startswith("__")] == ["repair_tail"]
    source = inspect.getsource(importlib.import_module("bughunt.stores.log"))
    assert '"no-newline"' not in source          # no write mode compared with the bug's name
    # The same fragment on disk: the store repairs it before appending, the instrument does not.
    for cls, repaired in ((LogStore, 1), (NoNewlineLogStore, 0)):
        run_dir = tmp_path / cls.__name__
        run_dir.mkdir()
        (run_dir / LOG_FILE).write_bytes(b'{"seq":1,"t":"page_do')
        store = cls(run_dir, LOG.replace(write_mode="torn"), Door())
        store.load()
        assert store.open_for_append().tails_repaired == repaired
        store.close()
        assert (run_dir / LOG_FILE).read_bytes().endswith(b"\n") == bool(repaired)


def test_the_no_newline_trap_is_right_now_and_caught_only_by_a_rebuild_from_disk(tmp_path):
    from bughunt.experiment import crash_and_resume, crash_point

    runs = {}
    for mode in ("no-newline", "torn"):
        config = LOG.replace(write_mode=mode)
        runs[mode] = crash_and_resume(config, crash_point(config, "p2.mid_commit"), tmp_path / mode)
    trap, repaired = runs["no-newline"], runs["torn"]
    # The resumed run is right: nothing twice, nothing lost, the tracker agrees with its memory.
    assert trap.resumed_right and trap.duplicate_reports == trap.lost_reports == 0
    # Only the third witness sees the record glued onto the fragment and lost with it.
    assert trap.verdict == "rebuild fails" and "a record is missing" in trap.disk_error
    assert trap.tails_repaired == 0 and repaired.tails_repaired == 1
    assert repaired.verdict == "correct" and repaired.resumed_right


def _clean_log(run_dir):
    report(run(run_dir, LOG, "--json"))
    return (run_dir / LOG_FILE).read_bytes().splitlines(keepends=True)


@pytest.mark.parametrize("damage, line, message", [
    (lambda ls: ls[:4] + ls[5:], 5, "expected event seq 5, found 6: a record is missing"),
    (lambda ls: ls[:5] + ls[4:], 6, "expected event seq 6, found 5: a record is repeated"),
    (lambda ls: ls[:4] + [ls[5], ls[4]] + ls[6:], 5, "expected event seq 5, found 6"),
    (lambda ls: ls[:2] + [ls[2].replace(b'"page":3', b'"page":4')] + ls[3:], 3, "damaged record"),
])
def test_damaged_log_is_refused_with_file_and_line_and_left_unchanged(run_dir, damage, line,
                                                                       message):
    lines = _clean_log(run_dir)
    path = run_dir / LOG_FILE
    path.write_bytes(b"".join(damage(lines)))
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    proc = run(run_dir, LOG)
    assert proc.returncode == 2
    assert f"{path}:{line}:" in proc.stderr and message in proc.stderr
    assert "nothing was changed" in proc.stderr
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_a_snapshot_reaching_past_the_log_is_refused(run_dir):
    config = LOG.replace(snapshot_every=4)
    report(run(run_dir, config, "--json"))
    path = run_dir / LOG_FILE
    path.write_bytes(path.read_bytes()[:40])
    proc = run(run_dir, config)
    assert proc.returncode == 2 and "the snapshot reaches byte" in proc.stderr


def test_recovery_replays_only_the_events_after_the_snapshot(run_dir):
    config = LOG.replace(snapshot_every=4)
    assert run(run_dir, config, "--crash-at", "28").returncode == -9    # page 7, after_visit
    r = report(run(run_dir, config, "--json"))
    assert r["snapshot_used"] and r["replayed_events"] == 2             # page_done 5 and 6
    assert r["findings"] == [3, 7, 10]


def test_torn_snapshot_falls_back_to_the_whole_log_and_says_so(run_dir):
    config = LOG.replace(snapshot_every=4)
    assert run(run_dir, config, "--crash-at", "28").returncode == -9
    snap = run_dir / "snapshot.json"
    snap.write_bytes(snap.read_bytes()[:30])
    proc = run(run_dir, config, "--json")
    r = report(proc)
    assert r["snapshot_fallback"] == "log" and r["replayed_events"] == 7
    assert "unusable snapshot" in proc.stderr and r["findings"] == [3, 7, 10]


def _flip_page_digit(line: bytes) -> bytes:
    i = line.index(b'"page":') + len(b'"page":')
    return line[:i] + bytes([line[i] ^ 1]) + line[i + 1:]


def test_recovery_reads_only_the_log_after_the_snapshot_and_names_lines_right(run_dir):
    config = LOG.replace(snapshot_every=4)
    assert run(run_dir, config, "--crash-at", "28").returncode == -9    # page 7, after_visit
    path = run_dir / LOG_FILE
    lines = path.read_bytes().splitlines(keepends=True)                  # 7 events; snapshot at 5
    behind = lines[:1] + [_flip_page_digit(lines[1])] + lines[2:]
    path.write_bytes(b"".join(behind))
    assert make_store(run_dir, config).load().state["next_page"] == 7   # line 2 is never read
    after = lines[:6] + [_flip_page_digit(lines[6])]
    path.write_bytes(b"".join(after))
    with pytest.raises(StoreDamage, match=r"events\.jsonl:7: damaged record \(checksum"):
        make_store(run_dir, config).load()
