"""Pages as compact bytes for the shuffles that carry them.

A value crossing a shuffle is decoded and encoded again by every process it passes through: on the DirectRunner the
driver decodes each element to group it and encodes it again for the next stage, alone between stages and on a core
the workers need during them. A `Page` has no Beam coder, so Beam pickled it (a dataclass instance: about 36 us per
page to encode and decode with its sentences), and every process on the way paid that. Encoded once here, where the
page is made, and decoded where it is read, a page is a plain `bytes` value in between: passing it on costs a copy.

The encoding is `marshal` of the page's fields in declaration order, a format every process of one job reads
(workers of a job run one Python version). It lives only inside one job's shuffles, never in its output or in a file
it reads, and keeps every string as it is, lone surrogates included.
"""
from __future__ import annotations

import marshal
import operator
from dataclasses import fields

from .c4_rules import Outcome
from .records import Page

SplitPage = tuple[Page, list[list[str]]]  # a page without its text, and the text's sentences per line
_page_fields = operator.attrgetter(*(field.name for field in fields(Page)))  # in declaration order


def encode_page(page: Page) -> bytes:
    """The page as bytes (`decode_page` inverts it)."""
    return marshal.dumps(_page_fields(page))


def decode_page(blob: bytes) -> Page:
    return Page(*marshal.loads(blob))


def encode_outcome(outcome: Outcome) -> bytes:
    """A rule's outcome (page or None, counters) as bytes (`decode_outcome` inverts it)."""
    page, counters = outcome
    return marshal.dumps((None if page is None else _page_fields(page), counters))


def decode_outcome(blob: bytes) -> Outcome:
    page_fields, counters = marshal.loads(blob)
    return Outcome(None if page_fields is None else Page(*page_fields), counters)


def encode_split_page(split: SplitPage) -> bytes:
    """A page without its text and the text's sentences per line, as bytes (`decode_split_page` inverts it)."""
    page, lines = split
    return marshal.dumps((_page_fields(page), lines))


def decode_split_page(blob: bytes) -> SplitPage:
    page_fields, lines = marshal.loads(blob)
    return Page(*page_fields), lines
