"""Bounded capture of a child's output: the first ``head`` bytes and the last ``tail`` bytes.

A child that prints a gigabyte costs the parent at most ``head + tail`` bytes (plus one read
chunk): everything in between is counted and dropped.
"""

from __future__ import annotations

DEFAULT_HEAD = 64 * 1024
DEFAULT_TAIL = 256 * 1024


class HeadTail:
    """Keep the first ``head`` and the last ``tail`` bytes of a stream; count the rest."""

    def __init__(self, head: int = DEFAULT_HEAD, tail: int = DEFAULT_TAIL) -> None:
        if head < 0 or tail < 0:
            raise ValueError("head and tail must be >= 0")
        self.head_limit = head
        self.tail_limit = tail
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        if not data:
            return
        self.total += len(data)
        room = self.head_limit - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
            if not data:
                return
        if self.tail_limit == 0:
            return
        if len(data) >= self.tail_limit:
            self._tail = bytearray(data[-self.tail_limit :])
            return
        self._tail += data
        excess = len(self._tail) - self.tail_limit
        if excess > 0:
            del self._tail[:excess]

    @property
    def dropped(self) -> int:
        return self.total - len(self._head) - len(self._tail)

    def getvalue(self) -> bytes:
        if self.dropped <= 0:
            return bytes(self._head + self._tail)
        marker = f"\n[... probe: {self.dropped} bytes of output omitted ...]\n".encode()
        return bytes(self._head) + marker + bytes(self._tail)

    def text(self) -> str:
        return self.getvalue().decode("utf-8", errors="replace")

    def __len__(self) -> int:
        return len(self._head) + len(self._tail)
