# %% [markdown]
# <!-- lesson: header -->
#
# **What this lab answers.** A long-running AI agent is killed halfway through its task: `kill -9`,
# the OOM killer, a deploy. Where does it pick up, what does it pay twice, and does it do anything
# twice that it must do only once? You will kill a real worker process at every point where a crash
# can fall (崩溃点), resume it, and measure on this machine what each checkpoint design costs and
# whether it loses or duplicates anything.
#
# **How to use it.** Run each notebook top to bottom (Run ▸ Run All Cells). Every number and figure
# is computed live by real processes; nothing is pasted in. Before an experiment, a lesson often
# asks you to **predict** its result in a variable (`prediction_2_1 = ...`); the `check` after it
# compares your prediction with what was measured. Each lesson shows the lab's own code where it
# teaches, and ends with a panel to re-run its experiment, a short "what to remember", and a few
# common wrong statements to judge true or false. The [glossary](glossary.md) gives every term in
# English and in the Chinese of the source texts.
#
# **POSIX only.** The lab uses SIGKILL, `fsync`, `rename` and `flock`: Linux or macOS (on Windows,
# use WSL).

# %% [markdown]
# ## The lessons
#
# <!-- lesson: table -->
#
# [Glossary (English · 中文)](glossary.md)

# %% [markdown]
# ### How long a lesson takes
#
# <!-- lesson: time-rule -->

# %% [markdown]
# <!-- lesson: about -->
#
# **Contents.** [Is this machine ready?](#Is-this-machine-ready?) ·
# [The world of the agent](#The-world-of-the-agent) ·
# [Where a crash can fall](#Where-a-crash-can-fall) · [Three witnesses](#Three-witnesses) ·
# [What the lab reproduces](#What-the-lab-reproduces) · [Exercise](#Exercise) ·
# [Common wrong statements](#Common-wrong-statements) · [Further reading](#Further-reading)

# %%
# %matplotlib inline
import pandas as pd

from bughunt.lab.judges import check, quiz, solution
from bughunt.lab.lessons import l00_start_here as tour

pd.options.display.width = 120
pd.options.display.max_columns = 20

# %% [markdown]
# ## Is this machine ready?
#
# The same checks as `python -m bughunt doctor` in a terminal: the Python and package versions, the
# JupyterLab widget extension, and whether this folder really supports what the lab relies on
# (fsync of a file and of the folder, atomic rename, flock, killing a child with SIGKILL). Versions
# differ between machines, so the table is not checked by the tests; the line after it is.

# %% tags=["nbval-ignore-output"]
env = tour.environment()
env

# %%
print(f"{int(env.ok.sum())} of {len(env)} checks passed")
assert env.ok.all(), env[~env.ok][["detail", "fix"]]

# %% [markdown]
# ## The world of the agent
#
# The BugHunt agent explores a small synthetic site. Bugs are injected on pages 3, 7 and 10.

# %%
run = tour.inspect_clean_run()
run.site

# %% [markdown]
# Per page the worker (a separate process, `python -m bughunt.worker`) does four things:
#
# 1. asks the model what to do next. The model is the one part that is mocked: a deterministic stand-in
#    that answers with a reply and a token count. Each call is billed at call time on the
#    provider's **bill**, an append-only file the worker never rewrites;
# 2. visits the page;
# 3. on a bug page, files a report into the **tracker**, a real SQLite database. Each report
#    carries an **idempotency key** (幂等键), `bughunt:p03` for page 3: the tracker files a key
#    once, so sending the same report again files nothing. Before it files, the worker can
#    record an **intent** (意图): "I am about to file this key" (lesson 4 is about why);
# 4. commits the page's **checkpoint** (检查点): a durable recovery point a resumed worker starts
#    from. Here it is an event log, one JSON line per event.

# %%
print(f"model calls on the bill: {len(run.bill)}, tokens: {run.bill.tokens.sum()}")
run.reports

# %%
tour.CLAIMS.say("clean_run_pays_one_call_per_page")

# %% [markdown]
# Every event carries a sequence number (`seq`) and a checksum (`crc`, a number computed from the
# event's bytes, so a damaged line is noticed). State is rebuilt by applying these events, in order,
# with one pure function, `apply_event` (lesson 3 shows its code).

# %%
run.events

# %%
tour.clean_run_table()

# %%
tour.CLAIMS.say("log_holds_page_done_and_intents")

# %%
[name for name, size in run.files]

# %% [markdown]
# **0.2 Predict, then run.** The worker can run without intents (`RunConfig(intent=False)`): then
# it files a report without recording anything first. Take a longer site too: 20 pages, with bugs
# on pages 3, 7, 10, 15 and 19. How many events will the log of one clean run hold? Write your
# prediction, then run the cell after it: a clean run of exactly that.

# %%
prediction_0_2 = None        # a number of events

# %%
tour.clean_run_table(tour.LONG_SITE)

# %%
check("0.2", prediction_0_2)

# %% [markdown]
# ## Where a crash can fall
#
# The lesson fixes the moments where the worker can be killed, page by page: after the model call,
# after the visit, after the intent (bug pages with intents), after the report is filed (bug pages),
# in the middle of the checkpoint write, and after it.

# %%
tour.CLAIMS.say("intents_add_one_point_per_bug_page")

# %% [markdown]
# Each point has a **name**: the page, then the step, e.g. `p3.after_submit` (page 3, right after
# the report is filed). A name means the same moment in every configuration, so the lab, its panels
# and its exercises speak in names. Each point also has a **number**, its position in a clean run
# (the circles below): numbers shift between configurations. Without intents page 3 has no
# `after_intent`, so every number after it moves down (the cell after the map shows one point in
# both). `python -m bughunt points` lists names and numbers in a terminal.
# Numbers are still handy for one configuration: a sweep's picture puts its points in this order.

# %%
tour.crash_point_table()

# %%
tour.plot_crash_map()

# %%
tour.CLAIMS.say("numbers_shift_names_do_not")

# %% [markdown]
# The vermillion points are the danger window (危险窗口) of lesson 4: the report is in the tracker, the page is
# not yet saved.

# %% [markdown]
# ## Three witnesses
#
# Decide first, before you read on:

# %%
quiz("Q0.2")

# %%
answer_q0_2 = None

# %% [markdown]
# After a crash and a resume, the lab asks three witnesses whether the result is right, and they must
# agree (the three-way check, 三方一致):
#
# 1. the **tracker**: which reports exist, none twice, none missing;
# 2. the **resumed worker's memory**: what it believes it found;
# 3. a **fresh rebuild from disk** by code that did not run the worker: what the next recovery would
#    believe.
#
# The worker's memory is one witness, never the judge on its own: a worker can believe it filed a
# report the tracker does not hold, or rebuild a state the next recovery would not. And some facts
# it cannot know at all. Here is the same worker killed once and resumed:

# %%
tour.CLAIMS.say("the_bill_not_the_worker_counts_calls")

# %% [markdown]
# So model calls paid twice are not asked of any witness: they are read from the provider's bill,
# which holds every call of both processes and which no worker can rewrite.

# %%
check("Q0.2", answer_q0_2)

# %% [markdown]
# ## What the lab reproduces
#
# The source text behind this lab (two Chinese lessons on resuming an agent after a crash, whose
# terms the [glossary](glossary.md) gives) reports a table of figures from its own experiment.
# Here is that table beside the same experiment on this machine: five sweeps, every crash point
# killed with SIGKILL and resumed: 528 real processes.

# %%
result, table = tour.lesson_overview()
tour.lesson_table_view(table)

# %%
tour.CLAIMS.say("the_lesson_table_matches", "the_no_newline_trap")

# %% [markdown]
# The same table in a terminal: `python -m bughunt lesson`.
#
# ## Exercise
#
# **0.1** If the site had bugs on four pages (3, 7, 10 and 11) and intents were on, how many crash
# points would a 12-page run have?

# %%
answer_0_1 = None
check("0.1", answer_0_1)

# %% [markdown]
# ## Common wrong statements
#
# Each lesson has a few statements that sound right. Judge each one `True` or `False`; the
# check then measures, on this machine, and explains. (Q0.2 came up with the witnesses.) This one
# is about a site this page has not mapped:

# %%
quiz("Q0.1")

# %%
answer_q0_1 = None
check("Q0.1", answer_q0_1)

# %% [markdown]
# Stuck? `solution("0.1")` or `solution("Q0.2")` prints a worked answer.

# %% [markdown]
# ## Further reading
#
# - [signal(7)](https://man7.org/linux/man-pages/man7/signal.7.html): SIGKILL cannot be caught,
#   blocked or ignored, so no clean-up code runs.
# - [fsync(2)](https://man7.org/linux/man-pages/man2/fsync.2.html) and
#   [rename(2)](https://man7.org/linux/man-pages/man2/rename.2.html): the two calls the lab's
#   durable writes rest on.
# - T. S. Pillai et al., "All File Systems Are Not Created Equal", OSDI 2014 (ALICE):
#   [usenix.org](https://www.usenix.org/conference/osdi14/technical-sessions/presentation/pillai);
#   J. Mohan et al., "Finding Crash-Consistency Bugs with Bounded Black-Box Crash Testing", OSDI
#   2018 (CrashMonkey): [usenix.org](https://www.usenix.org/conference/osdi18/presentation/mohan).
#   How crash-recovery code is tested by enumerating crash states, as this lab does.
# - J. Corbet, ["PostgreSQL's fsync() surprise"](https://lwn.net/Articles/752063/), LWN, 2018:
#   what happens when an fsync fails (lesson 8).
# - Martin Kleppmann, ["How to do distributed locking"](https://martin.kleppmann.com/2016/02/08/how-to-do-distributed-locking.html)
#   (2016): locks, leases and fencing tokens (lessons 4 and 8).
#
# ---
# <!-- lesson: nav -->
