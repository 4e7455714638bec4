"""Correct stores that write without the lab's door (tests/test_boundary.py grades them): the
conformance suite cannot build their crash states from the door's journal, so the sweep's real
kills are their verdict."""
import json, os, sqlite3
from bughunt.events import initial_state
from bughunt.stores import Recovered, Repairs


class Plain:
    """Temp file, os.fsync, os.replace, directory fsync: all by hand, not through the door."""
    name = "plain"

    def __init__(self, run_dir, config, door):
        self.dir = run_dir
        self.path = run_dir / "state.json"

    def load(self):
        if not self.path.exists():
            return Recovered(initial_state())
        return Recovered(json.loads(self.path.read_bytes()))

    def open_for_append(self):
        return Repairs()

    def commit(self, state, event, *, mid):
        tmp = self.path.with_name("state.json.tmp")
        with open(tmp, "wb") as f:
            f.write(json.dumps(state).encode())
            f.flush()
            os.fsync(f.fileno())
        mid()
        os.replace(tmp, self.path)
        fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def close(self):
        pass


class Sub(Plain):
    """The same in a subdirectory made with os.mkdir."""
    def __init__(self, run_dir, config, door):
        self.dir = run_dir / "sub"
        self.path = self.dir / "state.json"

    def open_for_append(self):
        if not self.dir.exists():
            os.mkdir(self.dir)
        return Repairs()


class Sql:
    """sqlite3 in its run directory, synchronous=FULL."""
    name = "sqlite"

    def __init__(self, run_dir, config, door):
        self.path = run_dir / "store.db"
        self.db = None

    def load(self):
        if not self.path.exists():
            return Recovered(initial_state())
        db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
        try:
            row = db.execute("SELECT state FROM s WHERE id = 1").fetchone()
        except sqlite3.OperationalError:
            row = None
        finally:
            db.close()
        return Recovered(json.loads(row[0]) if row else initial_state())

    def open_for_append(self):
        self.db = sqlite3.connect(self.path, isolation_level=None)
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("CREATE TABLE IF NOT EXISTS s (id INTEGER PRIMARY KEY, state TEXT)")
        return Repairs()

    def commit(self, state, event, *, mid):
        mid()
        self.db.execute("INSERT OR REPLACE INTO s VALUES (1, ?)", (json.dumps(state),))

    def close(self):
        if self.db is not None:
            self.db.close()
            self.db = None


class Störe(Plain):
    """Any valid Python identifier names a class."""
