"""The snapshot store: the whole state in one checksummed file, rewritten at every commit.

In `atomic` write mode the file is replaced by `Door.write_atomic` (temp file, fsync per policy,
`os.replace`, directory fsync), so a kill leaves the old snapshot or the new one. In `torn` and
`no-newline` modes it is overwritten in place, so a kill in the middle leaves half a snapshot: the
checksum catches it, and recovery falls back to a fresh start and says so.
"""

from __future__ import annotations

from pathlib import Path

from ..config import RunConfig
from ..diskio import Door
from ..events import initial_state
from . import SNAPSHOT_FILE, Recovered, Repairs, records

SNAPSHOT_FORMAT = 1
STATE_KEYS = set(initial_state())


def write_snapshot(door: Door, path: Path, payload: dict, write_mode: str, mid=lambda: None):
    """Write a snapshot record ({"format", **payload, "crc"}) by the run's write mode."""
    data = records.encode({"format": SNAPSHOT_FORMAT, **payload})
    if write_mode == "atomic":
        door.write_atomic(path, data, mid=mid)
    else:
        door.write_in_place(path, data, torn=True, mid=mid)


def read_snapshot(path: Path) -> dict | None:
    """The snapshot's payload, or None when there is no snapshot. Raises records.Torn/Damaged."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    payload = records.decode(raw.rstrip(b"\n"))
    if payload.pop("format", None) != SNAPSHOT_FORMAT:
        raise records.Damaged(f"not a snapshot of format {SNAPSHOT_FORMAT}")
    state = payload.get("state")
    if not isinstance(state, dict) or set(state) != STATE_KEYS:
        raise records.Damaged("snapshot has no valid state")
    return payload


def remove_stale_temp(door: Door, path: Path) -> int:
    """Remove the temp file a kill left between write and rename; it was never the snapshot."""
    tmp = path.with_name(path.name + ".tmp")
    if tmp.exists():
        door.remove(tmp)
        return 1
    return 0


class SnapshotStore:
    name = "snapshot"

    def __init__(self, run_dir: Path, config: RunConfig, door: Door):
        self.path = run_dir / SNAPSHOT_FILE
        self.config = config
        self.door = door

    def load(self) -> Recovered:
        try:
            payload = read_snapshot(self.path)
        except (records.Torn, records.Damaged) as e:
            return Recovered(initial_state(), snapshot_fallback="fresh",
                             notes=[f"{self.path}: unusable snapshot ({e}); starting from page 1"])
        if payload is None:
            return Recovered(initial_state())
        return Recovered(payload["state"], snapshot_used=True)

    def open_for_append(self) -> Repairs:
        return Repairs(temp_files_removed=remove_stale_temp(self.door, self.path))

    def commit(self, state, event, *, mid=lambda: None) -> None:
        write_snapshot(self.door, self.path, {"state": state}, self.config.write_mode, mid)

    def close(self) -> None:
        pass
