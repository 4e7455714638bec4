"""The appendix and lesson 6 read the source text's figures from one module, and put
each on the row of the kind of write it measured."""

import re
from pathlib import Path

import pandas as pd
import pytest

from bughunt.lab import reference
from bughunt.lab.lessons import appendix as costs
from bughunt.lab.lessons import l06_kill9_vs_power_loss as durability

LAB = Path(durability.__file__).parent


def test_lesson_6_and_the_appendix_put_each_source_figure_on_the_same_kind_of_write():
    nine = costs.source_medians_for_bench(list(costs.BENCH_KINDS))          # bench row -> µs
    six = durability.source_medians_us(durability.KINDS)             # kind -> (µs, rerun µs)
    assert nine, "the appendix shows no source-text figure at all"
    for case, value in nine.items():
        assert six[costs.BENCH_KINDS[case]][0] == value, case
    assert set(costs.BENCH_KINDS.values()) <= set(durability.KINDS)


def test_the_source_texts_snapshot_is_never_drawn_on_a_row_with_a_directory_fsync():
    """The source text's atomic_write has no directory fsync (its own code in the source text)."""
    assert reference.write_median(reference.SNAPSHOT_DIR_FSYNC) is None
    assert "snapshot: tmp + fsync + rename + dir fsync" not in costs.source_medians_for_bench(
        list(costs.BENCH_KINDS))
    assert reference.write_median(reference.SNAPSHOT_NO_DIR_FSYNC).value == 0.228


def test_no_lesson_module_types_in_a_source_figure_of_its_own():
    """One module holds the source text's figures: no other lab module writes them as numbers."""
    values = {f"{f.value:g}" for f in reference.WRITE_MEDIANS_MS.values()}
    values |= {f"{f.rerun:g}" for f in reference.WRITE_MEDIANS_MS.values()}
    values |= {f"{f.value * 1000:g}" for f in reference.WRITE_MEDIANS_MS.values()}
    values -= {"2", "0.3"}   # too short to tell from an alpha or an offset
    for path in sorted(LAB.glob("*.py")):
        text = path.read_text()
        found = [v for v in values if re.search(rf"(?<![\d.]){re.escape(v)}(?![\d])", text)]
        assert not found, f"{path.name} types in {found}"


def test_each_source_figure_carries_the_sentence_it_comes_from():
    for figures in (reference.WRITE_MEDIANS_MS, reference.BUFFER_BYTES):
        for f in figures.values():
            number = f"{f.value:g}" if f.unit == "bytes" else f"{f.value}"
            assert number in f.sentence and number in f.says


def test_write_cost_figure_marks_only_the_rows_of_a_measured_kind():
    rows = [{"section": "write", "case": case, "value": v, "reference": v / 1.2, "ratio": 1.2}
            for case, v in [("log append (flush only)", 3.0), ("log append + fsync", 150.0),
                            ("snapshot: tmp + rename, no fsync", 200.0),
                            ("snapshot: tmp + fsync + rename + dir fsync", 600.0)]]
    fig = costs.plot_write_costs(pd.DataFrame(rows))
    (ax, *_) = fig.axes
    ys = sorted(y for coll in ax.collections for _, y in coll.get_offsets())
    assert ys == [0, 1]          # the two appends; no diamond on either snapshot row
    assert "µs" in ax.get_xlabel()


def _write_rows():
    return pd.DataFrame([
        {"section": "write", "case": "log append (flush only)", "value": 4.48651, "unit": "us",
         "reference": 3.4551, "ratio": 1.30},
        {"section": "where the time goes", "case": "zlib.crc32 of the record", "value": 0.2204,
         "unit": "us", "reference": None, "ratio": None}])


def test_the_write_table_shows_three_significant_figures_numbered_from_one():
    t = costs.write_cost_table(_write_rows())
    assert list(t.df["time (median)"]) == [4.49, 0.22]
    assert list(t.df.index) == [1, 2]
    assert "4.49" in repr(t) and "4.4865" not in repr(t)


def test_the_write_table_refuses_a_ratio_that_is_not_time_over_floor():
    from bughunt.lab.claims import TableError

    rows = _write_rows()
    rows.loc[0, "ratio"] = 1.65                 # 4.49 / 3.46 is 1.30
    with pytest.raises(TableError, match="ratio 1.65 but"):
        costs.write_cost_table(rows)


def test_the_sources_list_every_lessons_further_reading_once():
    text = costs.further_reading()
    assert text.count("(https://github.com/openai/codex)") == 1
    codex = next(line for line in text.splitlines() if "(https://github.com/openai/codex)" in line)
    assert "11" in codex and "3" in codex
    assert "github.com/earendil-works/pi" in text and "https://docs.langchain.com/" in text


def test_the_appendix_has_objectives_and_a_time_by_the_rule():
    from bughunt.lab.registry import about, by_number

    record = by_number(99)
    assert record.objectives and record.minutes >= 5
    assert f"{record.minutes} minutes" in about(record)
