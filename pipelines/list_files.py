"""The list files a run reads besides its input (``--input-list``, ``--webtext-urls``): one item a line, compressed
as the file's name says, read whole and checked by the driver before the job's workers read them again."""
from __future__ import annotations

import bz2
import gzip
import lzma
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
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
