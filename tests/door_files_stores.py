"""Correct stores that write their checkpoint through `door.files` (the door's system calls, not
its timed write methods): a temp file, fsynced, renamed, the directory fsynced. Used by
tests/test_cli_robust.py (what `run --store` reports of them) and tests/test_conformance.py (a
state kept in a subfolder, seen at every crash state)."""
import json, os
from bughunt.events import initial_state
from bughunt.stores import Recovered, Repairs


class ThroughFiles:
    """Writes its checkpoint through door.files (the system calls), not the door's methods."""
    name = "through files"

    def __init__(self, run_dir, config, door):
        self.path, self.files = run_dir / "state.json", door.files

    def load(self):
        if not self.path.exists():
            return Recovered(initial_state())
        return Recovered(json.loads(self.path.read_bytes()))

    def open_for_append(self):
        return Repairs()

    def commit(self, state, event, *, mid):
        tmp = self.path.with_name("state.json.tmp")
        fd = self.files.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        self.files.write(fd, json.dumps(state).encode(), str(tmp))
        self.files.fsync(fd, str(tmp))
        self.files.close(fd)
        mid()
        self.files.rename(tmp, self.path)
        self.files.fsync_dir(self.path.parent)

    def close(self):
        pass


class InAFolder(ThroughFiles):
    """Its state in sub/state.json, written through the door (the folder made by itself)."""
    name = "in a folder"

    def __init__(self, run_dir, config, door):
        (run_dir / "sub").mkdir(exist_ok=True)
        self.path, self.files = run_dir / "sub" / "state.json", door.files
