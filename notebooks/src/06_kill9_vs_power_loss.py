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

# %% [markdown]
# **Contents.** [Three places](#Three-places-a-byte-can-be) · [1. The buffer](#1.-The-buffer-inside-the-process) ·
# [2. Every crash point](#2.-kill--9-at-every-crash-point,-with-and-without-fsync) ·
# [Transfer](#Transfer:-a-design-this-lesson-did-not-run) · [3. Codex](#3.-Codex:-a-cheap-hot-path-and-a-thorough-cold-path) ·
# [4. Costs](#4.-What-each-kind-of-write-costs) · [5. What kill -9 cannot show](#5.-What-kill--9-cannot-show) ·
# [6. How we know](#6.-How-we-know-a-recovery-was-correct) · [Try it](#Try-it) ·
# [What to remember](#What-to-remember) · [Common wrong statements](#Common-wrong-statements) ·
# [Further reading](#Further-reading)

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
# Three statements to decide before you read on, true or false (the lesson answers them as it goes;
# each check measures and explains):

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
# **6.1 Predict** before it runs: the same program writes the line **3000 times** with
# `f.write()` (Python's default buffering), never flushes, and is killed right after the last
# write. How many whole lines are in the file afterwards? A number.

# %%
prediction_6_1 = None        # a number of lines

# %% [markdown]
# We run the program each way in a temp directory (as `python -m bughunt.bufferdemo line.txt
# --flush`, and so on): once with one line for each of four ways of writing, and once with 3000
# unflushed lines. What is left on disk:

# %%
buffers = durability.buffer_table()
buffers

# %%
check("6.1", prediction_6_1)

# %%
diagrams.plot_byte_places(durability.byte_places_measured(buffers))

# %%
durability.CLAIMS.say("the_buffer_dies_with_the_process", "an_unflushed_log_keeps_a_prefix",
                      bullets=True)

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
# killed with SIGKILL, each resumed by a second one. The verdict columns split the crash points.
#
# **6.3 Predict:** at how many of the 54 crash points is the verdict different with fsync on?

# %%
prediction_6_3 = None        # a number of crash points

# %%
df = durability.lesson_sweeps()
durability.kill9_table(df)

# %%
check("6.3", prediction_6_3)

# %% [markdown]
# Point by point, does fsync change anything that a kill -9 run can show?

# %%
durability.CLAIMS.say("fsync_changes_nothing_under_kill9")

# %%
durability.plot_kill9(df)

# %% [markdown]
# That is not evidence that fsync is useless; it is evidence that **kill -9 cannot see it**. Every
# record the worker wrote was in the page cache before the kill, with or without fsync, and the
# kernel kept it. A sweep of process kills can never catch a missing fsync.
#
# Nor do these sweeps say what fsync costs. Sweeps keep their run directories in RAM where the
# machine has one (`/dev/shm` on Linux), because a kill -9 leaves the same bytes on any file
# system; there fsync has nothing to wait for. The wall time of the two sweeps and where they ran
# (this output changes from run to run and machine to machine, so the lab's tests do not compare it):

# %% tags=["nbval-ignore-output"]
durability.sweep_times(df)

# %% tags=["nbval-ignore-output"]
durability.CLAIMS.say("where_the_sweeps_ran")

# %% [markdown]
# ## Transfer: a design this lesson did not run
#
# **6.4** A problem drawn for this lesson (`python -m bughunt practice --lesson 6 --seed 5` prints
# the same one; other seeds give others). Predict, then check: the check runs the experiment.

# %%
durability.TRANSFER

# %%
prediction_6_4 = None        # yes or no

# %%
check("6.4", prediction_6_4)

# %% [markdown]
# And lesson 4's own design without the key, swept at every point with fsync always:

# %%
durability.CLAIMS.say("fsync_does_not_close_the_window")

# %% [markdown]
# The danger window is about order, not durability: only the key makes the redo harmless, and at
# most once trades the duplicates for lost reports (lesson 4).

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
# The source text cites these places by file and line number (`recorder.rs`, `rollout_migration.rs`,
# `publish.rs`); the table above is its reading, not a test the lab ran on Codex. Line numbers move
# from one Codex version to the next, so look them up by name (`write_all`, `sync_all`, the
# parent-directory fsync) in the version you read.

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
# **6.2 Predict:** on this machine, how many times slower is one snapshot written the lab's way
# (temp file + fsync + rename + directory fsync) than one plain append (the ratio of the
# medians)? The source text never timed that kind of write. Timings swing, so the check judges by
# order of magnitude.

# %%
prediction_6_2 = None        # a number: how many times slower

# %%
recs = durability.worker_records()
print(f"log line: {len(recs['page_done'])} bytes  {recs['page_done'][:60]!r}...")
print(f"snapshot: {len(recs['snapshot'])} bytes")
lat = durability.lesson_latencies()

# %% [markdown]
# Medians and 99th percentiles (timings change from run to run, so the lab's tests do not check
# this table; "x append" is how many plain appends one such write is worth), and what the writes
# went to:

# %% tags=["nbval-ignore-output"]
print(durability.what_was_measured(lat))
durability.latency_table(lat)

# %% tags=["nbval-ignore-output"]
durability.CLAIMS.say("fsync_costs_here")

# %%
check("6.2", prediction_6_2)

# %%
durability.plot_latencies(lat)

# %% [markdown]
# Why figures differ from machine to machine, and what an fsync timing can and cannot tell:
#
# - **A plain append is a copy into the page cache**; everything with an fsync waits for the
#   device (the sentence under the table says how much longer it waited here).
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
# A process kill leaves the page cache alone, so no kill in this lesson can show a power cut.

# %% [markdown]
# Lesson 8's simulation (a disk that drops what was not fsynced, built from a journal of the lab's
# own writes), run here on one appended line:

# %%
durability.CLAIMS.say("a_power_cut_takes_the_unsynced_line")

# %% [markdown]
# What each step survives, with the kill -9 column taken from the measurements above:

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
durability.window_witnesses(df)

# %% [markdown]
# The source text closes with an interview summary (面试要点) of the whole lab; lesson 13,
# [the closing lesson](13_closing.ipynb), gives it.

# %% [markdown]
# ## Try it
#
# The panel re-runs the real experiment. Move the **crash point** slider to kill and resume at one
# point (`p7.after_submit` is page 7 right after the report: the danger window). Switch **fsync** to
# `always` and press **Run sweep**: compare the verdicts, and where the checkpoint writes in the
# lower plot (from a clean run with the same settings, one dot per write) fall.
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
# - A sweep of kills cannot test durability: test a power-cut claim with a simulated power cut
#   (lesson 8).

# %% [markdown]
# ## Common wrong statements
#
# The three statements at the top of this lesson (Q6.1 to Q6.3) are the common wrong ones: if you
# decided them before reading, run their checks again now and compare.

# %% [markdown]
# Stuck? `solution("6.1")`, `solution("6.3")` or `solution("Q6.3")` prints a worked answer.

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
