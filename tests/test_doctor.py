"""`python -m bughunt doctor`: the optional parts (lessons 10 and 11, the browser tests, the Chinese
font, the book) are reported with what each one's absence disables, and never fail the check."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bughunt import doctor
from conftest import ROOT


def run_doctor(tmp_path, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bughunt", "doctor", "--dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


def test_pins_are_read_from_requirements_txt():
    pinned = doctor.pins(ROOT / "requirements.txt")
    for dist in ("langgraph", "langgraph-checkpoint-sqlite", "dbos", "openai"):
        assert dist in pinned and pinned[dist][0].isdigit(), dist
    assert "pandas" not in pinned                    # a range, not a pin


def test_a_part_at_another_version_than_the_pin_is_reported_with_both(tmp_path):
    have = doctor.md.version("openai")
    (tmp_path / "requirements.txt").write_text("openai==0.0.1  # lesson 11\n")
    part = next(p for p in doctor.PARTS if p.dists == ("openai",))
    found = doctor.check_part(part, doctor.pins(tmp_path / "requirements.txt"))
    assert not found.ok
    assert found.detail == f"openai is {have}, requirements.txt pins 0.0.1"
    assert "lesson 11" in found.disables and "make setup" in found.fix


def test_a_part_not_installed_or_not_importable_says_so():
    missing = doctor.Part("x", ("bughunt-no-such-dist",), ("json",), "nothing")
    assert doctor.check_part(missing, {}).detail == "bughunt-no-such-dist is not installed"
    broken = doctor.Part("x", ("pytest",), ("bughunt_no_such_module",), "nothing")
    found = doctor.check_part(broken, {})
    assert not found.ok and "ModuleNotFoundError" in found.detail
    assert "import bughunt_no_such_module" in found.detail


def test_the_installed_lesson_10_and_11_parts_import_at_their_pins():
    found = {c.name: c for c in doctor.optional_checks()}
    for name in ("lesson 10: LangGraph", "lesson 10: DBOS", "lesson 11: the openai SDK"):
        assert found[name].ok, found[name].detail
        assert found[name].detail.endswith("imported")


@pytest.mark.slow
def test_doctor_reports_a_missing_chromium_with_what_it_disables_and_still_passes(tmp_path):
    proc = run_doctor(tmp_path, BUGHUNT_CHROMIUM=str(tmp_path / "no-chromium"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    line = next(i for i, s in enumerate(out.splitlines()) if "browser tests: Chromium" in s)
    block = out.splitlines()[line:line + 3]
    assert block[0].startswith("---") and f"no Chromium at {tmp_path / 'no-chromium'}" in block[0]
    assert "without it: the browser tests" in block[1]
    assert "what to do: install Debian's Chromium" in block[2]
    assert "optional part missing" in out.splitlines()[-1]
    assert out.index("checks passed") > out.index("optional parts")


def test_doctor_without_a_cjk_font_says_the_terms_show_as_boxes(tmp_path, monkeypatch):
    # fontconfig reading a configuration with no font folder at all: no CJK font, as on a bare
    # machine (Linux; the check trusts macOS's own fonts).
    conf = tmp_path / "fonts.conf"
    conf.write_text('<?xml version="1.0"?><fontconfig><cachedir>'
                    f'{tmp_path / "cache"}</cachedir></fontconfig>')
    monkeypatch.setenv("FONTCONFIG_FILE", str(conf))
    found = doctor.check_cjk_font()
    if doctor.platform.system() == "Darwin":
        assert found.ok
        return
    assert not found.ok and "empty boxes" in found.disables and "fonts-noto-cjk" in found.fix
