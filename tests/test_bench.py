"""The benchmark runs end to end and writes its CSV (timings are checked by `make bench`, not here)."""

import csv

from bughunt import bench
from bughunt.config import RunConfig
from bughunt.stores import rebuild_from_disk


def test_bench_writes_ratios_for_every_write_and_recovery_case(tmp_path, capsys):
    out = tmp_path / "bench.csv"
    assert bench.main(["--quick", "--only", "write", "--only", "recovery", "--csv", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    writes = [r for r in rows if r["section"] == "write"]
    assert len(writes) == 6 and all(float(r["ratio"]) > 0 for r in writes)
    assert any(r["case"].startswith("full replay vs snapshot") for r in rows)
    assert "written to" in capsys.readouterr().out


def test_a_synthetic_run_is_what_a_worker_would_have_written(tmp_path):
    config = RunConfig(pages=40, snapshot_every=8)
    events = bench.synthetic_run(tmp_path / "run", config)
    rec = rebuild_from_disk(tmp_path / "run", config)
    assert events == 40 + len([p for p in range(1, 41) if (p - 1) % 12 + 1 in (3, 7, 10)])
    assert rec.snapshot_used and rec.state["next_page"] == 41 and rec.replayed_events == 0
