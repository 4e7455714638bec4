# %% [markdown]
# <!-- lesson: header -->
#
# **The question.** The first source text ends with an interview summary (面试要点): an agent
# killed by `kill -9` halfway through its task, where does it resume (断点续跑), and how do you know
# the resume was right? Answer it in one breath, with this machine's numbers behind every claim;
# then turn the lessons into a checklist for an agent of your own.
#
# **Recap.** Lessons 1 to 6 reproduced the source text's experiment and its table; lesson 7 took the
# second text's durable runtime; lesson 8 ran what the first text left untested; lesson 9 had you
# write a store and grade it; lessons 10 and 11 put the same kill -9 on frameworks and on a real
# model call; lesson 12 explored the stores you would reach for first, and your own agent's code.

# %% [markdown]
# <!-- lesson: about -->

# %% [markdown]
# **Contents.**
# [Before you start: 13.2](#Before-you-start) ·
# [1 The table, live](#1.-The-lesson's-table,-measured-just-now) ·
# [2 In one breath](#2.-In-one-breath) ·
# [3 Follow-up questions](#3.-Follow-up-questions) ·
# [4 Your own agent](#4.-What-to-do-in-your-own-agent) ·
# [Exercises](#Exercises) · [What to remember](#What-to-remember) ·
# [Further reading](#Further-reading) · [Glossary](glossary.md)

# %%
import pandas as pd
from IPython.display import Markdown

from bughunt.lab.judges import check, solution
from bughunt.lab.lessons import l13_closing as closing

pd.options.display.width = 140
pd.options.display.max_colwidth = 60

# %% [markdown]
# ## Before you start
#
# Answer this one before the page does (the sections below answer it).
#
# **13.2** An agent pays invoices. It checkpoints after every step, atomically and with fsync, but
# sends each payment with no idempotency key. Is every payment made exactly once, whatever the
# crash? (True or False)

# %%
answer_13_2 = None
check("13.2", answer_13_2)

# %% [markdown]
# ## 1. The lesson's table, measured just now
#
# Five sweeps of the source text's experiment (12 pages, bugs on pages 3, 7 and 10), every crash
# point killed by a real SIGKILL and resumed: 264 crash+resume pairs, a few seconds. The source
# text's figure beside this machine's:

# %%
result = closing.lesson_results()
closing.the_table(result)

# %% [markdown]
# ## 2. In one breath
#
# *Resuming after a crash has three layers.*
#
# 1. **How state is kept**: replay an event log, load a snapshot, or load a snapshot and replay the
#    log after it. The finer the checkpoints (检查点), the less a crash loses and the more is
#    written (lessons 2 and 3).
# 2. **Side effects**: record the intent first, then act; on recovery, redo it with the same
#    deterministic idempotency key (幂等键) and let the outside system deduplicate, so that the
#    effect happens once: effectively once (效果上恰好一次) (lesson 4).
# 3. **A checkpoint damaged while it was written**: write a snapshot to a temp file and rename it
#    atomically; the log reader skips a line it cannot parse and the writer ends a torn tail with a
#    newline (撕裂写, lesson 5). Surviving kill -9 only needs the kernel; surviving power loss needs
#    fsync of the file and of its directory (lesson 6).
#
# *It is tested not by random kills but by killing at every crash point, and judged by the
# three-way check (三方一致): the outside system == the resumed run's memory == a fresh rebuild
# from disk.*
#
# The numbers behind each layer, measured in section 1:

# %%
closing.CLAIMS.say("state_is_kept", "side_effects_once", "damaged_checkpoint",
                   "testing_every_point", bullets=True)

# %% [markdown]
# ## 3. Follow-up questions
#
# The questions (追问) an interviewer asks next, each answered by a lesson:
#
# 1. *Why not kill it at random a few dozen times?* The danger window (危险窗口) is narrow: in the
#    source text, 40 random kills (39 landed) hit one duplicate report, by luck, while the
#    exhaustive sweep finds every point that duplicates (a row of section 1's table), every
#    time. Zero failures in n random kills only bound the failure rate below about 3/n, the rule
#    of three ([lesson 4](04_danger_window.ipynb)).
# 2. *How do you judge that a recovery is correct?* Three witnesses must agree: the tracker (no
#    report twice, none missing), the resumed run's result in memory, and a fresh rebuild from
#    disk. The last catches bugs that are right now and wrong at the next recovery, like the
#    missing newline ([lesson 5](05_torn_writes.ipynb)).
# 3. *Does Codex re-run an interrupted tool?* No. A call without an output gets a synthetic
#    "aborted" output in the prompt (never written to the rollout), and the model decides whether
#    to call again: at most once at the harness, so the tool's own idempotency is what matters
#    ([lesson 4](04_danger_window.ipynb)).

# %% [markdown]
# 4. *What did the experiment not cover?* A crash during recovery, two resumers at once, a full
#    disk, a real power cut. All four are run in [lesson 8](08_beyond.ipynb): a second crash at
#    every pair of points, two resumers with and without the run lock, a full disk, and power cuts
#    simulated from the journal of every disk operation. [Lesson 12](12_first_stores.ipynb) builds
#    the same crash states for any program, from its system calls.
# 5. *And the model call that was streaming when the process died?* No checkpoint covers it: its
#    answer is on the server, billed, and the client held a prefix. Redo it (at least once, billed
#    twice) or record it aborted (at most once). [Lesson 7](07_durable_tasks.ipynb)'s runtime
#    redoes it and keeps the half answer as an aborted entry; [lesson 11](11_call_in_flight.ipynb)
#    measures both choices on a real server's bill.
# 6. *Would a framework do all this for me?* Its checkpointer keeps the state; the side effect's
#    key is still yours. [Lesson 10](10_frameworks.ipynb) sweeps LangGraph and DBOS with the same
#    kills.

# %% [markdown]
# ## 4. What to do in your own agent
#
# Each item, the measurement behind it (taken in this kernel, from real processes killed by
# SIGKILL, from the conformance suite's crash states, or from lesson 8's power-loss sweep; each
# checked on this run, and the cell says so where it does not hold), and the lesson where it is
# measured and explained:

# %%
Markdown(closing.checklist(result))

# %% [markdown]
# What fsync costs on this machine (lesson 6's measurement, a few hundred writes; times differ from
# run to run, so this cell's output is not checked):

# %% tags=["nbval-ignore-output"]
from bughunt.lab.lessons import l06_kill9_vs_power_loss as durability
from bughunt.lab.reference import APPEND, APPEND_FSYNC

lat = durability.measure_latencies(samples=100, kinds=(APPEND, APPEND_FSYNC))
print(f"append + fsync is {durability.fsync_ratio(lat):.0f} times slower than a plain append "
      f"here. {durability.what_was_measured(lat)}")

# %% [markdown]
# ## Exercises
#
# (13.2 was asked [before section 1](#Before-you-start), before the page answers it.)
#
# **13.1** The interviewer asks: with a snapshot after every page, on a 3-page site (the bug on
# page 3, which gives that page an extra `after_submit` crash point), how many model calls does a
# crash cost on average over all its crash points? Work it out, then check: the check runs the
# sweep.

# %%
prediction_13_1 = None        # a number of calls, to 2 decimals

# %%
check("13.1", prediction_13_1)

# %% [markdown]
# ## What to remember
#
# - Three layers: how state is kept (log, snapshot, both), what the side effect does across a
#   crash (intent, then a deterministic key), and what a torn checkpoint does (atomic rename,
#   skip and repair, fsync for power loss).
# - Kill at every crash point, and judge by three witnesses; random kills and "it resumed" prove
#   little.
# - A store keeps state; it cannot make a side effect happen once. The key does, with a receiver
#   that deduplicates.
# - Every item above has a number measured on this machine: when you change your agent, measure
#   again.

# %% [markdown]
# Stuck? `solution("13.1")` prints a worked answer.
#
# ## Further reading
#
# - The lessons' own further reading; the appendix keeps the public sources in one place:
#   [Appendix: what durability costs](99_appendix.ipynb)
# - Pillai et al., ["All File Systems Are Not Created Equal"](https://www.usenix.org/conference/osdi14/technical-sessions/presentation/pillai)
#   (ALICE), OSDI 2014
# - Stripe, ["Designing robust and predictable APIs with idempotency"](https://stripe.com/blog/idempotency)
#   (idempotency keys on the receiver's side)
# - [fsync(2)](https://man7.org/linux/man-pages/man2/fsync.2.html), Linux man-pages
# - Codex's rollout, its newline repair and its "aborted" tool outputs:
#   [openai/codex](https://github.com/openai/codex)
#
# ---
# <!-- lesson: nav -->
