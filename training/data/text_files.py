"""Line-oriented example files: TSV or JSONL, either optionally gzipped, on local disk or ``gs://``/``s3://``.

The readers of text-to-text pairs (``text_to_text.py``) and of GPT-1 task files (``experiments/gpt1``) share the
format detection, the numbered line stream and the JSON-object check; each decides what a line means.
"""
from __future__ import annotations

import codecs
import gzip
import io
import json
import zlib
from collections.abc import Iterator
from typing import Any

import pyarrow.fs as pafs

from c4prep.shards import resolve_uri

FORMATS = {".tsv": "tsv", ".tsv.gz": "tsv", ".jsonl": "jsonl", ".jsonl.gz": "jsonl"}


class TextFileError(ValueError):
    """A file that cannot be read as examples (one-line message saying what to fix)."""


class MalformedLine(ValueError):
    """What is wrong with one line (the reader adds the file and line number)."""


def file_format(path: str) -> tuple[str, bool]:
    """``("tsv" | "jsonl", gzipped)`` from the file's extension."""
    lowered = path.lower()
    for suffix, kind in sorted(FORMATS.items(), key=lambda item: -len(item[0])):
        if lowered.endswith(suffix):
            return kind, suffix.endswith(".gz")
    raise TextFileError(f"{path}: unknown extension; use .tsv or .jsonl (optionally .gz)")


def numbered_lines(path: str) -> Iterator[tuple[int, str | bytes]]:
    """(1-based number, line without its newline) of each line, the first without a UTF-8 byte-order mark;
    undecodable lines are passed on as bytes."""
    _, compressed = file_format(path)
    fs, resolved = resolve_uri(path)
    if fs.get_file_info(resolved).type != pafs.FileType.File:
        raise TextFileError(f"{path}: no such file; check the path")
    with fs.open_input_stream(resolved, compression=None) as raw:
        stream = gzip.GzipFile(fileobj=raw) if compressed else io.BufferedReader(raw)
        try:
            for number, line in enumerate(stream, start=1):
                line = line.rstrip(b"\r\n")
                if number == 1:
                    line = line.removeprefix(codecs.BOM_UTF8)
                try:
                    yield number, line.decode("utf-8")
                except UnicodeDecodeError:
                    yield number, line
        except (OSError, EOFError, zlib.error) as error:
            raise TextFileError(f"{path}: corrupt or truncated gzip ({error}); re-create or re-download it") \
                from error


def json_object(line: str) -> dict[str, Any]:
    """The JSON object on ``line``; :class:`MalformedLine` when it is not one."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise MalformedLine(f"invalid JSON ({error.msg})") from None
    if not isinstance(record, dict):
        raise MalformedLine(f"expected a JSON object, got {type(record).__name__}")
    return record
