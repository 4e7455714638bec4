"""Record encoding: a torn fragment and a damaged record are told apart."""

import pytest

from bughunt.stores import records


def test_round_trip():
    event = {"seq": 3, "t": "intent", "page": 3, "key": "bughunt:p03"}
    line = records.encode(event)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert records.decode(line[:-1]) == event


@pytest.mark.parametrize("cut", [1, 5, 20, -2])
def test_a_cut_record_is_torn(cut):
    line = records.encode({"seq": 1, "t": "page_done", "page": 1, "tokens": 5, "finding": False})
    with pytest.raises(records.Torn):
        records.decode(line[:cut])


def test_a_changed_value_is_damage_not_a_tear():
    line = records.encode({"seq": 1, "t": "page_done", "page": 1, "tokens": 5, "finding": False})
    with pytest.raises(records.Damaged, match="checksum"):
        records.decode(line.replace(b'"tokens":5', b'"tokens":6')[:-1])


def test_json_without_a_checksum_is_damage():
    with pytest.raises(records.Damaged):
        records.decode(b'{"seq": 1, "t": "page_done"}')
