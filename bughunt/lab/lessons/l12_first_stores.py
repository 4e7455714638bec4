"""Lesson 12, the stores you would reach for first: `json.dump`, TinyDB, `shelve` on `dbm.dumb` and
`sqlite3` (WAL, synchronous=FULL), each saving a small agent checkpoint five times, explored by
`python -m bughunt explore` (strace: every kill -9 state, a capped sample of power-cut states);
then each fix, explored the same way, and the skeleton of the learner's own agent.

The explorations run once per kernel (the lab's results cache); the claims, the tables and the
exercises read the same runs. Where strace cannot run (not Linux, strace missing, ptrace denied)
the lesson reads the results stored from a Linux run (`l12_explored.json`, written by
`python -m bughunt.lab.lessons.l12_first_stores --store`; a test keeps it equal to a live run)
and says why.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from ...explore import why_not_traceable, workloads as W
from ...explore.check import CLASSES
from ...explore.report import MODEL_NAMES, Exploration, ModelResult, StateViolation
from .. import results
from ..claims import Claims, Invariants
from ..judges import Measured, assess, defined_in, exercise, statement
from ..registry import Lesson
from ..views import Table, summary_table

#: The four stores, and the fix beside each that needs one (SQLite in WAL + FULL needs none).
STORES = ("json-dump", "tinydb", "shelve", "sqlite-wal-full")
FIXES = {"json-dump": "json-atomic", "tinydb": "tinydb-atomic", "shelve": "pickle-atomic"}
#: What each is, in the tables.
NAMES = {"json-dump": "json.dump, file opened with 'w'", "tinydb": "TinyDB (JSONStorage)",
         "shelve": "shelve on dbm.dumb", "sqlite-wal-full": "sqlite3, WAL, synchronous=FULL",
         "sqlite-wal-normal": "sqlite3, WAL, synchronous=NORMAL",
         "json-atomic": "json: temp file, fsync, rename, dir fsync",
         "tinydb-atomic": "TinyDB on an atomic storage",
         "pickle-atomic": "a pickled dict, written atomically",
         "skeleton": "your agent's skeleton", "skeleton-fixed": "the skeleton, fixed",
         "skeleton-fsync": "the skeleton with fsync after the dump"}
#: The explorer's settings here: every kill -9 state; power cuts sampled (one random mix per
#: operation besides the two extremes), at most 20 states per directory model, seed 0.
SETTINGS = {"samples_per_cut": 1, "max_states": 20, "seed": 0}
STORED = Path(__file__).with_name("l12_explored.json")
MODELS = ("kill", "strict", "ext4")


# --- can strace run here? ---------------------------------------------------------------------------

@results.memoized
def why_not_live() -> str | None:
    """None when strace can trace a program here; else the sentence saying why not."""
    return why_not_traceable()


def where_from() -> str:
    """Where the results below come from: this machine, just now, or the stored Linux run."""
    why = why_not_live()
    if why is None:
        return ("Explored live on this machine, just now: every program below ran under strace, "
                "and its reader ran on a copy of every crash state.")
    return (f"Not explored here: {why}. The tables below are the results stored from a run of "
            f"this lesson on Linux ({STORED.name}), so they are not this machine's; the "
            "exercises that explore your own code need Linux with strace.")


# --- the explorations -------------------------------------------------------------------------------

_PATH = re.compile(r"(?<![\w.])/(?:[^\s'\"/]+/)+")


def _record(name: str, r: Exploration) -> dict:
    """An exploration as plain data, with no path of this machine in it."""
    def clean(v):
        return _PATH.sub("", v) if isinstance(v, str) else v

    from ...explore.report import describe

    keep = ("op", "path", "src", "dst", "what", "key", "version")
    ops = [{**{k: op[k] for k in keep if k in op}, "text": describe(op)} for op in r.ops]
    return {"name": name, "trace_complete": r.trace_complete,
            "why_not": [clean(w) for w in r.why_not],
            "ops": ops,
            "results": {m: {"states": x.states, "violations": x.violations,
                            "by_class": {c: x.by_class[c] for c in CLASSES}}
                        for m, x in r.results().items()},
            "violations": [{k: (clean(v) if isinstance(v, str) else v)
                            for k, v in asdict(x).items()} for x in r.violations]}


def as_exploration(rec: dict) -> Exploration:
    """A stored record back as the explorer's own result (for its figure)."""
    res = {m: ModelResult(x["states"], x["violations"], Counter(x["by_class"]))
           for m, x in rec["results"].items()}
    return Exploration([rec["name"]], rec["trace_complete"], list(rec["why_not"]), ops=rec["ops"],
                       kill=res["kill"], power={"strict": res["strict"], "ext4": res["ext4"]},
                       violations=[StateViolation(**v) for v in rec["violations"]])


def explore_live(name: str) -> dict:
    """Explore workload `name` (or the skeleton) now, in a directory of its own, removed after."""
    with tempfile.TemporaryDirectory(prefix="bughunt-l12-") as tmp:
        if name in W.WORKLOADS:
            return _record(name, W.explore_workload(name, Path(tmp) / "run", **SETTINGS))
        return _record(name, _explore_source(SKELETONS[name], Path(tmp)))


def _explore_source(source: str, tmp: Path, timeout: float = 60.0) -> Exploration:
    """Explore a checkpointing script given as source (`python SCRIPT run DIR | check DIR`)."""
    from ...explore import explore

    script = tmp / "my_agent.py"
    script.write_text(source, encoding="utf-8")
    run = tmp / "state"
    return explore([sys.executable, str(script), "run", str(run)], run,
                   check=f"{sys.executable} {script} check {{state}}",
                   program_timeout=timeout, **SETTINGS)


def stored() -> dict:
    with open(STORED, encoding="utf-8") as f:
        return json.load(f)


@results.memoized
def explored(name: str) -> dict:
    """The exploration of `name`: live where strace runs, else the stored one."""
    if why_not_live() is None:
        return explore_live(name)
    return stored()[name]


# --- the skeleton of your own agent, and its variants -------------------------------------------------

SKELETON = W.SKELETON
#: Its length as `show_code` shows it (dedented, blank edges stripped): the title counts it.
SKELETON_LINES = len(SKELETON.strip("\n").splitlines())
#: The skeleton with its save made atomic: temp file, fsync, rename, fsync of the directory.
SKELETON_FIXED = SKELETON.replace(
    '''def save(d, step):                        # your checkpoint code: here, the plain json.dump
    with open(os.path.join(d, "checkpoint.json"), "w") as f: json.dump({"step": step}, f)
''',
    '''def save(d, step):                        # the fix: temp file, fsync, rename, fsync the dir
    tmp = os.path.join(d, "checkpoint.json.tmp")
    with open(tmp, "w") as f:
        json.dump({"step": step}, f); f.flush(); os.fsync(f.fileno())
    os.replace(tmp, os.path.join(d, "checkpoint.json"))
    fd = os.open(d, os.O_RDONLY); os.fsync(fd); os.close(fd)
''')
#: Exercise 12.3's variant: fsync after the dump, still in place.
SKELETON_FSYNC = SKELETON.replace(
    'json.dump({"step": step}, f)\n',
    'json.dump({"step": step}, f); f.flush(); os.fsync(f.fileno())\n')
SKELETONS = {"skeleton": SKELETON, "skeleton-fixed": SKELETON_FIXED,
             "skeleton-fsync": SKELETON_FSYNC}
assert SKELETON_FIXED != SKELETON and SKELETON_FSYNC != SKELETON


def explore_your_agent(source: str, timeout: float = 60.0) -> dict:
    """Explore your own checkpointing script (its source): `python it run DIR` must save with ACK
    lines, `python it check DIR` print what it recovers. Refuses, with the reason, where strace
    cannot run. The script runs in a temporary directory of its own, removed after."""
    from ...explore import ExploreRefused

    why = why_not_live()
    if why is not None:
        raise ExploreRefused(f"cannot explore your code here: {why}")
    with tempfile.TemporaryDirectory(prefix="bughunt-l12-") as tmp:
        return _record("yours", _explore_source(source, Path(tmp), timeout))


# --- what a learner reads --------------------------------------------------------------------------

def _rows(names):
    for name in names:
        rec = explored(name)
        for m in MODELS:
            r = rec["results"][m]
            yield {"store": NAMES[name], "crash model": MODEL_NAMES[m],
                   "states": r["states"], "held": r["states"] - r["violations"],
                   "violating": r["violations"], **r["by_class"]}


#: Every table of states: held + violating = states; each class counts violating states.
STATE_TABLE = Invariants(total="states", parts=("held", "violating"),
                         within=("violating",) + CLASSES)


def _state_table(rows, name: str) -> Table:
    import pandas as pd

    return Table(pd.DataFrame(list(rows)).set_index(["store", "crash model"]), name, STATE_TABLE)


def stores_table(names=STORES, name: str = "the four stores, explored") -> Table:
    """Per store and crash model: the states checked, how many held, how many violate, by class
    (a state may break two classes at once, say lost and phantom)."""
    return _state_table(_rows(names), name)


def fixes_table() -> Table:
    """Each store that broke, and its fix, explored the same way."""
    return _state_table(_rows([n for s, f in FIXES.items() for n in (s, f)]),
                        "each store and its fix")


def violating_states(name: str, model: str = "kill", first: int | None = None) -> Table:
    """The violating states of one exploration under one crash model: where the cut fell, what
    had been acknowledged, what the reader recovered, what the program had not finished since its
    last acknowledgement, and (a power cut) what the cut lost or tore."""
    rows = []
    for v in explored(name)["violations"]:
        if v["model"] != model:
            continue
        row = {"after operation": v["cut"], "the crash fell after": v["after"],
               "class": v["cls"], "acknowledged": v["acknowledged"] or "-",
               "recovered": v["recovered"] or "-",
               "last acknowledgement": v["last_ack"] or "none yet",
               "not yet done since it": "; ".join(v["unfinished_ops"][:3]) or "-"}
        if model != "kill":          # a kill -9 loses nothing the kernel had
            row["lost or torn by the cut"] = "; ".join(
                [f"lost: {o}" for o in v["lost_ops"][:2]]
                + [f"torn: {o}" for o in v["torn_ops"][:1]]) or "-"
        rows.append(row)
    return summary_table(rows[:first], f"the violating states of {name} ({MODEL_NAMES[model]})",
                         Invariants(counts=("after operation",)))


def traced_operations(name: str):
    """The operations strace saw, numbered as the tables number them."""
    return "\n".join(f"{i:3d}  {op['text']}" for i, op in enumerate(explored(name)["ops"], 1))


def figure(name: str):
    """The explorer's figure: the operations on a timeline, the violating cuts marked."""
    rec = explored(name)
    n = sum(r["violations"] for r in rec["results"].values())
    return as_exploration(rec).figure(title=f"{NAMES[name]}: {n} violating states, "
                                            "by crash model")


def _summary(name: str) -> dict:
    r = explored(name)["results"]
    return {m: r[m] for m in MODELS}


def _afters(name: str, model: str = "kill") -> list[str]:
    return [v["after"] for v in explored(name)["violations"] if v["model"] == model]


# --- the sources each finding is explained from (facts from outside; public links) ---------------

TINYDB_COMMIT = "2283a2b556d5ef361b61bae8ed89c0ce0730d7c8"
TINYDB_WRITE = (f"https://github.com/msiemens/tinydb/blob/{TINYDB_COMMIT}/tinydb/storages.py"
                "#L142-L161")
TINYDB_REVERT = ("https://github.com/msiemens/tinydb/commit/"
                 "569447981a9f0d383c4be5556cd336c9ed7ef758")
CPYTHON = "https://github.com/python/cpython/blob/v3.11.7/Lib"
JSON_DUMP = f"{CPYTHON}/json/__init__.py#L120-L180"
OPEN_W = "https://docs.python.org/3/library/functions.html#open"
DUMB_COMMIT = f"{CPYTHON}/dbm/dumb.py#L110-L135"
DUMB_SETITEM = f"{CPYTHON}/dbm/dumb.py#L187-L222"
DUMB_UPDATE = f"{CPYTHON}/dbm/dumb.py#L93-L108"
SQLITE_SYNC = "https://www.sqlite.org/pragma.html#pragma_synchronous"
SQLITE_WAL = "https://www.sqlite.org/wal.html"


def library_line(path: str, text: str) -> int | None:
    """The line of the installed library's file `path` (below site-packages or the standard
    library) holding `text`: the tests check that the lines the lesson links still say it."""
    import importlib.util

    module = path.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
    spec = importlib.util.find_spec(module)
    with open(spec.origin, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if text in line:
                return n
    return None


# --- what the lesson says its run found (each sentence checked against that run) ------------------

CLAIMS = Claims(12)


@CLAIMS.claim("Under kill -9 alone, {breaking} of the four stores leave some state where an "
              "acknowledged checkpoint is lost or unreadable: {which}. {holding} loses nothing.")
def three_of_four_break_at_a_kill():
    breaking = [n for n in STORES if _summary(n)["kill"]["violations"]]
    holding = [n for n in STORES if n not in breaking]
    return (breaking == ["json-dump", "tinydb", "shelve"],
            {"breaking": len(breaking), "which": [NAMES[n] for n in breaking],
             "holding": ", ".join(NAMES[n] for n in holding) or "None"})


@CLAIMS.claim("**json.dump.** At {n} of {states} kill -9 states the reader finds no checkpoint it "
              "can parse, and every one of them falls right after `{first}` or a `truncate "
              "checkpoint.json to 0 bytes`: `open(path, \"w\")` empties the file before "
              "`json.dump` writes a byte.")
def json_dump_truncates_first():
    s, afters = _summary("json-dump")["kill"], _afters("json-dump")
    ok = (s["violations"] > 0 and s["by_class"]["unreadable"] == s["violations"]
          and all(a.startswith(("truncate checkpoint.json to 0", "create checkpoint.json"))
                  for a in afters))
    return ok, {"n": s["violations"], "states": s["states"], "first": afters[0] if afters else "-"}


@CLAIMS.claim("**TinyDB.** It fsyncs every write, yet at {n} of {states} kill -9 states its file "
              "cannot be read: each falls right after a write of the new JSON at offset 0 and "
              "before the truncate that follows it ({afters}).")
def tinydb_old_tail():
    rec = explored("tinydb")
    s, ok = _summary("tinydb")["kill"], True
    for v in (v for v in rec["violations"] if v["model"] == "kill"):
        nxt = [op["op"] for op in rec["ops"][v["cut"]:v["cut"] + 2]]
        ok &= (v["after"].startswith("write of") and v["after"].endswith("at offset 0")
               and nxt == ["fsync", "trunc"] and v["cls"] == "unreadable")
    return (ok and s["violations"] > 0, {"n": s["violations"], "states": s["states"],
            "afters": [f"after operation {v['cut']}" for v in rec["violations"]
                       if v["model"] == "kill"]})


@CLAIMS.claim("**shelve.** At {n} of {states} kill -9 states: {unreadable} unreadable, each right "
              "after `rename agent.shelf.dir -> agent.shelf.bak` (no index, and the reader does "
              "not look at the .bak), and {lost} lost, right after `create agent.shelf.dir` (an "
              "empty index: the key is gone).")
def shelve_index_window():
    s = _summary("shelve")["kill"]
    kills = [v for v in explored("shelve")["violations"] if v["model"] == "kill"]
    acked = [v for v in kills if v["last_ack"]]          # before the first ACK nothing was promised
    ok = bool(acked) and all(
        (v["cls"] == "unreadable" and v["after"] == "rename agent.shelf.dir -> agent.shelf.bak")
        or (v["cls"] == "lost" and v["after"] == "create agent.shelf.dir") for v in acked)
    return (ok, {"n": len(acked), "states": s["states"],
                 "unreadable": sum(v["cls"] == "unreadable" for v in acked),
                 "lost": sum(v["cls"] == "lost" for v in acked)},
            "some violating states after the first acknowledgement fall elsewhere: "
            + "; ".join(f"{v['cls']} after {v['after']}" for v in acked[:4]))


@CLAIMS.claim("Before the first acknowledgement, shelve also has {early} unreadable states (its "
              "files half created); nothing had been promised there, but the agent still cannot "
              "start again without help.")
def shelve_first_save():
    kills = [v for v in explored("shelve")["violations"] if v["model"] == "kill"]
    early = [v for v in kills if not v["last_ack"]]
    return bool(early) and all(v["cls"] == "unreadable" for v in early), {"early": len(early)}


@CLAIMS.claim("**Power cuts** add what kill -9 cannot show: json.dump, which never fsyncs, loses "
              "an acknowledged step outright at {json_lost} of {json_states} sampled states "
              "(strict directories), and TinyDB at {tiny_lost} of {tiny_states}: each of those lost "
              "the file's very name, since TinyDB never fsyncs the directory that holds it.")
def power_cuts_lose_more():
    j, t = _summary("json-dump")["strict"], _summary("tinydb")["strict"]
    tiny_lost = [v for v in explored("tinydb")["violations"]
                 if v["model"] == "strict" and v["cls"] == "lost"]
    ok = (j["by_class"]["lost"] > 0 and t["by_class"]["lost"] > 0
          and all(any(o.startswith("create agent.tinydb.json") for o in v["lost_ops"])
                  for v in tiny_lost))
    return ok, {"json_lost": j["by_class"]["lost"], "json_states": j["states"],
                "tiny_lost": t["by_class"]["lost"], "tiny_states": t["states"]}


@CLAIMS.claim("**sqlite3, WAL, synchronous=FULL** kept every acknowledged checkpoint: no violation "
              "at any of its {kill} kill -9 states, nor at {strict} and {ext4} sampled power-cut "
              "states, out of {ops} operations traced.")
def sqlite_full_holds():
    s = _summary("sqlite-wal-full")
    return (all(s[m]["violations"] == 0 and s[m]["states"] > 0 for m in MODELS),
            {"kill": s["kill"]["states"], "strict": s["strict"]["states"],
             "ext4": s["ext4"]["states"], "ops": len(explored("sqlite-wal-full")["ops"])})


@CLAIMS.claim("Each fix, explored the same way, held at every state: {rows}.")
def every_fix_holds():
    rows, ok = [], True
    for store, fix in FIXES.items():
        s = _summary(fix)
        ok &= all(s[m]["violations"] == 0 and s[m]["states"] > 0 for m in MODELS)
        ok &= explored(fix)["trace_complete"]
        rows.append(f"{NAMES[fix]}, {sum(s[m]['states'] for m in MODELS)} states, "
                    f"{sum(s[m]['violations'] for m in MODELS)} violating")
    return ok, {"rows": rows}


@CLAIMS.claim("The skeleton, explored as it stands, is unreadable at {n} of its {states} kill -9 "
              "states: {truncs} right after a `truncate checkpoint.json to 0 bytes` and {creates} "
              "right after `create checkpoint.json`. With its save made atomic: {fixed} "
              "violating of {fixed_states} states under the three models.")
def skeleton_and_its_fix():
    s, f = _summary("skeleton"), _summary("skeleton-fixed")
    afters = _afters("skeleton")
    truncs = sum(a.startswith("truncate checkpoint.json to 0") for a in afters)
    creates = sum(a == "create checkpoint.json" for a in afters)
    fixed = sum(f[m]["violations"] for m in MODELS)
    ok = s["kill"]["violations"] > 0 and fixed == 0 and truncs + creates == len(afters)
    return ok, {"n": s["kill"]["violations"], "states": s["kill"]["states"], "truncs": truncs,
                "creates": creates, "fixed": fixed,
                "fixed_states": sum(f[m]["states"] for m in MODELS)}


# --- exercises: predictions, asked before the run that answers them ------------------------------

@exercise("12.1", "Before the explorer runs: under kill -9 alone (no power cut), at how many of the "
          "four stores (json.dump, TinyDB, shelve, sqlite3 WAL FULL) does some state lose an "
          "acknowledged checkpoint or leave it unreadable? A number from 0 to 4.",
          "3. A kill -9 keeps everything the program had handed the kernel, so fsync does not "
          "matter here; what matters is whether some moment between two operations leaves the "
          "file in neither its old nor its new form. json.dump truncates, then writes; TinyDB "
          "writes over the old JSON, then truncates; dbm.dumb renames its index away, then writes "
          "a new one. SQLite's WAL appends the commit and the database keeps the old pages: every "
          "moment is the old or the new.")
def _ex_12_1(answer):
    n = sum(bool(_summary(s)["kill"]["violations"]) for s in STORES)
    return assess(answer, n, what="stores that break at some kill -9 state").reply(
        hint=" For each store, list its operations for one save and ask: is there a moment "
             "between two of them when the file holds neither the old checkpoint nor the new?")


@exercise("12.2", "sqlite3 in WAL mode, but with synchronous=NORMAL (the setting the SQLite docs "
          "recommend for WAL). Where does it lose an acknowledged checkpoint: \"neither\", "
          "\"kill -9 only\", \"power cut only\" or \"both\"?",
          "Power cut only. With synchronous=NORMAL the WAL is not fsynced at each commit, only "
          "at checkpoints (https://www.sqlite.org/pragma.html#pragma_synchronous: \"A "
          "transaction committed in WAL mode with synchronous=NORMAL might roll back following a "
          "power loss or system crash\"). A kill -9 leaves the WAL in the page cache, complete; a "
          "power cut may take the last commits with it. Durable against a kill is not durable "
          "against a power cut.")
def _ex_12_2(answer):
    s = _summary("sqlite-wal-normal")
    kill, power = s["kill"]["violations"] > 0, any(s[m]["violations"] for m in ("strict", "ext4"))
    truth = {(False, False): "neither", (True, False): "kill -9 only",
             (False, True): "power cut only", (True, True): "both"}[(kill, power)]
    said = (f" Explored: kill -9 {s['kill']['violations']} violating of {s['kill']['states']} "
            f"states; power cut (strict) {s['strict']['violations']} of {s['strict']['states']}.")
    return assess(answer, truth, what="where synchronous=NORMAL loses").reply(
        said, hint=" Which of the two crashes takes the page cache with it?")


@exercise("12.3", "The skeleton with one line added: `f.flush(); os.fsync(f.fileno())` right after "
          "the json.dump, still writing checkpoint.json in place with \"w\". At how many of its "
          "kill -9 states is the checkpoint unreadable?",
          "As many as without the fsync: 5, one per save (the first after the create, the others "
          "after each truncate). fsync decides what a power cut keeps; a kill -9 keeps every byte "
          "handed to the kernel anyway, and what it exposes is the moment between the truncate "
          "and the write, which an fsync after the write does not close. Only the temp file and "
          "rename do.")
def _ex_12_3(answer):
    s = _summary("skeleton-fsync")["kill"]
    return assess(answer, s["by_class"]["unreadable"], what="unreadable kill -9 states").reply(
        f" Explored: {s['by_class']['unreadable']} of {s['states']} kill -9 states.",
        hint=" Does the fsync come before or after the moment the file is empty?")


@exercise("12.4", "Your own agent: set `my_agent` to a checkpointing script (start from the "
          "skeleton, keep its ACK lines and its `check` branch) whose checkpoint survives every "
          "kill -9 and power-cut state the explorer builds. The check explores it.",
          "The skeleton with its save made atomic (first_stores.SKELETON_FIXED): write a temp "
          "file, flush and fsync it, os.replace it over checkpoint.json, then fsync the "
          "directory. The rename is atomic (the old name or the new, never neither); the fsyncs "
          "make the data and then the name durable before the ACK line is printed.")
def _ex_12_4(answer):
    from ...explore import ExploreRefused

    if not isinstance(answer, str) or "ACK" not in answer:
        return False, "Give the script's source as a string, with its ACK lines."
    try:
        rec = explore_your_agent(answer)
    except ExploreRefused as e:
        return False, f"{e}."
    if not rec["trace_complete"]:
        return False, "The explorer gave no verdict: " + "; ".join(rec["why_not"]) + "."
    s = rec["results"]
    said = "; ".join(f"{MODEL_NAMES[m]}: {s[m]['violations']} violating of {s[m]['states']}"
                     for m in MODELS)
    bad = next((v for v in rec["violations"]), None)
    where = (f" The first: {bad['cls']} after operation {bad['cut']} ({bad['after']}), "
             f"{MODEL_NAMES[bad['model']]}." if bad else "")
    ok = all(s[m]["violations"] == 0 for m in MODELS)
    return ok, f"Explored your agent: {said}.{where}" + (
        "" if ok else " Which operation leaves the file in neither its old nor its new form?")


# --- common wrong statements (asked before the run) ------------------------------------------------

@statement("Q12.1", "TinyDB calls fsync on every write, so a kill -9 cannot leave its file "
           "unreadable.",
           "False. fsync is about power cuts; a kill -9 exposes the moments between the "
           "program's operations. TinyDB writes the new JSON over the old at offset 0 and "
           "truncates after the fsync: in between, the file holds the new document followed by "
           "the tail of the old one, which no JSON parser accepts.")
def _q12_1():
    s = _summary("tinydb")["kill"]
    return Measured(s["violations"] == 0, f"Explored: {s['by_class']['unreadable']} of "
                    f"{s['states']} kill -9 states of TinyDB are unreadable.")


@statement("Q12.2", "shelve's sync() after every save writes its database to disk, so after "
           "an acknowledged save a kill -9 leaves a database that holds it.",
           "False. sync() is dbm.dumb's _commit: it renames the .dir index to .bak, then writes "
           "a new .dir. A kill between the two leaves no index at all (the reader does not look "
           "at the .bak), and a kill just after the create leaves an empty one: the "
           "acknowledged value is in the .dat file, unreachable. And its next save already "
           "overwrote the value in the .dat file in place before any index said so.")
def _q12_2():
    kills = [v for v in explored("shelve")["violations"] if v["model"] == "kill" and v["last_ack"]]
    return Measured(not kills, f"Explored: {len(kills)} kill -9 states after an acknowledged "
                    "save leave shelve unable to give it back ("
                    f"{sum(v['cls'] == 'lost' for v in kills)} lost, "
                    f"{sum(v['cls'] == 'unreadable' for v in kills)} unreadable).")


LESSON = Lesson(
    number=12,
    notebook="12_first_stores",
    title="The stores you would reach for first: json.dump, TinyDB, shelve and SQLite under "
          "kill -9 and power cuts",
    short_title="the stores you reach for first",
    question="Does json.dump, TinyDB, shelve or sqlite3 keep an agent's checkpoint?",
    teaches="the explorer (strace, every kill -9 state, sampled power cuts) on json.dump, TinyDB, "
            "shelve and sqlite3, each finding read in the library's source, each fix explored; "
            "then your own agent's checkpoint code",
    objectives=(
        "explore any program's checkpoint code with `python -m bughunt explore` (Linux): the "
        "ACK lines, the checker, the kill -9 and power-cut states;",
        "predict, from a store's order of operations, whether some kill -9 state leaves its "
        "file in neither the old nor the new form, and find that moment in its source;",
        "fix json.dump, TinyDB and shelve checkpoints with a temp file, fsync and rename, and "
        "prove the fix by exploring it again;",
        "point the explorer at your own agent's checkpoint code and read which operation a "
        "violating state lost.",
    ),
    runs="the notebook runs in under a minute (Linux with strace; elsewhere it shows stored "
         "results)",
    prerequisites="Lessons 5, 6 and 8 (torn writes, kill -9 vs power loss, simulated power "
                  "cuts); Linux with strace to explore live.",
    exercises=defined_in(__name__),
    claims=CLAIMS,
)


def store_results(path: Path = STORED) -> Path:
    """Explore everything the lesson shows (and its exercises read) now, and store it."""
    names = (*STORES, *FIXES.values(), "sqlite-wal-normal", *SKELETONS)
    data = {n: explore_live(n) for n in names}
    path.write_text(json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n",
                    encoding="utf-8")
    return path


if __name__ == "__main__":
    if sys.argv[1:] != ["--store"]:
        print("usage: python -m bughunt.lab.lessons.l12_first_stores --store", file=sys.stderr)
        sys.exit(2)
    if why_not_live():
        print(f"refused: {why_not_live()}", file=sys.stderr)
        sys.exit(2)
    print(f"{store_results().name}: written")
