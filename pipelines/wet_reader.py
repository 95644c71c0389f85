"""WET reader: the `conversion` records of a WET stream, losing only the records that damage touches."""
from __future__ import annotations

from typing import Iterator

from .byte_reader import CHUNK_BYTES, UTF8_BOM, ByteReader
from .gzip_members import GzipDamage
from .read_problems import ReadProblem, corrupt_gzip_problem
from .records import RawRecord
from .warc_records import BadRecord, WarcSplitter, next_record_start


def read_wet(path: str, reader: ByteReader, max_bytes: int) -> Iterator[RawRecord | ReadProblem]:
    """WET `conversion` records; other record types are skipped.

    A record whose header block is not valid UTF-8 is skipped (`invalid_header`) rather than passed on with its URL
    dropped or guessed: which bytes were meant is unknown, a mis-decoded URL would go on into URL dedup and the URL
    filters as mojibake, and a record without a URL is dropped by validation anyway.

    A record that does not fit the WARC frame (see `WarcSplitter`) is one problem, and reading resumes at the next
    line that ends in `WARC/1.0` from just after where the record's body started; bytes between records that
    belong to no record are one `stray_bytes` per stretch. The gzip reader delivers only the bytes of members that
    check out, so a damaged member loses the records it holds (one in a Common Crawl file) and the one it cuts.
    """
    splitter = WarcSplitter(path, reader, max_bytes)
    line: bytes | None = None
    count_skipped = True
    first_bytes: bytes | None = None
    not_warc = False  # the file has bytes but no record
    problems = 0
    while True:
        try:
            if line is None:
                line = reader.readline(CHUNK_BYTES)
                if first_bytes is None:
                    line = line.removeprefix(UTF8_BOM)
                    first_bytes = line[:40]
            line, skipped = next_record_start(reader, line)
            if skipped and count_skipped and not (line or splitter.number):
                not_warc = True
            elif skipped and count_skipped:
                problems += 1
                where = f"after WET record {splitter.number}" if splitter.number else "before the first WET record"
                message = f"{path} has {skipped} bytes {where} that belong to no record."
                yield ReadProblem(path, "stray_bytes", message)
            if not line:
                break
            count_skipped = True
            outcome, line = splitter.record(line)
            if outcome is not None:
                problems += isinstance(outcome, ReadProblem)
                yield outcome
        except BadRecord as bad:
            problems += 1
            yield bad.problem
            line, count_skipped = bad.line, False
        except GzipDamage as damage:
            problems += 1
            yield corrupt_gzip_problem(path, damage)
            line, count_skipped = None, False
    not_warc_start = first_bytes if not_warc else None
    yield from _wet_content_problems(path, splitter, problems, not_warc_start)


def _wet_content_problems(
    path: str, splitter: WarcSplitter, problems: int, not_warc_start: bytes | None
) -> Iterator[ReadProblem]:
    """A WET file with no `conversion` record: a WARC or WAT file (`format_mismatch`), not WARC at all, or empty."""
    if splitter.types["conversion"]:
        return
    others = {name: count for name, count in splitter.types.most_common() if name not in (None, "warcinfo")}
    if others:
        held = ", ".join(f"{count} '{name}'" for name, count in others.items())
        guess = "a WAT file" if set(others) == {"metadata"} else "a WARC file"
        message = f"{path} holds WARC records ({held}) and no WET 'conversion' records: is it {guess}, not WET?"
        yield ReadProblem(path, "format_mismatch", message)
    elif problems:
        return
    elif splitter.number:
        yield ReadProblem(path, "empty_file", f"{path} holds no WET 'conversion' records.")
    elif not_warc_start is not None:
        message = f"{path} is not WARC: no line of it is 'WARC/1.0' (it starts with {not_warc_start!r})."
        yield ReadProblem(path, "format_mismatch", message)
    else:
        yield ReadProblem(path, "empty_file", f"{path} holds no WARC records.")
