# %% [markdown]
# # Lesson 3 · Replay vs snapshot: how is the state put back together?
#
# [← Lesson 2: checkpoint granularity](02_granularity.ipynb) · [Start here](00_start_here.ipynb) · [Lesson 4: the danger window →](04_danger_window.ipynb)
#
# **The question.** The worker keeps its progress on disk. After `kill -9`, how does the resumed
# worker rebuild its state from those files, and how much work is that? We compare replaying an
# event log (重放事件日志) with starting from a snapshot (快照) and replaying only what follows it.
#
# **Recap of lesson 2.** Finer checkpoints lose less and write more: a snapshot after every page cut
# the model calls paid twice from 6.51 to 0.76 per crash in the lesson.

# %%
# %matplotlib inline
import pandas as pd

from bughunt.experiment import crash_points
from bughunt.lab import replay
from bughunt.lab.exercises import check, solution

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
# ## How much does recovery replay?
#
# The lesson's experiment: kill the worker at each of the 54 crash points (intents on), resume it,
# and count the events recovery applied. Two designs, both with intents, the idempotency key and
# atomic writes: a pure event log, and the same log with a snapshot every 4 pages. Each crash point
# is a real worker killed by SIGKILL and a second process that resumes it; 108 pairs in all.

# %%
df = replay.replay_sweeps()
replay.summary_table(df)

# %% [markdown]
# The lesson measured an average of 7.26 and a maximum of 15 replayed events for the pure log, and
# 1.98 and 4 with a snapshot every 4 pages; "avg replayed" and "max replayed" are this machine's.
# "correct runs" counts the crash runs that recovered correctly: no duplicate report, none lost,
# and the three-way check passed. The averages are plain counts:

# %%
print(replay.explain_averages(df))

# %%
replay.plot_replayed(df)

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
#
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
# down) snapshot writes per clean run on top of the 15 log appends, crash or no crash. A snapshot
# is also the more expensive write: a temp file, a rename and (with fsync on) two fsyncs, against
# one appended line (lesson 6 measures both on this machine). Replaying 15 small events costs
# almost nothing here; in a real agent, whose log holds every message and tool result of a long
# session, it does not.
#
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
#
# So "step 1 returned `None`" does not mean "the whole history is replayed". Step 2 may start the
# history from an older compaction than the newest, but it then replays everything after that base,
# the newer compaction included, so nothing the newer one changed is skipped.
#
# **Codex changes fast.** Older releases have no `select_input_compaction`: they do one reverse
# scan, which keeps the newest surviving compaction with `replacement_history` as the base and
# replays the suffix after it. The conclusion, that a `None` is not a full replay, holds in both.
# The line numbers the source text cites have moved between versions: search
# [openai/codex](https://github.com/openai/codex) for the function names instead. And on resume
# Codex still reads and parses the **whole** JSONL file: the checkpoint bounds how much history is
# replayed, not how much is read.
#
# **Our store** is the same idea, one step further: the snapshot records the byte offset of the log
# it covers (`log_offset`), so recovery decodes and applies only the lines after that offset. (It
# still reads the file's bytes, and checks that the offset falls on a line boundary.) A worker
# killed inside page 8's commit, the worst point for N = 4:

# %%
replay.snapshot_coverage(crash_point="p8.mid_commit")

# %% [markdown]
# **Only the newest snapshot may bound replay.** That is Codex's rule: a newer compaction may have
# changed what an older one describes, so an older one cannot stand in for it where the scan is
# cut. Our store keeps a single snapshot file, replaced atomically, so there is no older one to try:
# if the snapshot is unusable, recovery replays the whole log from the first event and reports
# `snapshot_fallback = "log"`. That is only possible because the log is never cut: every event
# since the start is still in it. Below, the same crash three times; before resuming, the snapshot is left
# intact, cut in half, or has one digit changed (which still parses, but fails its checksum). The
# damage is done from outside, as a bad disk or a careless copy would: `kill -9` cannot tear this
# snapshot, since it is written to a temp file and renamed into place.

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
# - A pure event log is recovered by replaying every event: the later the crash, the longer the
#   replay (lesson: avg 7.26, max 15 events over 54 crash points).
# - A snapshot every N pages bounds the replay to the events of fewer than N pages, plus their
#   intents (lesson, N = 4: avg 1.98, max 4), at the price of a whole-state write every N pages.
# - Replay and snapshot reach the same state; they differ in the work done at recovery and on every
#   run.
# - Only the newest snapshot may bound the replay. If it is unusable, recovery starts further back
#   and replays everything after that start; our store replays the whole log. Codex's resume
#   follows the same rule, and still reads the whole rollout.
#
# ## Exercises
#
# **3.1** With a snapshot every 5 pages, what is the largest number of events a recovery replays
# over all 54 crash points? Work it out from the event log above, then check it (the check kills 54
# workers for real).

# %%
answer_3_1 = None
check("3.1", answer_3_1)

# %% [markdown]
# **3.2** With a snapshot every 4 pages, how many events does the resume replay after a crash at
# `p7.after_submit` (page 7, its report filed, the page not yet committed)?

# %%
answer_3_2 = None
check("3.2", answer_3_2)

# %% [markdown]
# Stuck? `solution("3.1")` prints a worked answer.
#
# ---
# [← Lesson 2: checkpoint granularity](02_granularity.ipynb) · [Start here](00_start_here.ipynb) · [Lesson 4: the danger window →](04_danger_window.ipynb)
