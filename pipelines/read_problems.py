"""`ReadProblem`: what readers yield for bad input instead of raising, and the problems several readers make."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .gzip_members import GzipDamage

ProblemKind = Literal[
    "missing_file",
    "empty_file",
    "unknown_format",  # the name has no known extension
    "format_mismatch",  # the content is not what the name says: not gzip in a .gz, WARC in a .wet, binary .txt, ...
    "unreadable_file",  # an I/O error while opening or reading
    "corrupt_gzip",  # one damaged gzip member (or bytes after the last one that are not gzip)
    "truncated_record",  # the file ends inside a WET record, or the next record starts inside its headers
    "bad_record_length",  # a WET record's Content-Length is missing, not a byte count, or not where the record ends
    "invalid_header",  # a WET record's header block is not UTF-8, or is over 64 KiB
    "stray_bytes",  # bytes between WET records that belong to no record
    "invalid_utf8",
    "invalid_json",
    "oversized_record",
]


@dataclass(frozen=True)
class ReadProblem:
    """One bad input found while reading `path`; `message` is a sentence naming the file and record or line."""

    path: str
    kind: ProblemKind
    message: str


def decode_utf8(data: bytes, path: str, where: str) -> str | ReadProblem:
    """Strict UTF-8, or the problem that says where the bad byte is."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        return ReadProblem(path, "invalid_utf8", f"{where} is not valid UTF-8 ({error.reason} at byte {error.start}).")


def corrupt_gzip_problem(path: str, damage: GzipDamage) -> ReadProblem:
    held = "what it held before the cut is kept, the record the cut splits skipped" if damage.cut else \
        "what it held is skipped"
    return ReadProblem(path, "corrupt_gzip", f"{path}: {damage}; {held}.")
