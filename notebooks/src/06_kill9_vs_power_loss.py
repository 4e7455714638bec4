# %% [markdown]
# # Lesson 6 · kill -9 is not power loss: what do flush and fsync buy, and what do they cost?
#
# [← Lesson 5: torn writes](05_torn_writes.ipynb) · [Start here](00_start_here.ipynb) · [Lesson 7: durable tasks →](07_durable_tasks.ipynb)
#
# **The question.** Every experiment so far killed the worker with `kill -9`, and the source text's
# event log recovered correctly at all 54 crash points without a single fsync. Is fsync then useless?
# What does each step towards the disk protect against, and what does it cost per write?
#
# **Recap of lesson 5.** A checkpoint can be torn while it is written. Snapshots go to a temp file and
# are renamed atomically; the log reader skips a torn line, and the writer repairs a missing newline
# at the tail before it appends, so the next record is not glued onto the fragment.

# %% [markdown]
# ## Three places a byte can be
#
# A line the worker writes passes through three places on its way to the disk:
#
# 1. **the process's user-space buffer** (用户态缓冲区): Python's `open()` collects small writes in
#    memory inside the process and hands them to the kernel later, on `flush()`, on `close()`, or
#    when the buffer is full;
# 2. **the kernel's page cache** (页缓存): after `write()` returns, the bytes belong to the kernel,
#    which writes them to the disk in its own time, whatever happens to the process;
# 3. **the storage device** (the disk): `fsync(fd)` makes the kernel write the file's data and
#    metadata out and wait until the device reports them stored. A file's *name* is not part of
#    the file: it is an entry in its directory, and fsync(2) says so: "Calling fsync() does not
#    necessarily ensure that the entry in the directory containing the file has also reached disk.
#    For that an explicit fsync() on a file descriptor for the directory is also needed." So a
#    new file, or a file renamed into place, needs a second fsync, of its directory.
#
# `kill -9` destroys the process and nothing else, so it takes only what is still in place 1.
# A kernel crash or a power cut (断电) also takes place 2. Hence the source text's rule:
# **surviving kill -9 only needs the data handed to the kernel; surviving power loss or a kernel
# crash needs fsync** (of the file, and of its directory when the name is new).

# %%
# %matplotlib inline
import pandas as pd

from bughunt.lab import durability
from bughunt.lab.exercises import check, solution

pd.options.display.width = 140
pd.options.display.max_columns = 20
pd.options.display.max_colwidth = 70

# %% [markdown]
# ## 1. kill -9 at every crash point, with and without fsync
#
# The source text's log mode (event log, intents, idempotency key) never calls fsync, and all 54
# kill -9 runs recovered correctly. We repeat that sweep live, and then the same sweep with fsync
# after every checkpoint write (and a directory fsync after every rename or new file). Each of the
# 108 crash points below is a real worker killed with SIGKILL and a second worker resuming it.

# %%
df = durability.kill9_sweeps()
durability.kill9_table(df)

# %% [markdown]
# Point by point, does fsync change anything that a kill -9 run can show?

# %%
print(durability.same_outcome(df))

# %%
durability.plot_kill9(df)

# %% [markdown]
# Identical. That is not evidence that fsync is useless; it is evidence that **kill -9 cannot see
# it**. Every record the worker wrote was in the page cache before the kill, with or without fsync,
# and the kernel kept it. A sweep of process kills can never catch a missing fsync.
#
# The wall time of the two sweeps (this cell's output changes from run to run, so CI does not check
# it). A crash+resume pair starts two Python processes; the fsyncs it adds, one per checkpoint write,
# are usually small beside that, unless the disk is busy:

# %% tags=["nbval-ignore-output"]
durability.sweep_times(df)

# %% [markdown]
# ## 2. The buffer inside the process
#
# The other side of the rule: Python's `open()` has a user-space buffer. `f.write()` without
# `flush()`, then `kill -9`, and the line is gone. The source text measured an unflushed file at
# 0 bytes and a flushed one at 12 bytes (the table's "source text" column).
# `bughunt/bufferdemo.py` is a tiny program that does exactly that and then kills itself with
# SIGKILL (standard library only; read it, it is short):
#
# ```
# python -m bughunt.bufferdemo line.txt            # f.write() only
# python -m bughunt.bufferdemo line.txt --flush    # f.write() + f.flush()
# ```
#
# We run it each way in a temp directory and look at what is left on disk:

# %%
buffers = durability.buffer_table()
buffers

# %%
durability.plot_buffer(buffers)

# %% [markdown]
# - Without `flush()` the 12 bytes were still inside the process: gone.
# - `flush()` hands them to the kernel with one `write()`: they survive kill -9. `os.write()` on a
#   raw descriptor has no Python buffer at all, which is why the lab's I/O door (`bughunt/diskio.py`)
#   writes that way. Adding fsync changes nothing under kill -9.
# - The last row: with many lines and no flush, the buffer empties itself whenever it fills up, so
#   the lines written before its last automatic flush survive and the rest are lost. How many depends
#   on the buffer's size, not on anything the program decided: an unflushed log keeps an arbitrary
#   prefix. (A buffer that fills itself to the last byte before writing, as C's stdio does, can split
#   one record across two `write()` calls: one way a torn line is born, lesson 5.)

# %% [markdown]
# ## 3. Codex: a cheap hot path and a thorough cold path
#
# Codex keeps each session in a rollout (a JSONL event log). **Every line** is written with
# `write_all` + `flush` on a `tokio::fs::File`, and never fsynced. Tokio's documentation of `File`
# says that flush "does not ensure that the file has been fully written to disk; the operating system
# might keep the changes around in an in-memory buffer. See the `sync_all` method". So the rollout
# survives kill -9, but its last lines are not guaranteed after a power cut.
#
# **Migrating** a rollout to a new format is rare, and there Codex pays for everything: it writes a
# staged file, calls `sync_all`, renames it over the rollout, then fsyncs the parent directory; its
# migration journal (an empty marker file) is fsynced together with its directory too. Hot path
# cheap, cold path thorough (热路径不 fsync，冷路径做足):
#
# | path | what Codex does | kill -9 | power cut |
# |---|---|---|---|
# | every rollout line (hot) | `write_all` + `flush`, no fsync | survives | the last lines may be lost |
# | migration (cold) | staged file + `sync_all` + rename + parent-directory fsync | survives | survives |
#
# One comment in that code promises more than the code does: the writer's `Flush` command is
# documented as making the items "durably persisted", but it only flushes, which hands the bytes to
# the operating system. A comment is a claim; a kill (or, in lesson 8, a simulated power cut) tests it.
#
# The source text cites these places by file and line number (`recorder.rs`, `rollout_migration.rs`,
# `publish.rs`); line numbers move from one Codex version to the next, so look them up by name
# (`write_all`, `sync_all`, the parent-directory fsync) in the version you read.

# %% [markdown]
# ## 4. What each kind of write costs
#
# The source text measured, on macOS, the median time of one write for three kinds of write. Its
# figures, with its own sentence:

# %%
print(durability.source_sentence())
durability.source_figures()

# %% [markdown]
# We time the same kinds here, and two more, through the lab's own I/O door, which times every
# durable write (`Door.latencies_ns`): a few hundred writes of each kind in a temp directory. The
# records are the worker's own bytes: its last `page_done` log line and its final snapshot file.
# The two snapshot rows with fsync differ only in the directory fsync: the source text's
# `atomic_write` has none, the lab's has one. (If the system's temp directory lives in memory, as
# tmpfs does on some Linux systems, the writes are timed in the current directory instead: on tmpfs
# fsync has no disk to wait for.) Times are in microseconds (µs, a thousandth of a millisecond).

# %%
recs = durability.worker_records()
print(f"log line: {len(recs['page_done'])} bytes  {recs['page_done'][:60]!r}...")
print(f"snapshot: {len(recs['snapshot'])} bytes")
lat = durability.measure_latencies()

# %% [markdown]
# Medians and 99th percentiles (timings change from run to run, so CI does not check this table;
# "x append" is how many plain appends one such write is worth), and what the writes went to:

# %% tags=["nbval-ignore-output"]
print(durability.what_was_measured(lat))
durability.latency_table(lat)

# %%
durability.plot_latencies(lat)

# %% [markdown]
# Why figures differ from machine to machine, and what an fsync timing can and cannot tell:
#
# - **A plain append is a copy into the page cache**: by far the cheapest row on every machine.
#   Everything with an fsync is much slower, because it waits for the device.
# - **A device's volatile write cache.** Many drives keep written data in their own memory (a
#   volatile write-back cache) and report the write complete before it is on the non-volatile
#   medium; a power cut loses what is still in that cache. An operating system that wants
#   durability must then either send the drive a *cache flush* command (the drive writes out its
#   whole cache, and answers when done) or mark a write *Force Unit Access* (FUA: that one write
#   is reported complete only once it is on the medium). On Linux, when a device declares a
#   volatile write cache, fsync does one of the two after writing the file's data; a device that
#   declares none is trusted as it is. The line printed above the table says what this machine's
#   device declares. The fsync timing therefore includes a flush when the device asks for one, and never
#   proves more than the device's answer.
# - **macOS fsync does not flush the drive's cache.** Apple's fsync(2): "while fsync() will flush
#   all data from the host to the drive (i.e. the "permanent storage device"), the drive itself may
#   not physically write the data to the platters for quite some time", and "the F_FULLFSYNC fcntl
#   asks the drive to flush all buffered data to permanent storage". The source text timed plain
#   fsync on a Mac (it says so itself), so its fsync rows leave out the wait that a flush of the
#   drive's cache would add.
# - **On a virtual disk**, which that line names when it finds one, the device is emulated by a
#   hypervisor: the guest's flush goes to the hypervisor, and what happens to it there is the
#   hypervisor's setting. Firecracker's default block cache mode, for example, advertises flush to
#   the guest but "will just acknowledge the request without actually performing any flushing on
#   the host side". There, an fsync timing measures the round trip to the hypervisor, not a disk;
#   other work on the same host shows up as the long whiskers and large p99 values.
# - **A snapshot is not free even without fsync.** Creating or truncating a file and renaming it are
#   metadata changes in the file system's journal; on Linux ext4 a file replaced by rename also has
#   its data written out early (the `auto_da_alloc` heuristic, on by default). Compare with the
#   append row.
# - **The directory fsync is one more wait.** The two snapshot rows with fsync differ by it alone.
#   Without it the rename may be undone by a power cut (the old snapshot comes back), never by
#   kill -9.
#
# That is the hot/cold split in numbers: a log line per event can afford a flush, not an fsync; a
# rare migration or a snapshot every N pages can afford the full tmp + fsync + rename + dir fsync.

# %% [markdown]
# ## 5. What kill -9 cannot show
#
# A process kill leaves the page cache alone, so this lesson cannot demonstrate a power cut; lesson 8
# will simulate one (a disk that drops what was not fsynced). What each step survives, with the kill -9
# column taken from the measurements above:

# %%
durability.survival_table(buffers, df)

# %% [markdown]
# \* if the device honours the cache flush that fsync sends it (on macOS, only `F_FULLFSYNC`
# sends one). "Kernel panic" and "power cut" follow from what fsync(2) promises: a new file's name
# is in its directory, so the file may be missing after a crash unless the directory was fsynced
# too. Lesson 8 simulates these cuts.
#
# The second row is the source text's log and Codex's rollout: correct under every kill, exposed to a
# power cut. Whether that is acceptable depends on what a lost line costs: for an agent's transcript,
# redoing a few model calls; for a payment, much more.

# %% [markdown]
# ## 6. How we know a recovery was correct
#
# The method behind every number in this lab:
#
# - **Exhaustive crash points, not random kills.** The worker is killed at every crash point of the
#   source text's scheme (54 here), each one deterministic, so a narrow danger window cannot be
#   missed by bad luck (lesson 4).
# - **The three-way check** (三方一致): the tracker's reports (the outside world), the resumed
#   worker's result in memory, and a fresh rebuild from disk by code that did not run the worker must
#   agree. The rebuild catches what is right now and wrong at the next recovery (lesson 5).
#
# The three witnesses at the danger-window points (report filed, page not yet committed), both fsync
# policies:

# %%
cols = ["fsync", "crash_point", "tracker_pages", "memory_findings", "rebuild_ok",
        "three_way_check"]
df.loc[df["label"] == "after_submit", cols].reset_index(drop=True)

# %% [markdown]
# ## Interview summary (面试要点)
#
# **In one breath.** Resuming after a crash has three layers.
#
# 1. *How state is kept*: replay an event log, load a snapshot, or load a snapshot and replay the log
#    suffix after it. The finer the checkpoints, the less is lost and the more is written
#    (lessons 2 and 3).
# 2. *Side effects*: record the intent first, then act; on recovery redo with the same deterministic
#    idempotency key and let the external system deduplicate, so the effect happens once: effectively
#    once (效果上恰好一次) (lesson 4).
# 3. *A checkpoint damaged while being written*: write a snapshot to a temp file and rename it
#    atomically; the log reader skips bad lines and the writer repairs the tail's newline (lesson 5);
#    surviving kill -9 only needs the kernel, surviving power loss needs fsync of the file and of
#    its directory (this lesson).
#
# It is tested not by random kills but by killing at every crash point, and judged by the three-way
# check: tracker == in-memory result == fresh rebuild from disk.
#
# **Follow-up questions (追问).**
#
# 1. *Why not kill it at random a few dozen times?* The danger window is narrow. In the source
#    text, 40 random kills (39 landed) hit one duplicate report, by luck; the exhaustive sweep of
#    51 points finds all 6 every time. Zero failures in n random kills only bound the failure rate below about
#    3/n (the rule of three: 3/39 ≈ 7.7%).
# 2. *How do you judge that a recovery is correct?* Three witnesses must agree: the tracker (no report
#    duplicated, none missing), the resumed run's in-memory result, and a fresh rebuild from disk. The
#    last catches the bugs that are right now and wrong at the next recovery, like the missing newline.
# 3. *Does Codex re-run an interrupted tool?* No. A call without an output gets a synthetic "aborted"
#    output in the prompt (never written to the rollout), and the model decides whether to call again.
#    Then the tool's own idempotency is what matters.
# 4. *What is not covered?* A crash during recovery (chained crashes), two resumers of the same task
#    at once (it needs a lock: Codex has `writer_lock.rs`; this lab's worker holds an `flock` on
#    `run.lock`), a full disk, and a real power cut. Lesson 8 takes these on.

# %% [markdown]
# ## Try it
#
# The panel re-runs the real experiment. Move the **crash point** slider to kill and resume at one
# point (`p7.after_submit` is page 7 right after the report: the danger window). Switch **fsync** to `always`
# and press **Run sweep**: the verdicts stay the same, while the checkpoint writes in the lower plot
# (from a clean run with the same settings, one dot per write) move far to the right.
# Try a **snapshot every** 4 pages, or the `snapshot` store, to see snapshot writes appear, and a
# `torn` or `no-newline` **write mode** to see verdicts that fsync cannot fix either.

# %% tags=["panel", "nbval-ignore-output"]
p = durability.panel()
p.show()

# %% [markdown]
# ## What to remember
#
# - A kill -9 takes only what is inside the process. A line still in Python's buffer is lost (the
#   table in section 2 shows what was left of it); once flushed or written with `os.write`, the
#   kernel keeps it.
# - fsync is for kernel crashes and power cuts, and a kill -9 sweep cannot see it: the same verdict
#   at every crash point with and without it.
# - fsync is expensive: compare the medians above. So flush on the hot path, and pay for
#   tmp + fsync + rename + directory fsync on the rare, cold path, as Codex does.
# - A rename is atomic, not durable: without a directory fsync it may be undone by a power cut.
# - Comments and docs can overpromise ("durably persisted"); test the claim with the failure it is
#   about.
#
# ## Exercises
#
# **6.1** A program writes a 12-byte line and is killed by kill -9 right after. Which of these keep
# the whole line in the file? (a) `f.write()` without `flush()`; (b) `f.write()` then `f.flush()`;
# (c) `os.write()` on a raw descriptor; (d) `f.write()`, `f.flush()`, `os.fsync()`. Answer with a set
# of letters, e.g. `{"a", "d"}`. The check runs each one as a real process.

# %%
answer_6_1 = None
check("6.1", answer_6_1)

# %% [markdown]
# **6.2** On this machine, how many times slower is one append + fsync than one plain append (the
# ratio of the medians)? Read it from the table above; the check measures it afresh and accepts an
# answer within a factor of 2.

# %%
answer_6_2 = None
check("6.2", answer_6_2)

# %% [markdown]
# Stuck? `solution("6.1")` prints a worked answer.
#
# ## Further reading
#
# - fsync(2), Linux man-pages: what fsync covers, and the directory fsync a new file needs:
#   https://man7.org/linux/man-pages/man2/fsync.2.html
# - fsync(2), Apple's man page: fsync versus `F_FULLFSYNC` on macOS:
#   https://developer.apple.com/library/archive/documentation/System/Conceptual/ManPages_iPhoneOS/man2/fsync.2.html
# - "Explicit volatile write back cache control", the Linux kernel documentation: cache flush and
#   FUA: https://docs.kernel.org/block/writeback_cache_control.html
# - Firecracker, "Block device caching strategies": what a virtual disk does with a flush:
#   https://github.com/firecracker-microvm/firecracker/blob/main/docs/api_requests/block-caching.md
# - Tokio's `File`: flush does not reach the disk, `sync_all` does:
#   https://docs.rs/tokio/latest/tokio/fs/struct.File.html
# - Pillai et al., "All File Systems Are Not Created Equal" (ALICE), OSDI 2014: how applications
#   lose data across a crash when they skip these steps:
#   https://www.usenix.org/conference/osdi14/technical-sessions/presentation/pillai
#
# ---
# [← Lesson 5: torn writes](05_torn_writes.ipynb) · [Start here](00_start_here.ipynb) · [Lesson 7: durable tasks →](07_durable_tasks.ipynb)
