"""Framing of WARC records in a byte stream: one record at a time, and the next `WARC/1.0` line to resume at."""
from __future__ import annotations

from collections import Counter

from .byte_reader import CHUNK_BYTES, ByteReader
from .read_problems import ProblemKind, ReadProblem, decode_utf8
from .records import RawRecord, SourceFormat
from .warc_headers import byte_count, decode_header_lines, parse_warc_headers, target_uri

_MAX_HEADER_BYTES = 1 << 16
_WARC_VERSIONS = (b"WARC/1.0", b"WARC/1.1")


class BadRecord(Exception):
    """A WET record that cannot be framed: `problem` says why; reading resumes at `line` (None: at the next line)."""

    def __init__(self, problem: ReadProblem, line: bytes | None = None) -> None:
        super().__init__(problem.message)
        self.problem = problem
        self.line = line


def next_record_start(reader: ByteReader, line: bytes) -> tuple[bytes, int]:
    """Skip to the next line that ends in a WARC version; return that version line (b"" at the end of the file) and
    how many bytes were skipped, blank lines not counted."""
    skipped = 0
    while line:
        version_line = _version_at_end(line)
        if version_line is not None:
            return version_line, skipped + len(line) - len(version_line)
        if line.strip():
            skipped += len(line)
        line = reader.readline(CHUNK_BYTES)
    return b"", skipped


def is_version_line(line: bytes) -> bool:
    """Whether `line` is a WARC version line (`WARC/1.0` or 1.1), line end aside."""
    return line.rstrip(b"\r\n") in _WARC_VERSIONS


def _version_at_end(line: bytes) -> bytes | None:
    """The `WARC/1.0` (or 1.1) and line end that `line` ends with, or None."""
    text = line.rstrip(b"\r\n")
    for version in _WARC_VERSIONS:
        if text.endswith(version):
            return version + line[len(text) :]
    return None


class WarcSplitter:
    """Frames one WARC record at a time and turns `conversion` records into `RawRecord`s.

    A record is a version line (`WARC/1.0`), header lines up to a blank line, `Content-Length` bytes of body and
    two line ends (CRLF, or LF in a file written with LF line ends). A record over `max_bytes` is skipped up to the
    next `WARC/1.0` line, so a wrong huge length cannot swallow the records after it.
    """

    def __init__(self, path: str, reader: ByteReader, max_bytes: int) -> None:
        self.path = path
        self.reader = reader
        self.max_bytes = max_bytes
        self.number = 0  # records started, warcinfo included
        self.types: Counter[str | None] = Counter()

    def record(self, version_line: bytes) -> tuple[RawRecord | ReadProblem | None, bytes | None]:
        """The record `version_line` starts (None for a skipped type), and the line after it if already read.

        Raises `BadRecord` for a record that cannot be framed.
        """
        self.number += 1
        line_end = version_line[len(version_line.rstrip(b"\r\n")) :]
        texts, undecodable = decode_header_lines(self._header_lines())
        headers = parse_warc_headers(texts)
        record_type = headers.get("warc-type")
        self.types[record_type] += 1
        url = target_uri(headers.get("warc-target-uri"))
        where = f"WET record {self.number} ({url or 'no URL'}) in {self.path}"
        declared = headers.get("content-length")
        length = byte_count(declared)
        if length is None:
            reason = "no Content-Length" if declared is None else f"Content-Length {declared!r}, not a byte count"
            raise BadRecord(self._problem("bad_record_length", f"{where} has {reason}."))
        next_line = None
        if length > self.max_bytes:
            body = None
            next_line, _ = next_record_start(self.reader, self.reader.readline(CHUNK_BYTES))
        else:
            body = self._body(length, line_end, where)
        if undecodable is not None:
            message = f"{where} has a {undecodable} header that is not valid UTF-8; the record is skipped."
            return self._problem("invalid_header", message), next_line
        if record_type != "conversion":
            return None, next_line
        if body is None:
            message = f"{where} declares {length} bytes, over the {self.max_bytes} limit."
            return self._problem("oversized_record", message), next_line
        text = decode_utf8(body, self.path, where)
        if isinstance(text, ReadProblem):
            return text, None
        record = RawRecord(
            source_format=SourceFormat.WET,
            url=url,
            timestamp=headers.get("warc-date"),
            content_type=headers.get("content-type"),
            content_length=length,
            body=text,
            source_path=self.path,
        )
        return record, None

    def _header_lines(self) -> list[bytes]:
        """The header lines up to the blank line that ends them.

        Raises `BadRecord` when the file ends inside them, when they are too long, or when the next record starts
        inside them: at a line without a colon that ends in a WARC version (a version line, or a header cut
        mid-line and glued to it), or at a line that ends in one and is followed by a header name seen before (a
        header value cut and glued to the next record, whose headers repeat the names).
        """
        lines: list[bytes] = []
        names: set[bytes] = set()
        glued: int | None = None  # index of the first line with a colon that ends in a WARC version
        size = 0
        cut = f"WET record {self.number} in {self.path} is cut off inside its headers by the next record."
        while True:
            line = self.reader.readline(_MAX_HEADER_BYTES)
            if not line.endswith(b"\n") and len(line) < _MAX_HEADER_BYTES:
                message = f"WET record {self.number} in {self.path} ends inside its headers."
                raise BadRecord(self._problem("truncated_record", message))
            if not line.strip():
                return lines
            name, colon, _ = line.partition(b":")
            name = name.strip().lower()
            version_line = _version_at_end(line)
            if version_line is not None and not colon:
                raise BadRecord(self._problem("truncated_record", cut), version_line)
            if glued is not None and colon and name in names and name != b"warc-concurrent-to":
                self.reader.unread(b"".join(lines[glued + 1 :]) + line)
                raise BadRecord(self._problem("truncated_record", cut), _version_at_end(lines[glued]))
            if glued is None and version_line is not None:
                glued = len(lines)
            names.add(name)
            lines.append(line)
            size += len(line)
            if size >= _MAX_HEADER_BYTES:
                message = f"WET record {self.number} in {self.path} has over {_MAX_HEADER_BYTES} bytes of headers."
                raise BadRecord(self._problem("invalid_header", message))

    def _body(self, length: int, line_end: bytes, where: str) -> bytes:
        """The `length` bytes of body, checked to be followed by two line ends."""
        body = self.reader.read(length)
        if len(body) < length:
            message = f"{where} ends after {len(body)} of its {length} bytes."
            raise BadRecord(self._problem("truncated_record", message))
        closing = self.reader.read(2 * len(line_end))
        if closing != 2 * line_end:
            if len(closing) < 2 * len(line_end) and (2 * line_end).startswith(closing):
                message = f"{where} ends without the blank lines that close a record."
                raise BadRecord(self._problem("truncated_record", message))
            self.reader.unread(body + closing)
            message = f"{where} does not end where its Content-Length of {length} bytes says."
            raise BadRecord(self._problem("bad_record_length", message))
        return body

    def _problem(self, kind: ProblemKind, message: str) -> ReadProblem:
        return ReadProblem(self.path, kind, message)
