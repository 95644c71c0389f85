"""Strict streaming decompression of multi-member gzip that resynchronises on the next member after a damaged one."""
from __future__ import annotations

import zlib
from typing import BinaryIO, NoReturn

GZIP_MAGIC = b"\x1f\x8b\x08"  # ID1, ID2 and CM (deflate) of a gzip member header
_CHUNK = 1 << 16  # compressed bytes read from the file, and fed to zlib, at a time
_GZIP_WBITS = 16 + zlib.MAX_WBITS
# While resynchronising, a gzip magic counts as a member start only if its first 256 compressed bytes decompress to
# 64 bytes (or a whole member): random bytes after a chance `1f 8b 08` never do.
_PROBE_INPUT = 256
_PROBE_OUTPUT = 64
_MAX_RESCAN = 1 << 20  # compressed bytes of the current member kept for resynchronising after it


class GzipDamage(Exception):
    """A damaged gzip member; the next read resumes at the next member."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"the gzip member at byte {offset} is damaged ({reason})")


class GzipSource:
    """Decompressed bytes of a (multi-member) gzip file, resynchronising after damage.

    A damaged member (bad header, data, CRC or length, cut off, or bytes after the last member that are not gzip)
    raises `GzipDamage` once; the next read resumes at the next gzip member header (`1f 8b 08`) after the damaged
    member's start whose first bytes decompress. A member whose own first bytes are damaged cannot be told from
    noise, so it is skipped with the damaged member before it.

    One read never returns bytes of two members. `delivered` counts the decompressed bytes returned so far, and
    `verified` those of the members whose CRC and length checked out, so a reader can tell whether a record it holds
    came from an intact member.
    """

    def __init__(self, raw: BinaryIO, head: bytes) -> None:
        self._raw = raw
        self._window = bytearray(head)  # compressed bytes: the current member's (up to _MAX_RESCAN), then unread ones
        self._window_offset = 0  # file offset of _window[0]
        self._fed = 0  # bytes of _window the current member consumed
        self._member: zlib._Decompress | None = None
        self._member_offset = 0
        self._resync_from: int | None = None  # after damage: the file offset to look for the next member from
        self.delivered = 0
        self.verified = 0

    def read(self, size: int) -> bytes:
        while True:
            if self._resync_from is not None:
                self._resynchronise()
            if self._member is None:
                if not self._window and not self._fill():
                    return b""
                self._member = zlib.decompressobj(_GZIP_WBITS)
                self._member_offset = self._window_offset
            if self._member.eof:
                self.verified = self.delivered
                self._member = None
                self._drop(self._fed)
                continue
            if self._fed == len(self._window) and not self._fill():
                self._damaged("the file ends in the middle of a gzip member")
            piece = bytes(self._window[self._fed : self._fed + _CHUNK])
            try:
                data = self._member.decompress(piece, size)
            except zlib.error as error:
                self._damaged(str(error))
            left = self._member.unused_data if self._member.eof else self._member.unconsumed_tail
            self._fed += len(piece) - len(left)
            if self._fed > 2 * _MAX_RESCAN:
                self._drop(self._fed - _MAX_RESCAN)
            if data:
                self.delivered += len(data)
                if self._member.eof:
                    self.verified = self.delivered
                return data

    def _damaged(self, reason: str) -> NoReturn:
        self._member = None
        self._fed = 0  # the decoder may have read past the next member's start: nothing of the window is used up
        self._resync_from = self._member_offset + 1
        raise GzipDamage(self._member_offset, reason)

    def _resynchronise(self) -> None:
        """Drop the compressed bytes up to the next member start after `_resync_from` (all of them if none)."""
        self._drop(max(self._resync_from - self._window_offset, 0))
        self._resync_from = None
        start = 0
        while True:
            found = self._window.find(GZIP_MAGIC, start)
            if found < 0:
                self._drop(max(len(self._window) - len(GZIP_MAGIC) + 1, 0))
                start = 0
                if not self._fill():
                    self._window.clear()
                    return
                continue
            while len(self._window) < found + _PROBE_INPUT and self._fill():
                pass
            if _starts_gzip_member(bytes(self._window[found : found + _PROBE_INPUT])):
                self._drop(found)
                return
            start = found + 1

    def _fill(self) -> bool:
        data = self._raw.read(_CHUNK)
        self._window += data
        return bool(data)

    def _drop(self, count: int) -> None:
        del self._window[:count]
        self._window_offset += count
        self._fed = max(self._fed - count, 0)


def _starts_gzip_member(data: bytes) -> bool:
    """Whether `data` is the start of a gzip member: it decompresses without error to a whole member or 64 bytes."""
    member = zlib.decompressobj(_GZIP_WBITS)
    try:
        output = member.decompress(data, _PROBE_OUTPUT)
    except zlib.error:
        return False
    return member.eof or len(output) >= _PROBE_OUTPUT
