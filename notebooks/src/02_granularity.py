# %% [markdown]
# <!-- lesson: header -->
#
# **The question.** A checkpoint (检查点) is a durable recovery point. How often should the agent write
# one, and what does each choice cost: in work thrown away by a crash, and in writes paid on every run?
#
# **Recap of lesson 1.** Without any checkpoint, a worker killed at page 7 starts again at page 1:
# it pays for six pages of model calls again and files page 3's report a second time.

# %% [markdown]
# <!-- lesson: about -->
#
# **Contents.** [Natural boundaries](#Natural-boundaries,-and-the-call-in-flight) ·
# [Predict, then run](#Predict,-then-run) · [The price](#The-price:-writes-on-every-run) ·
# [A new design](#Transfer:-a-design-and-a-site-this-lesson-did-not-run) · [Try it](#Try-it) ·
# [What to remember](#What-to-remember) · [Common wrong statements](#Common-wrong-statements) ·
# [Further reading](#Further-reading)

# %%
# %matplotlib inline
import pandas as pd

from bughunt.experiment import crash_points
from bughunt.lab.judges import check, quiz, solution
from bughunt.lab.lessons import l02_granularity as granularity
from bughunt.lab.views import show_source, worker_step

pd.options.display.width = 120
pd.options.display.max_columns = 20

# %% [markdown]
# Three statements to decide before you read on, true or false (the lesson answers them as it goes;
# each check measures and explains):

# %%
quiz("Q2.1")

# %%
answer_q2_1 = None
check("Q2.1", answer_q2_1)

# %%
quiz("Q2.2")

# %%
answer_q2_2 = None
check("Q2.2", answer_q2_2)

# %%
quiz("Q2.3")

# %%
answer_q2_3 = None
check("Q2.3", answer_q2_3)

# %% [markdown]
# ## Natural boundaries, and the call in flight
#
# An agent has natural checkpoint boundaries (天然的检查点边界): a complete model reply, a complete
# tool result. What lies between them cannot be saved: half a streamed answer is still on the
# provider's side, half a tool run is in the external system. So however fine the checkpoints, the
# call that is in flight when the process dies (正在进行的那一次调用) may have to be redone, or handled
# separately.
#
# Here is where that happens in the worker, read from the package itself:

# %%
show_source(worker_step("ask_model"))

# %% [markdown]
# `self.model.ask(page)` returns once the call is on the provider's bill. The next line is a crash
# point, `p{page}.after_model_call`: the lab's SIGKILL can fall there, and in a normal run it does
# nothing. Until the next checkpoint is durable, the answer lives only in this process's memory.
# With per-operation checkpoints the worker commits an `answered` event right away; even then, a
# kill on the crash point's line pays the call again.

# %% [markdown]
# Granularity (粒度) is the trade: **the finer, the less is lost, and the more is written**. We
# compare three designs of the BugHunt worker over the lesson's 51 crash points (no intents):
#
# | design | what is saved, and when |
# |---|---|
# | none | nothing: every resume starts at page 1 |
# | per page | a snapshot of the whole state after each page: the lesson's step |
# | per operation | a snapshot after the model's answer, after the visit, after the report, and after the page |
#
# Every number below comes from real runs: for each crash point a worker process is killed with
# SIGKILL at that point and a second process resumes it. Redone calls are read from the model
# provider's bill, which the worker cannot rewrite: calls billed for both processes, minus the 12 a
# clean run pays.

# %%
points = pd.DataFrame(p.__dict__ for p in crash_points(granularity.DESIGNS["per page"]))
print(len(points), "crash points; those of page 7:")
points[points.page == 7]

# %% [markdown]
# ## Predict, then run
#
# Before the sweep runs, write down two predictions (the checks after the sweep compare them with
# what it measured):
#
# - **2.1** With no checkpoint, how many model calls are redone when the worker is killed at
#   `p10.after_visit` (page 10, after its model call and its visit)?
# - **2.2** With a snapshot after every operation, which crash-point label is the only one that
#   still redoes a model call (e.g. `"after_visit"`)?

# %%
prediction_2_1 = None        # a number of calls
prediction_2_2 = None        # a label, in quotes

# %%
df = granularity.redone_by_design()
table = granularity.granularity_table(df)
table

# %%
check("2.1", prediction_2_1)
check("2.2", prediction_2_2)

# %%
granularity.CLAIMS.say("beside_the_lesson")

# %% [markdown]
# The averages are simple counts, so they can be checked by hand:

# %%
print(granularity.explain_redone_averages(df))

# %%
granularity.CLAIMS.say("none_redoes_every_page_so_far", "per_page_redoes_one_call",
                       "per_operation_redoes_only_the_call_in_flight", bullets=True)

# %%
granularity.plot_redone(df)

# %% [markdown]
# ## The price: writes on every run
#
# The price is paid on every run, crash or not. Count the checkpoint writes of one clean run:

# %%
granularity.plot_tradeoff(table)

# %%
granularity.CLAIMS.say("per_operation_writes_more")

# %% [markdown]
# Whether that pays depends on what a call costs against what a write costs; lesson 6 measures the
# write side on this machine. Writes are not free of risk either: each one is a moment where the
# checkpoint itself can be torn (lesson 5).
#
# A finer granularity also changes what a crash *duplicates*. Run both snapshot designs again with
# the idempotency key off:

# %%
granularity.CLAIMS.say("finer_checkpoints_shrink_the_window")

# %% [markdown]
# Lesson 4 is about that window.

# %% [markdown]
# ## Transfer: a design and a site this lesson did not run
#
# **2.3** A problem drawn for this lesson (`python -m bughunt practice --lesson 2 --seed 10`
# prints the same one; other seeds give others). Predict, then check: the check runs the
# experiment.

# %%
granularity.TRANSFER

# %%
prediction_2_3 = None        # a number of calls; judged within 0.05

# %%
check("2.3", prediction_2_3)

# %% [markdown]
# Once you have checked: the two designs on the lesson's 12 pages and on 20, every crash point
# killed and resumed. Which of them grows with the length of the run?

# %%
granularity.long_run_table()

# %% [markdown]
# ## Try it
#
# The panel re-runs the real experiment. Move the **crash point** slider to see one crash and resume
# in detail (two real processes, about a tenth of a second). Change the **checkpoint** granularity,
# the **write mode** or the **idempotency key**, then press **Run sweep** to kill and resume at every
# point with those settings. Bars are coloured by verdict; the blue line is this machine's average,
# the dashed line the lesson's.
#
# Things to try: per operation with the key off (which points duplicate now?); per page in `torn`
# write mode (what happens to a snapshot overwritten in place?).

# %% tags=["panel", "nbval-ignore-output"]
p = granularity.panel()
p.show()

# %% [markdown]
# ## What to remember
#
# - A checkpoint can only sit on a natural boundary: a complete answer, a complete tool result.
#   The call in flight at the moment of the kill is always at risk of being redone.
# - Finer checkpoints lose less and write more (the lesson: 6.51 redone calls per crash with none,
#   0.76 per page); the table above gives this machine's figures and what each design writes.
# - With a checkpoint per page, a crash costs at most one page's call however long the run; with
#   none, the cost grows with the run.
# - Redone work is counted from the outside world's record (the provider's bill), not from what the
#   worker believes it did.

# %% [markdown]
# ## Common wrong statements
#
# The three statements at the top of this lesson (Q2.1 to Q2.3) are the common wrong ones: if you
# decided them before reading, run their checks again now and compare.

# %% [markdown]
# Stuck? `solution("2.2")` or `solution("Q2.1")` prints a worked answer.

# %% [markdown]
# ## Further reading
#
# - SQLite, [write-ahead logging](https://www.sqlite.org/wal.html): a database that makes every
#   commit a durable recovery point, and folds its log into the database at its own checkpoints.
# - T. S. Pillai et al., "All File Systems Are Not Created Equal: On the Complexity of Crafting
#   Crash-Consistent Applications", OSDI 2014 (the ALICE study):
#   [usenix.org](https://www.usenix.org/conference/osdi14/technical-sessions/presentation/pillai).
#   How real applications save their progress, and where they get it wrong.
#
# ---
# <!-- lesson: nav -->
