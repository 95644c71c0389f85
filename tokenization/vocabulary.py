"""Vocabularies mapping text to token ids and back, with T5's ids and sentinels.

Every vocabulary uses T5's special ids (pad 0, eos 1, unk 2, no BOS) and appends ``extra_ids`` sentinels after its
own ids: ``<extra_id_k>`` is ``vocab_size - 1 - k``, as in T5 (so ``vocab_size`` counts them). Sentinels are never
produced by :meth:`Vocabulary.encode`: raw text containing the string ``<extra_id_0>`` encodes as plain text.
"""
from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np
import sentencepiece as spm

from c4prep.shards import resolve_uri

PAD_ID = 0
EOS_ID = 1
UNK_ID = 2


class Vocabulary(ABC):
    """Text <-> ids. Subclasses provide the base ids ``0 .. base_vocab_size - 1``; sentinels follow them."""

    pad_id = PAD_ID
    eos_id = EOS_ID
    unk_id = UNK_ID

    def __init__(self, extra_ids: int) -> None:
        if extra_ids < 0:
            raise ValueError(f"extra_ids must be >= 0, got {extra_ids}")
        self.extra_ids = extra_ids

    @property
    @abstractmethod
    def base_vocab_size(self) -> int:
        """Number of ids before the sentinels."""

    @property
    def vocab_size(self) -> int:
        """All ids, sentinels included."""
        return self.base_vocab_size + self.extra_ids

    def sentinel_id(self, k: int) -> int:
        """Id of ``<extra_id_k>``: ``vocab_size - 1 - k``."""
        if not 0 <= k < self.extra_ids:
            raise ValueError(f"sentinel index must be in [0, {self.extra_ids}), got {k}")
        return self.vocab_size - 1 - k

    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` (no EOS appended)."""

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """``encode`` of each text."""
        return [self.encode(text) for text in texts]

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` up to the first EOS; pad ids are skipped and sentinels become ``<extra_id_k>``."""
        pieces: list[str] = []
        run: list[int] = []
        for token in ids:
            token = int(token)
            if not 0 <= token < self.vocab_size:
                raise ValueError(f"token id {token} is outside the vocabulary [0, {self.vocab_size})")
            if token == self.eos_id:
                break
            if token == self.pad_id:
                continue
            if token < self.base_vocab_size:
                run.append(token)
                continue
            if run:
                pieces.append(self._decode_base(run, at_start=not pieces))
                run = []
            pieces.append(self._decode_sentinel(self.vocab_size - 1 - token, at_start=not pieces))
        if run:
            pieces.append(self._decode_base(run, at_start=not pieces))
        return "".join(pieces)

    @abstractmethod
    def _decode_base(self, ids: list[int], at_start: bool) -> str:
        """Text of base ids (no pad, no EOS); ``at_start``: nothing was decoded before them."""

    def _decode_sentinel(self, k: int, at_start: bool) -> str:
        return f"<extra_id_{k}>"


class SentencePieceVocabulary(Vocabulary):
    """A SentencePiece model trained with T5's ids (``c4prep vocab``), plus ``extra_ids`` sentinels.

    Decoding matches seqio, whose sentinels are the pieces ``▁<extra_id_k>``: a sentinel after other text is
    preceded by a space. The sentinels are not added to the model, so the text ``<extra_id_0>`` stays text.
    Pickles as its serialised model (for Beam workers).
    """

    def __init__(self, model: str | bytes, extra_ids: int = 100) -> None:
        """``model``: path or URI of a ``.model`` file, or its serialised bytes."""
        super().__init__(extra_ids)
        if isinstance(model, str):
            fs, path = resolve_uri(model)
            with fs.open_input_stream(path) as stream:
                model = stream.read()
        self._model_proto = model
        try:
            self._sp = spm.SentencePieceProcessor(model_proto=model)
        except RuntimeError:
            raise ValueError("not a SentencePiece model (it does not parse); give a .model file or a folder made by "
                             "`c4prep vocab`") from None
        specials = (self._sp.pad_id(), self._sp.eos_id(), self._sp.unk_id(), self._sp.bos_id())
        if specials != (PAD_ID, EOS_ID, UNK_ID, -1):
            raise ValueError(f"the SentencePiece model has pad/eos/unk/bos ids {specials}, not T5's (0, 1, 2, -1); "
                             "train it with `c4prep vocab`")

    def __getstate__(self) -> dict:
        return {"model": self._model_proto, "extra_ids": self.extra_ids}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["model"], state["extra_ids"])

    @property
    def model_proto(self) -> bytes:
        """The serialised SentencePiece model."""
        return self._model_proto

    @property
    def model_sha256(self) -> str:
        """The SHA-256 of the serialised model: what token manifests record (``vocabulary.model_sha256``) and what
        training and export check a vocabulary against."""
        return hashlib.sha256(self._model_proto).hexdigest()

    @property
    def base_vocab_size(self) -> int:
        return self._sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        return self._sp.encode(text)

    def encode_batch(self, texts: Sequence[str], num_threads: int = 1) -> list[list[int]]:
        """``encode`` of each text, on ``num_threads`` threads."""
        return self._sp.encode(list(texts), num_threads=num_threads)

    def encode_arrays(self, texts: Sequence[str], num_threads: int = 1, add_eos: bool = False) -> list[np.ndarray]:
        """``encode`` of each text as an int32 array (EOS appended if ``add_eos``): the fast path for bulk work."""
        return self._sp.encode(list(texts), num_threads=num_threads, add_eos=add_eos, return_type="numpy")

    def normalize(self, text: str) -> str:
        """The model's normalisation of ``text`` (NFKC, collapsed whitespace): what ``decode(encode(text))`` gives
        back when no piece is unknown."""
        normalized = self._sp.normalize(text).replace("▁", " ")
        return normalized[1:] if normalized.startswith(" ") else normalized  # the dummy prefix

    def _decode_base(self, ids: list[int], at_start: bool) -> str:
        text = self._sp.decode(ids)
        if not at_start and self._sp.id_to_piece(ids[0]).startswith("▁"):
            text = " " + text  # SentencePiece drops the leading space of what it decodes
        return text

    def _decode_sentinel(self, k: int, at_start: bool) -> str:
        return ("" if at_start else " ") + super()._decode_sentinel(k, at_start)


class ByteVocabulary(Vocabulary):
    """UTF-8 bytes as ids ``3 .. 258`` after pad/eos/unk, plus ``extra_ids`` sentinels (as ByT5).

    Decoding drops bytes that do not form valid UTF-8 (as ByT5); unk ids are skipped.
    """

    _OFFSET = 3

    def __init__(self, extra_ids: int = 100) -> None:
        super().__init__(extra_ids)

    @property
    def base_vocab_size(self) -> int:
        return self._OFFSET + 256

    def encode(self, text: str) -> list[int]:
        return [byte + self._OFFSET for byte in text.encode("utf-8")]

    def _decode_base(self, ids: list[int], at_start: bool) -> str:
        data = bytes(token - self._OFFSET for token in ids if token >= self._OFFSET)
        return data.decode("utf-8", errors="ignore")
