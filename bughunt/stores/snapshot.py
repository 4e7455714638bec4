"""The snapshot store: the whole state in one checksummed file, rewritten at every commit.

In `atomic` write mode the file is replaced by `Door.write_atomic` (temp file, fsync per policy,
`os.replace`, directory fsync), so a kill leaves the old snapshot or the new one, never half of
one. A snapshot that fails its checksum there was damaged after it was written (a bad disk, a
careless copy, an edit): recovery refuses it, naming the file, and changes nothing, because
starting over would silently pay every model call again and could file every report twice.

In `torn` and `no-newline` modes it is overwritten in place, so a kill in the middle leaves half a
snapshot: that is the crash's own leftover, not damage. The checksum catches it, and recovery
starts from page 1 and says so (`snapshot_fallback = "fresh"` and a note in the report).
"""

from __future__ import annotations

from pathlib import Path

from ..config import RunConfig
from ..diskio import Door, read_bytes
from ..events import initial_state
from . import SNAPSHOT_FILE, Recovered, Repairs, StoreDamage, records

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
        raw = read_bytes(path)
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
        except OSError as e:
            raise StoreDamage(self.path, None, f"cannot be read ({e.strerror})") from None
        except (records.Torn, records.Damaged) as e:
            if self.config.write_mode == "atomic":
                raise StoreDamage(self.path, None, f"damaged snapshot ({e}): an atomically "
                                  "replaced file cannot be torn by a kill, so this is damage; "
                                  "move it away to start over") from None
            return Recovered(initial_state(), snapshot_fallback="fresh",
                             notes=[f"{self.path}: torn snapshot ({e}), the leftover of a kill "
                                    "during an in-place write; the run starts over from page 1"])
        if payload is None:
            return Recovered(initial_state())
        return Recovered(payload["state"], snapshot_used=True)

    def open_for_append(self) -> Repairs:
        return Repairs(temp_files_removed=remove_stale_temp(self.door, self.path))

    def commit(self, state, event, *, mid=lambda: None) -> None:
        write_snapshot(self.door, self.path, {"state": state}, self.config.write_mode, mid)

    def close(self) -> None:
        pass
