"""The lesson's crash-point scheme: 51 points without intents, 54 with."""

import json

import pytest

from bughunt.crashpoints import LABELS, NoSuchPoint, find, scheme

from conftest import bughunt


WHERE = dict(pages=12, bug_pages=[3, 7, 10], intent=True)


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


def test_points_command_lists_name_index_page_label(tmp_path):
    proc = bughunt("points", "--intent", "off", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    points = json.loads(proc.stdout)
    assert len(points) == 51
    assert points[11] == {"crash_point": "p3.mid_commit", "index": 12, "page": 3,
                          "label": "mid_commit"}
    text = bughunt("points", cwd=tmp_path).stdout
    assert "54 crash points" in text and "p3.after_intent" in text


def test_every_name_round_trips_and_means_the_same_moment_in_both_schemes():
    with_intent = scheme(12, [3, 7, 10], intent=True)
    without = scheme(12, [3, 7, 10], intent=False)
    for points in (with_intent, without):
        for p in points:
            assert find(points, p.name, **WHERE) == p
            assert find(points, str(p.index), **WHERE) == p
            assert find(points, p.index, **WHERE) == p
    # The same name is the same (page, step) in both; the number is not.
    a = find(with_intent, "p7.after_submit", **WHERE)
    b = find(without, "p7.after_submit", **WHERE)
    assert (a.page, a.label) == (b.page, b.label) and a.index == b.index + 2
    assert len({p.name for p in with_intent}) == 54


@pytest.mark.parametrize("spec, why", [
    ("p3.after_intent", "intents are off"),
    ("p5.after_submit", "page 5 has no bug"),
    ("p13.after_visit", "pages 1 to 12"),
    ("p3.after_lunch", "not a step"),
    ("page3", "expected a name like p3.after_submit"),
    ("0", "crash points 1 to 51"),
    ("52", "crash points 1 to 51"),
    (-1, "crash points 1 to 51"),
    (True, "expected a name"),
])
def test_a_point_this_configuration_lacks_is_refused_with_the_reason(spec, why):
    points = scheme(12, [3, 7, 10], intent=False)
    with pytest.raises(NoSuchPoint, match=why):
        find(points, spec, pages=12, bug_pages=[3, 7, 10], intent=False)


def test_worker_crashes_at_a_named_point_and_refuses_one_already_passed(tmp_path):
    run_dir = tmp_path / "r"
    proc = bughunt("run", "--dir", str(run_dir), "--crash-at", "p7.after_visit", cwd=tmp_path)
    assert proc.returncode == -9
    bill = (run_dir / "bill.jsonl").read_text().splitlines()
    assert json.loads(bill[-1])["page"] == 7 and len(bill) == 7
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    proc = bughunt("run", "--dir", str(run_dir), "--crash-at", "p3.after_submit", cwd=tmp_path)
    assert proc.returncode == 2
    assert "p3.after_submit" in proc.stderr and "already passed" in proc.stderr
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == before
