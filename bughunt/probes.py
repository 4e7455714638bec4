"""Small real programs the lessons run to show one fact of the operating system, each in a
process of its own that this module starts, waits for and cleans up after:

- `cleanup_after(sig)` (lesson 1): which clean-up code a signal lets run. SIGTERM lets a handler,
  a `finally` block and an atexit hook run; SIGKILL lets none (signal(7)).
- `one_write_with_little_room(room)` (lesson 5): one `os.write()` of a whole record to a file whose
  size limit leaves room for part of it comes back short, leaving a torn record (write(2)).

(Lesson 6's program, a line written and then killed, is `bughunt.bufferdemo`.)
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from .experiment import forget, spawn
from .stores import LOG_FILE, records


#: A tiny program for "can a killed process clean up?": it installs a SIGTERM handler, an atexit
#: hook and a `finally` block, each of which writes a file, says it is ready, and waits.
CLEANUP_PROGRAM = """
import atexit, os, signal, sys
def note(what):
    open(os.path.join(sys.argv[1], what), "w").close()
signal.signal(signal.SIGTERM, lambda *_: (note("signal handler"), sys.exit(0)))
atexit.register(note, "atexit hook")
try:
    print("ready", flush=True)
    sys.stdin.read()          # wait here until a signal comes
finally:
    note("finally block")
"""
CLEANUP_STEPS = ("signal handler", "finally block", "atexit hook")


def cleanup_after(sig: int) -> list[str]:
    """Start CLEANUP_PROGRAM, wait until it says it is ready (no sleep: a handshake), send `sig`;
    which of its clean-up steps ran, by the files they left."""
    with tempfile.TemporaryDirectory(prefix="bughunt-cleanup-") as tmp:
        proc = spawn([sys.executable, "-c", CLEANUP_PROGRAM, tmp], stdin=subprocess.PIPE,
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError(f"the clean-up program did not start: {proc.stderr.read()}")
            proc.send_signal(sig)
            proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
            forget(proc)
        return [step for step in CLEANUP_STEPS if (Path(tmp) / step).exists()]


#: A record of the log, as the lab writes it (page 2's page_done, checksum included).
SAMPLE_RECORD = {"t": "page_done", "page": 2, "tokens": 812, "finding": False, "seq": 2}

#: Q5.1's program: one `os.write()` of a whole record to a file whose size limit (RLIMIT_FSIZE, set
#: just before) leaves room for only part of it. write(2): "The number of bytes written may be less
#: than count if, for example, there is insufficient space on the underlying physical medium, or the
#: RLIMIT_FSIZE resource limit is encountered". Standard library only; reports through a pipe,
#: which no file size limit applies to.
SHORT_WRITE_PROGRAM = """
import os, resource, sys
path, room = sys.argv[1], int(sys.argv[2])
record = sys.stdin.buffer.read()
fd = os.open(path, os.O_WRONLY | os.O_APPEND)
limit = os.fstat(fd).st_size + room          # the file may grow by `room` bytes, no more
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    print(os.write(fd, record))
except OSError as e:
    print("error", e.errno)
"""


def one_write_with_little_room(room: int | None = None) -> dict:
    """A real process appends one whole record with ONE `os.write()`, to a log whose size limit
    leaves room for `room` bytes (default: half the record): what the call returned, and what the
    file ends with. A full disk does the same; the limit makes it happen where we choose."""
    first = records.encode({**SAMPLE_RECORD, "page": 1, "seq": 1})
    record = records.encode(SAMPLE_RECORD)
    room = len(record) // 2 if room is None else room
    with tempfile.TemporaryDirectory(prefix="bughunt-short-") as tmp:
        path = Path(tmp) / LOG_FILE
        path.write_bytes(first)
        proc = spawn([sys.executable, "-c", SHORT_WRITE_PROGRAM, str(path), str(room)],
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            out, err = proc.communicate(record, timeout=60)
        finally:
            forget(proc)
        if proc.returncode != 0:
            raise RuntimeError(f"the short-write program failed: {err.decode().strip()[-300:]}")
        data = path.read_bytes()
    said = out.decode().split()
    written = int(said[0]) if said and said[0].isdigit() else None
    return {"record": len(record), "room": room, "returned": written,
            "error": None if written is not None else " ".join(said), "file": data,
            "tail": data[len(first):], "ends_with_newline": data.endswith(b"\n")}
