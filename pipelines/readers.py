"""Input readers: one file (WET, C4-style JSON Lines or plain text) -> a stream of `RawRecord`s.

Readers never raise on bad input: every problem is yielded as a `ReadProblem`, after every good record that came
before it. Readers only decode; the C4 rules (line parsing, validation) run later on the `RawRecord`s.
"""
from __future__ import annotations

import io
import json
import zlib
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import BinaryIO, Callable, Iterator, Literal

from warcio.archiveiterator import ArchiveIterator
from warcio.exceptions import ArchiveLoadFailed

from .records import RawRecord, SourceFormat

# C4 keeps pages of at most 190,000 characters (<= 760,000 UTF-8 bytes), so a record above 16 MiB can never become
# a C4 page; skipping it early bounds the memory one record can take.
MAX_RECORD_BYTES = 16 * 1024 * 1024

ProblemKind = Literal[
    "missing_file",
    "empty_file",
    "corrupt_gzip",
    "truncated_record",
    "invalid_utf8",
    "invalid_json",
    "oversized_record",
    "unknown_format",
    "unreadable_file",  # an I/O error, or content its format's parser cannot read at all (e.g. a .wet that is not WARC)
]

_SUFFIXES = (
    ((".warc.wet.gz", ".wet.gz", ".wet"), SourceFormat.WET),
    ((".jsonl", ".jsonl.gz", ".json", ".json.gz"), SourceFormat.JSONL),
    ((".txt", ".txt.gz"), SourceFormat.TEXT),
)
_KNOWN_EXTENSIONS = ", ".join(suffix for suffixes, _ in _SUFFIXES for suffix in suffixes)
_CHUNK = 1 << 16
_GZIP_WBITS = 16 + zlib.MAX_WBITS


@dataclass(frozen=True)
class ReadProblem:
    """One bad input found while reading `path`; `message` is a sentence naming the file and record or line."""

    path: str
    kind: ProblemKind
    message: str


class _CorruptGzip(Exception):
    """The gzip stream is damaged: bad header or data, bad CRC or length, or cut off inside a member."""


class _GzipMembers(io.RawIOBase):
    """Strict streaming decompression of a (multi-member) gzip file.

    Damage raises `_CorruptGzip` instead of being skipped. One read never returns bytes of two members, and
    `verified` counts the decompressed bytes of the members whose CRC and length already checked out, out of
    `delivered`; so a reader can tell whether a record it holds came from an intact member.
    """

    def __init__(self, raw: BinaryIO) -> None:
        super().__init__()
        self._raw = raw
        self._member = zlib.decompressobj(_GZIP_WBITS)
        self._member_started = False
        self._input = b""
        self.delivered = 0
        self.verified = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def _read(self, size: int) -> bytes:
        while size > 0:
            if self._member.eof:
                self.verified = self.delivered
                self._member = zlib.decompressobj(_GZIP_WBITS)
                self._member_started = False
            if not self._input:
                self._input = self._raw.read(_CHUNK)
                if not self._input:
                    if self._member_started:
                        raise _CorruptGzip("the file ends in the middle of a gzip member")
                    return b""
            self._member_started = True
            try:
                data = self._member.decompress(self._input, size)
            except zlib.error as error:
                raise _CorruptGzip(str(error)) from error
            self._input = self._member.unused_data if self._member.eof else self._member.unconsumed_tail
            if data:
                self.delivered += len(data)
                if self._member.eof:
                    self.verified = self.delivered
                return data
        return b""


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
    the epoch) is only used for plain-text files, whose timestamp is the file's last-modified time. A damaged gzip
    stream or an unparseable file ends the file: the records before the damage are kept.
    """
    source_format = detect_format(path)
    if source_format is None:
        yield ReadProblem(path, "unknown_format", f"{path} has no known extension ({_KNOWN_EXTENSIONS}).")
        return
    records = 0
    try:
        with open_binary(path) as raw:
            stream = _GzipMembers(raw) if path.lower().endswith(".gz") else raw
            if source_format is SourceFormat.WET:
                items = _read_wet(path, stream, max_record_bytes)
            elif source_format is SourceFormat.JSONL:
                items = _read_jsonl(path, _buffered(stream), max_record_bytes)
            else:
                items = _read_text(path, _buffered(stream), max_record_bytes, modified_time)
            for item in items:
                records += isinstance(item, RawRecord)
                yield item
    except FileNotFoundError:
        yield ReadProblem(path, "missing_file", f"{path} does not exist.")
    except _CorruptGzip as error:
        yield ReadProblem(
            path, "corrupt_gzip", f"{path} is a damaged gzip file ({error}); stopped after {records} good records."
        )
    except OSError as error:
        yield ReadProblem(
            path, "unreadable_file", f"{path} could not be read ({error}); stopped after {records} records."
        )


def _buffered(stream: BinaryIO) -> BinaryIO:
    return io.BufferedReader(stream) if isinstance(stream, _GzipMembers) else stream


def _read_wet(path: str, stream: BinaryIO, max_bytes: int) -> Iterator[RawRecord | ReadProblem]:
    """WET `conversion` records; other record types are skipped.

    Each record is held until the next one has been parsed, which makes the gzip reader check the CRC of the member
    that holds it; on damage the held record is kept only if its bytes were all verified.
    """
    held: RawRecord | None = None
    held_end = 0
    number = 0
    archive = ArchiveIterator(stream)
    # The input is already decompressed. warcio would sniff for gzip on its first read, and a short first read
    # (a few bytes) makes it swallow those bytes; turn the sniffing off.
    archive.reader.set_decomp(None)
    try:
        for number, record in enumerate(archive, 1):
            if held is not None:
                yield held
                held = None
            if record.rec_type != "conversion":
                continue
            headers = record.rec_headers
            url = headers.get_header("WARC-Target-URI")
            where = f"WET record {number} ({url or 'no URL'}) in {path}"
            length = _int_or_none(headers.get_header("Content-Length"))
            if length is None:  # WARC cannot frame a record without it; usually the file was cut inside the headers
                yield ReadProblem(path, "truncated_record", f"{where} has no valid Content-Length header.")
                continue
            if length > max_bytes:
                yield ReadProblem(path, "oversized_record", f"{where} has {length} bytes, over the {max_bytes} limit.")
                continue
            body = record.content_stream().read()
            if len(body) < length:
                yield ReadProblem(path, "truncated_record", f"{where} ends after {len(body)} of its {length} bytes.")
                continue
            text = _decode_utf8(body, path, where)
            if isinstance(text, ReadProblem):
                yield text
                continue
            held = RawRecord(
                source_format=SourceFormat.WET,
                url=url,
                timestamp=headers.get_header("WARC-Date"),
                content_type=headers.get_header("Content-Type"),
                content_length=length,
                body=text,
                source_path=path,
            )
            held_end = stream.delivered if isinstance(stream, _GzipMembers) else 0
    except (_CorruptGzip, OSError):
        if held is not None and (not isinstance(stream, _GzipMembers) or held_end <= stream.verified):
            yield held
        raise
    except ArchiveLoadFailed as error:
        if held is not None:
            yield held
        reason = str(error).strip().splitlines()[-1][:120]
        yield ReadProblem(path, "unreadable_file", f"{path} is not valid WARC after record {number} ({reason}).")
        return
    if held is not None:
        yield held
    if number == 0:
        yield ReadProblem(path, "empty_file", f"{path} holds no WARC records.")


def _decode_utf8(data: bytes, path: str, where: str) -> str | ReadProblem:
    """Strict UTF-8, or the problem that says where the bad byte is."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        return ReadProblem(path, "invalid_utf8", f"{where} is not valid UTF-8 ({error.reason} at byte {error.start}).")


def _read_jsonl(path: str, stream: BinaryIO, max_bytes: int) -> Iterator[RawRecord | ReadProblem]:
    """One document per line: `text`, `url`, `timestamp` (C4); Dolma's `metadata.url` and `created` as fallbacks."""
    number = 0
    while line := stream.readline(max_bytes + 1):
        number += 1
        where = f"line {number} of {path}"
        if len(line) > max_bytes and not line.endswith(b"\n"):
            while (rest := stream.readline(_CHUNK)) and not rest.endswith(b"\n"):
                pass
            yield ReadProblem(path, "oversized_record", f"{where} is over the {max_bytes}-byte limit.")
            continue
        decoded = _decode_utf8(line, path, where)
        if isinstance(decoded, ReadProblem):
            yield decoded
            continue
        if not decoded.strip():
            continue
        try:
            document = json.loads(decoded)
        except (ValueError, RecursionError) as error:
            yield ReadProblem(path, "invalid_json", f"{where} is not valid JSON ({error}).")
            continue
        text = document.get("text") if isinstance(document, dict) else None
        if not isinstance(text, str):
            yield ReadProblem(path, "invalid_json", f"{where} is not a JSON object with a string `text` field.")
            continue
        try:
            length = len(text.encode("utf-8"))
        except UnicodeEncodeError:
            yield ReadProblem(path, "invalid_utf8", f"{where} has a `text` with an unpaired surrogate escape.")
            continue
        metadata = document.get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        yield RawRecord(
            source_format=SourceFormat.JSONL,
            url=_str_or_none(document.get("url")) or _str_or_none(metadata.get("url")),
            timestamp=_str_or_none(document.get("timestamp")) or _str_or_none(document.get("created")),
            content_type="text/plain",
            content_length=length,
            body=text,
            source_path=path,
        )
    if number == 0:
        yield ReadProblem(path, "empty_file", f"{path} is empty.")


def _read_text(
    path: str, stream: BinaryIO, max_bytes: int, modified_time: Callable[[str], float]
) -> Iterator[RawRecord | ReadProblem]:
    """The whole file as one document: URL the path (`file://` added when it has no scheme), timestamp the file's
    last-modified time in UTC."""
    data = stream.read(max_bytes + 1)
    if not data:
        yield ReadProblem(path, "empty_file", f"{path} is empty.")
        return
    if len(data) > max_bytes:
        yield ReadProblem(path, "oversized_record", f"{path} is over the {max_bytes}-byte limit.")
        return
    text = _decode_utf8(data, path, path)
    if isinstance(text, ReadProblem):
        yield text
        return
    modified = datetime.fromtimestamp(modified_time(path), timezone.utc)
    yield RawRecord(
        source_format=SourceFormat.TEXT,
        url=path if "://" in path else f"file://{path}",
        timestamp=modified.strftime("%Y-%m-%dT%H:%M:%SZ"),
        content_type="text/plain",
        content_length=len(data),
        body=text,
        source_path=path,
    )


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None
