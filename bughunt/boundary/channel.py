"""The private channel between the lab and the process that runs a learner's store.

A socket pair the lab opens; one end is passed to the child by its descriptor number (never its
stdout or stderr, which belong to the store's prints). Messages are JSON objects, each framed by
its length (4 bytes, big-endian), so that a message is read whole or not at all. A frame that does
not parse means something else wrote to the socket: the reader says so instead of guessing.
"""

from __future__ import annotations

import json
import socket
import struct

_HEADER = struct.Struct(">I")
MAX_FRAME = 64 << 20
# Bound at import, before any learner code runs in the process: a store that replaces json.dumps
# or json.loads changes nothing here (and is named for it, `child._patched`).
_ENCODE = json.JSONEncoder(default=str).encode
_DECODE = json.JSONDecoder().decode


class ChannelDamaged(ValueError):
    """A frame that is not one of the lab's messages."""


class Channel:
    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._buffer = bytearray()
        self._parsed: list[dict] = []

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, message: dict) -> None:
        data = _ENCODE(message).encode()
        self.sock.sendall(_HEADER.pack(len(data)) + data)

    def feed(self) -> bool:
        """Read what is there (the socket is readable); False at end of file."""
        try:
            chunk = self.sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return True
        except ConnectionResetError:
            return False
        if not chunk:
            return False
        self._buffer += chunk
        return True

    def messages(self) -> list[dict]:
        """Every whole message received so far."""
        out = []
        while len(self._buffer) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(self._buffer)
            if size > MAX_FRAME:
                raise ChannelDamaged(f"a frame of {size} bytes")
            if len(self._buffer) < _HEADER.size + size:
                break
            raw = bytes(self._buffer[_HEADER.size:_HEADER.size + size])
            del self._buffer[:_HEADER.size + size]
            try:
                message = _DECODE(raw.decode("utf-8"))
            except ValueError:          # UnicodeDecodeError too
                raise ChannelDamaged(f"a frame that is not JSON: {raw[:60]!r}") from None
            if not isinstance(message, dict) or "t" not in message:
                raise ChannelDamaged(f"a frame that is not a message: {raw[:60]!r}")
            out.append(message)
        return out

    def recv(self) -> dict | None:
        """Block until one whole message (None at end of file)."""
        while not self._parsed:
            self._parsed.extend(self.messages())
            if not self._parsed and not self.feed():
                return None
        return self._parsed.pop(0)

    def close(self) -> None:
        self.sock.close()
