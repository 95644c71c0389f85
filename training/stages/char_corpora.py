"""Character corpora that ``train stage=pretrain`` reads as in-memory rows (by ``data.kind``):

- ``char_text``: next-character windows of one text file (``data=tiny_shakespeare``);
- ``char_corruption``: CS224N A5's span-corrupted wiki documents (``data=cs224n_a5_wiki``).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from ..config import TrainConfigError, section
from ..data.char_corruption import CharCorruptionError, CharCorruptionRows, CharVocabError, load_char_corpus
from ..data.char_text import CharTextError, char_text_splits
from ..data.row_batches import RowSet, content_fingerprint


@dataclass(frozen=True)
class CharCorpus:
    train: RowSet
    validation: RowSet | None
    vocab_size: int


def read_text(path: str, key: str) -> str:
    """A UTF-8 file named by ``data.<key>``; a one-line error naming the setting when it is missing."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError):
        raise TrainConfigError(f"data.{key}={path} is not a readable file; set data.{key}=<path>") from None


def char_text_corpus(cfg: DictConfig) -> CharCorpus:
    data = section(cfg, "data")
    text = read_text(data["text"], "text")
    block_size, fraction = int(data["block_size"]), float(data["validation_fraction"])
    try:
        train, validation, vocab = char_text_splits(text, block_size, fraction)
    except (CharTextError, CharVocabError) as error:
        raise TrainConfigError(f"{data['text']}: {error}") from None
    key = content_fingerprint(text, block_size=block_size, validation_fraction=fraction)
    return CharCorpus(RowSet(train, len(train), key),
                      RowSet(validation, len(validation), key) if validation is not None else None, vocab.vocab_size)


def char_corruption_corpus(cfg: DictConfig) -> CharCorpus:
    data = section(cfg, "data")
    block_size = int(data["block_size"])
    try:
        documents, vocab = load_char_corpus(data["corpus"])
        rows = CharCorruptionRows(documents, vocab, block_size, seed=int(cfg.seed))
    except (CharCorruptionError, CharVocabError) as error:
        raise TrainConfigError(f"data.corpus: {error}") from None
    key = content_fingerprint("\n".join(documents), block_size=block_size, seed=int(cfg.seed), kind="char_corruption")
    return CharCorpus(RowSet(rows, len(rows), key), None, vocab.vocab_size)


CHAR_CORPORA: dict[str, Callable[[DictConfig], CharCorpus]] = {
    "char_text": char_text_corpus,
    "char_corruption": char_corruption_corpus,
}
