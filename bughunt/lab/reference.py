"""The source texts' own words: the figures they measured, each with its sentence, and the code
they quote, verbatim (`TEXT_CODE`, shown beside the lab's own by `views.show_text_code`).

The first source text (the BugHunt kill -9 lesson) quotes a few figures measured on the author's
Mac. Lessons 6 and 9 draw them beside this machine's measurements; both read them from here, so a
figure cannot sit on one row in one lesson and on another row in the other.

Each write figure names the kind of write it measured, in the words lesson 6 uses for its rows
(`APPEND`, `APPEND_FSYNC`, `SNAPSHOT_NO_DIR_FSYNC`). The source text's snapshot is temp file + fsync
+ rename with no directory fsync: it belongs beside a snapshot without the directory fsync, never
beside the lab's snapshot, which fsyncs the directory too.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Kinds of checkpoint write, named as lesson 6's rows are (and lesson 9 maps its rows onto them).
APPEND = "append (flush only)"
APPEND_FSYNC = "append + fsync"
SNAPSHOT_NO_FSYNC = "snapshot: tmp + rename, no fsync"
SNAPSHOT_NO_DIR_FSYNC = "snapshot: tmp + fsync + rename"
SNAPSHOT_DIR_FSYNC = "snapshot: tmp + fsync + rename + dir fsync"
WRITE_KINDS = (APPEND, APPEND_FSYNC, SNAPSHOT_NO_FSYNC, SNAPSHOT_NO_DIR_FSYNC, SNAPSHOT_DIR_FSYNC)


@dataclass(frozen=True)
class SourceFigure:
    """One figure the source text gives: its value, where it was measured, and its sentence."""

    value: float
    unit: str
    rerun: float | None      # the source text's second run, when it gives one
    machine: str
    sentence: str            # the source text's words (Chinese)
    says: str                # the same sentence in English ("this machine" is the author's)


_MEDIANS = ("本机（macOS）每次写入的中位耗时（一次运行）：快照（临时文件 + fsync + rename）0.228 ms，"
            "日志追加一行 0.0020 ms，追加 + fsync 0.033 ms；复跑一次是 0.300 / 0.0025 / 0.037 ms，"
            "量级相同。")
_MEDIANS_EN = ("Median time per write on the author's machine (macOS, one run): snapshot "
               "(temp file + fsync + rename) 0.228 ms, appending one log line 0.0020 ms, "
               "append + fsync 0.033 ms; a rerun gave 0.300 / 0.0025 / 0.037 ms, the same order "
               "of magnitude.")

#: The source text's median time per write, in ms, by kind of write (macOS, no F_FULLFSYNC).
WRITE_MEDIANS_MS: dict[str, SourceFigure] = {
    APPEND: SourceFigure(0.0020, "ms", 0.0025, "macOS", _MEDIANS, _MEDIANS_EN),
    APPEND_FSYNC: SourceFigure(0.033, "ms", 0.037, "macOS", _MEDIANS, _MEDIANS_EN),
    SNAPSHOT_NO_DIR_FSYNC: SourceFigure(0.228, "ms", 0.300, "macOS", _MEDIANS, _MEDIANS_EN),
}

_BUFFER = ("Python 的 open() 有用户态缓冲区：f.write() 之后没 flush() 就被 kill -9，这行数据就没了"
           "（本机实测：没 flush 的文件 0 字节，flush 过的 12 字节）。")
_BUFFER_EN = ("Python's open() has a user-space buffer: killed by kill -9 after f.write() without "
              "flush(), the line is gone (measured on the author's machine: the unflushed file "
              "0 bytes, the flushed one 12 bytes).")

#: Bytes the source text found on disk after kill -9, by how its 12-byte line was written.
BUFFER_BYTES: dict[str, SourceFigure] = {
    "write": SourceFigure(0, "bytes", None, "macOS", _BUFFER, _BUFFER_EN),
    "flush": SourceFigure(12, "bytes", None, "macOS", _BUFFER, _BUFFER_EN),
}

_FSYNC = ("macOS 的 fsync 不保证写穿磁盘自带的缓存（man 2 fsync：要更强的保证得用 F_FULLFSYNC），"
          "所以这里 fsync 的数字偏乐观。")
_FSYNC_EN = ("macOS's fsync does not guarantee writing through the drive's own cache (man 2 fsync: "
             "a stronger guarantee needs F_FULLFSYNC), so the fsync figures here are optimistic.")

#: Why the source text's fsync figures are optimistic, in its own words.
FSYNC_CAVEAT = (_FSYNC, _FSYNC_EN)


def write_median(kind: str) -> SourceFigure | None:
    """The source text's median for this kind of write, or None: it measured only three kinds."""
    return WRITE_MEDIANS_MS.get(kind)


# --- the code the source texts quote ---------------------------------------------------------------

@dataclass(frozen=True)
class SourceCode:
    """Code a source text quotes, as it quotes it, and the heading it is shown under."""

    title: str
    code: str
    language: str = "python"


#: The first source text's "核心代码" (core code): its three snippets, verbatim; the English in
#: brackets translates its comments.
_FIRST_TEXT = {
    "apply_event": '''
# 事件 → 新状态：确定性的纯函数，重放几遍结果都一样
# [event -> new state: a deterministic pure function; replay it any number of times, same result]
def apply_event(state, ev):
    s = {**state, "findings": list(state["findings"]), "aborted": list(state["aborted"]), "seq": ev["seq"]}
    if ev["t"] == "intent":
        s["pending"] = {"page": ev["page"], "key": ev["key"]}
    elif ev["t"] == "page_done":
        s["next_page"] = ev["page"] + 1
        s["tokens"] += ev["tokens"]
        s["pending"] = None
        if ev["finding"]:
            s["findings"].append(ev["page"])
    elif ev["t"] == "aborted":
        s["next_page"] = ev["page"] + 1
        s["pending"] = None
        s["aborted"].append(ev["page"])
    return s
''',
    "atomic_write": '''
# 快照：写临时文件 + fsync + 原子替换
# [snapshot: write a temp file + fsync + atomic replace]
def atomic_write(path, data, torn):
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all_or_torn(fd, data, torn)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
''',
    "page_loop": '''
# 一页的主循环：Bug 页先记意图（带确定的幂等键），再提交，最后记"本页完成"
# [one page of the main loop: on a bug page first record the intent (with a deterministic
#  idempotency key), then submit, and finally record "page done"]
for page in range(state["next_page"], N_PAGES + 1):
    ...
    if page in BUG_PAGES:
        key = f"{TASK_ID}:p{page:02d}"
        record({"t": "intent", "page": page, "key": key})
        submit_report(root, page, key)          # INSERT OR IGNORE，key 有唯一约束 [key is UNIQUE]
    record({"t": "page_done", "page": page, "tokens": tokens, "finding": page in BUG_PAGES})
''',
}

#: The second source text's code (its "源码对照", source side by side), verbatim: Pi's TypeScript
#: runtime, by file and line. Lesson 7 shows each beside the lab's Python version of the same rule.
_SECOND_TEXT = {
    "recover": ("packages/durable/src/harness/scheduler.ts:453", '''
if (record.state.status === "running") {
  const restarts = (record.restarts ?? 0) + 1;
  const pending = withState(record, { status: "pending", checkpoint: record.state.checkpoint });
  tx.setTask({ ...pending, restarts } as AnyTaskRecord);
}
'''),
    "tick": ("packages/durable/test/examples/12-recovery.ts:26", '''
tick: async (task, runtime, taskContext) => {
  const n = task.state.checkpoint.n;
  // …
  if ((await runtime.memo(`printed-${n}`, taskContext)) === undefined) {
    await runtime.memo(`printed-${n}`, true, taskContext);
    console.log(`tick ${n}`);
  }
  // …
  if (n === task.input.to) {
    await runtime.commit(
      () => ({ status: "terminal", outcome: { status: "completed", result: `counted to ${n}` } }),
      taskContext,
    );
    return;
  }
  await runtime.sleepUntil(runtime.now() + 50, { phase: "tick", n: n + 1 }, taskContext);
},
'''),
    "execute": ("packages/durable/src/harness/tool.ts:202", '''
execute: async (task, runtime, context) => {
  const { arguments: args, replay } = task.state.checkpoint;
  const call = await readCall(runtime, task.input, context);
  if (cutOffTooOften(task, runtime)) return endCutOff(runtime, task, call, context);
  const tool = await resolveTool(runtime, task.input, call.name, context);
  if (replay === "safe" && tool?.replay === "safe") {
    // …
    return run(runtime, task.input, call, tool, args, context);
  }
  const message = `Tool ${call.name} was interrupted and may have partially run`;
  const ending = { status: "failed", message } as const;
  await settleFromSlot(runtime, task.input, call, { tool }, ending, "interrupted", message, context);
},
'''),
}

#: Every snippet the lessons show beside the lab's own code, by name.
TEXT_CODE: dict[str, SourceCode] = {
    **{name: SourceCode("The source text's page loop" if name == "page_loop"
                        else f"The source text's `{name}`", code)
       for name, code in _FIRST_TEXT.items()},
    **{name: SourceCode(f"The source text's version: Pi's `{where}`", code, "typescript")
       for name, (where, code) in _SECOND_TEXT.items()},
}
