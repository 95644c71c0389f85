"""CS224N (Winter 2021) assignment 5 finetuning and evaluation data: "Where was <Name> born?" -> birth place.

Training rows follow the starter's ``NameDataset``: ``question + MASK + place + MASK`` padded with PAD, loss only on
``MASK + place + MASK``, with non-ASCII characters dropped from question and place. Evaluation prompts are the raw
question (not ASCII-filtered) plus MASK; the prediction is what the model writes up to its next MASK, scored by exact,
case-sensitive match (``utils.evaluate_places``).
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...data.char_vocabulary import MASK_CHAR, PAD_CHAR, CharVocabulary


class BirthPlacesError(ValueError):
    """A birth-place file, example or prediction list that cannot be used (the message says what to fix)."""


def read_birth_places(path: str | Path) -> list[tuple[str, str | None]]:
    """``(question, place)`` per line of a UTF-8 ``question<TAB>place`` file; ``place`` is None for a file of
    questions only (test inputs). All lines must have the same form."""
    try:
        lines = Path(path).read_text(encoding="utf-8").split("\n")
    except OSError as error:
        raise BirthPlacesError(f"birth-place file not found or unreadable: {path} ({error.strerror})") from None
    except UnicodeDecodeError as error:
        raise BirthPlacesError(f"birth-place file {path} is not UTF-8 text (byte {error.start}); expected "
                               "'question<TAB>place' lines") from None
    if lines[-1] == "":
        lines.pop()
    if not lines:
        raise BirthPlacesError(f"{path}: no questions; expected 'question<TAB>place' or 'question' lines")
    labeled = "\t" in lines[0]
    pairs: list[tuple[str, str | None]] = []
    for number, line in enumerate(lines, start=1):
        fields = line.split("\t")
        if len(fields) != (2 if labeled else 1) or not all(fields):
            expected = "'question<TAB>place'" if labeled else "'question' (no TAB, like line 1)"
            raise BirthPlacesError(f"{path}:{number}: expected {expected}, got {line!r}")
        pairs.append((fields[0], fields[1] if labeled else None))
    return pairs


def ascii_only(text: str) -> str:
    """``text`` without its non-ASCII characters (the starter's ``encode('utf-8').decode('ascii', 'ignore')``)."""
    return text.encode("utf-8").decode("ascii", errors="ignore")


def name_example(question: str, place: str, vocab: CharVocabulary,
                 block_size: int = 128) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` int64 ids, ``block_size - 1`` each, of the ASCII-filtered pair: ``s = q + MASK + place + MASK``
    padded with PAD, ``x = s[:-1]``, ``y = PAD * (len(q) - 1) + s[len(q):]`` (PAD targets carry no loss)."""
    question, place = ascii_only(question), ascii_only(place)
    if not question:
        raise BirthPlacesError("the question is empty after dropping non-ASCII characters")
    if {PAD_CHAR, MASK_CHAR} & set(question + place):
        raise BirthPlacesError(f"question or place contains PAD {PAD_CHAR!r} or MASK {MASK_CHAR!r}: {question!r}")
    text = question + MASK_CHAR + place + MASK_CHAR
    if len(text) > block_size:
        raise BirthPlacesError(f"question + place take {len(text)} characters with their masks, more than "
                               f"block_size {block_size}: {question!r}")
    text += PAD_CHAR * (block_size - len(text))
    return vocab.encode(text[:-1]), vocab.encode(PAD_CHAR * (len(question) - 1) + text[len(question):])


@dataclass(frozen=True)
class BirthPlaceRows:
    """One :func:`name_example` row per (question, place) pair; every pair is checked to fit when built."""

    pairs: tuple[tuple[str, str], ...]
    vocab: CharVocabulary
    block_size: int = 128

    def __post_init__(self) -> None:
        for question, place in self.pairs:
            if place is None:
                raise BirthPlacesError(f"no birth place for {question!r}: finetuning needs a labeled file")
            name_example(question, place, self.vocab, self.block_size)

    @classmethod
    def from_file(cls, path: str | Path, vocab: CharVocabulary, block_size: int = 128) -> BirthPlaceRows:
        """Rows of a labeled ``question<TAB>place`` file."""
        return cls(tuple(read_birth_places(path)), vocab, block_size)

    def __len__(self) -> int:
        return len(self.pairs)

    def __call__(self, index: int, epoch: int) -> dict[str, np.ndarray]:
        """``input_tokens``, ``target_tokens`` (int64) and ``loss_weights`` (int32, 0 on PAD targets); the same
        row every epoch (``epoch`` is accepted for the common row interface)."""
        if not 0 <= index < len(self.pairs):
            raise IndexError(f"pair index {index} out of range [0, {len(self.pairs)})")
        inputs, targets = name_example(*self.pairs[index], self.vocab, self.block_size)
        return {"input_tokens": inputs, "target_tokens": targets,
                "loss_weights": (targets != self.vocab.pad_id).astype(np.int32)}


def prompt_ids(question: str, vocab: CharVocabulary) -> np.ndarray:
    """The evaluation prompt: the raw question (not ASCII-filtered, as in the starter) then MASK, as int64 ids."""
    return vocab.encode(question + MASK_CHAR)


def prediction_from_completion(completion: str) -> str:
    """The predicted place in the text generated after the prompt: everything before its first MASK (the whole text
    if there is none, pads included).

    Same as the starter's ``(question + MASK + completion).split(MASK)[1]``, since the question holds no MASK.
    """
    return completion.partition(MASK_CHAR)[0]


def score_places(gold: Sequence[str | None], predictions: Sequence[str]) -> tuple[int, int]:
    """``(total, correct)`` exact, case-sensitive matches; ``(0, 0)`` when there are no gold places (test inputs)."""
    if len(gold) != len(predictions):
        raise BirthPlacesError(f"{len(predictions)} predictions for {len(gold)} questions; give one per question")
    if all(place is None for place in gold):
        return 0, 0
    if any(place is None for place in gold):
        raise BirthPlacesError("some questions have a gold place and some do not; score a labeled file only")
    return len(gold), sum(place == predicted for place, predicted in zip(gold, predictions))


def london_baseline(questions: Sequence[str]) -> list[str]:
    """Predict "London" for every question (5.0 % of birth_dev.tsv)."""
    return ["London"] * len(questions)


def write_predictions(path: str | Path, predictions: Sequence[str]) -> None:
    """Write one prediction per line (UTF-8), atomically: a temporary file next to ``path``, then renamed."""
    for number, prediction in enumerate(predictions, start=1):
        if "\n" in prediction or "\r" in prediction:
            raise BirthPlacesError(f"prediction {number} contains a line break: {prediction!r}; "
                                   "cut or replace it before writing")
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with temporary.open("w", encoding="utf-8", newline="\n") as output:
            output.writelines(prediction + "\n" for prediction in predictions)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
