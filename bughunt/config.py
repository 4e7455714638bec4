"""One run's configuration: which checkpoint design the worker uses.

A run directory belongs to one configuration. The first run writes it to `config.json`; every resume
compares and refuses a different one, because replaying a log written under one design with the
rules of another would give a state that neither design promises.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from .diskio import read_bytes

STORES = ("none", "snapshot", "log")
GRANULARITIES = ("page", "op")
WRITE_MODES = ("atomic", "torn", "no-newline")
FSYNC_POLICIES = ("never", "always")
PENDING_POLICIES = ("redo", "abort")
CONFIG_FORMAT = 1
CONFIG_FILE = "config.json"


MAX_PAGES = 1_000_000          # a bound, so that a typo cannot ask for a billion pages
def is_store_file(spec: str) -> bool:
    """A learner's store: `path/to/module.py:ClassName`, the class any valid Python identifier
    (`Störe` too: Python's own rule, `str.isidentifier`)."""
    import keyword

    if not isinstance(spec, str):
        return False
    file, sep, name = spec.rpartition(":")
    return bool(sep) and len(file) > 3 and file.endswith(".py") and name.isidentifier() and \
        not keyword.iskeyword(name)


class ConfigError(ValueError):
    """A configuration that cannot run. `field` names the RunConfig field; `str()` speaks in the
    fields' words (for Python callers), `as_flag()` in the command line's (`--snapshot-every`)."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason.replace('`', '')}")
        self.field, self.reason = field, reason

    def as_flag(self) -> str:
        return f"{flag(self.field)}: {reason_as_flags(self.reason)}"


#: The most of a value given by a user (a flag, an answer) a sentence echoes.
ECHO_CHARS = 60


def quoted(value: object, limit: int = ECHO_CHARS) -> str:
    """`value` as a refusal echoes it: its repr, cut to `limit` characters with the length said,
    so that a 100,000-line value is named, never printed whole."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = len(value) if isinstance(value, (str, bytes)) else len(text)
    return f"{text[:limit]}... ({size:,} characters)"


#: The most of an exception's message, from a learner's code, a verdict echoes.
MESSAGE_CHARS = 300


def shown(text: object, limit: int = ECHO_CHARS) -> str:
    """Text from a learner's code (a store's `name`, an exception's message) as a verdict shows
    it: as it is when it is one printable line of at most `limit` characters, else `quoted`
    (its repr, cut, the length said): a 100,000-line `name` is one line of a sentence."""
    text = str(text)
    if len(text) <= limit and text.isprintable():
        return text
    return quoted(text, limit)


def said(e: BaseException) -> str:
    """An exception from a learner's code as a verdict names it: "Type: message" (the message
    `shown`, at most MESSAGE_CHARS of it), or only the type when the message is empty."""
    text = str(e)
    return f"{type(e).__name__}: {shown(text, MESSAGE_CHARS)}" if text else type(e).__name__


def reason_as_flags(text: str) -> str:
    """A reason that mentions other fields (`store`), said with their flags (`--store`)."""
    names = "|".join(f.name for f in dataclasses.fields(RunConfig))
    return re.sub(rf"`({names})`", lambda m: flag(m.group(1)), text)


# --- parsers for the command line, named in each setting -----------------------------------

def _store(value: str) -> str:
    if value in STORES or is_store_file(value):
        return value
    raise argparse.ArgumentTypeError(f"expected one of {', '.join(STORES)}, or FILE.py:Class, "
                                     f"got {value!r}")


def _on_off(value: str) -> bool:
    if value not in ("on", "off"):
        raise argparse.ArgumentTypeError(f"expected on or off, got {value!r}")
    return value == "on"


def _whole(value: str, low: int) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
    if n < low:
        raise argparse.ArgumentTypeError(f"expected {low} or more, got {n}")
    return n


def _count(value: str) -> int:
    return _whole(value, 0)


def _positive(value: str) -> int:
    return _whole(value, 1)


def given_path(value: str) -> Path:
    """A path flag's value; an empty one is refused (`Path("")` is the current directory, which
    nobody asked for)."""
    if not value:
        raise argparse.ArgumentTypeError("expected a path, got an empty string")
    return Path(value)


def _latency(value: str) -> float:
    """Milliseconds: a finite number from 0 to 60,000."""
    try:
        ms = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected milliseconds, got {value!r}") from None
    if not 0 <= ms <= 60_000:          # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"expected 0 to 60000 milliseconds, got {value!r}")
    return ms


def setting(default, help: str, *, label: str, choices: tuple | None = None, parse=None,
            metavar: str | None = None, hidden: bool = False):
    """A field of RunConfig with what the command line and the panels need to offer it: the one
    place a setting is described (`--flag`, its help and parser, the panel's label)."""
    return field(default=default, metadata={"help": help, "label": label, "choices": choices,
                                            "parse": parse, "metavar": metavar,
                                            "hidden": hidden})


@dataclass(frozen=True)
class RunConfig:
    store: str = setting(
        "log", "where progress is kept: nothing, a snapshot file, an event log, or your own "
        "store class (see bughunt/stores/contract.py)", label="store",
        metavar="{none,snapshot,log,FILE.py:Class}", parse=_store)
    snapshot_every: int = setting(
        0, "log store: also write a snapshot every N pages (0 = pure log)",
        label="snapshot every", parse=_count, metavar="N")
    granularity: str = setting(
        "page", "snapshot store: checkpoint after every page, or after every operation",
        label="granularity", choices=GRANULARITIES)
    write_mode: str = setting(
        "atomic", "how a checkpoint reaches the file: atomic, torn at the crash, or torn without "
        "the newline repair", label="write mode", choices=WRITE_MODES)
    fsync: str = setting(
        "never", "fsync after each checkpoint write (flush to the kernel always happens)",
        label="fsync", choices=FSYNC_POLICIES)
    idempotency_key: bool = setting(
        True, "file reports with a deterministic key the tracker deduplicates",
        label="idempotency key", parse=_on_off, metavar="on|off")
    intent: bool = setting(True, "record an intent before filing a report", label="intent",
                           parse=_on_off, metavar="on|off")
    pending: str = setting(
        "redo", "what recovery does with a pending intent: redo it, or mark it aborted",
        label="pending intent", choices=PENDING_POLICIES)
    pages: int = setting(12, "pages on the site (12 in the source text)", label="pages",
                         parse=_positive, metavar="N")
    task_id: str = setting("bughunt", "the task's name (part of every idempotency key)",
                           label="task id", hidden=True)

    def __post_init__(self):
        def one_of(field, choices):
            value = getattr(self, field)
            return (field, value in choices and isinstance(value, str),
                    f"must be one of {', '.join(choices)}, not {value!r}")

        def whole(field, low, high):
            value = getattr(self, field)       # bool is an int in Python: refuse it explicitly
            ok = type(value) is int and low <= value <= high
            return field, ok, f"must be a whole number from {low} to {high}, not {value!r}"

        custom = isinstance(self.store, str) and is_store_file(self.store)
        checks = [
            ("store", self.store in STORES or custom,
             f"must be one of {', '.join(STORES)}, or FILE.py:Class (your own store), not "
             f"{self.store!r}"),
            one_of("granularity", GRANULARITIES),
            one_of("write_mode", WRITE_MODES), one_of("fsync", FSYNC_POLICIES),
            one_of("pending", PENDING_POLICIES),
            whole("pages", 1, MAX_PAGES), whole("snapshot_every", 0, MAX_PAGES),
            ("idempotency_key", type(self.idempotency_key) is bool,
             f"must be True or False (on or off), not {self.idempotency_key!r}"),
            ("intent", type(self.intent) is bool,
             f"must be True or False (on or off), not {self.intent!r}"),
            ("task_id", isinstance(self.task_id, str) and 0 < len(self.task_id) <= 100
             and self.task_id.isprintable(), f"must be a short printable name, not "
                                             f"{self.task_id!r}"),
            ("snapshot_every", self.snapshot_every == 0 or self.store == "log" or custom,
             "applies only when `store` is log (the snapshot store snapshots every page)"),
            ("granularity", self.granularity == "page" or self.store == "snapshot",
             "op applies only when `store` is snapshot"),
        ]
        for name, ok, reason in checks:
            if not ok:
                raise ConfigError(name, reason)

    def to_json(self) -> dict:
        return {"format": CONFIG_FORMAT, **dataclasses.asdict(self)}

    @classmethod
    def from_json(cls, data: dict) -> "RunConfig":
        if not isinstance(data, dict):
            raise ConfigError("format", "a run configuration is a JSON object")
        data = dict(data)
        if data.pop("format", None) != CONFIG_FORMAT:
            raise ConfigError("format", f"unknown (this lab writes format {CONFIG_FORMAT})")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ConfigError("format", f"unknown keys {', '.join(sorted(unknown))}")
        return cls(**data)

    def differences(self, other: "RunConfig") -> list[str]:
        """Human-readable `name: ours vs theirs` for every field that differs."""
        a, b = dataclasses.asdict(self), dataclasses.asdict(other)
        return [f"{k}: {a[k]!r} vs {b[k]!r}" for k in a if a[k] != b[k]]

    def replace(self, **changes) -> "RunConfig":
        return dataclasses.replace(self, **changes)

    def to_args(self) -> list[str]:
        """The worker's command-line flags for this configuration."""
        onoff = {True: "on", False: "off"}
        args = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            args += [flag(f.name), onoff[value] if isinstance(value, bool) else str(value)]
        return args


class OneSentenceParser(argparse.ArgumentParser):
    """An argparse parser that refuses a bad flag or value as every command of the lab refuses
    (the README's exit codes): one sentence naming the flag on stderr, exit 2, no usage block
    (`--help` prints that)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message} (see --help)\n")


def flag(name: str) -> str:
    """The command-line flag of a RunConfig field: `snapshot_every` -> `--snapshot-every`."""
    return "--" + name.replace("_", "-")


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """The configuration flags, shared by `run`, `points`, `sweep` and `kill-random`: one per
    field of RunConfig, as its `setting` describes it."""
    g = parser.add_argument_group("checkpoint design")
    for f in dataclasses.fields(RunConfig):
        m = f.metadata
        options = {"default": f.default, "help": argparse.SUPPRESS if m["hidden"] else m["help"]}
        if m["choices"]:
            options["choices"] = m["choices"]
        if m["parse"]:
            options["type"] = m["parse"]
        if m["metavar"]:
            options["metavar"] = m["metavar"]
        g.add_argument(flag(f.name), dest=f.name, **options)


def config_from_args(args: argparse.Namespace) -> RunConfig:
    return RunConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(RunConfig)})


def dumps(config: RunConfig) -> bytes:
    return (json.dumps(config.to_json(), sort_keys=True, indent=1) + "\n").encode()


def read_config(run_dir: Path) -> RunConfig:
    """The configuration a run directory belongs to. Raises ConfigError naming the file."""
    path = Path(run_dir) / CONFIG_FILE
    try:
        return RunConfig.from_json(json.loads(read_bytes(path).decode("utf-8")))
    except FileNotFoundError:
        raise ConfigFileError(f"{path}: not found (is {run_dir} a BugHunt run directory?)") \
            from None
    except IsADirectoryError:
        raise ConfigFileError(f"{path}: is a directory, not a run configuration") from None
    except OSError as e:
        raise ConfigFileError(f"{path}: cannot be read ({e.strerror})") from None
    except (ValueError, TypeError) as e:     # bad JSON, bad UTF-8, a ConfigError
        raise ConfigFileError(f"{path}: not a valid run configuration ({e})") from None
    except RecursionError:
        raise ConfigFileError(f"{path}: not a valid run configuration (JSON nested deeper than "
                              "Python's parser goes)") from None


class ConfigFileError(ValueError):
    """A run directory's config.json is missing or cannot be trusted; the message names it."""
