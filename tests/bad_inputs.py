"""A corpus of damaged input files cut from real data, each with what a reader must make of it.

Every case starts from intact real records (the Common Crawl WET sample, released C4 JSON Lines, the whirlwind
WARC/WAT/WET files, Shakespeare's text) and damages them in one way. A case names the `read-input` problems the
damage must be counted as and the URLs of the records that must still come out: every intact record, in file order.
"""
from __future__ import annotations

import gzip
import json
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from c4prep.pipelines.readers import MAX_RECORD_BYTES

WET_RECORDS = 6  # records 3 (263 bytes) aside, each member is large enough to be damaged in its middle
JSONL_LINES = 5
THIS_FILE = "file://<this file>"  # the URL of a plain-text file's one record: its own path
BOM = b"\xef\xbb\xbf"
WARC_VERSION_LINE = b"WARC/1.0\r\n"


@dataclass(frozen=True)
class Sources:
    """The real, intact input the cases are cut from."""

    wet_members: tuple[bytes, ...]  # gzip members of the first WET sample records, one record each
    wet_urls: tuple[str, ...]
    jsonl_lines: tuple[bytes, ...]  # released C4 documents, one line each, "\n" included
    jsonl_urls: tuple[str, ...]
    warc: bytes  # whirlwind.warc.gz: warcinfo, request, response, metadata
    wat: bytes  # whirlwind.warc.wat.gz: warcinfo, metadata
    wet_warcinfo: bytes  # the first member of whirlwind.warc.wet.gz: a WET file's warcinfo record alone
    text: bytes  # the first lines of Shakespeare
    bodies: dict[str, str]  # the intact body of every source URL (THIS_FILE: the text)

    @property
    def wet_records(self) -> list[bytes]:
        return [gzip.decompress(member) for member in self.wet_members]


@dataclass(frozen=True)
class Case:
    """One damaged file: its name ends in `extension`, `build` makes its bytes from the sources."""

    name: str
    extension: str
    build: Callable[[Sources], bytes]
    problems: dict[str, int]  # the expected `read-input` problem counts, by kind
    survivors: Callable[[Sources], list[str]]  # the URLs of the records that must come out, in file order


def load_sources(shared_data: Path) -> Sources:
    webdata = shared_data / "webdata"
    wet_members = tuple(gzip_members((webdata / "CC-MAIN-2019-30-sample-a.warc.wet.gz").read_bytes())[:WET_RECORDS])
    records = [gzip.decompress(member) for member in wet_members]
    wet_urls = tuple(header(record, "WARC-Target-URI").decode() for record in records)
    with open(webdata / "c4-en-train-00000-first500.jsonl", "rb") as lines:
        jsonl_lines = tuple(next(lines) for _ in range(JSONL_LINES))
    documents = [json.loads(line) for line in jsonl_lines]
    text = b"".join((shared_data / "tinyshakespeare" / "input.txt").read_bytes().splitlines(keepends=True)[:20])
    bodies = {url: body(record).decode() for url, record in zip(wet_urls, records)}
    bodies.update({document["url"]: document["text"] for document in documents})
    bodies[THIS_FILE] = text.decode()
    return Sources(
        wet_members=wet_members,
        wet_urls=wet_urls,
        jsonl_lines=jsonl_lines,
        jsonl_urls=tuple(document["url"] for document in documents),
        warc=(webdata / "whirlwind.warc.gz").read_bytes(),
        wat=(webdata / "whirlwind.warc.wat.gz").read_bytes(),
        wet_warcinfo=gzip_members((webdata / "whirlwind.warc.wet.gz").read_bytes())[0],
        text=text,
        bodies=bodies,
    )


# --- building blocks ------------------------------------------------------------------------------------------


def gzip_members(data: bytes) -> list[bytes]:
    """The gzip members of `data`, split where each one ends."""
    members = []
    while data:
        member = zlib.decompressobj(16 + zlib.MAX_WBITS)
        member.decompress(data)
        end = len(data) - len(member.unused_data)
        members.append(data[:end])
        data = data[end:]
    return members


def header(record: bytes, name: str) -> bytes:
    return re.search(rb"\r\n" + name.encode() + rb": ([^\r\n]*)\r\n", record).group(1)


def body(record: bytes) -> bytes:
    return record.partition(b"\r\n\r\n")[2][:-4]


def with_header(record: bytes, name: str, value: bytes | None) -> bytes:
    """`record` with header `name` set to `value`, or removed when None."""
    head, blank, rest = record.partition(b"\r\n\r\n")
    prefix = name.encode() + b":"
    lines = [line for line in head.split(b"\r\n") if not line.startswith(prefix)]
    if value is not None:
        lines.append(prefix + b" " + value)
    return b"\r\n".join(lines) + blank + rest


def with_length_off_by(record: bytes, delta: int) -> bytes:
    return with_header(record, "Content-Length", str(int(header(record, "Content-Length")) + delta).encode())


def with_body(record: bytes, new_body: bytes) -> bytes:
    """`record` holding `new_body`, with a Content-Length that matches it."""
    head = record.partition(b"\r\n\r\n")[0] + b"\r\n\r\n"
    return with_header(head + new_body + b"\r\n\r\n", "Content-Length", str(len(new_body)).encode())


def with_body_bytes(record: bytes, offset: int, replacement: bytes) -> bytes:
    """`record` with ASCII body bytes from `offset` on overwritten (same length, same Content-Length)."""
    start = record.index(b"\r\n\r\n") + 4 + offset
    assert record[start : start + len(replacement)].isascii()
    return record[:start] + replacement + record[start + len(replacement) :]


def with_lf_line_ends(record: bytes) -> bytes:
    """`record` written with LF line ends: headers, blank line and closing (the body is left as it is)."""
    head, _, rest = record.partition(b"\r\n\r\n")
    return head.replace(b"\r\n", b"\n") + b"\n\n" + rest[:-4] + b"\n\n"


def flipped(data: bytes, offset: int) -> bytes:
    damaged = bytearray(data)
    damaged[offset] ^= 0xFF
    return bytes(damaged)


def member_with_middle_flipped(member: bytes) -> bytes:
    return flipped(member, len(member) // 2)


def cut_in_member(members: Iterable[bytes], index: int) -> bytes:
    """The gzip members up to member `index`, which is cut in its middle (the file ends there)."""
    members = list(members)
    return b"".join(members[:index]) + members[index][: len(members[index]) // 2]


def jsonl_members(sources: Sources) -> list[bytes]:
    """The JSON Lines in one gzip member per line."""
    return [gzip.compress(line, mtime=0) for line in sources.jsonl_lines]


def real_members_with(sources: Sources, changed: dict[int, bytes]) -> bytes:
    """The real gzip members, member `i` replaced by the bytes `changed[i]`."""
    return b"".join(changed.get(index, member) for index, member in enumerate(sources.wet_members))


def record_changed(index: int, change: Callable[[bytes], bytes]) -> Callable[[Sources], bytes]:
    """Builds the real gzip WET file with record `index` changed (and compressed again)."""
    return lambda s: real_members_with(s, {index: gzip.compress(change(s.wet_records[index]), mtime=0)})


def member_damaged(*indexes: int, at: Callable[[bytes], int] = lambda member: len(member) // 2):
    """Builds the real gzip WET file with one byte flipped (by default in the middle) in each member of `indexes`."""
    return lambda s: real_members_with(s, {index: flipped(s.wet_members[index], at(s.wet_members[index]))
                                           for index in indexes})


def plain_records_changed(changes: dict[int, Callable[[bytes], bytes]]) -> Callable[[Sources], bytes]:
    """Builds the uncompressed WET file with the records of `changes` changed."""
    return lambda s: b"".join(changes.get(index, lambda r: r)(record) for index, record in enumerate(s.wet_records))


def zeroed_across_members_1_and_2(sources: Sources) -> bytes:
    """1 KiB of zeros from the middle of member 1 into member 2 (its gzip header included), as a crashed disk
    leaves them."""
    data = bytearray(b"".join(sources.wet_members))
    start = len(sources.wet_members[0]) + len(sources.wet_members[1]) // 2
    data[start : start + 1024] = bytes(1024)
    assert start + 1024 < sum(len(member) for member in sources.wet_members[:3])  # member 3 is intact
    return bytes(data)


def zeroed_across_records_2_and_3(sources: Sources) -> bytes:
    """Zeros over the last 100 bytes of record 2 and the first 50 of record 3 (its version line included)."""
    data = bytearray(b"".join(sources.wet_records))
    start = sum(len(record) for record in sources.wet_records[:3]) - 100
    data[start : start + 150] = bytes(150)
    return bytes(data)


def oversized(record: bytes) -> bytes:
    """`record` with its real body repeated to one byte over the record limit."""
    text = body(record) + b"\n"
    return with_body(record, (text * (MAX_RECORD_BYTES // len(text) + 1))[: MAX_RECORD_BYTES + 1])


CHUNK = 1000  # bytes of JSON Lines per gzip member in `jsonl_in_chunked_members`


def jsonl_in_chunked_members(sources: Sources) -> tuple[bytes, ...]:
    """The JSON Lines in 1,000-byte gzip members, split mid-line (like a block-gzip writer's)."""
    data = b"".join(sources.jsonl_lines)
    return tuple(gzip.compress(data[start : start + CHUNK], mtime=0) for start in range(0, len(data), CHUNK))


def damaged_chunk(sources: Sources) -> int:
    """The member of `jsonl_in_chunked_members` that holds the middle of line 2."""
    return (len(b"".join(sources.jsonl_lines[:2])) + len(sources.jsonl_lines[2]) // 2) // CHUNK


def jsonl_chunk_header_damaged(sources: Sources) -> bytes:
    members = list(jsonl_in_chunked_members(sources))
    members[damaged_chunk(sources)] = flipped(members[damaged_chunk(sources)], 0)
    return b"".join(members)


def lines_clear_of_the_damaged_chunk(sources: Sources) -> list[str]:
    """The URLs of the lines with no byte in the damaged member."""
    damaged_start = damaged_chunk(sources) * CHUNK
    damaged_end = damaged_start + CHUNK
    survivors, start = [], 0
    for line, url in zip(sources.jsonl_lines, sources.jsonl_urls):
        end = start + len(line)
        if end <= damaged_start or start >= damaged_end:
            survivors.append(url)
        start = end
    return survivors


def jsonl_with(sources: Sources, extra: dict[int, bytes]) -> bytes:
    """The JSON Lines with the lines of `extra` put before line `i`."""
    return b"".join(extra.get(index, b"") + line for index, line in enumerate(sources.jsonl_lines))


def all_but(urls: Iterable[str], *lost: int) -> list[str]:
    return [url for index, url in enumerate(urls) if index not in lost]


def every_wet(sources: Sources) -> list[str]:
    return list(sources.wet_urls)


def every_jsonl(sources: Sources) -> list[str]:
    return list(sources.jsonl_urls)


def no_record(sources: Sources) -> list[str]:
    return []


def wet_but(*lost: int) -> Callable[[Sources], list[str]]:
    return lambda s: all_but(s.wet_urls, *lost)


def jsonl_but(*lost: int) -> Callable[[Sources], list[str]]:
    return lambda s: all_but(s.jsonl_urls, *lost)


def plain(sources: Sources) -> bytes:
    return b"".join(sources.wet_records)


def real_gzip(sources: Sources) -> bytes:
    return b"".join(sources.wet_members)


GZ = ".warc.wet.gz"
WET = ".wet"
JSONL = ".jsonl"
TXT = ".txt"

CASES = [
    # --- tolerated variations of intact WET files: everything survives, nothing is counted
    Case("intact_wet_gz", GZ, real_gzip, {}, every_wet),
    Case("wet_without_gzip", WET, plain, {}, every_wet),
    Case("uppercase_extension", ".WARC.WET.GZ", real_gzip, {}, every_wet),
    Case("bom_before_wet", WET, lambda s: BOM + plain(s), {}, every_wet),
    Case("crlf_lf_mix", WET, plain_records_changed({3: with_lf_line_ends, 4: with_lf_line_ends}), {}, every_wet),
    Case("blank_lines_between_records", WET, plain_records_changed({2: lambda r: r + b"\r\n" * 3}), {}, every_wet),
    # --- wrong or missing Content-Length
    Case("content_length_7_too_large", GZ, record_changed(2, lambda r: with_length_off_by(r, 7)),
         {"bad_record_length": 1}, wet_but(2)),
    Case("content_length_7_too_small", GZ, record_changed(2, lambda r: with_length_off_by(r, -7)),
         {"bad_record_length": 1}, wet_but(2)),
    Case("content_length_1_too_small_uncompressed", WET,
         plain_records_changed({2: lambda r: with_length_off_by(r, -1)}),
         {"bad_record_length": 1}, wet_but(2)),
    Case("content_length_missing", GZ, record_changed(2, lambda r: with_header(r, "Content-Length", None)),
         {"bad_record_length": 1}, wet_but(2)),
    Case("content_length_negative", GZ, record_changed(2, lambda r: with_header(r, "Content-Length", b"-12")),
         {"bad_record_length": 1}, wet_but(2)),
    Case("content_length_not_a_number", GZ, record_changed(2, lambda r: with_header(r, "Content-Length", b"12abc")),
         {"bad_record_length": 1}, wet_but(2)),
    Case("content_length_over_the_limit", GZ,
         record_changed(2, lambda r: with_header(r, "Content-Length", b"99999999999")), {"oversized_record": 1},
         wet_but(2)),
    Case("oversized_record", GZ, record_changed(2, oversized), {"oversized_record": 1}, wet_but(2)),
    # --- damaged gzip members
    Case("corrupt_member", GZ, member_damaged(2), {"corrupt_gzip": 1}, wet_but(2)),
    Case("bad_crc", GZ, member_damaged(2, at=lambda member: len(member) - 8), {"corrupt_gzip": 1}, wet_but(2)),
    Case("corrupt_first_member", GZ, member_damaged(0), {"corrupt_gzip": 1}, wet_but(0)),
    Case("corrupt_last_member", GZ, member_damaged(5), {"corrupt_gzip": 1}, wet_but(5)),
    Case("two_corrupt_members_in_a_row", GZ, member_damaged(1, 2), {"corrupt_gzip": 2}, wet_but(1, 2)),
    Case("corrupt_members_far_apart", GZ, member_damaged(1, 4), {"corrupt_gzip": 2}, wet_but(1, 4)),
    Case("member_trailer_missing", GZ, lambda s: real_members_with(s, {2: s.wet_members[2][:-8]}), {"corrupt_gzip": 1},
         wet_but(2)),
    Case("damaged_member_header", GZ, member_damaged(3, at=lambda member: 0), {"corrupt_gzip": 1}, wet_but(3)),
    # member 2's own header is zeroed too, so it cannot be told from noise: one damaged stretch, two records
    Case("zeroed_block_across_members", GZ, zeroed_across_members_1_and_2, {"corrupt_gzip": 1}, wet_but(1, 2)),
    Case("garbage_between_members", GZ,
         lambda s: b"".join(s.wet_members[:3]) + b"these bytes are not gzip\n" + b"".join(s.wet_members[3:]),
         {"corrupt_gzip": 1}, every_wet),
    Case("zero_padding_after_the_last_member", GZ, lambda s: real_gzip(s) + bytes(512), {"corrupt_gzip": 1},
         every_wet),
    Case("truncated_gzip", GZ, lambda s: cut_in_member(s.wet_members, 5), {"corrupt_gzip": 1}, wet_but(5)),
    # --- cut or misframed records
    Case("truncated_mid_header", WET, lambda s: plain(s)[: -len(s.wet_records[5]) + 40], {"truncated_record": 1},
         wet_but(5)),
    Case("truncated_mid_body", WET, lambda s: plain(s)[: -len(s.wet_records[5]) // 2], {"truncated_record": 1},
         wet_but(5)),
    Case("truncated_before_the_closing_blank_lines", WET, lambda s: plain(s)[:-4], {"truncated_record": 1},
         wet_but(5)),
    Case("headers_cut_by_the_next_record", WET,
         plain_records_changed({2: lambda r: r[: r.index(b"WARC-Block-Digest")]}), {"truncated_record": 1},
         wet_but(2)),
    Case("header_value_cut_and_glued_to_the_next_record", WET,
         plain_records_changed({2: lambda r: r[: r.index(b"WARC-Target-URI") + 30]}), {"truncated_record": 1},
         wet_but(2)),
    Case("header_name_cut_and_glued_to_the_next_record", WET,
         plain_records_changed({2: lambda r: r[: r.index(b"WARC-Block-Digest") + 10]}), {"truncated_record": 1},
         wet_but(2)),
    # the frame of record 2 is broken, and record 3 is lost in the same damaged stretch: one problem
    Case("zeroed_block_across_records", WET, zeroed_across_records_2_and_3, {"bad_record_length": 1}, wet_but(2, 3)),
    Case("body_cut_and_glued_to_the_next_record", WET, plain_records_changed({2: lambda r: r[: len(r) // 2]}),
         {"bad_record_length": 1}, wet_but(2)),
    Case("garbage_between_records", WET, plain_records_changed({2: lambda r: r + b"\x00\x01 not a record \xff\r\n"}),
         {"stray_bytes": 1}, every_wet),
    Case("garbage_glued_to_the_next_record", WET, plain_records_changed({2: lambda r: r + b"half a rec"}),
         {"stray_bytes": 1}, every_wet),
    Case("missing_warc_version_line", GZ, record_changed(3, lambda r: r.removeprefix(WARC_VERSION_LINE)),
         {"stray_bytes": 1}, wet_but(3)),
    Case("header_block_over_64_kib", GZ,
         record_changed(2, lambda r: with_header(r, "X-Filler", b"a" * 70_000)), {"invalid_header": 1}, wet_but(2)),
    # --- bad bytes in a record
    Case("invalid_utf8_in_body", GZ, record_changed(4, lambda r: with_body_bytes(r, 10, b"\xff")),
         {"invalid_utf8": 1}, wet_but(4)),
    Case("invalid_utf8_in_url", GZ, record_changed(4, lambda r: r.replace(b"/autor/599", b"/autor/5\xe99", 1)),
         {"invalid_header": 1}, wet_but(4)),
    # --- WET files whose content is not what their name says, or nothing
    Case("zero_length_file", GZ, lambda s: b"", {"empty_file": 1}, no_record),
    Case("gzip_of_empty_data", GZ, lambda s: gzip.compress(b""), {"empty_file": 1}, no_record),
    Case("warcinfo_only", GZ, lambda s: s.wet_warcinfo, {"empty_file": 1}, no_record),
    Case("warc_named_wet", GZ, lambda s: s.warc, {"format_mismatch": 1}, no_record),
    Case("wat_named_wet", GZ, lambda s: s.wat, {"format_mismatch": 1}, no_record),
    Case("uncompressed_wet_named_gz", GZ, plain, {"format_mismatch": 1}, no_record),
    Case("gzip_wet_named_without_gz", WET, real_gzip, {"format_mismatch": 1}, no_record),
    Case("text_named_wet", WET, lambda s: s.text, {"format_mismatch": 1}, no_record),
    Case("unknown_extension", ".warc.gz", real_gzip, {"unknown_format": 1}, no_record),
    # --- JSON Lines
    Case("intact_jsonl", JSONL, lambda s: b"".join(s.jsonl_lines), {}, every_jsonl),
    Case("jsonl_with_bom", JSONL, lambda s: BOM + b"".join(s.jsonl_lines), {}, every_jsonl),
    Case("jsonl_windows_line_ends", JSONL, lambda s: b"".join(s.jsonl_lines).replace(b"\n", b"\r\n"), {},
         every_jsonl),
    Case("jsonl_bad_lines", JSONL,
         lambda s: jsonl_with(s, {1: b"{not json\n\n", 2: b"[1, 2]\n   \n", 3: b'{"url": "https://no.text/"}\n',
                                  4: b'{"text": "\\ud800 lone surrogate"}\n'}),
         {"invalid_json": 3, "invalid_utf8": 1}, every_jsonl),
    Case("jsonl_invalid_utf8_line", JSONL, lambda s: jsonl_with(s, {2: b"\xff\xfe not utf-8\n"}), {"invalid_utf8": 1},
         every_jsonl),
    Case("jsonl_nul_byte_in_a_line", JSONL,
         lambda s: b"".join(line[:20] + b"\x00" + line[20:] if index == 2 else line
                            for index, line in enumerate(s.jsonl_lines)),
         {"invalid_json": 1}, jsonl_but(2)),
    Case("jsonl_truncated_last_line", JSONL, lambda s: b"".join(s.jsonl_lines)[: -len(s.jsonl_lines[4]) // 2],
         {"invalid_json": 1}, jsonl_but(4)),
    Case("jsonl_holding_wet", JSONL, plain, {"format_mismatch": 1}, no_record),
    Case("jsonl_in_utf16", JSONL, lambda s: b"".join(s.jsonl_lines).decode().encode("utf-16"),
         {"format_mismatch": 1}, no_record),
    Case("gzip_jsonl_named_without_gz", JSONL, lambda s: gzip.compress(b"".join(s.jsonl_lines), mtime=0),
         {"format_mismatch": 1}, no_record),
    Case("jsonl_gz_truncated", ".jsonl.gz", lambda s: cut_in_member(jsonl_members(s), 3), {"corrupt_gzip": 1},
         lambda s: list(s.jsonl_urls[:3])),
    Case("jsonl_gz_damaged_member_header", ".jsonl.gz",
         lambda s: b"".join(flipped(member, 0) if index == 2 else member
                            for index, member in enumerate(jsonl_members(s))),
         {"corrupt_gzip": 1}, jsonl_but(2)),
    Case("jsonl_gz_gzip_header_then_garbage", ".jsonl.gz", lambda s: b"\x1f\x8b\x08\x00 this is not gzip",
         {"corrupt_gzip": 1}, no_record),
    Case("jsonl_gz_members_split_mid_line", ".jsonl.gz", jsonl_chunk_header_damaged, {"corrupt_gzip": 1},
         lines_clear_of_the_damaged_chunk),
    # --- plain text
    Case("text_with_bom", TXT, lambda s: BOM + s.text, {}, lambda s: [THIS_FILE]),
    Case("text_binary", TXT, lambda s: s.text[:300] + bytes(64) + s.text[300:], {"format_mismatch": 1}, no_record),
    Case("text_holding_wet", TXT, plain, {"format_mismatch": 1}, no_record),
    Case("text_invalid_utf8", TXT, lambda s: s.text.replace(b"Citizen", b"Citiz\xe9n", 1), {"invalid_utf8": 1},
         no_record),
    Case("text_gz_corrupt", ".txt.gz", lambda s: member_with_middle_flipped(gzip.compress(s.text, mtime=0)),
         {"corrupt_gzip": 1}, no_record),
]
