# %% [markdown]
# <!-- lesson: header -->
#
# **The question.** Few agents write their checkpoint with a temp file and two fsyncs. They call
# `json.dump(state, open(path, "w"))`, or put the state in TinyDB, a `shelve`, a SQLite table.
# Does that checkpoint survive a `kill -9`? A power cut? And the code of your own agent?
#
# **Recap.** Lesson 5 cut a checkpoint in half; lesson 6 showed what a kill -9 keeps (the page
# cache) and a power cut does not; lesson 8 built the power-cut states from the journal of every
# disk operation the lab's own stores make through the I/O door. Code written without the door has
# no such journal. This lesson gets it for any program, from its system calls.

# %% [markdown]
# <!-- lesson: about -->

# %% [markdown]
# **Contents.** [1 The explorer](#1.-The-explorer:-the-crash-states-of-any-program) ·
# [2 The workload](#2.-The-workload:-an-agent-saving-its-checkpoint-five-times) ·
# [3 Predict](#3.-Predict-first) · [Common wrong statements](#Common-wrong-statements) ·
# [4 The four stores](#4.-The-four-stores,-explored) ·
# [5 The fixes](#5.-The-fixes,-explored-again) · [6 Your own agent](#6.-Your-own-agent) ·
# [What to remember](#What-to-remember) · [Further reading](#Further-reading) ·
# [Glossary](glossary.md)

# %%
# %matplotlib inline
import pandas as pd

from bughunt.explore import workloads
from bughunt.lab.judges import check, quiz, solution
from bughunt.lab.lessons import l12_first_stores as first_stores
from bughunt.lab.views import show_code, show_source

pd.options.display.width = 140
pd.options.display.max_colwidth = 70

# %% [markdown]
# ## 1. The explorer: the crash states of any program
#
# `python -m bughunt explore --dir DIR --check 'CMD {state}' -- PROGRAM ARGS` runs PROGRAM once
# under [strace](https://man7.org/linux/man-pages/man1/strace.1.html), which prints every system
# call it makes. Each file system call below DIR (create, write at an offset, truncate, rename,
# fsync, unlink...) becomes one operation of the lab's I/O journal, the same journal lesson 8 read.
# A self-check replays the operations and must rebuild PROGRAM's final DIR byte for byte; if it
# does not, or if PROGRAM writes in a way strace cannot see (a shared memory map, `sendfile`, two
# threads on one file), the explorer gives no verdict and says why.
#
# From the journal it builds the **crash states** (lesson 8): the **kill -9** state after every
# operation (everything handed to the kernel is there), and **power-cut** states sampled by
# lesson 8's model: per file, a prefix of the writes since its last fsync, the last one maybe torn;
# a new name durable only after an fsync of its directory ("strict") or after any fsync (an
# "ext4-like" directory model). Here: at most 20 power-cut states per model, seed 0.
#
# It is the method of ALICE (Pillai et al., OSDI 2014), with stock strace. Linux only: strace
# needs ptrace, which macOS does not have and some sandboxes deny.

# %% [markdown]
# **The oracle.** How does the explorer know what a state should hold? PROGRAM prints, flushed, a
# line `BEGIN agent 3` before it saves version 3 and `ACK agent 3` once the save returned: from
# then on, it has promised version 3. The checker is the program's own reader, run on a copy of
# each state; it prints `{"items": {"agent": "3"}}`. Each state is then one of:
#
# - **held**: the reader recovered the last acknowledged version, or a later one that was begun;
# - **lost**: it recovered an older version, or none;
# - **phantom**: a version that was never begun;
# - **unreadable**: the reader failed (the agent cannot start again without help);
# - **hang**: the reader did not finish in 10 s.
#
# Where do the results below come from on this machine?

# %% tags=["nbval-ignore-output"]
print(first_stores.where_from())

# %% [markdown]
# ## 2. The workload: an agent saving its checkpoint five times
#
# Each store saves the same checkpoint, `{"step": n, "todo": [...]}`, a list of pages still to do
# that shrinks as the work is done, five times; `BEGIN` before each save, `ACK` after it:

# %%
show_source(workloads.run_workload)

# %% [markdown]
# The four saves, as an agent would write them: `json.dump` into the file opened with `"w"`, TinyDB
# with its default storage, `shelve` on `dbm.dumb` with `sync()` after each save, and `sqlite3` in
# WAL mode with `synchronous=FULL` (each save one autocommitted upsert):

# %%
show_source(workloads.json_dump_save)

# %%
show_source(workloads.tinydb_save)

# %%
show_source(workloads.shelve_save)

# %%
show_source(workloads._sqlite)

# %% [markdown]
# Each checker reads the checkpoint back as the agent would after a restart (`json_load`,
# `tinydb_load`, ... in the same module) and prints what it found.
#
# ## 3. Predict first
#
# **12.1** Under kill -9 alone (no power cut), at how many of the four stores does some state
# lose an acknowledged checkpoint or leave it unreadable? A kill keeps everything the program had
# handed the kernel; look for a moment between two operations where the file is neither the old
# checkpoint nor the new.

# %%
prediction_12_1 = None        # a number from 0 to 4

# %% [markdown]
# ## Common wrong statements
#
# Decide these before the explorer runs; each check reads the exploration and explains.

# %%
quiz("Q12.1")

# %%
answer_q12_1 = None
check("Q12.1", answer_q12_1)

# %%
quiz("Q12.2")

# %%
answer_q12_2 = None
check("Q12.2", answer_q12_2)

# %% [markdown]
# ## 4. The four stores, explored
#
# Each store's five saves, run once under strace; every kill -9 state and the sampled power-cut
# states, each checked by the store's reader (a state may break two classes at once):

# %%
first_stores.stores_table()

# %%
check("12.1", prediction_12_1)

# %%
first_stores.CLAIMS.say("three_of_four_break_at_a_kill")

# %% [markdown]
# ### 4.1 `json.dump` into a file opened with `"w"`
#
# The operations strace saw, numbered as the tables number them:

# %%
print(first_stores.traced_operations("json-dump"))

# %%
first_stores.violating_states("json-dump")

# %%
first_stores.CLAIMS.say("json_dump_truncates_first")

# %% [markdown]
# **From the source.** `open(path, "w")` truncates the file when it opens it
# ([Python docs, `open`](https://docs.python.org/3/library/functions.html#open)); `json.dump` then
# hands its chunks, one by one, to a buffered file
# ([CPython 3.11.7, `Lib/json/__init__.py`, lines 179-180](https://github.com/python/cpython/blob/v3.11.7/Lib/json/__init__.py#L179-L180)),
# which reaches the kernel when the buffer fills or the file is closed. Between the truncate and
# that write the checkpoint is an empty file, and nothing is ever fsynced.

# %% [markdown]
# ### 4.2 TinyDB

# %%
print(first_stores.traced_operations("tinydb"))

# %%
first_stores.violating_states("tinydb")

# %%
first_stores.CLAIMS.say("tinydb_old_tail")

# %% [markdown]
# **From the source.** This is TinyDB's `JSONStorage.write`, read from the TinyDB the lab runs
# (4.9.0, pinned in `requirements.txt`; the same lines, but for a type hint, at a public commit:
# [`tinydb/storages.py`, lines 142-161](https://github.com/msiemens/tinydb/blob/2283a2b556d5ef361b61bae8ed89c0ce0730d7c8/tinydb/storages.py#L142-L161)):

# %%
from tinydb.storages import JSONStorage

show_source(JSONStorage.write)

# %% [markdown]
# It writes the new document over the old one from offset 0, fsyncs, and only then truncates what
# is left of the old one. Our checkpoint shrinks at every save (one page fewer to do), so between
# the write and the truncate the file holds the new JSON followed by the old one's last bytes,
# which no JSON parser accepts. TinyDB once switched to atomic writes and took the change back
# ([the revert, commit 5694479](https://github.com/msiemens/tinydb/commit/569447981a9f0d383c4be5556cd336c9ed7ef758)).
# The explorer's picture of the run: one lane per file, the acknowledgements, and per crash model
# a mark at every cut that violates.

# %%
fig = first_stores.figure("tinydb")

# %% [markdown]
# ### 4.3 `shelve` on `dbm.dumb`

# %%
print(first_stores.traced_operations("shelve"))

# %%
first_stores.violating_states("shelve")

# %%
first_stores.CLAIMS.say("shelve_index_window", "shelve_first_save")

# %% [markdown]
# **From the source.** `shelve.sync()` calls `dbm.dumb`'s `_commit`, read here from the Python the
# lab runs ([CPython 3.11.7, `Lib/dbm/dumb.py`, lines 110-135](https://github.com/python/cpython/blob/v3.11.7/Lib/dbm/dumb.py#L110-L135)):

# %%
import dbm.dumb

show_source(dbm.dumb._Database._commit)

# %% [markdown]
# The index is renamed away before the new one is written, with `open(..., 'w')`; the reader opens
# only the `.dir` file, and with flag `'r'` a missing one is an error
# ([`_update`, lines 93-108](https://github.com/python/cpython/blob/v3.11.7/Lib/dbm/dumb.py#L93-L108)).
# The value itself is overwritten in place in the `.dat` file when it fits, before any index says
# so; the module's own comment calls this "a disaster (for the database) if the program crashes"
# ([`__setitem__`, lines 187-222](https://github.com/python/cpython/blob/v3.11.7/Lib/dbm/dumb.py#L187-L222)).
# Nothing is fsynced.

# %% [markdown]
# ### 4.4 `sqlite3`, WAL, `synchronous=FULL`

# %%
first_stores.CLAIMS.say("sqlite_full_holds")

# %% [markdown]
# **From the documentation.** In WAL mode a commit appends its pages to the `-wal` file and the
# database file keeps the old ones until a checkpoint copies them back
# ([SQLite, write-ahead logging](https://www.sqlite.org/wal.html)); recovery keeps the frames up to
# the last commit whose checksums are valid
# ([SQLite, the WAL file format](https://www.sqlite.org/fileformat2.html#the_write_ahead_log)), so
# every state is the old commit or the new. With `synchronous=FULL` the
# WAL is fsynced at every commit before it returns
# ([SQLite, `PRAGMA synchronous`](https://www.sqlite.org/pragma.html#pragma_synchronous)). The
# `-shm` file is a shared memory map that strace cannot see; SQLite rebuilds it from the WAL, so the
# explorer is told to allow it (`--allow-opaque '*-shm'`).
#
# **12.2** The same store with `synchronous=NORMAL`, which the SQLite docs suggest for WAL mode.
# Where does it lose an acknowledged checkpoint: `"neither"`, `"kill -9 only"`, `"power cut
# only"` or `"both"`? The check explores it.

# %%
prediction_12_2 = None        # one of the four strings

# %%
check("12.2", prediction_12_2)

# %% [markdown]
# ### Power cuts

# %%
first_stores.CLAIMS.say("power_cuts_lose_more")

# %%
first_stores.violating_states("tinydb", "strict", first=4)

# %% [markdown]
# ## 5. The fixes, explored again
#
# One pattern fixes the three that broke: write the whole checkpoint to a temp file, flush and
# fsync it, rename it over the old one (`os.replace`: the old name or the new, never neither), then
# fsync the directory so the rename itself survives a power cut. For TinyDB, the same JSON through
# a storage that writes this way; for `shelve`, the dict pickled into one file written this way:

# %%
show_source(workloads._atomic)

# %%
first_stores.fixes_table()

# %%
first_stores.CLAIMS.say("every_fix_holds")

# %% [markdown]
# ## 6. Your own agent
#
# Here is a skeleton of an agent's checkpoint code, short enough to read whole (its title counts
# its lines), with the `BEGIN`/`ACK` lines in place and its reader as the `check` branch. Its save
# is the plain `json.dump` of section 4.1:

# %%
show_code(first_stores.SKELETON, f"my_agent.py: the skeleton, {first_stores.SKELETON_LINES} lines")

# %% [markdown]
# In a terminal on Linux, with the skeleton saved as `my_agent.py`:
#
# ```
# python -m bughunt explore --dir state --check 'python my_agent.py check {state}' \
#     -- python my_agent.py run state
# ```
#
# **12.3** Before the explorer runs it: add `f.flush(); os.fsync(f.fileno())` right after the
# `json.dump`, still writing `checkpoint.json` in place. At how many of its kill -9 states is the
# checkpoint unreadable?

# %%
prediction_12_3 = None        # a number of states

# %%
check("12.3", prediction_12_3)

# %% [markdown]
# The skeleton as it stands, explored; for each violating state, the operation the crash fell
# after and what the program had not finished since its last acknowledgement:

# %%
first_stores.violating_states("skeleton")

# %% [markdown]
# Its save made atomic, and both explored:

# %%
show_code(first_stores.SKELETON_FIXED.split("if sys.argv")[0], "my_agent.py: the save, fixed")

# %%
first_stores.stores_table(["skeleton", "skeleton-fixed"], "the skeleton and its fix")

# %%
first_stores.CLAIMS.say("skeleton_and_its_fix")

# %% [markdown]
# **12.4** Now your own: set `my_agent` to the source of your agent's checkpoint code, shaped like
# the skeleton (`run DIR` saves and prints the `ACK` lines, `check DIR` prints what it recovers),
# so that no state of any model violates. The check runs the explorer on it (Linux with strace;
# elsewhere it says why it cannot). `solution("12.4")` describes one answer.

# %%
my_agent = None               # a string: your script's source
check("12.4", my_agent)

# %% [markdown]
# ## What to remember
#
# - fsync decides what a power cut keeps; a kill -9 keeps every byte the program handed the
#   kernel, and exposes the moments between its operations. A store that fsyncs can still break
#   at a kill, if some moment leaves its file neither old nor new.
# - `open(path, "w")` empties the file first; writing over a file in place leaves old bytes behind
#   until the truncate; a renamed-away index leaves nothing to read. Read a store's write path for
#   those moments before you trust it.
# - The fix is one pattern: a temp file, fsync, rename over the old one, fsync the directory; or a
#   store whose commit is an append it fsyncs (SQLite's WAL with `synchronous=FULL`).
# - Don't argue about it: run the explorer on the code you actually run, and read which operation
#   each violating state lost.
#
# Stuck? `solution("12.1")` or `solution("Q12.1")` prints a worked answer.

# %% [markdown]
# ## Further reading
#
# - T. S. Pillai et al., "All File Systems Are Not Created Equal: On the Complexity of Crafting
#   Crash-Consistent Applications", OSDI 2014 (ALICE):
#   [usenix.org](https://www.usenix.org/conference/osdi14/technical-sessions/presentation/pillai).
#   The method of this lesson, and what it found in real databases and version control systems.
# - [strace(1)](https://man7.org/linux/man-pages/man1/strace.1.html), Linux man-pages.
# - SQLite, [write-ahead logging](https://www.sqlite.org/wal.html) and
#   [`PRAGMA synchronous`](https://www.sqlite.org/pragma.html#pragma_synchronous).
# - Python, [`dbm.dumb`](https://docs.python.org/3/library/dbm.html#module-dbm.dumb) ("not written
#   for speed") and [`shelve`](https://docs.python.org/3/library/shelve.html).
# - TinyDB, [storages](https://tinydb.readthedocs.io/en/latest/usage.html#storage-types).
#
# ---
# <!-- lesson: nav -->
