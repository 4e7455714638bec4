"""What the explorer found, as records, a table, JSON and a figure.

One `StateViolation` per violating state and class: which model, after which operation, the key, what
had been acknowledged and what the reader found, the operations the state lost or tore (a power
cut) or the program had not finished since its last acknowledgement (a kill -9), and that last
acknowledgement.
"""

from __future__ import annotations

import base64
from collections import Counter
from dataclasses import asdict, dataclass, field

from ..instruments.journal import Op
from .check import CLASSES

MODEL_NAMES = {"kill": "kill -9", "strict": "power cut (strict directories)",
               "ext4": "power cut (ext4-like directories)"}


def describe(op: dict) -> str:
    """One operation in words (the conformance suite's words, plus the oracle's marks)."""
    from ..conformance import describe_op

    if op["op"] == Op.MARK and op.get("what") in ("begin", "ack"):
        return f"{op['what'].upper()} {op['key']} {op['version']}"
    if op["op"] == Op.TRUNC and not op.get("size"):
        return f"truncate {op['path']} to 0 bytes"
    if op["op"] == Op.WRITE:
        n = len(base64.b64decode(op["data"]))
        return f"write of {n} byte{'s' if n != 1 else ''} to {op['path']} at offset {op['offset']}"
    return describe_op(op)


@dataclass
class StateViolation:
    cls: str                      # lost, phantom, unreadable, hang
    model: str                    # kill, strict, ext4
    cut: int                      # operations issued before the crash
    after: str                    # the last of them, in words
    key: str | None
    acknowledged: str | None
    recovered: str | None
    detail: str
    last_ack: str | None          # "ACK key version (operation N)"
    lost_ops: list[str] = field(default_factory=list)       # power cut: not on the disk
    torn_ops: list[str] = field(default_factory=list)       # power cut: only half on the disk
    unfinished_ops: list[str] = field(default_factory=list)  # since the last acknowledgement
    choice: str = ""

    def __str__(self) -> str:
        return f"{self.cls} ({MODEL_NAMES[self.model]}, after operation {self.cut}: " \
               f"{self.after}): {self.detail}"


@dataclass
class ModelResult:
    states: int = 0
    violations: int = 0                       # violating states
    by_class: Counter = field(default_factory=Counter)

    def to_json(self) -> dict:
        return {"states": self.states, "violations": self.violations,
                **{c: self.by_class[c] for c in CLASSES}}


@dataclass
class Exploration:
    """The explorer's answer for one PROGRAM. `trace_complete`: the trace showed every operation
    PROGRAM made below DIR (the self-check passed, nothing strace cannot describe), so there is a
    verdict on PROGRAM at all; `verdict` is that verdict."""

    program: list[str]
    trace_complete: bool
    why_not: list[str]
    ops: list[dict] = field(default_factory=list)
    kill: ModelResult = field(default_factory=ModelResult)
    power: dict[str, ModelResult] = field(
        default_factory=lambda: {"strict": ModelResult(), "ext4": ModelResult()})
    violations: list[StateViolation] = field(default_factory=list)
    exit_status: int | None = None
    trace_seconds: float = 0.0
    checks: int = 0
    check_seconds: float = 0.0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.trace_complete and not self.violations

    @property
    def verdict(self) -> str:
        """On PROGRAM: "no violation" (every state checked kept what it acknowledged),
        "violations" (some state lost, invented or could not read it, or its reader hung), or
        "no verdict" (the trace was not complete: `why_not` says why)."""
        if not self.trace_complete:
            return "no verdict"
        return "violations" if self.violations else "no violation"

    def to_json(self) -> dict:
        return {"verdict": self.verdict, "violating_states": len(self.violations),
                "trace_complete": self.trace_complete, "why_not": list(self.why_not),
                "kill": {"states": self.kill.states, "violations": self.kill.violations},
                "power": {m: {"states": r.states, "violations": r.violations}
                          for m, r in self.power.items()},
                "violations": [asdict(v) for v in self.violations]}

    def results(self) -> dict[str, ModelResult]:
        return {"kill": self.kill, **self.power}

    def table(self):
        """One row per crash model: states checked and violating states by class."""
        import pandas as pd

        rows = []
        for model, r in self.results().items():
            rows.append({"model": MODEL_NAMES[model], "states": r.states,
                         **{c: r.by_class[c] for c in CLASSES},
                         "violating states": r.violations})
        table = pd.DataFrame(rows).set_index("model")
        # A state may break several classes at once (lost and phantom), never fewer than one.
        assert (table[list(CLASSES)].sum(axis=1) >= table["violating states"]).all()
        assert (table["violating states"] <= table["states"]).all()
        return table

    def violations_table(self, first: int | None = None):
        import pandas as pd

        rows = [{"class": v.cls, "model": MODEL_NAMES[v.model], "after operation": v.cut,
                 "the crash fell after": v.after, "key": v.key, "acknowledged": v.acknowledged,
                 "recovered": v.recovered, "last acknowledgement": v.last_ack,
                 "what the state lost": "; ".join(
                     [f"lost: {o}" for o in v.lost_ops] + [f"torn: {o}" for o in v.torn_ops]
                     + [f"unfinished: {o}" for o in v.unfinished_ops]) or "nothing"}
                for v in self.violations[:first]]
        return pd.DataFrame(rows)

    def summary(self) -> str:
        if not self.trace_complete:
            return "no verdict: " + "; ".join(self.why_not)
        parts = []
        for model, r in self.results().items():
            classes = ", ".join(f"{r.by_class[c]} {c}" for c in CLASSES if r.by_class[c])
            parts.append(f"{MODEL_NAMES[model]}: {r.states} states, "
                         + (f"{r.violations} violating ({classes})" if r.violations
                            else "no violation"))
        return "; ".join(parts)

    def figure(self, *, title: str | None = None):
        """The operations on a timeline, one lane per file (and one for the acknowledgements);
        the cut points where a state violates, marked per crash model."""
        import matplotlib.pyplot as plt

        files = []
        for op in self.ops:
            path = op.get("path") or op.get("dst")
            if op["op"] not in (Op.MARK, Op.UNRELIABLE) and path and path not in files:
                files.append(path)
        lanes = files[:12] + (["(other files)"] if len(files) > 12 else []) + ["acknowledged"]
        style = {Op.WRITE: ("o", "#0072B2", "write"), Op.TRUNC: ("v", "#D55E00", "truncate"),
                 Op.FSYNC: ("s", "#009E73", "fsync"), Op.FSYNC_DIR: ("s", "#009E73", "fsync"),
                 Op.RENAME: ("D", "#CC79A7", "rename"), Op.CREATE: ("+", "#555555", "create"),
                 Op.UNLINK: ("x", "#555555", "unlink / rmdir"),
                 Op.RMDIR: ("x", "#555555", "unlink / rmdir"),
                 Op.MKDIR: ("+", "#555555", "create")}
        fig, ax = plt.subplots(figsize=(10, 1.2 + 0.45 * (len(lanes) + 3)))
        shown = set()
        for i, op in enumerate(self.ops, 1):
            kind = op["op"]
            if kind == Op.MARK:
                if op.get("what") == "ack":
                    ax.plot(i, len(lanes) - 1, "^", color="#E69F00",
                            label=None if "ack" in shown else "ACK")
                    shown.add("ack")
                continue
            if kind not in style:
                continue
            path = op.get("path") or op.get("dst") or ""
            lane = files.index(path) if path in files[:12] else (
                len(lanes) - 2 if path in files else 0)
            marker, colour, label = style[kind]
            ax.plot(i, lane, marker, color=colour, markersize=6,
                    label=None if label in shown else label)
            shown.add(label)
        # One lane per crash model above: a bar between the operations where a cut violates.
        for j, model in enumerate(("ext4", "strict", "kill")):
            lane = len(lanes) + j
            marked = sorted({v.cut for v in self.violations if v.model == model})
            ax.plot([c + 0.5 for c in marked], [lane] * len(marked), "|", color="#D55E00",
                    markersize=14, markeredgewidth=2,
                    label=None if "cut" in shown or not marked else "a violating cut")
            shown.update(["cut"] if marked else [])
        lanes = lanes + [f"violates: {MODEL_NAMES[m]}" for m in ("ext4", "strict", "kill")]
        ax.set_yticks(range(len(lanes)), lanes)
        ax.set_ylim(-0.7, len(lanes) - 0.3)
        ax.set_xlabel("operation (in the order strace saw them)")
        ax.set_ylabel("file, or crash model")
        ax.set_title(title or f"{' '.join(self.program)[:60]}: "
                     f"{len(self.violations)} violating states")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
        fig.tight_layout()
        return fig
