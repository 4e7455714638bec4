"""How a checkpoint record becomes bytes, and how bytes are trusted again.

A record is one JSON object whose last field, `crc`, is the CRC-32 of the record's own bytes
without that field: `{"t":"page_done",...,"seq":9,"crc":123}` carries the checksum of
`{"t":"page_done",...,"seq":9}`. That tells two kinds of bad bytes apart:

- bytes that do not parse as JSON are a **torn fragment** (a write cut short): skipped and counted,
  as Codex's rollout reader does;
- bytes that parse but whose checksum does not match were **damaged** after they were written (a
  flipped bit, a foreign edit): never applied, because a record that looks valid but is not would
  make recovery silently wrong.

The checksum covers the bytes as written, so checking it needs no second serialization: the common
case (an intact record) costs one CRC and one `json.loads`.
"""

from __future__ import annotations

import json
import zlib

_CRC = b',"crc":'
_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True).encode


class Torn(ValueError):
    """Bytes that are not a complete JSON record."""


class Damaged(ValueError):
    """A complete JSON value that is not a valid, intact record."""


def encode(obj: dict) -> bytes:
    """The record as one line of bytes, newline-terminated, checksum included."""
    body = _dumps(obj).encode()
    return b"%s,\"crc\":%d}\n" % (body[:-1], zlib.crc32(body))


def decode(raw: bytes) -> dict:
    """The record in `raw` (one line, without its newline). Raises Torn or Damaged."""
    cut = raw.rfind(_CRC)
    if cut > 0 and raw.endswith(b"}"):
        body = raw[:cut] + b"}"
        digits = raw[cut + len(_CRC):-1]
        if digits.isdigit() and int(digits) == zlib.crc32(body):
            try:
                obj = json.loads(body)
            except (ValueError, RecursionError):
                obj = None
            if isinstance(obj, dict):
                return obj
    # Not an intact record: a fragment if it does not even parse, else damage.
    try:
        obj = json.loads(raw)
    except ValueError as e:   # includes bad UTF-8
        raise Torn(str(e)) from None
    except RecursionError:    # nested deeper than the parser goes: no record of the lab's is
        raise Damaged("not a checkpoint record (nested deeper than any record)") from None
    if not isinstance(obj, dict) or "crc" not in obj:
        raise Damaged("not a checkpoint record (no checksum)")
    raise Damaged("checksum mismatch")
