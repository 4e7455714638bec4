"""Power loss, simulated: the disk states a power cut may leave, built from what the door did.

`kill -9` cannot show power loss: the kernel still writes out every byte a killed process handed it.
So, as ALICE (Pillai et al., OSDI 2014) and LazyFS do, we record every operation the worker's I/O
door performed (the journal `io.jsonl`: create, truncate, write with its bytes, fsync, rename,
directory fsync, unlink; `bughunt.instruments.journal`), or that any program made as its system
calls show (`bughunt.explore`), and build, for each moment of the run, the states the disk may
hold after a power cut there. `Disk` is the one interpreter of that journal.

The crash model, stated (the "prefix per file" model of the crash-testing literature):

- data written to a file survives a power cut only once the file was fsynced afterwards; of the
  writes since its last fsync, any prefix may have reached the disk, and the last write of that
  prefix may be torn (only its first half persisted);
- a directory change (creating, renaming or removing a name) survives only once the directory was
  fsynced afterwards; of the changes since, any prefix may have reached the disk;
- files and the directory persist independently of each other (unsynced work may reorder across
  files, never within one).

That directory rule is the strict one. File systems keep names more generously: ext4's journal
commits every earlier name change with any fsync, so `Disk(dir_model="ext4")` also makes every
earlier name change durable at each fsync; ALICE showed that a program's verdict may depend on which.

Each state is a plain dict of file path -> bytes, plus the reports the tracker (another system,
durable on its own side) had acknowledged and the pages the worker had committed at that moment.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from .instruments.journal import Op


@dataclass
class CrashState:
    cut: int                       # how many journal operations had been issued
    files: dict[str, bytes]        # what the disk holds after the power cut (path -> bytes)
    submitted: list[tuple[int, str | None]]   # reports the tracker acknowledged (page, key)
    committed: list[int]           # pages whose commit had returned
    choice: str = ""               # which unsynced operations survived, in words
    dirs: tuple[str, ...] = ()     # the directories below the run directory, if any
    lost: tuple[int, ...] = ()     # journal indices of issued operations this state does not hold
    torn: tuple[int, ...] = ()     # ... and of the write it holds only the first half of

    def digest(self) -> str:
        h = hashlib.sha256()
        for name in sorted(self.files):
            # A name is the file system's bytes: one that is not UTF-8 is held as Python holds
            # it (surrogate escapes), and hashed as the bytes it was.
            h.update(os.fsencode(name) + b"\0" + self.files[name] + b"\0")
        if self.dirs:
            h.update(b"\0dirs\0" + os.fsencode("\0".join(sorted(self.dirs))))
        h.update(json.dumps([self.submitted, self.committed]).encode())
        return h.hexdigest()


def read_journal(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line]


#: The directory models. strict (the lab's): a name change survives only once its directory was
#: fsynced afterwards. ext4: as ext4's journal commits every earlier metadata change with any
#: fsync, a file's fsync also makes every earlier name change durable (ALICE found application
#: verdicts differ between such models).
DIR_MODELS = ("strict", "ext4")


@dataclass
class _Inode:
    ops: list = field(default_factory=list)     # data operations: ("write", off, bytes) | ("trunc", size)
    durable: int = 0                            # how many of `ops` an fsync has made durable
    index: list = field(default_factory=list)   # the journal index of each of `ops`


def _apply_data(ops, base: bytes = b"") -> bytes:
    content = bytearray(base)
    for op in ops:
        if op[0] == Op.TRUNC:
            del content[op[1]:]
            content.extend(b"\0" * (op[1] - len(content)))
        else:
            _, off, data = op
            if off > len(content):
                content.extend(b"\0" * (off - len(content)))
            content[off:off + len(data)] = data
    return bytes(content)


def _parent(path: str) -> str:
    return path.rpartition("/")[0]


def _below(path: str, directory: str) -> bool:
    return path.startswith(directory + "/")


def _apply_dir(ops, base: dict[str, int], base_dirs=()) -> tuple[dict[str, int], set[str]]:
    names: dict[str, int] = dict(base)
    dirs: set[str] = set(base_dirs)
    for op in ops:
        kind = op[0]
        if kind == Op.CREATE:
            names[op[1]] = op[2]
        elif kind == Op.MKDIR:
            dirs.add(op[1])
        elif kind == Op.RENAME:
            src, dst = op[1], op[2]
            if src in names:
                names[dst] = names.pop(src)
            elif src in dirs:
                for d in [d for d in dirs if d == dst or _below(d, dst)]:
                    dirs.discard(d)
                for d in [d for d in dirs if d == src or _below(d, src)]:
                    dirs.discard(d)
                    dirs.add(dst + d[len(src):])
                for n in [n for n in names if _below(n, src)]:
                    names[dst + n[len(src):]] = names.pop(n)
        elif kind in (Op.UNLINK, Op.RMDIR):
            names.pop(op[1], None)
            dirs.discard(op[1])
    # A name whose directory did not survive is unreachable: it is not in the state.
    reachable = {d for d in dirs if all(a in dirs for a in _ancestors(d))}
    names = {n: i for n, i in names.items() if all(a in reachable for a in _ancestors(n))}
    return names, reachable


def _ancestors(path: str):
    parent = _parent(path)
    while parent:
        yield parent
        parent = _parent(parent)


class Disk:
    """Replays a journal (`bughunt.instruments.journal`), tracking what is durable and what is
    still only in the page cache. The one interpreter of the journal: the power-cut and kill -9
    states below, the conformance suite, the grader's profile of a store and the explorer of any
    program all read a journal through it.

    `files` (path -> bytes) and `dirs` are what the run directory held, durably, before the
    journal began; `dir_model` is one of `DIR_MODELS`.
    """

    def __init__(self, files: dict[str, bytes] | None = None, dirs=(), *,
                 dir_model: str = "strict"):
        if dir_model not in DIR_MODELS:
            raise ValueError(f"unknown directory model {dir_model!r}: one of {DIR_MODELS}")
        self.dir_model = dir_model
        self.inodes: dict[int, _Inode] = {}
        self.base: dict[int, bytes] = {}        # inode -> its durable bytes before the journal
        self.base_names: dict[str, int] = {}
        self.base_dirs: set[str] = set(dirs)
        self.live: dict[str, int] = {}          # name -> inode, as the running system saw it
        self.live_dirs: set[str] = set(dirs)
        self.dir_ops: list = []
        self.dir_index: list[int] = []          # the journal index of each of `dir_ops`
        self.dir_durable = 0                    # the first `dir_durable` dir ops are durable...
        self.dir_synced: set[int] = set()       # ... and these later ones too (a subdirectory's)
        self.submitted: list = []
        self.committed: list = []
        self.unreliable: list[dict] = []        # the journal's own "cannot describe" markers
        self.applied = 0
        for name, data in (files or {}).items():
            self._existing(name, data)

    def _existing(self, name: str, data: bytes = b"") -> int:
        """A file the run directory held before the journal began: durable as it was."""
        ino = len(self.inodes)
        self.inodes[ino] = _Inode()
        self.base[ino] = data
        self.base_names[name] = ino
        self.live[name] = ino
        return ino

    def _inode(self, path: str) -> _Inode:
        if path not in self.live:       # written, but never seen created: it was there before
            self._existing(path)
        return self.inodes[self.live[path]]

    def _dir_op(self, entry: tuple) -> None:
        self.dir_ops.append(entry)
        self.dir_index.append(self.applied)

    def apply(self, op: dict) -> None:
        kind = op["op"]
        if kind == Op.CREATE:
            ino = len(self.inodes)
            self.inodes[ino] = _Inode()
            self.live[op["path"]] = ino
            self._dir_op((Op.CREATE, op["path"], ino))
        elif kind == Op.TRUNC:
            self._data(op["path"], (Op.TRUNC, op.get("size", 0)))
        elif kind == Op.WRITE:
            self._data(op["path"], (Op.WRITE, op["offset"], base64.b64decode(op["data"])))
        elif kind == Op.FSYNC:
            if op["path"] in self.live:         # fsync through a name since renamed: a no-op here
                ino = self.inodes[self.live[op["path"]]]
                ino.durable = len(ino.ops)
            if self.dir_model == "ext4":
                self._dirs_durable()
        elif kind == Op.RENAME:
            src, dst = op["src"], op["dst"]
            if src in self.live_dirs:
                for d in [d for d in self.live_dirs if d == src or _below(d, src)]:
                    self.live_dirs.discard(d)
                    self.live_dirs.add(dst + d[len(src):])
                for n in [n for n in self.live if _below(n, src)]:
                    self.live[dst + n[len(src):]] = self.live.pop(n)
            else:                               # a file never seen created: it was there before
                self._inode(src)
                self.live[dst] = self.live.pop(src)
            self._dir_op((Op.RENAME, src, dst))
        elif kind == Op.UNLINK:
            self.live.pop(op["path"], None)
            self._dir_op((Op.UNLINK, op["path"]))
        elif kind == Op.MKDIR:
            self.live_dirs.add(op["path"])
            self._dir_op((Op.MKDIR, op["path"]))
        elif kind == Op.RMDIR:
            self.live_dirs.discard(op["path"])
            self._dir_op((Op.RMDIR, op["path"]))
        elif kind == Op.FSYNC_DIR:
            self._dirs_durable(None if self.dir_model == "ext4" else op.get("path", ""))
        elif kind == Op.MARK:
            if op["what"] == "submitted":
                self.submitted.append((op["page"], op.get("key")))
            elif op["what"] == "committed":
                self.committed.append(op["page"])
        elif kind == Op.UNRELIABLE:
            self.unreliable.append(op)
        else:
            raise ValueError(f"unknown journal operation {kind!r}")
        self.applied += 1

    def _data(self, path: str, entry: tuple) -> None:
        ino = self._inode(path)
        ino.ops.append(entry)
        ino.index.append(self.applied)

    def _dirs_durable(self, directory: str | None = None) -> None:
        """The name changes so far in `directory` ("" the run directory; None: every one)."""
        if directory is None or (directory in ("", ".") and not self.base_dirs
                                 and not any(op[0] == Op.MKDIR for op in self.dir_ops)):
            self.dir_durable = len(self.dir_ops)        # the door's case: one directory
            self.dir_synced.clear()
            return
        directory = "" if directory == "." else directory
        for i, op in enumerate(self.dir_ops):
            if i >= self.dir_durable and any(_parent(p) == directory for p in op[1:]
                                             if isinstance(p, str)):
                self.dir_synced.add(i)
        while self.dir_durable in self.dir_synced:
            self.dir_synced.discard(self.dir_durable)
            self.dir_durable += 1

    # --- what the disk holds ------------------------------------------------------------------

    def names(self) -> dict[str, int]:
        return dict(self.live)

    def content(self, path: str) -> bytes | None:
        """What a reader of the running system sees in `path` now (None: no such file)."""
        if path not in self.live:
            return None
        ino = self.live[path]
        return _apply_data(self.inodes[ino].ops, self.base.get(ino, b""))

    def size(self, path: str) -> int | None:
        data = self.content(path)
        return None if data is None else len(data)

    def unsynced(self, path: str) -> bool:
        """Whether `path` holds bytes an fsync has not made durable."""
        ino = self.inodes.get(self.live.get(path, -1))
        return ino is not None and ino.durable < len(ino.ops)

    def names_unsynced(self) -> bool:
        """Whether a name change (create, rename, unlink, mkdir, rmdir) is not yet durable."""
        return self.dir_durable < len(self.dir_ops)

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
                if last and last[0] == Op.WRITE and len(last[2]) > 1:
                    torn = (Op.WRITE, last[1], last[2][:len(last[2]) // 2])
                    options.append(ino.ops[:ino.durable + k - 1] + [torn])
            per_inode.append((ino_id, options))
        pending = [i for i in range(self.dir_durable, len(self.dir_ops))
                   if i not in self.dir_synced]
        durable = list(range(self.dir_durable)) + sorted(self.dir_synced)
        dir_options = [[self.dir_ops[i] for i in sorted(durable + pending[:j])]
                       for j in range(len(pending) + 1)]
        return per_inode, dir_options

    def state(self, cut: int, data_choice: dict[int, list], dir_choice: list, label: str):
        names, dirs = _apply_dir(dir_choice, self.base_names, self.base_dirs)
        files = {}
        lost, torn = [], []
        seen = set(names.values()) | set(self.live.values())
        for ino_id, ino in self.inodes.items():
            if ino_id not in seen:
                continue                # removed for good: what it lost does not matter
            ops = data_choice.get(ino_id, ino.ops[:ino.durable])
            kept = len(ops)
            if ops and ops[-1] is not ino.ops[kept - 1]:
                torn.append(ino.index[kept - 1])
            lost.extend(ino.index[kept:])
        chosen = {id(op) for op in dir_choice}
        lost.extend(i for op, i in zip(self.dir_ops, self.dir_index) if id(op) not in chosen)
        for name, ino_id in names.items():
            ino = self.inodes[ino_id]
            ops = data_choice.get(ino_id, ino.ops[:ino.durable])
            files[name] = _apply_data(ops, self.base.get(ino_id, b""))
        return CrashState(cut, files, list(self.submitted), list(self.committed), label,
                          tuple(sorted(dirs)), tuple(sorted(lost)), tuple(torn))

    def everything(self, cut: int, label: str = "kill -9: everything written survived"):
        """The kill -9 state: every byte and name the running system had, fsynced or not."""
        return self.state(cut, {i: ino.ops for i, ino in self.inodes.items()}, self.dir_ops,
                          label)


def crash_states(journal: list[dict], *, samples_per_cut: int = 4, seed: int = 0,
                 dedupe: bool = True, dir_model: str = "strict",
                 before: dict[str, bytes] | None = None, dirs=()) -> Iterator[CrashState]:
    """The distinct disk states a power cut may leave, at every moment of the journaled run.

    At each cut, the two extremes are always explored (nothing unsynced survived; everything did),
    plus `samples_per_cut` seeded random mixes of surviving prefixes and torn last writes. With
    `dedupe`, a state already produced at an earlier cut is not produced again. `before` and
    `dirs`: what the run directory durably held when the journal began (`Disk`).
    """
    rng = random.Random(seed)
    disk = Disk(before, dirs, dir_model=dir_model)
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
    # The bill, like the tracker, is the world's and survives the cut; its calls are not
    # journaled, so it is empty here (a missing bill beside a tracker's reports is refused).
    (run_dir / "bill.jsonl").touch()
    tracker = tracker_factory(run_dir)
    try:
        for page, key in state.submitted:
            tracker.submit(page, f"bug on page {page}", key)
    finally:
        tracker.close()


def kill_states(journal: list[dict], *, before: dict[str, bytes] | None = None,
                dirs=()) -> Iterator[CrashState]:
    """The disk after a kill -9 at every moment of the journaled run: everything written so far
    survives (it is in the kernel's page cache), fsynced or not."""
    disk = Disk(before, dirs)
    for cut in range(len(journal) + 1):
        if cut:
            disk.apply(journal[cut - 1])
        yield disk.everything(cut)
