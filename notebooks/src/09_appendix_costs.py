# %% [markdown]
# # Appendix · What durability costs on this machine
#
# [← Lesson 8: beyond the source text](08_beyond.ipynb) · [Start here](00_start_here.ipynb)
#
# **The question.** Lesson 6 put the source text's macOS medians for a log append, an append with
# fsync and an atomic snapshot beside this machine's. What do they cost here, and how close does
# the lab's own code come to the least code that could do the same durable work? And how does
# recovery grow as the log grows?
#
# Every number is measured now, on this machine, so the tables are not checked by the tests (they
# change from run to run); the shapes are what to look at. `make bench` runs the same measurements
# at full size (up to 100,000 pages) and writes them to `bench-results/bench.csv`.

# %%
# %matplotlib inline
import pandas as pd

from bughunt.lab import costs

pd.options.display.width = 140
pd.options.display.max_colwidth = 80

# %% [markdown]
# ## One checkpoint write, against the floor
#
# For each way of writing a checkpoint, the lab's code (through its one I/O door: serialization with
# a CRC-32, the write, the fsync policy, latency bookkeeping) is timed against **the floor**: the
# least code that does the same durable work. For a log append that is `json.dumps` of the same
# record and one `os.write` (plus `os.fsync`); for a snapshot, a temp file, write, (fsync,) replace
# (and directory fsync); for SQLite in WAL mode, one page-sized append (plus fsync). Both are measured
# in alternating rounds, so machine noise hits them alike, and the ratio is what counts.

# %% tags=["nbval-ignore-output"]
writes = costs.write_costs()
writes[["section", "case", "value", "unit", "reference", "ratio"]]

# %%
costs.plot_write_costs(writes)

# %% [markdown]
# Where fsync is involved, it usually dominates everything else, often by two orders of magnitude
# (compare each row with its neighbour without fsync): the code around it hardly matters. Without
# fsync, a log append takes a few microseconds, and the lab's CRC and bookkeeping cost a fraction of
# that (the "where the time goes" rows). SQLite with `synchronous=NORMAL` pays for its b-tree and its
# write-ahead-log frame on every commit, several times a bare append; with `FULL` the fsync hides
# that too.
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
# a real worker resumes it: it reports its own recovery time and peak memory. A pure event log must
# replay every event; with a snapshot every 100 pages, recovery reads the snapshot and only the log
# after it, so its time and memory stay flat.

# %% tags=["nbval-ignore-output"]
runs = costs.recovery()
runs

# %%
costs.plot_recovery(runs)

# %% [markdown]
# The snapshot bounds both the replay and the memory: what it costs depends on the snapshot's size,
# not on the log's length. `make bench` repeats this up to 100,000 pages and prints the ratio.
#
# ## Further reading
#
# - SQLite, "Write-Ahead Logging", and what `synchronous=NORMAL` and `FULL` give up or pay for:
#   https://www.sqlite.org/wal.html and https://www.sqlite.org/pragma.html#pragma_synchronous
# - fsync(2), Linux man-pages: https://man7.org/linux/man-pages/man2/fsync.2.html
#
# ---
# [← Lesson 8: beyond the source text](08_beyond.ipynb) · [Start here](00_start_here.ipynb)
