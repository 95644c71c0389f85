"""`c4prep tokenize`: a Beam job turning document shards into token shards, one token shard per document shard.

Token shard ``i`` of split ``s`` holds the documents of document shard ``i`` of split ``s``, in the same row
order, so the output never depends on the runner or worker count; a split without documents has no shard. Shards
are written in the chosen format (:mod:`c4prep.shard_formats`) into a staging folder and published as the corpus
job publishes its own (:mod:`c4prep.staged_output`).
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa

from c4prep.beam_runs import CounterCache, job_pipeline, pipeline_options, run_to_completion
from c4prep.manifest import (
    TOKENS,
    Manifest,
    build_manifest,
    manifest_fingerprint,
    output_folder,
    read_listed_shard,
    read_manifest,
)
from c4prep.output_settings import Content, Settings, check_published_settings
from c4prep.shard_formats import check_format
from c4prep.shards import absolute_input, join_uri, resolve_uri, shard_name, write_shard
from c4prep.staged_output import staged_output, write_info_file

from .token_shards import UINT32_LIMIT, token_batch, token_schema
from .train_vocab import locate_vocabulary
from .vocabulary import SentencePieceVocabulary

NAMESPACE = "tokenize"


class TokenizeError(ValueError):
    """A user mistake in the input or output folders (one-line message)."""


@dataclass
class TokenizeConfig:
    """Everything that decides what a run produces (recorded in the manifest)."""

    input: str
    vocab: str
    output: str
    extra_ids: int = 100
    runner: str = "DirectRunner"
    batch_size: int = 1024  # documents per encode call and per Arrow record batch
    num_threads: int = 0  # encode threads per worker process; 0: the worker's CPU count
    format: str = "arrow"  # token shard file format: one of c4prep.shard_formats.FORMATS (train reads arrow)
    allow_other_settings: bool = False  # replace token shards made with other settings (otherwise refused)

    def __post_init__(self) -> None:
        check_format(self.format)


@dataclass
class TokenizeResult:
    manifest: Manifest
    counters: dict[str, dict[str, int]]


class _TokenizeShard(beam.DoFn):
    """Document shard name -> token shard of the same split, index and count in the staging folder (plus its info
    file). The input is read by its absolute path: workers may run in other folders than the driver."""

    def __init__(self, config: TokenizeConfig, manifest: Manifest, staging_dir: str,
                 vocab: SentencePieceVocabulary, schema: pa.Schema) -> None:
        self.config = config
        self.input = absolute_input(config.input)
        self.manifest = manifest
        self.shards = {shard.name: shard for shard in manifest.shards}
        self.staging_dir = staging_dir
        self.vocab = vocab
        self.schema = schema

    def setup(self) -> None:
        self.num_threads = self.config.num_threads or os.cpu_count() or 1
        self.counters = CounterCache(NAMESPACE)

    def process(self, name: str) -> Iterator[str]:
        shard = self.shards[name]
        table = read_listed_shard(self.input, self.manifest, shard).select(["text", "url"])
        uri = join_uri(self.staging_dir, shard_name(shard.split, shard.index, shard.count, self.config.format))
        info = write_shard(uri, self.schema, self._batches(table, shard.split))
        write_info_file(self.staging_dir, info)
        yield name

    def _batches(self, table: pa.Table, split: str) -> Iterator[pa.RecordBatch]:
        unk = self.vocab.unk_id
        for batch in table.to_batches(max_chunksize=self.config.batch_size):
            ids = self.vocab.encode_arrays(batch.column(0).to_pylist(), num_threads=self.num_threads, add_eos=True)
            record_batch = token_batch(self.schema, ids, batch.column(1).to_pylist())
            values = record_batch.column(0).values.to_numpy()
            self.counters.inc(f"documents:{split}", record_batch.num_rows)
            self.counters.inc(f"tokens:{split}", len(values))
            self.counters.inc(f"unk_tokens:{split}", int(np.count_nonzero(values == unk)))
            yield record_batch


def _check_paths(config: TokenizeConfig, manifest: Manifest) -> None:
    in_fs, in_path = resolve_uri(config.input)
    out_fs, out_path = resolve_uri(config.output)
    if in_fs.equals(out_fs) and in_path.rstrip("/") == out_path.rstrip("/"):
        raise TokenizeError(f"--output {config.output} is the input folder: token shards would replace the documents")
    if not {"text", "url"} <= set(manifest.schema().names):
        raise TokenizeError(f"{config.input} holds no documents (its shards lack 'text' or 'url' columns)")


def _settings(extra: dict[str, Any], shard_format: str) -> Settings:
    """What decides token shards, from a token manifest's ``extra`` and format (a published one, or this run's)."""
    source, vocabulary = extra.get("source", {}), extra.get("vocabulary", {})
    return [("--input", Content(source.get("uri"), "fingerprint", source.get("fingerprint"))),
            ("--vocab", Content(vocabulary.get("model"), "SHA-256", vocabulary.get("model_sha256"))),
            ("--extra-ids", vocabulary.get("extra_ids")),
            ("--format", shard_format)]


def _check_replaceable(config: TokenizeConfig, extra: dict[str, Any]) -> None:
    """An :class:`~c4prep.output_settings.OtherSettingsError` when ``config.output`` holds token shards made with other
    settings than this run's (its manifest's ``extra``), unless ``config.allow_other_settings``."""
    if not config.allow_other_settings:
        check_published_settings(config.output, TOKENS,
                                 lambda published: _settings(published.extra, published.shard_format),
                                 _settings(extra, config.format))


def run_tokenize(config: TokenizeConfig, beam_args: list[str] | None = None) -> TokenizeResult:
    """Tokenize every document shard of ``config.input`` and atomically replace ``config.output`` (unless it holds
    token shards made with other settings)."""
    if config.extra_ids < 0:
        raise TokenizeError(f"--extra-ids must be >= 0 (T5: 100), got {config.extra_ids}")
    source = read_manifest(config.input)
    _check_paths(config, source)
    model_uri, model_proto, card = locate_vocabulary(config.vocab)
    try:
        vocab = SentencePieceVocabulary(model_proto, extra_ids=config.extra_ids)
    except ValueError as error:
        raise TokenizeError(f"--vocab {config.vocab}: {error}") from None
    if vocab.vocab_size > UINT32_LIMIT:
        raise TokenizeError(f"--extra-ids {config.extra_ids:,} with the {vocab.base_vocab_size:,} pieces of "
                            f"{config.vocab} make more ids than token shards can number ({UINT32_LIMIT:,}); T5 uses "
                            "--extra-ids 100")
    model_sha256 = vocab.model_sha256
    schema = token_schema(vocab.vocab_size, {"vocab_sha256": model_sha256, "vocab_size": str(vocab.vocab_size)})
    extra = {
        "source": {"uri": config.input, "fingerprint": manifest_fingerprint(source)},
        "vocabulary": {"model": model_uri, "model_sha256": model_sha256, "vocab_size": vocab.vocab_size,
                       "extra_ids": config.extra_ids, "card": card},
    }
    options = pipeline_options(config.runner, list(beam_args or []))
    names = [shard.name for shard in source.shards if source.splits[shard.split].num_rows]  # no 0-row split's shard
    with output_folder(config.output, TOKENS):
        _check_replaceable(config, extra)
        with job_pipeline(options) as pipeline, staged_output(config.output) as staging:
            _ = (
                pipeline
                | "ShardNames" >> beam.Create(names)
                | "SpreadShards" >> beam.Reshuffle()
                | "Tokenize" >> beam.ParDo(_TokenizeShard(config, source, staging.uri, vocab, schema))
            )
            counters = run_to_completion(pipeline, options)
            documents = {name.removeprefix("documents:"): n for name, n in counters.get(NAMESPACE, {}).items()
                         if name.startswith("documents:")}
            manifest = build_manifest(schema, staging.shard_infos(documents), config=asdict(config), counters=counters,
                                      splits=source.splits, shard_format=config.format, extra=extra)
            return TokenizeResult(staging.commit(manifest), counters)
