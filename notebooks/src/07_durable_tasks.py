# %% [markdown]
# # Lesson 7 · Durable tasks: a checkpoint is where a step starts
#
# [← Lesson 6: kill -9 vs power loss](06_kill9_vs_power_loss.ipynb) · [Start here](00_start_here.ipynb) · [Lesson 8: beyond the lesson →](08_beyond.ipynb)
#
# **The question.** The BugHunt worker is one loop with its own checkpoint store. A durable task
# runtime generalises it: every piece of work is a task, a small state machine whose state is kept in
# a database. When the process crashes (崩溃了怎么办), what does the runtime do with a task that was
# half way through a step, with a step that crashes every time, and with a tool that may already have
# done its effect?
#
# **Recap of lesson 6.** Surviving `kill -9` only needs the data handed to the kernel; surviving power
# loss needs fsync. Here the store is SQLite, and we choose its durability setting on purpose.
#
# The lesson text walks through a TypeScript runtime (Pi's `packages/durable`). This notebook uses
# `bughunt.durable`, a small Python runtime on SQLite built the same way, and runs each of the
# lesson's examples as a real process killed with SIGKILL: `python -m bughunt.durable --help`.

# %%
# %matplotlib inline
import pandas as pd

from bughunt.lab import durable_tasks as dt
from bughunt.lab.exercises import check, solution

pd.options.display.width = 120
pd.options.display.max_columns = 20
pd.options.display.max_colwidth = 60

# %% [markdown]
# ## Counting to 5, killed after tick 2
#
# The lesson's smallest example (示例 12) is a task that counts from 1 to 5. Each tick is one step:
#
# 1. look up the memo `printed-n`; if it is not set, set it, then print `tick n`;
# 2. if n is 5, finish with "counted to 5"; otherwise commit the next checkpoint `{phase: tick,
#    n: n+1}` together with a wake time 10 ms later (`sleep_until`), and sleep.
#
# We kill the process right after it prints tick 2, before the next checkpoint is committed, and read
# the SQLite `tasks` table at each moment, the way the lesson's "storage in practice" (存储实况)
# tables do. Each table is read with a read-only connection.

# %%
count = dt.count_story(crash_tick=2)
print("first process:", count.printed["first"], "then killed by signal", -count.exits["first"])
count.moments["after the crash"]

# %% [markdown]
# The task is still `running`: nobody was left to say otherwise. Its checkpoint is the **entry** of
# tick 2's step (n = 2), and both memos are there. Opening the store is recovery: every `running`
# task was cut off mid-step, so it goes back to `pending`, keeps its checkpoint, and its `restarts`
# grows by one.

# %%
count.moments["after open"]

# %%
print("resumed process:", count.printed["resume"], "->", count.result)
count.moments["after the finish"]

# %% [markdown]
# Tick 2's step **ran again** (the checkpoint said n = 2), but it did **not print again**: the memo
# `printed-2` was already set (重跑了，但没有重复做). At the end the task is `terminal`, and its memos and
# restart count are gone.
#
# ## A checkpoint is a step's entry, not its progress
#
# The checkpoint records which step to (re)enter, not how far inside the step the task got
# (checkpoint 记的是这一步的入口). After a crash the whole step runs again from its start, so **every step
# must be safe to run again**. The memo is the tool for that: a small first-writer-wins value stored
# with the task, so a re-run step can ask "did I already do this?" and get the same answer each time.
#
# The order of memo and effect is a choice. Here the memo is written *before* the print: a kill
# between the two loses that print (at most once), but can never print it twice. Let us kill exactly
# there:

# %%
lost = dt.count_story(crash_tick=2, where="before-print")
print("first process:", lost.printed["first"], "| resumed process:", lost.printed["resume"])

# %% [markdown]
# Tick 2 is never printed. Writing the memo after the print would turn this into "at least once":
# a kill between them prints tick 2 twice. Which one is right depends on the effect.
#
# `sleep_until` commits the next checkpoint and the wake time in one transaction, so a sleeping task
# holds no process, and a crash while it sleeps changes nothing: only `running` tasks are turned back
# by the next open.
#
# ## A clean close is not a crash

# %%
dt.close_vs_crash()

# %% [markdown]
# Both end `pending` after the next open with the checkpoint kept; only the crash is counted as a
# restart. The count matters for the next section.
#
# ## Looking without touching: a read-only open
#
# To inspect a crashed run without recovering it, open the store read-only. It sees the task as the
# crash left it (still `running`), refuses any commit or resume, and changes no byte of the database
# or its write-ahead log:

# %%
dt.read_only_proof()

# %% [markdown]
# ## A step that always dies: the crash-loop limit
#
# Some steps crash every time they run: a poison input, a bug, memory that never suffices. Restarting
# them forever burns the machine and hides the failure. The runtime counts restarts **in a row
# without progress**; at the limit (5 by default, configurable, or unlimited) the task ends as
# `faulted` with reason `restart_limit` instead of running again. Any progress, meaning a new
# checkpoint, resets the count. Here a step that SIGKILLs itself is started again and again:

# %%
loop5 = dt.restart_limit_story(5)
loop5

# %%
dt.plot_restart_limits({"limit 5 (default)": loop5, "limit 2": dt.restart_limit_story(2),
                        "no limit (8 starts shown)": dt.restart_limit_story(None, runs=8)})

# %% [markdown]
# Other durable-execution systems answer the same question differently:

# %%
dt.peers_table()

# %% [markdown]
# DBOS counts every dispatch and only an explicit resume resets it; the lesson's runtime counts
# consecutive cut-offs and lets progress reset them, so a long task that crashes now and then, but
# moves on each time, is never stopped.
#
# ## Tools: record `execute`, then decide on recovery
#
# A game save rewinds the whole world; reality does not. A line appended to a file stays appended.
# Reading a file can be repeated harmlessly; appending a line or sending an email cannot. So tasks may
# be re-run, but tools must not be re-run blindly.
#
# Before running a tool, its task commits `{phase: execute, arguments, replay}`: the intent, with the
# tool's declared replay policy (`safe` or `unsafe`; undeclared means unsafe). Recovery that finds a
# tool task in `execute` knows the tool may have started. It runs the tool again only if the policy
# stored with the intent **and** the tool's current declaration are both `safe`; an unknown tool
# counts as unsafe. Otherwise the result says the tool "was interrupted and may have partially run",
# carrying whatever output the tool had persisted before the crash, and the model decides what to do.
#
# The lesson's probe: an `append` tool writes "working" as progress output, appends `hello` to
# `notes.txt`, and is killed before its result is recorded. First with `unsafe`, the default:

# %%
unsafe = dt.tool_story("unsafe")
unsafe.moments["after the crash"]

# %%
unsafe.moments["after open"]

# %%
print(unsafe.result["content"])
print("notes.txt:", unsafe.notes)
unsafe.moments["after the finish"]

# %% [markdown]
# The agent task waited (`waiting`, phase `tools`) while its tool ran, like the lesson's
# `pi.generation` row. The tool did not run again: `notes.txt` has one line, and the interrupted
# result, partial output first, goes back to the agent like any tool result. Now the same probe
# declared `safe`:

# %%
safe = dt.tool_story("safe")
print(safe.result["status"], "->", safe.result["result"]["content"], "| notes.txt:", safe.notes)

# %% [markdown]
# Declared safe, it **did** run again, and the file now has two lines. That is why an append must not
# be declared safe: the declaration is a promise the runtime takes literally.
#
# ## The store: SQLite, one transaction per commit
#
# `bughunt.durable` keeps one row per task: `id`, `kind`, `status`, and the full record as JSON. Each
# commit replaces the record in one `BEGIN IMMEDIATE … COMMIT`, so a task is always before or after a
# commit, never half way. The database runs in WAL mode with `synchronous=FULL`: each commit fsyncs
# the write-ahead log, so a memo or checkpoint that was committed survives a power cut too.
# `synchronous=NORMAL`, which the lesson's runtime uses, survives a killed process (all `kill -9`
# can do) with fewer fsyncs, but may lose the newest commits on power loss; a lost memo would let a
# re-run step repeat an effect it had ruled out (lesson 6).
#
# ## Where the published runtime differs from the lesson
#
# The lesson describes a newer version of Pi's runtime than the public sources we could read
# (`../shared/research/anchors-codex-pi.md`, section 2). In those sources:
#
# - the example is `13-recovery.ts`, and it commits the next checkpoint and then calls
#   `runtime.sleep(...)`; `sleepUntil` and a `sleeping` status do not exist yet, and the states
#   include `completing`, which the lesson leaves out;
# - the `restarts` counter, `restartLimit` (5), its reset on progress and the `restart_limit` fault
#   are not in the code; the nearest rule faults a step that returns without changing its checkpoint
#   ("no durable progress"), which `bughunt.durable` also applies;
# - `close()` writes nothing, so a closed task stays `running` on disk until the next open; the
#   lesson's `pending` after close matches a newer close;
# - a `readOnly` open is not there, and the option the lesson calls `persistWithinMs` is named
#   `progress.outputIntervalMs`;
# - the tool replay rule (both policies `safe`, unknown tool unsafe, the "interrupted and may have
#   partially run" text with the partial output) is exactly as the lesson says.
#
# `bughunt.durable` follows the lesson where the two differ.
#
# ## The same idea in the BugHunt worker
#
# | | durable task runtime (this lesson) | BugHunt worker (lessons 2–6) |
# |---|---|---|
# | recovery point | a step's entry; the step re-runs | a page (or an operation); the page re-runs |
# | "did I already do it?" | memo, first write wins | the event log's `intent` / `page_done` |
# | before a side effect | `{phase: execute, arguments, replay}` | an `intent` event with an idempotency key |
# | effect may have happened, not safe to repeat | "interrupted and may have partially run" | `--pending abort`: an `aborted` event (Codex's way): at most once |
# | effect may have happened, safe to repeat | `replay: safe` on both sides: run again | `--pending redo` with the key: the tracker deduplicates: effectively once |
# | crash loop | `restart_limit` after 5 cut-offs without progress | not guarded (a lesson 8 topic) |
#
# The idempotency key is what makes "filing a report" safe to replay: the tracker, not the worker,
# guarantees a second filing changes nothing. A tool whose external system deduplicates like that is
# one you may honestly declare `safe`.

# %% [markdown]
# ## Try it
#
# Choose the tick the count is killed at, and whether the kill falls after the print or between the
# memo and the print; the tool's replay policy; and the restart limit. **Run** re-runs all three
# stories as real processes and shows the tables at each moment.

# %% tags=["panel", "nbval-ignore-output"]
p = dt.panel()
p.show()

# %% [markdown]
# ## What to remember
#
# - A checkpoint is the entry of a step, not progress inside it: after a crash the step runs again,
#   so every step must be safe to run again. Memos (first write wins) make a re-run step skip what it
#   already did; memo-before-effect means at most once.
# - Opening the store turns `running` tasks back to `pending` with their checkpoint and counts a
#   restart; a clean close does not count. A read-only open changes nothing.
# - A crash loop needs a limit: N restarts in a row without progress, then `faulted`.
# - A tool records `execute` before it runs; on recovery it runs again only if the stored and the
#   current replay policy are both `safe`. Otherwise it reports "interrupted and may have partially
#   run" and lets the model decide.
#
# ## Exercises
#
# **7.1** Count to 5 is killed between tick 4's memo and its print. Which ticks are printed, by both
# processes together?

# %%
answer_7_1 = None
check("7.1", answer_7_1)

# %% [markdown]
# **7.2** A tool declared `safe` when it started is declared `unsafe` after an upgrade; the process is
# killed inside the tool and restarted. Does the tool run again (True or False)?

# %%
answer_7_2 = None
check("7.2", answer_7_2)

# %% [markdown]
# Stuck? `solution("7.1")` prints a worked answer.
#
# ---
# [← Lesson 6: kill -9 vs power loss](06_kill9_vs_power_loss.ipynb) · [Start here](00_start_here.ipynb) · [Lesson 8: beyond the lesson →](08_beyond.ipynb)
