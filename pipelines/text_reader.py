"""Plain-text reader: the whole file is one document."""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Callable, Iterator

from .byte_reader import UTF8_BOM, ByteReader
from .gzip_members import GzipDamage
from .read_problems import ReadProblem, corrupt_gzip_problem, decode_utf8
from .records import RawRecord, SourceFormat
from .warc_records import is_version_line


def read_text(
    path: str, reader: ByteReader, max_bytes: int, modified_time: Callable[[str], float]
) -> Iterator[RawRecord | ReadProblem]:
    """The whole file as one document: URL the path (`file://` added when it has no scheme), timestamp the file's
    last-modified time in UTC. A leading UTF-8 BOM is dropped; a damaged gzip member loses the document; a file
    with NUL bytes (binary) or that starts like WARC is a `format_mismatch`."""
    try:
        data = reader.read(max_bytes + 1)
    except GzipDamage as damage:
        yield corrupt_gzip_problem(path, damage)
        return
    data = data.removeprefix(UTF8_BOM)
    if not data:
        yield ReadProblem(path, "empty_file", f"{path} is empty.")
        return
    if len(data) > max_bytes:
        yield ReadProblem(path, "oversized_record", f"{path} is over the {max_bytes}-byte limit.")
        return
    if b"\0" in data:
        yield ReadProblem(path, "format_mismatch", f"{path} holds NUL bytes: is it a binary file, not text?")
        return
    if is_version_line(data[:64].partition(b"\n")[0]):
        yield ReadProblem(path, "format_mismatch", f"{path} starts like WARC, not plain text: is it a WET file?")
        return
    text = decode_utf8(data, path, path)
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
