"""The crash states of a traced run, and what PROGRAM had promised at each of them.

- **kill -9** after every operation: every byte and name the program had handed the kernel
  survives (`powerloss.kill_states`);
- **power cut** after every operation, under the lab's model (`powerloss.crash_states`: per file a
  prefix of the writes since its last fsync, the last possibly torn), with the strict directory
  model and the ext4-like one (any fsync also commits earlier name changes); seeded samples per
  cut, and at most `cap` distinct states per model, drawn with the same seed.

Files matching `external` belong to another system that keeps its own durability (a tracker
database, a provider's bill): every state holds them as a kill at that moment leaves them.

The oracle at a cut is what the program had printed before it: `BEGIN <key> <version>` (this
version is on its way to the disk) and `ACK <key> <version>` (it is durable, as far as the program
promises), or the lines of `--ack-lines FILE` (the trace parser turns both into journal marks).
"""

from __future__ import annotations

import fnmatch
import random
from dataclasses import dataclass, field

from ..instruments.journal import Op
from ..powerloss import CrashState, crash_states, kill_states

MODELS = ("kill", "strict", "ext4")


@dataclass(frozen=True)
class Oracle:
    """What the program had begun and acknowledged when the cut fell."""

    begun: tuple[tuple[str, tuple[str, ...]], ...] = ()     # key -> versions, in order
    acked: tuple[tuple[str, str], ...] = ()                 # key -> its last acknowledged version
    last_ack: tuple[int, str] | None = None                 # (operation index, "ACK key version")

    def versions(self, key: str) -> tuple[str, ...]:
        return dict(self.begun).get(key, ())


def oracles(ops: list[dict]) -> list[Oracle]:
    """The oracle at every cut 0..len(ops) (cut c: the first c operations were issued)."""
    begun: dict[str, list[str]] = {}
    acked: dict[str, str] = {}
    last = None
    current = Oracle()
    out = [current]
    for i, op in enumerate(ops):
        if op["op"] == Op.MARK and op.get("what") in ("begin", "ack"):
            key, version = str(op["key"]), str(op["version"])
            versions = begun.setdefault(key, [])
            if not versions or versions[-1] != version:
                versions.append(version)
            if op["what"] == "ack":
                acked[key] = version
                last = (i, f"ACK {key} {version}")
            current = Oracle(tuple((k, tuple(v)) for k, v in begun.items()),
                             tuple(acked.items()), last)
        out.append(current)
    return out


@dataclass
class State:
    model: str                  # "kill", "strict" or "ext4"
    cut: int
    files: dict[str, bytes]
    dirs: tuple[str, ...]
    choice: str
    lost: tuple[int, ...] = ()
    torn: tuple[int, ...] = ()
    digest: str = ""
    oracle: Oracle = field(default_factory=Oracle)


def _external(path: str, globs) -> bool:
    return any(fnmatch.fnmatch(path, g) for g in globs)


def _state(model: str, s: CrashState, oracle: Oracle) -> State:
    return State(model, s.cut, s.files, s.dirs, s.choice, s.lost, s.torn, s.digest(), oracle)


def build_states(ops: list[dict], *, before: dict[str, bytes], dirs=(), external=(),
          samples_per_cut: int = 4, cap: int = 200, seed: int = 0) -> dict[str, list[State]]:
    """Every distinct (disk, oracle) state per model; power-cut ones sampled and capped."""
    marks = oracles(ops)
    out: dict[str, list[State]] = {m: [] for m in MODELS}
    kill_external: list[dict[str, bytes]] = []
    seen: set = set()
    for s in kill_states(ops, before=before, dirs=dirs):
        kill_external.append({p: d for p, d in s.files.items() if _external(p, external)})
        state = _state("kill", s, marks[s.cut])
        if (state.digest, state.oracle) not in seen:
            seen.add((state.digest, state.oracle))
            out["kill"].append(state)
    rng = random.Random(seed)
    for model in ("strict", "ext4"):
        seen = set()
        found = []
        for s in crash_states(ops, samples_per_cut=samples_per_cut, seed=seed, dedupe=False,
                              dir_model=model, before=before, dirs=dirs):
            if external:
                # Another system's files, as the kill at this moment leaves them.
                s.files = {p: d for p, d in s.files.items() if not _external(p, external)}
                s.files.update(kill_external[s.cut])
                s.lost = tuple(i for i in s.lost if not _external(_path(ops[i]), external))
                s.torn = tuple(i for i in s.torn if not _external(_path(ops[i]), external))
            state = _state(model, s, marks[s.cut])
            if (state.digest, state.oracle) not in seen:
                seen.add((state.digest, state.oracle))
                found.append(state)
        if len(found) > cap:
            found = sorted(rng.sample(found, cap), key=lambda st: st.cut)
        out[model] = found
    return out


def _path(op: dict) -> str:
    return op.get("path") or op.get("dst") or ""
