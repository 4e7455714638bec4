# %% [markdown]
# <!-- lesson: header -->
#
# **The question.** The worker keeps its progress on disk. After `kill -9`, how does the resumed
# worker rebuild its state from those files, and how much work is that? We compare replaying an
# event log (重放事件日志) with starting from a snapshot (快照) and replaying only what follows it.
#
# **Recap of lesson 2.** Finer checkpoints lose less and write more: a snapshot after every page cut
# the model calls paid twice from 6.51 to 0.76 per crash in the lesson.

# %% [markdown]
# <!-- lesson: about -->

# %% [markdown]
# **Contents.** [Two ways to keep progress](#Two-ways-to-keep-progress) ·
# [One function changes the state](#One-function-changes-the-state) ·
# [How much does recovery replay?](#How-much-does-recovery-replay?) ·
# [The snapshot interval N](#The-snapshot-interval-N) ·
# [Writing the snapshot](#Writing-the-snapshot:-temp-file,-fsync,-rename,-fsync) ·
# [Codex](#Codex:-the-rollout-is-the-log,-compaction-is-the-snapshot) ·
# [Only the newest snapshot](#Only-the-newest-snapshot-may-bound-replay) · [Try it](#Try-it) ·
# [What to remember](#What-to-remember) · [Common wrong statements](#Common-wrong-statements) ·
# [Further reading](#Further-reading)

# %%
# %matplotlib inline
import pandas as pd
from IPython.display import display

from bughunt.diskio import Door
from bughunt.events import apply_event
from bughunt.lab import diagrams
from bughunt.lab.judges import check, quiz, solution
from bughunt.lab.lessons import l03_replay_vs_snapshot as replay
from bughunt.lab.views import show_source, show_text_code

pd.options.display.width = 120
pd.options.display.max_columns = 20

# %% [markdown]
# ## Two ways to keep progress
#
# - An **event log** (事件日志) appends one line per change of state. Recovery reads the log and
#   replays (重放) every event through the same pure function the live run used, `apply_event`, so
#   the rebuilt state equals the state before the crash.
# - A **snapshot** (快照) writes the whole state at once. Recovery just reads it.
# - **Log + snapshot every N pages** (快照加日志后缀) does both: recovery starts from the newest
#   snapshot and replays only the events written after it.
#
# The BugHunt worker writes one event per finished page (`page_done`), and on a bug page, before it
# files the report, an `intent` that carries the report's idempotency key (lesson 4 is about why).
# Here is the log of one clean run, read back from its `events.jsonl`:

# %%
events = replay.clean_event_log()
print(len(events), "events:", events["type"].value_counts().to_dict())
events

# %% [markdown]
# Twelve pages, three of them with a bug, give 12 + 3 = 15 events, as in the lesson (12 页、3 个
# Bug 页一共 15 条事件).
#
# ## One function changes the state
#
# Every change of state, live or replayed, goes through one pure function (确定性的纯函数): no I/O,
# no clock, no globals, so replaying an event gives the same state every time. This is the lab's,
# read from the package:

# %%
show_source(apply_event)

# %% [markdown]
# And the source text's version, as it gives it (the English in brackets translates its comment):

# %%
show_text_code("apply_event")

# %% [markdown]
# The same rules for the lesson's three events. The differences:
#
# - **An unknown event.** The text's version falls through every `elif` and returns the state with
#   only `seq` moved on. The lab's raises `ValueError`, so a damaged record is never applied as if
#   it were nothing.
# - **Copies.** The text's copies both lists at every event; the lab's copies the dict and replaces
#   a list only when an event adds to it. Neither changes the state it was given.
# - **More events.** `answered`, `visited` and `submitted` are lesson 2's per-operation checkpoints.
#
# **3.3 Predict:** given `{"t": "intnet", ...}` (a typo, a damaged record), does the lab's version
# `"ignore"` it or `"raise"`? The next cell replays a clean log through both, then that event.

# %%
prediction_3_3 = None        # "ignore" or "raise"

# %%
display(replay.apply_event_versions())
check("3.3", prediction_3_3)

# %% [markdown]
# ## How much does recovery replay?
#
# The lesson's experiment: kill the worker at each of the 54 crash points (intents on), resume it,
# and count the events recovery applied. Two designs, both with intents, the idempotency key and
# atomic writes: a pure event log, and the same log with a snapshot every 4 pages. Each crash point
# is a real worker killed by SIGKILL and a second process that resumes it; 108 pairs in all.
#
# **3.2 Predict:** with a snapshot every 4 pages, how many events does the resume replay after a
# crash at `p7.after_submit` (page 7's report filed, the page not yet committed)? Use the event log
# above.

# %%
prediction_3_2 = None        # a number of events

# %%
df = replay.replay_sweeps()
replay.design_table(df)

# %% [markdown]
# The lesson measured an average of 7.26 and a maximum of 15 replayed events for the pure log, and
# 1.98 and 4 with a snapshot every 4 pages; "avg replayed" and "max replayed" are this machine's.
# "correct runs" counts the crash runs that recovered correctly: no duplicate report, none lost,
# and the three-way check passed. The averages are plain counts:

# %%
print(replay.explain_replay_averages(df))

# %%
replay.plot_replayed(df)

# %%
check("3.2", prediction_3_2)

# %% [markdown]
# - **Pure log:** recovery replays every event written before the crash, so the count climbs like a
#   staircase through the run. The worst crash is the last moment of page 12, after its `page_done`
#   is durable: all 15 events. The end of the run is the most expensive place to die.
# - **Snapshot every 4:** the snapshot is written inside the commit of pages 4, 8 and 12 (the dotted
#   lines), and the count drops to zero. The worst crash is just before a snapshot, inside the
#   commit of page 4, 8 or 12: the `page_done` events of the three pages since the last snapshot,
#   plus the intent of a bug page among them.
#
# A snapshot changes how much work recovery does, not what it gets: replaying from the start and
# replaying from a snapshot reach the same state, because the snapshot is that state.

# %% [markdown]
# ## The snapshot interval N
#
# How does the replay shrink as snapshots get more frequent? For each interval N we kill a worker at
# each of the 54 crash points and let recovery count what it would replay (a read-only recovery, the
# same code a resumed worker runs first; no resume needed for a count). N = 0 is the pure log. The
# table also counts the checkpoint writes of one clean run: that is the price, paid on every run.

# %%
by_n = replay.replay_by_interval()
table = replay.interval_table(by_n)
table

# %%
replay.plot_interval(table)

# %% [markdown]
# **Why N bounds the replay.** The newest snapshot is never more than N pages old: the next one is
# written inside the commit of page N, 2N, ... So recovery replays the events of fewer than N
# pages: at most N − 1 `page_done` events (the page being committed has none on disk yet), plus one
# `intent` for each bug page in that window. With N = 4, a crash inside page 8's commit replays
# pages 5, 6 and 7 and page 7's intent. The intents are why the max can exceed N when one window
# holds two bug pages (look at N = 6). N = 12 writes its only snapshot at the very end of the run, so
# until then it is a pure log, and its average is close to the pure log's.
#
# **The other side of the trade.** Every N pages the whole state is written again: 12 ÷ N (rounded
# down) snapshot writes per clean run on top of the 15 log appends, crash or no crash. Replaying 15
# small events costs almost nothing here; in a real agent, whose log holds every message and tool
# result of a long session, it does not.

# %% [markdown]
# **Transfer.** Two configurations the lesson did not run. Predict, then run the check (each
# kills a worker at every crash point of its configuration):
#
# - **3.1** A snapshot every 5 pages (12 pages): the largest number of events a recovery replays?
# - **3.4** 20 pages (bugs on pages 3, 7, 10, 15 and 19), a snapshot every 4 pages: the largest
#   number of events a recovery replays?

# %%
prediction_3_1 = None        # a number of events
prediction_3_4 = None        # a number of events

# %%
replay.replay_table({"pure log, 20 pages": replay.LONG_SNAP4.replace(snapshot_every=0),
                       "snapshot every 4, 20 pages": replay.LONG_SNAP4})

# %%
check("3.1", prediction_3_1)
check("3.4", prediction_3_4)

# %% [markdown]
# ## Writing the snapshot: temp file, fsync, rename, fsync
#
# A snapshot overwrites the state as a whole, so a kill in the middle of writing it must not
# leave half a state behind. The lab's snapshot store writes it with the I/O door's atomic write:

# %%
show_source(Door.write_atomic)

# %% [markdown]
# `os.replace` (the rename, here through the door's `files`) is atomic on POSIX: a reader sees the
# old file or the new one, never half (原子性). The source text's version:

# %%
show_text_code("atomic_write")

# %% [markdown]
# The differences:
#
# - **The directory fsync.** The lab fsyncs the directory after the rename; the text stops after
#   `os.replace`. A file's name lives in its directory, so without it a power cut can undo the
#   rename (never `kill -9`: the kernel keeps it).
# - **fsync by policy.** With `fsync="never"` the door stops at the kernel hand-off, which is all
#   `kill -9` needs (lesson 6 measures both).
# - **No test switch.** The text's `atomic_write` takes a `torn` flag for its experiment. The lab
#   tears writes in a separate method, `write_in_place`, used only by the torn write modes
#   (lesson 5); `mid()` is the `mid_commit` crash point, between the complete temp file and the
#   rename.
# - **The temp name.** `snapshot.json.tmp`, not `with_suffix(".tmp")`, which gives `a.json` and
#   `a.txt` the same temp file.
#
# Why fsync at all? Because a byte passes through three places on its way to the disk, and each
# kind of crash takes a different set of them (the kill -9 figures measured just now):

# %%
diagrams.plot_byte_places(replay.bytes_after_kill())

# %% [markdown]
# What a power cut right after the write can leave, for three ways of writing the same file. Each
# way is journaled and put through lesson 8's power-loss simulation, which builds every disk state
# a cut may leave (unsynced writes and renames may or may not have reached the disk):

# %%
replay.power_cut_after_write()

# %% [markdown]
# Only the full sequence leaves the new contents in every state. Without the fsync before the
# rename, the new name can point at data that never reached the disk; without the directory fsync,
# the old file can come back. Lessons 5, 6 and 8 go further.

# %% [markdown]
# ## Codex: the rollout is the log, compaction is the snapshot
#
# Codex keeps each conversation as a rollout (`rollout-….jsonl`): an append-only JSONL event log.
# When the context is compacted (压缩), it writes a `compacted` entry whose `replacement_history`
# holds the whole new history: that entry is a snapshot inside the log. `codex resume` starts from
# the newest such checkpoint and replays only the entries after it.
#
# The lesson adds a detail: resuming takes two steps.
#
# 1. `select_input_compaction` looks only at the **newest** `compacted` entry. If it is complete,
#    the scan is cut to the entries after it; if it is not (no `replacement_history`, no window
#    number, ...), it returns `None` and the scan covers every item. Its comment gives the reason:
#    *"Only the newest compaction can bound replay. If it is incomplete, an older compaction cannot
#    replace the history or window state that the newer one may have changed."*
# 2. A reverse scan then still takes the newest surviving compaction that has a
#    `replacement_history` as the base of the history.

# %% [markdown]
# So "step 1 returned `None`" does not mean "the whole history is replayed". Step 2 may start the
# history from an older compaction than the newest, but it then replays everything after that base,
# the newer compaction included, so nothing the newer one changed is skipped. (Older Codex releases
# do only the reverse scan; the conclusion holds there too. Line numbers move between versions:
# search [openai/codex](https://github.com/openai/codex) for the function names.) On resume Codex
# still reads and parses the **whole** JSONL file: the checkpoint bounds how much history is
# replayed, not how much is read.
#
# **Our store** is the same idea, one step further: the snapshot records the byte offset of the log
# it covers (`log_offset`), so recovery decodes and applies only the lines after that offset. (It
# still reads the file's bytes, and checks that the offset falls on a line boundary.) A worker
# killed inside page 8's commit, the worst point for N = 4:

# %%
replay.snapshot_coverage(crash_point="p8.mid_commit")

# %% [markdown]
# ## Only the newest snapshot may bound replay
#
# That is Codex's rule: a newer compaction may have changed what an older one describes, so an
# older one cannot stand in for it where the scan is cut. Our store keeps a single snapshot file,
# replaced atomically, so there is no older one to try: if the snapshot is unusable, recovery
# replays the whole log from the first event and reports `snapshot_fallback = "log"`. That is only
# possible because the log is never cut: every event since the start is still in it.
#
# Below, the same crash three times; before resuming, the snapshot is left intact, cut in half, or
# has one digit changed (which still parses, but fails its checksum). The damage is done from
# outside, as a bad disk or a careless copy would: `kill -9` cannot tear this snapshot, since it is
# written to a temp file and renamed into place.

# %%
replay.damaged_snapshot(crash_point="p8.mid_commit")

# %% [markdown]
# The damaged runs replay every event in the log instead of the few after the snapshot, and still
# finish with the right result: the tracker, the resumed worker's memory and a fresh rebuild from
# disk agree (the three-way check). A damaged *log* is a different matter: a record that fails its
# checksum, or a log shorter than the snapshot says, makes recovery refuse and change nothing.
#
# ## Try it
#
# The panel re-runs the real experiment. Move the **crash point** slider to see one crash and resume
# in detail. Change **snapshot every** (0 = pure log), the **write mode**, **intent** or **fsync**,
# then press **Run sweep** to kill and resume at every point. Bars show replayed events per crash
# point, coloured by verdict; the blue line is this machine's average, the dashed line the lesson's
# (shown for N = 0 and N = 4 with intents on).
#
# Things to try: snapshot every 1 (how much is left to replay?); intent off (how do the bars
# change?); `torn` write mode with a snapshot every 4 (what does a torn log line add to the
# replay? the point details count torn lines skipped).

# %% tags=["panel", "nbval-ignore-output"]
p = replay.panel()
p.show()

# %% [markdown]
# ## What to remember
#
# - State changes go through one pure function, `apply_event`, live and at replay: the same code,
#   so the same state. The lab's refuses an event it does not know.
# - A pure event log is recovered by replaying every event: the later the crash, the longer the
#   replay (lesson: avg 7.26, max 15 events over 54 crash points).
# - A snapshot every N pages bounds the replay to the events of fewer than N pages, plus their
#   intents (lesson, N = 4: avg 1.98, max 4), however long the run, at the price of a whole-state
#   write every N pages.
# - A snapshot is replaced atomically: temp file, fsync, rename, directory fsync. The rename alone
#   protects against `kill -9`; the fsyncs are for power loss.
# - Only the newest snapshot may bound the replay. If it is unusable, our store replays the whole
#   log; Codex's resume follows the same rule, and still reads the whole rollout.

# %% [markdown]
# ## Common wrong statements
#
# True or false? Decide first; each check then measures and explains.

# %%
quiz("Q3.1")

# %%
answer_q3_1 = None
check("Q3.1", answer_q3_1)

# %%
quiz("Q3.2")

# %%
answer_q3_2 = None
check("Q3.2", answer_q3_2)

# %%
quiz("Q3.3")

# %%
answer_q3_3 = None
check("Q3.3", answer_q3_3)

# %% [markdown]
# Stuck? `solution("3.1")`, `solution("3.4")` or `solution("Q3.3")` prints a worked answer.

# %% [markdown]
# ## Further reading
#
# - [rename(2)](https://man7.org/linux/man-pages/man2/rename.2.html) and Python's
#   [`os.replace`](https://docs.python.org/3/library/os.html#os.replace): the atomic replace.
# - [fsync(2)](https://man7.org/linux/man-pages/man2/fsync.2.html): why the directory needs its own
#   fsync after a rename.
# - SQLite, [write-ahead logging](https://www.sqlite.org/wal.html): a log with checkpoints that fold
#   it into the database, the same trade between replay length and write cost.
# - T. S. Pillai et al., "All File Systems Are Not Created Equal", OSDI 2014 (ALICE):
#   [usenix.org](https://www.usenix.org/conference/osdi14/technical-sessions/presentation/pillai):
#   which update protocols real applications get wrong, the rename without fsync among them.
# - [openai/codex](https://github.com/openai/codex): search for `select_input_compaction` and
#   `replacement_history`.
#
# ---
# <!-- lesson: nav -->
