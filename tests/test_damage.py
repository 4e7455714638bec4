"""Damaged checkpoint files (property-based): recovery is right, or a clear refusal naming the file,
never a silently wrong result.

"Right" after damage means a state some prefix of the real run reached: losing a torn tail is a
known, counted loss that the resume redoes; a state the run never was in would be a silent lie.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bughunt.config import CONFIG_FILE, RunConfig
from bughunt.events import replay
from bughunt.stores import LOG_FILE, SNAPSHOT_FILE, StoreDamage, rebuild_from_disk, records

CONFIGS = {
    "log": RunConfig(store="log", intent=True),
    "log+snapshot": RunConfig(store="log", intent=True, snapshot_every=4),
    "snapshot": RunConfig(store="snapshot", intent=True),
}


@pytest.fixture(scope="module")
def clean_runs(tmp_path_factory):
    """One clean run per store; the states every prefix of its events reaches."""
    runs = {}
    for name, config in CONFIGS.items():
        run_dir = tmp_path_factory.mktemp(name.replace("+", "_")) / "run"
        proc = subprocess.run([sys.executable, "-m", "bughunt", "run", "--dir", str(run_dir),
                               *config.to_args()], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        runs[name] = run_dir
    log = (runs["log"] / LOG_FILE).read_bytes().splitlines()
    events = [records.decode(line) for line in log]
    prefixes = [replay(events[:m]) for m in range(len(events) + 1)]
    return runs, prefixes


def mutate(data: bytes, how: str, a: int, b: int, garbage: bytes) -> bytes:
    n = len(data)
    a, b = sorted((a % (n + 1), b % (n + 1)))
    if how == "truncate":
        return data[:a]
    if how == "zero-fill":
        return data[:a] + b"\0" * (b - a) + data[b:]
    if how == "flip-bit":
        i = a % n
        return data[:i] + bytes([data[i] ^ (1 << (b % 8))]) + data[i + 1:]
    return data + garbage          # append garbage


DAMAGE = st.tuples(st.sampled_from(["truncate", "zero-fill", "flip-bit", "append"]),
                   st.integers(0, 10_000), st.integers(0, 10_000), st.binary(min_size=1, max_size=40))


def _check(clean_runs, tmp_path, store: str, target: str, damage):
    runs, prefixes = clean_runs
    run_dir = tmp_path / f"d{abs(hash(damage)) % 10**9}"
    shutil.copytree(runs[store], run_dir)
    path = run_dir / target
    path.write_bytes(mutate(path.read_bytes(), *damage))
    try:
        state = rebuild_from_disk(run_dir, CONFIGS[store]).state
    except StoreDamage as e:
        assert str(path) in str(e) or target in str(e), str(e)   # a clear refusal naming the file
        return
    assert state in prefixes, f"silently wrong after {damage[0]}: {state}"


SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(damage=DAMAGE)
def test_a_damaged_log_recovers_a_real_prefix_or_is_refused(clean_runs, tmp_path, damage):
    _check(clean_runs, tmp_path, "log", LOG_FILE, damage)


@SETTINGS
@given(damage=DAMAGE)
def test_a_damaged_snapshot_falls_back_to_the_log_or_is_refused(clean_runs, tmp_path, damage):
    _check(clean_runs, tmp_path, "log+snapshot", SNAPSHOT_FILE, damage)


@SETTINGS
@given(damage=DAMAGE)
def test_a_damaged_log_behind_a_snapshot_recovers_a_real_prefix_or_is_refused(clean_runs,
                                                                             tmp_path, damage):
    _check(clean_runs, tmp_path, "log+snapshot", LOG_FILE, damage)


@SETTINGS
@given(damage=DAMAGE)
def test_a_damaged_lone_snapshot_starts_over_or_is_refused(clean_runs, tmp_path, damage):
    _check(clean_runs, tmp_path, "snapshot", SNAPSHOT_FILE, damage)


def test_a_damaged_config_is_refused_naming_it(clean_runs, tmp_path):
    runs, _ = clean_runs
    run_dir = tmp_path / "run"
    shutil.copytree(runs["log"], run_dir)
    (run_dir / CONFIG_FILE).write_bytes(b'{"format": 1, "store": "lo')
    proc = subprocess.run([sys.executable, "-m", "bughunt", "run", "--dir", str(run_dir)],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "config.json" in proc.stderr
    assert Path(run_dir / CONFIG_FILE).read_bytes() == b'{"format": 1, "store": "lo'


@pytest.mark.parametrize("damage", ["config", "events"])
def test_json_nested_deeper_than_the_parser_goes_is_refused_naming_the_file(tmp_path, damage):
    """A config.json of 100,000 nested arrays, or a last line of events.jsonl opening 200,000:
    Python's parser raises RecursionError there, which ended `run` with a traceback (exit 1).
    It is a damaged file: one sentence naming it, exit 2, nothing changed."""
    d = tmp_path / "run"
    first = subprocess.run([sys.executable, "-m", "bughunt", "run", "--dir", str(d), "--pages",
                            "3", "--store", "log"], capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    if damage == "config":
        (d / CONFIG_FILE).write_text("[" * 100_000 + "]" * 100_000)
    else:
        with open(d / LOG_FILE, "a") as f:
            f.write("[" * 200_000)
    before = {p.name: p.read_bytes() for p in d.iterdir() if not p.name.startswith("tracker")}
    proc = subprocess.run([sys.executable, "-m", "bughunt", "run", "--dir", str(d), "--pages",
                           "3", "--store", "log"], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    name = CONFIG_FILE if damage == "config" else LOG_FILE
    assert proc.stderr.count("\n") == 1 and name in proc.stderr, proc.stderr
    assert {p.name: p.read_bytes() for p in d.iterdir() if not p.name.startswith("tracker")} \
        == before
