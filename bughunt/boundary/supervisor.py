"""The boundary's supervisor: the one process that starts the store's process, and ends it with
everything it started.

Run as `python -I -S .../supervisor.py` (isolated, no site: it imports only the standard library,
and no learner code ever runs in it). The lab starts it in a session of its own and speaks to it
through its stdin and stdout, one JSON object a line:

    stdin   first line: {"argv": [...], "env": {...}, "cwd": DIR, "fds": {...}, "grace": S,
            "remove": DIR}, then "stop" or "kill" (or end of file: the lab is gone, and the
            supervisor removes DIR, the boundary's folder, itself)
    stdout  {"t": "started", "pid": N}, {"t": "stopped", "signal": S} (the child stopped itself,
            SIGSTOP), {"t": "exit", "code": C} (negative: killed by signal -C),
            {"t": "gone", "left": K, "orphans": N} (then it exits: K processes could not be
            ended; N processes had left the child's group and lost their parent, and were ended)

What it guarantees:

- The child (the process that imports and calls the store) runs in a process group of its own;
  ending it ends the whole group.
- On Linux the supervisor is a child subreaper (prctl(2) PR_SET_CHILD_SUBREAPER): a process that
  leaves its group or its session (setsid, a double fork, `start_new_session=True`) and loses its
  parent is re-parented to the supervisor instead of to init, so the supervisor still finds it
  (its children, from /proc) and kills it. It also looks for such orphans while the child runs.
  And the child gets PR_SET_PDEATHSIG: if the supervisor itself is killed, so is the child.
- On macOS there is no subreaper: the child's process group is killed as a whole, and a process the
  store moved to a session of its own escapes it (the lab's own processes never do: inside a
  boundary the fork servers stay in the child's group).
- At "stop", at end of file, or when the child exits: SIGTERM to the group, `grace` seconds to end
  (the lab's code stops between two operations), then SIGKILL to the group and to every process
  re-parented here, until none is left; then it reports "gone" and exits.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time

LINUX = sys.platform.startswith("linux")
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


_LIBC = []


def _prctl(option: int, value: int) -> bool:
    if not _LIBC:
        import ctypes
        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    return _LIBC[0].prctl(option, value, 0, 0, 0) == 0


def children() -> list[int]:
    """The pids whose parent is this process (Linux: /proc)."""
    me = os.getpid()
    path = f"/proc/{me}/task/{me}/children"
    try:
        with open(path) as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        pass
    found = []
    for name in os.listdir("/proc") if LINUX else ():
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat.rsplit(b")", 1)[1].split()[1]) == me:
                found.append(int(name))
    return found


class Supervisor:
    def __init__(self, config: dict):
        self.config = config
        self.reaper = LINUX and _prctl(PR_SET_CHILD_SUBREAPER, 1)
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)      # ended by "stop" or end of file, nothing else
        fds = config["fds"]
        self.child = subprocess.Popen(
            config["argv"], env=config["env"], cwd=config["cwd"],
            stdin=fds.get("stdin") if fds.get("stdin") is not None else subprocess.DEVNULL,
            stdout=fds["stdout"], stderr=fds["stderr"], pass_fds=tuple(fds.get("pass", ())),
            process_group=0, preexec_fn=self._in_child if LINUX else None)
        self.pid = self.child.pid
        for fd in {fds["stdout"], fds["stderr"], *fds.get("pass", ()),
                   *([fds["stdin"]] if fds.get("stdin") is not None else [])}:
            try:
                os.close(fd)
            except OSError:
                pass
        self.alive = True
        self.orphans_ended: set[int] = set()
        self.say({"t": "started", "pid": self.pid, "subreaper": bool(self.reaper)})

    @staticmethod
    def _in_child() -> None:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)

    def say(self, message: dict) -> None:
        try:
            os.write(1, (json.dumps(message) + "\n").encode())
        except OSError:
            pass                      # the lab is gone: carry on ending what it started

    def reap(self) -> None:
        flags = os.WNOHANG | os.WUNTRACED
        while True:
            try:
                pid, status = os.waitpid(-1, flags)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.pid:
                if os.WIFSTOPPED(status):
                    self.say({"t": "stopped", "signal": os.WSTOPSIG(status)})
                    continue
                self.alive = False
                self.say({"t": "exit", "code": os.waitstatus_to_exitcode(status)})
            elif os.WIFSTOPPED(status):
                self._kill(pid)               # an orphan that stopped: it will not go by itself

    @staticmethod
    def _kill(pid: int, sig: int = signal.SIGKILL) -> None:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _killpg(self, sig: int) -> bool:
        """Signal the child's group; False once the group is gone."""
        try:
            os.killpg(self.pid, sig)
            return True
        except (ProcessLookupError, PermissionError):
            return False

    def orphans(self) -> list[int]:
        return [p for p in children() if p != self.pid]

    def end_all(self, grace: float) -> int:
        """SIGTERM, `grace` seconds, then SIGKILL for the group and every orphan, until none is
        left (or 5 s). Returns how many processes could not be ended."""
        if self._killpg(signal.SIGTERM) and grace > 0:
            deadline = time.monotonic() + grace
            while self.alive and time.monotonic() < deadline:
                select.select([self.wake_r], [], [], 0.02)
                self._drain()
                self.reap()
        deadline = time.monotonic() + 5
        left = []
        while time.monotonic() < deadline:
            group = self._killpg(signal.SIGKILL)
            left = self.orphans() if LINUX else []
            self.orphans_ended.update(left)
            for pid in left:
                self._kill(pid)
                try:                          # a daemon leads a group (and session) of its own:
                    if os.getpgid(pid) == pid:     # every member descends from the store
                        os.killpg(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            self.reap()
            if not group and not left and not self.alive:
                return 0
            time.sleep(0.001)
        return len(left) + (1 if self.alive else 0)

    def _drain(self) -> None:
        try:
            while os.read(self.wake_r, 512):
                pass
        except (BlockingIOError, OSError):
            pass

    def run(self, pending: bytes = b"") -> int:
        grace = float(self.config.get("grace", 0.3))
        command, orphaned = None, False
        while self.alive and command is None:
            if b"\n" not in pending:
                ready, _, _ = select.select([0, self.wake_r], [], [], 0.25)
                if self.wake_r in ready:
                    self._drain()
                if 0 in ready:
                    chunk = os.read(0, 4096)
                    pending += chunk
                    if not chunk:
                        command = b"stop"           # end of file: the lab is gone
                        orphaned = True
            self.reap()
            if b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                if line.strip() in (b"stop", b"kill"):
                    command = line.strip()
                    grace = 0.0 if command == b"kill" else grace
            if self.reaper:
                for pid in self.orphans():        # escaped while the child runs: end it now
                    self._kill(pid)
                    self.orphans_ended.add(pid)
        left = self.end_all(0.0 if not self.alive else grace)
        if orphaned and self.config.get("remove"):
            # The lab died without closing its boundary (a kernel killed, say): nobody else will
            # remove the boundary's folder.
            import shutil
            shutil.rmtree(self.config["remove"], ignore_errors=True)
        self.say({"t": "gone", "left": left, "orphans": len(self.orphans_ended)})
        return 0


def main() -> int:
    data = b""
    while b"\n" not in data:
        chunk = os.read(0, 1 << 16)
        if not chunk:
            return 0
        data += chunk
    line, rest = data.split(b"\n", 1)
    return Supervisor(json.loads(line)).run(rest)


if __name__ == "__main__":
    sys.exit(main())
