"""The cross-check that proves the explorer: on the lab's own log store it must see what the lab
sees.

The worker (`python -m bughunt run --store log --io-trace`) journals every operation of its door
itself (io.jsonl). Explored from outside, under strace, the same run must give

1. the same operations on the door's files, op for op (kind, file, offset, length), and
2. the same verdicts as the conformance suite (`bughunt.conformance`) for every write mode and
   fsync policy: which crash model breaks, and after which operations a kill -9 leaves a state
   that breaks a rule.

The explorer's oracle here is `--ack-lines events.jsonl` (a commit of the log store returns when
its line is written, or written and fsynced with fsync always), and its checker
(`python -m bughunt.explore.crosscheck check DIR`) does what the suite does at a state: recover
with the store's own `load`, then open for append and commit the next event, and read back.
The tracker, the bill and the journal are another system's files (`--external`); SQLite's -shm
is mapped shared and rebuilt (`--allow-opaque`).
"""

from __future__ import annotations

import base64
import json
import re
import sys
from pathlib import Path

WRITE_MODES = ("atomic", "torn", "no-newline")
FSYNC = ("never", "always")
PAGES = 3
EXTERNAL = ("tracker.db*", "bill.jsonl", "io.jsonl")
OPAQUE = ("tracker.db-shm",)


def check_log_store_state(directory: Path) -> dict:
    """The checker: what the log store recovers here, and whether it resumes cleanly."""
    from ..config import CONFIG_FILE, read_config
    from ..diskio import Door
    from ..events import apply_event
    from ..stores import StoreDamage, store_for
    from ..stores.log import LOG_FILE

    directory = Path(directory)
    if not (directory / CONFIG_FILE).exists():
        return {"items": {}}
    config = read_config(directory)
    LogStore = store_for(config)           # no-newline: the store without its repair
    try:
        state = LogStore(directory, config, Door(config.fsync)).load().state
    except StoreDamage as e:
        return {"refused": str(e)}
    log = directory / LOG_FILE
    lines = log.read_bytes().split(b"\n") if log.exists() else []
    items = {str(i + 1): lines[i].decode("utf-8", "replace") for i in range(state["seq"])}
    event = {"seq": state["seq"] + 1, "t": "page_done", "page": state["next_page"],
             "tokens": 1, "finding": False}
    store = LogStore(directory, config, Door(config.fsync))
    store.load()
    store.open_for_append()
    store.commit(apply_event(state, event), event)
    store.close()
    got = LogStore(directory, config, Door(config.fsync)).load().state
    if got != apply_event(state, event):
        return {"error": f"recovered event {state['seq']}, committed event {event['seq']}, then "
                         f"load() gave event {got['seq']}: the resume did not append cleanly"}
    return {"items": items}


def program(directory: Path, write_mode: str, fsync: str) -> list[str]:
    return [sys.executable, "-m", "bughunt", "run", "--dir", str(directory), "--store", "log",
            "--write-mode", write_mode, "--fsync", fsync, "--pages", str(PAGES), "--io-trace"]


def door_ops(ops: list[dict], door_files: set[str]) -> list[tuple]:
    """(kind, file, offset, length) of the operations on the door's files, and the fsyncs of
    the run directory."""
    out = []
    for op in ops:
        kind = str(op["op"])
        if kind == "fsync_dir":
            if not op.get("path"):
                out.append(("fsync_dir", None, None, None))
            continue
        name = op.get("path") or op.get("src")
        if name not in door_files and op.get("dst") not in door_files:
            continue
        if kind == "write":
            out.append((kind, name, op["offset"], len(base64.b64decode(op["data"]))))
        elif kind == "rename":
            out.append((kind, f"{op['src']} -> {op['dst']}", None, None))
        elif kind in ("create", "trunc", "fsync", "unlink"):
            out.append((kind, name, op.get("size"), None))
    return out


def align(explorer: list[tuple], lab: list[tuple]) -> tuple[bool, int]:
    """Whether the lab's operations are the explorer's, op for op, once the explorer's extra
    directory fsyncs are set aside (the tracker's SQLite fsyncs the same directory when it
    creates its WAL: the lab's journal does not see it, strace does); and how many those are."""
    i, extra = 0, 0
    for op in explorer:
        if i < len(lab) and op == lab[i]:
            i += 1
        elif op[0] == "fsync_dir":
            extra += 1
        else:
            return False, extra
    return i == len(lab), extra


def _last_door_op(ops, cut, door_files) -> str:
    from ..conformance import describe_op

    for op in reversed(ops[:cut]):
        if op.get("path") in door_files or op.get("dst") in door_files:
            return describe_op(op)
    return "before any operation"


def cross_check(write_mode: str, fsync: str, work: Path, *, max_states: int = 40) -> dict:
    """Explore the worker's run of this design and grade the same design with the suite."""
    from ..conformance import conform
    from ..config import RunConfig
    from ..powerloss import read_journal
    from . import explore

    d = Path(work) / f"{write_mode}-{fsync}"
    result = explore(program(d, write_mode, fsync), d,
                     check=f"{sys.executable} -m bughunt.explore.crosscheck check {{state}}",
                     ack_lines="events.jsonl" + (":fsync" if fsync == "always" else ""),
                     external=EXTERNAL, allow_opaque=OPAQUE, samples_per_cut=1,
                     max_states=max_states)
    lab = read_journal(d / "io.jsonl")
    files = {op[k] for op in lab for k in ("path", "src", "dst") if op.get(k)}
    report = conform(RunConfig(store="log", write_mode=write_mode, fsync=fsync), pages=PAGES)
    kill_rules = sorted({v.rule for v in report.violations if v.state.startswith("kill -9")})
    power_rules = sorted({v.rule for v in report.violations if v.state.startswith("power cut")})
    suite_kill_at = sorted({re.match(r"kill -9 after operation \d+ \((.*)\)$", v.state).group(1)
                            for v in report.violations if v.state.startswith("kill -9")})
    explorer_kill_at = sorted({_last_door_op(result.ops, v.cut, files)
                               for v in result.violations if v.model == "kill"})
    return {
        "design": f"log, {write_mode}, fsync {fsync}",
        "trace_complete": result.trace_complete, "why_not": result.why_not,
        "explorer ops": door_ops(result.ops, files),
        "lab ops": door_ops(lab, files),
        "suite: kill breaks": kill_rules, "suite: power breaks": power_rules,
        "explorer: kill classes": sorted({v.cls for v in result.violations if v.model == "kill"}),
        "explorer: power classes": sorted({v.cls for v in result.violations
                                           if v.model == "strict"}),
        "suite: kill states breaking, after": suite_kill_at,
        "explorer: kill states violating, after": explorer_kill_at,
    }


def agrees(r: dict, fsync: str) -> bool:
    """The same operations; the same kill -9 verdicts, after the same operations; the same
    power-cut verdict, where lost acknowledgements count only with fsync always (the only
    policy under which the suite holds a power cut to them: `fsync-keeps-acknowledged`)."""
    power = set(r["explorer: power classes"]) - ({"lost"} if fsync == "never" else set())
    return (r["trace_complete"] and align(r["explorer ops"], r["lab ops"])[0]
            and bool(r["suite: kill breaks"]) == bool(r["explorer: kill classes"])
            and r["suite: kill states breaking, after"] == r["explorer: kill states violating, after"]
            and bool(r["suite: power breaks"]) == bool(power))


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "check":
        print(json.dumps(check_log_store_state(Path(argv[1]))))
        return 0
    print("usage: python -m bughunt.explore.crosscheck check DIR", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
