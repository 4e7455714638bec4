# %% [markdown]
# <!-- lesson: header -->
#
# **The question.** Every lesson so far trusted the checkpoint: once written, it is whole. But a
# checkpoint is itself a write, and a kill can fall in the middle of it. What is left on disk then,
# and does recovery notice?
#
# **Recap of lesson 4.** Between filing a report and committing the page lies the danger window:
# an exhaustive sweep finds every crash point inside it, and an intent plus an idempotency key make
# the redo effectively once.

# %% [markdown]
# <!-- lesson: about -->

# %% [markdown]
# **Contents.** [Half a record on disk](#Half-a-record-on-disk) ·
# [One torn write](#One-torn-write,-byte-by-byte) · [Three write modes](#Three-write-modes,-every-crash-point) ·
# [The no-newline trap](#The-no-newline-trap:-right-now,-wrong-at-the-next-recovery) ·
# [Transfer](#Transfer:-a-log-this-lesson-did-not-run) · [The snapshot](#The-snapshot:-the-old-file-or-the-new-one,-never-half) ·
# [Try it](#Try-it) · [What to remember](#What-to-remember) ·
# [Common wrong statements](#Common-wrong-statements) · [Further reading](#Further-reading)

# %%
# %matplotlib inline
import pandas as pd

from bughunt.lab.judges import check, quiz, solution
from bughunt.lab.lessons import l05_torn_writes as torn
from bughunt.lab.views import show_code, show_source
from bughunt.stores.log import ensure_newline_terminated, replay_log

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
# Decide first, true or false:

# %%
quiz("Q5.1")

# %%
answer_q5_1 = None
check("Q5.1", answer_q5_1)

# %% [markdown]
# Why make it on purpose? Because `kill -9` tears a single `write()` only rarely, and never where
# we choose. Linux copies a `write()` into the kernel's page cache one memory page (4 KiB of the
# file) at a time, and checks between pages whether a fatal signal such as SIGKILL is pending; if
# one is, it stops there (`generic_perform_write` in the kernel's `mm/filemap.c`, the loop ext4
# uses). A record inside one page of the file is copied whole or not at all; a record that
# straddles a page boundary can be cut at the boundary.
#
# For a log of 80-byte records about one record in fifty straddles a boundary, and the kill must
# arrive during the fraction of a microsecond the kernel spends on the first part: rare, not
# impossible. A snapshot of megabytes crosses many boundaries and can be cut at any of them. Tears
# in practice come mostly from records split over several writes, which is what `torn` mode does.

# %% [markdown]
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
torn.points_table(pages=(2, 3))

# %% [markdown]
# ## One torn write, byte by byte
#
# Next we kill a `torn`-mode worker at `p2.mid_commit` (page 2, inside the commit write), look at
# the end of its log, `events.jsonl`, and run the newline repair twice, as a resuming worker would
# on two successive restarts. The repair, as the lab runs it:

# %%
show_source(ensure_newline_terminated, lines=("try:", "return True"))

# %% [markdown]
# **5.1 Predict** before it runs: after the two repairs, how many newline bytes end the file, and
# how many lines will the next reader skip as torn? A pair `(newlines, skipped)`.

# %%
prediction_5_1 = None        # a pair (newlines, skipped)

# %%
tail = torn.torn_tail("p2.mid_commit")
print(f"killed by signal {tail['killed_by']} at crash point {tail['point'].name}")
print("last bytes before the repair:", repr(tail["before"][-60:]))
print(f"first repair returned {tail['repaired'][0]}, second repair returned {tail['repaired'][1]}")
print("last bytes after the repair: ", repr(tail["after"][-60:]))
print(f"a reader now: torn lines skipped {tail['torn_lines_skipped']}, "
      f"events replayed {tail['replayed_events']}")

# %%
check("5.1", prediction_5_1)

# %%
torn.plot_tail(tail)

# %%
torn.CLAIMS.say("the_repair_is_idempotent")

# %% [markdown]
# The last line is half of page 2's `page_done` record: no closing brace, no newline. Repairing is
# idempotent, so it is safe on every open, however many restarts there are.
#
# ### Codex's two lines of defence
#
# Codex's rollout (one JSONL event log per session) does the same. The source text quotes its
# repair, run each time a rollout is opened for appending (comments translated):

# %%
show_code(r"""
fn ensure_rollout_is_newline_terminated(file: &mut File) -> std::io::Result<()> {
    if file.metadata()?.len() == 0 {          // empty file: nothing to do
        return Ok(());
    }
    file.seek(SeekFrom::End(-1))?;            // jump to the last byte
    let mut final_byte = [0];
    file.read_exact(&mut final_byte)?;        // read it
    if final_byte[0] != b'\n' {               // not a newline: the last write was cut
        file.write_all(b"\n")?;               // isolate the half line as a line of its own
        file.flush()?;
    }
    Ok(())
}""", "The source text's version: Codex's `ensure_rollout_is_newline_terminated` (Rust)",
          language="rust")

# %% [markdown]
# The same three steps as the lab's: empty file, last byte, append one newline. The differences:
#
# - **Appends, never truncates.** Both keep a complete record that only lacks its newline.
# - **A missing file** is no error in the lab (a first run has no log yet); Codex opens an
#   existing rollout.
# - **Through the door.** The lab appends through `Door` (the one door to the disk, which counts
#   and times the write as `repair`); Codex writes to the file and flushes.
#
# Codex tests it with `append_repair_terminates_nonempty_rollout_tail`: a record without a newline,
# the same file opened twice, exactly one newline at the end.

# %% [markdown]
# The other line of defence is on the read side: lines that do not parse are skipped and counted
# (解析不了的行跳过并计数). In Codex (the lab's reading of `load_rollout_items` and
# `get_rollout_history` in [`codex-rs/rollout/src/recorder.rs` at commit b505ee8](https://github.com/openai/codex/blob/b505ee8069666188dd67112126d6ff4dd2eb2676/codex-rs/rollout/src/recorder.rs))
# each such line is logged as a warning and counted in `parse_errors`, but the resume path does
# not use the count. The lab's reader counts them as `torn_lines_skipped`, and checks one thing
# more, the sequence numbers:

# %%
show_source(replay_log, lines=("try:", "raise StoreDamage(path, line_no, f\"expected"))

# %% [markdown]
# ## Three write modes, every crash point
#
# Now the full experiment: for each write mode, kill a real worker at each of the 54 crash points,
# resume it in a second process, and ask the three witnesses (tracker, the resumed worker's memory,
# a fresh rebuild from disk).
#
# **5.2 Predict:** in `no-newline` mode the rebuild from disk fails wherever the glued record is
# lost. At how many crash points does our reader (it checks sequence numbers) refuse the log
# outright, and at how many does it accept a log that is one event short of memory? A pair
# `(refused, short)`.

# %%
prediction_5_2 = None        # a pair (refused, short)

# %% [markdown]
# And one statement to decide before the sweep runs, true or false:

# %%
quiz("Q5.3")

# %%
answer_q5_3 = None
check("Q5.3", answer_q5_3)

# %% [markdown]
# Columns: *correct*, *rebuild fails* and *another verdict* split the crash points (the
# three-way check: tracker, the resumed worker's memory and a rebuild from disk agree, or not);
# *resume right* means the tracker and the resumed worker agree and nothing is duplicated or lost;
# *rebuild refused* counts rebuilds our reader refused outright; *source text's reader wrong*
# counts runs where the source text's own, lenient reader rebuilds a state that differs from
# memory.

# %%
df = torn.sweep_write_modes()
torn.mode_table(df)

# %%
check("5.2", prediction_5_2)

# %%
torn.plot_write_mode_verdicts(df)

# %%
torn.CLAIMS.say("atomic_and_torn_recover", "the_no_newline_trap")

# %% [markdown]
# ## The no-newline trap: right now, wrong at the next recovery
#
# Take `p2.mid_commit` again, in `no-newline` mode, and let the resumed worker finish. Its first new
# record goes straight after the fragment:

# %%
glued = torn.glued_log("p2.mid_commit")
print("\n".join(glued["lines"][:4]))

# %%
torn.CLAIMS.say("the_glued_record")

# %% [markdown]
# The resumed worker does not notice; it has the event in memory. All the witnesses:

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
torn.failing_table(df)

# %%
torn.CLAIMS.say("the_source_texts_reader_is_lucky_on_bug_pages", "our_reader_refuses_a_gap",
                bullets=True)

# %% [markdown]
# The two readers differ in what they do with a record that is not there:
#
# - **The source text's reader** (`experiment.lesson_reader`) skips what does not parse and applies
#   the rest. On a bug page the lost intent does not matter, because the `page_done` that follows
#   overwrites everything it set, so its state matches by luck. On the other pages the lost record
#   is a `page_done`, with its tokens, and its state is silently wrong.
# - **Our reader** checks sequence numbers. A skipped torn fragment is fine (the resumed worker
#   writes that record again, with the same number), but a later record whose number jumps means a
#   record is missing: it refuses the log, names file and line, and changes nothing. That includes
#   the bug pages the source text called fine: a missing intent is still a hole in the history.

# %% [markdown]
# One case escapes our reader's refusal: on the last page nothing follows the glued line, so the
# log simply looks one event short, as if the kill had come before it. Only the comparison of the
# rebuild with the resumed worker's memory catches that one. A refusal reads like this:

# %%
print(glued["refusal"])

# %% [markdown]
# ## Transfer: a log this lesson did not run
#
# **5.3** A problem drawn for this lesson (`python -m bughunt practice --lesson 5 --seed 14` prints
# the same one; other seeds give others). Predict, then check: the check runs the experiment.

# %%
torn.TRANSFER

# %%
prediction_5_3 = None        # a number of crash points

# %%
check("5.3", prediction_5_3)

# %% [markdown]
# ## The snapshot: the old file or the new one, never half
#
# Decide first, true or false:

# %%
quiz("Q5.2")

# %%
answer_q5_2 = None
check("Q5.2", answer_q5_2)

# %% [markdown]
# A snapshot store rewrites one file at every commit. Written atomically, it goes to a temp file
# and is renamed over the old one with `os.replace`. The Python documentation: "If successful, the
# renaming will be an atomic operation (this is a POSIX requirement)". A reader sees the old
# snapshot or the new one, never half (原子性, atomicity), after a kill -9: a power cut is another
# matter (a rename not followed by a directory fsync may be lost, and a temp file not fsynced
# before it may be found empty; lesson 3's power-cut rows, lesson 8). Lesson 3 shows
# [the source text's `atomic_write` beside the lab's `Door.write_atomic`](03_replay_vs_snapshot.ipynb#Writing-the-snapshot:-temp-file,-fsync,-rename,-fsync)
# and their differences; here what matters is `mid()`, where `mid_commit` fires: the temp file is
# complete, the rename not yet done. (The source text tears inside the write instead,
# `write_all_or_torn`.)

# %% [markdown]
# In `torn` mode the lab instead overwrites the snapshot in place and kills the worker halfway.
# Both killed inside page 5's commit:

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
# snapshot; a torn snapshot that does not parse is refused, and one cut so that it did parse would
# fail the record's checksum. Recovery does not guess: it says so and starts from page 1, paying
# for those pages again. Every page's mid-commit kill, resumed and measured:

# %%
snaps = pd.concat([torn.mid_commit_kills(torn.SNAPSHOT_CONFIGS[m]) for m in ("atomic", "torn")],
                  ignore_index=True)
torn.snapshot_table(snaps)

# %%
torn.CLAIMS.say("the_snapshot_old_or_new")

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
# the log do?).

# %% tags=["panel", "nbval-ignore-output"]
p = torn.panel()
p.show()

# %% [markdown]
# ## What to remember
#
# - A checkpoint is a write and can be torn (撕裂写). `kill -9` can cut one `write()` only between
#   two memory pages of the file, so rarely; records split across several writes, power cuts and
#   full disks tear far more often. Design the reader for a torn tail either way.
# - Snapshot: write a temp file, then `os.replace` it: after a kill, the old file or the new one,
#   never half (against a power cut, only with the fsyncs of lesson 3). A
#   torn snapshot must be detected (parse, checksum) and recovery must say what it fell back to.
# - Log: on reopen, make sure the file ends in a newline (idempotent: twice is once); on read, skip
#   and *count* torn lines, and refuse a gap in the sequence numbers instead of skipping silently.
# - Without the newline repair, the resumed run is right and the log is wrong: only a fresh rebuild
#   from disk compared with memory (the three-way check) catches a bug that bites at the next
#   recovery.

# %% [markdown]
# ## Common wrong statements
#
# The three true-or-false statements of this lesson are asked where the lesson reaches them, before
# the passage that answers them: Q5.1 in *Half a record on disk*, Q5.3 before the sweep of *Three
# write modes*, Q5.2 at the start of *The snapshot*.

# %% [markdown]
# Stuck? `solution("5.1")`, `solution("5.2")` or `solution("Q5.1")` prints a worked answer.

# %% [markdown]
# ## Further reading
#
# - The Linux kernel's buffered write loop, `generic_perform_write` in
#   [`mm/filemap.c`](https://elixir.bootlin.com/linux/latest/source/mm/filemap.c): it stops between
#   pages on a fatal signal.
# - [write(2)](https://man7.org/linux/man-pages/man2/write.2.html), Linux man-pages: "The number of
#   bytes written may be less than count".
# - Python's [`os.replace`](https://docs.python.org/3/library/os.html#os.replace): "the renaming
#   will be an atomic operation".
# - SQLite, ["How To Corrupt An SQLite Database File"](https://www.sqlite.org/howtocorrupt.html):
#   torn and lost writes, and what a database must assume about them.
# - Pillai et al., "All File Systems Are Not Created Equal" (ALICE), OSDI 2014:
#   [usenix.org](https://www.usenix.org/conference/osdi14/technical-sessions/presentation/pillai).
#   Which of an application's writes a crash can tear or reorder.
# - [openai/codex](https://github.com/openai/codex): search for
#   `ensure_rollout_is_newline_terminated` and `append_repair_terminates_nonempty_rollout_tail`.
#
# ---
# <!-- lesson: nav -->
