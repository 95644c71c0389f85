"""Supervised text-to-text data (T5 paper, section 2.4): (input, target) text pairs, task prefixes, token ids.

Every task is cast as "feed the model some text, train it to produce some other text". The task is named by a
text prefix on the input, e.g. ``"translate English to German: "``, prepended verbatim (include the ``": "``).

Files are TSV (``input<TAB>target``, one pair a line, with or without an ``input<TAB>target`` header) or JSONL
(``{"input": ..., "target": ...}`` a line), chosen by extension (``.tsv``, ``.jsonl``, either with ``.gz``).
Local paths and ``gs://``/``s3://`` URIs are accepted. Malformed rows are logged with ``file:line`` and skipped.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from c4prep.tokenization.vocabulary import Vocabulary

from .text_files import MalformedLine, TextFileError, file_format, json_object, numbered_lines

LOGGER = logging.getLogger(__name__)

TSV_HEADER = ("input", "target")
MAX_LOGGED_ROWS = 20  # malformed rows logged one by one per file; the rest are summed up in one line


@dataclass(frozen=True)
class TextPair:
    """One example: the model reads ``input`` and is trained to write ``target``."""

    input: str
    target: str


@dataclass(frozen=True)
class TextPairsRead:
    """What :func:`load_text_pairs` read: the valid pairs and the 1-based line numbers of the skipped rows."""

    pairs: tuple[TextPair, ...]
    malformed_lines: tuple[int, ...]

    @property
    def malformed(self) -> int:
        """Number of malformed rows skipped."""
        return len(self.malformed_lines)


@dataclass(frozen=True)
class EncodedPairs:
    """Token ids of text pairs, EOS-terminated, and how many were truncated to fit."""

    examples: list[tuple[np.ndarray, np.ndarray]]
    truncated_inputs: int
    truncated_targets: int
    truncated: int  # examples with the input, the target or both truncated


def read_text_pairs(path: str, task_prefix: str = "") -> list[TextPair]:
    """The valid (input, target) pairs of a ``.tsv``/``.jsonl`` (optionally ``.gz``) file, inputs prefixed."""
    return list(load_text_pairs(path, task_prefix).pairs)


def load_text_pairs(path: str, task_prefix: str = "") -> TextPairsRead:
    """:func:`read_text_pairs` plus the malformed-row report; raises :class:`TextFileError` if no row is valid."""
    kind, _ = file_format(path)
    pairs: list[TextPair] = []
    malformed: list[int] = []
    started = False  # a TSV header is the first line that is not blank
    for number, line in numbered_lines(path):
        first, started = not started, started or bool(line.strip())
        try:
            parsed = _parse_line(line, kind, first=first)
        except MalformedLine as error:
            malformed.append(number)
            if len(malformed) <= MAX_LOGGED_ROWS:
                LOGGER.warning("%s:%d: skipped malformed row: %s", path, number, error)
            continue
        if parsed is not None:
            pairs.append(TextPair(task_prefix + parsed[0], parsed[1]))
    if len(malformed) > MAX_LOGGED_ROWS:
        LOGGER.warning("%s: skipped %d malformed rows in all (the first %d are logged above)",
                       path, len(malformed), MAX_LOGGED_ROWS)
    if not pairs:
        expected = "input<TAB>target lines" if kind == "tsv" else 'JSON lines with "input" and "target" strings'
        raise TextFileError(f"{path}: no valid rows ({len(malformed)} malformed); expected {expected}")
    return TextPairsRead(tuple(pairs), tuple(malformed))


def encode_pairs(pairs: Sequence[TextPair], vocab: Vocabulary, inputs_length: int,
                 targets_length: int) -> EncodedPairs:
    """int32 ids of each pair with EOS appended; a side longer than its length keeps its first ``length - 1``
    ids and then EOS (seqio's "append EOS after trim"), and is counted as truncated."""
    for name, length in (("inputs_length", inputs_length), ("targets_length", targets_length)):
        if length < 1:
            raise ValueError(f"{name} must be >= 1 (room for EOS), got {length}")
    inputs = _encode_with_eos(vocab, [pair.input for pair in pairs], inputs_length)
    targets = _encode_with_eos(vocab, [pair.target for pair in pairs], targets_length)
    cut_inputs = [cut for _, cut in inputs]
    cut_targets = [cut for _, cut in targets]
    return EncodedPairs(
        examples=[(ids_in, ids_out) for (ids_in, _), (ids_out, _) in zip(inputs, targets)],
        truncated_inputs=sum(cut_inputs),
        truncated_targets=sum(cut_targets),
        truncated=sum(a or b for a, b in zip(cut_inputs, cut_targets)),
    )


def _encode_with_eos(vocab: Vocabulary, texts: list[str], length: int) -> list[tuple[np.ndarray, bool]]:
    encoded = []
    for ids in vocab.encode_batch(texts):
        cut = len(ids) + 1 > length
        row = np.empty(min(len(ids) + 1, length), dtype=np.int32)
        row[:-1] = ids[:len(row) - 1]
        row[-1] = vocab.eos_id
        encoded.append((row, cut))
    return encoded


def _parse_line(line: str | bytes, kind: str, first: bool) -> tuple[str, str] | None:
    """(input, target) of a line, ``None`` for a blank line or the TSV header; :class:`MalformedLine` if bad."""
    if isinstance(line, bytes):
        raise MalformedLine("invalid UTF-8")
    if not line.strip() and not (kind == "tsv" and "\t" in line):  # a TSV row of two empty fields is malformed
        return None
    if kind == "tsv":
        fields = line.split("\t")
        if len(fields) != 2:
            raise MalformedLine(f"expected 2 tab-separated fields (input, target), got {len(fields)}")
        if first and tuple(fields) == TSV_HEADER:
            return None
        return _non_empty(fields[0], fields[1])
    record = json_object(line)
    missing = [key for key in TSV_HEADER if key not in record]
    if missing:
        raise MalformedLine(f"missing key(s) {', '.join(map(repr, missing))}")
    if not all(isinstance(record[key], str) for key in TSV_HEADER):
        raise MalformedLine('"input" and "target" must be strings')
    return _non_empty(record["input"], record["target"])


def _non_empty(inputs: str, target: str) -> tuple[str, str]:
    """The pair; :class:`MalformedLine` when either side is blank (a lost field, not an example)."""
    blank = [name for name, text in zip(TSV_HEADER, (inputs, target)) if not text.strip()]
    if blank:
        raise MalformedLine(f"empty {' and '.join(blank)}")
    return inputs, target
