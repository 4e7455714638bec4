# %% [markdown]
# # Lesson 5 · Torn writes: what if the checkpoint itself is cut in half?
#
# [← Lesson 4: the danger window](04_danger_window.ipynb) · [Start here](00_start_here.ipynb) · [Lesson 6: kill -9 vs power loss →](06_kill9_vs_power_loss.ipynb)
#
# **The question.** Every lesson so far trusted the checkpoint: once written, it is whole. But a
# checkpoint is itself a write, and a kill can fall in the middle of it. What is left on disk then,
# and does recovery notice?
#
# **Recap of lesson 4.** Between filing a report and committing the page lies the danger window:
# an exhaustive sweep finds every crash point inside it, and an intent plus an idempotency key make
# the redo effectively once.

# %%
# %matplotlib inline
import inspect

import pandas as pd

from bughunt.experiment import crash_points
from bughunt.lab import torn
from bughunt.lab.exercises import check, solution
from bughunt.stores.log import ensure_newline_terminated

pd.options.display.width = 160
pd.options.display.max_columns = 20
pd.options.display.max_colwidth = 100

# %% [markdown]
# ## Half a record on disk
#
# A write cut short leaves half its bytes behind: a torn write (撕裂写). In real systems this comes
# from a record that a buffer flushes in several `write()` calls, from a power cut, or from a full
# disk. The lab makes it on purpose, as the source text did ("write half, then SIGKILL"): in write
# mode `torn` the page's commit record is written in two halves, and the `mid_commit` crash point
# fires between them.
#
# Why make it on purpose? Because `kill -9` tears a single `write()` only rarely, and never where
# we choose. Linux copies a `write()` into the kernel's page cache one memory page (4 KiB of the
# file) at a time, and checks between pages whether a fatal signal such as SIGKILL is pending; if
# one is, it stops there (`generic_perform_write` in the kernel's `mm/filemap.c`, the loop ext4
# uses). So a record that lies inside one page of the file is copied whole or not at all, but a
# record that straddles a page boundary can be cut at the boundary: its first part is in the file,
# the rest never arrives. For a log of 80-byte records about one record in fifty straddles a
# boundary, and the kill must arrive during the fraction of a microsecond the kernel spends on the
# first part: rare, not impossible. A large write (a snapshot of megabytes) crosses many page
# boundaries and can be cut at any of them. Tears in practice come mostly from records split over
# several writes, which is what `torn` mode does.
#
# Three write modes of the event log (intents and idempotency key on, as in the source text's
# table):
#
# | write mode | a kill inside the commit write leaves | and on reopen |
# |---|---|---|
# | `atomic` | nothing: the record goes out in one write (a snapshot: temp file + rename) | nothing to repair |
# | `torn` | half a record, without its newline | the newline repair (补换行) isolates the fragment as a line of its own |
# | `no-newline` | half a record, without its newline | no repair: the next record is glued onto the fragment |
#
# The kill inside the commit write is the `mid_commit` point of each page:

# %%
points = pd.DataFrame(p.__dict__ for p in crash_points(torn.MODE_CONFIGS["torn"]))
points["crash_point"] = [p.name for p in crash_points(torn.MODE_CONFIGS["torn"])]
points[points.page.isin([2, 3])].set_index("crash_point")

# %% [markdown]
# ## One torn write, byte by byte
#
# Kill a `torn`-mode worker at `p2.mid_commit` (page 2, inside the commit write) and look at the end of
# its log, `events.jsonl`. Then run the newline repair twice, as a resuming worker would on two
# successive restarts.

# %%
tail = torn.torn_tail("p2.mid_commit")
print(f"killed by signal {tail['killed_by']} at crash point {tail['point'].name}")
print("last bytes before the repair:", repr(tail["before"][-60:]))
print(f"first repair returned {tail['repaired'][0]}, second repair returned {tail['repaired'][1]}")
print("last bytes after the repair: ", repr(tail["after"][-60:]))
print(f"a reader now: torn lines skipped {tail['torn_lines_skipped']}, "
      f"events replayed {tail['replayed_events']}")

# %%
torn.plot_tail(tail)

# %% [markdown]
# The last line is half of page 2's `page_done` record: no closing brace, no newline. The repair
# appends one newline, so the fragment becomes a line of its own that does not parse; readers skip
# it and count it. The second repair sees a newline as the last byte and does nothing: repairing is
# idempotent, so it is safe on every open, however many restarts there are.
#
# ### Codex's two lines of defence
#
# Codex's rollout (one JSONL event log per session) does the same. When it opens a rollout for
# appending, it checks the last byte (`ensure_rollout_is_newline_terminated`, `recorder.rs`, quoted
# in the source text):
#
# ```rust
# if file.metadata()?.len() == 0 { return Ok(()); }   // empty file: nothing to do
# file.seek(SeekFrom::End(-1))?;                      // jump to the last byte
# file.read_exact(&mut final_byte)?;
# if final_byte[0] != b'\n' {                         // not a newline: the last write was cut
#     file.write_all(b"\n")?;                         // isolate the half line as a line of its own
#     file.flush()?;
# }
# ```
#
# Its test, `append_repair_terminates_nonempty_rollout_tail`, writes a record without a newline,
# opens the same file twice, and asserts the file ends in exactly one newline. Ours is the same
# idea, in the log store, writing through the lab's one door to the disk:

# %%
print(inspect.getsource(ensure_newline_terminated))

# %% [markdown]
# Note that the repair appends, it does not truncate: a complete record that only lacks its newline
# is kept. The other line of defence is on the read side: lines that do not parse are skipped and
# counted. One difference from the source text's account: in Codex the count exists
# (`load_rollout_items` returns `parse_errors`), but the resume path throws it away, so nobody is
# told that lines were dropped. Our worker reports it as `torn_lines_skipped`.
#
# ## Three write modes, every crash point
#
# Now the full experiment: for each write mode, kill a real worker at each of the 54 crash points,
# resume it in a second process, and ask the three witnesses (tracker, the resumed worker's memory,
# a fresh rebuild from disk). Columns: *resume right* means the tracker and the resumed worker agree
# and nothing is duplicated or lost; *correct runs* adds that a rebuild from disk agrees too (the
# three-way check, 三方对比); *refused* counts rebuilds our reader refused outright; *source text's
# reader wrong* counts runs where the source text's own, lenient reader rebuilds a state that differs
# from memory.

# %%
df = torn.sweep_write_modes()
torn.mode_table(df)

# %%
torn.plot_verdicts(df)

# %% [markdown]
# `atomic` and `torn` recover correctly everywhere (the source text: 54 of 54 in the plain log). In
# `torn` mode a torn line is skipped at exactly the `mid_commit` points, after the repair has
# isolated it. `no-newline` is different: every resumed run is right, yet the rebuild from disk
# fails at the `mid_commit` points.
#
# ## The no-newline trap: right now, wrong at the next recovery
#
# Take `p2.mid_commit` again, in `no-newline` mode, and let the resumed worker finish. Its first new
# record goes straight after the fragment:

# %%
glued = torn.glued_log("p2.mid_commit")
print("\n".join(glued["lines"][:4]))

# %% [markdown]
# Line 2 is the fragment with page 2's complete `page_done` glued onto it: one line that does not
# parse, so both are lost to every reader. The resumed worker does not notice; it has the event in
# memory. Ask the witnesses:

# %%
torn.witnesses(glued)

# %% [markdown]
# The tracker and the resumed worker agree, so a check that only compares those two says all is
# well. The log on disk, though, has lost an event: the *next* recovery from it would be wrong. Only
# a fresh rebuild from disk compared with memory, the third witness, catches this kind of bug
# (这次对、下次恢复才错, "right this time, wrong at the next recovery").
#
# ### Why the source text's bug pages "happened to be fine"
#
# The source text reports that on its 3 bug pages the no-newline runs happened to be fine: after a
# resume on a bug page, the first record written is the *intent* again, so the intent is what gets
# glued and lost, and the following `page_done` is intact. Every rebuild that fails, with the
# record that was glued and what each reader made of the log:

# %%
fails = torn.failing_points(df)
fails

# %%
nonl = df[df.write_mode == "no-newline"]
ours = nonl[nonl.verdict == "rebuild fails"]
refused = ours.disk_error.notna().sum()
lenient = (nonl.lesson_reader_ok == False).sum()  # noqa: E712
print(f"torn mid-commit points:       {(nonl.torn_lines_skipped > 0).sum()}")
print(f"our reader, rebuild fails:    {len(ours)} ({refused} refused with file and line, "
      f"{len(ours) - refused} accepted but short of memory)")
print(f"source text's reader, wrong:  {lenient} "
      f"(bug pages where it agrees: {sorted(fails[fails.source_text_reader != 'WRONG'].page)})")

# %% [markdown]
# The two readers differ in what they do with a record that is not there:
#
# - **The source text's reader** (`experiment.lesson_reader`) skips what does not parse and applies the
#   rest. On a bug page the lost intent does not matter, because the `page_done` that follows
#   overwrites everything it set, so its state matches by luck. On the other pages the lost record
#   is a `page_done`, with its tokens, and its state is silently wrong.
# - **Our reader** checks sequence numbers. A skipped torn fragment is fine (the resumed worker
#   writes that record again, with the same number), but a later record whose number jumps means a
#   record is missing: it refuses the log, names file and line, and changes nothing. That includes
#   the bug pages the source text called fine: a missing intent is still a hole in the history.
#
# One case escapes our reader's refusal: on the last page nothing follows the glued line, so the
# log simply looks one event short, as if the kill had come before it. Only the comparison of the
# rebuild with the resumed worker's memory catches that one. A refusal reads like this:

# %%
print(glued["refusal"])

# %% [markdown]
# ## The snapshot: the old file or the new one, never half
#
# A snapshot store rewrites one file at every commit. Written atomically, it goes to a temp file,
# is flushed, and is renamed over the old one with `os.replace`. The Python documentation: "If
# successful, the renaming will be an atomic operation (this is a POSIX requirement)". A reader sees
# the old snapshot or the new one, never half (原子性, atomicity). In `torn` mode the lab instead
# overwrites the snapshot in place and kills the worker halfway. Both killed inside page 5's commit:

# %%
for mode in ("atomic", "torn"):
    snap = torn.snapshot_after_kill(mode, page=5)
    print(f"{mode:>6}: files {snap['files']}; recovery resumes at page {snap['next_page']}"
          + (f", falling back to a {snap['snapshot_fallback']} start" if snap["snapshot_fallback"]
             else ", from the old snapshot"))
    for note in snap["notes"]:
        print("        " + note)

# %% [markdown]
# The atomic kill leaves the old snapshot (pages 1 to 4) and a complete temp file that was never
# renamed; recovery uses the old snapshot and removes the temp file. The torn kill leaves half a
# snapshot. Here it does not even parse; had the cut fallen so that it did, the record's checksum
# would reject it. Recovery does not guess: it says so and starts from page 1, paying for those
# pages again. Every page's mid-commit kill, resumed and measured:

# %%
snaps = torn.snapshot_tears()
torn.snapshot_table(snaps)

# %% [markdown]
# One caveat about the source text's own `atomic_write`: it fsyncs the temp file (`fsync` asks the
# kernel to write a file's data to the disk and waits until it has; lesson 6) and calls
# `os.replace`, but does not fsync the directory afterwards. Against `kill -9` that is enough (the
# rename is in the kernel). Against a power cut the new name itself may be lost. Codex's rollout migration does
# fsync the parent directory after its rename; the lab's `Door.write_atomic` does too when the fsync
# policy is `always`. Lesson 6 is about that difference.

# %% [markdown]
# ## Try it
#
# The panel starts in the source text's trap: event log, intents on, `no-newline`. Move the **crash
# point** slider to run one crash and resume (the point details show whether the rebuild from disk
# agrees). Change the **write mode** and press **Run sweep**: bars show torn lines skipped at resume
# (for a log; redone model calls for the other stores), coloured by verdict.
#
# Things to try: the snapshot store in `torn` mode (what do mid-commit kills cost?); a log with a
# snapshot every 4 pages in `torn` mode (the snapshot is torn by no crash point here, but what does
# the log do?); `no-newline` with intents off (does the source text's "bug pages are fine" still
# hold?).

# %% tags=["panel", "nbval-ignore-output"]
p = torn.panel()
p.show()

# %% [markdown]
# ## What to remember
#
# - A checkpoint is a write and can be torn (撕裂写). `kill -9` can cut one `write()` only between
#   two memory pages of the file, so rarely; records split across several writes, power cuts and
#   full disks tear far more often. Design the reader for a torn tail either way.
# - Snapshot: write a temp file, then `os.replace` it: the old file or the new one, never half. A
#   torn snapshot must be detected (parse, checksum) and recovery must say what it fell back to.
# - Log: on reopen, make sure the file ends in a newline (idempotent: twice is once); on read, skip
#   and *count* torn lines, and refuse a gap in the sequence numbers instead of skipping silently.
# - Without the newline repair, the resumed run is right and the log is wrong: only a fresh rebuild
#   from disk compared with memory (the three-way check) catches a bug that bites at the next
#   recovery.
#
# ## Exercises
#
# **5.1** In `no-newline` mode, how many of the 54 crash points fail the rebuild from disk, and what
# is their label? Answer as a pair, e.g. `(3, "after_visit")`.

# %%
answer_5_1 = None
check("5.1", answer_5_1)

# %% [markdown]
# **5.2** Kill a `torn`-mode log at `p2.mid_commit` and run the newline repair twice. How many newline
# bytes end the file, and how many lines will the next reader skip as torn? Answer as a pair
# `(newlines, skipped)`. The check runs the crash for real.

# %%
answer_5_2 = None
check("5.2", answer_5_2)

# %% [markdown]
# Stuck? `solution("5.1")` prints a worked answer.
#
# ## Further reading
#
# - The Linux kernel's buffered write loop, `generic_perform_write` in `mm/filemap.c` (it stops
#   between pages on a fatal signal): https://elixir.bootlin.com/linux/latest/source/mm/filemap.c
# - Python's `os.replace` ("the renaming will be an atomic operation"):
#   https://docs.python.org/3/library/os.html#os.replace
# - SQLite, "How To Corrupt An SQLite Database File" (torn and lost writes, and what a database
#   must assume about them): https://www.sqlite.org/howtocorrupt.html
# - Pillai et al., "All File Systems Are Not Created Equal" (ALICE), OSDI 2014: which of an
#   application's writes can be torn or reordered by a crash:
#   https://www.usenix.org/conference/osdi14/technical-sessions/presentation/pillai
#
# ---
# [← Lesson 4: the danger window](04_danger_window.ipynb) · [Start here](00_start_here.ipynb) · [Lesson 6: kill -9 vs power loss →](06_kill9_vs_power_loss.ipynb)
