"""Damaged durable task databases: every open ends in a refusal naming the file (every byte left as
it was) or in a state the database really passed through (a prefix of its committed transactions).
Never a traceback, never a silently "repaired" different database.

The truth comes from outside the code under test: the scenarios are real processes killed by
SIGKILL, and the states a database passed through are read with plain sqlite3 from copies of it
whose write-ahead log is cut after each commit frame (https://www.sqlite.org/fileformat.html#the_write_ahead_log).
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bughunt.durable import DurableStore, Kind, Runtime, StoreRefused

WAL_HEADER, FRAME_HEADER = 32, 24

SCENARIOS = {
    # name: the processes run in a fresh folder (the last one is killed, or ends cleanly)
    "count killed": [["count", "--to", "5", "--crash-after-tick", "3"]],
    "probe killed": [["tool-probe", "--crash-at", "in-execute"]],
    "count resumed and closed": [["count", "--to", "4", "--crash-after-tick", "2"],
                                 ["count", "--to", "4"]],
}
KINDS = [Kind("count", {"tick": None}), Kind("agent", {"start": None, "tools": None})]


def run_scenario(folder: Path, steps) -> None:
    for args in steps:
        subprocess.run([sys.executable, "-m", "bughunt.durable", args[0], "--db",
                        str(folder / "c.db"), *args[1:]], capture_output=True, timeout=60)


def read_plain(folder: Path) -> list:
    """The tasks, read with plain sqlite3 (not the code under test)."""
    import sqlite3
    db = sqlite3.connect((folder / "c.db").resolve().as_uri() + "?mode=ro", uri=True)
    rows = db.execute("SELECT id, kind, status, record FROM tasks ORDER BY id").fetchall()
    db.close()
    return [json.loads(r[3]) for r in rows]


def committed_states(folder: Path, tmp: Path) -> list:
    """Every state the database passed through that its files still hold: the main file alone,
    then the main file with the write-ahead log cut after each commit frame."""
    wal = folder / "c.db-wal"
    data = wal.read_bytes() if wal.exists() else b""
    cuts = [0]
    if len(data) >= WAL_HEADER:
        page = int.from_bytes(data[8:12], "big")
        for off in range(WAL_HEADER, len(data) - FRAME_HEADER - page + 1, FRAME_HEADER + page):
            if int.from_bytes(data[off + 4:off + 8], "big"):       # a commit frame
                cuts.append(off + FRAME_HEADER + page)
    states = []
    for i, cut in enumerate(cuts):
        copy = tmp / f"cut{i}"
        copy.mkdir()
        shutil.copy(folder / "c.db", copy / "c.db")
        if cut:
            (copy / "c.db-wal").write_bytes(data[:WAL_HEADER] + data[WAL_HEADER:cut])
        states.append(read_plain(copy))
    return states


def recovered(state: list) -> list:
    """What recovery makes of a state: running tasks pending, one more restart."""
    out = []
    for rec in state:
        rec = json.loads(json.dumps(rec))
        if rec["state"]["status"] == "running":
            rec["state"]["status"] = "pending"
            rec["restarts"] = rec.get("restarts", 0) + 1
        out.append(rec)
    return out


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory):
    made = {}
    for name, steps in SCENARIOS.items():
        folder = tmp_path_factory.mktemp(name.replace(" ", "_"))
        run_scenario(folder, steps)
        states = committed_states(folder, tmp_path_factory.mktemp("cuts"))
        assert len(states) >= (1 if "closed" in name else 4), name
        if [] not in states:        # every database began empty (a missing file starts over)
            states.insert(0, [])
        made[name] = (folder, states)
    return made


def files(folder: Path) -> dict:
    """The folder's files and bytes (SQLite's -shm index excepted: it holds no data, and every
    reader may rebuild it)."""
    return {p.name: (p.read_bytes() if p.is_file() else "dir") for p in sorted(folder.iterdir())
            if not p.name.endswith("-shm")}


def check_open(folder: Path, states: list) -> str:
    """Open read-only, then writable with a runtime; each must refuse naming the file with every
    byte unchanged, or see a state in `states`. Returns what happened, for the counts."""
    db = folder / "c.db"
    before = files(folder)
    try:
        with DurableStore(db, read_only=True) as store:
            seen = store.all()
        assert seen in states, f"read-only open saw a state the database never had: {seen}"
        assert files(folder) == before, "a read-only open changed the files"
    except StoreRefused as e:
        assert str(db) in str(e) and "\n" not in str(e), str(e)
        assert files(folder) == before, "a refusal changed the files"
    try:
        store = DurableStore(db)
    except StoreRefused as e:
        assert str(db) in str(e), str(e)
        assert files(folder) == before, "a refused writable open changed the files"
        return "refused"
    try:
        Runtime(store, KINDS)
        after = store.all()
    except StoreRefused:
        store.close(abandon=True)
        assert files(folder) == before, "a refused runtime changed the files"
        return "refused"
    store.close()
    assert after in [recovered(s) for s in states], f"recovered to a state never had: {after}"
    return "accepted"


def damaged_copy(src: Path, dst: Path, target: str, damage) -> Path:
    shutil.copytree(src, dst, dirs_exist_ok=True)
    path = dst / target
    how, a, b, garbage = damage
    if how == "directory":
        path.unlink(missing_ok=True)
        path.mkdir()
        return dst
    if how == "delete":
        path.unlink(missing_ok=True)
        return dst
    data = path.read_bytes()
    n = len(data)
    a, b = sorted((a % (n + 1), b % (n + 1)))
    if how == "truncate":
        data = data[:a]
    elif how == "zero-fill":
        data = data[:a] + bytes(b - a) + data[b:]
    elif how == "garbage":
        data = data[:a] + (garbage * (1 + (b - a) // len(garbage)))[:b - a] + data[b:]
    elif how == "flip-bit" and n:
        i = a % n
        data = data[:i] + bytes([data[i] ^ (1 << (b % 8))]) + data[i + 1:]
    elif how == "append":
        data += garbage
    elif how == "empty":
        data = b""
    path.write_bytes(data)
    return dst


DAMAGE = st.tuples(st.sampled_from(["truncate", "zero-fill", "garbage", "flip-bit", "flip-bit",
                                    "append", "empty", "directory", "delete"]),
                   st.integers(0, 1 << 20), st.integers(0, 1 << 20),
                   st.binary(min_size=1, max_size=64))
SETTINGS = settings(max_examples=120, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.mark.slow
@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("target", ["c.db", "c.db-wal", "c.db-shm", "c.db.lock"])
@SETTINGS
@given(damage=DAMAGE, drop_shm=st.booleans())
def test_a_damaged_database_is_refused_untouched_or_opens_at_a_real_state(
        scenarios, tmp_path_factory, scenario, target, damage, drop_shm):
    src, states = scenarios[scenario]
    if not (src / target).exists():
        target = "c.db"
    folder = damaged_copy(src, tmp_path_factory.mktemp("d"), target, damage)
    if drop_shm and (folder / "c.db-shm").is_file():
        (folder / "c.db-shm").unlink()
    check_open(folder, states)


def _cuts(size: int, step: int) -> list[int]:
    """Every multiple of `step` up to `size`, and a few offsets in between."""
    edges = list(range(0, size + 1, step))
    return sorted({o for e in edges for o in (e, e + 1, e + step // 2, e - 1) if 0 <= o <= size})


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_truncation_at_every_page_boundary_and_between_is_refused_or_a_real_state(
        scenarios, tmp_path_factory, scenario):
    src, states = scenarios[scenario]
    outcomes = {"refused": 0, "accepted": 0}
    page = 4096
    for target, step in (("c.db", page), ("c.db-wal", FRAME_HEADER + page)):
        if not (src / target).exists():
            continue
        size = (src / target).stat().st_size
        for cut in _cuts(size, step):
            if target == "c.db-wal":
                cut = min(size, cut + WAL_HEADER) if cut else 0
            folder = damaged_copy(src, tmp_path_factory.mktemp("t"), target,
                                  ("truncate", cut, cut, b"x"))
            outcomes[check_open(folder, states)] += 1
    assert outcomes["refused"] and outcomes["accepted"], outcomes
    print(scenario, outcomes)


def test_the_oracle_sees_every_commit_of_a_killed_run(scenarios):
    """The truth itself: the killed count passed through ticks 1..3, each a commit."""
    _, states = scenarios["count killed"]
    ns = [s[0]["state"]["checkpoint"]["n"] for s in states if s]
    assert ns[0] == 1 and max(ns) == 3 and states[-1][0]["state"]["status"] == "running"


def _record_span(db: Path) -> tuple[int, int]:
    """Where the (only) task record's JSON text lies in the database file."""
    data = db.read_bytes()
    start = data.index(b'{"id":1,')
    return start, data.index(b"}}", start) + 2


@pytest.mark.slow
def test_a_flipped_bit_or_a_stray_byte_inside_a_record_is_refused_never_believed(
        scenarios, tmp_path_factory):
    """SQLite pages carry no checksum: a flip that keeps the JSON valid ("n":4 -> "n":5) would be
    a state that never was. The record's CRC refuses it; a byte that breaks UTF-8 is refused too."""
    src, states = scenarios["count resumed and closed"]
    start, end = _record_span(src / "c.db")
    data = (src / "c.db").read_bytes()
    outcomes = {"refused": 0, "accepted": 0}
    for offset in range(start, end):
        for new in (data[offset] ^ 1, data[offset] ^ 2, 0x80):
            folder = tmp_path_factory.mktemp("r")
            shutil.copytree(src, folder, dirs_exist_ok=True)
            (folder / "c.db").write_bytes(data[:offset] + bytes([new]) + data[offset + 1:])
            outcomes[check_open(folder, states)] += 1
    assert outcomes["refused"] == 3 * (end - start), outcomes


def test_a_stray_byte_in_the_schema_is_refused(scenarios, tmp_path_factory):
    """The schema's text is read too: a byte that is not UTF-8 there is damage, in a sentence."""
    src, states = scenarios["count resumed and closed"]
    data = (src / "c.db").read_bytes()
    table, index = data.index(b"CREATE TABLE tasks"), data.index(b"CREATE INDEX tasks_status")
    start, end = min(table, index), max(table + 200, index + 40)
    for offset in range(start, end, 3):
        folder = tmp_path_factory.mktemp("s")
        shutil.copytree(src, folder, dirs_exist_ok=True)
        (folder / "c.db").write_bytes(data[:offset] + b"\x80" + data[offset + 1:])
        assert check_open(folder, states) == "refused"


def test_an_index_that_disagrees_with_its_table_is_refused_before_recovery_writes(tmp_path):
    """Every page well formed, every record intact, but the status index says 'pending' where
    the table says 'running': reads look fine, and recovery's first write would hit the damage.
    SQLite's integrity check finds it at the open, before anything is written."""
    import sqlite3
    db = tmp_path / "c.db"
    with DurableStore(db) as store:
        tid = store.create("count", {"to": 5}, {"phase": "tick", "n": 1})
        rec = store.get(tid)
        rec["state"]["status"] = "running"
        store.put(rec)
        store.close(abandon=True)
    plain = sqlite3.connect(db)
    plain.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page = plain.execute("SELECT rootpage FROM sqlite_schema WHERE name='tasks_status'").fetchone()[0]
    plain.close()
    data = bytearray(db.read_bytes())
    index = bytes(data[(page - 1) * 4096:page * 4096])
    assert index.count(b"running") == 1
    data[(page - 1) * 4096:page * 4096] = index.replace(b"running", b"pending")
    db.write_bytes(bytes(data))
    before = files(tmp_path)
    with pytest.raises(StoreRefused, match="integrity check"):
        Runtime(DurableStore(db), KINDS)
    assert files(tmp_path) == before
