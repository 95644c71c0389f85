"""CS224N (Winter 2021) assignment 5 pretraining data: span-corrupted documents over a character vocabulary.

The corpus (``wiki.txt``) is split on ``"\\n"`` into documents; each example truncates one document, cuts a span out
of it and moves that span to the end behind a mask character:
``prefix + MASK + suffix + MASK + masked + PAD...`` (``block_size`` characters), trained as plain next-character
prediction (``x = s[:-1]``, ``y = s[1:]``, loss only where ``y`` is not PAD).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...data.char_vocabulary import MASK_CHAR, PAD_CHAR, CharVocabError, CharVocabulary
from ...seeding import example_rng

MIN_BLOCK_SIZE = 9  # smallest block whose longest truncation, int(7/8 block), still fits with its two masks


class CharCorruptionError(ValueError):
    """Unusable span-corruption settings or corpus (the message says what to fix)."""


def max_truncated_length(block_size: int) -> int:
    """Longest kept document prefix, ``int(block_size * 7 / 8)`` (112 for a 128 block); raises if the block is tiny."""
    if block_size < MIN_BLOCK_SIZE:
        raise CharCorruptionError(f"block_size must be at least {MIN_BLOCK_SIZE} to hold a corrupted document, "
                                  f"got {block_size}")
    return int(block_size * 7 / 8)


def corruption_cuts(length: int, block_size: int, rng: np.random.Generator) -> tuple[int, int, int]:
    """``(kept, start, end)`` for a document of ``length`` characters: its first ``kept`` are kept and ``[start,
    end)`` of them masked.

    - Truncation: ``L`` is uniform over ``4 .. int(block_size*7/8)`` and ``kept = min(L, length)`` (a shorter
      document stays whole).
    - Masked length ``m = end - start``: uniform over the integers ``round(kept/8) .. kept//2 - round(kept/8)``
      (``round`` half up), a range of about ``[kept/8, 3*kept/8]`` symmetric about ``(kept//2)/2``: the mean is
      ``kept/4`` (``(kept-1)/4`` for odd ``kept``) and ``m`` can be shorter and longer than ``kept/4``; ``m >= 1``
      whenever ``kept >= 4``.
    - The span starts uniformly in ``0 .. kept - m``.
    """
    kept = min(length, int(rng.integers(4, max_truncated_length(block_size), endpoint=True)))
    lowest = (kept + 4) // 8
    masked = int(rng.integers(lowest, kept // 2 - lowest, endpoint=True))
    start = int(rng.integers(0, kept - masked, endpoint=True))
    return kept, start, start + masked


def corrupt_ids(ids: np.ndarray, block_size: int, rng: np.random.Generator, vocab: CharVocabulary) -> np.ndarray:
    """The ``block_size`` int64 ids of ``prefix + MASK + suffix + MASK + masked + PAD...`` for a document's ``ids``
    cut by :func:`corruption_cuts`. Short documents never fail: a document of 1 to 3 characters may get an empty
    span (``"ab"`` may give ``"a⁇b⁇"``: nothing masked), and the empty document gives ``MASK MASK`` then pads."""
    kept, start, end = corruption_cuts(len(ids), block_size, rng)
    mask = np.array([vocab.mask_id], dtype=np.int64)
    corrupted = np.full(block_size, vocab.pad_id, dtype=np.int64)
    corrupted[:kept + 2] = np.concatenate((ids[:start], mask, ids[end:kept], mask, ids[start:end]))
    return corrupted


def document_ids(document: str, vocab: CharVocabulary) -> np.ndarray:
    """The ids of a corpus document; ``CharVocabError`` if it holds PAD or MASK or a character ``vocab`` lacks."""
    if PAD_CHAR in document or MASK_CHAR in document:
        raise CharVocabError(f"the document contains PAD {PAD_CHAR!r} or MASK {MASK_CHAR!r}; remove them first")
    return vocab.encode(document)


def load_char_corpus(path: str | Path) -> tuple[tuple[str, ...], CharVocabulary]:
    """The documents of a UTF-8 corpus (split on ``"\\n"``; a trailing newline adds an empty last document) and
    the vocabulary of its whole text, as the 2021 starter builds them (2938 documents, 256 ids for ``wiki.txt``)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) else "not UTF-8"
        raise CharCorruptionError(f"pretraining corpus not found or unreadable: {path} ({reason}); pass the "
                                  "path of wiki.txt") from None
    if not text.strip():
        raise CharCorruptionError(f"pretraining corpus {path} holds no text; pass the path of wiki.txt")
    return tuple(text.split("\n")), CharVocabulary.from_text(text)


@dataclass(frozen=True)
class CharCorruptionRows:
    """One span-corrupted row per document; the corruption of ``(index, epoch)`` is drawn from ``(seed, epoch,
    index)`` alone, so it does not depend on workers, ranks or resume point, and changes from epoch to epoch. The
    documents are encoded once, here: a character the vocabulary lacks fails before training, not at its step."""

    documents: tuple[str, ...]
    vocab: CharVocabulary
    block_size: int = 128
    seed: int = 0
    _ids: tuple[np.ndarray, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        max_truncated_length(self.block_size)
        object.__setattr__(self, "_ids", tuple(document_ids(document, self.vocab) for document in self.documents))

    @classmethod
    def from_file(cls, path: str | Path, block_size: int = 128, seed: int = 0) -> CharCorruptionRows:
        """Rows over the documents of a corpus file, with the vocabulary of that file (see :func:`load_char_corpus`)."""
        documents, vocab = load_char_corpus(path)
        return cls(documents, vocab, block_size, seed)

    def __len__(self) -> int:
        return len(self.documents)

    def __call__(self, index: int, epoch: int) -> dict[str, np.ndarray]:
        """``input_tokens`` x and ``target_tokens`` y, the corrupted ids without their last and without their first
        (int64, block - 1), and ``loss_weights`` (int32, 0 on PAD targets)."""
        if not 0 <= index < len(self.documents):
            raise IndexError(f"document index {index} out of range [0, {len(self.documents)})")
        ids = corrupt_ids(self._ids[index], self.block_size, example_rng(self.seed, epoch, index), self.vocab)
        targets = ids[1:]
        return {"input_tokens": ids[:-1], "target_tokens": targets,
                "loss_weights": (targets != self.vocab.pad_id).astype(np.int32)}
