# %% [markdown]
# <!-- lesson: header -->
#
# **The question.** The BugHunt agent explores 12 pages. On each page it asks the model what to do
# next, visits the page, and files a bug report when it finds one (pages 3, 7 and 10 hide injected
# bugs). At page 7 the process disappears: the kernel's out-of-memory (OOM) killer picked it, a
# rolling deploy restarted it, someone typed `kill -9`. What does it cost to run the task again,
# and what goes wrong?
#
# **Recap of the start page.** The worker is a real process; its model calls go on a bill it cannot
# rewrite, and its reports go into a real SQLite tracker.

# %% [markdown]
# <!-- lesson: about -->
#
# **Contents.** [Predict first](#Predict-first) · [The scene, for real](#The-scene,-for-real) ·
# [Two losses](#Two-losses:-money-and-correctness) · [Where the worker picks up](#Where-the-worker-picks-up,-in-the-lab's-code) ·
# [The four questions](#The-four-questions-of-resuming) · [With a checkpoint](#The-same-kill,-with-a-checkpoint) ·
# [Transfer](#Transfer:-a-kill-this-lesson-did-not-make) · [Try it](#Try-it) · [What to remember](#What-to-remember) ·
# [Common wrong statements](#Common-wrong-statements) · [Further reading](#Further-reading)

# %%
# %matplotlib inline
import pandas as pd

from bughunt import worker
from bughunt.experiment import PausedWorker
from bughunt.lab.judges import check, quiz, solution
from bughunt.lab.lessons import l01_killed_at_page_7 as restart
from bughunt.lab.views import show_source
from bughunt.stores.none import NoStore

pd.options.display.width = 120
pd.options.display.max_columns = 20

# %% [markdown]
# ## Predict first
#
# The experiment below starts a worker with **no checkpoint and no idempotency key**, stops it on
# page 7 right after its model call (`p7.after_model_call`), kills it with SIGKILL, and runs the
# task again in the same directory. The second process has nothing saved to start from.
#
# Before you run it, write down two predictions:
#
# - **1.1** How many model calls does the task pay twice (calls on the bill beyond the 12 of a clean
#   run)?
# - **1.2** Which pages' reports does the tracker hold twice at the end? A list, e.g. `[7]`.
#
# And decide two statements, true or false, before the experiment answers them:

# %%
prediction_1_1 = None        # a number of model calls
prediction_1_2 = None        # a list of page numbers

# %%
quiz("Q1.1")

# %%
quiz("Q1.2")

# %%
answer_q1_1 = None           # True or False
answer_q1_2 = None           # True or False

# %% [markdown]
# ## The scene, for real
#
# We stop the worker at `p7.after_model_call` and kill it from this notebook with SIGKILL: no
# handler runs, nothing is flushed, nothing is cleaned up. Then a second process runs the task
# again in the same directory. With nothing saved, it can only start from page 1.

# %%
story = restart.page_7()
story.summary()

# %%
restart.CLAIMS.say("killed_then_started_over")

# %%
check("1.1", prediction_1_1)
check("1.2", prediction_1_2)

# %%
restart.plot_restart_timeline(story)

# %% [markdown]
# The timeline is drawn from the outside world's records, not from what the worker believes: the
# provider's bill (calls paid), the tracker (reports filed) and the lab's trace of the crash points
# each process reached (pages done).
#
# The x axis counts steps, not milliseconds: each crash point a process reaches (after the model
# call, after the visit, after the submit, inside the commit, after the commit) is one step, the
# first process's steps, then the second's. A step takes microseconds and a restart a whole
# interpreter start-up, so on a clock the picture would be mostly noise and one long gap. Each
# billed call and each filed report is placed at the step its process reached next.
#
# ## Two losses: money and correctness

# %%
restart.CLAIMS.say("the_bill_counts_the_call_in_flight", "page_3_is_filed_twice", bullets=True)

# %%
story.reports[["page", "idempotency_key", "title", "run"]]

# %% [markdown]
# The call in flight is paid again under every design of lesson 2, however fine its checkpoints
# (lesson 11 shows the alternatives). The first loss costs money; the second is a wrong result
# that someone downstream has to clean up.

# %%
check("Q1.1", answer_q1_1)

# %% [markdown]
# ## Where the worker picks up, in the lab's code
#
# How did the notebook kill the first process? With a real signal, from outside, as the OOM killer
# would:

# %%
show_source(PausedWorker.kill)

# %% [markdown]
# SIGKILL gives the process no turn at all. Your answer to the second statement, checked with a
# real process that has a signal handler, a `finally` block and an `atexit` hook:

# %%
check("Q1.2", answer_q1_2)

# %% [markdown]
# A resuming worker asks its checkpoint store for the state to start from, then runs the page loop
# from that state's `next_page`. These are the loop's two lines in the worker:

# %%
show_source(worker.page_loop, lines=('for page in range(agent.state["next_page"]', "agent.run_page(page)"))

# %% [markdown]
# The source text's loop starts the same way (its page loop, lesson 4 shows the rest):
# `for page in range(state["next_page"], N_PAGES + 1):`. With no checkpoint at all, the store has
# nothing to load: its `load` returns the initial state, whose `next_page` is 1.

# %%
show_source(NoStore)

# %% [markdown]
# `commit` writes nothing, so no crash point ever leaves anything to resume from. Every other
# store in the lab (snapshot, event log) answers `load` from what earlier commits wrote.

# %% [markdown]
# ## The four questions of resuming
#
# Resuming from where the process died (断点续跑) means answering four questions, one lesson each:
#
# 1. **How fine is progress saved?** A checkpoint (检查点) here is a durable recovery point written to
#    disk (not a place where a worker checks for a cancel request, another common use of the
#    word). Finer checkpoints lose less and write more.
#    → [Lesson 2](02_granularity.ipynb)
# 2. **How is the state put back together?** Replay an event log, load a snapshot, or both.
#    → [Lesson 3](03_replay_vs_snapshot.ipynb)
# 3. **What about a side effect that happened but was not yet saved?** The danger window between
#    filing a report and writing the checkpoint. → [Lesson 4](04_danger_window.ipynb)
# 4. **What if the checkpoint write is itself cut in half?** Torn writes and atomic replacement.
#    → [Lesson 5](05_torn_writes.ipynb)
#
# and one about the machine underneath: a killed process is not a lost power supply.
# → [Lesson 6](06_kill9_vs_power_loss.ipynb)

# %% [markdown]
# ## The same kill, with a checkpoint
#
# A preview of what the next lessons build: the same kill at page 7, with two remedies, one at a
# time and then both: a snapshot after every page, and a deterministic idempotency key (幂等键)
# on each report, which the tracker files only once. Decide first:

# %%
quiz("Q1.3")

# %%
answer_q1_3 = None           # True or False

# %%
stories = restart.page_7_by_design()
restart.losses_table(stories)

# %%
restart.CLAIMS.say("the_snapshot_alone_saves_both_here", "the_key_alone_saves_the_tracker_only")

# %%
check("Q1.3", answer_q1_3)

# %%
restart.plot_restart_timeline(stories["snapshot per page, key on"])

# %% [markdown]
# Here the snapshot did both jobs, because the kill fell long after page 3's report was saved. The
# key earns its place at the kills that fall between a report and its page's snapshot (lesson 4).
# The rest of the lab measures all this at every crash point rather than one.
#
# ## Transfer: a kill this lesson did not make
#
# **1.3** A problem drawn for this lesson (`python -m bughunt practice --lesson 1 --seed 25`
# prints the same one; other seeds give other kills). Predict, then check: the check kills a
# worker there and runs it again.

# %%
restart.TRANSFER

# %%
prediction_1_3 = None        # a list of page numbers, e.g. [7] (or [] for none)

# %%
check("1.3", prediction_1_3)

# %% [markdown]
# ## Try it
#
# Pick another crash point with the slider: the panel stops a fresh worker there, kills it, runs it
# again and draws the same timeline. Change the **checkpoint** design or the **idempotency key**,
# then press **Run sweep** to do it at every one of the 51 crash points: bars are the redone model
# calls, coloured and hatched by verdict, as the legend names them (a point that files a duplicate
# report is vermillion, hatched with crosses).

# %% tags=["panel", "nbval-ignore-output"]
p = restart.panel()
p.show()

# %% [markdown]
# ## What to remember
#
# - A process can die at any instruction, with no chance to clean up: SIGKILL, the OOM killer,
#   a deploy.
# - Starting over costs twice: work paid again (model calls, the call in flight included) and side
#   effects done again (duplicate reports). The second is a correctness bug, not just a cost.
# - A checkpoint saves the work, and a kill long after a side effect was saved does not repeat
#   it; an idempotency key makes a repeated side effect harmless wherever the kill falls, and
#   saves no work at all.
# - Judge recovery by the outside world's records (the bill, the tracker), not by the agent's memory.

# %% [markdown]
# ## Common wrong statements
#
# This lesson asked its three statements before the experiments that answer them: Q1.1 and Q1.2
# before the scene, Q1.3 before the comparison. `quiz("Q1.2")` shows one again. For more kills to
# predict, each judged by a live run: `python -m bughunt practice --lesson 1 --seed S` with any
# seed S.
#
# Stuck? `solution("1.1")`, `solution("1.3")` or `solution("Q1.2")` prints a worked answer.

# %% [markdown]
# ## Further reading
#
# - [signal(7)](https://man7.org/linux/man-pages/man7/signal.7.html), Linux man-pages: SIGKILL
#   "cannot be caught, blocked, or ignored".
# - [The out-of-memory killer](https://docs.kernel.org/admin-guide/mm/concepts.html#oom-killer),
#   the Linux kernel documentation: one of the ways a process gets SIGKILL without warning.
# - [Pod termination](https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination),
#   Kubernetes: SIGTERM first, then SIGKILL for a container that does not stop within its grace
#   period.
# - Python's [`atexit`](https://docs.python.org/3/library/atexit.html): "The functions registered
#   via this module are not called when the program is killed by a signal not handled by Python".
#
# ---
# <!-- lesson: nav -->
