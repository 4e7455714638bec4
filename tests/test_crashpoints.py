"""The lesson's crash-point scheme: 51 points without intents, 54 with."""

import json

import pytest

from bughunt.crashpoints import LABELS, RECOVERY_LABELS, NoSuchPoint, find, scheme

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


# --- recovery's own points (lesson 8) -------------------------------------------------------------

def test_recovery_points_join_the_scheme_uncounted_so_every_number_stays():
    lesson = scheme(12, [3, 7, 10], intent=True)
    with_recovery = scheme(12, [3, 7, 10], intent=True, in_recovery=True)
    assert [p.name for p in with_recovery[:2]] == list(RECOVERY_LABELS)
    assert with_recovery[2:] == lesson and all(p.index == 0 for p in with_recovery[:2])
    assert find(with_recovery, 12, **WHERE) == find(lesson, 12, **WHERE)
    assert find(with_recovery, "after_repair", **WHERE).in_recovery
    without_intents = scheme(12, [3, 7, 10], intent=False, in_recovery=True)
    assert [p.name for p in without_intents if p.in_recovery] == ["after_repair"]
    with pytest.raises(NoSuchPoint, match="no intent is ever pending"):
        find(without_intents, "after_abort", pages=12, bug_pages=[3, 7, 10], intent=False)
    with pytest.raises(NoSuchPoint, match="name it after_repair"):
        find(with_recovery, "p3.after_repair", **WHERE)


def _events(run_dir):
    from bughunt.stores import LOG_FILE
    return (run_dir / LOG_FILE).read_bytes()


def test_the_plan_fires_after_repair_once_recovery_repaired_and_before_the_resume_writes(
        tmp_path):
    run_dir = tmp_path / "r"
    torn = ("--store", "log", "--write-mode", "torn")
    assert bughunt("run", "--dir", str(run_dir), *torn, "--crash-at", "p3.mid_commit",
                   cwd=tmp_path).returncode == -9
    fragment = _events(run_dir)
    assert not fragment.endswith(b"\n")
    # A resume may crash at a point of recovery although page 3 was never committed: recovery
    # is reached by every resume, whatever page it starts at.
    proc = bughunt("run", "--dir", str(run_dir), *torn, "--crash-at", "after_repair",
                   cwd=tmp_path)
    assert proc.returncode == -9, proc.stderr
    assert _events(run_dir) == fragment + b"\n"       # repaired, nothing of the resume written
    bill = (run_dir / "bill.jsonl").read_text().splitlines()
    assert len(bill) == 3                               # no model call by the killed resume
    done = bughunt("run", "--dir", str(run_dir), *torn, "--json", cwd=tmp_path)
    assert done.returncode == 0 and json.loads(done.stdout)["findings"] == [3, 7, 10]


def test_the_plan_fires_after_abort_right_after_the_pending_intent_is_given_up(tmp_path):
    run_dir = tmp_path / "r"
    abort = ("--store", "log", "--intent", "on", "--pending", "abort")
    assert bughunt("run", "--dir", str(run_dir), *abort, "--crash-at", "p3.after_submit",
                   cwd=tmp_path).returncode == -9
    proc = bughunt("run", "--dir", str(run_dir), *abort, "--crash-at", "after_abort",
                   cwd=tmp_path)
    assert proc.returncode == -9, proc.stderr
    last = json.loads(_events(run_dir).splitlines()[-1])
    assert (last["t"], last["page"]) == ("aborted", 3)
    done = json.loads(bughunt("run", "--dir", str(run_dir), *abort, "--json",
                              cwd=tmp_path).stdout)
    assert done["aborted"] == [3] and done["findings"] == [7, 10]
    # Without intents there is no such point, and the refusal says why before anything is run.
    refused = bughunt("run", "--dir", str(tmp_path / "n"), "--intent", "off", "--crash-at",
                      "after_abort", cwd=tmp_path)
    assert refused.returncode == 2 and "no intent is ever pending" in refused.stderr
    assert not (tmp_path / "n").exists()
    # A pending intent that is redone is never aborted: that point cannot be reached either.
    refused = bughunt("run", "--dir", str(tmp_path / "m"), "--pending", "redo", "--crash-at",
                      "after_abort", cwd=tmp_path)
    assert refused.returncode == 2 and "--pending redo" in refused.stderr
    assert not (tmp_path / "m").exists()
