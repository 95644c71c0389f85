"""GPT-1 discriminative fine-tuning data (Radford et al. 2018, sections 3.2-3.3): input transformations and rows.

Structured inputs become token sequences framed by three learned special tokens appended after the vocabulary
(:class:`SpecialTokens`): ``start`` first, ``delimiter`` between parts, ``extract`` last. The classifier reads the
final transformer state at the extract token; the auxiliary LM loss covers the whole transformed sequence.

- classification: ``[start] text [extract]``
- entailment: ``[start] premise [delim] hypothesis [extract]``
- similarity: both orders ``[start] a [delim] b [extract]`` and ``[start] b [delim] a [extract]`` (the model adds
  the two extract states before the linear layer)
- multiple choice / QA: one ``[start] context [delim] answer_k [extract]`` per answer (softmax over answers); for
  QA pass the document and question already joined as ``context``.

Truncation (every sequence fits ``max_length``, the model's ``n_ctx``; the extract token is always last). Parts
keep their first tokens (``part[:limit]``, as GPT-1's ``x[:max_len]``):

- one text: ``limit = max_length - 2``, so ``1 + limit + 1 <= max_length`` (needs ``max_length >= 3``).
- two parts (entailment, similarity, multiple choice): each part independently gets ``limit = max_length // 2 - 2``,
  GPT-1's ``transform_roc`` rule. Then ``3 + 2 * limit = 2 * (max_length // 2) - 1 <= max_length - 1``. Room a
  short part leaves unused is not given to the other part (needs ``max_length >= 6`` so each part keeps a token).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

TokenIds = np.ndarray | Sequence[int]
"""Already-tokenized text: a 1-D array (or list) of non-negative integer ids of the base vocabulary."""

ROW_FEATURES = ("input_tokens", "target_tokens", "lm_weights", "extract_positions", "label")


class FinetuneDataError(ValueError):
    """Fine-tuning data that cannot be used (the message says what was wrong and what to do)."""


@dataclass(frozen=True)
class SpecialTokens:
    """Ids of GPT-1's three added tokens: ``start`` (<s>), ``delimiter`` ($) and ``extract`` (<e>, "_classify_")."""

    start: int
    delimiter: int
    extract: int

    def __post_init__(self) -> None:
        ids = (self.start, self.delimiter, self.extract)
        if any(isinstance(i, bool) or not isinstance(i, (int, np.integer)) or i < 0 for i in ids):
            raise FinetuneDataError(f"special token ids must be non-negative ints, got {ids}")
        if len(set(ids)) != 3:
            raise FinetuneDataError(f"special token ids must be distinct, got {ids}; use SpecialTokens.after(vocab)")

    @classmethod
    def after(cls, vocab_size: int) -> SpecialTokens:
        """The three tokens appended after a ``vocab_size``-id vocabulary: ids ``vocab_size``, ``+1``, ``+2``."""
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)) or vocab_size < 1:
            raise FinetuneDataError(f"vocab_size must be a positive int, got {vocab_size!r}")
        size = int(vocab_size)
        return cls(start=size, delimiter=size + 1, extract=size + 2)

    @property
    def size(self) -> int:
        """The model's vocabulary size including the special tokens (largest special id + 1)."""
        return max(self.start, self.delimiter, self.extract) + 1

    @property
    def ids(self) -> tuple[int, int, int]:
        """``(start, delimiter, extract)``."""
        return self.start, self.delimiter, self.extract


def classification_sequences(text: TokenIds, special: SpecialTokens, max_length: int) -> list[np.ndarray]:
    """``[[start] + text + [extract]]``, text cut to its first ``max_length - 2`` tokens."""
    limit = _limit(max_length, single=True)
    return [_frame(special, _tokens(text, special, "text")[:limit])]


def entailment_sequences(premise: TokenIds, hypothesis: TokenIds, special: SpecialTokens,
                         max_length: int) -> list[np.ndarray]:
    """``[[start] + premise + [delim] + hypothesis + [extract]]``, each part cut to ``max_length // 2 - 2``."""
    limit = _limit(max_length, single=False)
    premise_ids = _tokens(premise, special, "premise")[:limit]
    hypothesis_ids = _tokens(hypothesis, special, "hypothesis")[:limit]
    return [_frame(special, premise_ids, hypothesis_ids)]


def similarity_sequences(a: TokenIds, b: TokenIds, special: SpecialTokens, max_length: int) -> list[np.ndarray]:
    """Both orders, ``[start a delim b extract]`` then ``[start b delim a extract]``, parts cut as for pairs."""
    limit = _limit(max_length, single=False)
    a_ids, b_ids = _tokens(a, special, "a")[:limit], _tokens(b, special, "b")[:limit]
    return [_frame(special, a_ids, b_ids), _frame(special, b_ids, a_ids)]


def multiple_choice_sequences(context: TokenIds, answers: Sequence[TokenIds], special: SpecialTokens,
                              max_length: int) -> list[np.ndarray]:
    """One ``[start] + context + [delim] + answer + [extract]`` per answer, in answer order (parts cut as pairs)."""
    limit = _limit(max_length, single=False)
    if isinstance(answers, np.ndarray) or len(answers) == 0:
        raise FinetuneDataError("answers must be a non-empty list of token arrays, one per choice")
    context_ids = _tokens(context, special, "context")[:limit]
    return [_frame(special, context_ids, _tokens(answer, special, f"answers[{k}]")[:limit])
            for k, answer in enumerate(answers)]


@dataclass(frozen=True, eq=False)
class FinetuneExample:
    """One labelled example: the sequences the model runs (1-D int64, copied) and the class / answer index.

    Compared by identity (``eq=False``): the fields hold arrays.
    """

    sequences: tuple[np.ndarray, ...]
    label: int

    def __post_init__(self) -> None:
        if isinstance(self.sequences, np.ndarray) or len(self.sequences) == 0:
            raise FinetuneDataError("an example needs a non-empty tuple of sequences (e.g. from *_sequences())")
        sequences = []
        for k, seq in enumerate(self.sequences):
            array = _int_array(seq, f"sequences[{k}]")
            if array.size == 0:
                raise FinetuneDataError(f"sequences[{k}] is empty; it must end with the extract token")
            sequences.append(array)
        if isinstance(self.label, bool) or not isinstance(self.label, (int, np.integer)) or self.label < 0:
            raise FinetuneDataError(f"label must be a non-negative int (class or answer index), got {self.label!r}")
        object.__setattr__(self, "sequences", tuple(sequences))
        object.__setattr__(self, "label", int(self.label))


def finetune_row(example: FinetuneExample, max_length: int, pad_id: int = 0) -> dict[str, np.ndarray]:
    """Fixed-shape row of one example with S sequences, each of length ``n <= max_length``:

    - ``input_tokens`` int64 [S, max_length]: the sequence, then ``pad_id``.
    - ``target_tokens`` int64 [S, max_length]: ``input[t + 1]`` for ``t < n - 1``, ``pad_id`` elsewhere.
    - ``lm_weights`` int32 [S, max_length]: 1 for ``t < n - 1`` (the auxiliary LM loss over the transformed input,
      special tokens included, as GPT-1's mask ``M[:, 1:]``), else 0.
    - ``extract_positions`` int64 [S]: ``n - 1``, the extract token's index.
    - ``label`` int64, shape ().
    """
    if isinstance(max_length, bool) or not isinstance(max_length, (int, np.integer)) or max_length < 1:
        raise FinetuneDataError(f"max_length must be a positive int, got {max_length!r}")
    longest = max(len(seq) for seq in example.sequences)
    if longest > max_length:
        raise FinetuneDataError(f"a sequence has {longest} tokens but max_length is {max_length}: build the "
                                "sequences with the same max_length (the *_sequences functions truncate)")
    count = len(example.sequences)
    inputs = np.full((count, max_length), pad_id, dtype=np.int64)
    targets = np.full((count, max_length), pad_id, dtype=np.int64)
    weights = np.zeros((count, max_length), dtype=np.int32)
    extract = np.empty(count, dtype=np.int64)
    for s, seq in enumerate(example.sequences):
        n = len(seq)
        inputs[s, :n] = seq
        targets[s, :n - 1] = seq[1:]
        weights[s, :n - 1] = 1
        extract[s] = n - 1
    return {"input_tokens": inputs, "target_tokens": targets, "lm_weights": weights,
            "extract_positions": extract, "label": np.asarray(example.label, dtype=np.int64)}


@dataclass(frozen=True)
class FinetuneRows:
    """Picklable row builder: ``rows(index, epoch)`` is ``finetune_row(examples[index], max_length, pad_id)``.

    ``epoch`` is unused (rows have no randomness) and is there only for the row-builder signature. All examples
    must have the same number of sequences (collation stacks rows) and fit ``max_length``; checked on creation.
    """

    examples: tuple[FinetuneExample, ...]
    max_length: int
    pad_id: int = 0
    truncated: int = 0  # how many examples had a text cut to fit (reported; rows are built from examples alone)

    def __post_init__(self) -> None:
        object.__setattr__(self, "examples", tuple(self.examples))
        if not self.examples:
            raise FinetuneDataError("FinetuneRows needs at least one example")
        counts = sorted({len(example.sequences) for example in self.examples})
        if len(counts) > 1:
            raise FinetuneDataError(f"examples have {counts} sequences each; rows of one data set must have the "
                                    "same count (e.g. the same number of answers) to be stacked into batches")
        longest = max(len(seq) for example in self.examples for seq in example.sequences)
        if longest > self.max_length:
            raise FinetuneDataError(f"a sequence has {longest} tokens but max_length is {self.max_length}: build "
                                    "the sequences with the same max_length")

    def __len__(self) -> int:
        return len(self.examples)

    def __call__(self, index: int, epoch: int) -> dict[str, np.ndarray]:
        """Row of example ``index`` (``epoch`` is ignored)."""
        if not 0 <= index < len(self.examples):
            raise IndexError(f"example index {index} is out of range [0, {len(self.examples)})")
        return finetune_row(self.examples[index], self.max_length, self.pad_id)


def part_limit(max_length: int, parts: int) -> int:
    """Tokens kept of each text of an example with ``parts`` texts (one: classification; else pairs, answers)."""
    return _limit(max_length, single=parts == 1)


def _limit(max_length: int, single: bool) -> int:
    """Tokens kept per part (module docstring), checking ``max_length`` leaves at least one."""
    if isinstance(max_length, bool) or not isinstance(max_length, (int, np.integer)):
        raise FinetuneDataError(f"max_length must be an int, got {max_length!r}")
    limit = max_length - 2 if single else max_length // 2 - 2
    if limit < 1:
        need = 3 if single else 6
        raise FinetuneDataError(f"max_length {max_length} leaves no room for text; use max_length >= {need}")
    return int(limit)


def _int_array(tokens: TokenIds, name: str) -> np.ndarray:
    array = np.asarray(tokens)
    if array.size == 0:
        array = array.astype(np.int64)
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise FinetuneDataError(f"{name} must be a 1-D array of integer token ids, got dtype {array.dtype} and "
                                f"shape {array.shape}; tokenize the text first")
    return array.astype(np.int64)


def _tokens(tokens: TokenIds, special: SpecialTokens, name: str) -> np.ndarray:
    """Checked int64 copy of one text part: ids in ``[0, special.size)`` and none of the special ids."""
    array = _int_array(tokens, name)
    if array.size and (array.min() < 0 or array.max() >= special.size):
        raise FinetuneDataError(f"{name} has ids outside [0, {special.size}); check the tokenizer and "
                                "SpecialTokens.after(vocab_size)")
    if np.isin(array, special.ids).any():
        raise FinetuneDataError(f"{name} contains a special token id {special.ids}; pass plain text ids, the "
                                "transformation adds the special tokens")
    return array


def _frame(special: SpecialTokens, first: np.ndarray, second: np.ndarray | None = None) -> np.ndarray:
    parts = [np.array([special.start], dtype=np.int64), first]
    if second is not None:
        parts += [np.array([special.delimiter], dtype=np.int64), second]
    parts.append(np.array([special.extract], dtype=np.int64))
    return np.concatenate(parts)
