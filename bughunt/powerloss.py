"""Power loss, simulated: the disk states a power cut may leave, built from what the door did.

`kill -9` cannot show power loss: the kernel still writes out every byte a killed process handed it.
So, as ALICE and LazyFS do, we record every operation the worker's I/O door performed (the journal
`io.jsonl`: create, truncate, write with its bytes, fsync, rename, directory fsync, unlink) and
build, for each moment of the run, the states the disk may hold after a power cut there.

The crash model, stated (the "prefix per file" model of the crash-testing literature):

- data written to a file survives a power cut only once the file was fsynced afterwards; of the
  writes since its last fsync, any prefix may have reached the disk, and the last write of that
  prefix may be torn (only its first half persisted);
- a directory change (creating, renaming or removing a name) survives only once the directory was
  fsynced afterwards; of the changes since, any prefix may have reached the disk;
- files and the directory persist independently of each other (unsynced work may reorder across
  files, never within one).

Each state is a plain dict of file name -> bytes, plus the reports the tracker (another system,
durable on its own side) had acknowledged and the pages the worker had committed at that moment.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator


@dataclass
class CrashState:
    cut: int                       # how many journal operations had been issued
    files: dict[str, bytes]        # what the disk holds after the power cut
    submitted: list[tuple[int, str | None]]   # reports the tracker acknowledged (page, key)
    committed: list[int]           # pages whose commit had returned
    choice: str = ""               # which unsynced operations survived, in words

    def digest(self) -> str:
        h = hashlib.sha256()
        for name in sorted(self.files):
            h.update(name.encode() + b"\0" + self.files[name] + b"\0")
        h.update(json.dumps([self.submitted, self.committed]).encode())
        return h.hexdigest()


def read_journal(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line]


@dataclass
class _Inode:
    ops: list = field(default_factory=list)     # data operations: ("write", off, bytes) | ("trunc",)
    durable: int = 0                            # how many of `ops` an fsync has made durable


def _apply_data(ops) -> bytes:
    content = bytearray()
    for op in ops:
        if op[0] == "trunc":
            content = bytearray()
        else:
            _, off, data = op
            if off > len(content):
                content.extend(b"\0" * (off - len(content)))
            content[off:off + len(data)] = data
    return bytes(content)


def _apply_dir(ops) -> dict[str, int]:
    names: dict[str, int] = {}
    for op in ops:
        if op[0] == "create":
            names[op[1]] = op[2]
        elif op[0] == "rename":
            if op[1] in names:
                names[op[2]] = names.pop(op[1])
        elif op[0] == "unlink":
            names.pop(op[1], None)
    return names


class _Disk:
    """Replays the journal, tracking what is durable and what is still only in the page cache."""

    def __init__(self):
        self.inodes: dict[int, _Inode] = {}
        self.live: dict[str, int] = {}          # name -> inode, as the running system saw it
        self.dir_ops: list = []
        self.dir_durable = 0
        self.submitted: list = []
        self.committed: list = []

    def apply(self, op: dict) -> None:
        kind = op["op"]
        if kind == "create":
            ino = len(self.inodes)
            self.inodes[ino] = _Inode()
            self.live[op["path"]] = ino
            self.dir_ops.append(("create", op["path"], ino))
        elif kind == "trunc":
            self.inodes[self.live[op["path"]]].ops.append(("trunc",))
        elif kind == "write":
            self.inodes[self.live[op["path"]]].ops.append(
                ("write", op["offset"], base64.b64decode(op["data"])))
        elif kind == "fsync":
            ino = self.inodes[self.live[op["path"]]]
            ino.durable = len(ino.ops)
        elif kind == "rename":
            self.live[op["dst"]] = self.live.pop(op["src"])
            self.dir_ops.append(("rename", op["src"], op["dst"]))
        elif kind == "unlink":
            self.live.pop(op["path"], None)
            self.dir_ops.append(("unlink", op["path"]))
        elif kind == "fsync_dir":
            self.dir_durable = len(self.dir_ops)
        elif kind == "mark":
            if op["what"] == "submitted":
                self.submitted.append((op["page"], op.get("key")))
            elif op["what"] == "committed":
                self.committed.append(op["page"])
        else:
            raise ValueError(f"unknown journal operation {kind!r}")

    def choices(self) -> tuple[list[tuple[int, list]], list]:
        """Per inode with unsynced data, the possible surviving op lists; and the dir prefixes."""
        per_inode = []
        for ino_id, ino in self.inodes.items():
            pending = ino.ops[ino.durable:]
            if not pending:
                continue
            options = []
            for k in range(len(pending) + 1):
                options.append(ino.ops[:ino.durable + k])
                last = pending[k - 1] if k else None
                if last and last[0] == "write" and len(last[2]) > 1:
                    torn = ("write", last[1], last[2][:len(last[2]) // 2])
                    options.append(ino.ops[:ino.durable + k - 1] + [torn])
            per_inode.append((ino_id, options))
        dir_options = [self.dir_ops[:self.dir_durable + j]
                       for j in range(len(self.dir_ops) - self.dir_durable + 1)]
        return per_inode, dir_options

    def state(self, cut: int, data_choice: dict[int, list], dir_choice: list, label: str):
        names = _apply_dir(dir_choice)
        files = {}
        for name, ino_id in names.items():
            ino = self.inodes[ino_id]
            ops = data_choice.get(ino_id, ino.ops[:ino.durable])
            files[name] = _apply_data(ops)
        return CrashState(cut, files, list(self.submitted), list(self.committed), label)


def crash_states(journal: list[dict], *, samples_per_cut: int = 4, seed: int = 0,
                 dedupe: bool = True) -> Iterator[CrashState]:
    """The distinct disk states a power cut may leave, at every moment of the journaled run.

    At each cut, the two extremes are always explored (nothing unsynced survived; everything did),
    plus `samples_per_cut` seeded random mixes of surviving prefixes and torn last writes. With
    `dedupe`, a state already produced at an earlier cut is not produced again.
    """
    rng = random.Random(seed)
    disk = _Disk()
    seen: set[str] = set()
    for cut in range(len(journal) + 1):
        if cut:
            disk.apply(journal[cut - 1])
        per_inode, dir_options = disk.choices()
        candidates = [
            ({}, dir_options[0], "nothing unsynced survived"),
            ({i: disk.inodes[i].ops for i, _ in per_inode}, dir_options[-1],
             "everything written survived"),
        ]
        for _ in range(samples_per_cut):
            pick = {i: rng.choice(opts) for i, opts in per_inode}
            candidates.append((pick, rng.choice(dir_options), "a random mix of unsynced writes"))
        for data_choice, dir_choice, label in candidates:
            state = disk.state(cut, data_choice, dir_choice, label)
            key = state.digest() if dedupe else (cut, state.digest())
            if key not in seen:
                seen.add(key)
                yield state


def materialize(state: CrashState, run_dir: Path, tracker_factory) -> None:
    """Write `state` into a new run directory, with the tracker as it stood at the cut."""
    run_dir.mkdir(parents=True)
    for name, data in state.files.items():
        (run_dir / name).write_bytes(data)
    if "config.json" not in state.files and not state.submitted:
        return      # the worker creates the tracker only after its config is durable
    tracker = tracker_factory(run_dir)
    try:
        for page, key in state.submitted:
            tracker.submit(page, f"bug on page {page}", key)
    finally:
        tracker.close()


def kill_states(journal: list[dict]) -> Iterator[CrashState]:
    """The disk after a kill -9 at every moment of the journaled run: everything written so far
    survives (it is in the kernel's page cache), fsynced or not."""
    disk = _Disk()
    for cut in range(len(journal) + 1):
        if cut:
            disk.apply(journal[cut - 1])
        everything = {ino_id: ino.ops for ino_id, ino in disk.inodes.items()}
        yield disk.state(cut, everything, disk.dir_ops, "kill -9: everything written survived")
