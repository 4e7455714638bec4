"""Lesson 7's lab layer: the stories, the tables at each moment, the text's queries, the panel and
the predict-then-run exercises."""

import json
import re

import pytest
from matplotlib.figure import Figure

from bughunt.lab.lessons import l07_durable_tasks as dt
from bughunt.lab.views import show_text_code
from bughunt.lab.judges import EXERCISES, judge


def test_count_story_tables_show_running_then_pending_then_terminal():
    story = dt.count_story(3)
    assert story.printed == {"first": [1, 2, 3], "resume": [4, 5]}
    moments = {k: v.iloc[0] for k, v in story.moments.items()}
    assert (moments["after the crash"]["status"], moments["after the crash"]["restarts"]) == (
        "running", "—")
    assert (moments["after open"]["status"], moments["after open"]["restarts"]) == ("pending", 1)
    assert moments["after the finish"]["status"] == "terminal"


def test_the_texts_query_after_a_clean_close_reads_as_the_text_prints_it():
    story = dt.count_story(2, where="close")
    row = story.queries["after the close"].iloc[0]
    assert list(story.queries["after the close"].columns) == ["id", "status", "n", "memos",
                                                               "restarts"]
    assert (row["status"], row["n"], row["restarts"]) == ("pending", 2, "—")
    assert json.loads(row["memos"]) == {"printed-1": True, "printed-2": True}


def test_read_only_proof_finds_the_bytes_unchanged_and_both_refusals():
    proof = dt.read_only_proof()
    assert proof["unchanged"] and proof["status seen"] == "running"
    assert [r.split(":")[0] for r in proof["refused"]] == ["commit", "resume"]


def test_close_is_not_counted_a_crash_is():
    df = dt.close_vs_crash()
    assert list(df["restarts"]) == [0, 1] and list(df["after the next open"]) == ["pending"] * 2
    assert list(df["status on disk"]) == ["pending", "running"]


def test_memo_story_shows_the_second_writer_getting_the_first_value():
    df = dt.memo_story()
    assert list(df["proposed"]) == ["A", "B"] and list(df["memo holds"]) == ["A", "A"]


def test_restart_limit_story_ends_at_the_limit_and_unlimited_does_not():
    two = dt.restart_limit_story(2)
    assert list(two["exit"]) == ["SIGKILL", "SIGKILL", 0]
    assert two.iloc[-1]["outcome"] == "restart_limit" and two.iloc[-1]["report"] == "task_faulted"
    never = dt.restart_limit_story(None, runs=4)
    assert list(never["exit"]) == ["SIGKILL"] * 4
    assert isinstance(dt.plot_restart_limits({"2": two, "none": never}), Figure)


def test_reset_story_finishes_although_cut_off_more_often_than_the_limit():
    df = dt.reset_story(dies=2, steps=2, limit=3)
    assert df.iloc[-1]["what happened"] == "task completed"
    assert df.iloc[-1]["cut-offs in total"] == 4 > 3
    assert max(r for r in df["restarts in a row"] if r != "—") == 2
    assert isinstance(dt.plot_reset(df, 3), Figure)


def test_reset_plot_says_how_the_task_ended_and_shows_the_start_the_limit_ended():
    faulted = dt.plot_reset(dt.reset_story(dies=3, steps=2, limit=3), 3)
    ax = faulted.axes[0]
    assert "faulted" in ax.get_title() and "never reaches" not in ax.get_title()
    assert [t.get_text().split("\n")[-1] for t in ax.get_xticklabels()][-1] == "faulted"
    completed = dt.plot_reset(dt.reset_story(dies=1, steps=2, limit=3), 3)
    assert "completed after 2 cut-offs" in completed.axes[0].get_title()


def test_builtin_limit_story_names_the_texts_results_and_report():
    tool = dt.builtin_limit_story("tool", limit=1)
    assert "restart_limit" in tool.iloc[-1]["result"]
    assert tool.iloc[-1]["report"] == "task_interrupted (tool, restart_limit)"
    gen = dt.builtin_limit_story("generation", limit=1)
    assert "runFailure, reason restart_limit, input unanswered" in gen.iloc[-1]["result"]


@pytest.mark.slow
def test_tool_checkpoints_measure_what_reruns_at_each_kill():
    df = dt.tool_checkpoints("unsafe").df
    assert list(df["beforeTool ran"]) == [2, 1, 1, 1]
    assert list(df["notes.txt lines"]) == [1, 0, 1, 1]
    assert [g.split(":")[0] for g in df["the agent got"]] == ["completed", "failed", "failed",
                                                              "completed"]
    assert set(df["its memo decision"]) == {"approved in hook run 1"}


def test_replay_table_is_measured_in_all_four_cells():
    cells = [dt.replay_cell(s, c) for s in ("safe", "unsafe") for c in ("safe", "unsafe")]
    assert [c["tool ran again"] for c in cells] == [True, False, False, False]
    table = dt.replay_policy_table(cells).df
    assert table.loc["safe", "safe"].startswith("ran again: 2 line(s)")
    assert table.loc["unsafe", "safe"].startswith("not run: 1 line(s)")
    assert isinstance(dt.plot_replay(cells, ("unsafe", "safe")), Figure)


@pytest.mark.slow
def test_panel_replay_grid_always_shows_all_four_cells(monkeypatch):
    drawn, real = [], dt.plot_replay
    monkeypatch.setattr(dt, "plot_replay", lambda cells, highlight=None: drawn.append(
        (cells, highlight)) or real(cells, highlight))
    p = dt.panel()
    p.stored.value, p.current.value, p.tool_crash.value = "unsafe", "safe", "in-execute"
    p.run()
    cells, highlight = drawn[-1]
    assert {(c["stored"], c["current"]) for c in cells} == {
        (s, c) for s in ("safe", "unsafe") for c in ("safe", "unsafe")}
    assert highlight == ("unsafe", "safe")
    assert [c["tool ran again"] for c in cells] == [True, False, False, False]


@pytest.mark.slow
def test_restart_limit_title_says_only_what_its_rows_show():
    five = dt.restart_limit_story(5)
    only = dt.plot_restart_limits({"limit 5": five}).axes[0].get_title()
    assert "no limit" not in only and "ended by the limit: limit 5" in only
    both = dt.plot_restart_limits({"limit 5": five, "no limit": dt.restart_limit_story(None, 8)})
    assert "no limit: still restarting after 8 starts" in both.axes[0].get_title()


def test_a_tool_that_declares_no_replay_is_not_run_again():
    cell = dt.replay_cell("safe", "undeclared")
    assert (cell["tool ran again"], cell["notes.txt lines"], cell["result"]) == (False, 1,
                                                                                 "failed")


def test_print_before_memo_prints_the_killed_tick_twice():
    story = dt.count_story(4, where="before-memo")
    assert story.printed == {"first": [1, 2, 3, 4], "resume": [4, 5]}


def test_the_interrupted_tool_result_is_marked_an_error():
    result = dt.tool_story("unsafe").result
    assert result["status"] == "failed" and result["is_error"] is True


# --- claims and practice --------------------------------------------------------------------------

@pytest.mark.slow
def test_every_claim_of_lesson_7_holds_on_its_run():
    found = dt.CLAIMS.check_all()
    assert len(found) >= 5 and all(f.holds for f in found), [f for f in found if not f.holds]


def test_a_claim_whose_run_disagrees_says_so(monkeypatch):
    # a mutant: the memo story's second writer gets its own value (the first write did not win)
    real = dt.memo_story()
    broken = real.copy()
    broken.iloc[1, broken.columns.get_loc("memo holds")] = broken.iloc[1]["proposed"]
    monkeypatch.setattr(dt, "memo_story", lambda: broken)
    finding = dt.CLAIMS["the_first_memo_write_wins"].on()
    assert not finding.holds and "did not hold" in finding.markdown()


def test_practice_draws_only_configurations_the_lesson_did_not_run():
    drawn = [dt.practice_problem(seed) for seed in range(50)]
    for p in drawn:
        key = (p.drawn["story"], tuple(p.drawn["settings"]))
        assert key not in dt.LESSON_RUNS, (p.seed, key)
    assert len({p.setting + p.question for p in drawn[:20]}) >= 8
    assert {p.drawn["story"] for p in drawn} == {"count", "tool", "flaky", "generate"}


def test_practice_answers_are_measured_live(monkeypatch):
    p = next(dt.practice_problem(s) for s in range(50)
             if dt.practice_problem(s).drawn["story"] == "generate")
    truth = p.measure().value
    assert p.check(truth)[0] and not p.check(truth + 1)[0]
    # a mutant of the measure: it must change the verdict, so nothing is stored
    monkeypatch.setattr(dt.E, "generation_story",
                        lambda mode, retries: {"requests": [1] * 9,
                                               "outcome": {"status": "x", "message": "m",
                                                           "reason": "r"}})
    assert not p.check(truth)[0]


def test_generation_story_retries_once_and_never_sends_the_half_answer():
    gen = dt.generation_story("crash")
    assert list(gen["processes"]["ended"]) == ["killed (SIGKILL)", "exit 0"]
    assert len(gen["requests"]) == 2 and gen["requests"]["digest"].nunique() == 1
    assert gen["outcome"]["result"]["aborted"] == [{"attempt": 1, "text": "Page 3 has a bug: "}]


def test_lock_story_shows_the_second_refused_and_the_third_waiting():
    df = dt.lock_story()
    assert list(df["ended"]) == ["killed (SIGKILL) while holding it", "exit 75", "exit 0"]
    assert df.iloc[1]["said"].startswith("c.db: busy")
    assert df.iloc[2]["printed"].startswith("tick 2 / tick 3")
    assert not re.search(r"/tmp/|/root/", df.to_string())


def test_the_source_texts_code_is_shown_verbatim_as_typescript_beside_the_labs():
    seed_lines = {"recover": "const restarts = (record.restarts ?? 0) + 1;",
                  "tick": "if ((await runtime.memo(`printed-${n}`, taskContext)) === undefined) {",
                  "execute": 'if (replay === "safe" && tool?.replay === "safe") {'}
    for name, line in seed_lines.items():
        shown = show_text_code(name)
        assert line in shown.code and "```typescript\n" in shown._repr_markdown_()
        assert "Pi's `packages/durable/" in shown.title


def test_peers_table_cites_public_sources_only():
    df = dt.peers_table()
    assert "shared" not in df.to_string() and df["source"].str.contains(r"\.", regex=True).all()


@pytest.mark.slow
def test_panel_runs_the_stories_with_the_chosen_settings():
    p = dt.panel()
    p.crash_tick.value, p.stored.value, p.current.value, p.limit.value = 4, "safe", "safe", 1
    results = p.run()
    assert results["count"].printed["first"][-1] == 4
    assert len(results["tool"].notes) == 2
    assert list(results["loop"]["exit"]) == ["SIGKILL", 0]
    assert results["generation"]["outcome"]["status"] == "completed"
    assert p.progress.value == 4 and len(p.section("tool probe").outputs) > 0
    assert p.images()                 # the replay grid and the crash loop, in their tabs
    p.reset()
    assert p.crash_tick.value == 2 and p.section("count to 5") is None


@pytest.mark.slow
def test_exercises_7_accept_the_measured_truth_only():
    assert judge("7.1", [1, 2, 3, 4, 4, 5]) and not judge("7.1", [1, 2, 3, 5])
    assert not judge("7.1", "1, 2, 3, 5")
    assert judge("7.2", (0, "failed")) and not judge("7.2", (1, "failed"))
    assert judge("7.2", [0, "Failed"]) and not judge("7.2", (0, "completed"))
    assert not judge("7.2", 0)
    assert judge("7.3", False) and not judge("7.3", True) and not judge("7.3", 0)
    assert judge("7.4", "faulted") and not judge("7.4", "completed")
    assert judge("7.5", 2) and not judge("7.5", 3)


QUIZ_7 = {"Q7.1": False, "Q7.2": False, "Q7.3": True, "Q7.4": False}


@pytest.mark.parametrize("id", sorted(QUIZ_7))
def test_quiz_7_is_judged_by_a_run_made_just_now_and_explained_with_it(id):
    truth = QUIZ_7[id]
    right, feedback = EXERCISES[id].judge(truth)
    assert right, feedback
    assert f"The statement is {'true' if truth else 'false'}." in feedback
    assert "Measured just now" in feedback and re.search(r"\d", feedback)
    assert not EXERCISES[id].judge(not truth)[0]
    assert not EXERCISES[id].judge("False")[0]


def test_quiz_7_verdict_follows_the_measurement(monkeypatch):
    """Were a clean close counted as a restart, "a close counts like a crash" would be true."""
    import pandas as pd
    counted = pd.DataFrame([{"how the process ended": "clean close", "status on disk": "pending",
                             "after the next open": "pending", "n": 2, "restarts": 1},
                            {"how the process ended": "crash (SIGKILL)",
                             "status on disk": "running", "after the next open": "pending",
                             "n": 2, "restarts": 1}]).set_index("how the process ended")
    monkeypatch.setattr(dt, "close_vs_crash", lambda: counted)
    right, feedback = EXERCISES["Q7.2"].judge(True)
    assert right and "restarts = 1, after SIGKILL" in feedback
