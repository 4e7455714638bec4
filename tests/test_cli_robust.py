"""Issue 28, the command lines: no hang, no traceback, the README's exit code, one sentence.

Each test reproduces one attack of the issue: a FIFO among a run directory's files, a flag
value no command expected, a file system that refuses, Ctrl-C at the start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bughunt.config import RunConfig

from conftest import bughunt, run

LOG = RunConfig(store="log", pages=3)


def no_traceback(proc) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr


# --- kill-random: a bound on nothing is said to be one ----------------------------------------

def test_the_rule_of_three_with_fewer_than_three_kills_bounds_nothing():
    """issue 28: `kill-random --tries 2` printed "below about 3/2 = 150.0%"."""
    from bughunt.cli import rule_of_three_sentence
    from bughunt.experiment import rule_of_three

    for n in (1, 2, 3):
        said = rule_of_three_sentence(n, rule_of_three(n), 1 - 0.05 ** (1 / n))
        assert "too few" in said and "exact 95% bound" in said, said
        assert not any(float(p) > 100 for p in
                       [w.rstrip("%,;") for w in said.split() if w.endswith(("%", "%,", "%;"))])
    assert rule_of_three_sentence(40, rule_of_three(40), 0.07).endswith("3/40 = 7.5%")


def test_kill_random_with_two_kills_in_the_loop_prints_no_rate_above_100_percent(
        capsys, monkeypatch):
    from bughunt import experiment
    from bughunt.cli import main

    def two_kills(config, tries, **kw):            # where two real kills landed, as measured
        return {"tries": 2, "real_kills": 2, "kills_in_page_loop": 2, "duplicates_hit": 0,
                "rule_of_three_bound": experiment.rule_of_three(2),
                "exact_95_bound": 1 - 0.05 ** 0.5,
                "runs": [{"landed": "p10.waiting_for_model"}, {"landed": "p11.after_visit"}]}

    monkeypatch.setattr(experiment, "kill_random", two_kills)
    assert main(["kill-random", "--tries", "2"]) == 0
    out = capsys.readouterr().out
    assert "150.0%" not in out and "rule of three: 2 kills in the page loop are too few" in out
