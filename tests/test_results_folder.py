"""The test run's folder of results (bughunt/lab/results.py): an experiment measured by one
process of the run is read by the next instead of being run again; never a result of other
code, never one a faked experiment produced, never after a reset."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bughunt.lab import results

#: A child process of the run: counts, in a file, how often its experiment really ran.
CHILD = '''
import sys
from pathlib import Path
from bughunt.lab import results
ran = Path(sys.argv[1])

@results.memoized
def experiment(n):
    ran.write_text(ran.read_text() + "ran\\n" if ran.exists() else "ran\\n")
    return {"measured": n * 7}

print(experiment(6)["measured"])
'''


def child(tmp_path: Path, folder: Path | None, **env) -> str:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    environ = {k: v for k, v in os.environ.items() if k != results.RUN_DIR_VARIABLE}
    if folder is not None:
        environ[results.RUN_DIR_VARIABLE] = str(folder)
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "ran")],
                          capture_output=True, text=True, env={**environ, **env}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def runs(tmp_path: Path) -> int:
    ran = tmp_path / "ran"
    return len(ran.read_text().splitlines()) if ran.exists() else 0


def test_a_second_process_of_the_run_reads_the_result_instead_of_running_again(tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    assert child(tmp_path, folder) == "42" and runs(tmp_path) == 1
    assert child(tmp_path, folder) == "42" and runs(tmp_path) == 1     # read, not run
    assert len(list(folder.glob("*.pickle"))) == 1


def test_without_a_run_folder_every_process_runs_its_own(tmp_path):
    child(tmp_path, None)
    child(tmp_path, None)
    assert runs(tmp_path) == 2


def test_a_result_of_other_code_is_never_read(tmp_path, monkeypatch):
    folder = tmp_path / "results"
    folder.mkdir()
    monkeypatch.setenv(results.RUN_DIR_VARIABLE, str(folder))
    key = ("test", "a key")
    here = results._disk_path(key)
    assert here.parent == folder
    monkeypatch.setattr(results, "code_digest", lambda: "another version of the lab")
    assert results._disk_path(key) != here


def test_the_digest_changes_with_any_file_of_the_code_or_data(tmp_path):
    """On a copy: the lab's own files are never rewritten by a test."""
    code, data = tmp_path / "bughunt", tmp_path / "data"
    (code / "lab").mkdir(parents=True)
    data.mkdir()
    (code / "lab" / "results.py").write_text("x = 1\n")
    (data / "site.json").write_text("{}\n")
    first = results.digest_of((code, data))
    assert results.digest_of((code, data)) == first
    (data / "site.json").write_text('{"pages": 13}\n')
    second = results.digest_of((code, data))
    (code / "lab" / "results.py").write_text("x = 2\n")
    assert len({first, second, results.digest_of((code, data))}) == 3
    (code / "lab" / "__pycache__").mkdir()
    (code / "lab" / "__pycache__" / "results.pyc").write_bytes(b"\0")
    assert results.digest_of((code, data)) == results.digest_of((code, data))


def test_this_test_process_reads_the_folder_but_never_writes_it(tmp_path, monkeypatch):
    """A test fakes experiments on purpose: what it measures must not reach the claims."""
    folder = tmp_path / "results"
    folder.mkdir()
    monkeypatch.setenv(results.RUN_DIR_VARIABLE, str(folder))
    assert results._DISK["write"] is False                         # tests/conftest.py
    results.remember(("test", "faked", str(tmp_path)), lambda: "a faked sweep")
    assert list(folder.iterdir()) == []


def test_a_reset_stops_this_process_reading_the_folder(tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    child(tmp_path, folder)
    script = tmp_path / "reset.py"
    script.write_text(CHILD.replace("print(experiment(6)", "results.reset()\nprint(experiment(6)"))
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "ran")], text=True,
                          capture_output=True, env={**os.environ,
                                                    results.RUN_DIR_VARIABLE: str(folder)})
    assert proc.returncode == 0 and proc.stdout.strip() == "42", proc.stderr
    assert runs(tmp_path) == 2                     # run again, as the panel's Reset promises


def test_a_damaged_entry_is_measured_again(tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    child(tmp_path, folder)
    [entry] = folder.glob("*.pickle")
    entry.write_bytes(b"not a pickle")
    assert child(tmp_path, folder) == "42" and runs(tmp_path) == 2


@pytest.mark.parametrize("key", [("x", object()), ("x", lambda: 1)], ids=["object", "function"])
def test_a_key_that_names_an_object_by_its_address_is_kept_in_this_process_only(key, tmp_path,
                                                                                  monkeypatch):
    monkeypatch.setenv(results.RUN_DIR_VARIABLE, str(tmp_path))
    assert results._disk_path(key) is None
