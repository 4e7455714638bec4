# %% [markdown]
# <!-- lesson: header -->
#
# **The question.** The first source text lists what its experiment did not cover (the fourth of
# its follow-up questions, "还有什么没覆盖"): a crash while resuming (连环崩溃), two processes resuming the same task
# at once (要加锁), and a full disk (磁盘满). It also says that surviving `kill -9` needs no fsync
# while surviving a power cut does, without showing it. Here each one is run for real and counted,
# plus damaged files, the store contract's conformance suite, and bugs planted on purpose to see
# whether the lab's own tests would catch them.
#
# **Recap of lessons 6 and 7.** Surviving `kill -9` only needs the data handed to the kernel; a
# durable runtime still needs a lock, a crash-loop limit and an honest answer for interrupted work.

# %% [markdown]
# <!-- lesson: about -->

# %% [markdown]
# **Contents.** [1 Crash during recovery](#1.-A-crash-during-recovery) ·
# [2 Two resumers](#2.-Two-resumers-at-the-same-moment) ·
# [3 Full disk, failed fsync](#3.-A-full-disk,-a-failed-fsync) ·
# [4 Power loss](#4.-Power-loss,-simulated) · [5 Damaged files](#5.-Damaged-files) ·
# [6 The store contract](#6.-The-store-contract-and-its-conformance-suite) ·
# [7 Planted bugs](#7.-Planted-bugs:-would-the-lab-catch-them?) · [Try it](#Try-it) ·
# [What to remember](#What-to-remember) ·
# [Common wrong statements](#Common-wrong-statements) · [Further reading](#Further-reading)
#
# The methods come from published crash-testing work (see Further reading): SQLite's
# compound-failure tests (a crash while recovering from a crash), ALICE (OSDI 2014) and LazyFS
# (record what a program did to the disk, then build the states a power cut may leave), CrashMonkey
# (OSDI 2018: every crash state of a bounded workload, not random ones). Each has three parts, and
# so does every section below: a way to make crash states, a recovery run, and an oracle stronger
# than "it did not crash" (here: the tracker, the bill and the three-way check).

# %%
# %matplotlib inline
import pandas as pd
from IPython.display import display

from bughunt.lab.judges import check, quiz, solution
from bughunt.lab.lessons import l08_beyond as beyond
from bughunt.lab.views import show_source
from bughunt.worker import acquire_run_lock

pd.options.display.width = 140
pd.options.display.max_columns = 20
pd.options.display.max_colwidth = 90

# %% [markdown]
# ## 1. A crash during recovery
#
# Kill the worker at crash point *i*; kill its resume at point *j* (any point the resume can reach),
# or inside recovery itself, right after the newline repair; then resume once more. The safe
# configuration (event log, intents, idempotency key, atomic writes) must end with no duplicate, no
# lost report and a passing three-way check for **every** pair, and resuming twice must end where
# resuming once does: the same final state as a single crash and resume at *i*, and a further,
# empty resume must not change a byte of the checkpoint files. To keep this under a minute we use a
# 3-page site (one bug page): the pairs are the same in kind as on 12 pages, just fewer.
#
# True or false, before it runs? Decide first; the check runs the sweep and explains.

# %%
quiz("Q8.2")

# %%
answer_q8_2 = None
check("Q8.2", answer_q8_2)

# %%
chain = beyond.chain()
beyond.chain_table(chain)

# %%
beyond.plot_chain(chain)

# %%
beyond.CLAIMS.say("every_chain_pair_correct")

# %% [markdown]
# Squares are pairs where the second kill really happened; a circle would mark a point the resume
# never reached, a resume that simply finished. Recovery here is nothing but the normal start-up
# path (read, repair the tail, append), which is why a crash inside it is no different from any
# other crash: the design has no recovery-only state that a second crash could leave half done.
#
# ## 2. Two resumers at the same moment
#
# True or false, first:

# %%
quiz("Q8.1")

# %%
answer_q8_1 = None
check("Q8.1", answer_q8_1)

# %% [markdown]
# Two workers are started on the same crashed run together. Each stops at the first crash point a
# resume reaches, so the one that got in holds the run while the other tries; then both are let go.
# No sleep decides who wins. The run lock is an exclusive `flock` on `run.lock`, taken without
# waiting; the kernel releases it when no process has the lock file open any more, so also when its
# holder dies by SIGKILL. The lab's own code, as every worker runs it at start-up:

# %%
show_source(acquire_run_lock, lines=("try:", "EXIT_BUSY)"))

# %% [markdown]
# The source text only names the idea (Codex's rollout crate has a `writer_lock.rs`, it says); it
# has no lock of its own. To see what the lock prevents, the second row below runs the worker's own
# code with the one line that takes the lock removed (a mutant, as in section 7).
#
# **8.1 Predict** before it runs: without the lock, 10 trials of two resumers started together. In
# how many of the 10 does the worker's reader refuse the log when the run is read back afterwards?

# %%
prediction_8_1 = None        # a number of trials

# %%
races = beyond.races()
beyond.race_table(races)

# %%
check("8.1", prediction_8_1)

# %%
beyond.plot_races(races)

# %%
beyond.CLAIMS.say("the_lock_lets_one_in")

# %% [markdown]
# A reader that skipped a repeated event silently would rebuild a state neither worker was in.
#
# ### What the lock does when its holder is paused, or has children
#
# A `flock` belongs to an open file, not to a running thread: it is held as long as the file stays
# open in some process, whatever that process is doing. Two cases, run for real: a worker holding
# the run is frozen with SIGSTOP (as a long garbage-collection pause or a suspended virtual machine
# would freeze it) while a second worker tries the run; and a process takes the lock, forks a child
# (which inherits the open file, as `os.fork` and `multiprocessing`'s fork start method do), and
# is killed with SIGKILL.

# %%
beyond.lock_demos()

# %%
beyond.CLAIMS.say("the_lock_outlives_a_pause_and_a_dead_parent")

# %% [markdown]
# - **A paused holder still excludes everyone.** A kernel lock on a local file cannot expire, so
#   a pause never lets a second worker in.
# - **A forked child keeps the lock after its parent dies.** flock(2): the lock is released "when
#   all such file descriptors have been closed", and the child holds a copy. A worker that forks
#   helpers must close the lock's descriptor in them (Python's `subprocess` already does:
#   descriptors are not inherited by the programs it starts, unless passed on purpose).

# %% [markdown]
# Where a pause *is* dangerous is a lock that expires: a lease from a lock service, or a lock file
# with a time-out. If the holder is paused longer than the lease, the lease runs out, a second worker
# takes over, and the first wakes up believing it still holds the lock; both write. The standard
# defence is a **fencing token**: each grant of the lease carries a number that only grows, every
# write carries it, and the storage (here it would be the tracker and the log) refuses a number older
# than one it has seen (Kleppmann, "How to do distributed locking", 2016). This lab's run lock is a
# kernel `flock` on one machine, which never expires, so it needs no token.
#
# ## 3. A full disk, a failed fsync
#
# The worker's I/O door can be told to fail its k-th write (after writing half the bytes, as a full
# disk does) or its k-th fsync. We do it for every k of a 12-page run. Each time the worker must
# stop with a clear message naming the file and a non-zero exit (74), must lose no report the
# tracker already acknowledged, and the next resume, with the disk healthy again, must finish
# correctly. The intent comes first: if it cannot be written, the report is never filed.

# %%
disk = beyond.disk_full()
print(disk.message[0])
beyond.fault_table(disk)

# %%
fsync = beyond.fsync_failures()
print(fsync.message[0])
beyond.fault_table(fsync)

# %% [markdown]
# The same runs grouped by the file that failed: which k hit it, and what happened every time.

# %%
beyond.fault_summary(**{"write fails (no space)": disk, "fsync fails (I/O error)": fsync})

# %%
beyond.CLAIMS.say("faults_stop_and_lose_nothing")

# %%
beyond.CLAIMS.say("what_fails_first")

# %% [markdown]
# A failed fsync is fatal and never retried (`retried` counts an fsync of any file after the
# failure).
# After a failed fsync the kernel may already have dropped the dirty pages it could not write and
# marked them clean, so a second fsync can "succeed" for data that is gone; PostgreSQL learned this
# in 2018 ("fsyncgate") and now stops instead.

# %% [markdown]
# ## 4. Power loss, simulated
#
# `kill -9` cannot show a power cut, so we simulate one the way ALICE and LazyFS do. A clean run
# journals every operation its door performs (create, truncate, write with its bytes, fsync, rename,
# directory fsync) to `io.jsonl`. From the journal we build disk states a power cut may leave at
# every moment, under a stated model:
#
# - written data survives only once its file was fsynced afterwards; of the writes since, any prefix
#   may have reached the disk, and the last of them may be torn;
# - a created or renamed name survives only once the directory was fsynced afterwards;
# - files persist independently of each other (unsynced work may reorder across files, not within
#   one).
#
# Each state is materialized in a fresh directory with the tracker as it stood at that moment,
# recovered by a real worker, and checked three ways. A committed page is one whose commit had
# returned before the cut; losing it means redoing it (and, without a key, filing its report again).

# %% [markdown]
# **8.2 Predict** before it runs: the snapshot store writes atomically (temp file, rename) but
# never fsyncs (`fsync never`), on a 6-page run. Of every power-cut state built, at most how many
# committed pages does one state lose?

# %%
prediction_8_2 = None        # a number of pages

# %%
power = beyond.power_loss()
beyond.power_table(power)

# %%
check("8.2", prediction_8_2)

# %% [markdown]
# Each state is counted in exactly one verdict: correct; refused (recovery found the files damaged
# and said so: the pages are lost, loudly); committed pages lost silently (recovery accepted an older
# state); or wrong in another way. The table checks that the four add up to the states explored
# before it is shown.

# %%
beyond.CLAIMS.say("power_states_are_sampled", "only_fsync_everywhere_keeps_every_commit",
                  "the_key_keeps_lost_pages_from_duplicating")

# %%
beyond.plot_power(power)

# %% [markdown]
# Drop the directory fsync, as the source text's own `atomic_write` does, and the rename can vanish
# with the power, taking committed pages with it; drop fsync altogether and everything since the
# kernel's last flush is at the mercy of the cut; write the snapshot in place and a torn snapshot
# sends recovery back to page 1. Lesson 3 shows the lab's atomic write beside the source text's,
# which ends at `os.replace` without the directory fsync; `kill -9` never shows the difference (the
# kernel keeps its cache), which is why the source text's experiment, all kills, passed without it.
#
# ## 5. Damaged files
#
# Bytes can also go bad after they were written. Property-based tests (`tests/test_damage.py`, with
# hypothesis) truncate, zero-fill, flip bits in and append garbage to logs and snapshots, hundreds of
# times, and require that recovery gives a state the real run was in at some moment, or refuses with
# the file's name, never a silently wrong state. A few of those damages, live:

# %%
beyond.damage_demo()

# %%
beyond.CLAIMS.say("damage_is_skipped_refused_or_replayed")

# %% [markdown]
# The tracker is a file too, and SQLite reads a damaged one without a word as long as what is left
# is well formed: remove its write-ahead log after a kill and cut the database short, and SQLite
# sees a valid, empty database, the acknowledged reports gone. So the worker does not take the
# tracker's word alone. The checkpoint knows which pages' reports the tracker acknowledged (the
# run's findings: a page is done only after its report was filed), and one query asks the tracker
# for those pages, before a resume writes anything and again at the end of every run. A page
# missing is refused with exit 2, naming the page and `tracker.db`: before the resume nothing has
# changed; at the end the run gives no result.
#
# What this check sees: a report the checkpoint counts and the tracker no longer holds (a damaged
# or truncated database, an older copy put back, a row deleted by another program). What it cannot
# see: a report the checkpoint does not count yet (filed, then the kill came before the page's
# checkpoint: the danger window) or never will (an aborted page); a row that is there but altered;
# a duplicate (the sweeps count those from the tracker); and a run directory
# put back whole from an older copy, where checkpoint and tracker agree and the pages are simply
# done again: only the bill, with its calls paid twice, shows that.

# %% [markdown]
# ## 6. The store contract and its conformance suite
#
# Every checkpoint store, the lab's and the one you write in lesson 9, makes the same promises,
# written once in `bughunt/stores/contract.py`. Each has an id, and the conformance suite
# (`python -m bughunt.conformance`) checks every one of them: it runs the real page loop once on
# the store, in this process, through a door that journals each disk operation, then builds every
# crash state of that run (a kill -9 after each operation, and the power-cut states of section 4),
# opens fresh stores on each, and checks the rules. The contract:

# %%
with pd.option_context("display.max_colwidth", 130):
    display(beyond.contract_rules())

# %% [markdown]
# The suite on the lab's log store in the safe design (intents, key, fsync always), run just now:
# every rule, and how many crash states checked it.

# %%
log_report = beyond.conformance(beyond.SUITE_DESIGN)
beyond.conformance_table(log_report)

# %% [markdown]
# **8.3 Transfer.** A design this lesson has not put through the suite: the snapshot store writing
# its snapshot **in place** (write mode `torn`: truncate, then write), fsync always. Which rules does
# the suite find broken? A list of rule ids from the table above (`[]` for none).

# %%
prediction_8_3 = None        # e.g. ["load-reads-only"]

# %%
torn_report = beyond.conformance(beyond.TORN_SNAPSHOT)
with pd.option_context("display.max_colwidth", 110):
    display(beyond.conformance_table(torn_report))

# %%
check("8.3", prediction_8_3)

# %%
beyond.CLAIMS.say("the_safe_design_breaks_no_rule")

# %% [markdown]
# **8.4 Transfer.** A problem drawn for this lesson (`python -m bughunt practice --lesson 8 --seed
# 12` prints the same one; other seeds give others). Predict, then check: the check runs the
# experiment.

# %%
beyond.TRANSFER

# %%
prediction_8_4 = None        # one of the files listed, e.g. "events.jsonl"

# %%
check("8.4", prediction_8_4)

# %% [markdown]
# ## 7. Planted bugs: would the lab catch them?
#
# A test suite is only as good as the bugs it catches. True or false, first:

# %%
quiz("Q8.3")

# %%
answer_q8_3 = None
check("Q8.3", answer_q8_3)

# %% [markdown]
# Each bug below is a copy of the lab's own
# source with one line changed (a **mutant**, in the words of mutation testing). The lab runs the
# check meant to catch it, and the same check on the real code as a control, and puts the whole
# conformance suite of section 6 on the same code. The real code has no switch for any of these
# bugs: the patch is applied to a temporary copy. Each bug, its check's verdict beside the suite's,
# then its diff against the real source:

# %%
planted = beyond.bugs()
beyond.planted_bug_cards(planted)

# %% [markdown]
# The same, as one table:

# %%
planted

# %%
beyond.CLAIMS.say("planted_bugs_caught")

# %% [markdown]
# The suite runs inside one process; the bugs it cannot see are about the worker's order of steps
# and about two processes. Each kind of test catches what the other cannot.

# %% [markdown]
# ## Try it
#
# Pick an experiment: the panel shows only the knobs that experiment uses, and says what it keeps
# fixed. Then **Run**: every row is a real process. For power loss, **directory fsync: off** plants
# the missing directory fsync (it appears when fsync is on); for two resumers, **run lock: none**
# starts both workers without the lock. A mix of settings that cannot run is explained in the line
# under the buttons.

# %% tags=["panel", "nbval-ignore-output"]
p = beyond.panel()
p.show()

# %% [markdown]
# ## What to remember
#
# - Test the compound failures too: a crash during recovery, two resumers, a full disk, a failed
#   fsync. A recovery path that is just the normal start-up path has nothing extra to get wrong.
# - One writer per run: a kernel lock (`flock`), released when the last process holding its open
#   file ends: the worker, and any child it forked. Paused, the holder still holds it. Without it two
#   resumers fork the log. A lock that can expire (a lease) needs a fencing token as well.
# - A failed write stops the run and loses nothing acknowledged; a failed fsync is fatal and never
#   retried.
# - Power loss is not `kill -9`: only fsync of the file **and** of its directory makes a commit
#   survive it, and you can test that without pulling a plug, by replaying the disk operations.
# - A store's promises are a contract, one rule per promise; the conformance suite checks every
#   rule at every crash state of a run, and grades any store the same way.
# - Prove the tests themselves: plant bugs, and count how many they catch. Store bugs and worker
#   bugs need different tests.

# %% [markdown]
# ## Common wrong statements
#
# This lesson's true-or-false statements stand at the start of the sections that answer them, so
# that you decide before you read: Q8.2 in [section 1](#1.-A-crash-during-recovery), Q8.1 in
# [section 2](#2.-Two-resumers-at-the-same-moment), Q8.3 in
# [section 7](#7.-Planted-bugs:-would-the-lab-catch-them?). Stuck? `solution("8.3")` or `solution("Q8.3")` prints a worked answer.

# %% [markdown]
# ## Further reading
#
# - SQLite, ["How SQLite Is Tested"](https://www.sqlite.org/testing.html), section 3.4: compound
#   failure tests (a crash while recovering).
# - Pillai et al., ["All File Systems Are Not Created Equal"](https://www.usenix.org/conference/osdi14/technical-sessions/presentation/pillai)
#   (ALICE), OSDI 2014.
# - Mohan et al., ["Finding Crash-Consistency Bugs with Bounded Black-Box Crash Testing"](https://www.usenix.org/conference/osdi18/presentation/mohan)
#   (CrashMonkey), OSDI 2018.
# - [LazyFS](https://github.com/dsrhaslab/lazyfs), a FUSE file system that loses unsynced writes.
# - [flock(2)](https://man7.org/linux/man-pages/man2/flock.2.html): locks belong to open file
#   descriptions, shared across fork.
# - Martin Kleppmann, ["How to do distributed locking"](https://martin.kleppmann.com/2016/02/08/how-to-do-distributed-locking.html)
#   (2016), on leases and fencing tokens.
# - ["PostgreSQL's fsync() surprise"](https://lwn.net/Articles/752063/) (LWN, 2018), on why a
#   failed fsync must not be retried.
# - Mutation testing: Y. Jia and M. Harman, ["An Analysis and Survey of the Development of
#   Mutation Testing"](https://doi.org/10.1109/TSE.2010.62), IEEE TSE 37(5), 2011.
#
# ---
# <!-- lesson: nav -->
