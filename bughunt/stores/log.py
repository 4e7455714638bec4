"""The event-log store: every event one JSONL line, replayed through `apply_event` at recovery.

Like Codex's rollout, each line is written whole and handed to the kernel at once, without fsync
unless the policy asks. With `snapshot_every = N` a snapshot of the whole state is also written every
N pages, recording how far into the log it reaches; recovery then starts from the snapshot and
replays only the events after it (Codex's compaction record with its `replacement_history`).

Reading the log, two kinds of bad line are told apart (see `records`):

- a line that does not parse is a torn fragment from a write cut short: skipped and counted, as
  Codex does;
- records that parse but are missing, repeated or out of order (a gap or repeat in the sequence
  numbers), or whose checksum is wrong, are damage: recovery refuses with file and line and changes
  nothing. The lesson's reader skipped such lines silently, which is how the no-newline trap stayed
  hidden until the next recovery.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..config import RunConfig
from ..diskio import Door, open_for_reading
from ..events import apply_event, initial_state
from . import LOG_FILE, SNAPSHOT_FILE, Recovered, Repairs, StoreDamage, records
from .snapshot import read_snapshot, remove_stale_temp, write_snapshot


def ensure_newline_terminated(path: Path, door: Door) -> bool:
    """Make sure the log ends with a newline before anything is appended; True if it did not.

    After a torn write the last line is a fragment without its newline. Appending straight after it
    would glue the next record onto the fragment, and both would be lost as one unparsable line:
    the lesson's no-newline trap. One newline isolates the fragment as a line of its own, which
    readers skip. Repairing twice is the same as once. (Codex: `ensure_rollout_is_newline_terminated`.)
    """
    try:
        with open_for_reading(path) as f:
            if f.seek(0, os.SEEK_END) == 0:
                return False
            f.seek(-1, os.SEEK_END)
            if f.read(1) == b"\n":
                return False
    except FileNotFoundError:
        return False
    fd = door.open_append(path)
    try:
        door.append(fd, b"\n", kind="repair")
    finally:
        door.close(fd)
    return True


def replay_log(path: Path, data: bytes, first_line: int, state: dict) -> Recovered:
    """Apply the events in `data` (the log from line `first_line + 1` on) to `state`.

    Sequence numbers must continue from `state["seq"]` without gap or repeat; otherwise StoreDamage
    names the line.
    """
    replayed = torn = 0
    line_no = first_line
    for raw in data.split(b"\n"):
        line_no += 1
        if not raw.strip():
            continue
        try:
            event = records.decode(raw)
        except records.Torn:
            torn += 1
            continue
        except records.Damaged as e:
            raise StoreDamage(path, line_no, f"damaged record ({e})") from None
        expected = state["seq"] + 1
        seq = event.get("seq")
        if seq != expected:
            what = ("a record is missing" if isinstance(seq, int) and seq > expected
                    else "a record is repeated or out of order")
            raise StoreDamage(path, line_no, f"expected event seq {expected}, found {seq}: {what}")
        try:
            state = apply_event(state, event)
        except (ValueError, KeyError, TypeError) as e:
            raise StoreDamage(path, line_no, f"record is not a valid event ({e})") from None
        replayed += 1
    return Recovered(state, replayed_events=replayed, torn_lines_skipped=torn)


def count_lines(path: Path, end: int | None = None) -> int:
    """Newlines in the first `end` bytes of `path` (all of it by default), read in chunks."""
    n, left = 0, end
    with open_for_reading(path) as f:
        while left is None or left > 0:
            chunk = f.read(1 << 20 if left is None else min(1 << 20, left))
            if not chunk:
                break
            n += chunk.count(b"\n")
            if left is not None:
                left -= len(chunk)
    return n


class LogStore:
    name = "log"

    def __init__(self, run_dir: Path, config: RunConfig, door: Door):
        self.path = run_dir / LOG_FILE
        self.snapshot_path = run_dir / SNAPSHOT_FILE
        self.config = config
        self.door = door
        self.fd: int | None = None
        self.size = 0
        self._lines: int | None = None     # lines in the log, counted by load()

    def load(self) -> Recovered:
        """Recover from the newest usable snapshot and the log after it, reading only that part."""
        try:
            return self._load()
        except OSError as e:
            path = e.filename if isinstance(e.filename, str) else self.path
            raise StoreDamage(Path(path), None, f"cannot be read ({e.strerror})") from None

    def _load(self) -> Recovered:
        try:
            size = self.path.lstat().st_size      # a link is refused when opened
        except FileNotFoundError:
            size = 0
        state, start, first_line, notes = initial_state(), 0, 0, []
        snapshot_used, fallback = False, None
        if self.config.snapshot_every:
            try:
                payload = read_snapshot(self.snapshot_path)
            except (records.Torn, records.Damaged) as e:
                # Only the newest snapshot may bound the replay; if it is unusable, replay all.
                fallback = "log"
                notes.append(f"{self.snapshot_path}: unusable snapshot ({e}); replaying the whole log")
            else:
                if payload is not None:
                    start = self._check_offset(payload.get("log_offset"), size)
                    line = payload.get("log_line")
                    first_line = line if isinstance(line, int) else (
                        count_lines(self.path, start) if start else 0)
                    state, snapshot_used = payload["state"], True
        data = b""
        if size:
            with open_for_reading(self.path) as f:
                f.seek(start)
                data = f.read()
        rec = replay_log(self.path, data, first_line, state)
        rec.snapshot_used, rec.snapshot_fallback, rec.notes = snapshot_used, fallback, notes
        self._lines = first_line + data.count(b"\n")
        return rec

    def _check_offset(self, offset, size: int) -> int:
        """The snapshot must end on a line boundary inside the log, or log and snapshot disagree."""
        ok = isinstance(offset, int) and 0 <= offset <= size
        if ok and offset:
            with open_for_reading(self.path) as f:
                f.seek(offset - 1)
                ok = f.read(1) == b"\n"
        if not ok:
            raise StoreDamage(self.path, None,
                              f"log does not match {self.snapshot_path.name}: it has {size} "
                              f"bytes, the snapshot reaches byte {offset}")
        return offset

    def open_for_append(self) -> Repairs:
        """Before the first new write: repair the log's tail, remove a snapshot's stale temp file,
        and open the log for appending."""
        if self._lines is None:
            raise RuntimeError("LogStore.open_for_append() before load(): the store contract "
                               "reads first, then prepares the files for writing")
        repairs = Repairs(tails_repaired=int(self.repair_tail()))
        lines = self._lines
        if self.config.snapshot_every:
            repairs.temp_files_removed = remove_stale_temp(self.door, self.snapshot_path)
        self.fd = self.door.open_append(self.path)
        self.size = os.fstat(self.fd).st_size
        self.lines = lines + repairs.tails_repaired if self.size else 0
        return repairs

    def repair_tail(self) -> bool:
        """The newline repair before the first append of this process (True if it wrote one):
        a fragment a torn write left stays a line of its own, and the next record a line of its
        own after it (`ensure_newline_terminated`; lesson 5)."""
        return ensure_newline_terminated(self.path, self.door)

    def commit(self, state, event, *, mid=lambda: None) -> None:
        line = records.encode(event)
        self.door.append(self.fd, line, torn=self.config.write_mode != "atomic", mid=mid)
        self.size += len(line)
        self.lines += 1
        n = self.config.snapshot_every
        if n and event["t"] == "page_done" and event["page"] % n == 0:
            # The snapshot says where in the log it ends, in bytes and in lines, so that recovery
            # reads only what follows and still names lines correctly.
            write_snapshot(self.door, self.snapshot_path,
                           {"state": state, "log_offset": self.size, "log_line": self.lines},
                           self.config.write_mode)

    def close(self) -> None:
        if self.fd is not None:
            self.door.close(self.fd)
            self.fd = None
