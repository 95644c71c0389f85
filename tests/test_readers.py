"""Tests of `pipelines/readers.py` on the real web-data samples and on damaged copies of them."""
from __future__ import annotations

import gzip
import io
import json
import os
import zlib
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator
from warcio.warcwriter import WARCWriter

from c4prep.pipelines.byte_reader import ByteReader
from c4prep.pipelines.gzip_members import MAX_HELD_BYTES, GzipSource
from c4prep.pipelines.readers import MAX_RECORD_BYTES, ReadProblem, detect_format, read_records
from c4prep.pipelines.records import RawRecord, SourceFormat
from c4prep.pipelines.wet_reader import read_wet

SAMPLE_WET = "CC-MAIN-2019-30-sample-a.warc.wet.gz"
SAMPLE_PAGES = 335
BIG = 50 * 1024 * 1024


def open_local(path: str):
    return open(path, "rb")


def read(path: Path | str, **kwargs) -> tuple[list[RawRecord], list[ReadProblem]]:
    """Records and problems of one file, read with the local opener; also checks that problems come last or alone."""
    items = list(read_records(str(path), open_binary=open_local, **kwargs))
    records = [item for item in items if isinstance(item, RawRecord)]
    problems = [item for item in items if isinstance(item, ReadProblem)]
    assert len(records) + len(problems) == len(items)
    return records, problems


def kinds(problems: list[ReadProblem]) -> list[str]:
    return [problem.kind for problem in problems]


def wet_bytes(bodies: list[bytes], compress: bool) -> bytes:
    """A WET file (warcinfo + one `conversion` record per body) written by warcio."""
    out = io.BytesIO()
    writer = WARCWriter(out, gzip=compress)
    writer.write_record(writer.create_warcinfo_record("test.warc.wet.gz", {"software": "test"}))
    for number, body in enumerate(bodies):
        headers = {"WARC-Date": f"2019-07-17T12:{number % 60:02d}:00Z", "Content-Type": "text/plain"}
        record = writer.create_warc_record(
            f"https://example.com/{number}", "conversion", payload=io.BytesIO(body), length=len(body),
            warc_headers_dict=headers,
        )
        writer.write_record(record)
    return out.getvalue()


def gzip_members(data: bytes) -> list[int]:
    """Start offsets of the gzip members of `data`."""
    starts, offset = [], 0
    while offset < len(data):
        starts.append(offset)
        member = zlib.decompressobj(16 + zlib.MAX_WBITS)
        member.decompress(data[offset:])
        offset = len(data) - len(member.unused_data)
    return starts


@pytest.fixture(scope="module")
def sample_records(webdata: Path) -> list[RawRecord]:
    records, problems = read(webdata / SAMPLE_WET)
    assert problems == []
    return records


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("gs://b/CC-MAIN-x.warc.wet.gz", SourceFormat.WET),
        ("a.WET.GZ", SourceFormat.WET),
        ("a.wet", SourceFormat.WET),
        ("c4-train.00000-of-01024.json.gz", SourceFormat.JSONL),
        ("a.jsonl", SourceFormat.JSONL),
        ("a.JSONL.GZ", SourceFormat.JSONL),
        ("a.json", SourceFormat.JSONL),
        ("notes.txt", SourceFormat.TEXT),
        ("notes.TXT.gz", SourceFormat.TEXT),
        ("whirlwind.warc.gz", None),
        ("a.gz", None),
        ("page.html", None),
    ],
)
def test_detect_format(path, expected):
    assert detect_format(path) is expected


# --- real data ------------------------------------------------------------------------------------------------


def test_common_crawl_sample_yields_every_conversion_record(webdata, sample_records):
    assert len(sample_records) == SAMPLE_PAGES
    assert sample_records[0].url == "http://16thfleet.wikidot.com/chatter:anewhome"
    assert sample_records[0].timestamp == "2019-07-17T12:15:59Z"
    for record in sample_records:
        assert record.source_format is SourceFormat.WET
        assert record.source_path == str(webdata / SAMPLE_WET)
        assert record.url and record.timestamp
        assert record.content_type == "text/plain"
        assert record.content_length == len(record.body.encode("utf-8"))


def test_whirlwind_wet_skips_warcinfo(webdata):
    records, problems = read(webdata / "whirlwind.warc.wet.gz")
    assert problems == []
    assert [record.url for record in records] == ["https://an.wikipedia.org/wiki/Escopete"]
    assert records[0].content_length == 4456
    assert "Escopete" in records[0].body


def test_default_opener_reads_through_beam(webdata):
    items = list(read_records(str(webdata / "whirlwind.warc.wet.gz")))
    assert [item.url for item in items] == ["https://an.wikipedia.org/wiki/Escopete"]


def test_released_c4_jsonl(webdata):
    path = webdata / "c4-en-train-00000-first500.jsonl"
    records, problems = read(path)
    assert problems == []
    assert len(records) == 500
    first = records[0]
    assert first.url == "https://klyq.com/beginners-bbq-class-taking-place-in-missoula/"
    assert first.timestamp == "2019-04-25 12:57:54"
    assert first.body == json.loads(path.read_text(encoding="utf-8").splitlines()[0])["text"]
    assert {(record.source_format, record.content_type) for record in records} == {(SourceFormat.JSONL, "text/plain")}
    assert all(record.content_length == len(record.body.encode("utf-8")) for record in records)


def test_dolma_jsonl_gz_takes_url_and_date_from_dolma_fields(webdata):
    records, problems = read(webdata / "dolma_cc_en_head-0174.jsonl.gz")
    assert problems == []
    assert len(records) == 10
    assert records[0].url == "http://archives2.getty.edu:8082/xtf/view?docId=ead/2002.M.13/2002.M.13.xml"
    assert records[0].timestamp == "2020-06-05T04:25:29Z"


def test_single_member_gzip_wet_is_read_too(tmp_path, webdata, sample_records):
    path = tmp_path / "one-member.warc.wet.gz"
    path.write_bytes(gzip.compress(gzip.decompress((webdata / SAMPLE_WET).read_bytes())))
    records, problems = read(path)
    assert problems == []
    assert [record.url for record in records] == [record.url for record in sample_records]


# --- damaged gzip ---------------------------------------------------------------------------------------------


def assert_good_prefix(records, problems, sample_records, kind="corrupt_gzip"):
    assert 0 < len(records) < SAMPLE_PAGES
    path = records[0].source_path
    assert records == [RawRecord(**{**vars(page), "source_path": path}) for page in sample_records[: len(records)]]
    assert kinds(problems) == [kind]
    assert problems[0].path in problems[0].message


def assert_all_but(records, problems, sample_records, lost: int, kind: str):
    """Every sample record but the `lost`-th (0-based) came out unchanged, and one `kind` problem was counted."""
    path = problems[0].path
    expected = [RawRecord(**{**vars(page), "source_path": path}) for page in sample_records]
    assert records == expected[:lost] + expected[lost + 1 :]
    assert kinds(problems) == [kind]
    assert path in problems[0].message


def sample_members(webdata: Path) -> list[bytes]:
    """The gzip members of the real sample, one per record."""
    data = (webdata / SAMPLE_WET).read_bytes()
    starts = gzip_members(data) + [len(data)]
    return [data[start:end] for start, end in zip(starts, starts[1:])]


def test_gzip_cut_in_half_keeps_the_complete_records(tmp_path, webdata, sample_records):
    data = (webdata / SAMPLE_WET).read_bytes()
    path = tmp_path / "half.warc.wet.gz"
    path.write_bytes(data[: len(data) // 2])
    records, problems = read(path)
    assert_good_prefix(records, problems, sample_records)
    assert "ends in the middle of a gzip member); what it held before the cut is kept" in problems[0].message


def test_garbage_in_the_middle_of_a_member_loses_only_its_record(tmp_path, webdata, sample_records):
    data = (webdata / SAMPLE_WET).read_bytes()
    middle = len(data) // 2
    damaged = sum(start <= middle for start in gzip_members(data)) - 1
    path = tmp_path / "garbage.warc.wet.gz"
    path.write_bytes(data[:middle] + b"\x00garbage" * 100 + data[middle:])
    records, problems = read(path)
    assert_all_but(records, problems, sample_records, lost=damaged, kind="corrupt_gzip")


def test_bad_crc_drops_only_the_damaged_record(tmp_path, webdata, sample_records):
    data = bytearray((webdata / SAMPLE_WET).read_bytes())
    starts = gzip_members(bytes(data))
    assert len(starts) == SAMPLE_PAGES  # one gzip member per record
    data[starts[101] - 8] ^= 0x01  # CRC32 of member 100 (the 101st record): its deflate data is intact
    path = tmp_path / "crc.warc.wet.gz"
    path.write_bytes(bytes(data))
    records, problems = read(path)
    assert_all_but(records, problems, sample_records, lost=100, kind="corrupt_gzip")
    assert "incorrect data check" in problems[0].message
    assert f"member at byte {starts[100]} is damaged" in problems[0].message


def test_damaged_deflate_data_drops_only_its_record(tmp_path, webdata, sample_records):
    members = sample_members(webdata)
    damaged = bytearray(members[200])
    damaged[len(damaged) // 2] ^= 0xFF
    path = tmp_path / "deflate.warc.wet.gz"
    path.write_bytes(b"".join(members[:200]) + bytes(damaged) + b"".join(members[201:]))
    records, problems = read(path)
    assert_all_but(records, problems, sample_records, lost=200, kind="corrupt_gzip")


def one_member_sample(webdata: Path, level: int) -> bytes:
    """The real sample gzipped again as one member (335 records in it)."""
    return gzip.compress(gzip.decompress((webdata / SAMPLE_WET).read_bytes()), compresslevel=level, mtime=0)


def read_wet_holding(data: bytes, max_held: int) -> tuple[list[RawRecord], list[ReadProblem]]:
    """Records and problems of a .warc.wet.gz file's bytes, with members above `max_held` bytes checked first."""
    head = data[:4]
    source = GzipSource(io.BytesIO(data[4:]), head, lambda: io.BytesIO(data), max_held=max_held)
    items = list(read_wet("x.warc.wet.gz", ByteReader(source), MAX_RECORD_BYTES))
    return ([item for item in items if isinstance(item, RawRecord)],
            [item for item in items if isinstance(item, ReadProblem)])


HELD_OR_CHECKED_FIRST = pytest.mark.parametrize("max_held", [MAX_HELD_BYTES, 4096], ids=["held", "checked_first"])


@HELD_OR_CHECKED_FIRST
def test_damaged_member_of_many_records_gives_none_of_them(webdata, max_held):
    """A byte changed in a stored (uncompressed) block passes decoding; only the member's CRC, at its end, finds it.
    None of the member's records may come out: the changed URL would have gone into the corpus."""
    data = bytearray(one_member_sample(webdata, level=0))
    at = data.index(b"WARC-Target-URI: https://", len(data) // 2) + len("WARC-Target-URI: http")
    data[at] = ord("X")
    records, problems = read_wet_holding(bytes(data), max_held)
    assert records == []
    assert kinds(problems) == ["corrupt_gzip"] and "incorrect data check" in problems[0].message


@HELD_OR_CHECKED_FIRST
def test_intact_member_of_many_records_gives_all_of_them(webdata, sample_records, max_held):
    records, problems = read_wet_holding(one_member_sample(webdata, level=6), max_held)
    assert problems == []
    assert [record.body for record in records] == [record.body for record in sample_records]


@HELD_OR_CHECKED_FIRST
def test_member_of_many_records_cut_off_keeps_the_records_before_the_cut(webdata, sample_records, max_held):
    data = one_member_sample(webdata, level=6)
    records, problems = read_wet_holding(data[: len(data) * 2 // 3], max_held)
    assert 100 < len(records) < SAMPLE_PAGES
    assert [record.body for record in records] == [record.body for record in sample_records[: len(records)]]
    assert kinds(problems) == ["corrupt_gzip"] and "ends in the middle of a gzip member" in problems[0].message


class Trickle(io.BytesIO):
    """A file object that returns at most 3 bytes per read, as some network streams return short reads."""

    def read(self, size=-1):
        return super().read(3 if size is None or size < 0 else min(size, 3))


@pytest.mark.parametrize("compress", [True, False])
def test_short_reads_lose_nothing(compress):
    data = wet_bytes([b"one.\n", b"two.\n" * 1000, b"three.\n"], compress)
    items = list(read_records("x.warc.wet.gz" if compress else "x.wet", open_binary=lambda path: Trickle(data)))
    assert [item.body for item in items] == ["one.\n", "two.\n" * 1000, "three.\n"]


def test_bad_crc_seen_only_after_the_record_was_read_still_drops_it():
    # With short reads, the record's last bytes come out of the decompressor before its gzip trailer is checked;
    # the reader must hold the record until the trailer checked out.
    data = bytearray(wet_bytes([b"one.\n", b"two.\n" * 1000, b"three.\n"], compress=True))
    data[gzip_members(bytes(data))[3] - 8] ^= 0x01  # CRC32 of the member of "two"
    items = list(read_records("x.warc.wet.gz", open_binary=lambda path: Trickle(bytes(data))))
    assert [item.body for item in items[:1] + items[2:]] == ["one.\n", "three.\n"]
    assert items[1].kind == "corrupt_gzip"


def test_member_whose_decoding_ran_into_the_next_member_loses_only_its_record(webdata, sample_records):
    # Without its CRC and length, member 2 takes the next member's first bytes for them; with 3-byte reads the
    # decoder has consumed those before it fails, and the next member must still be read from its own start.
    members = sample_members(webdata)[:6]
    data = b"".join(members[:2]) + members[2][:-8] + b"".join(members[3:])
    items = list(read_records("x.warc.wet.gz", open_binary=lambda path: Trickle(data)))
    records = [item for item in items if isinstance(item, RawRecord)]
    assert [record.url for record in records] == [record.url for record in sample_records[:2] + sample_records[3:6]]
    assert kinds([item for item in items if isinstance(item, ReadProblem)]) == ["corrupt_gzip"]


def test_damaged_member_header_loses_only_its_record(tmp_path, webdata, sample_records):
    data = bytearray((webdata / SAMPLE_WET).read_bytes())
    data[gzip_members(bytes(data))[101]] ^= 0xFF  # gzip magic of the 102nd record
    path = tmp_path / "magic.warc.wet.gz"
    path.write_bytes(bytes(data))
    records, problems = read(path)
    assert_all_but(records, problems, sample_records, lost=101, kind="corrupt_gzip")


def test_trailing_garbage_after_the_last_member(tmp_path, webdata):
    path = tmp_path / "trailing.warc.wet.gz"
    path.write_bytes((webdata / SAMPLE_WET).read_bytes() + b"not gzip")
    records, problems = read(path)
    assert len(records) == SAMPLE_PAGES
    assert kinds(problems) == ["corrupt_gzip"]


@pytest.mark.parametrize("name", ["not-gzip.warc.wet.gz", "not-gzip.jsonl.gz", "not-gzip.txt.gz"])
def test_file_that_is_not_gzip_at_all(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(b"WARC/1.0\r\nthis was never compressed\r\n")
    (problem,) = read(path, modified_time=os.path.getmtime)[1]
    assert problem.kind == "format_mismatch"
    assert "is named .gz but is not gzip (it starts with b'WARC')" in problem.message


@pytest.mark.parametrize("name", ["zipped.wet", "zipped.jsonl", "zipped.txt"])
def test_gzip_file_without_gz_name(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(gzip.compress(b"anything"))
    (problem,) = read(path, modified_time=os.path.getmtime)[1]
    assert problem.kind == "format_mismatch"
    assert "is gzip-compressed but its name does not end in .gz" in problem.message


def test_truncated_jsonl_gz_keeps_the_complete_lines(tmp_path, webdata):
    lines = (webdata / "c4-en-train-00000-first500.jsonl").read_bytes()
    data = gzip.compress(lines)
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    records, problems = read(path)
    assert 0 < len(records) < 500
    expected = [json.loads(line)["url"] for line in lines.splitlines()[: len(records)]]
    assert [record.url for record in records] == expected
    assert kinds(problems) == ["corrupt_gzip"]


def test_released_c4_jsonl_gz_with_a_changed_byte_gives_no_line(tmp_path, webdata):
    """A released C4 file is one gzip member: a changed byte that decodes (a stored block) fails only its CRC."""
    data = bytearray(gzip.compress((webdata / "c4-en-train-00000-first500.jsonl").read_bytes(), compresslevel=0))
    data[len(data) // 2] ^= 0x01
    path = tmp_path / "changed.jsonl.gz"
    path.write_bytes(bytes(data))
    records, problems = read(path)
    assert records == [] and kinds(problems) == ["corrupt_gzip"]


# --- damaged WET records --------------------------------------------------------------------------------------


@pytest.mark.parametrize("compress", [True, False])
def test_invalid_utf8_record_is_skipped_and_the_others_survive(tmp_path, compress):
    bodies = [b"first page.\n", "caf\u00e9 ol\u00e9\n".encode(), b"bad \xff\xfe bytes\n", b"last page.\n"]
    path = tmp_path / ("pages.warc.wet.gz" if compress else "pages.wet")
    path.write_bytes(wet_bytes(bodies, compress))
    records, problems = read(path)
    assert [record.body for record in records] == ["first page.\n", "caf\u00e9 ol\u00e9\n", "last page.\n"]
    assert [record.url for record in records] == [f"https://example.com/{number}" for number in (0, 1, 3)]
    assert records[1].content_length == len(bodies[1])
    assert records[2].timestamp == "2019-07-17T12:03:00Z"
    assert kinds(problems) == ["invalid_utf8"]
    assert "record 4 (https://example.com/2)" in problems[0].message  # warcinfo is record 1


def test_uncompressed_wet_cut_inside_a_record(tmp_path, webdata, sample_records):
    data = gzip.decompress((webdata / SAMPLE_WET).read_bytes())
    path = tmp_path / "cut.wet"
    path.write_bytes(data[: len(data) // 2])
    records, problems = read(path)
    assert_good_prefix(records, problems, sample_records, kind="truncated_record")
    assert f"record {len(records) + 1} (" in problems[0].message


@pytest.mark.parametrize("cut_after", [b"WARC-Target-URI: https://exa", b"Content-Length: ", b"Content-Length: 1"])
def test_uncompressed_wet_cut_inside_the_last_headers(tmp_path, cut_after):
    data = wet_bytes([b"whole page.\n", b"cut page.\n"], compress=False)
    path = tmp_path / "cut.wet"
    path.write_bytes(data[: data.rindex(cut_after) + len(cut_after)])
    records, problems = read(path)
    assert [record.url for record in records] == ["https://example.com/0"]
    assert kinds(problems) == ["truncated_record"]


def test_last_gzip_member_shorter_than_its_content_length(tmp_path):
    data = wet_bytes([b"whole page.\n"], compress=True)
    short = (
        b"WARC/1.0\r\nWARC-Type: conversion\r\nWARC-Target-URI: https://example.com/x\r\n"
        b"Content-Length: 100\r\n\r\nonly this"
    )
    path = tmp_path / "short.warc.wet.gz"
    path.write_bytes(data + gzip.compress(short))
    records, problems = read(path)
    assert [record.body for record in records] == ["whole page.\n"]
    assert kinds(problems) == ["truncated_record"]
    assert "9 of its 100 bytes" in problems[0].message


def test_wet_file_that_is_not_warc(tmp_path):
    path = tmp_path / "notes.wet"
    path.write_text("just some notes\nnot a WARC file\n")
    records, problems = read(path)
    assert records == []
    assert kinds(problems) == ["format_mismatch"]
    assert "is not WARC" in problems[0].message


@pytest.mark.parametrize("delta", [7, -7, 1, -1, 2, -2])
@pytest.mark.parametrize("compress", [True, False])
def test_wrong_content_length_loses_only_its_record(tmp_path, webdata, sample_records, delta, compress):
    members = sample_members(webdata)
    record = gzip.decompress(members[10])
    length = sample_records[10].content_length
    record = record.replace(f"Content-Length: {length}\r\n".encode(), f"Content-Length: {length + delta}\r\n".encode())
    if compress:
        data = b"".join(members[:10]) + gzip.compress(record) + b"".join(members[11:])
    else:
        data = b"".join(gzip.decompress(member) for member in members[:10]) + record + gzip.decompress(
            b"".join(members[11:])
        )
    path = tmp_path / ("length.warc.wet.gz" if compress else "length.wet")
    path.write_bytes(data)
    records, problems = read(path)
    assert_all_but(records, problems, sample_records, lost=10, kind="bad_record_length")
    assert f"WET record 11 ({sample_records[10].url})" in problems[0].message


def test_warc_file_named_wet_is_a_format_mismatch(tmp_path, webdata):
    path = tmp_path / "whirlwind.warc.wet.gz"
    path.write_bytes((webdata / "whirlwind.warc.gz").read_bytes())
    records, problems = read(path)
    assert records == []
    assert kinds(problems) == ["format_mismatch"]
    held = "holds WARC records (1 'request', 1 'response', 1 'metadata') and no WET 'conversion' records"
    assert f"{held}: is it a WARC file, not WET?" in problems[0].message


def test_invalid_utf8_in_the_url_header_skips_the_record(tmp_path, webdata, sample_records):
    members = sample_members(webdata)
    record = gzip.decompress(members[5]).replace(b"WARC-Target-URI: http", b"WARC-Target-URI: \xe9http", 1)
    path = tmp_path / "url.warc.wet.gz"
    path.write_bytes(b"".join(members[:5]) + gzip.compress(record) + b"".join(members[6:]))
    records, problems = read(path)
    assert_all_but(records, problems, sample_records, lost=5, kind="invalid_header")
    assert "has a WARC-Target-URI header that is not valid UTF-8" in problems[0].message
    assert "(\\xe9http://" in problems[0].message  # the bad byte is shown escaped, never as mojibake


def test_intact_files_give_exactly_what_warcio_gives(webdata):
    for name in (SAMPLE_WET, "whirlwind.warc.wet.gz"):
        with open(webdata / name, "rb") as stream:
            expected = [
                (
                    record.rec_headers.get_header("WARC-Target-URI"),
                    record.rec_headers.get_header("WARC-Date"),
                    record.rec_headers.get_header("Content-Type"),
                    int(record.rec_headers.get_header("Content-Length")),
                    record.content_stream().read().decode("utf-8"),
                )
                for record in ArchiveIterator(stream)
                if record.rec_type == "conversion"
            ]
        records, problems = read(webdata / name)
        assert problems == []
        assert [(r.url, r.timestamp, r.content_type, r.content_length, r.body) for r in records] == expected


# --- oversized records ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("compress", [True, False])
def test_50mb_wet_record_is_skipped_and_the_next_survive(tmp_path, compress):
    bodies = [b"before.\n", b"x" * BIG, b"after.\n"]
    path = tmp_path / ("big.warc.wet.gz" if compress else "big.wet")
    path.write_bytes(wet_bytes(bodies, compress))
    records, problems = read(path)
    assert [record.body for record in records] == ["before.\n", "after.\n"]
    assert kinds(problems) == ["oversized_record"]
    assert f"{BIG} bytes, over the {MAX_RECORD_BYTES} limit" in problems[0].message


@pytest.mark.parametrize("name", ["big.jsonl", "big.jsonl.gz"])
def test_50mb_jsonl_line_is_skipped_and_the_next_survive(tmp_path, name):
    lines = [
        json.dumps({"text": "before", "url": "https://a.example/", "timestamp": "2019-01-01T00:00:00Z"}),
        json.dumps({"text": "x" * BIG, "url": "https://big.example/", "timestamp": "2019-01-01T00:00:00Z"}),
        json.dumps({"text": "after", "url": "https://b.example/", "timestamp": "2019-01-01T00:00:00Z"}),
    ]
    data = "\n".join(lines).encode()
    path = tmp_path / name
    path.write_bytes(gzip.compress(data, compresslevel=1) if name.endswith(".gz") else data)
    records, problems = read(path)
    assert [record.body for record in records] == ["before", "after"]
    assert kinds(problems) == ["oversized_record"]
    assert "line 2 of" in problems[0].message


def test_oversized_text_file(tmp_path):
    path = tmp_path / "big.txt"
    path.write_bytes(b"word " * 1000)
    records, problems = read(path, max_record_bytes=4999, modified_time=os.path.getmtime)
    assert records == [] and kinds(problems) == ["oversized_record"]
    assert len(read(path, max_record_bytes=5000, modified_time=os.path.getmtime)[0]) == 1


# --- JSON Lines -----------------------------------------------------------------------------------------------


def test_bad_json_lines_are_reported_with_their_line_number(tmp_path):
    good = json.dumps({"text": "good", "url": "https://a.example/", "timestamp": "2019-04-25 12:57:54"})
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(
        "\n".join(
            [good, "", "{not json", "[1, 2]", '{"text": 5}', '{"text": "\\ud800"}', good, "   ", good]
        ).encode()
        + b"\n\xff\xfe\n"
        + good.encode()
    )
    records, problems = read(path)
    assert len(records) == 4 and all(record.body == "good" for record in records)
    assert [(problem.kind, problem.message.split(" of ")[0]) for problem in problems] == [
        ("invalid_json", "line 3"),
        ("invalid_json", "line 4"),
        ("invalid_json", "line 5"),
        ("invalid_utf8", "line 6"),
        ("invalid_utf8", "line 10"),
    ]


@pytest.mark.parametrize("name", ["c4.jsonl", "c4.txt", "sample.wet"])
def test_a_leading_utf8_bom_is_dropped(tmp_path, webdata, name):
    sample = webdata / ("c4-en-train-00000-first500.jsonl" if name.startswith("c4") else SAMPLE_WET)
    data = gzip.decompress(sample.read_bytes()) if name.endswith(".wet") else sample.read_bytes()
    path = tmp_path / name
    path.write_bytes(b"\xef\xbb\xbf" + data)
    records, problems = read(path, modified_time=os.path.getmtime)
    assert problems == []
    if name.endswith(".txt"):
        assert [(record.body, record.content_length) for record in records] == [(data.decode(), len(data))]
    else:
        assert [record.url for record in records] == [record.url for record in read(sample)[0]]


def test_jsonl_without_url_or_timestamp_gives_none(tmp_path):
    path = tmp_path / "bare.jsonl"
    path.write_text('{"text": "only text", "url": 7}\n')
    records, problems = read(path)
    assert problems == []
    assert (records[0].url, records[0].timestamp, records[0].content_length) == (None, None, 9)


# --- plain text -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["note.txt", "note.txt.gz"])
def test_text_file_is_one_document_dated_by_its_mtime(tmp_path, name):
    text = "Caf\u00e9 menu.\nSecond line.\n"
    path = tmp_path / name
    path.write_bytes(gzip.compress(text.encode()) if name.endswith(".gz") else text.encode())
    os.utime(path, (1563365759, 1563365759))
    records, problems = read(path, modified_time=os.path.getmtime)
    assert problems == []
    assert records == [
        RawRecord(
            source_format=SourceFormat.TEXT,
            url=f"file://{path}",
            timestamp="2019-07-17T12:15:59Z",
            content_type="text/plain",
            content_length=len(text.encode()),
            body=text,
            source_path=str(path),
        )
    ]


def test_text_file_default_mtime_through_beam(tmp_path):
    path = tmp_path / "note.txt"
    path.write_text("hello")
    os.utime(path, (0, 86400))
    (record,) = read_records(str(path))
    assert record.timestamp == "1970-01-02T00:00:00Z"


def test_text_file_with_invalid_utf8(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("caf\u00e9".encode("latin-1"))
    assert kinds(read(path, modified_time=os.path.getmtime)[1]) == ["invalid_utf8"]


# --- missing, empty, unknown, unreadable ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["e.wet", "e.warc.wet.gz", "e.jsonl", "e.jsonl.gz", "e.txt", "e.txt.gz"])
@pytest.mark.parametrize("compressed_empty", [False, True])
def test_empty_files(tmp_path, name, compressed_empty):
    path = tmp_path / name
    path.write_bytes(gzip.compress(b"") if compressed_empty and name.endswith(".gz") else b"")
    records, problems = read(path, modified_time=os.path.getmtime)
    assert records == []
    assert kinds(problems) == ["empty_file"]


@pytest.mark.parametrize("name", ["gone.warc.wet.gz", "gone.jsonl", "gone.txt"])
def test_missing_file(tmp_path, name):
    records, problems = read(tmp_path / name)
    assert records == [] and kinds(problems) == ["missing_file"]
    assert str(tmp_path / name) in problems[0].message


def test_missing_file_through_beam(tmp_path):
    assert kinds(list(read_records(str(tmp_path / "gone.wet")))) == ["missing_file"]


def test_unknown_extension(tmp_path):
    path = tmp_path / "page.html"
    path.write_text("<html></html>")
    assert kinds(read(path)[1]) == ["unknown_format"]


class FailingFile(io.BytesIO):
    """A file object that returns at most 3 bytes per read and fails once `fail_at` bytes have been read."""

    def __init__(self, data: bytes, fail_at: int) -> None:
        super().__init__(data)
        self.fail_at = fail_at

    def read(self, size=-1):
        if self.tell() >= self.fail_at:
            raise PermissionError("access revoked")
        return super().read(3 if size is None or size < 0 else min(size, 3))


def test_os_error_while_reading_gzip_keeps_earlier_records(webdata, sample_records):
    data = (webdata / SAMPLE_WET).read_bytes()
    records, problems = [], []
    for item in read_records("gs://b/x.warc.wet.gz", open_binary=lambda path: FailingFile(data, 30_000)):
        (problems if isinstance(item, ReadProblem) else records).append(item)
    assert_good_prefix(records, problems, sample_records, kind="unreadable_file")
    assert "access revoked" in problems[0].message


def test_os_error_right_after_a_record_keeps_that_record(webdata, sample_records):
    data = gzip.decompress((webdata / SAMPLE_WET).read_bytes())
    archive = ArchiveIterator(io.BytesIO(data))
    # warcio's length of an uncompressed record leaves out the CRLF CRLF that closes it
    ends = [archive.get_record_offset() + archive.get_record_length() + 4 for _ in archive]
    records, problems = [], []
    for item in read_records("gs://b/x.wet", open_binary=lambda path: FailingFile(data, ends[20])):
        (problems if isinstance(item, ReadProblem) else records).append(item)
    assert_good_prefix(records, problems, sample_records, kind="unreadable_file")
    assert len(records) == 21  # the 21st record was complete before the failing read of the 22nd's header


def test_open_error_is_unreadable(tmp_path):
    def refuse(path):
        raise PermissionError(f"permission denied: {path}")

    assert kinds(list(read_records("x.jsonl", open_binary=refuse))) == ["unreadable_file"]
