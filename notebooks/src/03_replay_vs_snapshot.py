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

# %%
replay.CLAIMS.say("one_page_done_per_page_and_one_intent_per_bug")

# %% [markdown]
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
# The same rules for the lesson's three events. Read the two versions once more, then predict.
#
# **3.3 Predict:** the *source text's* version is given `{"t": "intnet", ...}` (a typo, a damaged
# record, or an event a newer version writes). Does it `"raise"` an error, return the state
# `"unchanged"`, or return it with `"only seq moved"`? The next cell replays a clean log through
# both versions, then that event.

# %%
prediction_3_3 = None        # "raise", "unchanged" or "only seq moved"

# %%
display(replay.apply_event_versions())
check("3.3", prediction_3_3)

# %% [markdown]
# The differences:
#
# - **An unknown event.** The text's version sets `seq` before it looks at the type, falls through
#   every `elif` and returns the copy: a damaged record is applied as if it were nothing. The lab's
#   raises `ValueError` (refuse, don't guess).
# - **Copies.** The text's copies both lists at every event; the lab's copies the dict and replaces
#   a list only when an event adds to it. Neither changes the state it was given.
# - **More events.** `answered`, `visited` and `submitted` are lesson 2's per-operation checkpoints.

# %% [markdown]
# ## How much does recovery replay?
#
# The lesson's experiment: kill the worker at each of the 54 crash points (intents on), resume it,
# and count the events recovery applied. Two designs, both with intents, the idempotency key and
# atomic writes: a pure event log, and the same log with a snapshot every 4 pages. Each crash point
# is a real worker killed by SIGKILL and a second process that resumes it; 108 pairs in all.
#
# Decide one statement first, true or false:

# %%
quiz("Q3.2")

# %%
answer_q3_2 = None           # True or False

# %% [markdown]
# **3.2 Predict:** with a snapshot every 4 pages, how many events does the resume replay after a
# crash at `p7.after_submit` (page 7's report filed, the page not yet committed)? Use the event log
# above.

# %%
prediction_3_2 = None        # a number of events

# %%
df = replay.replay_sweeps()
replay.design_table(df)

# %%
replay.CLAIMS.say("beside_the_lesson")

# %% [markdown]
# "avg replayed" and "max replayed" are this machine's, "lesson avg" and "lesson max" the source
# text's. A crash run is correct when no report is filed twice, none is lost, and the three-way
# check passes; the verdict columns add up to the crash points. The averages are plain counts:

# %%
print(replay.explain_replay_averages(df))

# %%
replay.plot_replayed(df)

# %%
check("3.2", prediction_3_2)

# %%
replay.CLAIMS.say("the_pure_log_climbs_to_the_whole_log", "snapshots_reset_the_count",
                  bullets=True)

# %% [markdown]
# With a pure log the end of the run is the most expensive place to die. A snapshot changes how
# much work recovery does; does it change what recovery gets?

# %%
replay.CLAIMS.say("both_designs_recover_the_same_state")

# %%
check("Q3.2", answer_q3_2)

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
# pages 5, 6 and 7 and page 7's intent.

# %%
replay.CLAIMS.say("intents_push_the_max_and_n12_is_a_pure_log", "snapshot_writes_are_12_over_n")

# %% [markdown]
# **The other side of the trade.** That whole-state write is paid on every run. Replaying 15
# small events costs almost nothing here; in a real agent, whose log holds every message and tool
# result of a long session, it does not.

# %% [markdown]
# **Transfer.** Configurations the lesson did not run. Predict, then run the checks (each kills
# workers for real):
#
# - **3.1** A snapshot every 5 pages (12 pages): the largest number of events a recovery replays?
# - **3.4** A problem drawn for this lesson (`python -m bughunt practice --lesson 3 --seed 20`
#   prints the same one; other seeds give others):

# %%
replay.TRANSFER

# %%
prediction_3_1 = None        # a number of events
prediction_3_4 = None        # a number of events

# %%
check("3.1", prediction_3_1)
check("3.4", prediction_3_4)

# %% [markdown]
# Once you have checked: the pure log and a snapshot every 4 pages on a 20-page site (bugs on
# pages 3, 7, 10, 15 and 19). Which of the two grows with the length of the run?

# %%
replay.replay_table({"pure log, 20 pages": replay.LONG_SNAP4.replace(snapshot_every=0),
                     "snapshot every 4, 20 pages": replay.LONG_SNAP4})

# %% [markdown]
# ## Writing the snapshot: temp file, fsync, rename, fsync
#
# Decide first, true or false:

# %%
quiz("Q3.3")

# %%
answer_q3_3 = None           # True or False

# %% [markdown]
# A snapshot overwrites the state as a whole, so a kill in the middle of writing it must not
# leave half a state behind. Every file the lab's stores write goes through one object, the
# **I/O door** (`Door`): the one place that opens, writes, fsyncs and renames, so that
# fsync policy and the lab's fault injection apply to every write. Its atomic write:

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

# %% [markdown]
# Why fsync at all? Because a byte passes through three places on its way to the disk (the
# process's buffer, the kernel's page cache, the disk itself), and a kill -9 and a power cut take
# different ones: [lesson 6](06_kill9_vs_power_loss.ipynb) draws them and measures both.
#
# What a power cut right after the write can leave, for three ways of writing the same file. Each
# way is journaled and put through lesson 8's power-loss simulation: at the cut it builds the two
# extreme disk states (every unsynced write and rename reached the disk, or none did) and a seeded
# sample of mixes in between; where nothing is left unsynced, they are all one state.

# %%
replay.power_cut_after_write()

# %%
replay.CLAIMS.say("only_the_full_sequence_survives_a_power_cut")

# %% [markdown]
# Without the fsync before the rename, the new name can point at data that never reached the disk;
# without the directory fsync, the old file can come back. Lessons 5, 6 and 8 go further.

# %%
check("Q3.3", answer_q3_3)

# %% [markdown]
# ## Codex: the rollout is the log, compaction is the snapshot
#
# Codex, OpenAI's open-source coding agent, keeps each conversation as a rollout
# (`rollout-….jsonl`): an append-only JSONL event log.
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
# the newer compaction included, so nothing the newer one changed is skipped. On resume Codex still
# reads and parses the **whole** JSONL file (`RolloutRecorder::load_rollout_items` reads it line by
# line): the checkpoint bounds how much history is replayed, not how much is read.
#
# *Sources, and what is the lab's reading.* Releases such as openai/codex at commit
# [`023cedaa`](https://github.com/openai/codex/blob/023cedaa25c056edf87e8be2c04190c84c67f966/codex-rs/core/src/codex/rollout_reconstruction.rs)
# (`codex-rs/core/src/codex/rollout_reconstruction.rs`, `reconstruct_history_from_rollout`) do
# only the reverse scan; the conclusion holds there too. The two steps and the quoted comment are
# the lab's reading of later revisions, as public copies of the repository show them; line numbers
# move between versions, so search for `select_input_compaction`.
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
# Decide first, true or false:

# %%
quiz("Q3.1")

# %%
answer_q3_1 = None           # True or False

# %% [markdown]
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

# %%
replay.CLAIMS.say("a_damaged_snapshot_falls_back_to_the_whole_log")

# %%
check("Q3.1", answer_q3_1)

# %% [markdown]
# A damaged *log* is a different matter: a record that fails its checksum, or a log shorter than
# the snapshot says, makes recovery refuse and change nothing.
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
# This lesson asked its three statements before the sections that answer them: Q3.2 before the
# sweeps, Q3.3 before the atomic write, Q3.1 before the damaged snapshot. `quiz("Q3.1")` shows one
# again. For more configurations to predict, each judged by a live run:
# `python -m bughunt practice --lesson 3 --seed S` with any seed S.

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
# - [openai/codex](https://github.com/openai/codex): `codex-rs/core/src/codex/rollout_reconstruction.rs`
#   at commit `023cedaa` (the reverse scan); search later revisions for `select_input_compaction`
#   and `replacement_history`.
#
# ---
# <!-- lesson: nav -->
