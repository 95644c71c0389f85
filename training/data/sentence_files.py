"""Sentence-level data (PTB for the AdaVAE stage): vocabularies, ``[BOS] t_1..t_n [EOS]`` examples and decoder rows
(``vae.task.sentence_view`` turns a batch of rows into padded sentences).

Any :class:`SentenceVocabulary` works: the word vocabulary here (PAD 0, BOS 1, EOS 2 separate, one id per word) or a
GPT-2 tokenizer (``gpt2_tokenizer.py``: BOS = EOS = PAD). Masks and lengths, never ids, mark padding, and EOS is a
target like any token (``../shared/reference/adavae.md`` §4.2: upstream AdaVAE's PAD == EOS never trains or scores
EOS). Sentences longer than ``max_words`` whitespace words keep their first ``max_words`` words and still end with
EOS; the number capped is reported. Rows carry each sentence's word count, which per-word perplexity divides by
whatever the tokenizer.
"""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from .decoder_rows import pack_padded_rows

UNK_WORD = "<unk>"
VOCABULARY_FILE = "word_vocabulary.json"
"""Name of the vocabulary file in a run folder of ``train stage=pretrain data=ptb``."""
_FORMAT = "c4prep-word-vocabulary"


class SentenceDataError(ValueError):
    """Unreadable sentence file, a word the vocabulary lacks, or a bad setting (the message says what to do)."""


class SentenceVocabulary(Protocol):
    """What the sentence path needs of a vocabulary. BOS and EOS may be one id and PAD is only a fill value (masks
    mark padding); ``save(path)`` writes into a run folder what ``load(path)`` of the same class reads back."""

    @property
    def bos_id(self) -> int: ...

    @property
    def eos_id(self) -> int: ...

    @property
    def pad_id(self) -> int: ...

    @property
    def vocab_size(self) -> int: ...

    def encode(self, sentence: str) -> list[int]:
        """Ids of ``sentence`` without BOS/EOS."""

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids`` up to the first EOS."""

    def save(self, path: str | Path) -> None: ...


def ids_before_eos(ids: Iterable[int], eos_id: int, vocab_size: int, owner: str) -> list[int]:
    """The ids up to (without) the first ``eos_id``; an id outside ``[0, vocab_size)`` is a one-line error naming
    ``owner`` (what decodes them)."""
    found = []
    for token in map(int, ids):
        if not 0 <= token < vocab_size:
            raise SentenceDataError(f"token id {token} is outside {owner} [0, {vocab_size})")
        if token == eos_id:
            break
        found.append(token)
    return found


@dataclass(frozen=True)
class WordVocabulary:
    """Words by id: PAD 0, BOS 1, EOS 2, then ``words`` from id 3. Specials are never words: the text ``<eos>``
    would be an ordinary (unknown) word."""

    PAD_ID = 0
    BOS_ID = 1
    EOS_ID = 2
    NUM_SPECIALS = 3

    words: tuple[str, ...]
    _ids: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(set(self.words)) != len(self.words) or any(not w or w != w.strip() or " " in w for w in self.words):
            raise SentenceDataError("vocabulary words must be distinct, non-empty and without whitespace")
        object.__setattr__(self, "_ids", {w: i for i, w in enumerate(self.words, start=self.NUM_SPECIALS)})

    @classmethod
    def from_sentences(cls, sentences: Iterable[str]) -> WordVocabulary:
        """Every whitespace-separated word of ``sentences``, by descending count, ties alphabetically."""
        counts = Counter(word for sentence in sentences for word in sentence.split())
        return cls(tuple(sorted(counts, key=lambda word: (-counts[word], word))))

    @property
    def vocab_size(self) -> int:
        return self.NUM_SPECIALS + len(self.words)

    @property
    def bos_id(self) -> int:
        return self.BOS_ID

    @property
    def eos_id(self) -> int:
        return self.EOS_ID

    @property
    def pad_id(self) -> int:
        return self.PAD_ID

    @property
    def unk_id(self) -> int | None:
        """Id of ``<unk>``, or None when the vocabulary has no such word."""
        return self._ids.get(UNK_WORD)

    def encode(self, sentence: str) -> list[int]:
        """Ids of the words of ``sentence`` (no BOS/EOS); unknown words become ``<unk>`` when the vocabulary has it."""
        words, unk = sentence.split(), self.unk_id
        if unk is not None:
            return [self._ids.get(word, unk) for word in words]
        missing = sorted({word for word in words if word not in self._ids})
        if missing:
            raise SentenceDataError(f"words not in the vocabulary and no {UNK_WORD} to map them to: {missing[:5]}; "
                                    f"build the vocabulary from text containing them or map them to {UNK_WORD}")
        return [self._ids[word] for word in words]

    def decode(self, ids: Iterable[int]) -> str:
        """The words of ``ids`` joined by spaces, up to the first EOS; PAD and BOS are skipped."""
        tokens = ids_before_eos(ids, self.EOS_ID, self.vocab_size, "the vocabulary")
        return " ".join(self.words[token - self.NUM_SPECIALS] for token in tokens if token >= self.NUM_SPECIALS)

    @classmethod
    def _specials(cls) -> dict[str, int]:
        return {"pad": cls.PAD_ID, "bos": cls.BOS_ID, "eos": cls.EOS_ID}

    def to_json(self) -> str:
        return json.dumps({"format": _FORMAT, "specials": self._specials(), "words": list(self.words)},
                          ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> WordVocabulary:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise SentenceDataError(f"not a word vocabulary (invalid JSON: {error})") from None
        if not isinstance(data, dict) or data.get("format") != _FORMAT or not isinstance(data.get("words"), list):
            raise SentenceDataError(f"not a word vocabulary (needs \"format\": \"{_FORMAT}\" and a \"words\" list)")
        if data.get("specials") != cls._specials():
            raise SentenceDataError(f"special ids {data.get('specials')} differ from this version's {cls._specials()}")
        return cls(tuple(data["words"]))

    def save(self, path: str | Path) -> None:
        """Write :meth:`to_json` to ``path``, or to ``word_vocabulary.json`` in ``path`` when it is a folder."""
        path = Path(path) / VOCABULARY_FILE if Path(path).is_dir() else Path(path)
        path.write_text(self.to_json() + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> WordVocabulary:
        """A vocabulary written by :meth:`save`, or the one in a run folder (its ``word_vocabulary.json``)."""
        path = Path(path) / VOCABULARY_FILE if Path(path).is_dir() else Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise SentenceDataError(f"cannot read the word vocabulary {path}: {error}; pass the run folder of "
                                    "`train stage=pretrain data=ptb` or its word_vocabulary.json") from None
        try:
            return cls.from_json(text)
        except SentenceDataError as error:
            raise SentenceDataError(f"{path}: {error}") from None


def read_sentences(path: str | Path) -> list[str]:
    """The stripped non-empty lines of a UTF-8 file, one sentence each (at least one)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) else "not UTF-8"
        raise SentenceDataError(f"cannot read sentences from {path} ({reason}); pass a text file with one "
                                "sentence per line") from None
    sentences = [line.strip() for line in text.splitlines() if line.strip()]
    if not sentences:
        raise SentenceDataError(f"{path} holds no sentence; pass a text file with one sentence per line")
    return sentences


def encode_sentences(sentences: Iterable[str], vocab: SentenceVocabulary,
                     max_words: int = 64) -> tuple[list[list[int]], int]:
    """``[BOS] t_1..t_n [EOS]`` ids of each sentence, its whitespace words cut to the first ``max_words`` before
    encoding; also how many were cut."""
    if max_words < 1:
        raise SentenceDataError(f"max_words must be >= 1, got {max_words}")
    examples, capped = [], 0
    for sentence in sentences:
        words = sentence.split()
        capped += len(words) > max_words
        examples.append([vocab.bos_id, *vocab.encode(" ".join(words[:max_words])), vocab.eos_id])
    return examples, capped


def word_counts(sentences: Iterable[str], max_words: int) -> list[int]:
    """Whitespace words of each sentence after :func:`encode_sentences`' cap: per-word perplexity's count (+ 1 for
    EOS), whatever the tokenizer."""
    return [min(len(sentence.split()), max_words) for sentence in sentences]


def _check_example(ids: Sequence[int], bos_id: int, eos_id: int) -> None:
    if len(ids) < 2 or ids[0] != bos_id or ids[-1] != eos_id:
        raise SentenceDataError(f"a sentence example must be [BOS] words [EOS], got {list(ids)[:8]}...; build "
                                "examples with encode_sentences")


@dataclass(frozen=True, eq=False)
class SentenceRows:
    """Picklable ``(item, epoch) -> decoder row`` for the trainer's row sets: example ``item`` as ``input_tokens``
    / ``target_tokens`` / ``loss_weights`` padded with ``pad_id`` to ``length`` positions (``data.pack`` re-packs
    them), and its word count ``n_words``."""

    tokens: np.ndarray   # every example's ids, concatenated
    offsets: np.ndarray  # example i is tokens[offsets[i]:offsets[i + 1]]
    n_words: np.ndarray  # example i's whitespace words (after capping)
    length: int
    pad_id: int

    @classmethod
    def from_examples(cls, examples: Sequence[Sequence[int]], n_words: Sequence[int], vocab: SentenceVocabulary,
                      length: int) -> SentenceRows:
        """Rows of ``length`` positions for ``[BOS] tokens [EOS]`` examples of ``vocab`` with ``n_words`` words
        each; an example longer than ``length + 1`` ids is refused."""
        if len(n_words) != len(examples):
            raise SentenceDataError(f"{len(n_words)} word counts for {len(examples)} examples; pass one each")
        for index, ids in enumerate(examples):
            _check_example(ids, vocab.bos_id, vocab.eos_id)
            if len(ids) - 1 > length:
                raise SentenceDataError(f"sentence {index + 1} needs {len(ids) - 1} positions (BOS + {len(ids) - 2} "
                                        f"tokens), more than the rows' {length}: cap its words or use longer rows")
        sizes = np.array([len(ids) for ids in examples], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        tokens = np.fromiter((t for ids in examples for t in ids), dtype=np.int32, count=int(offsets[-1]))
        return cls(tokens, offsets, np.asarray(n_words, dtype=np.int64), length, vocab.pad_id)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __call__(self, item: int, epoch: int) -> dict[str, np.ndarray]:
        """The row of example ``item`` (``epoch`` unused: examples do not change between epochs)."""
        if not 0 <= item < len(self):
            raise IndexError(f"sentence {item} out of range [0, {len(self)})")
        ids = self.tokens[self.offsets[item]:self.offsets[item + 1]].astype(np.int64)
        n = len(ids) - 1
        row = {name: np.full(self.length, self.pad_id, dtype=np.int64) for name in ("input_tokens", "target_tokens")}
        row["input_tokens"][:n], row["target_tokens"][:n] = ids[:-1], ids[1:]
        row["loss_weights"] = (np.arange(self.length) < n).astype(np.int32)
        row["n_words"] = np.asarray(self.n_words[item])
        return row


@dataclass(frozen=True, eq=False)
class PackedRows:
    """Fixed decoder rows by item (``epoch`` unused): evaluation rows holding several sentences each."""

    rows: tuple[dict[str, np.ndarray], ...]

    def __len__(self) -> int:
        return len(self.rows)

    def __call__(self, item: int, epoch: int) -> dict[str, np.ndarray]:
        return self.rows[item]


def packed_sentence_rows(rows: SentenceRows, length: int, group: int = 256) -> PackedRows:
    """Every sentence of ``rows`` once, consecutive groups of ``group`` re-packed without padding into rows of
    ``length`` positions (:func:`pack_padded_rows`): the same summed losses as the padded rows on about a third of
    the positions for PTB."""
    packed = []
    for first in range(0, len(rows), group):
        packed += pack_padded_rows([rows(item, 0) for item in range(first, min(first + group, len(rows)))], length)
    return PackedRows(tuple(packed))
