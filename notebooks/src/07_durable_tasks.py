# %% [markdown]
# <!-- lesson: header -->
#
# **The question.** The BugHunt worker is one loop with its own checkpoint store. A durable task
# runtime generalises it: every piece of work is a task, a small state machine whose state is kept in
# a database. The second source text asks what happens when the process crashes ("崩溃了怎么办"):
# what does the runtime do with a task that was half way through a step, with a step that crashes
# every time, with a tool that may already have done its effect, and with a model request still
# streaming?
#
# **Recap of lesson 6.** Surviving `kill -9` only needs the data handed to the kernel; surviving power
# loss needs fsync. Here the store is SQLite, and we choose its durability setting on purpose.

# %% [markdown]
# <!-- lesson: about -->

# %% [markdown]
# **Contents.**
# [1 Counting to 5](#1.-Counting-to-5,-stopped-after-tick-2) ·
# [The task's states](#The-task's-states) ·
# [2 The step entry](#2.-A-checkpoint-is-a-step's-entry) ·
# [3 Memo](#3.-Memo:-first-write-wins) ·
# [4 Close, crash, look](#4.-A-clean-close-is-not-a-crash) ·
# [5 Crash loops](#5.-A-step-that-always-dies:-the-crash-loop-limit) ·
# [6 Tools](#6.-Tools:-why-the-execute-record-exists) ·
# [7 A model request in flight](#7.-A-model-request-in-flight) ·
# [8 The store](#8.-The-store:-SQLite,-one-writer,-its-own-files-only) ·
# [Try it](#Try-it) · [What to remember](#What-to-remember) · [Exercises](#Exercises) ·
# [Common wrong statements](#Common-wrong-statements) · [Further reading](#Further-reading)
#
# The lesson text walks through a TypeScript runtime (Pi's `packages/durable`). This notebook uses
# `bughunt.durable`, a small Python runtime on SQLite built the same way, and runs each example as
# a real process, killed with a real SIGKILL: `python -m bughunt.durable --help` lists them.

# %%
# %matplotlib inline
import pandas as pd

from IPython.display import display

from bughunt.durable import DurableStore, Step, runtime
from bughunt.durable.examples import count_kind
from bughunt.lab import diagrams
from bughunt.lab.judges import check, quiz, solution
from bughunt.lab.lessons import l07_durable_tasks as dt
from bughunt.lab.views import show_source, show_text_code

pd.options.display.width = 140
pd.options.display.max_columns = 20
pd.options.display.max_colwidth = 70

# %% [markdown]
# ## 1. Counting to 5, stopped after tick 2
#
# Two statements to decide before anything runs (true or false? each check then runs the example
# for real and explains):

# %%
quiz("Q7.1")

# %%
answer_q7_1 = None
check("Q7.1", answer_q7_1)

# %%
quiz("Q7.2")

# %%
answer_q7_2 = None
check("Q7.2", answer_q7_2)

# %% [markdown]
# The text's smallest example (示例 12) is a task that counts from 1 to 5. Each tick is one step:
#
# 1. look up the memo `printed-n` (a memo: a small named value stored with the task, where only
#    the first write counts; [section 3](#3.-Memo:-first-write-wins) shows it); if it is not set,
#    set it, then print `tick n`;
# 2. if n is 5, finish with "counted to 5"; otherwise commit the next checkpoint `{phase: tick,
#    n: n+1}` together with a wake time 10 ms later (`sleep_until`).
#
# The text's example stops after tick 2 with a clean **close**, right after the print and before the
# next checkpoint is committed, and then shows the SQLite `tasks` table with this query, its
# "storage in practice" (存储实况). We run the same program and the same query, with pandas, on a
# read-only connection:

# %%
print(dt.TEXT_QUERIES["example 12"])
closed = dt.count_story(2, where="close")
print("first process:", closed.printed["first"], "->", closed.exits["first"])
closed.queries["after the close"]

# %%
dt.CLAIMS.say("the_close_leaves_the_texts_row")

# %% [markdown]
# The resume prints the rest:

# %%
print("resumed process:", closed.printed["resume"], "->", closed.result)

# %% [markdown]
# Now the same moment with a real `kill -9` instead of a close:

# %%
count = dt.count_story(2)
print("first process:", count.printed["first"], "->", count.exits["first"])
count.queries["after the crash"]

# %% [markdown]
# Opening the store is recovery: every `running` task was cut off mid-step, so it goes back to
# `pending`, keeps its checkpoint, and its `restarts` grows by one (here a `recover` process only
# opens and closes the store):

# %%
count.queries["after open"]

# %%
print("resumed process:", count.printed["resume"], "->", count.result)
count.moments["after the finish"]

# %%
dt.CLAIMS.say("the_killed_step_reruns_without_reprinting")

# %% [markdown]
# The step re-ran but did not do its effect twice (重跑了，但没有重复做).
#
# ### The task's states
#
# The count went `pending` → `running` → `sleeping` (each tick's `sleep_until`) → `running` ... and
# was cut off while `running`; opening the store sent it back to `pending`. The whole task state
# machine (状态机) of the runtime: every box is a status the store's schema allows, every arrow a
# transition the runtime or the store implements (a test checks each arrow against the code it
# names).

# %%
diagrams.plot_task_states()

# %% [markdown]
# The dashed arrow is the way back after a crash (or a clean close), and it starts only from
# `running`: a `sleeping` or `waiting` task is not in the middle of a step, so it has nothing to
# redo and keeps its state.
#
# ## 2. A checkpoint is a step's entry
#
# The checkpoint records which step to (re)enter, not how far inside the step the task got
# (checkpoint 记的是这一步的入口). After a crash the whole step runs again from its start, so **every
# step must be safe to run again**. The count's step, as the lab runs it, then as the source text
# gives it:

# %%
show_source(count_kind, lines=("def tick", "step.sleep_until"))

# %%
show_text_code("tick")

# %% [markdown]
# The same step: look up the memo, set it, print; finish at `to`; otherwise commit the next
# checkpoint with a wake time. The differences: `MISSING` is the lab's "no memo yet" (the text's
# `undefined`); `out` is the example's print (a JSON line when the lab runs it); the lab's ticks
# sleep 10 ms, not 50; `finish` is the lab's shorthand for the text's commit of a `terminal`
# state; and the `crash_*`, `close_*` and `pause_*` lines are this example program's own flags,
# which stop it exactly where the lesson needs (the runtime itself has none). Every change of
# state goes through one commit that enters a step:

# %%
show_source(Step._commit)

# %% [markdown]
# One transaction reads the task's record, replaces its state (a full replacement, as in the text's
# runtime), drops the restart count when this is progress and the memos when the task ends, and
# writes the record back with its checksum. `commit`, `sleep_until`, `wait_for`, `finish` and
# `fail` all go through it. And this is recovery, the lab's, then the source text's:

# %%
show_source(DurableStore.recover)

# %%
show_text_code("recover")

# %% [markdown]
# The same rule: only `running` changes, the checkpoint is kept, `restarts` grows by one. Two
# differences: here recovery is a method the runtime calls after checking that it can run every
# live task (a task of a kind it does not know is refused before anything is written), and all
# changes are one commit.
#
# ## 3. Memo: first write wins
#
# A memo is a small value kept with the task; for one name, only the first write counts (memo 的规则
# 是同一个名字只认第一次写入). Reading the winner and offering a candidate are one commit, so a step
# that runs twice gets the same answer both times. Two processes propose different values for one
# memo; the first is killed right after its write:

# %%
dt.memo_story()

# %%
dt.CLAIMS.say("the_first_memo_write_wins")

# %% [markdown]
# The order of memo and effect is a choice. Count writes the memo *before* the print. The example
# can also print first (`count --memo-after-print`).
#
# **Predict (exercise 7.1):** count to 5 with the print first is killed after tick 4's print and
# before its memo, then resumed. Which ticks do both processes print together? Set your
# prediction, then run the experiment below it.

# %%
prediction_7_1 = None        # e.g. [1, 2, 3]

# %%
twice = dt.count_story(4, where="before-memo")
print("first process:", twice.printed["first"], "| resumed process:", twice.printed["resume"])
check("7.1", prediction_7_1)

# %%
dt.CLAIMS.say("print_first_prints_twice")

# %% [markdown]
# With the memo first, a kill between the two loses that print instead. Which order is right
# depends on the effect.
#
# ## 4. A clean close is not a crash
#
# The same count stopped after tick 2, once by a clean close and once by SIGKILL, then opened again:

# %%
dt.close_vs_crash_table()

# %%
dt.CLAIMS.say("only_a_crash_counts")

# %% [markdown]
# Only a real cut-off counts (真被切断才算). The count matters for the next section.
#
# To inspect a crashed run without recovering it, open the store read-only. True or false, before
# you run it?

# %%
quiz("Q7.3")

# %%
answer_q7_3 = None
check("Q7.3", answer_q7_3)

# %%
dt.read_only_proof()

# %%
dt.CLAIMS.say("read_only_changes_nothing")

# %% [markdown]
# The source text says a read-only session refuses `commit()` and `resume()` with
# `ReadOnlySession` ("都会报 ReadOnlySession"); the lab's name for it is `ReadOnlyError`.

# %% [markdown]
# ## 5. A step that always dies: the crash-loop limit
#
# Some steps crash every time: a poison input, a bug, memory that never suffices. Restarting them
# forever burns the machine and hides the failure. The runtime counts restarts **in a row without
# progress**; at the limit (5 by default, configurable, or unlimited) the task ends instead of
# running again: its status becomes `terminal`, with the outcome `faulted` and the reason
# `restart_limit` (the table's outcome column shows that reason), and the runtime reports
# `task_faulted`. A step that SIGKILLs itself, started again and again:

# %%
loop5 = dt.restart_limit_story(5)
loop5

# %%
dt.plot_restart_limits({"limit 5 (default)": loop5, "limit 2": dt.restart_limit_story(2),
                        "no limit": dt.restart_limit_story(None, runs=8)})

# %%
dt.CLAIMS.say("the_limit_ends_a_crash_loop")

# %% [markdown]
# **Progress resets the count** (取得进展后，计数清零). Three steps, each killed twice before it gets
# through, with the limit at 3. Each step's progress resets the count in a row:

# %%
reset = dt.reset_story(dies=2, steps=3, limit=3)
dt.plot_reset(reset, limit=3)

# %%
dt.CLAIMS.say("progress_resets_the_count")

# %% [markdown]
# A count that never resets (as DBOS counts every attempt, see below) would have ended this task at
# its third cut-off, although it was moving on each time.
#
# **Built-in tasks** end with their own visible result instead of `faulted`, and report
# `task_interrupted`: a tool writes a `restart_limit` error result, a model request (a generation)
# ends with `runFailure`. Both, cut off at the same place until the limit (here 2) ends them:

# %%
pd.concat({"tool": dt.builtin_limit_story("tool"),
           "generation": dt.builtin_limit_story("generation")}, names=["task", "start"])

# %% [markdown]
# Other durable-execution systems answer the same question differently (their public
# documentation, see Further reading):

# %%
dt.peers_table()

# %% [markdown]
# ## 6. Tools: why the execute record exists
#
# A game save rewinds the whole world; reality does not. A line appended to a file stays appended.
# Reading a file can be repeated harmlessly; appending a line or sending an email cannot. So tasks
# may be re-run, but tools must not be re-run blindly.
#
# One tool call passes four checkpoints: **①** the agent waits (`tools`) on a new tool task at
# `call`; in `call` the runtime resolves the tool and runs the `beforeTool` hook; **②** it commits
# the intent `{phase: execute, arguments, replay}` and runs the tool; **③** the tool's result is
# committed; **④** the agent reads it and goes on. Our probe's `append` tool writes "working" as
# progress output and appends `hello` to `notes.txt`; its `beforeTool` hook logs each run and takes
# its decision from a memo. We kill the call after ① (in `call`), after ② (before the tool and once
# inside it) and after ③; after ④ the call is over and nothing is left to recover. Then we resume
# and measure.
#
# **Predict (exercise 7.2):** killed right after ② (the intent is committed, the tool has not
# started), then resumed. How many lines will `notes.txt` have, and will the tool's result be
# `"completed"` or `"failed"`?

# %%
prediction_7_2 = None        # a tuple, e.g. (1, "completed")

# %%
dt.tool_checkpoints("unsafe")

# %%
check("7.2", prediction_7_2)

# %%
dt.CLAIMS.say("each_tool_checkpoint_measured")

# %% [markdown]
# - In `call` (before ②) the call phase runs again, so a hook must be safe to re-run; its memo
#   keeps the first decision.
# - After ② recovery knows only "the tool may have started". An `unsafe` tool is not re-run; the
#   result says it "was interrupted and may have partially run", even when it never ran.
#
# Without the `execute` record, every crash after ① would re-run the whole call phase and then the
# tool: a tool that had already acted would act twice. That is the answer to the text's question.

# %% [markdown]
# Recovery in `execute`, the lab's, then the source text's:

# %%
show_source(runtime._tool_execute)

# %%
show_text_code("execute")

# %% [markdown]
# The rule is the text's (it cites `tool.ts:202`): re-run only if the policy stored with the intent
# **and** the tool's current declaration are both `safe`; a tool missing from the registry counts as
# unsafe. In Pi's public source the rule is [`tool.ts` line 98 at commit
# 00cdb7b](https://github.com/earendil-works/pi/blob/00cdb7b14b105d449c48d1a28069c3ef29654d32/packages/durable/src/harness/tool.ts#L98)
# (`replay === "safe" && tool?.replay === "safe"`). Differences: the text's `execute` checks the
# restart limit itself (`cutOffTooOften`); here the runtime checks it for every kind before any step.
# Its `settleFromSlot` is our `_tool_result`, the partial output in front of the `<harness>` error.
#
# **Predict (exercise 7.3):** the intent was stored `safe`; after an upgrade the tool declares no
# `replay` at all; the process was killed inside the tool. Does the tool run again (True or False)?

# %%
prediction_7_3 = None        # True or False

# %%
cells = [dt.replay_cell(s, c) for s in ("safe", "unsafe") for c in ("safe", "unsafe")]
dt.replay_policy_table(cells)

# %%
undeclared = dt.replay_cell("safe", "undeclared")
check("7.3", prediction_7_3)

# %%
dt.CLAIMS.say("undeclared_is_unsafe")

# %% [markdown]
# The source text says the same ("工具自己没写 replay 的，默认是 unsafe"); in Pi's source the intent
# records `replay: tool.replay ?? "unsafe"` ([`tool.ts` line 88 at
# 00cdb7b](https://github.com/earendil-works/pi/blob/00cdb7b14b105d449c48d1a28069c3ef29654d32/packages/durable/src/harness/tool.ts#L88)).

# %%
dt.plot_replay(cells)

# %%
dt.CLAIMS.say("only_safe_safe_reruns")

# %% [markdown]
# That is why an append must not be declared safe: the declaration is a promise the runtime takes
# literally. The text's probe table, with its own query, before and after the open:

# %%
probe = dt.tool_story("unsafe")
print(dt.TEXT_QUERIES["tool probe"])
pd.concat({k: probe.queries[k] for k in ("after the crash", "after open")}, names=["moment", ""])

# %%
print(probe.result["content"])
print("is_error:", probe.result["is_error"])

# %%
dt.CLAIMS.say("the_interrupted_result_is_an_error")

# %% [markdown]
# The agent task waits (`waiting`, phase `tools`) while its tool runs, like the text's
# `pi.generation` row. The interrupted result, partial output first, goes back to the agent like
# any tool result, marked as an error (the text's `isError: true`), and the model decides.
#
# **The partial output is kept here, and may not be in Pi.** The lab's `step.output` commits
# "working" at once, before the append. The source text says Pi persists a tool's output late
# ("工具运行中的输出是延迟落盘的"): its probe must wait past `settings.progress.persistWithinMs`
# (1000 ms by default, the text says) before the kill to show "working", and a real crash may lose
# that output. (In Pi's source at 00cdb7b, `publishProgress` in `tool.ts` commits progress through
# a throttle; the lab's reading, not a claim about every version.)
#
# ## 7. A model request in flight
#
# True or false, first:

# %%
quiz("Q7.4")

# %%
answer_q7_4 = None
check("Q7.4", answer_q7_4)

# %% [markdown]
# A generation task records `{phase: stream, attempt}` before it sends a request, the same
# intent-before-effect as a tool. If the process dies while the answer streams (模型请求正在飞), the
# next process does not pretend nothing happened: the attempt counts as failed, the half answer is
# kept as an `aborted` entry that is never sent to the model, and after a backoff the next attempt
# sends the same messages. Killed once, mid-stream:

# %%
gen = dt.generation_story("crash")
gen["processes"]

# %%
gen["requests"]

# %%
gen["outcome"]

# %%
dt.CLAIMS.say("the_retry_resends_the_same_messages")

# %% [markdown]
# The source text: "如果崩的时候模型请求正在飞，恢复时不会把这次请求再发一遍：这次尝试算一次失败，按
# settings.retry 退避" (if the process dies while a model request is in flight, recovery does not
# send that request again: the attempt counts as a failure, and the retry backs off). The two billed
# requests agree with it: the interrupted attempt 1 is not resumed or re-sent as if nothing had
# happened; it is recorded as failed, and after the backoff a *new* attempt, 2, sends the same
# messages, and the provider bills it as a new request.
#
# When every attempt is killed, the retries run out, and a clean close is not a failed attempt
# (close 之后重开仍会重发):

# %%
exhaust, close = dt.generation_story("exhaust"), dt.generation_story("close")
print("killed at every attempt:", {k: exhaust["outcome"][k] for k in ("message", "reason",
                                                                      "input")},
      "| requests billed:", len(exhaust["requests"]), "| reports:", exhaust["reports"])
print("closed mid-stream: answered at attempt", close["outcome"]["result"]["attempt"],
      "| requests billed:", len(close["requests"]))

# %%
dt.CLAIMS.say("retries_run_out_and_a_close_resends")

# %%
show_source(runtime._generation_stream)

# %% [markdown]
# ## 8. The store: SQLite, one writer, its own files only
#
# `bughunt.durable` keeps one row per task: `id`, `kind`, `status`, the full record as JSON, and a
# CRC of them (SQLite pages carry no checksum, so a flipped bit would otherwise be believed). Each
# commit is one `BEGIN IMMEDIATE … COMMIT`: a task is always before or after a commit, never half
# way. WAL mode with `synchronous=FULL`: each commit fsyncs the write-ahead log, so a committed
# memo or checkpoint survives a power cut too. `NORMAL` survives `kill -9` with fewer fsyncs, but
# may lose the newest commits on power loss (lesson 6).
#
# **One runtime per database.** Two runtimes on one database would both run the same steps. A
# writable open takes an exclusive `flock` on `c.db.lock`; the kernel drops it when the holder dies.
# A second runtime is refused at once (exit 75); with `--wait` it waits and takes over:

# %%
with pd.option_context("display.max_colwidth", 120):
    display(dt.lock_story())

# %% [markdown]
# **Refuse, don't guess.** A database marks itself as the runtime's own (SQLite's
# `application_id`), and every open checks the header, the schema, SQLite's integrity check and
# every record's checksum before it writes anything. Anything else gets one sentence and no change:

# %%
with pd.option_context("display.max_colwidth", 140):
    display(dt.refusals_table())

# %% [markdown]
# ## The same idea in the BugHunt worker
#
# | | durable task runtime (this lesson) | BugHunt worker (lessons 2–6) |
# |---|---|---|
# | recovery point | a step's entry; the step re-runs | a page (or an operation); the page re-runs |
# | "did I already do it?" | memo, first write wins | the event log's `intent` / `page_done` |
# | before a side effect | `{phase: execute, arguments, replay}` | an `intent` event with an idempotency key |
# | may have happened, not safe to repeat | "interrupted and may have partially run" | `--pending abort`: at most once |
# | may have happened, safe to repeat | `replay: safe` on both sides: run again | `--pending redo` with the key: effectively once |
# | one writer | `flock` on `c.db.lock`, exit 75 | `flock` on `run.lock`, exit 75 |
# | crash loop | `restart_limit` after 5 cut-offs without progress | not guarded in the worker: a page that always kills it is restarted as often as you restart it |
#
# The idempotency key is what makes "filing a report" safe to replay: the tracker, not the worker,
# guarantees a second filing changes nothing. A tool whose external system deduplicates like that is
# one you may honestly declare `safe`.

# %% [markdown]
# ## Try it
#
# Choose where the count stops (a kill after the print, a kill between memo and print, or a clean
# close); the tool's stored and current replay policy and where the tool call is killed (with
# `in-execute`, the 2×2 grid shows the cell just run, outlined, beside the other three as this
# kernel last measured them); the restart limit; and how the model request is stopped. **Run**
# re-runs the stories as real processes.

# %% tags=["panel", "nbval-ignore-output"]
p = dt.panel()
p.show()

# %% [markdown]
# ## What to remember
#
# - A checkpoint is the entry of a step, not progress inside it: after a crash the step runs again,
#   so every step, and every hook it calls, must be safe to run again. A memo (first write wins)
#   makes a re-run step skip what it already did; memo-before-effect means at most once.
# - Opening the store turns `running` tasks back to `pending` with their checkpoint and counts a
#   restart; a clean close does not count. A read-only open changes nothing.
# - A crash loop needs a limit: N restarts in a row without progress, then the task ends; progress
#   resets the count. Built-in tasks end with their own result and report `task_interrupted`.
# - A tool records `execute` before it runs; recovery re-runs it only if the stored and the current
#   policy are both `safe`, and otherwise tells the model it "may have partially run".
# - A model request in flight at a crash is a failed attempt: its half answer is kept as aborted,
#   never sent, and the request is retried until the retries run out (`runFailure`).
# - One runtime per database, its own databases only, and a refusal rather than a guess.

# %% [markdown]
# ## Exercises
#
# Three configurations this lesson has not run. Predict first, then run the experiment below your
# prediction, then the check: it compares.
#
# **7.4 Transfer.** With `--restart-limit 3`, a flaky task has 2 steps, and each step dies 3 times
# before it gets through (`flaky --dies 3 --steps 2`). Its status ends `terminal` either way: is
# its outcome `"completed"` or `"faulted"`?

# %%
prediction_7_4 = None        # "completed" or "faulted"

# %%
flaky = dt.reset_story(dies=3, steps=2, limit=3)
dt.plot_reset(flaky, limit=3)

# %%
check("7.4", prediction_7_4)

# %% [markdown]
# **7.5 Transfer.** A model request is killed mid-stream at every attempt, with 1 retry (`generate
# --retries 1 --crash-mid-stream`, started until the task ends). How many requests does the
# provider bill?

# %%
prediction_7_5 = None        # a number of requests

# %%
once_retried = dt.generation_story("exhaust", retries=1)
once_retried["processes"]

# %%
check("7.5", prediction_7_5)

# %% [markdown]
# **7.6 Transfer.** A problem drawn for this lesson (`python -m bughunt practice --lesson 7 --seed
# 6` prints the same one; other seeds give others). Predict, then check: the check runs it.

# %%
dt.TRANSFER

# %%
prediction_7_6 = None        # a number of lines

# %%
check("7.6", prediction_7_6)

# %% [markdown]
# ## Common wrong statements
#
# This lesson's true-or-false statements stand before the passages that answer them, so that you
# decide first: Q7.1 and Q7.2 at the start of [section 1](#1.-Counting-to-5,-stopped-after-tick-2),
# Q7.3 in [section 4](#4.-A-clean-close-is-not-a-crash), Q7.4 in
# [section 7](#7.-A-model-request-in-flight).

# %% [markdown]
# Stuck? `solution("7.4")` or `solution("Q7.1")` prints a worked answer.
#
# ## Further reading
#
# - Pi's durable runtime, the text's subject: [earendil-works/pi, `packages/durable`](https://github.com/earendil-works/pi/tree/main/packages/durable)
# - SQLite: [`PRAGMA application_id`, `user_version`, `integrity_check`](https://www.sqlite.org/pragma.html),
#   [write-ahead logging](https://www.sqlite.org/wal.html),
#   [the file format, WAL checksums](https://www.sqlite.org/fileformat.html#the_write_ahead_log),
#   [`->>` and `json_extract`](https://www.sqlite.org/json1.html)
# - [flock(2)](https://man7.org/linux/man-pages/man2/flock.2.html): the one-writer lock
# - Crash-loop limits: [Temporal retry policies](https://docs.temporal.io/encyclopedia/retry-policies),
#   [DBOS `max_recovery_attempts`](https://docs.dbos.dev/python/reference/decorators),
#   [Restate retries](https://docs.restate.dev/services/configuration),
#   [Inngest retries](https://www.inngest.com/docs/features/inngest-functions/error-retries/retries)
#
# ---
# <!-- lesson: nav -->
