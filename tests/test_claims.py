"""Claims (a lesson's sentence and its check over the run) and tables that add up."""

import pandas as pd
import pytest

from bughunt.lab.claims import (ClaimError, Claims, Invariants, TableError, checked_rows,
                                checked_table, table_problems)


def lesson_claims(duplicates) -> Claims:
    """A lesson's claims over its run: here, the (page, step) of each duplicate it found."""
    claims = Claims(4)

    @claims.claim("Without the key, {n} of {points} crash points filed a report twice, on "
                  "pages {pages}.")
    def no_key_duplicates():
        pages = sorted({p for p, _ in duplicates})
        return len(duplicates) > 0, {"n": len(duplicates), "points": 51, "pages": pages}

    @claims.claim("Every duplicate falls inside the danger window.", key="inside")
    def _():
        outside = [f"p{p}.{s}" for p, s in duplicates if s not in ("after_submit", "mid_commit")]
        return not outside, {"outside": outside}, f"{', '.join(outside)} lie outside it."

    return claims


def test_a_claim_that_holds_is_the_sentence_with_its_measured_numbers():
    (found,) = lesson_claims([(3, "after_submit"), (7, "mid_commit"), (10, "after_submit")]).say(
        "no_key_duplicates")
    assert found.holds
    assert found.markdown() == ("Without the key, 3 of 51 crash points filed a report twice, on "
                                "pages 3, 7 and 10.")


def test_a_claim_that_does_not_hold_says_so_where_it_stands_with_the_measurement():
    (found,) = lesson_claims([(3, "after_submit"), (4, "after_visit")]).say("inside")
    assert not found.holds
    assert found.markdown().startswith("Every duplicate falls inside the danger window.")
    assert "On this run this did not hold:** p4.after_visit lie outside it." in found.markdown()
    (empty,) = lesson_claims([]).say("no_key_duplicates")
    assert not empty.holds and "(measured: n = 0, points = 51, pages = none)" in empty.markdown()


def test_a_claim_whose_text_names_a_value_its_check_does_not_give_is_refused():
    claims = Claims(2)

    @claims.claim("{avg} redone calls on average.")
    def average():
        return True, {"mean": 0.76}

    with pytest.raises(ClaimError, match="names avg, which its check did not give"):
        claims.say("average")


def test_two_claims_of_one_lesson_cannot_share_a_key():
    claims = Claims(1)
    claims.claim("a.", key="x")(lambda: (True, {}))
    with pytest.raises(ClaimError, match="already has a claim 'x'"):
        claims.claim("b.", key="x")(lambda: (True, {}))
    with pytest.raises(KeyError, match="has no claim 'y': it has x"):
        claims["y"]


def test_numbers_in_a_sentence_counts_as_integers_averages_to_two_decimals():
    claims = Claims(3)
    claims.claim("{a} {b} {c} {d}", key="n")(lambda: (True, {"a": 7.0, "b": 7.2581, "c": 54,
                                                            "d": 1.5}))
    assert claims.say("n").markdown() == "7 7.26 54 1.50"


def test_claims_said_together_are_paragraphs_or_bullets_and_hold_only_if_each_does():
    claims = lesson_claims([(3, "after_submit"), (4, "after_visit")])
    both = claims.say("no_key_duplicates", "inside")
    assert not both.holds and both.markdown().count("\n\n") >= 2
    listed = claims.say("no_key_duplicates", "inside", bullets=True)
    assert listed.markdown().startswith("- Without the key, 2 of 51")
    assert "\n- Every duplicate falls inside" in listed.markdown()
    assert "\n\n  > **On this run this did not hold:**" in listed.markdown()


# --- tables -------------------------------------------------------------------------------------

POWER = Invariants(total="states explored", parts=("correct", "refused", "recovered wrong"),
                   within=("states losing committed pages",))


def power_rows(refused):
    return pd.DataFrame([
        {"variant": "snapshot, fsync always", "states explored": 32, "correct": 32,
         "refused": refused(0), "recovered wrong": 0, "states losing committed pages": 0},
        {"variant": "snapshot, fsync never", "states explored": 77, "correct": 30,
         "refused": refused(24), "recovered wrong": 23, "states losing committed pages": 47},
    ]).set_index("variant")


def test_a_table_that_adds_up_is_shown_as_it_is():
    df = power_rows(lambda n: n)
    assert checked_table(df, "power", POWER) is df


def test_the_pandas_3_power_table_every_state_refused_does_not_add_up():
    # lesson 8's table once counted NaN (a missing refusal) as a refusal: refused == explored
    df = power_rows(lambda n: None).assign(refused=[32, 77])
    with pytest.raises(TableError) as e:
        checked_table(df, "power loss", POWER)
    assert ("the table 'power loss' does not add up: row 'snapshot, fsync always': correct 32 + "
            "refused 32 + recovered wrong 0 = 64, but 'states explored' is 32") in str(e.value)


def test_counts_must_be_non_negative_integers_and_no_column_all_nan():
    df = power_rows(lambda n: n)
    df.loc["snapshot, fsync never", "recovered wrong"] = -1
    assert any("'recovered wrong' is -1" in p and "not a count" in p
               for p in table_problems(df, POWER))
    nan = power_rows(lambda n: float("nan"))
    problems = table_problems(nan, POWER)
    assert "column 'refused' is empty (NaN) in every row" in problems
    df = power_rows(lambda n: n).assign(note=[None, None])
    assert table_problems(df, POWER) == ["column 'note' is empty (NaN) in every row"]
    assert table_problems(df, Invariants(may_be_empty=("note",))) == []


def test_a_subset_count_larger_than_its_total_is_named():
    df = power_rows(lambda n: n)
    df.loc["snapshot, fsync always", "states losing committed pages"] = 33
    assert table_problems(df, POWER) == [
        "row 'snapshot, fsync always': 'states losing committed pages' is 33, more than "
        "'states explored' (32)"]


def test_checked_rows_builds_and_checks_in_one_step():
    rows = [{"v": "a", "n": 2, "ok": 1, "bad": 1}, {"v": "b", "n": 2, "ok": 2, "bad": 1}]
    with pytest.raises(TableError, match="row 'b': ok 2 \\+ bad 1 = 3, but 'n' is 2"):
        checked_rows(rows, "t", Invariants(total="n", parts=("ok", "bad")), index="v")


# --- every lesson's claims, and the command that checks them ------------------------------------

def test_every_lesson_states_at_least_five_claims_of_what_its_run_found():
    from bughunt.lab.registry import lessons

    few = {x.label: len(x.claims) for x in lessons() if len(x.claims) < 5}
    assert few == {}, f"lessons with fewer than five claims: {few}"


@pytest.mark.slow
def test_the_claims_command_says_one_line_per_lesson_and_the_total_last(capsys):
    from bughunt.lab import claims

    assert claims.main(["--lesson", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("lesson 2 (checkpoint granularity): ") and lines[0].endswith(
        " claims, 0 false")
    n = int(lines[0].split(": ")[1].split()[0])
    assert n >= 5 and lines[-1] == f"claims: {n} checked, 0 false"


@pytest.mark.slow
def test_a_claim_that_does_not_hold_fails_the_command_and_is_marked_in_the_notebook(
        capsys, monkeypatch):
    import json

    from bughunt.lab import claims
    from bughunt.lab.claims import Claim
    from bughunt.lab.lessons import l02_granularity as l02

    def check():
        return False, {"points": 51}, "the sweep found 3 duplicates"

    monkeypatch.setitem(l02.CLAIMS._claims, "false_one",
                        Claim(2, "false_one", "No crash point of {points} duplicates.", check))
    assert claims.main(["--lesson", "2"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert "  2.false_one: No crash point of 51 duplicates. -- on this run this did not hold: " \
           "the sweep found 3 duplicates" in out
    assert out[-1].endswith("checked, 1 false")
    assert "On this run this did not hold:** the sweep found 3 duplicates" in \
        l02.CLAIMS.say("false_one").markdown()
    assert claims.main(["--lesson", "2", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["false"] == 1 and data["lessons"][0]["claims"][-1]["holds"] is False


def test_a_check_that_raises_is_a_claim_not_shown_true(monkeypatch):
    from bughunt.lab import claims
    from bughunt.lab.claims import Claim
    from bughunt.lab.lessons import l02_granularity as l02

    def check():
        raise RuntimeError("the sweep's worker died")

    monkeypatch.setitem(l02.CLAIMS._claims, "raises", Claim(2, "raises", "Fine.", check))
    found = {f.key: f for f in claims.check_lesson(l02.LESSON)}
    assert not found["raises"].holds
    assert found["raises"].measured == "its check failed: RuntimeError: the sweep's worker died"


def test_the_claims_command_refuses_a_lesson_that_does_not_exist():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "bughunt", "claims", "--lesson", "42"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "--lesson 42: no lesson 42" in proc.stderr


def test_a_claim_that_holds_never_says_its_failure_template_with_holes(capsys):
    """issue 28: `claims --json` printed "measured": "at  the resume redid another number of
    calls" for claims that held (the failure sentence, its list of points empty)."""
    import json

    from bughunt.lab import claims

    held = Claims(2)

    @held.claim("Every one of {points} points redoes its own page.")
    def every_point():
        wrong = []
        return not wrong, {"points": 51}, f"at {', '.join(wrong)} the resume redid another number"

    (found,) = [c.on() for c in held]
    assert found.holds and found.measured == ""
    assert claims.main(["--lesson", "2", "--json"]) == 0
    said = [c for lesson in json.loads(capsys.readouterr().out)["lessons"]
            for c in lesson["claims"]]
    assert said and all(c["holds"] for c in said)
    assert not [c["measured"] for c in said if "at  " in c["measured"]
                or c["measured"].endswith(": ")]
    assert all(c["measured"] for c in said)        # the values, where no sentence was given
