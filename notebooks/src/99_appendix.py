# %% [markdown]
# <!-- lesson: header -->
#
# **The question.** Lesson 6 put the source text's macOS medians for a log append, an append with
# fsync and an atomic snapshot beside this machine's. What do they cost here, and how close does
# the lab's own code come to the least code that could do the same durable work? And how does
# recovery grow as the log grows?
#
# Every number is measured now, on this machine, so the tables are not compared by the tests (they
# change from run to run); the shapes are what to look at, and each sentence that states a finding
# is checked on the run it describes (`python -m bughunt claims --lesson 99`). `make bench` runs the
# same measurements at full size (up to 100,000 pages) and writes them to
# `bench-results/bench.csv`.

# %% [markdown]
# <!-- lesson: about -->
#
# **Contents.** [One checkpoint write](#One-checkpoint-write,-against-the-floor) ·
# [Recovery against log length](#Recovery-against-log-length) ·
# [Further reading](#Further-reading) · [Sources](#Sources) · [Glossary](glossary.md)

# %%
# %matplotlib inline
import pandas as pd

from bughunt.lab.lessons import appendix as costs

pd.options.display.width = 140
pd.options.display.max_colwidth = 80

# %% [markdown]
# ## One checkpoint write, against the floor
#
# For each way of writing a checkpoint, the lab's code (through its one I/O door: serialization with
# a CRC-32, the write, the fsync policy, latency bookkeeping) is timed against **the floor**: the
# least code that does the same durable work. For a log append that is `json.dumps` of the same
# record and one `os.write` (plus `os.fsync`); for a snapshot, a temp file, write, (fsync,) replace
# (and directory fsync); for lesson 7's SQLite task store, plain `sqlite3` executing the same
# `UPDATE` in the same mode (WAL, the same `synchronous`), so the ratio measures the runtime (its
# checks and its explicit transaction), not SQLite. Both are measured in alternating rounds, so
# machine noise hits them alike, and the ratio is what counts.

# %% tags=["nbval-ignore-output"]
writes = costs.measured_write_costs()
costs.write_cost_table(writes)

# %%
costs.plot_write_costs(writes)

# %% tags=["nbval-ignore-output"]
costs.CLAIMS.say("fsync_multiplies_each_write", "fsync_dwarfs_the_code",
                 "crc_is_a_fraction_of_an_append", "task_store_costs_more_than_plain_sqlite")

# %% [markdown]
# How much fsync costs depends on the disk under the temporary directory (a RAM-backed `/tmp` makes
# it almost free, a busy disk dear), which is why the figures are given as ratios.
#
# The diamonds are the source text's macOS medians, on the rows that time the same kind of write:
# the two appends. Its snapshot (temp file + fsync + rename) had no directory fsync, so it sits on
# no row here; lesson 6 times that kind beside it. Its fsync figures came from macOS, where
# fsync does not make the drive flush its cache (`F_FULLFSYNC` does), so they are not comparable
# one to one.
#
# ## Recovery against log length
#
# A synthetic finished run of N pages is written directly (the same bytes a worker would write), and
# a real worker resumes it: it reports its own recovery time and peak memory.

# %% tags=["nbval-ignore-output"]
runs = costs.recovery_runs()
costs.recovery_table(runs)

# %%
costs.plot_recovery(runs)

# %% tags=["nbval-ignore-output"]
costs.CLAIMS.say("full_replay_grows_with_the_log", "snapshot_recovery_grows_slowly",
                 "snapshot_bounds_memory")

# %% [markdown]
# The snapshot bounds the replay: what recovery costs then depends on the snapshot's size and the
# log after it, not on the whole log's length. `make bench` repeats this up to 100,000 pages and
# prints the ratio.
#
# ## Further reading
#
# - SQLite, what `synchronous=NORMAL` and `FULL` give up or pay for:
#   [Write-Ahead Logging](https://www.sqlite.org/wal.html) and
#   [`PRAGMA synchronous`](https://www.sqlite.org/pragma.html#pragma_synchronous)
# - [fsync(2)](https://man7.org/linux/man-pages/man2/fsync.2.html), Linux man-pages
#
# ## Sources
#
# The lab is built from two source texts, lesson texts in Chinese: the BugHunt `kill -9` experiment
# (its table of figures is what lesson 0 reproduces, with Codex's rollout design), and crash
# recovery in a durable task runtime (lesson 7). Everything else it cites is public. Here is every
# lesson's Further reading in one list, each source once with the lessons that cite it, read from
# the lessons themselves:

# %% tags=["nbval-ignore-output"]
costs.sources()

# %% [markdown]
# ---
# <!-- lesson: nav -->
