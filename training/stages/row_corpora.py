"""In-memory corpora that ``train stage=pretrain`` reads as rows (by ``data.kind``):

- ``char_text``: next-character windows of one text file (``data=tiny_shakespeare``);
- ``char_corruption``: CS224N A5's span-corrupted wiki documents (``data=cs224n_a5_wiki``);
- ``sentences``: ``[BOS] words [EOS]`` over a word vocabulary of the training sentences (``data=ptb``), which the
  run folder keeps as ``word_vocabulary.json``.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig

from ..config import TrainConfigError, section
from ..data.char_corruption import CharCorruptionError, CharCorruptionRows, CharVocabError, load_char_corpus
from ..data.char_text import CharTextError, char_text_splits
from ..data.row_batches import RowSet, content_fingerprint
from ..data.sentences import (
    VOCABULARY_FILE,
    SentenceDataError,
    SentenceRows,
    SentenceVocabulary,
    WordVocabulary,
    encode_sentences,
    packed_sentence_rows,
    read_sentences,
    word_counts,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RowCorpus:
    train: RowSet
    validation: RowSet | None
    vocab_size: int
    run_files: dict[str, str] = field(default_factory=dict)  # name -> text the run folder keeps (a vocabulary)


def read_text(path: str, key: str) -> str:
    """A UTF-8 file named by ``data.<key>``; a one-line error naming the setting when it is missing."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError):
        raise TrainConfigError(f"data.{key}={path} is not a readable file; set data.{key}=<path>") from None


def char_text_corpus(cfg: DictConfig) -> RowCorpus:
    data = section(cfg, "data")
    text = read_text(data["text"], "text")
    block_size, fraction = int(data["block_size"]), float(data["validation_fraction"])
    try:
        train, validation, vocab = char_text_splits(text, block_size, fraction)
    except (CharTextError, CharVocabError) as error:
        raise TrainConfigError(f"{data['text']}: {error}") from None
    key = content_fingerprint(text, block_size=block_size, validation_fraction=fraction)
    return RowCorpus(RowSet(train, len(train), key),
                      RowSet(validation, len(validation), key) if validation is not None else None, vocab.vocab_size)


def char_corruption_corpus(cfg: DictConfig) -> RowCorpus:
    data = section(cfg, "data")
    block_size = int(data["block_size"])
    try:
        documents, vocab = load_char_corpus(data["corpus"])
        rows = CharCorruptionRows(documents, vocab, block_size, seed=int(cfg.seed))
    except (CharCorruptionError, CharVocabError) as error:
        raise TrainConfigError(f"data.corpus: {error}") from None
    key = content_fingerprint("\n".join(documents), block_size=block_size, seed=int(cfg.seed), kind="char_corruption")
    return RowCorpus(RowSet(rows, len(rows), key), None, vocab.vocab_size)


def _sentences(data: DictConfig, key: str) -> list[str]:
    try:
        return read_sentences(data[key])
    except SentenceDataError as error:
        raise TrainConfigError(f"data.{key}: {error}") from None


def sentence_row_set(data: DictConfig, key: str, vocab: SentenceVocabulary, sentences: list[str] | None = None,
                     positions: int | None = None) -> RowSet:
    """The sentences of file ``data.<key>`` (or ``sentences`` read from it), capped at ``data.max_words`` words, as
    ``[BOS] tokens [EOS]`` rows over ``vocab`` with their word counts; rows of ``positions`` positions (default
    ``data.max_words + 1``: one id per word), a sentence needing more is refused. The fingerprint covers the ids
    (so the text and the vocabulary), the word cap and the row length."""
    max_words = int(data["max_words"])
    positions = max_words + 1 if positions is None else positions
    sentences = _sentences(data, key) if sentences is None else sentences
    try:
        examples, capped = encode_sentences(sentences, vocab, max_words)
        rows = SentenceRows.from_examples(examples, word_counts(sentences, max_words), vocab, positions)
    except SentenceDataError as error:
        raise TrainConfigError(f"data.{key}: {error}") from None
    log.info("%s: %d sentences, %d capped at %d words", data[key], len(sentences), capped, max_words)
    ids = "\n".join(" ".join(map(str, example)) for example in examples)
    return RowSet(rows, len(rows), content_fingerprint(ids, max_words=max_words, positions=positions, kind="sentences"))


def sentence_corpus(cfg: DictConfig) -> RowCorpus:
    """``data.train`` / ``data.validation`` sentence files (one per line) as ``[BOS] words [EOS]`` rows of
    ``data.max_words + 1`` positions, over the word vocabulary of the training sentences."""
    data = section(cfg, "data")
    max_words = int(data["max_words"])
    if data.get("pack") and int(data["pack_length"]) < max_words + 1:
        raise TrainConfigError(f"data.pack_length={data['pack_length']} cannot hold a sentence of data.max_words="
                               f"{max_words} words plus BOS: set data.pack_length>={max_words + 1}")
    train_sentences = _sentences(data, "train")
    vocab = WordVocabulary.from_sentences(train_sentences)
    train = sentence_row_set(data, "train", vocab, train_sentences)
    validation = sentence_row_set(data, "validation", vocab) if data.get("validation") else None
    if validation is not None and data.get("pack"):  # forward-only: packing changes its cost, not its losses
        packed = packed_sentence_rows(validation.rows, int(data["pack_length"]))
        validation = RowSet(packed, len(packed), validation.fingerprint)
    return RowCorpus(train, validation, vocab.vocab_size, {VOCABULARY_FILE: vocab.to_json() + "\n"})


ROW_CORPORA: dict[str, Callable[[DictConfig], RowCorpus]] = {
    "char_text": char_text_corpus,
    "char_corruption": char_corruption_corpus,
    "sentences": sentence_corpus,
}
