"""The lesson's crash-point scheme: 51 points without intents, 54 with."""

import json

from bughunt.crashpoints import LABELS, scheme

from conftest import bughunt


def test_lesson_scheme_has_51_points_without_intents_and_54_with():
    assert len(scheme(12, [3, 7, 10], intent=False)) == 51
    assert len(scheme(12, [3, 7, 10], intent=True)) == 54


def test_points_follow_the_page_order_of_the_lesson():
    points = scheme(12, [3, 7, 10], intent=True)
    assert [p.index for p in points] == list(range(1, 55))
    page3 = [p.label for p in points if p.page == 3]
    assert page3 == list(LABELS)
    page1 = [p.label for p in points if p.page == 1]
    assert page1 == ["after_model_call", "after_visit", "mid_commit", "after_commit"]


def test_points_command_lists_index_page_label(tmp_path):
    proc = bughunt("points", "--intent", "off", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    points = json.loads(proc.stdout)
    assert len(points) == 51
    assert points[11] == {"index": 12, "page": 3, "label": "mid_commit"}
    text = bughunt("points", cwd=tmp_path).stdout
    assert "54 crash points" in text
