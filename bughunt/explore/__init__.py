"""Crash states of any program, from its system calls (Linux only: strace needs ptrace).

    python -m bughunt explore --dir DIR --check 'CMD {state}' -- PROGRAM ARGS

The lab's sweeps see only code written against its I/O door. This sees any program, as ALICE
(Pillai et al., OSDI 2014, "All File Systems Are Not Created Equal") does: run it once under
strace, turn its file system calls below DIR into the lab's I/O journal (`trace`), prove the
journal right by replaying it (the self-check: it must rebuild PROGRAM's final DIR byte for byte),
build every kill -9 state and a capped, seeded sample of power-cut states under two directory
models (`states`, on `bughunt.powerloss`), run the program's own reader on a copy of each
(`check`), and compare what it recovered with what the program had begun and acknowledged there
(`BEGIN key version` / `ACK key version` lines on its stdout, or `--ack-lines FILE`). What it
found: `report`. The stores learners reach for first, with their checkers and fixes: `workloads`.

When the trace cannot be trusted (a shared writable mmap, sendfile, io_uring, two threads writing
one file, a failed self-check, strace missing, ptrace denied, not Linux) there is no verdict, and
one sentence says why.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile
import time
from pathlib import Path

from ..instruments.journal import Op
from ..powerloss import Disk
from . import check as _check
from .report import Exploration, ModelResult, StateViolation, describe
from .states import MODELS, build_states
from .trace import TimedOut, parse, run_traced

__all__ = ["explore", "ExploreRefused", "Exploration", "StateViolation"]

#: Operations listed per violation (lost, torn, unfinished), the rest counted.
LISTED = 8


class ExploreRefused(Exception):
    """No exploration at all: one sentence, exit 2 (a bad flag, strace missing, not Linux...)."""


def why_not_traceable() -> str | None:
    """None when strace can trace a program on this machine; else the sentence saying why not
    (not Linux, strace missing, or ptrace denied, as in a container without CAP_SYS_PTRACE)."""
    if not sys.platform.startswith("linux"):
        return (f"this is {sys.platform}, and the explorer is Linux only: it traces with strace, "
                "which needs Linux's ptrace")
    if shutil.which("strace") is None:
        return "strace is not installed here (Debian/Ubuntu: apt-get install strace)"
    import subprocess

    probe = subprocess.run(["strace", "-f", "-qq", "-o", os.devnull, "--", "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        said = probe.stderr.strip().splitlines()[-1:] or ["no message"]
        return f"strace cannot trace here, ptrace is denied ({said[0][:120]})"
    return None


def preflight(program: list[str], directory: Path) -> None:
    """What must hold before PROGRAM runs under strace; `ExploreRefused` with one sentence if not."""
    if not sys.platform.startswith("linux"):
        raise ExploreRefused(f"explore runs on Linux only: it traces PROGRAM with strace, which needs "
                      f"ptrace; this system is {sys.platform} (use a Linux VM or container)")
    if shutil.which("strace") is None:
        raise ExploreRefused("strace is not installed: install it (Debian/Ubuntu: apt-get install "
                      "strace; the lab's .ci/run does) and run explore again")
    if not program:
        raise ExploreRefused("no PROGRAM: put it after --, e.g. -- python my_agent.py run DIR")
    exe = program[0]
    found = exe if "/" in exe else shutil.which(exe)
    if found is None or not os.path.isfile(found) or not os.access(found, os.X_OK):
        raise ExploreRefused(f"PROGRAM {exe!r} cannot start: "
                      + ("no such file" if found is None or not os.path.exists(found)
                         else "not an executable file"))
    if directory.exists() and not directory.is_dir():
        raise ExploreRefused(f"--dir {directory}: is a file, not a directory")
    real = Path(os.path.realpath(directory))
    kernel = [k for k in KERNEL_DIRS if real == Path(k) or Path(k) in real.parents]
    if real == Path("/") or kernel:
        what = ("the root directory" if real == Path("/") else
                f"in {kernel[0]}, the kernel's view of itself")
        raise ExploreRefused(f"--dir {directory}: is {what}, not the directory of a program's "
                             "state, and reading all of it would not end; give the directory "
                             "PROGRAM writes its state to")


#: Kernel file systems: never a program's state, and reading them all never ends (or hangs).
KERNEL_DIRS = ("/proc", "/sys")
#: The most of DIR the explorer reads: it keeps DIR in memory and writes a copy of it for every
#: crash state it checks, so a directory above this is refused before anything runs.
MAX_DIR_BYTES = 64 << 20
MAX_DIR_ENTRIES = 10_000


def snapshot(directory: Path) -> tuple[dict[str, bytes], list[str]]:
    """The files (path -> bytes) and subdirectories below `directory`; `ExploreRefused` when
    they are more than MAX_DIR_BYTES or MAX_DIR_ENTRIES, counted before a file is read."""
    files, dirs, size = {}, [], 0

    def too_big(what: str):
        return ExploreRefused(
            f"--dir {directory}: holds more than {what}, more than the explorer reads (it keeps a "
            "copy of DIR for every crash state); give the directory of PROGRAM's state only")

    for root, subdirs, names in os.walk(directory):
        for d in sorted(subdirs):
            dirs.append(os.path.relpath(os.path.join(root, d), directory))
        if len(dirs) + len(files) + len(names) > MAX_DIR_ENTRIES:
            raise too_big(f"{MAX_DIR_ENTRIES:,} files and directories")
        for name in sorted(names):
            p = os.path.join(root, name)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):    # a FIFO, a device, a link: never opened
                continue
            size += st.st_size
            if size > MAX_DIR_BYTES:
                raise too_big(f"{MAX_DIR_BYTES >> 20} MiB")
            with open(p, "rb") as f:
                files[os.path.relpath(p, directory)] = f.read(MAX_DIR_BYTES + 1)
    return files, sorted(dirs)


def self_check(ops, before, dirs, directory: Path, opaque) -> str | None:
    """Replaying the journal must rebuild PROGRAM's final directory byte for byte (files written
    through an allowed mmap only by name): the sentence saying where it does not, or None."""
    disk = Disk(before, dirs)
    for op in ops:
        disk.apply(op)
    replayed = disk.everything(len(ops))
    real, real_dirs = snapshot(directory)
    for path in sorted(set(real) | set(replayed.files)):
        if path not in replayed.files:
            return (f"the self-check failed: {path} is in DIR but replaying the {len(ops)} traced "
                    "operations does not create it (a write strace did not show?)")
        if path not in real:
            return (f"the self-check failed: replaying the traced operations leaves {path}, "
                    "which is not in DIR")
        if path not in opaque and real[path] != replayed.files[path]:
            a, b = real[path], replayed.files[path]
            at = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
            return (f"the self-check failed: {path} holds {len(a)} bytes in DIR, the replayed "
                    f"operations give {len(b)} bytes, different from byte {at} on")
    if set(real_dirs) != set(replayed.dirs):
        diff = sorted(set(real_dirs) ^ set(replayed.dirs))
        return f"the self-check failed: the directories differ ({', '.join(diff[:3])})"
    return None


def parse_ack_lines(value: str | None) -> tuple[str | None, bool]:
    if value is None:
        return None, False
    path, _, mode = value.rpartition(":") if value.endswith(":fsync") else (value, "", "")
    if not path or path.startswith("/") or ".." in Path(path).parts:
        raise ExploreRefused(f"--ack-lines {value}: give a file below --dir, as FILE or FILE:fsync")
    return os.path.normpath(path), mode == "fsync"


def explore(program: list[str], directory, *, check: str | None = None,
            ack_lines: str | None = None, external=(), allow_opaque=(),
            samples_per_cut: int = 4, max_states: int = 200, seed: int = 0,
            timeout: float = 10.0, program_timeout: float = 600.0, env: dict | None = None,
            progress=None) -> Exploration:
    """Run PROGRAM under strace in DIR, build its crash states, check each; see the module."""
    t_start = time.perf_counter()
    directory = Path(directory)
    program = [str(a) for a in program]
    preflight(program, directory)
    ack_file, ack_on_fsync = parse_ack_lines(ack_lines)
    try:
        argv = _check.checker_argv(check) if check is not None else None
    except ValueError as e:
        raise ExploreRefused(str(e)) from None
    if argv is None and ack_file is None:
        raise ExploreRefused("nothing to check the states against: give --check 'CMD {state}' (the "
                      "program's own reader) or --ack-lines FILE")
    directory.mkdir(parents=True, exist_ok=True)
    before, dirs = snapshot(directory)
    with tempfile.TemporaryDirectory(prefix="bughunt-explore-") as tmp:
        tmp = Path(tmp)
        try:
            traced = run_traced(program, tmp, env=env, timeout=program_timeout)
        except TimedOut:
            raise ExploreRefused(f"PROGRAM did not finish within {program_timeout:g} s under strace "
                          "(--program-timeout); it was stopped, with every process it "
                          "started") from None
        except _check.StillRunning as e:
            raise ExploreRefused(f"PROGRAM left processes running that the explorer could not "
                                 f"stop (pids {e}); end them yourself") from None
        _strace_refusals(traced, program)
        if traced.returncode != 0:
            tail = (traced.stderr.strip().splitlines() or ["nothing"])[-1][:200]
            raise ExploreRefused(f"PROGRAM exited with status {traced.returncode} (its last line on "
                          f"stderr: {tail}): explore needs a run that reaches its end")
        trace = parse(traced.text, directory, Path.cwd(), before, dirs,
                      allow_opaque=allow_opaque, ack_file=ack_file, ack_on_fsync=ack_on_fsync)
        result = Exploration(program, trace_complete=True, why_not=list(trace.refusals),
                             ops=trace.ops, exit_status=traced.returncode,
                             trace_seconds=traced.seconds)
        if traced.orphans:
            result.why_not.append(
                f"PROGRAM started {traced.orphans} process(es) that left it (a daemon: a double "
                "fork, or a session of its own) and outlived their parent: the explorer ended "
                "them, so what they would have written is not in the trace")
        broken = self_check(trace.ops, before, dirs, directory, trace.opaque)
        if broken:
            result.why_not.append(broken)
        if not any(op["op"] == Op.MARK and op.get("what") == "ack" for op in trace.ops):
            result.why_not.append(
                f"PROGRAM acknowledged nothing (no flushed ACK <key> <version> line on its "
                f"stdout{', no complete line in ' + ack_file if ack_file else ''}): there is "
                "nothing a crash could lose")
        if result.why_not:
            result.trace_complete = False
            result.seconds = time.perf_counter() - t_start
            return result
        states = build_states(trace.ops, before=before, dirs=dirs, external=external,
                       samples_per_cut=samples_per_cut, cap=max_states, seed=seed)
        checker = _check.Checker(tmp / "states", argv=argv, ack_file=ack_file, timeout=timeout)
        (tmp / "states").mkdir()
        total = sum(len(v) for v in states.values())
        done = 0
        for model in MODELS:
            r = result.kill if model == "kill" else result.power[model]
            for state in states[model]:
                try:
                    outcome = checker(state)
                except _check.CheckerProblem as e:
                    raise ExploreRefused(f"{e} (at the state after operation {state.cut})") from None
                findings = _check.judge_state(outcome, state.oracle)
                r.states += 1
                if findings:
                    r.violations += 1
                    for cls in dict.fromkeys(f.cls for f in findings):
                        r.by_class[cls] += 1
                        first = next(f for f in findings if f.cls == cls)
                        result.violations.append(_violation(first, model, state, trace.ops,
                                                            trace.opaque))
                done += 1
                if progress:
                    progress(done, total)
        result.checks, result.check_seconds = checker.runs, checker.seconds
    result.seconds = time.perf_counter() - t_start
    return result


def _violation(f, model, state, ops, opaque=()) -> StateViolation:
    """The record of one violating state; operations on files the program rebuilds (allowed
    opaque files) are left out of what it lost."""
    last = state.oracle.last_ack
    since = (last[0] + 1) if last else 0

    def shown(i):
        return ops[i]["op"] not in (Op.MARK, Op.UNRELIABLE) and ops[i].get("path") not in opaque

    unfinished = [describe(ops[i]) for i in range(since, state.cut) if shown(i)]

    def listed(items):
        return items[:LISTED] + ([f"... and {len(items) - LISTED} more"]
                                 if len(items) > LISTED else [])

    return StateViolation(
        cls=f.cls, model=model, cut=state.cut,
        after=describe(ops[state.cut - 1]) if state.cut else "before any operation",
        key=f.key, acknowledged=f.acknowledged, recovered=f.recovered, detail=f.detail,
        last_ack=f"{last[1]} (operation {last[0] + 1})" if last else None,
        lost_ops=listed([describe(ops[i]) for i in state.lost if shown(i)]),
        torn_ops=[describe(ops[i]) for i in state.torn if shown(i)],
        unfinished_ops=listed(unfinished), choice=state.choice)


def _strace_refusals(traced, program) -> None:
    said = [line for line in traced.stderr.splitlines() if line.startswith("strace: ")]
    for line in said:
        if "ptrace" in line.lower() and ("not permitted" in line or "denied" in line.lower()):
            raise ExploreRefused("ptrace is denied here, so strace cannot trace PROGRAM ("
                          f"{line.removeprefix('strace: ')}); in a container, allow ptrace "
                          "(e.g. docker run --cap-add SYS_PTRACE)")
        if "exec" in line or "Can't stat" in line:
            raise ExploreRefused(f"PROGRAM {program[0]!r} cannot start: "
                          f"{line.removeprefix('strace: ')}")
