"""The list files a run reads besides its input (``--input-list``, ``--webtext-urls``): one item a line, compressed
as the file's name says, read to their end and checked by the driver before the job's workers read them again."""
from __future__ import annotations

import bz2
import codecs
import gzip
import hashlib
import lzma
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import BinaryIO

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

# what reading a list file raises for a file that is damaged or not compressed as its name says
LIST_READ_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError)
_CHECKED_DECOMPRESSION = {CompressionTypes.GZIP: lambda raw: gzip.GzipFile(fileobj=raw, mode="rb"),
                          CompressionTypes.BZIP2: bz2.BZ2File, CompressionTypes.LZMA: lzma.LZMAFile}


def list_item(line: str) -> str:
    """A line of a list file as the item it names: without surrounding whitespace, nor the byte-order mark that
    starts a list some Windows tools save ("" for a blank line)."""
    return line.lstrip("\ufeff").strip()


@contextmanager
def open_list_file(path: str) -> Iterator[BinaryIO]:
    """The decompressed bytes of the list file ``path``. A gzip, bzip2 or xz stream is checked to its end: damaged or
    cut short, reading raises one of :data:`LIST_READ_ERRORS` (Beam's reader, which the job uses, stops at a cut
    without a word, and its list would silently lose the rest)."""
    decompressed = _CHECKED_DECOMPRESSION.get(CompressionTypes.detect_compression_type(path))
    if decompressed is None:
        with FileSystems.open(path) as stream:
            yield stream
        return
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as raw, decompressed(raw) as stream:
        yield stream


class NotUtf8Text(ValueError):
    """Where a list stops being UTF-8 text: its 1-based ``line`` and 0-based ``byte``."""

    def __init__(self, line: int, byte: int) -> None:
        super().__init__(f"not UTF-8 at line {line}, byte {byte}")
        self.line, self.byte = line, byte


@dataclass(frozen=True)
class ListDigest:
    sha256: str  # of the list's bytes
    names_items: bool  # whether a line holds more than spaces and a byte-order mark


def list_sha256(stream: BinaryIO, chunk_size: int = 1 << 20) -> ListDigest:
    """The digest of a list read a chunk at a time (a URL list of millions of lines is never held whole); a
    :class:`NotUtf8Text` at the first byte that is not UTF-8 text."""
    digest, decoder = hashlib.sha256(), codecs.getincrementaldecoder("utf-8")()
    read = lines = 0  # bytes read and the newlines among them
    names_items = False
    while True:
        chunk = stream.read(chunk_size)
        pending = decoder.getstate()[0]  # the start of a character the last chunk cut: no newline
        try:
            text = decoder.decode(chunk, final=not chunk)
        except UnicodeDecodeError as error:
            data = pending + chunk
            line = lines + data.count(b"\n", 0, error.start) + 1
            raise NotUtf8Text(line, read - len(pending) + error.start) from None
        if not chunk:
            return ListDigest(digest.hexdigest(), names_items)
        names_items = names_items or bool(text.replace("\ufeff", "").strip())
        digest.update(chunk)
        read, lines = read + len(chunk), lines + chunk.count(b"\n")
