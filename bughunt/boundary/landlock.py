"""The kernel's half of the fence: Landlock (Linux 5.13 and later), through three system calls.

Landlock lets an unprivileged process take rights away from itself, for good: after
`landlock_restrict_self` neither it nor any process it forks or executes can get them back. The
boundary's child calls `restrict` once, before it imports any learner code and before it starts
any thread (a restriction holds for the thread that asks and what it starts afterwards), so the
store, every process of a sweep and anything the store manages to start are all inside it:

- **files**: making, writing, truncating, renaming, linking and removing anything (a regular file,
  a directory, a FIFO, a device node, a Unix socket, a symlink) only beneath the directories it is
  given (the boundary's temporary folder for runs, a run directory of `run --store`...); writing
  (appending: no truncation, no removal) to the few files it is given (the fence's log,
  /dev/null). Reading is not restricted: the fence is about what a store changes.
- **network** (Landlock ABI 4 and later): no TCP bind and no TCP connect, except to the ports it
  is given (the model server of a sweep that calls one).
- **scopes** (ABI 6 and later): no signal to a process outside the domain, no connection to an
  abstract Unix socket outside it.

Where it refuses, the system call fails with EACCES (EPERM for a signal); the audit hook
(`fence.py`) is still the layer that *names* a refusal in one sentence when Python tells it what
is being tried, and the kernel is what stops what the hook cannot see (a `dir_fd`, `mkfifo`, a
thread with no frame of the store's, C code).

Why ctypes and not the `landlock` package on PyPI: three system calls and two structures are
forty lines, and a binding of our own adds no dependency to the lab (nothing to install on a
learner's machine, nothing that can be missing); the kernel's ABI for them is stable and
versioned (`landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`).

References: the landlock(7) man page, and the kernel's Documentation/userspace-api/landlock.rst
(https://docs.kernel.org/userspace-api/landlock.html), whose structures and constants are these.

`BUGHUNT_LANDLOCK=off` in the caller's environment makes `abi()` say 0: the lab as it runs on a
machine without Landlock (macOS, an older kernel), where the fence is the audit hook alone.
"""

from __future__ import annotations

import os
import platform
import sys

# System call numbers: the same on every architecture since Linux 5.13 (the generic table).
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2
_PR_SET_NO_NEW_PRIVS = 38

# Filesystem rights (ABI 1 unless said).
FS_WRITE_FILE = 1 << 1
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13          # ABI 2: rename or link into another directory
FS_TRUNCATE = 1 << 14       # ABI 3
NET_BIND_TCP = 1 << 0       # ABI 4
NET_CONNECT_TCP = 1 << 1    # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0   # ABI 6
SCOPE_SIGNAL = 1 << 1                 # ABI 6

#: What the verdict lists when the kernel's half is missing: what the audit hook alone lets by.
HOOK_ALONE_GAPS = (
    "os.open with a dir_fd (the audit event carries no dir_fd)",
    "os.mkfifo, os.mknod (no audit event)",
    "a thread, finalizer or atexit callback with no frame of the store's on the stack",
    "SQLite's ATTACH DATABASE and VACUUM INTO (no audit event)",
    "readline.write_history_file and other C code that opens files itself",
    "_posixsubprocess.fork_exec (no audit event)",
    "TCP connections and signals from C code",
)

_LIBC: list = []


def _libc():
    if not _LIBC:
        import ctypes
        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    return _LIBC[0]


def abi() -> int:
    """The Landlock ABI version the kernel offers, or 0 (not Linux, an older kernel, Landlock
    not enabled at boot, or a container's seccomp profile that forbids the call)."""
    if not sys.platform.startswith("linux") or platform.machine().startswith("alpha"):
        return 0
    if os.environ.get("BUGHUNT_LANDLOCK") == "off":   # the lab as on a machine without it
        return 0
    import ctypes
    try:
        libc = _libc()
        libc.syscall.restype = ctypes.c_long
        version = libc.syscall(ctypes.c_long(_SYS_CREATE_RULESET), None, ctypes.c_size_t(0),
                               ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(int(version), 0)


class LandlockError(OSError):
    """The kernel refused to set up the restriction."""


def restrict(*, writable_dirs=(), writable_files=(), appendable_files=(), tcp_ports=(),
             version: int | None = None) -> int:
    """Restrict this process (and every process it starts) as the module's docstring says:
    `writable_dirs` (anything below them), `writable_files` (written and truncated: /dev/null),
    `appendable_files` (written, never truncated: the fence's log; Landlock cannot insist on
    O_APPEND, so a write there may land at any offset). Returns the ABI used (0: Landlock is
    missing and nothing was done). Raises LandlockError if the kernel offers Landlock and
    refuses a step (a path that does not exist is skipped)."""
    import ctypes

    version = abi() if version is None else version
    if version <= 0:
        return 0
    libc = _libc()
    fs = (FS_WRITE_FILE | FS_REMOVE_DIR | FS_REMOVE_FILE | FS_MAKE_CHAR | FS_MAKE_DIR |
          FS_MAKE_REG | FS_MAKE_SOCK | FS_MAKE_FIFO | FS_MAKE_BLOCK | FS_MAKE_SYM)
    if version >= 2:
        fs |= FS_REFER
    if version >= 3:
        fs |= FS_TRUNCATE
    file_rights = FS_WRITE_FILE | (FS_TRUNCATE if version >= 3 else 0)
    net = NET_BIND_TCP | NET_CONNECT_TCP if version >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if version >= 6 else 0

    class RulesetAttr(ctypes.Structure):
        _fields_ = [("handled_access_fs", ctypes.c_uint64),
                    ("handled_access_net", ctypes.c_uint64),
                    ("scoped", ctypes.c_uint64)]

    class PathBeneathAttr(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    class NetPortAttr(ctypes.Structure):
        _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]

    # The structure grew with the ABI: pass the size this kernel knows.
    size = 8 if version < 4 else 16 if version < 6 else 24
    attr = RulesetAttr(fs, net, scoped)
    syscall = libc.syscall
    syscall.restype = ctypes.c_long

    def check(result, what: str) -> int:
        if result < 0:
            err = ctypes.get_errno()
            raise LandlockError(err, f"Landlock: {what}: {os.strerror(err)}")
        return result

    ruleset = check(syscall(ctypes.c_long(_SYS_CREATE_RULESET), ctypes.byref(attr),
                            ctypes.c_size_t(size), ctypes.c_uint32(0)), "create_ruleset")
    try:
        for path, rights in [*((d, fs) for d in writable_dirs),
                             *((f, file_rights) for f in writable_files),
                             *((f, FS_WRITE_FILE) for f in appendable_files)]:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue                       # nothing there to allow
            try:
                rule = PathBeneathAttr(rights, fd)
                check(syscall(ctypes.c_long(_SYS_ADD_RULE), ctypes.c_int(ruleset),
                              ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(rule),
                              ctypes.c_uint32(0)), f"add_rule {path}")
            finally:
                os.close(fd)
        if net:
            for port in tcp_ports:
                rule = NetPortAttr(NET_CONNECT_TCP, int(port))
                check(syscall(ctypes.c_long(_SYS_ADD_RULE), ctypes.c_int(ruleset),
                              ctypes.c_int(_RULE_NET_PORT), ctypes.byref(rule),
                              ctypes.c_uint32(0)), f"add_rule port {port}")
        libc.prctl.restype = ctypes.c_int
        check(libc.prctl(ctypes.c_int(_PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1), ctypes.c_ulong(0),
                         ctypes.c_ulong(0), ctypes.c_ulong(0)), "prctl(PR_SET_NO_NEW_PRIVS)")
        check(syscall(ctypes.c_long(_SYS_RESTRICT_SELF), ctypes.c_int(ruleset),
                      ctypes.c_uint32(0)), "restrict_self")
    finally:
        os.close(ruleset)
    return version
