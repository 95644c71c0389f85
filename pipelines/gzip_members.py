"""Strict streaming decompression of multi-member gzip that resynchronises on the next member after a damaged one."""
from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import BinaryIO, NoReturn

GZIP_MAGIC = b"\x1f\x8b\x08"  # ID1, ID2 and CM (deflate) of a gzip member header
_CHUNK = 1 << 16  # compressed bytes read from the file, and fed to zlib, at a time
_GZIP_WBITS = 16 + zlib.MAX_WBITS
# While resynchronising, a gzip magic counts as a member start only if its first 256 compressed bytes decompress to
# 64 bytes (or a whole member): random bytes after a chance `1f 8b 08` never do.
_PROBE_INPUT = 256
_PROBE_OUTPUT = 64
_MAX_RESCAN = 1 << 20  # compressed bytes of the current member kept for resynchronising after it
MAX_HELD_BYTES = 32 << 20  # decompressed bytes of a member held until it checks out; a bigger one is checked first


class GzipDamage(Exception):
    """A damaged gzip member; the next read resumes at the next member."""

    def __init__(self, offset: int, reason: str, cut: bool = False) -> None:
        super().__init__(f"the gzip member at byte {offset} is damaged ({reason})")
        self.cut = cut  # the file ends inside the member: what it held before the cut was delivered


class GzipSource:
    """Decompressed bytes of a (multi-member) gzip file, each delivered only once the member holding it is known intact.

    A member's bytes are held until its CRC and length check out; one that decompresses to more than ``max_held``
    bytes (a file gzipped as one member, such as a released C4 ``.json.gz``) is first checked by decompressing it
    in a second read of the file (``reopen``), then streamed. A damaged member (bad header, data, CRC or length, or
    bytes after the last member that are not gzip) raises `GzipDamage` once, before any of its bytes are delivered;
    the next read resumes at the next gzip member header (`1f 8b 08`) after the damaged member's start whose first
    bytes decompress. A member whose own first bytes are damaged cannot be told from noise, so it is skipped with
    the damaged member before it. A member that the end of the file cuts off delivers what was decoded before the
    cut (a cut loses only what follows it), then raises `GzipDamage`.

    One read never returns bytes of two members. `delivered` counts the decompressed bytes returned so far.
    """

    def __init__(self, raw: BinaryIO, head: bytes, reopen: Callable[[], BinaryIO],
                 max_held: int = MAX_HELD_BYTES) -> None:
        self._raw = raw
        self._reopen = reopen
        self._max_held = max_held
        self._window = bytearray(head)  # compressed bytes: the current member's (up to _MAX_RESCAN), then unread ones
        self._window_offset = 0  # file offset of _window[0]
        self._fed = 0  # bytes of _window the current member consumed
        self._member: zlib._Decompress | None = None
        self._member_offset = 0
        self._held = bytearray()  # the current member's bytes, until it checks out
        self._streamed = False  # the current member checked out in a second read: its bytes need not be held
        self._ready = bytearray()  # bytes of one member, known intact, not yet delivered
        self._cut = False  # the file ends inside the current member: deliver what it held, then raise
        self._resync_from: int | None = None  # after damage: the file offset to look for the next member from
        self.delivered = 0

    def read(self, size: int) -> bytes:
        while True:
            if self._ready:
                data = bytes(self._ready[:size])
                del self._ready[:size]
                self.delivered += len(data)
                return data
            if self._cut:
                self._cut = False
                self._damaged("the file ends in the middle of a gzip member", cut=True)
            if self._resync_from is not None:
                self._resynchronise()
            if self._member is None:
                if not self._window and not self._fill():
                    return b""
                self._member = zlib.decompressobj(_GZIP_WBITS)
                self._member_offset = self._window_offset
                self._streamed = False
            if self._member.eof:
                self._ready, self._held = self._held, bytearray()
                self._member = None
                self._drop(self._fed)
                continue
            if self._fed == len(self._window) and not self._fill():
                self._ready, self._held, self._cut = self._held, bytearray(), True
                continue
            self._decompress(size)

    def _decompress(self, size: int) -> None:
        """Feed the current member the next compressed bytes: its output goes to the held bytes, or straight to the
        ready ones for a member checked out in a second read."""
        piece = bytes(self._window[self._fed : self._fed + _CHUNK])
        try:
            data = self._member.decompress(piece, size if self._streamed else _CHUNK)
        except zlib.error as error:
            self._damaged(str(error))
        left = self._member.unused_data if self._member.eof else self._member.unconsumed_tail
        self._fed += len(piece) - len(left)
        if self._fed > 2 * _MAX_RESCAN:
            self._drop(self._fed - _MAX_RESCAN)
        if self._streamed:
            self._ready += data
            return
        self._held += data
        if len(self._held) > self._max_held and not self._member.eof:
            self._check_member()
            self._ready, self._held, self._streamed = self._held, bytearray(), True

    def _check_member(self) -> None:
        """Decompress the current member in a second read of the file, without keeping its bytes; `GzipDamage` if
        it is damaged. A member cut off by the end of the file passes: the first read raises at the cut."""
        member = zlib.decompressobj(_GZIP_WBITS)
        with self._reopen() as raw:
            raw.seek(self._member_offset)
            try:
                while not member.eof and (piece := member.unconsumed_tail or raw.read(_CHUNK)):
                    member.decompress(piece, _CHUNK)
            except zlib.error as error:
                self._damaged(str(error))

    def _damaged(self, reason: str, cut: bool = False) -> NoReturn:
        self._member = None
        self._held = bytearray()
        self._fed = 0  # the decoder may have read past the next member's start: nothing of the window is used up
        self._resync_from = self._member_offset + 1
        raise GzipDamage(self._member_offset, reason, cut)

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
