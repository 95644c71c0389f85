"""Input readers: one file (WET, C4-style JSON Lines or plain text) -> a stream of `RawRecord`s.

Readers never raise on bad input: every problem is yielded as a `ReadProblem`, in file order with the records, and
reading goes on after it, so damage costs only the records it touches: a damaged gzip member loses what it held
(reading resumes at the next member), a WET record that cannot be framed loses itself (reading resumes at the next
`WARC/1.0` line, as TFDS's C4 reader splits on them), a bad JSON line loses its line. Readers only decode; the C4
rules (line parsing, validation) run later on the `RawRecord`s.
"""
from __future__ import annotations

from typing import BinaryIO, Callable, Iterator

from .byte_reader import ByteReader, PlainSource
from .gzip_members import GZIP_MAGIC, GzipSource
from .jsonl_reader import read_jsonl
from .read_problems import ProblemKind, ReadProblem
from .records import RawRecord, SourceFormat
from .text_reader import read_text
from .wet_reader import read_wet

__all__ = ["MAX_RECORD_BYTES", "ProblemKind", "ReadProblem", "detect_format", "read_records"]

# C4 keeps pages of at most 190,000 characters (<= 760,000 UTF-8 bytes), so a record above 16 MiB can never become
# a C4 page; skipping it early bounds the memory one record can take.
MAX_RECORD_BYTES = 16 * 1024 * 1024

_SUFFIXES = (
    ((".warc.wet.gz", ".wet.gz", ".wet"), SourceFormat.WET),
    ((".jsonl", ".jsonl.gz", ".json", ".json.gz"), SourceFormat.JSONL),
    ((".txt", ".txt.gz"), SourceFormat.TEXT),
)
_KNOWN_EXTENSIONS = ", ".join(suffix for suffixes, _ in _SUFFIXES for suffix in suffixes)


def detect_format(path: str) -> SourceFormat | None:
    """The format of `path` from its extension (case-insensitive), or None when no reader knows it."""
    lowered = path.lower()
    for suffixes, source_format in _SUFFIXES:
        if lowered.endswith(suffixes):
            return source_format
    return None


def _open_with_beam(path: str) -> BinaryIO:
    """The raw (still compressed) bytes of any Beam filesystem path."""
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def _modified_time_with_beam(path: str) -> float:
    """Last-modified time of any Beam filesystem path, in seconds since the epoch."""
    from apache_beam.io.filesystems import FileSystems

    matches = FileSystems.match([path])[0].metadata_list
    if not matches:
        raise FileNotFoundError(f"no such file: {path}")
    return matches[0].last_updated_in_seconds


def read_records(
    path: str,
    open_binary: Callable[[str], BinaryIO] = _open_with_beam,
    max_record_bytes: int = MAX_RECORD_BYTES,
    modified_time: Callable[[str], float] = _modified_time_with_beam,
) -> Iterator[RawRecord | ReadProblem]:
    """Yield the records of `path` in file order, and a `ReadProblem` for each bad input instead of raising.

    `open_binary` returns the file's raw bytes (`.gz` files are decompressed here); `modified_time` (seconds since
    the epoch) is only used for plain-text files, whose timestamp is the file's last-modified time. A file that is
    gzip without a `.gz` name, or has a `.gz` name and is not gzip, is one `format_mismatch`; an I/O error ends the
    file, keeping the records before it.
    """
    source_format = detect_format(path)
    if source_format is None:
        yield ReadProblem(path, "unknown_format", f"{path} has no known extension ({_KNOWN_EXTENSIONS}).")
        return
    records = 0
    try:
        with open_binary(path) as raw:
            head = _read_head(raw, 4)
            if not head:
                yield ReadProblem(path, "empty_file", f"{path} is empty.")
                return
            named_gzip = path.lower().endswith(".gz")
            if named_gzip != head.startswith(GZIP_MAGIC[:2]):
                yield ReadProblem(path, "format_mismatch", _compression_mismatch(path, named_gzip, head))
                return
            source = GzipSource(raw, head, lambda: open_binary(path)) if named_gzip else PlainSource(raw, head)
            reader = ByteReader(source)
            if source_format is SourceFormat.WET:
                items = read_wet(path, reader, max_record_bytes)
            elif source_format is SourceFormat.JSONL:
                items = read_jsonl(path, reader, max_record_bytes)
            else:
                items = read_text(path, reader, max_record_bytes, modified_time)
            for item in items:
                records += isinstance(item, RawRecord)
                yield item
    except FileNotFoundError:
        yield ReadProblem(path, "missing_file", f"{path} does not exist.")
    except OSError as error:
        yield ReadProblem(
            path, "unreadable_file", f"{path} could not be read ({error}); stopped after {records} records."
        )


def _read_head(raw: BinaryIO, size: int) -> bytes:
    """The first `size` bytes of `raw` (fewer only for a shorter file), whatever its reads return."""
    head = b""
    while len(head) < size and (data := raw.read(size - len(head))):
        head += data
    return head


def _compression_mismatch(path: str, named_gzip: bool, head: bytes) -> str:
    if named_gzip:
        return f"{path} is named .gz but is not gzip (it starts with {head!r}): is it uncompressed?"
    return f"{path} is gzip-compressed but its name does not end in .gz."

