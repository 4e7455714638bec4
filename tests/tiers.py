"""The test tiers, as `make test-fast` and `make test` run them; prints each tier's wall time and
the slowest tests, so a regression shows in CI's log.

    python tests/tiers.py fast [--lesson N]   unit, stores, conformance, small-site lessons, the
                                              static notebook checks (pytest -m "not slow"); with
                                              --lesson N, that lesson's claims too
    python tests/tiers.py full                every test: the notebooks under strict nbval; then
                                              the fast tier, the slow tests, the book and the
                                              browser, as one pytest run (what each took is
                                              summed from its report); then every lesson's claims

`full` makes one folder of results for the whole run (`BUGHUNT_RESULTS_DIR`, see
`bughunt/lab/results.py`) and removes it at the end, on success, failure and Ctrl-C: the notebooks'
kernels keep each experiment they run there, and `python -m bughunt claims` reads them instead of
running every experiment again. The tiers all run, even after one fails, so one log shows every
failure; the exit code is the first failing tier's (130 on Ctrl-C).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import NOTEBOOK_FOLDER, folder_state, put_back  # noqa: E402 - tests/ is no package
from leftovers import MARK, left_behind  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
NBVAL = ["--nbval", "--nbval-current-env", "--nbval-sanitize-with", "notebooks/sanitize.cfg",
         "--nbval-cell-timeout=300", "--nbval-kernel-startup-timeout=120"]
#: What each tier is allowed on a 2-core machine (README, "Two commands"); `make bench` measures it.
TARGET_S = {"fast": 180, "full": 600}
NOTEBOOKS_TIER = "notebooks (strict nbval)"
TESTS_TIER = "tests: fast, slow, book and browser"
SLOWEST = 15
#: One worker more than the machine has cores (at most 5): the tests' processes wait (for a child,
#: a server, a browser) often enough that on 2 cores a third worker took the one pytest run of
#: `full` from 457 s to 417 s (the README's figures); whole files to a worker (--dist loadfile).
XDIST = ["-n", str(min((os.cpu_count() or 1) + 1, 5)), "--dist", "loadfile"]
STOP_GRACE_S = 60


def pytest(*args: str) -> list[str]:
    """A pytest run on every core (pytest-xdist, XDIST): whole files to a worker, so a notebook's
    cells, a module's servers and the book's build stay together (the README says what it saves
    on 2 cores)."""
    return [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", *XDIST, *args]


def tiers(name: str, lesson: int | None) -> list[tuple[str, list[str]]]:
    fast = [("fast tests", pytest("-m", "not slow", "tests"))]
    if name == "fast":
        if lesson is not None:
            fast.append((f"claims of lesson {lesson}",
                         [PY, "-m", "bughunt", "claims", "--lesson", str(lesson)]))
        return fast
    notebooks = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "notebooks").glob("*.ipynb"))
    # The notebooks first: their kernels measure each experiment once, and the tests and the
    # claims after them read it (bughunt/lab/results.py). The fast, slow, book and browser tests
    # then run as one pytest run, so no core waits for another tier's last file (what each tier
    # took is summed from the JUnit report: conftest.py files each test under its tier).
    return [(NOTEBOOKS_TIER, pytest(*NBVAL, *notebooks)),
            (TESTS_TIER, pytest("tests")),
            ("claims", [PY, "-m", "bughunt", "claims"])]


def cases(reports: list[Path]) -> list[tuple[float, str, str]]:
    """(seconds, test, tier) of every test case in the JUnit reports (the tier conftest.py filed
    it under, or "" when it did not: the notebooks' cells)."""
    found = []
    for report in reports:
        try:
            root = ET.parse(report).getroot()
        except (OSError, ET.ParseError):
            continue
        for case in root.iter("testcase"):
            tier = next((p.get("value", "") for p in case.iter("property")
                         if p.get("name") == "tier"), "")
            found.append((float(case.get("time", 0)),
                          f"{case.get('classname', '')}::{case.get('name', '')}", tier))
    return found


def slowest(reports: list[Path], n: int = SLOWEST) -> list[tuple[float, str]]:
    """The `n` slowest test cases over every tier's JUnit report."""
    return sorted(((t, name) for t, name, _ in cases(reports)), reverse=True)[:n]


def test_seconds_by_tier(reports: list[Path]) -> dict[str, float]:
    """The seconds the tests of each tier ran, summed over every worker."""
    by: dict[str, float] = {}
    for seconds, _, tier in cases(reports):
        if tier:
            by[tier] = by.get(tier, 0.0) + seconds
    return by


def stop(proc: subprocess.Popen) -> None:
    """Ask `proc` to stop as a terminal would (SIGINT); kill it after STOP_GRACE_S."""
    try:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def call(cmd: list[str], env: dict) -> int:
    """`cmd`'s exit code. On Ctrl-C (or SIGTERM) the tier is asked to stop as a terminal would
    ask it (SIGINT), so pytest ends its workers and kernels itself, and is killed only if it has
    not stopped within STOP_GRACE_S; then the interrupt goes on up."""
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env)
    try:
        return proc.wait()
    except BaseException:
        stop(proc)
        raise


def notebooks_leaving_nothing(cmd: list[str], env: dict, work: Path) -> int:
    """Run the notebooks as a learner's kernels run them, each process of the run marked and
    given temp folders of its own; then nothing of theirs may still run, and their folders must
    be empty (the lessons with servers and fork pools, 7, 11, 12 and 13, stop what they start).
    Exit 1 with what was left, when something was; else the notebooks' own exit code."""
    token = uuid.uuid4().hex
    scratch = work / "tmp"
    scratch.mkdir()
    shm = Path("/dev/shm")
    ram = Path(tempfile.mkdtemp(prefix="bughunt-tiers-", dir=shm)) if shm.is_dir() else None
    env = {**env, MARK: token, "TMPDIR": str(scratch), "BUGHUNT_RAM_DIR": str(ram or "")}
    # Lesson 9's %%writefile cells write their stores into notebooks/, as for a learner: the
    # folder is put back as it was (tests/conftest.py does the same around a pytest run).
    before = folder_state(NOTEBOOK_FOLDER)
    # pytest's own temp folders (xdist's workers make theirs under TMPDIR) go beside, not in it
    cmd = [*cmd, f"--basetemp={work / 'pytest'}"]
    try:
        code = call(cmd, env)
        left = left_behind(token, [scratch, *([ram] if ram else [])]) if Path("/proc").is_dir() \
            else [f"left in {scratch}: {p.name}" for p in sorted(scratch.iterdir())]
    finally:
        put_back(NOTEBOOK_FOLDER, before)
        if ram:
            shutil.rmtree(ram, ignore_errors=True)
    if left:
        print("the notebooks left behind:\n  " + "\n  ".join(left), flush=True)
        return code or 1
    return code


class StoppedBySigterm(BaseException):
    """SIGTERM, raised like KeyboardInterrupt so the tiers stop and clean up the same way."""


def _stopped_by_sigterm(signum, frame):
    raise StoppedBySigterm()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tests/tiers.py", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tier", choices=["fast", "full"])
    parser.add_argument("--lesson", type=int, metavar="N",
                        help="(fast) also check this lesson's claims (99: the appendix)")
    parser.add_argument("--report", type=Path, metavar="FILE",
                        help="write each tier's wall time and exit code to FILE as JSON "
                             "(make bench reads it)")
    args = parser.parse_args(argv)
    # The tests of Ctrl-C need SIGINT deliverable: a run started in the background (nohup, `&`
    # in a script) begins with it ignored, and every child would inherit that. A handler of ours
    # is not inherited: each child starts with the default.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _stopped_by_sigterm)
    if args.report is not None:
        try:
            with open(args.report, "a"):         # writable now, not found out after every tier
                pass
        except OSError as e:
            parser.error(f"argument --report: {args.report}: {e.strerror}")
    try:
        import xdist  # noqa: F401
    except ImportError:
        print("tiers: pytest-xdist is missing from this Python: run `make setup` (it is in "
              "requirements.txt)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="bughunt-tiers-"))
    env = dict(os.environ, PYTHONHASHSEED="0")
    env.pop("BUGHUNT_RESULTS_DIR", None)         # only a folder this run makes is ever read
    if args.tier == "full":
        (work / "results").mkdir()
        env["BUGHUNT_RESULTS_DIR"] = str(work / "results")
    done: list[tuple[str, float, int]] = []
    reports = []
    started = time.monotonic()
    try:
        for i, (name, cmd) in enumerate(tiers(args.tier, args.lesson)):
            if cmd[1:3] == ["-m", "pytest"]:
                reports.append(work / f"tier{i}.xml")
                cmd = [*cmd, f"--junitxml={reports[-1]}"]
            print(f"\n=== tier: {name} ===", flush=True)
            t0 = time.monotonic()
            if name == NOTEBOOKS_TIER:
                code = notebooks_leaving_nothing(cmd, env, work)
            else:
                code = call(cmd, env)
            done.append((name, time.monotonic() - t0, code))
            if code in (-signal.SIGINT, 130):
                raise KeyboardInterrupt
    except KeyboardInterrupt:
        print("\ntiers: stopped by Ctrl-C", file=sys.stderr)
        return 130
    except StoppedBySigterm:
        print("\ntiers: stopped by SIGTERM", file=sys.stderr)
        return 143
    finally:
        total = time.monotonic() - started
        print(f"\n=== where the time went ({args.tier} tier) ===")
        by_tier = test_seconds_by_tier(reports)
        for name, seconds, code in done:
            print(f"{seconds:8.1f} s  {name}{'' if code == 0 else f'  (FAILED, exit {code})'}")
            if name == TESTS_TIER and by_tier:
                print("            of the workers' time: " + ", ".join(
                    f"{tier} {t:.0f} s" for tier, t in sorted(by_tier.items())))
        print(f"{total:8.1f} s  in all (target: {TARGET_S[args.tier]} s on 2 cores)")
        if reports and done:
            print(f"\nthe {SLOWEST} slowest tests:")
            for seconds, case in slowest(reports):
                print(f"{seconds:8.1f} s  {case}")
        shutil.rmtree(work, ignore_errors=True)
        if args.report is not None:
            try:
                args.report.write_text(json.dumps({
                    "tier": args.tier, "seconds": round(total, 1),
                    "target_s": TARGET_S[args.tier],
                    "tiers": [{"name": n, "seconds": round(t, 1), "exit": c} for n, t, c in done],
                    "test_seconds_by_tier": {k: round(v, 1) for k, v in by_tier.items()}},
                    indent=1) + "\n")
            except OSError as e:
                print(f"tiers: {args.report}: cannot write the report ({e.strerror})",
                      file=sys.stderr)
    # pytest's 5 (nothing collected) is a failure here: a tier that tests nothing is a broken tier
    failed = [code for _, _, code in done if code != 0]
    return failed[0] if failed else 0


if __name__ == "__main__":
    sys.exit(main())
