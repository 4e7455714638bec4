"""`python -m bughunt doctor`: can this machine and this folder run the lab?

The lab needs POSIX behaviour that some machines and file systems do not give: SIGKILL, fsync of a
file and of a directory, an atomic rename, and flock. Each check tries the real thing in the lab's
folder and says what to do when it fails.
"""

from __future__ import annotations

import fcntl
import importlib.metadata as md
import os
import platform
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

PACKAGES = ["bughunt", "pandas", "matplotlib", "ipywidgets", "jupyterlab", "jupyterlab_widgets",
            "nbval", "pytest", "tqdm", "jupytext"]


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


def _try(name: str, fn, fix: str) -> Check:
    try:
        detail = fn()
        return Check(name, True, detail or "works")
    except Exception as e:            # any failure is a finding to report, not a crash
        return Check(name, False, f"{type(e).__name__}: {e}", fix)


def check_python() -> Check:
    v = sys.version_info
    ok = v >= (3, 11)
    return Check("python >= 3.11", ok, platform.python_version(),
                 "" if ok else "install Python 3.11 or newer, then `make clean lab`")


def check_posix() -> Check:
    ok = os.name == "posix" and hasattr(signal, "SIGKILL") and hasattr(os, "fsync")
    return Check("POSIX (Linux or macOS)", ok, f"{platform.system()} {platform.release()}",
                 "" if ok else "the lab needs SIGKILL, fsync and flock: use Linux, macOS or WSL")


def check_packages() -> list[Check]:
    checks = []
    for name in PACKAGES:
        try:
            checks.append(Check(f"package {name}", True, md.version(name)))
        except md.PackageNotFoundError:
            checks.append(Check(f"package {name}", False, "not installed",
                                "run `make lab` (or `pip install -r requirements.txt`)"))
    return checks


def check_widget_extension() -> Check:
    """ipywidgets in the kernel must match the JupyterLab extension, or learners see
    "Error displaying widget" while every test stays green."""
    try:
        from packaging.requirements import Requirement
        need = [Requirement(r) for r in md.requires("ipywidgets") or []
                if r.startswith("jupyterlab_widgets") or r.startswith("jupyterlab-widgets")]
        have = md.version("jupyterlab_widgets")
    except md.PackageNotFoundError as e:
        return Check("widget extension matches ipywidgets", False, f"not installed: {e}",
                     "pip install -r requirements.txt")
    if not need:
        return Check("widget extension matches ipywidgets", True, f"jupyterlab_widgets {have}")
    ok = all(r.specifier.contains(have, prereleases=True) for r in need)
    return Check("widget extension matches ipywidgets", ok,
                 f"ipywidgets needs {need[0].specifier}, jupyterlab_widgets is {have}",
                 "" if ok else "pip install 'jupyterlab_widgets" + str(need[0].specifier) + "'")


def check_folder(folder: Path) -> list[Check]:
    """fsync, rename, directory fsync, flock and SIGKILL, tried for real in `folder`."""
    folder = Path(folder)
    fix_fs = (f"{folder} is on a file system without this; put the lab on a local disk "
              "(not a network or FUSE mount)")

    def fsync_file():
        with tempfile.NamedTemporaryFile(dir=folder) as f:
            f.write(b"bughunt\n")
            f.flush()
            os.fsync(f.fileno())

    def rename():
        with tempfile.TemporaryDirectory(dir=folder) as d:
            a, b = Path(d) / "a", Path(d) / "b"
            a.write_bytes(b"new")
            b.write_bytes(b"old")
            os.replace(a, b)
            if b.read_bytes() != b"new" or a.exists():
                raise OSError("os.replace did not replace the file")

    def fsync_dir():
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def flock():
        with tempfile.NamedTemporaryFile(dir=folder) as f, open(f.name, "rb") as g:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            try:
                fcntl.flock(g.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return "a second holder is refused"
            raise OSError("a second exclusive flock was granted")

    def sigkill():
        child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                                 stdin=subprocess.PIPE)
        child.send_signal(signal.SIGKILL)
        if child.wait(timeout=10) != -signal.SIGKILL:
            raise OSError(f"child ended with {child.returncode}")
        return "a child process was killed by signal 9"

    return [
        _try("fsync a file in the lab's folder", fsync_file, fix_fs),
        _try("atomic rename (os.replace)", rename, fix_fs),
        _try("fsync the folder itself", fsync_dir, fix_fs),
        _try("flock (one writer per run)", flock, fix_fs),
        _try("SIGKILL a child process", sigkill, "the lab needs to kill its own child processes"),
    ]


def run_checks(folder: Path | None = None) -> list[Check]:
    folder = Path.cwd() if folder is None else Path(folder)
    return [check_python(), check_posix(), *check_packages(), check_widget_extension(),
            *check_folder(folder)]


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bughunt doctor", description=__doc__)
    parser.add_argument("--dir", type=Path, default=Path.cwd(),
                        help="the folder the lab will write in (default: here)")
    args = parser.parse_args(argv)
    if not args.dir.is_dir():
        parser.error(f"--dir {args.dir}: not a directory")
    checks = run_checks(args.dir)
    width = max(len(c.name) for c in checks)
    for c in checks:
        print(f"{'ok ' if c.ok else 'BAD'}  {c.name:<{width}}  {c.detail}")
        if not c.ok and c.fix:
            print(f"{'':5}{'':<{width}}  what to do: {c.fix}")
    bad = [c for c in checks if not c.ok]
    print(f"\n{len(checks) - len(bad)} of {len(checks)} checks passed")
    return 1 if bad else 0
