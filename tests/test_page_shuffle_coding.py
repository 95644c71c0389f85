"""Pages cross the shuffles of the corpus pipeline. The URL dedup and the text dedup's join carry them as bytes of
`page_codec` (encoded where the page is made, decoded where it is read); other shuffles (the WebText join, the near
dedup) carry them through the coder Beam infers (`FastPrimitivesCoder`, a pickle fallback for the `Page` dataclass).
Each must give back every field exactly, whatever the text holds."""
import dataclasses

import apache_beam as beam
import pytest
from apache_beam.typehints import Any

from c4prep.pipelines import page_codec
from c4prep.pipelines.beam_dedup import _key_split_page_by_id
from c4prep.pipelines.c4_rules import Outcome, clean_page, parse_record
from c4prep.pipelines.dedup import sentences_by_line
from c4prep.pipelines.readers import MAX_RECORD_BYTES, read_records
from c4prep.pipelines.records import Page
from c4prep.pipelines.run_c4 import bundled_sample


def _page(text: str, url: str = "http://example.com/a?b=1#c") -> Page:
    return Page(url=url, normalized_url="example.com/a?b=1", text=text, timestamp="2019-07-16T03:24:53Z",
                content_type="text/plain", content_length=len(text.encode("utf-8", "surrogatepass")))


TEXTS = [
    "",
    "One line.\nTwo lines, with \u00e9, \u4e2d\u6587, \U0001F600 and \u200b inside.\r\nA NUL \x00 too.",
    "a lone surrogate \ud800 and a pair \ud83d\ude00 as two code points",
    "x" * MAX_RECORD_BYTES,  # the largest record a reader passes on (16 MiB)
]
URL = "http://\u00fcber.example/\u00e4?q=\U0001F600"


@pytest.mark.parametrize("text", TEXTS)
def test_the_inferred_coder_gives_back_every_page_field(text):
    coder = beam.coders.registry.get_coder(Any)  # what Beam uses for the untyped PCollections of pages
    page = _page(text, url=URL)
    assert coder.decode(coder.encode(page)) == page
    keyed = (page.url, page)  # the shape of every keyed shuffle
    assert coder.decode(coder.encode(keyed)) == keyed


def test_a_split_page_crosses_the_join_with_its_sentences():
    page = _page("First sentence here. Second one, Dr. Roberts!\n\u201cQuoted.\u201d Last one.")
    prepared = (page, sentences_by_line(page))
    coder = beam.coders.registry.get_coder(Any)
    assert coder.decode(coder.encode(prepared)) == prepared


@pytest.mark.parametrize("text", TEXTS)
def test_the_page_codec_gives_back_every_page_field(text):
    page = _page(text, url=URL)
    blob = page_codec.encode_page(page)
    assert isinstance(blob, bytes)
    assert page_codec.decode_page(blob) == page


@pytest.mark.parametrize("text", TEXTS)
def test_a_cleaning_outcome_crosses_the_url_shuffle_whole(text):
    page = _page(text, url=URL)
    for outcome in (Outcome(page, {"passed": 1, "lines:out": 3}), Outcome(None, {"filtered:too_few_sentences": 1})):
        assert page_codec.decode_outcome(page_codec.encode_outcome(outcome)) == outcome


def test_a_split_page_crosses_the_join_as_its_sentences_without_its_text():
    page = _page("First sentence here. Second one, Dr. Roberts!\n\u201cQuoted.\u201d Last \ud800 one.", url=URL)
    _, (_, split) = _key_split_page_by_id(page)
    assert split[0].text == "" and split[1] == sentences_by_line(page)
    assert page_codec.decode_split_page(page_codec.encode_split_page(split)) == split
    assert dataclasses.replace(split[0], text=page.text) == page


def test_real_pages_round_trip_through_every_encoding():
    pages = [parse_record(record).page for record in read_records(bundled_sample())]
    assert len(pages) == 335
    for page in pages:
        assert page_codec.decode_page(page_codec.encode_page(page)) == page
        outcome = clean_page(page)
        assert page_codec.decode_outcome(page_codec.encode_outcome(outcome)) == outcome
