"""The checker: the program's own reader, run on a copy of each crash state, and its verdict.

A checker is a command with `{state}` in it (`python my_agent.py check {state}`). It reads the
state's directory as the program would after a crash and prints one line of JSON:

- `{"items": {"key": "version", ...}}`: what it recovered;
- `{"error": "..."}`: it could not read the state (a decode error, a missing file);
- `{"refused": "..."}`: it saw damage and refused, naming it (as the lab's stores do).

It runs in a process group of its own with a timeout: a reader that hangs (some stores wait on
their own leftover temp or lock files) is stopped and counted as a hang.

The verdict at a state compares that with the oracle (`states.Oracle`), keys and versions as the
strings printed after ACK:

- **lost**: an acknowledged key is missing, or holds a version older than the acknowledged one;
- **phantom**: a key or version the program had never begun by then;
- **unreadable**: the reader failed (`error`), or refused while something was acknowledged;
- **hang**: the reader did not finish within the timeout.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from .states import Oracle, State

CLASSES = ("lost", "phantom", "unreadable", "hang")


class CheckerProblem(Exception):
    """The checker itself printed nothing the explorer can read: no verdict from it."""


@dataclass
class CheckerVerdict:
    kind: str                    # "items", "error", "refused", "hang"
    items: dict | None = None
    message: str = ""
    seconds: float = 0.0


def checker_argv(template: str) -> list[str]:
    """`--check 'CMD {state}'` as an argument list (no shell); ValueError for a bad one."""
    argv = shlex.split(template)
    if not argv:
        raise ValueError("--check: an empty command")
    if not any("{state}" in a for a in argv):
        raise ValueError(f"--check {template!r}: has no {{state}}, where the path of each "
                         "state's copy goes")
    return argv


def write_state(state: State, directory: Path) -> None:
    directory.mkdir(parents=True)
    for d in state.dirs:
        (directory / d).mkdir(parents=True, exist_ok=True)
    for path, data in state.files.items():
        (directory / path).parent.mkdir(parents=True, exist_ok=True)
        (directory / path).write_bytes(data)


#: The boundary's supervisor (a child subreaper on Linux): the checker runs under it, so that
#: whatever the checker started, even a daemon that double-forked out of its group, ends with it.
SUPERVISOR = Path(__file__).resolve().parent.parent / "boundary" / "supervisor.py"
#: The most of the checker's stdout read back: its verdict is its last line.
OUTPUT_TAIL = 1 << 20


def run_checker(argv: list[str], directory: Path, timeout: float) -> CheckerVerdict:
    cmd = [a.replace("{state}", str(directory)) for a in argv]
    out_path = directory.with_name(directory.name + ".stdout")
    err_path = directory.with_name(directory.name + ".stderr")
    t0 = time.perf_counter()
    try:
        try:
            code = supervised(cmd, out_path, err_path, timeout)
        except StillRunning as e:
            raise CheckerProblem(f"the checker {cmd[0]!r} left processes running that the "
                                 f"explorer could not stop (pids {e})") from None
        seconds = time.perf_counter() - t0
        if code is None:
            return CheckerVerdict("hang", message=f"the checker did not finish within "
                                  f"{timeout:g} s", seconds=seconds)
        out, err = _tail(out_path), _tail(err_path)
    finally:
        out_path.unlink(missing_ok=True)
        err_path.unlink(missing_ok=True)
    return _verdict(out, err, code, directory, seconds)


def _tail(path: Path) -> bytes:
    with open(path, "rb") as f:
        f.seek(max(0, os.fstat(f.fileno()).st_size - OUTPUT_TAIL))
        return f.read()


class StillRunning(Exception):
    """Processes a supervised command started outlived the supervisor's end of them all: their
    pids (found in /proc by the mark every one of them inherited)."""

    def __init__(self, pids: list[int]):
        super().__init__(", ".join(map(str, pids)))
        self.pids = pids


#: The environment variable that marks every process a supervised command starts.
MARK = "BUGHUNT_SUPERVISED"


def marked(token: str) -> list[int]:
    """Live processes (not zombies) whose environment carries MARK=token (Linux: /proc)."""
    needle = f"{MARK}={token}".encode() + b"\0"
    found = []
    for name in os.listdir("/proc") if os.path.isdir("/proc/self") else ():
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = f.read() + b"\0"
            with open(f"/proc/{name}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in environ and state not in (b"Z", b"X"):
            found.append(int(name))
    return found


def supervised(cmd: list[str], out_path: Path, err_path: Path, timeout: float,
               env: dict | None = None, ended: list | None = None) -> int | None:
    """Run `cmd` under the boundary's supervisor (a subreaper on Linux: a process `cmd` starts
    that double-forks or leaves its session is re-parented to it, and ended), its stdout and
    stderr to the two files, in the environment `env` (default: this process's); its exit code
    (negative: a signal), or None when it was still running after `timeout` s. Either way, when
    this returns, the command and every process it started have been ended (SIGKILL to its group
    and to every orphan the subreaper adopted), also on Ctrl-C or an error here; and that is
    checked: a process still carrying this run's mark in /proc raises `StillRunning`. `ended`,
    when given, gets how many processes had left `cmd`'s group, lost their parent and were
    ended by the supervisor (a daemon `cmd` started)."""
    import secrets
    import selectors
    import subprocess
    import sys

    from ..interrupts import deferred

    token = secrets.token_hex(8)
    config = {"argv": cmd, "env": {**(os.environ if env is None else env), MARK: token},
              "cwd": os.getcwd(), "grace": 0.0, "fds": {}}
    with deferred():
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            config["fds"] = {"stdout": out.fileno(), "stderr": err.fileno()}
            sup = subprocess.Popen([sys.executable, "-I", "-S", str(SUPERVISOR)],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, pass_fds=(out.fileno(), err.fileno()),
                                   start_new_session=True, bufsize=0)
            sup.stdin.write((json.dumps(config) + "\n").encode())
    said: dict = {}
    buffer, timed_out = b"", False
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(sup.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + timeout
            while "gone" not in said:          # the supervisor ends all when the checker exits
                left = deadline - time.monotonic()
                if not timed_out and "exit" not in said and left <= 0:
                    timed_out = True
                    _tell(sup, "kill")
                if not sel.select(max(0.0, left) if not timed_out else 1.0):
                    continue
                chunk = os.read(sup.stdout.fileno(), 4096)
                if not chunk:
                    break                                  # the supervisor is gone
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    message = json.loads(line)
                    said[message["t"]] = message
    finally:
        if "gone" not in said:                 # Ctrl-C or an error here: end it all now
            _tell(sup, "kill")
        sup.stdin.close()
        problem = sup.stderr.read().decode("utf-8", "replace").strip()
        sup.wait()
        sup.stdout.close()
        sup.stderr.close()
    if "started" not in said:
        tail = (problem.splitlines() or ["no message"])[-1]
        raise CheckerProblem(f"the checker {cmd[0]!r} could not start: {tail}")
    left = marked(token)
    if left:
        raise StillRunning(left)
    if ended is not None:
        ended.append(said.get("gone", {}).get("orphans", 0))
    return None if timed_out or "exit" not in said else said["exit"]["code"]


def _tell(sup, command: str) -> None:
    try:
        sup.stdin.write(f"{command}\n".encode())
    except (BrokenPipeError, OSError):
        pass


def _verdict(out: bytes, err: bytes, code: int, directory: Path,
             seconds: float) -> CheckerVerdict:
    lines = [line for line in out.decode("utf-8", "replace").splitlines() if line.strip()]
    try:
        verdict = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        verdict = None
    if not isinstance(verdict, dict) or not ({"items", "error", "refused"} & set(verdict)):
        tail = (err.decode("utf-8", "replace").strip().splitlines() or ["nothing on stderr"])[-1]
        raise CheckerProblem(
            f"the checker printed no JSON verdict ({{\"items\": ...}}, {{\"error\": ...}} or "
            f"{{\"refused\": ...}}) on its last line of output; it exited {code}, "
            f"its last stderr line: {tail}")
    if "items" in verdict:
        items = verdict["items"]
        if not isinstance(items, dict) or not all(
                isinstance(v, (str, int)) and not isinstance(v, bool) for v in items.values()):
            raise CheckerProblem("the checker's \"items\" must map each key to its version as a "
                                 f"string, e.g. {{\"a\": \"3\"}}; it printed {lines[-1][:120]}")
        return CheckerVerdict("items", {str(k): str(v) for k, v in items.items()}, seconds=seconds)
    kind = "error" if "error" in verdict else "refused"
    # The copy's path changes from state to state: name it the way --check does.
    message = str(verdict[kind]).replace(str(directory), "{state}")
    return CheckerVerdict(kind, message=message, seconds=seconds)


def lines_checker(ack_file: str):
    """The built-in checker of `--ack-lines FILE`: the complete lines of FILE, key = line
    number (a last line without its newline is a torn tail a reader skips)."""
    def check(directory: Path) -> CheckerVerdict:
        path = directory / ack_file
        if not path.exists():
            return CheckerVerdict("items", {})
        lines = path.read_bytes().split(b"\n")[:-1]
        return CheckerVerdict("items", {str(i + 1): line.decode("utf-8", "replace")
                                 for i, line in enumerate(lines)})
    return check


class Checker:
    """Runs the check on a copy of each state, once per distinct disk (the cache)."""

    def __init__(self, workdir: Path, *, argv: list[str] | None = None, ack_file=None,
                 timeout: float = 10.0):
        self.workdir, self.argv, self.timeout = workdir, argv, timeout
        self.builtin = lines_checker(ack_file) if argv is None else None
        self.cache: dict[str, CheckerVerdict] = {}
        self.runs = 0
        self.seconds = 0.0

    def __call__(self, state: State) -> CheckerVerdict:
        if state.digest in self.cache:
            return self.cache[state.digest]
        directory = self.workdir / f"state-{self.runs:05d}"
        write_state(state, directory)
        try:
            outcome = (self.builtin(directory) if self.builtin else
                       run_checker(self.argv, directory, self.timeout))
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        self.runs += 1
        self.seconds += outcome.seconds
        self.cache[state.digest] = outcome
        return outcome


@dataclass
class StateFinding:
    cls: str
    key: str | None
    acknowledged: str | None
    recovered: str | None
    detail: str


def judge_state(outcome: CheckerVerdict, oracle: Oracle) -> list[StateFinding]:
    """What is wrong with what the checker recovered, given what had been begun and acked."""
    acked = dict(oracle.acked)
    if outcome.kind == "hang":
        return [StateFinding("hang", None, None, None, outcome.message)]
    if outcome.kind == "error":
        return [StateFinding("unreadable", None, None, None, f"the reader failed: {outcome.message}")]
    if outcome.kind == "refused":
        if not acked:
            return []
        return [StateFinding("unreadable", None, None, None,
                        f"the reader refused the state ({outcome.message}) with {len(acked)} "
                        f"key{'s' if len(acked) != 1 else ''} acknowledged")]
    items = outcome.items or {}
    found = []
    for key, version in acked.items():
        versions = oracle.versions(key)
        got = items.get(key)
        if got is None:
            found.append(StateFinding("lost", key, version, None,
                                 f"{key} was acknowledged at version {version}; the reader "
                                 "found no version of it"))
        elif got in versions and _last(versions, got) < _last(versions, version):
            found.append(StateFinding("lost", key, version, got,
                                 f"{key} was acknowledged at version {version}; the reader "
                                 f"found the older {got}"))
    for key, got in items.items():
        if got not in oracle.versions(key):
            never = "never begun" if not oracle.versions(key) else \
                f"not a version begun by then ({', '.join(oracle.versions(key)[-3:])})"
            found.append(StateFinding("phantom", key, acked.get(key), got,
                                 f"the reader found {key} at version {got}: {never}"))
    return found


def _last(versions: tuple[str, ...], v: str) -> int:
    return len(versions) - 1 - versions[::-1].index(v)
