"""How a checkpoint record becomes bytes, and how bytes are trusted again.

A record is one JSON object with a CRC-32 of its own canonical form in a `crc` field. That tells two
kinds of bad bytes apart:

- bytes that do not parse as JSON are a **torn fragment** (a write cut short): skipped and counted,
  as Codex's rollout reader does;
- bytes that parse but whose checksum does not match were **damaged** after they were written (a
  flipped bit, a foreign edit): never applied, because a record that looks valid but is not would
  make recovery silently wrong.
"""

from __future__ import annotations

import json
import zlib


class Torn(ValueError):
    """Bytes that are not a complete JSON record."""


class Damaged(ValueError):
    """A complete JSON value that is not a valid, intact record."""


def _canonical(obj: dict) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def encode(obj: dict) -> bytes:
    """The record as one line of bytes, newline-terminated, checksum included."""
    body = _canonical(obj)
    return body[:-1] + b',"crc":%d}\n' % zlib.crc32(body)


def decode(raw: bytes) -> dict:
    """The record in `raw` (one line, without its newline). Raises Torn or Damaged."""
    try:
        obj = json.loads(raw)
    except ValueError as e:   # includes bad UTF-8
        raise Torn(str(e)) from None
    if not isinstance(obj, dict) or "crc" not in obj:
        raise Damaged("not a checkpoint record (no checksum)")
    crc = obj.pop("crc")
    if crc != zlib.crc32(_canonical(obj)):
        raise Damaged("checksum mismatch")
    return obj
