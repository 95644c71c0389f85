"""`ByteReader`: buffered reads of a file's decompressed bytes, from a `GzipSource` or a `PlainSource`."""
from __future__ import annotations

from typing import BinaryIO

from .gzip_members import GzipDamage, GzipSource

CHUNK_BYTES = 1 << 16  # bytes asked of a source at a time; also the piece size for skipping over long lines
UTF8_BOM = b"\xef\xbb\xbf"


class PlainSource:
    """An uncompressed file with the interface of `GzipSource`."""

    def __init__(self, raw: BinaryIO, head: bytes) -> None:
        self._raw = raw
        self._head = head
        self.delivered = 0

    def read(self, size: int) -> bytes:
        if self._head:
            data, self._head = self._head, b""
        else:
            data = self._raw.read(size)
        self.delivered += len(data)
        return data


class ByteReader:
    """Buffered line and block reads over a source, with push-back; `position` counts decompressed bytes.

    A `GzipDamage` from the source discards the buffered bytes (they belong to the record or line the damage cut)
    and is passed on; reading may go on after it.
    """

    def __init__(self, source: GzipSource | PlainSource) -> None:
        self._source = source
        self._buffer = bytearray()
        self._pos = 0

    @property
    def position(self) -> int:
        return self._source.delivered - (len(self._buffer) - self._pos)

    def readline(self, limit: int) -> bytes:
        """The next line with its `\\n`, at most `limit` bytes of it, or what is left at the end of the file."""
        checked = 0
        while True:
            available = len(self._buffer) - self._pos
            end = self._buffer.find(b"\n", self._pos + checked, self._pos + min(available, limit))
            if end >= 0:
                return self._take(end + 1 - self._pos)
            checked = min(available, limit)
            if available >= limit or not self._fill():
                return self._take(min(available, limit))

    def read(self, size: int) -> bytes:
        """The next `size` bytes, fewer only at the end of the file."""
        while len(self._buffer) - self._pos < size and self._fill():
            pass
        return self._take(min(size, len(self._buffer) - self._pos))

    def unread(self, data: bytes) -> None:
        """Push back `data`, the bytes just read, to be read again."""
        self._buffer = bytearray(data) + self._buffer[self._pos :]
        self._pos = 0

    def _take(self, size: int) -> bytes:
        data = bytes(self._buffer[self._pos : self._pos + size])
        self._pos += size
        return data

    def _fill(self) -> bool:
        try:
            data = self._source.read(CHUNK_BYTES)
        except GzipDamage:
            self._buffer.clear()
            self._pos = 0
            raise
        del self._buffer[: self._pos]
        self._pos = 0
        self._buffer += data
        return bool(data)
