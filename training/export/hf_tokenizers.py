"""A run's vocabulary as Hugging Face tokenizer files (``tokenizer.json``, ``tokenizer_config.json``,
``special_tokens_map.json``; T5 also ``spiece.model``), built with the ``tokenizers`` library.

- SentencePiece (unigram, T5's ids, sentinels ``<extra_id_k>`` = ``vocab_size - 1 - k``): the pieces and scores as a
  ``Unigram`` model, the model's own precompiled normalisation, whitespace split and ``▁`` prepended to every word
  (SentencePiece's dummy prefix, extra-whitespace removal and whitespace escaping). That is the layout transformers
  5.x's ``T5Tokenizer`` rebuilds from a ``tokenizer.json``, so 4.x (which reads the file as it is) and 5.x give the
  same ids: SentencePiece's, but where two orders of the same pieces score exactly the same (SentencePiece sums in
  float32, ``tokenizers`` in float64 and may pick the other order). T5 appends EOS, as its token shards do; a GPT
  appends nothing. As in HF's T5 tokenizers, the text ``<extra_id_0>`` becomes the sentinel (c4prep's vocabulary
  keeps it as text).
- Word vocabulary (``word_vocabulary.json`` of a PTB run): a ``WordLevel`` model over whitespace words, BOS prepended;
  unknown words become ``<unk>`` (the ``unk_token``) where the vocabulary has it, as c4prep encodes them.
- Character vocabulary: one token per character, PAD ``□`` and MASK ``⁇`` as the vocabulary has them. A character
  outside it becomes MASK (also the ``unk_token``), where c4prep's encoding refuses it: the vocabulary has no UNK.

A GPT's tokenizers decode every word with the space before it, the first word's too (as GPT-2's byte-level one
does), so decoding ids in parts and joining the texts gives the text of all of them: transformers 5.x's
text-generation pipeline appends the new ids' text to the prompt (4.x cut the prompt's decoded length off the whole
text), and SentencePiece's decoding, which drops the first word's space, ran the continuation into the prompt
("The city ofof"). A T5's decodes as SentencePiece does: its outputs are decoded alone. Sentinels and UNK decode as
c4prep's vocabulary decodes them (a space before a sentinel after text, as seqio's; UNK as SentencePiece's ``" ⁇ "``),
except in transformers 5's ``T5Tokenizer``, which builds its own decoder.

Every tokenizer returns ``input_ids`` and ``attention_mask`` alone: transformers 4.x's ``PreTrainedTokenizerFast``
also returned ``token_type_ids``, which ``GPT2LMHeadModel`` adds as embeddings (of id 0) to every position.
"""
from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from c4prep.tokenization.vocabulary import SentencePieceVocabulary

from ..data.char_vocabulary import MASK_CHAR, CharVocabulary
from ..data.sentence_files import UNK_WORD, WordVocabulary
from .hf_folders import write_json

SPIECE_NAME = "spiece.model"
MODEL_INPUT_NAMES = ["input_ids", "attention_mask"]  # no token_type_ids: GPT2LMHeadModel would embed them
WORD_SPECIALS = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>"}  # the word vocabulary's ids 0, 1, 2
_UNIGRAM, _BYTE_PIECE = 1, 6  # SentencePiece enum values: TrainerSpec.model_type, SentencePiece.type


class TokenizerExportError(ValueError):
    """A vocabulary the tokenizer files cannot reproduce (the message says why)."""


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[i]
        value, shift, i = value | (byte & 0x7F) << shift, shift + 7, i + 1
        if byte < 0x80:
            return value, i


def _fields(buf: bytes) -> Iterator[tuple[int, Any]]:
    """(field number, value) of a serialised protobuf message: the few ``ModelProto`` fields read here need no
    protobuf runtime (whose version Beam and transformers 5.x pull apart)."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        wire = key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 2:
            size, i = _varint(buf, i)
            value, i = buf[i:i + size], i + size
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, i = buf[i:i + size], i + size
        else:
            raise TokenizerExportError(f"not a SentencePiece model (protobuf wire type {wire})")
        yield key >> 3, value


def _message(buf: bytes, number: int) -> dict[int, Any]:
    """The last scalar of each field of sub-message ``number`` of ``buf`` (absent: ``{}``)."""
    found = [value for field, value in _fields(buf) if field == number]
    return dict(_fields(found[-1])) if found else {}


def sentencepiece_tokenizer(vocab: SentencePieceVocabulary, family: str) -> Any:
    """A ``tokenizers.Tokenizer`` giving ``vocab.encode`` ids, sentinels special: a ``t5`` one appends EOS and drops
    the first word's space in decoding, as SentencePiece does; a ``gpt`` one appends nothing and keeps it."""
    from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import Unigram

    proto = vocab.model_proto
    trainer, normalizer = _message(proto, 2), _message(proto, 3)
    pieces = [dict(_fields(value)) for field, value in _fields(proto) if field == 1]  # piece 1, score 2, type 3
    problems = [what for what, bad in (
        ("its model type is not unigram", trainer.get(3, _UNIGRAM) != _UNIGRAM),
        ("it has byte-fallback pieces", any(piece.get(3) == _BYTE_PIECE for piece in pieces)),
        ("it turns off the dummy prefix or the whitespace handling", not all(normalizer.get(f, 1) for f in (3, 4, 5))))
        if bad]
    if problems:
        raise TokenizerExportError(f"the SentencePiece model cannot become a tokenizer.json: {'; '.join(problems)}; "
                                   "export takes a model trained on a vocabulary as `c4prep vocab` makes by default "
                                   "(unigram, no byte fallback)")
    scores = [(piece[1].decode("utf-8"), struct.unpack("<f", piece[2])[0] if 2 in piece else 0.0)
              for piece in pieces]
    sentinels = [f"<extra_id_{k}>" for k in range(vocab.extra_ids)]
    tokenizer = Tokenizer(Unigram(scores + [(s, 0.0) for s in reversed(sentinels)], unk_id=vocab.unk_id))
    charsmap = normalizer.get(2, b"")
    if charsmap:
        tokenizer.normalizer = normalizers.Precompiled(charsmap)
    metaspace = dict(replacement="▁", prepend_scheme="always", split=True)
    # words split at spaces alone, as SentencePiece's: a whitespace its normalisation keeps (U+0085) is a character
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(" +"), behavior="removed"),
                                                       pre_tokenizers.Metaspace(**metaspace)])
    unk = scores[vocab.unk_id][0]
    tokenizer.decoder = decoders.Sequence([  # as c4prep's: a space before a sentinel after text, SentencePiece's UNK
        decoders.Replace(Regex("^<extra_id_"), "▁<extra_id_"),
        decoders.Replace(Regex(f"^{re.escape(unk)}$"), "▁⁇▁"),
        decoders.Metaspace(**{**metaspace, "prepend_scheme": "always" if family == "t5" else "never"})])
    tokenizer.add_special_tokens([scores[i][0] for i in (vocab.pad_id, vocab.eos_id, vocab.unk_id)] + sentinels)
    if family == "t5":
        eos = scores[vocab.eos_id][0]
        tokenizer.post_processor = processors.TemplateProcessing(
            single=["$A", eos], pair=["$A", eos, "$B", eos], special_tokens=[(eos, vocab.eos_id)])
    return tokenizer


def word_tokenizer(vocab: WordVocabulary) -> Any:
    """Whitespace words over the word vocabulary's ids, BOS prepended (rows are ``[BOS] words [EOS]``); each word
    decodes with a space before it."""
    from tokenizers import Regex, Tokenizer, decoders, pre_tokenizers, processors
    from tokenizers.models import WordLevel

    specials = list(WORD_SPECIALS.values())
    clashes = sorted(set(specials) & set(vocab.words))
    if clashes:
        raise TokenizerExportError(f"the word vocabulary has words {clashes} that the tokenizer uses for PAD/BOS/EOS")
    ids = {token: i for i, token in enumerate([*specials, *vocab.words])}
    tokenizer = Tokenizer(WordLevel(ids, unk_token=UNK_WORD))
    # Python's str.split() (c4prep's words) also splits at the separators U+001C-U+001F, which Unicode's does not
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex("[\x1c-\x1f]"), behavior="removed"),
                                                       pre_tokenizers.WhitespaceSplit()])
    tokenizer.decoder = decoders.Replace(Regex("^"), " ")
    tokenizer.add_special_tokens(specials)
    bos = WORD_SPECIALS["bos_token"]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=[bos, "$A"], pair=[bos, "$A", "$B"], special_tokens=[(bos, vocab.bos_id)])
    return tokenizer


def char_tokenizer(vocab: CharVocabulary) -> Any:
    """One token per character (newlines and spaces included), MASK for one outside the vocabulary; decoding joins
    them back."""
    from tokenizers import Regex, Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import WordLevel

    tokenizer = Tokenizer(WordLevel({char: i for i, char in enumerate(vocab.chars)}, unk_token=MASK_CHAR))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    tokenizer.add_special_tokens(list(vocab.chars[:2]))
    return tokenizer


def write_tokenizer(vocab: Any, folder: Path, family: str, max_length: int | None = None) -> dict[str, int]:
    """Write the tokenizer files of ``vocab`` for a ``t5`` or ``gpt`` model into ``folder``; return the special ids
    (``bos_token_id``, ``eos_token_id``, ``pad_token_id``) the model's configs name."""
    config: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast", "model_input_names": MODEL_INPUT_NAMES}
    if isinstance(vocab, SentencePieceVocabulary):
        tokenizer = sentencepiece_tokenizer(vocab, family)
        specials: dict[str, Any] = {name: tokenizer.id_to_token(i) for name, i in (
            ("eos_token", vocab.eos_id), ("unk_token", vocab.unk_id), ("pad_token", vocab.pad_id))}
        specials["additional_special_tokens"] = [f"<extra_id_{k}>" for k in range(vocab.extra_ids)]
        ids = {"eos_token_id": vocab.eos_id, "pad_token_id": vocab.pad_id}
        if family == "t5":  # legacy: the slow (4.x) T5Tokenizer encodes with the .model as it is
            config.update(tokenizer_class="T5Tokenizer", extra_ids=vocab.extra_ids, legacy=True)
            (folder / SPIECE_NAME).write_bytes(vocab.model_proto)
    elif isinstance(vocab, WordVocabulary):
        tokenizer, specials = word_tokenizer(vocab), dict(WORD_SPECIALS)
        if vocab.unk_id is not None:
            specials["unk_token"] = UNK_WORD
        ids = {"bos_token_id": vocab.bos_id, "eos_token_id": vocab.eos_id, "pad_token_id": vocab.pad_id}
    elif isinstance(vocab, CharVocabulary):
        tokenizer = char_tokenizer(vocab)
        specials = {"pad_token": vocab.chars[0], "mask_token": MASK_CHAR, "unk_token": MASK_CHAR}
        ids = {"pad_token_id": vocab.pad_id}
    else:
        raise TokenizerExportError(f"no Hugging Face tokenizer for a {type(vocab).__name__}")
    config.update(specials)
    if max_length:
        config["model_max_length"] = max_length
    tokenizer.save(str(folder / "tokenizer.json"))
    write_json(folder / "tokenizer_config.json", config)
    write_json(folder / "special_tokens_map.json", specials)
    return ids
