# %% [markdown]
# <!-- lesson: header -->
#
# **The question.** Every experiment so far killed the worker with `kill -9`, and the source text's
# event log recovered correctly at all 54 crash points without a single fsync. Is fsync then useless?
# What does each step towards the disk protect against, and what does it cost per write?
#
# **Recap of lesson 5.** A checkpoint can be torn while it is written. Snapshots go to a temp file and
# are renamed atomically; the log reader skips a torn line, and the writer repairs a missing newline
# at the tail before it appends, so the next record is not glued onto the fragment.

# %% [markdown]
# <!-- lesson: about -->
#
# **Contents.** [Three places](#Three-places-a-byte-can-be) · [1. The buffer](#1.-The-buffer-inside-the-process) ·
# [2. Every crash point](#2.-kill--9-at-every-crash-point,-with-and-without-fsync) ·
# [Transfer](#Transfer:-the-danger-window-with-fsync) · [3. Codex](#3.-Codex:-a-cheap-hot-path-and-a-thorough-cold-path) ·
# [4. Costs](#4.-What-each-kind-of-write-costs) · [5. What kill -9 cannot show](#5.-What-kill--9-cannot-show) ·
# [Try it](#Try-it) · [What to remember](#What-to-remember) ·
# [Common wrong statements](#Common-wrong-statements) · [Further reading](#Further-reading)

# %%
# %matplotlib inline
import pandas as pd

from bughunt.bufferdemo import write_then_die
from bughunt.diskio import Door
from bughunt.lab import diagrams
from bughunt.lab.judges import check, quiz, solution
from bughunt.lab.lessons import l06_kill9_vs_power_loss as durability
from bughunt.lab.views import show_source

pd.options.display.width = 140
pd.options.display.max_columns = 20
pd.options.display.max_colwidth = 70

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
#    metadata out and wait until the device reports them stored.

# %% [markdown]
# A file's *name* is not part of the file: it is an entry in its directory, and fsync(2) says so:
# "Calling fsync() does not necessarily ensure that the entry in the directory containing the file
# has also reached disk. For that an explicit fsync() on a file descriptor for the directory is
# also needed." So a new file, or a file renamed into place, needs a second fsync, of its directory.
#
# `kill -9` destroys the process and nothing else, so it takes only what is still in place 1.
# A kernel crash or a power cut (断电) also takes place 2. Hence the source text's rule:
# **surviving kill -9 only needs the data handed to the kernel; surviving power loss or a kernel
# crash needs fsync** (of the file, and of its directory when the name is new).

# %% [markdown]
# ## 1. The buffer inside the process
#
# `bughunt/bufferdemo.py` is a tiny program (standard library only) that writes a 12-byte line one
# of four ways and then kills itself with SIGKILL. Its core:

# %%
show_source(write_then_die)

# %% [markdown]
# The source text measured it on its machine: an unflushed file at 0 bytes, a flushed one at
# 12 bytes (本机实测：没 flush 的文件 0 字节，flush 过的 12 字节). It gives no code for it; this is
# the lab's.
#
# **6.1 Predict** before it runs: which of these keep the whole line in the file after the kill?
# (a) `f.write()` without `flush()`; (b) `f.write()` then `f.flush()`; (c) `os.write()` on a raw
# descriptor; (d) `f.write()`, `f.flush()`, `os.fsync()`. A set of letters, e.g. `{"a", "d"}`.

# %%
prediction_6_1 = None        # a set of letters

# %% [markdown]
# We run the program each way in a temp directory (as `python -m bughunt.bufferdemo line.txt
# --flush`, and so on) and look at what is left on disk:

# %%
buffers = durability.buffer_table()
buffers

# %%
check("6.1", prediction_6_1)

# %%
diagrams.plot_byte_places(durability.byte_places_measured(buffers))

# %% [markdown]
# - Without `flush()` the 12 bytes were still inside the process: gone.
# - `flush()` hands them to the kernel with one `write()`: they survive kill -9. `os.write()` on a
#   raw descriptor has no Python buffer at all, which is why the lab's I/O door (`bughunt/diskio.py`)
#   writes that way. Adding fsync changes nothing under kill -9.
# - The last row: with many lines and no flush, the buffer empties itself whenever it fills up, so
#   the lines written before its last automatic flush survive and the rest are lost: an unflushed
#   log keeps an arbitrary prefix. (A buffer that fills itself to the last byte before writing, as
#   C's stdio does, can split one record across two `write()` calls: a torn line, lesson 5.)

# %%
durability.plot_buffer(buffers)

# %% [markdown]
# ## 2. kill -9 at every crash point, with and without fsync
#
# Where the lab's worker calls fsync: every log append goes through the door, which fsyncs only
# when the policy is `always`:

# %%
show_source(Door.append, lines=("t0 = self._clock()", "self._fsync(fd)"))

# %% [markdown]
# The source text's log mode (event log, intents, idempotency key) never calls fsync, and all 54
# kill -9 runs recovered correctly. We repeat that sweep live, then the same sweep with fsync after
# every checkpoint write (and a directory fsync after every rename or new file): 108 real workers
# killed with SIGKILL, each resumed by a second one.
#
# **6.3 Predict:** at how many of the 54 crash points is the verdict different with fsync on?

# %%
prediction_6_3 = None        # a number of crash points

# %%
df = durability.kill9_sweeps()
durability.kill9_table(df)

# %% [markdown]
# Point by point, does fsync change anything that a kill -9 run can show?

# %%
print(durability.same_outcome(df))

# %%
check("6.3", prediction_6_3)

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
# ## Transfer: the danger window with fsync
#
# **6.4** A configuration this lesson has not run: lesson 4's design without the key (a snapshot
# after every page, intents off, idempotency key off), now with **fsync always**. Lesson 4 ran it
# without fsync. Of its 51 crash points, how many file a report twice? Predict, then run the sweep.

# %%
prediction_6_4 = None        # a number of crash points

# %%
twice = durability.duplicates_with_fsync()
print(f"{len(twice)} crash points file a report twice with fsync always: {', '.join(twice)}")

# %%
check("6.4", prediction_6_4)

# %% [markdown]
# fsync makes the checkpoint durable; it does not move it before the report. The danger window is
# about order, and only the key (or an intent with at-most-once recovery) closes it.

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
# cheap, cold path thorough (热路径不 fsync，冷路径做足).

# %% [markdown]
# The source text's summary, as a table:
#
# | path | what Codex does | kill -9 | power cut |
# |---|---|---|---|
# | every rollout line (hot) | `write_all` + `flush`, no fsync | survives | the last lines may be lost |
# | migration (cold) | staged file + `sync_all` + rename + parent-directory fsync | survives | survives |

# %% [markdown]
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
#
# **6.2 Predict:** on this machine, how many times slower is one append + fsync than one plain
# append (the ratio of the medians)? Timings swing, so the check judges by order of magnitude.

# %%
prediction_6_2 = None        # a number: how many times slower

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
check("6.2", prediction_6_2)

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
#   durability must then send the drive a *cache flush* command (the drive writes out its whole
#   cache, and answers when done) or mark a write *Force Unit Access* (FUA: reported complete only
#   once it is on the medium). On Linux, when a device declares a volatile write cache, fsync does
#   one of the two; a device that declares none is trusted as it is. The line printed above the
#   table says what this machine's device declares. An fsync timing never proves more than the
#   device's answer.

# %% [markdown]
# - **macOS fsync does not flush the drive's cache.** Apple's fsync(2): "while fsync() will flush
#   all data from the host to the drive (i.e. the "permanent storage device"), the drive itself may
#   not physically write the data to the platters for quite some time", and "the F_FULLFSYNC fcntl
#   asks the drive to flush all buffered data to permanent storage". The source text timed plain
#   fsync on a Mac (it says so itself), so its fsync rows leave out that wait.
# - **On a virtual disk**, which that line names when it finds one, the device is emulated by a
#   hypervisor: the guest's flush goes to the hypervisor, and what happens to it there is the
#   hypervisor's setting. Firecracker's default block cache mode, for example, advertises flush to
#   the guest but "will just acknowledge the request without actually performing any flushing on
#   the host side". There, an fsync timing measures the round trip to the hypervisor, not a disk;
#   other work on the same host shows up as the long whiskers and large p99 values.

# %% [markdown]
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

# %% [markdown]
# The three witnesses at the danger-window points (report filed, page not yet committed), both fsync
# policies:

# %%
cols = ["fsync", "crash_point", "tracker_pages", "memory_findings", "rebuild_ok",
        "three_way_check"]
df.loc[df["label"] == "after_submit", cols].reset_index(drop=True)

# %% [markdown]
# The source text closes with an interview summary (面试要点) of the whole lab; lesson 13,
# [the closing lesson](13_closing.ipynb), gives it.

# %% [markdown]
# ## Try it
#
# The panel re-runs the real experiment. Move the **crash point** slider to kill and resume at one
# point (`p7.after_submit` is page 7 right after the report: the danger window). Switch **fsync** to
# `always` and press **Run sweep**: the verdicts stay the same, while the checkpoint writes in the
# lower plot (from a clean run with the same settings, one dot per write) move far to the right.
# Try a **snapshot every** 4 pages, or the `snapshot` store, to see snapshot writes appear, and a
# `torn` or `no-newline` **write mode** to see verdicts that fsync cannot fix either.

# %% tags=["panel", "nbval-ignore-output"]
p = durability.panel()
p.show()

# %% [markdown]
# ## What to remember
#
# - A kill -9 takes only what is inside the process. A line still in Python's buffer is lost (the
#   table in section 1 shows what was left of it); once flushed or written with `os.write`, the
#   kernel keeps it.
# - fsync is for kernel crashes and power cuts, and a kill -9 sweep cannot see it: the same verdict
#   at every crash point with and without it. Nor does it close the danger window.
# - fsync is expensive: compare the medians above. So flush on the hot path, and pay for
#   tmp + fsync + rename + directory fsync on the rare, cold path, as Codex does.
# - A rename is atomic, not durable: without a directory fsync it may be undone by a power cut.
# - Comments and docs can overpromise ("durably persisted"); test the claim with the failure it is
#   about.

# %% [markdown]
# ## Common wrong statements
#
# True or false? Decide first; each check then measures and explains.

# %%
quiz("Q6.1")

# %%
answer_q6_1 = None
check("Q6.1", answer_q6_1)

# %%
quiz("Q6.2")

# %%
answer_q6_2 = None
check("Q6.2", answer_q6_2)

# %%
quiz("Q6.3")

# %%
answer_q6_3 = None
check("Q6.3", answer_q6_3)

# %% [markdown]
# Stuck? `solution("6.1")`, `solution("6.4")` or `solution("Q6.3")` prints a worked answer.

# %% [markdown]
# ## Further reading
#
# - [fsync(2)](https://man7.org/linux/man-pages/man2/fsync.2.html), Linux man-pages: what fsync
#   covers, and the directory fsync a new file needs.
# - [fsync(2), Apple's man page](https://developer.apple.com/library/archive/documentation/System/Conceptual/ManPages_iPhoneOS/man2/fsync.2.html):
#   fsync versus `F_FULLFSYNC` on macOS.
# - ["Explicit volatile write back cache control"](https://docs.kernel.org/block/writeback_cache_control.html),
#   the Linux kernel documentation: cache flush and FUA.
# - Firecracker, ["Block device caching strategies"](https://github.com/firecracker-microvm/firecracker/blob/main/docs/api_requests/block-caching.md):
#   what a virtual disk does with a flush.
# - Tokio's [`File`](https://docs.rs/tokio/latest/tokio/fs/struct.File.html): flush does not reach
#   the disk, `sync_all` does.
# - Pillai et al., "All File Systems Are Not Created Equal" (ALICE), OSDI 2014:
#   [usenix.org](https://www.usenix.org/conference/osdi14/technical-sessions/presentation/pillai).
#   How applications lose data across a crash when they skip these steps.
#
# ---
# <!-- lesson: nav -->
