"""`python -m bughunt doctor`: can this machine and this folder run the lab?

The lab needs POSIX behaviour that some machines and file systems do not give: SIGKILL, fsync of a
file and of a directory, rename over an existing file, and flock. Each check tries the real thing in
the lab's folder, says exactly what it tried, and says what to do when it fails. It also reports
what the lab's fsync timings will be measured on (`storage`): the file system, the block device and
whether that device reports a volatile write cache, and whether this machine runs under a hypervisor.

Then the optional parts, which the core lab runs without: the frameworks of lessons 10 and 11 at the
versions requirements.txt pins (those lessons measure their behaviour), the browser tests' Chromium,
a font for the Chinese terms, and the book's tools. Each says what its absence disables; a missing
optional part never fails the check (exit 0 as long as the core passes).
"""

from __future__ import annotations

import fcntl
import importlib.metadata as md
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REQUIREMENTS = ROOT / "requirements.txt"
PROC_MOUNTS = Path("/proc/mounts")
SYS_DEV_BLOCK = Path("/sys/dev/block")
CPUINFO = Path("/proc/cpuinfo")

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
        return "fsync returned without error (whether the device really stored it, no test can see)"

    def rename():
        with tempfile.TemporaryDirectory(dir=folder) as d:
            a, b = Path(d) / "a", Path(d) / "b"
            a.write_bytes(b"new")
            b.write_bytes(b"old")
            os.replace(a, b)
            if b.read_bytes() != b"new" or a.exists():
                raise OSError("os.replace did not replace the file")
        # What this shows, and what it cannot: a crash in the middle of a rename, or a reader racing
        # it, cannot be staged from here; atomicity is what POSIX rename(2) promises, durability
        # needs the directory fsync checked next.
        return ("os.replace put a new file in place of an existing one (the old name now holds the "
                "new bytes, the temp name is gone); atomicity under a crash is rename(2)'s promise, "
                "not tested here")

    def fsync_dir():
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return "fsync on the folder's own descriptor returned without error"

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
        _try("rename over an existing file (os.replace)", rename, fix_fs),
        _try("fsync the folder itself", fsync_dir, fix_fs),
        _try("flock (one writer per run)", flock, fix_fs),
        _try("SIGKILL a child process", sigkill, "the lab needs to kill its own child processes"),
    ]


# --- what an fsync timing on this machine measures ----------------------------------------------

@dataclass(frozen=True)
class Storage:
    """Where the lab's writes in a folder land, as far as this machine says (None: cannot tell).

    An fsync's cost and meaning depend on all three: a file system in memory has no disk to wait for;
    a device with a volatile write cache acknowledges writes held in its cache, so Linux follows the
    data with a cache-flush command (or a FUA write) when fsync asks for durability; and a virtual
    disk passes that flush to a hypervisor, whose own settings decide whether it reaches a platter.
    """

    file_system: str              # "ext4", "tmpfs", "apfs", ... or "unknown"
    device: str | None            # the block device's name ("vda", "nvme0n1")
    virtual_disk: bool | None     # a virtio / Xen / Hyper-V device: a disk emulated by a hypervisor
    write_cache: str | None       # "write back" (volatile cache) or "write through", as Linux reports
    hypervisor: bool | None       # the CPU reports running under a hypervisor

    def describe(self) -> str:
        """One sentence on what was found, saying "unknown" where the machine does not tell."""
        disk = self.device or "an unknown device"
        if self.virtual_disk:
            disk += " (a virtual disk)"
        cache = {"write back": "reports a volatile write cache (write back)",
                 "write through": "reports no volatile write cache (write through)"}.get(
                     self.write_cache or "", "does not say whether it has a write cache")
        vm = {True: "runs under a hypervisor", False: "reports no hypervisor",
              None: "does not say whether it runs under a hypervisor"}[self.hypervisor]
        return f"{self.file_system} on {disk}, which {cache}; this machine {vm}"


def file_system(path: Path, mounts: Path = PROC_MOUNTS) -> str:
    """The type of the file system holding `path` ("ext4", "tmpfs", ...), from /proc/mounts.

    "unknown" where there is no /proc (macOS). Matters because on a file system in memory (tmpfs)
    fsync has no disk to wait for, and the latency figures would say fsync is free.
    """
    try:
        lines = [line.split() for line in Path(mounts).read_text().splitlines()]
    except OSError:
        return "unknown"
    target = str(Path(path).resolve())
    best = ("", "unknown")
    for fields in lines:
        point = fields[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best[0]):
            best = (point, fields[2])
    return best[1]


def _read_sys(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def storage(path: Path, sys_dev_block: Path = SYS_DEV_BLOCK, cpuinfo: Path = CPUINFO,
            mounts: Path = PROC_MOUNTS) -> Storage:
    """What the writes in `path` go to, read from Linux's /sys and /proc (macOS: mostly None)."""
    st = os.stat(path)
    node = Path(sys_dev_block) / f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    device = write_cache = virtual = None
    if node.exists():
        real = node.resolve()
        # a partition's queue settings live on its parent disk
        disk = real if (real / "queue").is_dir() else real.parent
        device = disk.name
        write_cache = _read_sys(disk / "queue" / "write_cache")
        parts = set(str(real).split("/"))
        virtual = any(p.startswith(("virtio", "xen", "vmbus")) for p in parts)
    flags = _read_sys(Path(cpuinfo))
    hypervisor = None if flags is None else any(
        line.startswith("flags") and " hypervisor" in line for line in flags.splitlines())
    if hypervisor is None and platform.system() == "Darwin":
        try:
            out = subprocess.run(["sysctl", "-n", "kern.hv_vmm_present"], capture_output=True,
                                 text=True, timeout=5).stdout.strip()
            hypervisor = {"1": True, "0": False}.get(out)
        except (OSError, subprocess.SubprocessError):
            hypervisor = None
    return Storage(file_system(path, mounts), device, virtual, write_cache, hypervisor)


def describe_storage(folder: Path) -> str:
    """Not a pass/fail check: what the lab's fsync timings in `folder` will be measured on."""
    try:
        return storage(folder).describe()
    except OSError as e:
        return f"cannot tell ({e.strerror})"


def lab_python(root: Path = ROOT) -> Path:
    """The interpreter of the lab's venv (`make setup` makes it), whether or not it exists."""
    return root / ".venv" / "bin" / "python"


def check_interpreter(packages: list[Check], root: Path = ROOT) -> list[Check]:
    """When the lab's packages are missing from this Python, say which Python has them: a
    learner who typed `python3 -m bughunt doctor` outside the venv is told the one to use."""
    if all(c.ok for c in packages):
        return []
    venv = root / ".venv"
    here = Path(sys.prefix).resolve()
    if venv.is_dir() and here != venv.resolve():
        return [Check("the lab's Python", False,
                      f"this is {sys.executable}, not the lab's venv ({venv}), which has the "
                      "packages missing here",
                      f"run {lab_python(root)} -m bughunt doctor (`make lab` uses that Python)")]
    if not venv.is_dir():
        return [Check("the lab's Python", False,
                      f"this is {sys.executable}, and there is no venv at {venv} yet",
                      f"run `make setup` (it makes {venv}), then {lab_python(root)} -m bughunt "
                      "doctor")]
    return []


def run_checks(folder: Path | None = None) -> list[Check]:
    folder = Path.cwd() if folder is None else Path(folder)
    packages = check_packages()
    return [check_python(), check_posix(), *check_interpreter(packages), *packages,
            check_widget_extension(), *check_folder(folder)]


# --- optional parts: what each one enables, and what is lost without it ---------------------------

@dataclass(frozen=True)
class Part:
    """An optional part of the lab: the distributions and modules it needs, and what it enables."""

    name: str
    dists: tuple[str, ...]        # as pip names them, checked against requirements.txt's pins
    modules: tuple[str, ...]      # imported, in a fresh interpreter, to prove they load
    disables: str                 # what is lost without it


@dataclass
class PartCheck:
    """What was found for one optional part."""

    name: str
    ok: bool
    detail: str
    disables: str
    fix: str = ""


PARTS = [
    Part("lesson 10: LangGraph", ("langgraph", "langgraph-checkpoint-sqlite"),
         ("langgraph", "langgraph.checkpoint.sqlite"),
         "lesson 10's LangGraph sweeps (`bughunt frameworks --framework langgraph`)"),
    Part("lesson 10: DBOS", ("dbos",), ("dbos",),
         "lesson 10's DBOS sweeps (`bughunt frameworks --framework dbos`)"),
    Part("lesson 11: the openai SDK", ("openai",), ("openai",),
         "lesson 11's calls through the real SDK, and `--model local-server` runs"),
    Part("make book: Sphinx, myst-nb, sphinx-book-theme",
         ("sphinx", "myst-nb", "sphinx-book-theme"), ("sphinx", "myst_nb", "sphinx_book_theme"),
         "`make book` (the static site); install with `make setup-book`"),
]


def pins(requirements: Path = REQUIREMENTS) -> dict[str, str]:
    """The exact pins (`name==version`) in requirements.txt, by normalized name."""
    try:
        text = Path(requirements).read_text(encoding="utf-8")
    except OSError:
        return {}
    found = re.findall(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;#]+)", text, re.MULTILINE)
    return {_normal(name): version for name, version in found}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def check_part(part: Part, pinned: dict[str, str]) -> PartCheck:
    """Installed at the pinned version (where requirements.txt pins one), and importable."""
    fix = "run `make setup` (or `pip install -r requirements.txt`)"
    if part.name.startswith("make book"):
        fix = "run `make setup-book` (or `pip install -r requirements-book.txt`)"
    found, wrong = [], []
    for dist in part.dists:
        try:
            have = md.version(dist)
        except md.PackageNotFoundError:
            return PartCheck(part.name, False, f"{dist} is not installed", part.disables, fix)
        want = pinned.get(_normal(dist))
        found.append(f"{dist} {have}")
        if want is not None and have != want:
            wrong.append(f"{dist} is {have}, requirements.txt pins {want}")
    if wrong:
        return PartCheck(part.name, False, "; ".join(wrong), part.disables, fix)
    code = "; ".join(f"import {m}" for m in part.modules)
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=120)
        error = proc.stderr.strip().splitlines()[-1] if proc.returncode else ""
    except subprocess.TimeoutExpired:
        error = "importing it did not finish within 120 s"
    if error:
        return PartCheck(part.name, False, f"installed ({', '.join(found)}) but `{code}` fails: "
                         f"{error}", part.disables, fix)
    return PartCheck(part.name, True, f"{', '.join(found)}, imported", part.disables)


def chromium_path() -> str:
    """Where the browser tests look for Chromium (tests/test_browser.py uses the same order)."""
    return os.environ.get("BUGHUNT_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"


def check_chromium() -> PartCheck:
    disables = ("the browser tests (JupyterLab, the app, the book in a real browser): "
                "`make test` skips them and says so")
    fix = "install Debian's Chromium (`apt-get install chromium`) or set BUGHUNT_CHROMIUM"
    path = chromium_path()
    if not Path(path).exists():
        return PartCheck("browser tests: Chromium", False, f"no Chromium at {path}", disables,
                         fix)
    try:
        version = subprocess.run([path, "--version"], capture_output=True, text=True,
                                 timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        return PartCheck("browser tests: Chromium", False, f"{path} does not run: {e}",
                         disables, fix)
    try:
        playwright = f", playwright {md.version('playwright')}"
    except md.PackageNotFoundError:
        return PartCheck("browser tests: Chromium", False, f"{version} at {path}, but the "
                         "playwright package is missing", disables,
                         "run `make setup` (or `pip install -r requirements.txt`)")
    return PartCheck("browser tests: Chromium", True, f"{version or path}{playwright}", disables)


def check_cjk_font() -> PartCheck:
    """The lessons give each term in Chinese too; without a font that has Chinese glyphs a browser
    draws them as empty boxes. fontconfig (Linux) is asked; macOS ships such fonts."""
    name = "a font for the Chinese terms"
    disables = "the Chinese terms (术语) show as empty boxes in JupyterLab, the app and the book"
    fix = "install one, e.g. Debian's fonts-noto-cjk (`apt-get install fonts-noto-cjk`)"
    if platform.system() == "Darwin":
        return PartCheck(name, True, "macOS ships fonts with Chinese glyphs", disables)
    try:
        out = subprocess.run(["fc-list", ":lang=zh", "family"], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return PartCheck(name, False, "cannot tell: fc-list (fontconfig) is not available",
                         disables, fix)
    families = sorted({f.strip() for line in out.splitlines() for f in line.split(",")
                       if f.strip()})
    if not families:
        return PartCheck(name, False, "fontconfig knows no font with Chinese glyphs", disables,
                         fix)
    first = min(families, key=lambda f: ("SC" not in f, f))      # simplified Chinese first
    more = f" and {len(families) - 1} more" if len(families) > 1 else ""
    return PartCheck(name, True, f"{first}{more}", disables)


def optional_checks(requirements: Path = REQUIREMENTS) -> list[PartCheck]:
    """Every optional part, the imports tried side by side (each in its own interpreter)."""
    from concurrent.futures import ThreadPoolExecutor

    pinned = pins(requirements)
    with ThreadPoolExecutor(max_workers=len(PARTS)) as pool:
        parts = list(pool.map(lambda p: check_part(p, pinned), PARTS))
    return [*parts, check_chromium(), check_cjk_font()]


def main(argv: list[str] | None = None) -> int:

    from .config import OneSentenceParser, given_path
    parser = OneSentenceParser(prog="python -m bughunt doctor", description=__doc__)
    parser.add_argument("--dir", type=given_path, default=Path.cwd(),
                        help="the folder the lab will write in (default: here)")
    args = parser.parse_args(argv)
    if not args.dir.is_dir():
        parser.error(f"--dir {args.dir}: not a directory")
    checks = run_checks(args.dir)
    extras = optional_checks()
    width = max(len(c.name) for c in [*checks, *extras])
    for c in checks:
        print(f"{'ok ' if c.ok else 'BAD'}  {c.name:<{width}}  {c.detail}")
        if not c.ok and c.fix:
            print(f"{'':5}{'':<{width}}  what to do: {c.fix}")
    bad = [c for c in checks if not c.ok]
    print(f"\nfsync timings in this folder are measured on: {describe_storage(args.dir)}")
    print("\noptional parts (the core lab runs without them):")
    for c in extras:
        print(f"{'ok ' if c.ok else '---'}  {c.name:<{width}}  {c.detail}")
        if not c.ok:
            print(f"{'':5}{'':<{width}}  without it: {c.disables}")
            print(f"{'':5}{'':<{width}}  what to do: {c.fix}")
    missing = sum(not c.ok for c in extras)
    print(f"\n{len(checks) - len(bad)} of {len(checks)} checks passed"
          + (f"; {missing} optional part{'s' * (missing != 1)} missing (above)" if missing else
             "; every optional part is here"))
    return 1 if bad else 0
