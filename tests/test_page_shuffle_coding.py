"""Pages cross every shuffle of the corpus pipeline (URL dedup, the text dedup's join, the shard writer) through the
coder Beam infers for them. c4prep registers no page coder of its own: Beam's `FastPrimitivesCoder` (a pickle
fallback for the `Page` dataclass) costs about 3.8 µs per page round trip (benchmarks/RESULTS.md), and it must give
back every field exactly, whatever the text holds."""
import apache_beam as beam
import pytest
from apache_beam.typehints import Any

from c4prep.pipelines.dedup import sentences_by_line
from c4prep.pipelines.readers import MAX_RECORD_BYTES
from c4prep.pipelines.records import Page


def _page(text: str, url: str = "http://example.com/a?b=1#c") -> Page:
    return Page(url=url, normalized_url="example.com/a?b=1", text=text, timestamp="2019-07-16T03:24:53Z",
                content_type="text/plain", content_length=len(text.encode("utf-8", "surrogatepass")))


@pytest.mark.parametrize("text", [
    "",
    "One line.\nTwo lines, with \u00e9, \u4e2d\u6587, \U0001F600 and \u200b inside.\r\nA NUL \x00 too.",
    "a lone surrogate \ud800 and a pair \ud83d\ude00 as two code points",
    "x" * MAX_RECORD_BYTES,  # the largest record a reader passes on (16 MiB)
])
def test_the_inferred_coder_gives_back_every_page_field(text):
    coder = beam.coders.registry.get_coder(Any)  # what Beam uses for the untyped PCollections of pages
    page = _page(text, url="http://\u00fcber.example/\u00e4?q=\U0001F600")
    assert coder.decode(coder.encode(page)) == page
    keyed = (page.url, page)  # the shape of every keyed shuffle
    assert coder.decode(coder.encode(keyed)) == keyed


def test_a_split_page_crosses_the_join_with_its_sentences():
    page = _page("First sentence here. Second one, Dr. Roberts!\n\u201cQuoted.\u201d Last one.")
    prepared = (page, sentences_by_line(page))
    coder = beam.coders.registry.get_coder(Any)
    assert coder.decode(coder.encode(prepared)) == prepared
