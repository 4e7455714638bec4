# %% [markdown]
# <!-- lesson: header -->
#
# **The question.** Eight lessons showed why checkpoint stores fail: a report filed twice in the
# danger window, a snapshot torn in half, a log that glues a record onto a fragment, a rename a
# power cut undoes. Can you now write a store that does not fail, and prove it the way the lab
# proves its own: at every crash state a kill -9 or a power cut can leave, and at every crash point
# of a real worker killed by SIGKILL?
#
# **Recap of lesson 8.** The lab's own log store survives a crash during recovery, two resumers
# and a full disk, and both of its stores survive simulated power loss; the planted bugs show that
# its tests would catch them if they did not. Here the store under test is yours.

# %% [markdown]
# <!-- lesson: about -->

# %% [markdown]
# **Contents.**
# [1 The contract](#1.-The-contract) ·
# [2 The skeleton, the door, the grader](#2.-The-skeleton,-the-door,-the-grader)
# ([behind the boundary](#Behind-the-boundary:-what-the-grader-does-with-your-code,-and-what-it-does-not)) ·
# [3 A naive store](#3.-Step-1:-a-naive-store) ·
# [Common wrong statements](#Common-wrong-statements) ·
# [4 Old or new, never half](#4.-Steps-2-and-3:-old-or-new,-never-half) ·
# [5 The directory](#5.-Step-4:-the-directory-fsync) ·
# [6 A log](#6.-Steps-5-and-6:-a-log,-and-the-newline-repair) ·
# [7 The side effect](#7.-The-side-effect:-the-key-is-the-run's,-the-intent-is-the-store's) ·
# [8 Beside the lab's stores](#8.-All-of-them,-beside-the-lab's-own-stores) ·
# [Try it](#Try-it) · [Exercises](#Exercises) · [What to remember](#What-to-remember) ·
# [Further reading](#Further-reading) · [Glossary](glossary.md)

# %%
# %matplotlib inline
import pandas as pd

from bughunt.lab.judges import check, quiz, solution
from bughunt.lab.lessons import l09_your_own_store as cap

pd.options.display.width = 160
pd.options.display.max_columns = 20
pd.options.display.max_colwidth = 110

# %% [markdown]
# ## 1. The contract
#
# The worker uses a store in one order, once per process: `load()` what survived, then
# `open_for_append()` to prepare the files, then `commit(state, event, mid=...)` once per event, then
# `close()`. Every promise a store makes is one rule, and the lab's own stores keep all of them
# (`bughunt/stores/contract.py`):

# %%
cap.contract_table()

# %% [markdown]
# Two kinds of crash state are checked. After a **kill -9**, everything the process had handed to
# the kernel is still there (the page cache survives it, lesson 6). After a **power cut**, only
# what was fsynced is sure to be; of the rest, any prefix of each file's unsynced writes, the last
# one possibly torn (撕裂写), and directory changes only if the directory was fsynced. The
# conformance suite runs one 5-page run of the real page loop through a door that journals every
# operation, and builds crash states from the journal (as ALICE and LazyFS do): every kill -9
# state, and at every cut the two extreme power-cut states (everything written survived, nothing
# unsynced did) plus a seeded sample of mixes in between. It checks every rule at each one.

# %% [markdown]
# ## 2. The skeleton, the door, the grader
#
# Here is a store to start from: the contract's methods, each with its promise as its docstring.
# Exercise 9.1 asks you to copy it into a cell that starts with `%%writefile my_store.py` and fill
# it in.

# %%
print(cap.skeleton())

# %% [markdown]
# A store writes **only through the door** it is given, so that the lab sees every byte: that is
# where the journal records each operation, where faults are injected, where crash points fire.
# The door's own methods apply the run's fsync policy (the grader sets it to `always`);
# `door.files`, the system calls under the door, do exactly what you call and nothing more.
# Reading is free: `path.read_bytes()`, `path.exists()`.

# %%
cap.door_methods()

# %% [markdown]
# `cap.grade("file.py:ClassName")` grades a store in two parts: the conformance suite, then a sweep
# that kills a real worker using your store at every crash point and resumes it, reads the
# model's bill for the calls paid twice, and asks the three witnesses (the tracker, the resumed
# worker's memory, a rebuild from disk: 三方一致). Your code never runs in this notebook's
# process: it runs behind the lab's boundary (below). A store that raises, loops, sleeps, exits or
# writes elsewhere gets a sentence, not a hung kernel. The skeleton as it is, graded:

# %%
print(cap.explain(cap.grade_skeleton()))

# %% [markdown]
# ### Behind the boundary: what the grader does with your code, and what it does not
#
# - **A process of its own.** Your store runs in a child process the lab starts, in a session and
#   a process group of their own. The results come back over a private channel (a socket the lab
#   opened), never over your store's stdout or stderr: what it prints is captured and shown under
#   the verdict, the first lines, then "… N more lines". A `print()` cannot fail a correct store.
# - **Limits.** Each call into your store gets 10 s, the suite 30 s, the sweep 60 s (each worker
#   10 s); each process gets 1 GiB of address space (`RLIMIT_AS`, setrlimit(2), on Linux; macOS
#   accepts that limit and does not enforce it, so there only the time limits stop a store that
#   grows without end). A verdict names the limit and the call it stopped.
# - **Nothing left running.** When the grade ends, the child's whole process group is killed. On
#   Linux the lab's supervisor is a child subreaper (prctl(2), `PR_SET_CHILD_SUBREAPER`): a process
#   your store double-forked, or moved to a session of its own, is handed to it when its parent
#   dies, and killed too. macOS has no subreaper: there a process that leaves its session escapes.

# %% [markdown]
# - **A kill is a new process.** The conformance suite simulates each crash, and never loads what
#   a crash left in the process that wrote it: after every crash state, the judged `load()`, the
#   repairs, the resume's commit and the read-back run in new processes that never ran your store
#   before (forked from a pristine one that imported nothing of yours, your file imported
#   afresh), and the sweep's kills are real SIGKILLs. A store that keeps its state in memory (a
#   module-level dict, a class attribute, a cache) instead of on disk fails
#   `kill-keeps-acknowledged`, as it would after a real kill -9.
# - **The fence.** On Linux with Landlock (5.13 and later) the kernel holds your store: before it
#   imports any of your code, the boundary's child takes rights away from itself with a Landlock
#   ruleset, for good, and every process it starts inherits it. Your store may make, write,
#   truncate, rename or remove files only beneath the boundary's temporary folder (where the grade's
#   run directories are), bind or connect to no TCP port, and signal no process outside (Landlock
#   ABI 6). An audit hook (PEP 578) in every process of the grade is the layer that *names* what was
#   refused, in one sentence with where your store was: starting a process (`subprocess`,
#   `os.system`, `fork`, `posix_spawn`, `exec`), `ctypes`, a signal to any process but its own, and
#   a write, rename or removal outside its run directory. The kernel stops what the hook cannot see:
#   an `os.open` with a `dir_fd`, `os.mkfifo`, SQLite's `ATTACH DATABASE`, C code. The hook's state
#   lives in its closure, not in an attribute your code could flip. Such a store is graded "refused:
#   the store tried to ...", never "Passes".

# %% [markdown]
# What it is not: a hardened sandbox for hostile code. It does not restrict reads: your store may
# read any file you may read. Within the boundary's folder, one crash state's directory is kept from
# another's by the hook alone; code written to get out can walk the interpreter's frames to the
# hook's state, and a store that catches the kernel's refusal and carries on is stopped without
# being named. The boundary is a guard against accidents and ordinary mistakes: a path built from
# the working directory, a debugging `subprocess.run`, a cache that stands in for the disk. Where
# Landlock is missing (macOS, a Linux kernel before 5.13, a container whose seccomp profile forbids
# it), the fence is the audit hook alone, and the verdict says so and lists what the hook alone lets
# by: a thread, finalizer or `atexit` callback with none of your store's frames on the stack,
# `_posixsubprocess.fork_exec` called directly, an `os.open` with a `dir_fd`, `os.mkfifo`, SQLite's
# `ATTACH DATABASE`, C code that opens files itself. Two stores built on the reference solution,
# graded: one prints as it commits, the other asks a shell to copy its log (within its own run
# directory: starting a process is refused wherever it would write).
#
# Sources: [landlock(7)](https://man7.org/linux/man-pages/man7/landlock.7.html) (the kernel's
# fence: a process restricting itself, and what it inherits),
# [PEP 578](https://peps.python.org/pep-0578/) (audit hooks),
# [prctl(2)](https://man7.org/linux/man-pages/man2/prctl.2.html) (`PR_SET_CHILD_SUBREAPER`),
# [setrlimit(2)](https://man7.org/linux/man-pages/man2/setrlimit.2.html) (`RLIMIT_AS`).

# %%
behind = cap.behind_the_boundary()
print(behind["ChattyStore"])
print()
print(behind["BackupStore"])

# %% [markdown]
# ## 3. Step 1: a naive store
#
# The first store anyone writes: the whole state as JSON, written over the old file in place, no
# fsync. It uses the door's system calls directly. `mid()` is the lab's mid-commit crash point: the
# contract asks for it once, in the middle of the write, where a crash would hurt most. Run the
# cell: it saves the file next to this notebook.

# %% tags=["nbval-ignore-output"]
# %%writefile naive_store.py
"""Step 1: the state as JSON, written over the old file in place. No fsync."""
import json
import os

from bughunt.events import initial_state
from bughunt.stores import Recovered, Repairs


class NaiveStore:
    name = "naive"

    def __init__(self, run_dir, config, door):
        self.path = run_dir / "state.json"
        self.files = door.files          # the door's system calls

    def load(self):
        if not self.path.exists():
            return Recovered(initial_state())
        return Recovered(json.loads(self.path.read_bytes()))

    def open_for_append(self):
        return Repairs()

    def commit(self, state, event, *, mid):
        data = json.dumps(state).encode()
        fd = self.files.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        mid()                            # the old bytes are gone, the new not yet written
        self.files.write(fd, data, str(self.path))
        self.files.close(fd)

    def close(self):
        pass


# %%
naive = cap.grade("naive_store.py:NaiveStore")
print(cap.explain(naive))

# %% [markdown]
# The suite names the rule, the crash state (a kill -9 right after the file was created, before a
# byte of it was written), the file, and what was on disk there: nothing. `load()` raised instead
# of finding a state the run passed through. The numbers in a crash state count the operations of
# the suite's whole run; the commit listed last is another one, for comparison. Rule by rule:

# %%
naive.rules_table()

# %%
cap.CLAIMS.say("naive_fails_at_mid_commit")

# %% [markdown]
# Only the failing points:

# %%
table = naive.sweep_table()
table[table["verdict"] != "correct"]

# %% [markdown]
# ## Common wrong statements
#
# Two statements the rest of this lesson settles. True or false? Decide now; each check measures
# on the lab's own stores and explains, and sections 4 and 7 show why on yours.

# %%
quiz("Q9.1")

# %%
answer_q9_1 = None
check("Q9.1", answer_q9_1)

# %%
quiz("Q9.2")

# %%
answer_q9_2 = None
check("Q9.2", answer_q9_2)

# %% [markdown]
# ## 4. Steps 2 and 3: old or new, never half
#
# The hint sends us to lesson 5: write the new state to a temp file, then rename it over the old
# one. `os.replace` (what `door.files.rename` calls) is atomic: a reader sees the old file or the
# new one, never half. The new store subclasses the naive one and changes only `commit`; the
# grader puts the store's folder on the import path, so one file can import another.

# %% tags=["nbval-ignore-output"]
# %%writefile rename_store.py
"""Step 2: write a temp file, then rename it over the old one."""
import json
import os

from naive_store import NaiveStore


class RenameStore(NaiveStore):
    name = "temp file + rename"

    def commit(self, state, event, *, mid):
        data = json.dumps(state).encode()
        tmp = self.path.with_name("state.json.tmp")
        fd = self.files.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        self.files.write(fd, data, str(tmp))
        self.files.close(fd)
        mid()                            # a kill here leaves the old state.json whole
        self.files.rename(tmp, self.path)


# %%
renamed = cap.grade("rename_store.py:RenameStore")
print(cap.explain(renamed))

# %%
cap.CLAIMS.say("rename_breaks_only_power_rules")

# %% [markdown]
# The rename reached the disk before the bytes it names did, so after a power cut
# `state.json` can be an empty file. No kill -9 can show this (the kernel still writes everything
# out); only the power-cut states of the suite can. The hint sends us to lesson 6: fsync the temp
# file before the rename.

# %% tags=["nbval-ignore-output"]
# %%writefile fsync_store.py
"""Step 3: fsync the temp file before the rename."""
import json
import os

from naive_store import NaiveStore


class FsyncStore(NaiveStore):
    name = "temp file + fsync + rename"

    def commit(self, state, event, *, mid):
        data = json.dumps(state).encode()
        tmp = self.path.with_name("state.json.tmp")
        fd = self.files.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        self.files.write(fd, data, str(tmp))
        self.files.fsync(fd, str(tmp))   # new: the bytes reach the disk before the name moves
        self.files.close(fd)
        mid()
        self.files.rename(tmp, self.path)


# %%
fsynced = cap.grade("fsync_store.py:FsyncStore")
print(cap.explain(fsynced))

# %% [markdown]
# ## 5. Step 4: the directory fsync

# %%
cap.CLAIMS.say("fsync_leaves_the_directory")

# %% [markdown]
# A rename changes the directory, and a directory change is durable only once the directory
# itself is fsynced ([fsync(2)](https://man7.org/linux/man-pages/man2/fsync.2.html)). A rename is
# atomic, not durable.

# %% tags=["nbval-ignore-output"]
# %%writefile durable_store.py
"""Step 4: and fsync the directory after the rename."""
import json
import os

from naive_store import NaiveStore


class DurableStore(NaiveStore):
    name = "temp file + fsync + rename + dir fsync"

    def commit(self, state, event, *, mid):
        data = json.dumps(state).encode()
        tmp = self.path.with_name("state.json.tmp")
        fd = self.files.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        self.files.write(fd, data, str(tmp))
        self.files.fsync(fd, str(tmp))
        self.files.close(fd)
        mid()
        self.files.rename(tmp, self.path)
        self.files.fsync_dir(self.path.parent)   # new: the rename itself reaches the disk


# %%
durable = cap.grade("durable_store.py:DurableStore")
print(cap.explain(durable))

# %%
cap.CLAIMS.say("durable_passes")

# %% [markdown]
# The last lines show what one commit does, operation by operation: the same steps as the lab's own `Door.write_atomic`, and as
# Codex's rollout migration (staged file, `sync_all`, rename, fsync of the parent directory). It is
# also the dearest write of lesson 6's table, paid at every event.
#
# ## 6. Steps 5 and 6: a log, and the newline repair
#
# A log appends one line per event instead of rewriting the whole state: the cheap write of lesson
# 6, and lesson 3's design. `load()` replays the lines through `apply_event` and skips a line that
# does not parse (a fragment cut by a crash), counting it. Here the door's own methods do the
# writing, and its fsync policy (`always` in a grade) fsyncs each append and the new file's
# directory.

# %% tags=["nbval-ignore-output"]
# %%writefile log_store.py
"""Step 5: an event log. Each commit appends one line; load() replays them."""
import json

from bughunt.events import apply_event, initial_state
from bughunt.stores import Recovered, Repairs


class LogStore:
    name = "my log"

    def __init__(self, run_dir, config, door):
        self.path = run_dir / "events.jsonl"
        self.door = door
        self.fd = None

    def load(self):
        state, replayed, torn = initial_state(), 0, 0
        data = self.path.read_bytes() if self.path.exists() else b""
        for line in data.split(b"\n"):
            if not line:
                continue
            try:
                event = json.loads(line)
            except ValueError:           # half a line, cut by a crash: skip it, count it
                torn += 1
                continue
            state = apply_event(state, event)
            replayed += 1
        return Recovered(state, replayed_events=replayed, torn_lines_skipped=torn)

    def open_for_append(self):
        self.fd = self.door.open_append(self.path)
        return Repairs()

    def commit(self, state, event, *, mid):
        line = (json.dumps(event) + "\n").encode()
        self.door.append(self.fd, line, mid=mid)   # one write, fsynced by the door's policy

    def close(self):
        if self.fd is not None:
            self.door.close(self.fd)
            self.fd = None


# %%
log = cap.grade("log_store.py:LogStore")
print(cap.explain(log))

# %%
cap.CLAIMS.say("log_breaks_only_the_newline_rule")

# %% [markdown]
# An append is one `write()`, and the kernel copies a small one into the page cache whole: a kill
# almost never cuts it (lesson 5 showed where it can, at a 4 KiB page boundary, and the suite's
# kill states do not cut a write). A power cut can cut it, though (look at the bytes on disk: half
# a `page_done` record, no newline). `load()` skips that fragment; but the next append lands right
# after it, the two become one line that does not parse, and the new record is lost too. That is
# lesson 5's no-newline trap, and its fix is Codex's `ensure_rollout_is_newline_terminated`: before
# the first append, end a torn last line with a newline. Doing it twice must change nothing.

# %% tags=["nbval-ignore-output"]
# %%writefile repaired_log_store.py
"""Step 6: the log, with the newline repair before the first append."""
import os

from bughunt.stores import Repairs
from log_store import LogStore


class RepairedLogStore(LogStore):
    name = "my log, repaired"

    def open_for_append(self):
        repairs = Repairs()
        if self.path.exists() and self.path.stat().st_size:
            with open(self.path, "rb") as f:
                f.seek(-1, os.SEEK_END)
                torn_tail = f.read(1) != b"\n"
            if torn_tail:                # end the fragment: nothing glues onto it
                fd = self.door.open_append(self.path)
                self.door.append(fd, b"\n", kind="repair")
                self.door.close(fd)
                repairs.tails_repaired = 1
        self.fd = self.door.open_append(self.path)
        return repairs


# %%
repaired = cap.grade("repaired_log_store.py:RepairedLogStore")
print(cap.explain(repaired))

# %%
cap.CLAIMS.say("repaired_passes")

# %% [markdown]
# ## 7. The side effect: the key is the run's, the intent is the store's
#
# Every grade so far ran with lesson 4's effectively once (效果上恰好一次): an intent recorded before
# the report is filed, and a deterministic idempotency key the tracker deduplicates. Those are
# settings of the run, not of the store. Grade the same, passing store without them:

# %%
no_key = cap.grade("repaired_log_store.py:RepairedLogStore", idempotency_key=False,
                   intent=False)
print(cap.explain(no_key))

# %%
table = no_key.sweep_table()
table[table["verdict"] != "correct"]

# %%
cap.CLAIMS.say("no_key_duplicates_in_the_window")

# %% [markdown]
# No store can close that window, because the effect happened outside the process before the
# checkpoint did. Grade the store twice more, once with the key alone and once with the intent
# alone:

# %%
key_only = cap.grade("repaired_log_store.py:RepairedLogStore", idempotency_key=True, intent=False)
intent_only = cap.grade("repaired_log_store.py:RepairedLogStore", idempotency_key=False,
                        intent=True)
print(key_only.verdict)
print()
print(intent_only.verdict)

# %%
cap.CLAIMS.say("the_key_closes_the_window")

# %% [markdown]
# What is the intent for, then? It tells the resume that a report *may* have been filed, so that
# recovery can choose: redo it with the same key (effectively once), or give the page up
# (`pending="abort"`: at most once). The store's part is smaller and just as strict: keep the
# intent event (the state's `pending`) like any other event, so that the resume sees it.
#
# ## 8. All of them, beside the lab's own stores
#
# Every step, graded with the same settings, and the lab's own event log and snapshot store swept
# with those settings too, through the same suite and the same sweep. The rule columns come from
# the conformance suite, the rest from the real kills: how each crash point ended, one column
# each (they add up to the crash points), and the redone calls averaged over the resumes that ran.

# %%
steps = {"1 naive": naive, "2 temp + rename": renamed, "3 + fsync": fsynced,
         "4 + dir fsync": durable, "5 log": log, "6 log + repair": repaired}
cap.compare_table(steps)

# %%
cap.plot_grades(steps)

# %%
cap.CLAIMS.say("the_sweep_cannot_see_power_cuts", "the_cost_of_a_crash")

# %% [markdown]
# Rule by rule, violations found:

# %%
cap.rules_matrix(steps)

# %% [markdown]
# ## Try it
#
# Grade any store file by its name (`FILE.py:ClassName`), with the run's settings of lesson 4:
# the idempotency key, the intent, and what recovery does with a pending intent (`abort` gives the
# page up: at most once). **Grade** runs the suite and the sweep (a few seconds), **Reset**
# forgets every result. Try `naive_store.py:NaiveStore`, your own `my_store.py:MyStore`, or
# `repaired_log_store.py:RepairedLogStore` with `pending intent` set to `abort`.

# %% tags=["panel", "nbval-ignore-output"]
p = cap.panel("repaired_log_store.py:RepairedLogStore")
p.show()

# %% [markdown]
# ## Exercises
#
# **9.1** Write your own store: copy the skeleton of section 2 into a new cell under
# `%%writefile my_store.py`, fill in its methods, run the cell, and check it by name. Every rule,
# every crash point. (Stuck? The sections above have two passing stores; `solution("9.1")` shows a
# third, a log with a snapshot every 4 pages.)

# %%
answer_9_1 = None          # "my_store.py:MyStore" once you have written it
check("9.1", answer_9_1)

# %% [markdown]
# **9.2** Step 1's store breaks four rules. Keep it writing in place, but fsync the file after the
# write and the directory after that. Which of the four rules does it still break? Predict, then
# check: the check grades that store.

# %%
answer_9_2 = None          # a set of rule names, e.g. {"kill-keeps-acknowledged"}
check("9.2", answer_9_2)

# %% [markdown]
# **9.3 Transfer.** A problem drawn for this lesson (`python -m bughunt practice --lesson 9 --seed
# 14` prints the same one; other seeds give others): a store and settings this lesson did not
# grade. Predict, then check: the check grades it now.

# %%
cap.TRANSFER

# %%
print(cap.practice_source(cap.TRANSFER.drawn["store"]))

# %%
prediction_9_3 = None      # a number of crash points

# %%
check("9.3", prediction_9_3)

# %% [markdown]
# Stuck? `solution("9.2")` prints a worked answer.

# %% [markdown]
# ## What to remember
#
# - A store is four methods and nine promises; a grader that checks every crash state it builds
#   and every crash point turns "it worked when I tried" into "it held at each of them".
# - In place is never safe: a kill between the truncate and the write leaves nothing. A temp file
#   and a rename give old or new, never half; fsync does not give that (exercise 9.2).
# - Durable takes three steps: fsync the bytes, rename, fsync the directory. A kill -9 sweep cannot
#   see the last two missing; power-cut states can.
# - A log skips a line it cannot parse, and ends a torn last line with a newline before it appends,
#   idempotently.
# - The danger window is not the store's to close: the key belongs to the side effect, and closes
#   it on its own. The store's part is to keep the intent, so that recovery can choose.

# %% [markdown]
# ## Further reading
#
# - The store contract and its suite, in this repository: `bughunt/stores/contract.py`,
#   `bughunt/conformance.py` (`python -m bughunt.conformance --store my_store.py:MyStore`), and
#   the grader, `bughunt/grader.py` (`python -m bughunt.grader --store my_store.py:MyStore`)
# - [fsync(2)](https://man7.org/linux/man-pages/man2/fsync.2.html), Linux man-pages: a new or
#   renamed file also needs its directory fsynced
# - Python's [`os.replace`](https://docs.python.org/3/library/os.html#os.replace) ("the renaming
#   will be an atomic operation")
# - Pillai et al., ["All File Systems Are Not Created Equal"](https://www.usenix.org/conference/osdi14/technical-sessions/presentation/pillai)
#   (ALICE), OSDI 2014: the crash states an application's writes can leave
# - [LazyFS](https://github.com/dsrhaslab/lazyfs), a file system that loses unsynced writes on
#   purpose
# - Dan Luu, ["Files are hard"](https://danluu.com/file-consistency/)
# - The grader's fence: [landlock(7)](https://man7.org/linux/man-pages/man7/landlock.7.html) (the kernel's half), [PEP 578](https://peps.python.org/pep-0578/) audit hooks (the half that names)
# - Codex's newline repair, `ensure_rollout_is_newline_terminated`, in
#   [openai/codex](https://github.com/openai/codex)
#
# ---
# <!-- lesson: nav -->
