"""Character vocabularies (tiny-shakespeare, CS224N A5): PAD is id 0, MASK id 1, then the corpus characters."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

PAD_CHAR = "\u25A1"  # □, id 0
MASK_CHAR = "\u2047"  # ⁇, id 1
VOCABULARY_FILE = "char_vocabulary.json"  # in the run folder of a character model: what its ids mean
_FORMAT = "c4prep-char-vocabulary-1"


class CharVocabError(ValueError):
    """A text or id that the character vocabulary cannot represent (the message says which and what to do)."""


@dataclass(frozen=True)
class CharVocabulary:
    """Characters by id: PAD is id 0, MASK id 1, then the corpus characters in code-point order."""

    chars: tuple[str, ...]
    _ids: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.chars[:2] != (PAD_CHAR, MASK_CHAR):
            raise CharVocabError(f"the vocabulary must start with PAD {PAD_CHAR!r} and MASK {MASK_CHAR!r}, got "
                                 f"{self.chars[:2]!r}; build it with CharVocabulary.from_text")
        if any(len(char) != 1 for char in self.chars) or len(set(self.chars)) != len(self.chars):
            raise CharVocabError("vocabulary entries must be distinct single characters")
        object.__setattr__(self, "_ids", {char: index for index, char in enumerate(self.chars)})

    @classmethod
    def from_text(cls, text: str) -> CharVocabulary:
        """PAD, MASK, then every distinct character of ``text`` (newlines included), sorted."""
        reserved = {PAD_CHAR, MASK_CHAR} & set(text)
        if reserved:
            raise CharVocabError(f"the corpus contains the reserved character(s) {sorted(reserved)!r} (PAD/MASK); "
                                 "remove them from the text first")
        return cls((PAD_CHAR, MASK_CHAR, *sorted(set(text))))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    @property
    def pad_id(self) -> int:
        return 0

    @property
    def mask_id(self) -> int:
        return 1

    def encode(self, text: str) -> np.ndarray:
        """The int64 ids of the characters of ``text``."""
        try:
            return np.array([self._ids[char] for char in text], dtype=np.int64)
        except KeyError:
            unknown = sorted(set(text) - self._ids.keys())
            raise CharVocabError(f"characters not in the vocabulary: {unknown!r}; build the vocabulary from a "
                                 "corpus that contains them or remove them from the text") from None

    def decode(self, ids: np.ndarray | list[int]) -> str:
        """The text of a sequence of ids."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        bad = ids[(ids < 0) | (ids >= self.vocab_size)]
        if bad.size:
            raise CharVocabError(f"ids out of range [0, {self.vocab_size}): {sorted(set(bad.tolist()))[:10]}")
        return "".join(self.chars[index] for index in ids.tolist())

    def to_json(self) -> str:
        """The characters by id as JSON (a text file would lose a ``\\r`` to newline translation)."""
        return json.dumps({"format": _FORMAT, "chars": list(self.chars)}, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> CharVocabulary:
        """The vocabulary :meth:`to_json` wrote; ``CharVocabError`` for any other text."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise CharVocabError(f"not a character vocabulary (invalid JSON: {error})") from None
        if not isinstance(data, dict) or data.get("format") != _FORMAT or not isinstance(data.get("chars"), list):
            raise CharVocabError(f"not a character vocabulary (needs \"format\": \"{_FORMAT}\" and a \"chars\" list)")
        return cls(tuple(data["chars"]))


def kept_char_vocabulary(run_folder: Path) -> CharVocabulary | None:
    """The characters a run folder keeps (its ``char_vocabulary.json``); None for a folder without one (a word or
    SentencePiece run, or one trained before folders kept it); ``CharVocabError`` for a file that does not read."""
    kept = run_folder / VOCABULARY_FILE
    if not kept.is_file():
        return None
    try:
        return CharVocabulary.from_json(kept.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, CharVocabError) as error:
        raise CharVocabError(f"{kept} is not the character vocabulary train wrote ({error}); restore it") from None
