"""The records that flow through the corpus pipeline: raw input records and validated pages."""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class SourceFormat(str, Enum):
    """How a raw record's body must be turned into page text."""

    WET = "wet"  # Common Crawl WET `conversion` record: TFDS line parsing applies.
    JSONL = "jsonl"  # C4-style JSON Lines document: `text` is taken as is.
    TEXT = "text"  # A plain-text file: the whole file is one document.


@dataclass(frozen=True)
class RawRecord:
    """One record as a reader found it, before any rule ran.

    Missing header values are `None`; the validation rule decides what to do with them.
    """

    source_format: SourceFormat
    url: str | None
    timestamp: str | None
    content_type: str | None
    content_length: int | None
    body: str
    source_path: str


@dataclass(frozen=True)
class Page:
    """A validated web page, the unit every C4 rule works on."""

    url: str
    normalized_url: str
    text: str
    timestamp: str
    content_type: str
    content_length: int
