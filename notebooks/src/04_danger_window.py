# %% [markdown]
# <!-- lesson: header -->
#
# **The question.** A checkpoint records what the agent has done. But some of what it does happens
# *outside*: a bug report filed into a tracker cannot be taken back by a crash. What happens when the
# kill falls after the side effect and before the checkpoint that records it, and what can recovery
# do about a side effect it cannot see?
#
# **Recap of lesson 3.** Recovery rebuilds the state by replaying the event log, or starts from a
# snapshot and replays only the events after it: a snapshot every 4 pages cuts the replay from 7.26
# events on average to 1.98 (the lesson's figures), as Codex's compaction record does for its rollout.

# %% [markdown]
# <!-- lesson: about -->
#
# **Contents.** [The window](#The-window) · [The page loop](#The-page-loop,-in-the-lab's-code) ·
# [The window on a timeline](#The-window-on-a-timeline) ·
# [Every crash point](#Every-crash-point,-with-and-without-the-key) ·
# [Three choices](#Three-choices) · [Codex](#How-Codex-handles-the-window-(Codex-怎么处理这个窗口)) ·
# [Transfer](#Transfer:-intents-on-the-snapshot-store) ·
# [Exhaustive vs random](#Exhaustive-sweep-vs-random-kills) · [Try it](#Try-it) ·
# [What to remember](#What-to-remember) · [Common wrong statements](#Common-wrong-statements) ·
# [Further reading](#Further-reading)

# %%
# %matplotlib inline
import pandas as pd

from bughunt.experiment import kill_random
from bughunt.lab import diagrams
from bughunt.lab.judges import check, quiz, solution
from bughunt.lab.lessons import l04_danger_window as danger
from bughunt.lab.views import show_source, show_text_code, worker_step
from bughunt.world import Tracker

pd.options.display.width = 140
pd.options.display.max_columns = 20
pd.options.display.max_colwidth = 110

# %% [markdown]
# ## The window
#
# On page 3 the worker does three things in order: **visit the page → submit the report → write the
# checkpoint**. If the kill comes after the submit and before the checkpoint is durable, the
# checkpoint still says page 3 is not done. The resume redoes page 3, and the report is filed twice.
# This stretch of time is the **danger window (危险窗口)**: the side effect (副作用) is done, the
# checkpoint is not. A picture of one bug page, with the lab's crash points:

# %%
diagrams.plot_danger_window()

# %% [markdown]
# The process can never know from the inside whether that last side effect happened
# (进程内部永远没法知道被杀前那一下副作用到底做没做): the only record of the submit was in the
# memory of the process that died. Recovery decides from the checkpoint alone.
#
# Let us stand inside the window. A worker (snapshot after every page, no intents) is stopped right
# after page 3's submit; we read both records, kill it with a real SIGKILL from this notebook, and
# resume. Once without the idempotency key (幂等键), once with it.

# %%
danger.window_demo()

# %% [markdown]
# While the worker was paused, the tracker already held page 3's report, and the checkpoint still
# said the next page to do was 3. Both resumes did the same thing, redo page 3, because that is all
# the checkpoint allows. Without the key the tracker took the second report as a new one; with the
# deterministic key `bughunt:p03` it ignored it (`INSERT OR IGNORE` on a UNIQUE key).
#
# ## The page loop, in the lab's code
#
# One page, as the worker runs it: one method per rule, read from the package itself.

# %%
show_source(worker_step("run_page"))

# %% [markdown]
# The window opens inside `submit_report` and closes when `commit_page` returns. Their code, and
# the tracker's side of the key:

# %%
show_source(worker_step("submit_report"))

# %%
show_source(worker_step("commit_page"))

# %%
show_source(Tracker.submit)

# %% [markdown]
# The source text's loop, for comparison:

# %%
show_text_code("page_loop")

# %% [markdown]
# The same order: intent, submit, `page_done`. The differences:
#
# - **Knobs.** The lab's key and intent can be switched off (`idempotency_key`, `intent`), which is
#   how this lesson measures what each one buys; the text's always has both.
# - **Every change is an event.** `record_intent` and `commit_page` go through `commit`, which
#   applies the event with `apply_event` and makes it durable before the loop goes on.
# - **Crash points.** Each `self.plan.reach(...)` line is a named point where the lab's SIGKILL can
#   fall (`p3.after_submit`); `mid_commit` fires inside the commit's write. In a normal run they do
#   nothing.
# - **Per-operation checkpoints** (lesson 2) let a resume skip a model call or visit already saved.

# %% [markdown]
# ## The window on a timeline
#
# How wide is the window? One clean run with `trace=True` records the wall time of every crash point
# the worker reaches. From those marks we get each operation of each page (model call, visit, intent,
# submit, commit) and each danger window: from the end of the submit to the end of the commit. (The
# window really opens inside the submit, when the tracker's transaction commits, a moment before
# the submit returns.) This run uses the event log with intents and no key; times differ from run
# to run, so the notebook prints none of them: read them from the figure.

# %%
trace = danger.traced_run(danger.CHOICES["at least once"])
ops = danger.operations(trace)
windows = danger.danger_windows(ops)
print(f"{len(trace)} trace marks, {len(ops)} operations, danger windows on pages "
      f"{windows['page'].tolist()}")

# %%
danger.plot_window_timeline(ops, windows)

# %% [markdown]
# The top row is the whole run: the windows are slivers. The submit itself is the long bar: filing
# a report is a real SQLite transaction, which waits for the disk. Below, each bug page on a broken
# axis: the window covers only the commit, one log line handed to the kernel. A kill has to land in
# exactly that sliver to duplicate a report, which is why random kills so rarely find it (below).
#
# ## Every crash point, with and without the key
#
# Instead of hoping to hit the window, we kill at every crash point (穷举每个崩溃点) and resume. The
# lesson's experiment: a snapshot after every page, intents off, 51 crash points, once with the
# idempotency key off and once with it on. The same cell also runs the three choices of the next
# section (54 points each): 264 crash+resume pairs, each a real worker killed by SIGKILL and a
# second one resuming.
#
# **4.1 Predict** before it runs: with the key off, which crash points leave a report filed twice?
# A list of crash-point names (like `"p5.after_visit"`) or of steps (like `"after_visit"`).

# %%
prediction_4_1 = None        # e.g. ["after_visit"]

# %%
df = danger.danger_sweeps()
danger.key_table(df)

# %%
check("4.1", prediction_4_1)

# %% [markdown]
# The lesson found 6 crash points that duplicate a report without the key; the table puts this
# machine's count beside it. These are the points:

# %%
danger.duplicate_points(df, "key off")

# %% [markdown]
# Two points on each bug page, and always the same two: `after_submit` (the report is in the tracker,
# the page's snapshot not yet written) and `mid_commit` (the snapshot's temp file is written but not
# yet renamed into place, so it is not the checkpoint yet). One point earlier there is nothing to
# file twice; one point later the page is done. With the key, the resume redoes the page and the
# tracker ignores the second report: no duplicate anywhere.

# %%
danger.plot_key(df)

# %% [markdown]
# ## Three choices
#
# Since recovery cannot see whether the report was filed, it can only choose what to do with a page
# whose side effect may or may not have happened. The worker records an **intent (意图)** before the
# submit: an event `{"t": "intent", "page": 3, "key": "bughunt:p03"}` in the event log. A resume that
# finds an intent without its `page_done` knows it is in the window (or just before the submit), and
# the `pending` setting says what it does:
#
# | choice | settings | what recovery does with a pending intent | what can go wrong |
# |---|---|---|---|
# | at most once (至多一次) | key on, `pending="abort"` | records an `aborted` event and moves on, as Codex tells the model "aborted" | a report never filed stays unfiled (lost); a report that was filed is in the tracker but not in the agent's result |
# | at least once (至少一次) | key off, `pending="redo"` | files the report again | duplicates |
# | effectively once (效果上恰好一次) | key on, `pending="redo"` | files it again with the same deterministic key `f"{task_id}:p{page:02d}"`; the tracker deduplicates by `INSERT OR IGNORE` on a UNIQUE key | nothing, if the external system deduplicates |
#
# **4.2 Predict:** killed at `p3.after_intent` (the intent durable, the report not yet filed), which
# choice ends with a report lost? `"at most once"`, `"at least once"` or `"effectively once"`.

# %%
prediction_4_2 = None        # one of the three choices, in quotes

# %% [markdown]
# Each choice has run over the 54 crash points of the event log with intents (already in `df`):

# %%
danger.choices_table(df)

# %% [markdown]
# The lesson reports 54 of 54 log runs correct with intents and the key, the effectively-once row.
# Which verdict each choice gets at each point of a bug page (`verdict()` gives one word per run):

# %%
danger.verdicts_by_label(df)

# %%
check("4.2", prediction_4_2)

# %%
danger.plot_choices(df)

# %% [markdown]
# - **At most once** never files twice, but pays in two ways. Killed at `after_intent`, the report
#   was never filed and recovery gives the page up: lost. Killed at `after_submit` or `mid_commit`,
#   the report *was* filed, but the agent gave it up: the tracker has a report the agent's result
#   does not have, and the three-way check (tracker == memory == rebuild from disk) fails.
# - **At least once** never loses a report, and files it twice whenever the kill falls in the window.
# - **Effectively once** is at least once on the agent's side plus deduplication on the tracker's
#   side: redo with the same key, and the outside system makes the redo harmless. It needs both the
#   intent (to know the page may be half done) and an external system that honours the key.

# %% [markdown]
# ### How Codex handles the window (Codex 怎么处理这个窗口)
#
# - **Record first, then execute, best effort (先记录，再执行（尽力而为）).** When the model emits a
#   tool call, Codex's `handle_output_item_done` (in `codex-rs/core/src/stream_events_utils.rs`)
#   says: *"persist the item immediately, and queue the tool execution"*. It awaits the write of the
#   call to the rollout (write + flush, acknowledged by the writer task) and only then builds the
#   future that runs the tool. That is an intent record. But it only guarantees the order: if the
#   write fails, `persist_rollout_items` logs an error and the tool runs anyway. Our worker commits
#   the intent before it submits, and a failed write ends the worker before the submit.
# - **After recovery, a call without an output gets "aborted" (有调用、没输出，就补一个 "aborted").**
#   If the process died while a tool ran, the rollout holds a `function_call` with no
#   `function_call_output`. Each time a prompt is built, `ensure_call_outputs_present`
#   (`codex-rs/core/src/context_manager/normalize.rs`) inserts an output `"aborted"` right after
#   such a call. Only into the prompt, never into the rollout: it works on a copy of the history
#   (*"Prompt normalization can run repeatedly without persisting its synthetic outputs"*).

# %% [markdown]
# - **Codex never re-runs an interrupted tool itself.** It tells the model the call was aborted and
#   the model decides. In the harness that is at most once; if the model calls the tool again, it
#   becomes at least once, so whether the tool is idempotent is, in the end, the tool's business.
#   Our worker has no model in the loop: `pending="abort"` records an `aborted` event and moves on.
#
# Codex's code moves fast: line numbers move between versions, so search
# [openai/codex](https://github.com/openai/codex) for the function names above.

# %% [markdown]
# ## Transfer: intents on the snapshot store
#
# **4.3** A configuration this lesson has not run: the snapshot store (a snapshot after every page)
# **with intents on**, the key off, pending intents redone. It has 54 crash points. Predict how
# many of them end with a report filed twice, then run the sweep.

# %%
prediction_4_3 = None        # a number of crash points

# %%
danger.transfer_sweep()

# %%
check("4.3", prediction_4_3)

# %% [markdown]
# ## Exhaustive sweep vs random kills
#
# Why not kill at random a few dozen times and call it tested (为什么不随机 kill 几十次就算了)?
# `kill_random` does what a chaos test does: it starts the worker (no key, the 51-point
# configuration) as a fresh process, and when the worker says its run has started it waits a random
# delay and sends SIGKILL from outside, then resumes and looks for duplicates. The delays are drawn
# uniformly over the life of a clean run measured the same way: from the moment the run starts to
# the moment its last page is committed. (Interpreter start-up and shut-down are left out: a kill
# there can never hit anything.)
#
# One change to the world: each model answer takes 3 ms here (`latency_ms`). A real model takes
# seconds, so a real agent spends nearly all its life waiting for its model; with the lab's instant
# mock, the set-up's fsyncs would fill half the run instead. The source text did this 40 times:
# 39 real kills (the other try finished before its kill), 1 duplicate hit. The exhaustive sweep
# above found all 6 duplicate points, deterministically.

# %% [markdown]
# The **rule of three** (三的法则): if *n* independent tries show no failure, the failure rate is
# below about 3/*n* with 95% confidence (exactly 1 − 0.05^(1/*n*)). Even if the source text's 39
# kills had shown no failure at all, they would only prove a hit rate under 3/39 ≈ 7.7% (39 次随机
# kill 零失败也只能说明触发率上界约 3/39 ≈ 7.7%). Only kills inside the page loop could have hit a
# window, so the bound below is taken over those.
#
# The true rate is the windows' share of a run's life: their total width (the median of three
# traced runs) over the span the delays are drawn from. The window opens inside the submit, which
# no mark can see, so the share is a range: from the end of the submit (at least) and from its
# start (at most). This cell is random and timed: its numbers change every run, and a try can
# finish before its kill.

# %% tags=["nbval-ignore-output"]
random_kills = kill_random(danger.NO_KEY, tries=40, seed=4)
share = danger.window_share(danger.traced_runs(danger.NO_KEY, latency_ms=random_kills["latency_ms"]))
danger.random_summary(random_kills, share, df)

# %% [markdown]
# Where did the kills land? For each try, the last crash point its worker reached before the kill
# (`waiting_for_model`: the page's call was billed and its answer had not arrived, a call in flight):

# %% tags=["nbval-ignore-output"]
danger.landing_table(random_kills)

# %%
danger.plot_random_vs_exhaustive(random_kills, share, df)

# %% [markdown]
# Most kills land while the worker waits for its model, or in the set-up before page 1, where
# nothing can go wrong; a kill has to fall in a window of a few milliseconds on pages 3, 7 or 10 to
# duplicate a report. A duplicate from a kill whose last point was `after_visit` is no mistake: that
# kill fell inside the submit, after the tracker's transaction had committed.
#
# So a clean run of random kills proves little: the rule-of-three bound stays far above the real
# hit rate, and a zero says nothing about which points were never tried. The exhaustive sweep tries
# each point once, finds every duplicate, and gives the same answer on every machine. Test by
# enumerating crash points, and judge each run with the three-way check.
#
# ## Try it
#
# The panel starts from the lesson's safe design (event log, intents, key on, redo) at crash point
# `p3.after_submit`, in the middle of the window. Switch the **idempotency key** off, or set
# **pending intent** to `abort`, then press **Run sweep** to kill and resume at every point. Try the
# snapshot store with intents off and the key off: the lesson's 6 duplicate points. What does
# `abort` do with intents off? (There is never a pending intent to abort.)

# %% tags=["panel", "nbval-ignore-output"]
p = danger.panel()
p.show()

# %% [markdown]
# ## What to remember
#
# - The danger window: the side effect is done, its checkpoint is not. A process cannot know from
#   the inside whether the last side effect before its death happened.
# - Three choices: at most once (give up: reports may be lost), at least once (redo: duplicates),
#   effectively once (record an intent, redo with a deterministic idempotency key, let the external
#   system deduplicate). Only the last is right at every crash point.
# - An intent alone closes nothing: it tells recovery the page may be half done. The key, honoured
#   by the tracker, is what makes the redo harmless.
# - Codex records the tool call before running it (best effort), and after a crash shows the model
#   an "aborted" output it never writes to the rollout; it never re-runs the tool itself.
# - The windows are tiny: random kills rarely hit them, and the rule of three shows how little a
#   clean random run proves. Enumerate the crash points instead.

# %% [markdown]
# ## Common wrong statements
#
# True or false? Decide first; each check then measures and explains.

# %%
quiz("Q4.1")

# %%
answer_q4_1 = None
check("Q4.1", answer_q4_1)

# %%
quiz("Q4.2")

# %%
answer_q4_2 = None
check("Q4.2", answer_q4_2)

# %%
quiz("Q4.3")

# %%
answer_q4_3 = None
check("Q4.3", answer_q4_3)

# %%
quiz("Q4.4")

# %%
answer_q4_4 = None
check("Q4.4", answer_q4_4)

# %% [markdown]
# Stuck? `solution("4.1")`, `solution("4.3")` or `solution("Q4.2")` prints a worked answer.

# %% [markdown]
# ## Further reading
#
# - Martin Kleppmann, ["How to do distributed locking"](https://martin.kleppmann.com/2016/02/08/how-to-do-distributed-locking.html)
#   (2016): why a lock alone does not stop a second writer, and fencing tokens.
# - SQLite, [`ON CONFLICT` / `INSERT OR IGNORE`](https://www.sqlite.org/lang_conflict.html): the
#   tracker's deduplication.
# - Brandur Leach, ["Implementing Stripe-like Idempotency Keys in Postgres"](https://brandur.org/idempotency-keys)
#   (2017): idempotency keys on the receiving side of an API.
# - J. Mohan et al., "Finding Crash-Consistency Bugs with Bounded Black-Box Crash Testing", OSDI
#   2018 (CrashMonkey): [usenix.org](https://www.usenix.org/conference/osdi18/presentation/mohan).
#   Enumerating crash states systematically instead of hoping to hit them.
# - T. S. Pillai et al., "All File Systems Are Not Created Equal", OSDI 2014 (ALICE):
#   [usenix.org](https://www.usenix.org/conference/osdi14/technical-sessions/presentation/pillai).
# - The rule of three: J. A. Hanley and A. Lippman-Hand, "If nothing goes wrong, is everything all
#   right?", JAMA 249(13), 1983.
# - [openai/codex](https://github.com/openai/codex): search for `handle_output_item_done` and
#   `ensure_call_outputs_present`.
#
# ---
# <!-- lesson: nav -->
