"""A local Hugging Face GPT-2 tokenizer as a :class:`~c4prep.training.data.sentence_files.SentenceVocabulary`.

Laid out as AdaVAE does (``../shared/reference/adavae.md`` §1.13): BOS = EOS = ``<|endoftext|>``. GPT-2 has no pad,
so the EOS id is the pad value too; masks, never ids, mark padding, and EOS stays a scored target. A sentence is
encoded after one leading space, as inside running text, so its first word gets the same ``Ġword`` tokens as the
others; the text ``<|endoftext|>`` in a sentence is ordinary text, never EOS. Only local files are read.

transformers 4.x and 5.x behave the same here: 5.x has no separate fast class (its ``GPT2Tokenizer`` is the
``tokenizers``-backed one, 4.x's ``GPT2TokenizerFast``), builds an empty tokenizer from a directory without tokenizer
files and saves only ``tokenizer.json``; so the files are checked before loading, a copy always gets ``vocab.json`` +
``merges.txt`` beside ``tokenizer.json``, and decoding never applies the ``clean_up_tokenization_spaces`` a
``tokenizer_config.json`` may ask for (4.x would turn ``do n't`` into ``don't``, 5.x skips it for BPE).
"""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ...data.sentence_files import SentenceDataError, ids_before_eos
from ...models.gpt_hf import _import_transformers

TOKENIZER_DIR = "gpt2_tokenizer"
"""Folder of an AdaVAE run folder that keeps a copy of its backbone's GPT-2 tokenizer."""
TOKENIZER_FILES = (("tokenizer.json",), ("vocab.json", "merges.txt"))
"""Either set is a complete GPT-2 tokenizer (``save_pretrained`` writes both with transformers 4.x)."""


class GPT2TokenizerVocabulary:
    """A ``tokenizers``-backed GPT-2 tokenizer with the sentence layout above (BOS = EOS = PAD = its EOS id)."""

    def __init__(self, tokenizer: Any) -> None:
        if tokenizer.eos_token_id is None:
            raise SentenceDataError(f"the GPT-2 tokenizer has no id for its EOS token {tokenizer.eos_token!r}; add "
                                    "<|endoftext|> to its vocab.json")
        self.tokenizer = tokenizer

    @classmethod
    def load(cls, path: str | Path) -> GPT2TokenizerVocabulary:
        """The tokenizer files (``vocab.json`` + ``merges.txt``, or ``tokenizer.json``) of a Hugging Face GPT-2
        directory, or the copy in a run folder written by :meth:`save`."""
        directory = Path(path) / TOKENIZER_DIR if (Path(path) / TOKENIZER_DIR).is_dir() else Path(path)
        transformers = _import_transformers()
        if not directory.is_dir():  # transformers would take the name for a Hub model id
            raise SentenceDataError(f"no GPT-2 tokenizer directory at {directory}: pass a local directory")
        if not any(all((directory / name).is_file() for name in files) for files in TOKENIZER_FILES):
            # transformers 5 would build an empty tokenizer (only <|endoftext|>) from such a directory
            raise SentenceDataError(f"cannot load a GPT-2 tokenizer from {directory}: it needs vocab.json and "
                                    "merges.txt, or tokenizer.json (save_pretrained writes them)")
        try:
            tokenizer = _tokenizer_class(transformers).from_pretrained(directory, local_files_only=True)
        except Exception as err:  # tokenizers raises a bare Exception for a malformed vocab.json
            reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise SentenceDataError(f"cannot load a GPT-2 tokenizer from {directory}: {reason}") from None
        return cls(tokenizer)

    def save(self, path: str | Path) -> None:
        """Copy the tokenizer files into the run folder ``path`` (its ``gpt2_tokenizer/``): ``tokenizer.json``,
        ``tokenizer_config.json``, ``vocab.json`` and ``merges.txt`` whatever the transformers version."""
        directory = Path(path) / TOKENIZER_DIR
        self.tokenizer.save_pretrained(directory)
        # transformers 5 writes tokenizer.json only; 4.x's save_vocabulary writes these two the same way
        self.tokenizer.backend_tokenizer.model.save(str(directory))

    @property
    def bos_id(self) -> int:
        return self.tokenizer.eos_token_id

    @property
    def eos_id(self) -> int:
        return self.tokenizer.eos_token_id

    @property
    def pad_id(self) -> int:
        return self.tokenizer.eos_token_id

    @property
    def vocab_size(self) -> int:
        return len(self.tokenizer)

    def encode(self, sentence: str) -> list[int]:
        """Token ids of ``" " + sentence`` (no BOS/EOS)."""
        return self.tokenizer(" " + sentence, add_special_tokens=False, split_special_tokens=True)["input_ids"]

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids`` up to the first EOS, stripped (of the leading space :meth:`encode` adds)."""
        tokens = ids_before_eos(ids, self.eos_id, self.vocab_size, "the tokenizer's")
        return self.tokenizer.decode(tokens, clean_up_tokenization_spaces=False).strip()


def _tokenizer_class(transformers: Any) -> Any:
    """The ``tokenizers``-backed GPT-2 tokenizer class: ``GPT2TokenizerFast`` in 4.x (``GPT2Tokenizer`` is the slow
    Python one there), ``GPT2Tokenizer`` in 5.x (``GPT2TokenizerFast`` is only a compatibility alias of it)."""
    major = int(transformers.__version__.split(".")[0])
    return transformers.GPT2Tokenizer if major >= 5 else transformers.GPT2TokenizerFast
