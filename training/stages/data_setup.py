"""The data a stage reads, from the ``data:`` and ``objective:`` sections:

- token shards of ``c4prep tokenize`` (``data.kind=tokens``) as objective samples (:func:`pretrain_data`);
- a SentencePiece vocabulary: ``data.vocab`` (:func:`load_vocabulary`), or the token shards' (:func:`token_vocabulary`);
- sentence files (``data.kind=sentences``, ``data=ptb``) as ``[BOS] words [EOS]`` rows over a word vocabulary of
  the training sentences, which the run folder keeps as ``word_vocabulary.json`` (:func:`sentence_corpus`).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from c4prep.manifest import Manifest, ManifestError, manifest_fingerprint, read_manifest
from c4prep.tokenization.train_vocab import locate_vocabulary
from c4prep.tokenization.vocabulary import EOS_ID, SentencePieceVocabulary

from ..batch_losses import DecoderLoss, EncDecLoss
from ..checkpoint import RUN_FILES_FIELD, load_checkpoint
from ..config_errors import TrainConfigError
from ..config_data import SentencesData, TokensData
from ..config_groups import TokenObjectiveConfig, TrainConfig
from ..config_runs import recorded_settings, trained_run_folder
from ..data.decoder_rows import DecoderRowBuilder
from ..data.encdec_rows import EncDecRowBuilder
from ..data.kept_vocabulary import VocabularyMismatchError, check_kept_sha256
from ..data.row_batches import RowSet, content_fingerprint
from ..data.row_source import RowSource
from ..data.sentence_files import (
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
from ..data.token_index import SampleIndex, TokenDataError, build_sample_index
from ..data.token_rows import RowBuilder, TokenSampleRows
from ..objectives import OBJECTIVES, make_objective
from ..objectives.lengths import TooFewSentinelsError
from ..trainer import BatchLoss

log = logging.getLogger(__name__)
CHAR_TEXT_KEYS = {"char_text": "text", "char_corruption": "corpus", "birth_places": "corpus"}  # data.kind -> the
# data key of the text whose characters are the vocabulary
VOCABULARY_PARAMETERS = frozenset({"vocab_size", "eos_id"})  # objective parameters the token shards decide
T5_EXTRA_IDS = 100  # the sentinel ids of token shards whose manifest predates recording --extra-ids
OWN_VOCABULARY_KINDS = frozenset({*CHAR_TEXT_KEYS, "sentences"})  # ids of the data's characters or words
TOKENS_FINGERPRINT_FIELD = "tokens_fingerprint"  # in a token run's checkpoint config: the shards it trained on


@dataclass(frozen=True)
class TrainingData:
    """What a stage trains on: the row sources of both splits (validation None when there is none), their
    vocabulary size and how a batch of their rows is scored; for token shards, how a sample becomes a row."""

    train: RowSource
    validation: RowSource | None
    vocab_size: int
    run_files: dict[str, str] = field(default_factory=dict)  # name -> text the run folder keeps (a vocabulary)
    pack_length: int | None = None  # re-pack each micro-batch's padded rows into this many positions
    batch_loss: BatchLoss = DecoderLoss()
    row_builder: RowBuilder | None = None
    model_sha256: str | None = None  # token shards' SentencePiece model (None in a manifest predating recording it)
    tokens_fingerprint: str | None = None  # token shards' manifest fingerprint: which shards a run trained on


def read_text(path: str, key: str) -> str:
    """A UTF-8 file named by ``data.<key>``; a one-line error naming the setting when it is missing, unreadable or
    not UTF-8 text."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise TrainConfigError(f"data.{key}={path} is not a readable file ({error.strerror}); set "
                               f"data.{key}=<path>") from None
    except UnicodeDecodeError as error:
        raise TrainConfigError(f"data.{key}={path} is not UTF-8 text (byte {error.start}); set data.{key} to a "
                               "text file") from None


def _sentences(data: SentencesData, key: str) -> list[str]:
    try:
        return read_sentences(getattr(data, key))
    except SentenceDataError as error:
        raise TrainConfigError(f"data.{key}: {error}") from None


def sentence_row_set(data: SentencesData, key: str, vocab: SentenceVocabulary, sentences: list[str] | None = None,
                     positions: int | None = None) -> RowSet:
    """The sentences of file ``data.<key>`` (or ``sentences`` read from it), capped at ``data.max_words`` words, as
    ``[BOS] tokens [EOS]`` rows over ``vocab`` with their word counts; rows of ``positions`` positions (default
    ``data.max_words + 1``: one id per word), a sentence needing more is refused. The fingerprint covers the ids
    (so the text and the vocabulary), the word cap and the row length."""
    max_words = data.max_words
    positions = max_words + 1 if positions is None else positions
    sentences = _sentences(data, key) if sentences is None else sentences
    try:
        examples, capped = encode_sentences(sentences, vocab, max_words)
        rows = SentenceRows.from_examples(examples, word_counts(sentences, max_words), vocab, positions)
    except SentenceDataError as error:
        raise TrainConfigError(f"data.{key}: {error}") from None
    log.info("%s: %d sentences, %d capped at %d words", getattr(data, key), len(sentences), capped, max_words)
    ids = "\n".join(" ".join(map(str, example)) for example in examples)
    return RowSet(rows, len(rows), content_fingerprint(ids, max_words=max_words, positions=positions, kind="sentences"))


def sentence_corpus(cfg: TrainConfig) -> TrainingData:
    """``data.train`` / ``data.validation`` sentence files (one per line) as ``[BOS] words [EOS]`` rows of
    ``data.max_words + 1`` positions, over the word vocabulary of the training sentences."""
    data = cfg.data
    max_words = data.max_words
    if data.pack and data.pack_length < max_words + 1:
        raise TrainConfigError(f"data.pack_length={data.pack_length} cannot hold a sentence of data.max_words="
                               f"{max_words} words plus BOS: set data.pack_length>={max_words + 1}")
    train_sentences = _sentences(data, "train")
    vocab = WordVocabulary.from_sentences(train_sentences)
    train = sentence_row_set(data, "train", vocab, train_sentences)
    validation = sentence_row_set(data, "validation", vocab) if data.validation else None
    if validation is not None and data.pack:  # forward-only: packing changes its cost, not its losses
        packed = packed_sentence_rows(validation.rows, data.pack_length)
        validation = RowSet(packed, len(packed), validation.fingerprint)
    return TrainingData(train, validation, vocab.vocab_size, {VOCABULARY_FILE: vocab.to_json() + "\n"},
                     data.pack_length if data.pack else None)


def token_manifest(tokens_dir: str, setting: str = "data.tokens") -> Manifest:
    """The manifest of the token folder that ``setting`` names; a one-line error saying how to get one."""
    try:
        manifest = read_manifest(tokens_dir)
    except ManifestError as error:
        raise TokenDataError(f"{error}; run `c4prep tokenize` first or set {setting}=<token folder>") from None
    if "ids" not in manifest.schema().names:
        raise TokenDataError(f"{setting}={tokens_dir} holds documents, not token shards: tokenize them with "
                             f"`c4prep tokenize --input {tokens_dir}` and set {setting} to its --output")
    if manifest.shard_format != "arrow":
        raise TokenDataError(f"{tokens_dir} holds {manifest.shard_format} token shards, but train reads Arrow token "
                             "shards: re-run tokenize with --format arrow")
    return manifest


def vocabulary_size(manifest: Manifest, tokens_dir: str) -> int:
    """Ids of the vocabulary the token shards were made with (sentinels included), from their manifest."""
    vocabulary = manifest.extra.get("vocabulary", {})
    if "vocab_size" not in vocabulary:
        raise TokenDataError(f"{tokens_dir}/manifest.json names no vocabulary; re-run `c4prep tokenize`")
    return int(vocabulary["vocab_size"])


def pretrain_data(data: TokensData, objective_cfg: TokenObjectiveConfig, seed: int, decoder_only: bool,
                  z_loss: float = 0.0, tokens_setting: str = "data.tokens") -> TrainingData:
    """The objective's samples of the token shards ``data`` names (``tokens_setting``: the setting a message
    names), as rows for a decoder-only model when ``decoder_only``, else for an encoder-decoder (scored with
    ``z_loss``); ``seed`` draws every mask.

    ``data.document_eos`` (default: ``drop`` for the objectives that append their own EOS, as T5; ``keep`` for
    ``lm``, where EOS separates documents) says whether the EOS that ends each tokenized document stays in the
    concatenated stream."""
    manifest = token_manifest(data.tokens, tokens_setting)
    vocab_size = vocabulary_size(manifest, data.tokens)
    inputs_length, targets_length = objective_cfg.inputs_length, objective_cfg.targets_length
    if not decoder_only and inputs_length < 1:
        if objective_cfg.name == "lm":
            raise TrainConfigError(f"objective=lm gives no inputs (objective.inputs_length={inputs_length}), which an "
                                   "encoder-decoder needs: pre-train a T5 with span_corruption or another T5 "
                                   "objective, or choose model=gpt_*")
        raise TrainConfigError(f"objective.inputs_length={inputs_length} leaves the encoder no inputs: give "
                               f"objective={objective_cfg.name} 1 or more (T5's is 512)")
    params = _with_sentinels(objective_cfg, manifest, data.tokens, decoder_only)
    try:
        objective = make_objective(objective_cfg.name, vocab_size=vocab_size, **params)
        segment_length = objective.segment_length(inputs_length, targets_length)
    except ValueError as error:
        sentinels = (f" ({data.tokens} has {params['max_sentinels']} sentinel ids: more need a re-tokenize with a "
                     "larger --extra-ids)" if isinstance(error, TooFewSentinelsError) else "")
        raise TrainConfigError(f"bad objective settings{sentinels}: {error}") from None
    document_eos = data.document_eos or ("drop" if objective.composition.append_eos else "keep")
    log.info("%s: each document's EOS is %s", data.tokens, "dropped" if document_eos == "drop" else "kept")

    def index(split: str) -> SampleIndex:
        return build_sample_index(data.tokens, split, segment_length, objective.output_lengths, inputs_length,
                                  targets_length, concat_documents=data.concat_documents,
                                  drop_document_eos=EOS_ID if document_eos == "drop" else None, manifest=manifest)

    split = data.validation_split
    has_validation = bool(split) and manifest.splits.get(split) is not None and manifest.splits[split].num_rows > 0
    if split and not has_validation:
        log.info("no validation: split %r of %s has no documents", split, data.tokens)
    validation = index(split) if has_validation else None
    if decoder_only:
        row_builder: RowBuilder = DecoderRowBuilder(objective, inputs_length, targets_length, seed=seed)
        batch_loss: BatchLoss = DecoderLoss()
    else:
        row_builder = EncDecRowBuilder(objective, inputs_length, targets_length, seed=seed)
        batch_loss = EncDecLoss(z_loss=z_loss)
    return TrainingData(TokenSampleRows(index(data.train_split), row_builder),
                        None if validation is None else TokenSampleRows(validation, row_builder), vocab_size,
                        batch_loss=batch_loss, row_builder=row_builder,
                        model_sha256=manifest.extra.get("vocabulary", {}).get("model_sha256"),
                        tokens_fingerprint=manifest_fingerprint(manifest))


def trained_on_shards(state: dict[str, Any], fingerprint: str | None) -> bool:
    """Whether a checkpoint's run trained on the token shards of manifest ``fingerprint`` (its ``config`` records
    theirs); True for a checkpoint older than that record."""
    trained = state.get("config", {}).get(TOKENS_FINGERPRINT_FIELD)
    return trained is None or trained == fingerprint


def check_run_vocabulary(init_from: str, model_sha256: str | None, read: str) -> None:
    """A one-line error when ``init_from``'s run was trained on another SentencePiece model than ``read``'s
    (:mod:`~training.data.kept_vocabulary`)."""
    try:
        check_kept_sha256(trained_run_folder(init_from), model_sha256, f"init_from={init_from}", read,
                          lambda: load_checkpoint(init_from).get(RUN_FILES_FIELD) or {})
    except VocabularyMismatchError as error:
        raise TrainConfigError(str(error)) from None


def _with_sentinels(objective_cfg: TokenObjectiveConfig, manifest: Manifest, tokens_dir: str,
                    decoder_only: bool) -> dict[str, Any]:
    """The objective's parameters with ``max_sentinels`` the token shards' sentinel ids (``c4prep tokenize
    --extra-ids``), for an objective that numbers spans with them; a one-line error when the config sets another
    count (the regular ids would include sentinels, or sentinels would be ids the vocabulary lacks), naming the
    objectives without sentinels that the model can train on (an encoder-decoder: not ``lm``)."""
    params = dict(objective_cfg.params)
    fixed = sorted(set(params) & VOCABULARY_PARAMETERS)
    if fixed:
        raise TrainConfigError(f"objective.params.{fixed[0]} comes from the token shards' vocabulary ({tokens_dir}): "
                               "remove it")
    composition = OBJECTIVES.get(objective_cfg.name)
    if composition is None or "max_sentinels" not in composition.parameters:
        return params
    extra_ids = manifest.extra.get("vocabulary", {}).get("extra_ids", T5_EXTRA_IDS)
    given = params.setdefault("max_sentinels", extra_ids)
    if given != extra_ids:
        raise TrainConfigError(f"objective.params.max_sentinels={given}, but {tokens_dir} was tokenized with "
                               f"--extra-ids {extra_ids}: leave max_sentinels unset (it follows the token shards), or "
                               f"re-tokenize with --extra-ids {given}")
    if extra_ids < composition.min_sentinels:
        without = ", ".join(name for name, other in OBJECTIVES.items()
                            if not other.min_sentinels and (decoder_only or name != "lm"))
        raise TrainConfigError(f"objective={objective_cfg.name} needs sentinel ids (at least "
                               f"{composition.min_sentinels}), but {tokens_dir} was tokenized with --extra-ids "
                               f"{extra_ids}: re-tokenize with --extra-ids 100 (T5's), or choose an "
                               f"objective without them ({without})")
    return params


def token_vocabulary(tokens_dir: str) -> SentencePieceVocabulary:
    """The SentencePiece vocabulary (sentinels included) the token shards were made with: the ``.model`` file their
    manifest names, checked by SHA-256."""
    named = token_manifest(tokens_dir).extra.get("vocabulary", {})
    model = named.get("model")
    try:
        vocab = SentencePieceVocabulary(model, extra_ids=named.get("extra_ids", T5_EXTRA_IDS))
    except (OSError, TypeError, ValueError) as error:
        raise TokenDataError(f"{tokens_dir}/manifest.json names the vocabulary {model}, which does not load "
                             f"({error}); restore it there") from None
    if vocab.model_sha256 != named.get("model_sha256"):
        raise TokenDataError(f"{model} is not the vocabulary {tokens_dir} was tokenized with (its SHA-256 differs); "
                             "restore that one")
    return vocab


def load_vocabulary(path: str, init_from: str | None = None) -> SentencePieceVocabulary:
    """The SentencePiece vocabulary at ``path`` (``data.vocab``); with ``init_from``, a one-line error when that
    checkpoint's run encoded its data with another model (same size or not, its ids would be other pieces)."""
    try:
        _, model_proto, _ = locate_vocabulary(path)
        vocab = SentencePieceVocabulary(model_proto)
    except ValueError as error:  # VocabError, or a file that is not a T5-style SentencePiece model
        raise TrainConfigError(f"{error} (set data.vocab=<vocabulary folder>)") from None
    if init_from:
        check_run_vocabulary(init_from, vocab.model_sha256, f"data.vocab={path}")
    trained = _run_vocabulary(init_from) if init_from else None  # runs older than their vocabulary.sha256
    if trained is not None and trained[1].model_sha256 != vocab.model_sha256:
        raise TrainConfigError(f"data.vocab={path} is not the vocabulary init_from={init_from} was trained with "
                               f"({trained[0]}: another SHA-256); fine-tune with that one")
    return vocab


def _run_vocabulary(init_from: str) -> tuple[str, SentencePieceVocabulary] | None:
    """Where ``init_from``'s run found its SentencePiece model (its token shards, or its ``data.vocab``) and the
    model; None where its record names none, or one that is no longer there. A run whose ids are its own
    characters or words (their number may match) is a one-line error."""
    data = recorded_settings(trained_run_folder(init_from)).get("data") or {}
    if data.get("kind") in OWN_VOCABULARY_KINDS:
        raise TrainConfigError(f"init_from={init_from} was trained on data.kind={data['kind']}, whose ids are its own "
                               "characters or words, not SentencePiece pieces: fine-tune it on data of that kind")
    try:
        if data.get("kind") == "tokens":
            return data["tokens"], token_vocabulary(data["tokens"])
        if data.get("vocab"):
            return data["vocab"], load_vocabulary(data["vocab"])
    except (TokenDataError, TrainConfigError):
        return None
    return None
