"""The source text's own measurements, each with the sentence it comes from.

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
