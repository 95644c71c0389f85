"""CS224N (Winter 2021) assignment 5 pretraining data: span-corrupted documents over a character vocabulary.

The corpus (``wiki.txt``) is split on ``"\\n"`` into documents; each example truncates one document, cuts a span out
of it and moves that span to the end behind a mask character:
``prefix + MASK + suffix + MASK + masked + PAD...`` (``block_size`` characters), trained as plain next-character
prediction (``x = s[:-1]``, ``y = s[1:]``, loss only where ``y`` is not PAD).
"""
from __future__ import annotations

from dataclasses import dataclass
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


def corrupt_document(document: str, block_size: int, rng: np.random.Generator) -> str:
    """``prefix + MASK + suffix + MASK + masked + PAD...``, exactly ``block_size`` characters.

    - Truncation: ``L`` is uniform over ``4 .. int(block_size*7/8)`` and the document is cut to ``n = min(L, len)``
      characters (a shorter document stays whole).
    - Masked length ``m``: uniform over the integers ``round(n/8) .. n//2 - round(n/8)`` (``round`` half up), a range
      of about ``[n/8, 3n/8]`` symmetric about ``(n//2)/2``: the mean is ``n/4`` (``(n-1)/4`` for odd ``n``) and
      ``m`` can be shorter and longer than ``n/4``; ``m >= 1`` whenever ``n >= 4``.
    - The span starts uniformly in ``0 .. n - m``.

    Short documents never fail: a document of 1 to 3 characters may get an empty span (``"ab"`` may give
    ``"a⁇b⁇"``: nothing masked), and the empty document gives ``MASK MASK`` then pads.
    """
    truncated = document[:rng.integers(4, max_truncated_length(block_size), endpoint=True)]
    if PAD_CHAR in truncated or MASK_CHAR in truncated:
        raise CharVocabError(f"the document contains PAD {PAD_CHAR!r} or MASK {MASK_CHAR!r}; remove them first")
    length = len(truncated)
    lowest = (length + 4) // 8
    masked_length = int(rng.integers(lowest, length // 2 - lowest, endpoint=True))
    start = int(rng.integers(0, length - masked_length, endpoint=True))
    end = start + masked_length
    corrupted = truncated[:start] + MASK_CHAR + truncated[end:] + MASK_CHAR + truncated[start:end]
    return corrupted + PAD_CHAR * (block_size - len(corrupted))


def corruption_example(document: str, vocab: CharVocabulary, block_size: int,
                       rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)``: the ids of the corrupted string without its last and without its first character (block - 1)."""
    ids = vocab.encode(corrupt_document(document, block_size, rng))
    return ids[:-1], ids[1:]


def load_char_corpus(path: str | Path) -> tuple[tuple[str, ...], CharVocabulary]:
    """The documents of a UTF-8 corpus (split on ``"\\n"``; a trailing newline adds an empty last document) and
    the vocabulary of its whole text, as the 2021 starter builds them (2938 documents, 256 ids for ``wiki.txt``)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise CharCorruptionError(f"pretraining corpus not found or unreadable: {path} ({error.strerror}); pass the "
                                  "path of wiki.txt") from None
    return tuple(text.split("\n")), CharVocabulary.from_text(text)


@dataclass(frozen=True)
class CharCorruptionRows:
    """One span-corrupted row per document; the corruption of ``(index, epoch)`` is drawn from ``(seed, epoch,
    index)`` alone, so it does not depend on workers, ranks or resume point, and changes from epoch to epoch."""

    documents: tuple[str, ...]
    vocab: CharVocabulary
    block_size: int = 128
    seed: int = 0

    def __post_init__(self) -> None:
        max_truncated_length(self.block_size)

    @classmethod
    def from_file(cls, path: str | Path, block_size: int = 128, seed: int = 0) -> CharCorruptionRows:
        """Rows over the documents of a corpus file, with the vocabulary of that file (see :func:`load_char_corpus`)."""
        documents, vocab = load_char_corpus(path)
        return cls(documents, vocab, block_size, seed)

    def __len__(self) -> int:
        return len(self.documents)

    def __call__(self, index: int, epoch: int) -> dict[str, np.ndarray]:
        """``input_tokens`` x, ``target_tokens`` y (int64, block - 1) and ``loss_weights`` (int32, 0 on PAD targets)."""
        if not 0 <= index < len(self.documents):
            raise IndexError(f"document index {index} out of range [0, {len(self.documents)})")
        inputs, targets = corruption_example(self.documents[index], self.vocab, self.block_size,
                                             example_rng(self.seed, epoch, index))
        return {"input_tokens": inputs, "target_tokens": targets,
                "loss_weights": (targets != self.vocab.pad_id).astype(np.int32)}
