# %% [markdown]
# <!-- lesson: header -->
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
writes = costs.write_cost_table()
writes[["section", "case", "value", "unit", "reference", "ratio"]]

# %%
costs.plot_write_costs(writes)

# %% [markdown]
# Where fsync is involved, it usually dominates everything else, often by two orders of magnitude
# (compare each row with its neighbour without fsync): the code around it hardly matters. Without
# fsync, a log append takes a few microseconds, and the lab's CRC and bookkeeping cost a fraction of
# that (the "where the time goes" rows). The task store with `synchronous=NORMAL` checks every
# record before it writes it and opens an explicit transaction: about twice plain `sqlite3` doing
# the same statement; with `FULL` the fsync hides that.
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
# ## Sources
#
# The lab is built from two source texts, lesson texts in Chinese: the BugHunt `kill -9` experiment
# (its table of figures is what lesson 0 reproduces, with Codex's rollout design), and crash
# recovery in a durable task runtime (lesson 7). Everything else it cites is public:
#
# - Codex: [openai/codex](https://github.com/openai/codex), its rollout recorder and resume code
#   (lessons 3 and 4); the function names are stable enough to search for, the line numbers are
#   not.
# - The system calls: [fsync(2)](https://man7.org/linux/man-pages/man2/fsync.2.html),
#   [rename(2)](https://man7.org/linux/man-pages/man2/rename.2.html),
#   [flock(2)](https://man7.org/linux/man-pages/man2/flock.2.html),
#   [write(2)](https://man7.org/linux/man-pages/man2/write.2.html); Apple's fsync(2) and
#   `F_FULLFSYNC` (macOS: `man 2 fsync`); Linux's page-by-page buffered write,
#   `generic_perform_write` in [mm/filemap.c](https://github.com/torvalds/linux/blob/master/mm/filemap.c).
# - SQLite: [WAL](https://www.sqlite.org/wal.html),
#   [PRAGMA synchronous and application_id](https://www.sqlite.org/pragma.html),
#   [atomic commit](https://www.sqlite.org/atomiccommit.html),
#   [how to corrupt a database](https://www.sqlite.org/howtocorrupt.html).
# - Crash testing: Pillai et al., "All File Systems Are Not Created Equal" (ALICE), OSDI 2014;
#   Mohan et al., "Finding Crash-Consistency Bugs with Bounded Black-Box Crash Testing"
#   (CrashMonkey), OSDI 2018; [LazyFS](https://github.com/dsrhaslab/lazyfs); "PostgreSQL's fsync()
#   surprise", [LWN, 2018](https://lwn.net/Articles/752063/).
# - Locks and leases: Martin Kleppmann, ["How to do distributed locking"](https://martin.kleppmann.com/2016/02/08/how-to-do-distributed-locking.html), 2016.
# - Frameworks (lesson 10): [LangGraph persistence](https://langchain-ai.github.io/langgraph/concepts/persistence/),
#   [DBOS Transact](https://docs.dbos.dev/).
# - The model API (lesson 11): [openai-python](https://github.com/openai/openai-python), its README's
#   "Retries" and "Timeouts".
#
# ---
# <!-- lesson: nav -->
