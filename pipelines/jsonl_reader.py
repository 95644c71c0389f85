"""JSON Lines reader: one document per line, a bad line losing only itself."""
from __future__ import annotations

import json
from typing import Iterator

from .byte_reader import CHUNK_BYTES, UTF8_BOM, ByteReader
from .gzip_members import GzipDamage
from .read_problems import ReadProblem, corrupt_gzip_problem, decode_utf8
from .records import RawRecord, SourceFormat
from .warc_records import is_version_line


def read_jsonl(path: str, reader: ByteReader, max_bytes: int) -> Iterator[RawRecord | ReadProblem]:
    """One document per line: `text`, `url`, `timestamp` (C4); Dolma's `metadata.url` and `created` as fallbacks.

    A leading UTF-8 BOM is dropped; a first line that is WARC or holds NUL bytes makes the file one
    `format_mismatch`. Lines come only from gzip members that check out (a released C4 `.json.gz`, one member, is
    checked in a first read). After a damaged gzip member, the first line is dropped without a problem of its own when
    it is not a valid document: it is most likely the tail of the line the damage cut.
    """
    number = 0
    damages = 0
    after_damage = False
    while True:
        try:
            line = reader.readline(max_bytes + 1)
            oversized = len(line) > max_bytes and not line.endswith(b"\n")
            if oversized:
                while (rest := reader.readline(CHUNK_BYTES)) and not rest.endswith(b"\n"):
                    pass
        except GzipDamage as damage:
            yield corrupt_gzip_problem(path, damage)
            damages += 1
            after_damage = True
            continue
        if not line:
            break
        number += 1
        tail_of_damage, after_damage = after_damage, False
        where = f"line {number} of {path}"
        if oversized:
            yield ReadProblem(path, "oversized_record", f"{where} is over the {max_bytes}-byte limit.")
            continue
        if number == 1:
            line = line.removeprefix(UTF8_BOM)
            mismatch = _jsonl_mismatch(path, line)
            if mismatch is not None:
                yield mismatch
                return
        item = _jsonl_document(path, where, line)
        if item is not None and not (tail_of_damage and isinstance(item, ReadProblem)):
            yield item
    if number == 0 and not damages:
        yield ReadProblem(path, "empty_file", f"{path} is empty.")


def _jsonl_mismatch(path: str, first_line: bytes) -> ReadProblem | None:
    """The `format_mismatch` of a file whose first line is WARC or holds NUL bytes, or None."""
    if is_version_line(first_line):
        return ReadProblem(path, "format_mismatch", f"{path} holds WARC records, not JSON Lines: is it a WET file?")
    if b"\0" in first_line:
        message = f"{path} holds NUL bytes, not UTF-8 JSON Lines: is it a binary or UTF-16 file?"
        return ReadProblem(path, "format_mismatch", message)
    return None


def _jsonl_document(path: str, where: str, line: bytes) -> RawRecord | ReadProblem | None:
    """The record of one JSON line, the problem with it, or None for a blank line."""
    decoded = decode_utf8(line, path, where)
    if isinstance(decoded, ReadProblem):
        return decoded
    if not decoded.strip():
        return None
    try:
        document = json.loads(decoded)
    except (ValueError, RecursionError) as error:
        return ReadProblem(path, "invalid_json", f"{where} is not valid JSON ({error}).")
    text = document.get("text") if isinstance(document, dict) else None
    if not isinstance(text, str):
        return ReadProblem(path, "invalid_json", f"{where} is not a JSON object with a string `text` field.")
    try:
        length = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return ReadProblem(path, "invalid_utf8", f"{where} has a `text` with an unpaired surrogate escape.")
    metadata = document.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    return RawRecord(
        source_format=SourceFormat.JSONL,
        url=_str_or_none(document.get("url")) or _str_or_none(metadata.get("url")),
        timestamp=_str_or_none(document.get("timestamp")) or _str_or_none(document.get("created")),
        content_type="text/plain",
        content_length=length,
        body=text,
        source_path=path,
    )


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None
