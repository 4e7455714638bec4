"""The explorer: any program's crash states from its system calls (Linux, strace).

Tests that trace a program need strace and ptrace: they are skipped, with the reason, where
either is missing, and `.ci/run` (which installs strace) makes them required
(BUGHUNT_REQUIRE_STRACE=1).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bughunt.explore import ExploreRefused, explore, self_check
from bughunt.explore import trace as T
from bughunt.explore.check import CheckerVerdict, judge_state
from bughunt.explore.states import oracles
from bughunt.explore.workloads import SKELETON, explore_workload
from bughunt.instruments.journal import Op
from bughunt.powerloss import Disk

ROOT = Path(__file__).resolve().parent.parent


def _strace_works() -> str | None:
    if not sys.platform.startswith("linux"):
        return f"explore is Linux only (this is {sys.platform})"
    if shutil.which("strace") is None:
        return "strace is not installed (.ci/run installs it)"
    probe = subprocess.run(["strace", "-f", "-qq", "-o", "/dev/null", "--", "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return f"strace cannot trace here (ptrace denied?): {probe.stderr.strip()[:120]}"
    return None


WHY_NOT = _strace_works()
if WHY_NOT and os.environ.get("BUGHUNT_REQUIRE_STRACE"):
    raise RuntimeError(f"BUGHUNT_REQUIRE_STRACE is set but {WHY_NOT}")
needs_strace = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")


def _script(tmp_path: Path, name: str, body: str) -> list[str]:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


READER = """
    import json, os, sys
    p = os.path.join(sys.argv[1], "state.json")
    try:
        print(json.dumps({"items": {"step": str(json.load(open(p))["step"])} if os.path.exists(p)
                          else {}}))
    except Exception as e:
        print(json.dumps({"error": repr(e)}))
"""


# --- the journal's one interpreter ------------------------------------------------------------------

def test_disk_replays_paths_below_the_run_directory_truncate_to_a_size_and_directory_renames():
    w = lambda p, off, data: {"op": Op.WRITE, "path": p, "offset": off,  # noqa: E731
                              "data": base64.b64encode(data).decode()}
    disk = Disk({"old.txt": b"0123456789"})
    for op in [{"op": Op.MKDIR, "path": "db"}, {"op": Op.CREATE, "path": "db/a"},
               w("db/a", 0, b"hello"), {"op": Op.TRUNC, "path": "db/a", "size": 8},
               {"op": Op.TRUNC, "path": "old.txt", "size": 4},
               {"op": Op.RENAME, "src": "db", "dst": "db2"}]:
        disk.apply(op)
    state = disk.everything(6)
    assert state.files == {"old.txt": b"0123", "db2/a": b"hello\0\0\0"}
    assert state.dirs == ("db2",)
    # A power cut with nothing synced: the old file as it was, no new directory or file.
    per_inode, dir_options = disk.choices()
    cut = disk.state(6, {}, dir_options[0], "nothing")
    assert cut.files == {"old.txt": b"0123456789"} and cut.dirs == ()


def test_ext4_directory_model_commits_earlier_names_with_any_fsync_and_strict_does_not():
    ops = [{"op": Op.CREATE, "path": "a"}, {"op": Op.CREATE, "path": "b"},
           {"op": Op.FSYNC, "path": "b"}]
    for model, kept in (("strict", {}), ("ext4", {"a": b"", "b": b""})):
        disk = Disk(dir_model=model)
        for op in ops:
            disk.apply(op)
        _, dir_options = disk.choices()
        assert disk.state(3, {}, dir_options[0], "").files == kept, model


def test_the_oracle_takes_the_last_acknowledged_version_and_judges_lost_and_phantom():
    ops = [{"op": Op.MARK, "what": "begin", "key": "a", "version": "1"},
           {"op": Op.MARK, "what": "ack", "key": "a", "version": "1"},
           {"op": Op.MARK, "what": "begin", "key": "a", "version": "2"},
           {"op": Op.MARK, "what": "ack", "key": "a", "version": "2"}]
    at = oracles(ops)
    assert [f.cls for f in judge_state(CheckerVerdict("items", {"a": "1"}), at[4])] == ["lost"]  # older
    assert judge_state(CheckerVerdict("items", {"a": "2"}), at[4]) == []
    assert dict(at[2].acked) == {"a": "1"} and at[3].versions("a") == ("1", "2")
    assert judge_state(CheckerVerdict("items", {"a": "2"}), at[3]) == []          # in flight: fine
    assert [f.cls for f in judge_state(CheckerVerdict("items", {}), at[3])] == ["lost"]
    assert [f.cls for f in judge_state(CheckerVerdict("items", {"a": "3"}), at[3])] == ["phantom"]
    assert [f.cls for f in judge_state(CheckerVerdict("items", {"b": "1"}), at[3])] == ["lost", "phantom"]
    assert judge_state(CheckerVerdict("refused", message="x"), at[0]) == []       # nothing acknowledged yet
    assert [f.cls for f in judge_state(CheckerVerdict("refused", message="x"), at[2])] == ["unreadable"]


def test_a_trace_line_joined_with_its_resumption_and_a_cut_buffer_is_refused():
    lines = ['7 write(3<\\x2f\\x64\\x2f\\x61>, "\\x68\\x69", 2 <unfinished ...>',
             '8 close(4) = 0',
             '7 <... write resumed>) = 2']
    [close, write] = T.calls(lines)
    assert (write.name, write.result, T._bytes(write.args[1])) == ("write", "2", b"hi")
    with pytest.raises(T.Truncated):
        T._bytes('"\\x68\\x69"...')


# --- tracing real programs -----------------------------------------------------------------------------

@needs_strace
def test_every_fd_rule_replays_to_the_final_directory_byte_for_byte(tmp_path):
    d = tmp_path / "d"
    program = _script(tmp_path, "fds.py", """
        import os, sys
        d = sys.argv[1]
        fd = os.open(os.path.join(d, "a"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.write(fd, b"hello\\n")
        os.pwrite(fd, b"XY", 1)            # O_APPEND: Linux appends all the same
        os.ftruncate(fd, 4)
        dup = os.dup(fd); os.close(fd); os.write(dup, b"!")   # a dup shares the description
        dirfd = os.open(d, os.O_RDONLY)
        os.mkdir("sub", dir_fd=dirfd)
        os.rename("a", "sub/b", src_dir_fd=dirfd, dst_dir_fd=dirfd)
        g = os.open(os.path.join(d, "c"), os.O_RDWR | os.O_CREAT)
        os.write(g, b"0123456789"); os.lseek(g, 2, os.SEEK_SET); os.read(g, 3); os.write(g, b"__")
        g2 = os.dup(g); os.lseek(g2, 0, os.SEEK_SET); os.write(g, b"AB")   # one shared offset
        os.posix_fallocate(g, 0, 16)
        if os.fork() == 0:                 # a child shares the offset, not the fd table
            os.write(g, b"child"); os.close(g)
            mine = os.open(os.path.join(d, "child"), os.O_WRONLY | os.O_CREAT)
            assert mine == g                     # the child's own fd g is another file now
            os.write(mine, b"own"); os._exit(0)
        os.wait(); os.write(g, b"parent")
        os.fsync(g); os.fsync(dirfd); os.sync()
        os.mkdir(os.path.join(d, "gone")); os.rmdir(os.path.join(d, "gone"))
        os.unlink(os.path.join(d, "child"))
        os.truncate(os.path.join(d, "c"), 30)
        print("ACK c 1", flush=True)
    """)
    (d).mkdir()
    (d / "before.txt").write_bytes(b"was here")
    before, dirs = {"before.txt": b"was here"}, []
    traced = T.run_traced(program + [str(d)], tmp_path)
    assert traced.returncode == 0, traced.stderr
    tr = T.parse(traced.text, d, Path.cwd(), before, dirs)
    assert tr.refusals == []
    assert self_check(tr.ops, before, dirs, d, set()) is None
    kinds = {str(op["op"]) for op in tr.ops}
    assert {"create", "write", "trunc", "mkdir", "rename", "fsync", "fsync_dir", "unlink",
            "rmdir", "mark"} <= kinds
    assert (d / "c").read_bytes()[:16] == b"ABchildparent\0\0\0"
    assert (d / "sub" / "b").read_bytes() == b"hell!"     # appended, truncated, dup'ed


@needs_strace
def test_rewriting_a_file_in_place_without_fsync_loses_acknowledged_data_at_a_kill(tmp_path):
    program = _script(tmp_path, "inplace.py", """
        import json, os, sys
        for step in range(1, 4):
            print(f"BEGIN step {step}", flush=True)
            with open(os.path.join(sys.argv[1], "state.json"), "w") as f:
                json.dump({"step": step}, f)
            print(f"ACK step {step}", flush=True)
    """)
    reader = _script(tmp_path, "reader.py", READER)
    d = tmp_path / "d"
    r = explore(program + [str(d)], d, check=" ".join(reader) + " {state}")
    assert r.trace_complete, r.why_not
    kill = [v for v in r.violations if v.model == "kill"]
    # The kill after the truncation of the second save: step 1 was acknowledged, nothing is left.
    assert any(v.cls == "unreadable" and v.after == "truncate state.json to 0 bytes"
               and v.last_ack == "ACK step 1 (operation 4)" for v in kill), kill
    assert r.kill.violations > 0 and r.power["strict"].by_class["lost"] > 0
    fig = r.figure()
    assert fig.axes[0].get_xlabel().startswith("operation")


@pytest.mark.slow
@needs_strace
def test_sqlite_in_wal_mode_with_synchronous_full_loses_nothing(tmp_path):
    r = explore_workload("sqlite-wal-full", tmp_path / "d", max_states=60)
    assert r.trace_complete, r.why_not
    assert r.kill.states > 20 and r.power["strict"].states > 20
    assert r.violations == []
    # ... and the same store with synchronous=NORMAL loses acknowledged commits to a power cut.
    normal = explore_workload("sqlite-wal-normal", tmp_path / "n", max_states=60)
    assert normal.kill.violations == 0 and normal.power["strict"].by_class["lost"] > 0


@needs_strace
@pytest.mark.parametrize("name, body, says", [
    ("mmap", """
        import mmap, os, sys
        fd = os.open(os.path.join(sys.argv[1], "m"), os.O_RDWR | os.O_CREAT)
        os.ftruncate(fd, 4096)
        m = mmap.mmap(fd, 4096)
        m[0:2] = b"hi"; m.flush()
        print("ACK m 1", flush=True)
    """, "maps m shared and writable"),
    ("sendfile", """
        import os, shutil, sys
        src = os.path.join(sys.argv[1], "..", "src.txt")
        open(src, "w").write("data" * 100)
        shutil.copyfile(src, os.path.join(sys.argv[1], "copy.txt"))
        print("ACK c 1", flush=True)
    """, "wrote copy.txt with sendfile"),
    ("threads", """
        import os, sys, threading
        fd = os.open(os.path.join(sys.argv[1], "log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        ready = threading.Barrier(2)
        def writer(tag):
            ready.wait()
            for i in range(20):
                os.write(fd, f"{tag} {i}\\n".encode())
        ts = [threading.Thread(target=writer, args=(t,)) for t in "ab"]
        [t.start() for t in ts]; [t.join() for t in ts]
        print("ACK log 1", flush=True)
    """, "two threads of one process"),
])
def test_a_program_strace_cannot_see_is_refused_with_one_sentence(tmp_path, name, body, says):
    program = _script(tmp_path, f"prog_{name}.py", body)
    reader = _script(tmp_path, "reader.py", READER)
    d = tmp_path / "d"
    proc = subprocess.run([sys.executable, "-m", "bughunt", "explore", "--dir", str(d),
                           "--check", " ".join(reader) + " {state}", "--json", "--",
                           *program, str(d)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    out = json.loads(proc.stdout)
    assert out["trace_complete"] is False and any(says in w for w in out["why_not"]), out["why_not"]
    assert out["violations"] == [] and len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr


@needs_strace
def test_an_allowed_opaque_file_is_marked_unreliable_and_left_out_of_the_self_check(tmp_path):
    program = _script(tmp_path, "shm.py", """
        import mmap, os, sys
        fd = os.open(os.path.join(sys.argv[1], "x-shm"), os.O_RDWR | os.O_CREAT)
        os.ftruncate(fd, 4096)
        m = mmap.mmap(fd, 4096); m[0:2] = b"hi"
    """)
    d = tmp_path / "d"
    d.mkdir()
    traced = T.run_traced(program + [str(d)], tmp_path)
    refused = T.parse(traced.text, d, Path.cwd(), {})
    assert any("x-shm shared and writable" in r for r in refused.refusals)
    allowed = T.parse(traced.text, d, Path.cwd(), {}, allow_opaque=["*-shm"])
    assert allowed.refusals == [] and allowed.opaque == {"x-shm"}
    assert [op["op"] for op in allowed.ops if op["op"] == Op.UNRELIABLE] == [Op.UNRELIABLE]
    assert self_check(allowed.ops, {}, [], d, set()) is not None      # the bytes differ...
    assert self_check(allowed.ops, {}, [], d, allowed.opaque) is None  # ...by name only


def _run_cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "bughunt", "explore", *args],
                          capture_output=True, text=True, cwd=cwd)


@pytest.mark.parametrize("args, says", [
    ([], "the following arguments are required: --dir"),
    (["--dir", "D"], "no PROGRAM: put it after --"),
    (["--dir", "D", "--timeout", "0", "--", "true"], "--timeout 0: must be more than 0"),
    (["--dir", "D", "--samples", "x", "--", "true"], "--samples"),
])
def test_bad_flags_get_one_sentence_and_exit_2(tmp_path, args, says):
    proc = _run_cli(*args, cwd=tmp_path)
    assert proc.returncode == 2
    assert says in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "D").exists()


@needs_strace
@pytest.mark.parametrize("program, check, says", [
    (["./no-such-program"], "true {state}", "PROGRAM './no-such-program' cannot start"),
    (["no-such-program-anywhere"], "true {state}", "cannot start: no such file"),
    ([sys.executable, "-c", "import sys; sys.exit(3)"], "true {state}",
     "PROGRAM exited with status 3"),
    (["true"], "cat", "has no {state}"),
    (["true"], None, "nothing to check the states against"),
])
def test_a_program_that_cannot_start_or_fails_gets_one_sentence_and_exit_2(tmp_path, program,
                                                                             check, says):
    flags = ["--dir", str(tmp_path / "d")] + (["--check", check] if check else [])
    proc = _run_cli(*flags, "--", *program, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_without_strace_the_explorer_refuses_with_one_sentence(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(ExploreRefused, match="strace is not installed"):
        explore(["true"], tmp_path / "d", check="true {state}")
    monkeypatch.setattr(sys, "platform", "darwin")
    with pytest.raises(ExploreRefused, match="Linux only"):
        explore(["true"], tmp_path / "d", check="true {state}")


@needs_strace
def test_the_skeleton_runs_under_the_explorer_and_loses_at_the_truncation(tmp_path):
    script = tmp_path / "my_agent.py"
    script.write_text(SKELETON)
    assert len(SKELETON.splitlines()) <= 12
    d = tmp_path / "ck"
    r = explore([sys.executable, str(script), "run", str(d)], d,
                check=f"{sys.executable} {script} check {{state}}")
    assert r.trace_complete and r.kill.by_class["unreadable"] > 0
    assert any(v.unfinished_ops == ["truncate checkpoint.json to 0 bytes"] for v in r.violations)


# --- the cross-check ---------------------------------------------------------------------------------

@pytest.mark.slow
@needs_strace
@pytest.mark.parametrize("fsync", ["never", "always"])
@pytest.mark.parametrize("write_mode", ["atomic", "torn", "no-newline"])
def test_on_the_lab_log_store_the_explorer_sees_the_door_op_for_op_and_agrees_with_conformance(
        tmp_path, write_mode, fsync):
    from bughunt.explore.crosscheck import agrees, align, cross_check

    r = cross_check(write_mode, fsync, tmp_path, max_states=20)
    assert r["trace_complete"], r["why_not"]
    same, extra = align(r["explorer ops"], r["lab ops"])
    assert same and len(r["lab ops"]) > 8 and extra <= 4, (r["explorer ops"], r["lab ops"])
    assert agrees(r, fsync), r
    assert bool(r["explorer: kill classes"]) == (write_mode == "no-newline")


@pytest.mark.slow
@needs_strace
def test_a_checker_that_hangs_is_stopped_at_the_timeout_and_counted_as_a_hang(tmp_path):
    program = _script(tmp_path, "one.py", """
        import os, sys
        open(os.path.join(sys.argv[1], "f"), "w").write("x")
        print("ACK f 1", flush=True)
    """)
    hang = _script(tmp_path, "hang.py", "import time; time.sleep(600)\n")
    d = tmp_path / "d"
    r = explore(program + [str(d)], d, check=" ".join(hang) + " {state}", timeout=0.5,
                max_states=2, samples_per_cut=1)
    assert r.trace_complete and r.kill.by_class["hang"] == r.kill.states > 0
    assert {v.cls for v in r.violations} == {"hang"}


@pytest.mark.slow
@needs_strace
def test_a_program_that_never_ends_is_stopped_with_everything_it_started(tmp_path):
    marker = f"bughunt-explore-test-{os.getpid()}"
    program = _script(tmp_path, "forever.py", f"""
        import os, subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "{marker}"])
        time.sleep(600)
    """)
    proc = _run_cli("--dir", str(tmp_path / "d"), "--check", "true {state}",
                    "--program-timeout", "2", "--", *program, cwd=tmp_path)
    assert proc.returncode == 2 and "did not finish within 2 s" in proc.stderr
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout
    assert left.strip() == ""


@needs_strace
def test_a_dir_reached_through_a_symlink_is_still_dir(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    program = _script(tmp_path, "w.py", """
        import os, sys
        open(os.path.join(sys.argv[1], "f"), "w").write("x")
        print("ACK f 1", flush=True)
    """)
    r = explore(program + [str(tmp_path / "link")], tmp_path / "link", ack_lines=None,
                check=" ".join(_script(tmp_path, "r.py", "print('{\"items\": {}}')\n")) + " {state}")
    assert r.trace_complete, r.why_not
    assert [str(op["op"]) for op in r.ops][:2] == ["create", "write"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="explore is Linux only")
def test_ptrace_denied_gets_one_sentence_and_exit_2(tmp_path):
    # An strace as a sandbox that denies ptrace leaves it: it says so and exits 1.
    fake = tmp_path / "bin" / "strace"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'strace: test_ptrace_get_syscall_info: PTRACE_TRACEME: "
                    "Operation not permitted' >&2\nexit 1\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}"}
    proc = subprocess.run([sys.executable, "-m", "bughunt", "explore", "--dir", str(tmp_path / "d"),
                           "--check", "true {state}", "--", "true"],
                          capture_output=True, text=True, cwd=ROOT, env=env)
    assert proc.returncode == 2
    assert "ptrace is denied here" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@needs_strace
def test_ack_lines_make_each_fsynced_line_an_acknowledgement_and_the_dir_model_decides(tmp_path):
    program = _script(tmp_path, "log.py", """
        import os, sys
        fd = os.open(os.path.join(sys.argv[1], "log.txt"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        for i in range(3):
            os.write(fd, f"line {i}\\n".encode()); os.fsync(fd)
    """)
    d = tmp_path / "d"
    r = explore(program + [str(d)], d, ack_lines="log.txt:fsync")
    assert r.trace_complete, r.why_not
    assert r.kill.violations == 0
    # The file's name was never made durable by a directory fsync: the strict model loses the
    # file, the ext4-like one (any fsync commits earlier names) keeps every fsynced line.
    assert r.power["strict"].by_class["lost"] > 0 and r.power["ext4"].violations == 0
    unsynced = explore(program + [str(tmp_path / "e")], tmp_path / "e", ack_lines="log.txt")
    assert unsynced.kill.violations == 0


# --- issue 28: no hang, no traceback, nothing left running, a verdict that says what it means ----

ONE_ACK = """
    import os, sys
    open(os.path.join(sys.argv[1], "f"), "w").write("x")
    print("ACK f 1", flush=True)
"""


@pytest.mark.parametrize("directory, says", [
    ("/", "is the root directory"), ("/proc", "is in /proc, the kernel's view of itself"),
    ("/proc/self", "is in /proc"), ("/sys", "is in /sys")])
def test_a_kernel_directory_or_the_root_is_refused_before_anything_is_read(
        tmp_path, directory, says, capsys):
    from bughunt.explore.cli import main

    assert main(["--dir", directory, "--check", "true {state}", "--", "true"]) == 2
    err = capsys.readouterr().err
    assert f"--dir {directory}: {says}" in err and len(err.strip().splitlines()) == 1


def test_a_directory_above_the_size_the_explorer_reads_is_refused(tmp_path, monkeypatch):
    import bughunt.explore as E

    (tmp_path / "big").write_bytes(b"x" * 2048)
    monkeypatch.setattr(E, "MAX_DIR_BYTES", 1024)
    with pytest.raises(ExploreRefused, match="holds more than 0 MiB"):
        E.snapshot(tmp_path)
    monkeypatch.setattr(E, "MAX_DIR_BYTES", 1 << 20)
    monkeypatch.setattr(E, "MAX_DIR_ENTRIES", 3)
    for i in range(4):
        (tmp_path / f"f{i}").write_text("x")
    with pytest.raises(ExploreRefused, match="holds more than 3 files and directories"):
        E.snapshot(tmp_path)
    monkeypatch.setattr(E, "MAX_DIR_ENTRIES", 10)
    files, dirs = E.snapshot(tmp_path)
    assert len(files) == 5 and dirs == []


@pytest.mark.parametrize("flag", ["--timeout", "--program-timeout"])
@pytest.mark.parametrize("value", ["inf", "nan", "1e300", "-1"])
def test_a_timeout_that_cannot_be_waited_for_is_refused(tmp_path, flag, value, capsys):
    from bughunt.explore.cli import main

    with pytest.raises(SystemExit) as e:
        main(["--dir", str(tmp_path / "d"), "--check", "true {state}", flag, value, "--",
              "true"])
    assert e.value.code == 2
    assert f"{flag} " in capsys.readouterr().err and not (tmp_path / "d").exists()


@needs_strace
def test_a_file_name_that_is_not_utf8_is_explored_and_printed_without_a_traceback(tmp_path):
    """issue 28: a program creating a file whose name is not UTF-8 ended the explorer with a
    UnicodeEncodeError (`powerloss.digest`, then the text report)."""
    program = _script(tmp_path, "bad_name.py", """
        import os, sys
        fd = os.open(os.path.join(os.fsencode(sys.argv[1]), b"bad\\xff"), os.O_WRONLY | os.O_CREAT)
        os.write(fd, b"x"); os.close(fd)
        open(os.path.join(sys.argv[1], "f"), "w").write("1")
        print("ACK f 1", flush=True)
    """)
    reader = _script(tmp_path, "reader_f.py", """
        import json, os, sys
        p = os.path.join(sys.argv[1], "f")
        print(json.dumps({"items": {"f": open(p).read()} if os.path.exists(p) else {}}))
    """)
    d = tmp_path / "d"
    for extra in ([], ["--json"]):
        shutil.rmtree(d, ignore_errors=True)
        proc = subprocess.run([sys.executable, "-m", "bughunt", "explore", "--dir", str(d),
                               "--check", " ".join(reader) + " {state}", *extra, "--",
                               *program, str(d)],
                              capture_output=True, text=True, cwd=ROOT,
                              env={**os.environ, "PYTHONIOENCODING": "utf-8"})
        assert proc.returncode in (0, 1), proc.stderr
        assert "Traceback" not in proc.stderr
        if extra:
            assert json.loads(proc.stdout)["trace_complete"] is True
        else:
            assert "bad\\udcff" in proc.stdout        # the byte 0xff, escaped


DAEMON_CHECKER = """
    import json, os, sys, time
    if os.fork() == 0:                   # a daemon: out of the group and the session
        os.setsid()
        pid = os.fork()
        if pid == 0:
            time.sleep(600)
        # its pid, said before the daemon is an orphan (which the subreaper ends at once)
        open(os.path.join(os.environ["BUGHUNT_TEST_DAEMONS"], str(pid)), "w").close()
        os._exit(0)
    os.wait()
    p = os.path.join(sys.argv[1], "f")
    print(json.dumps({"items": {"f": "1"} if os.path.exists(p) else {}}))
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@needs_strace
def test_a_checker_that_double_forks_leaves_nothing_running(tmp_path, monkeypatch):
    """issue 28: a checker that double-forked left a daemon behind at every state (13 of them):
    the checker runs under the boundary's supervisor, a subreaper, which ends them all."""
    daemons = tmp_path / "daemons"
    daemons.mkdir()
    monkeypatch.setenv("BUGHUNT_TEST_DAEMONS", str(daemons))
    program = _script(tmp_path, "one.py", ONE_ACK)
    checker = _script(tmp_path, "daemon.py", DAEMON_CHECKER)
    d = tmp_path / "d"
    r = explore(program + [str(d)], d, check=" ".join(checker) + " {state}", max_states=2,
                samples_per_cut=1)
    assert r.trace_complete and r.checks > 0, r.why_not
    started = [int(p.name) for p in daemons.iterdir()]
    assert len(started) == r.checks                  # each check started its daemon...
    assert [p for p in started if _alive(p)] == []   # ...and none is left running


@needs_strace
def test_the_verdict_on_the_program_is_its_own_field_and_every_violation_is_listed(tmp_path):
    """issue 28: `"reliable": true` beside 63 violations read as "your program is reliable"; the
    text report showed one violation per class. Now the JSON says `trace_complete` (what it
    meant) and `verdict`; the text lists up to 20 violating states and says how many more."""
    program = _script(tmp_path, "inplace.py", """
        import os, sys
        p = os.path.join(sys.argv[1], "log")
        for i in range(1, 13):
            with open(p, "w") as f:
                f.write("x" * i)
            print(f"ACK k {i}", flush=True)
    """)
    reader = _script(tmp_path, "reader.py", """
        import json, os, sys
        p = os.path.join(sys.argv[1], "log")
        n = len(open(p).read()) if os.path.exists(p) else 0
        print(json.dumps({"items": {"k": str(n)} if n else {}}))
    """)
    d = tmp_path / "d"
    flags = ["--dir", str(d), "--check", " ".join(reader) + " {state}", "--samples", "1"]
    proc = _run_cli(*flags, "--json", "--", *program, str(d))
    assert proc.returncode == 1, proc.stderr
    out = json.loads(proc.stdout)
    assert out["trace_complete"] is True and "reliable" not in out
    assert out["verdict"] == "violations" and out["violating_states"] == len(out["violations"])
    n = len(out["violations"])
    assert n > 20
    shutil.rmtree(d)
    text = _run_cli(*flags, "--", *program, str(d)).stdout
    listed = [line for line in text.splitlines() if line.startswith(("lost (", "phantom (",
                                                                     "unreadable (", "hang ("))]
    assert len(listed) == 20
    assert f"... and {n - 20} more violating states ({n} in all): --json lists every one" in text


DAEMON_PROGRAM = """
    import os, sys
    if os.fork() == 0:                   # a daemon: out of the group and the session
        os.setsid()
        pid = os.fork()
        if pid == 0:
            os.execvp("sleep", ["sleep", "600"])
        open(os.path.join(os.environ["BUGHUNT_TEST_DAEMONS"], str(pid)), "w").close()
        os._exit(0)
    os.wait()
    open(os.path.join(sys.argv[1], "f"), "w").write("x")
    print("ACK f 1", flush=True)
"""


@needs_strace
def test_a_program_that_double_forks_a_daemon_leaves_nothing_running(tmp_path, monkeypatch):
    """issue 28: PROGRAM's own daemon (double fork, setsid, `sleep 600`) outlived the explorer,
    which then said that every process PROGRAM started was stopped. PROGRAM runs under the
    boundary's supervisor, a subreaper, which ends it; what is left running is looked for in
    /proc, never assumed. Ended at once, the daemon wrote nothing it meant to: there is no
    verdict, and the reason names it."""
    daemons = tmp_path / "daemons"
    daemons.mkdir()
    monkeypatch.setenv("BUGHUNT_TEST_DAEMONS", str(daemons))
    program = _script(tmp_path, "daemon.py", DAEMON_PROGRAM)
    checker = _script(tmp_path, "reader.py", """
        import json, os, sys
        p = os.path.join(sys.argv[1], "f")
        print(json.dumps({"items": {"f": "1"} if os.path.exists(p) else {}}))
    """)
    d = tmp_path / "d"
    r = explore(program + [str(d)], d, check=" ".join(checker) + " {state}", max_states=2,
                samples_per_cut=1, program_timeout=60)
    assert not r.trace_complete and r.violations == []
    assert any("started 1 process(es) that left it (a daemon" in w for w in r.why_not), r.why_not
    started = [int(p.name) for p in daemons.iterdir()]
    assert len(started) == 1                         # the daemon started...
    assert [p for p in started if _alive(p)] == []   # ...and is not running


def test_a_supervised_command_whose_process_outlives_the_supervisor_is_not_said_stopped(
        tmp_path, monkeypatch):
    """What the supervisor cannot end (here: a process it never adopted, carrying the mark) is
    found in /proc and raised, never reported as stopped."""
    from bughunt.explore import check

    stray = subprocess.Popen(["sleep", "60"], env={**os.environ, check.MARK: "fixed"})
    try:
        monkeypatch.setattr("secrets.token_hex", lambda n: "fixed")
        with pytest.raises(check.StillRunning) as e:
            check.supervised(["true"], tmp_path / "out", tmp_path / "err", 10)
        assert e.value.pids == [stray.pid]
    finally:
        stray.kill()
        stray.wait()
