"""`c4prep vocab` (train the SentencePiece vocabulary) and `c4prep tokenize` (document shards -> token shards)."""
from __future__ import annotations

import time

import click

from c4prep.output_settings import ALLOW_FLAG
from c4prep.shard_formats import FORMATS
from c4prep.user_errors import (
    UserError,
    quiet_engine_logs,
    refuse_unknown_options,
    reported_as_user_errors,
)

from .train_vocab import MODEL_TYPES

DEFAULT_DOCUMENTS = "c4prep_data/c4/en"
DEFAULT_VOCAB = "c4prep_data/vocab"
DEFAULT_TOKENS = "c4prep_data/tokens"


def _parse_ratio(value: str | None) -> list[int] | None:
    if value is None:
        return None
    parts = value.split(":")
    if not all(part.isascii() and part.isdigit() and int(part) > 0 for part in parts):
        raise UserError(f"--language-ratio {value!r} is not positive integers joined by ':' (e.g. 10:1:1:1)")
    return [int(part) for part in parts]


@click.command()
@click.option("--input", "inputs", multiple=True, metavar="DIR",
              help=f"Document shards folder (output of `c4prep run`); repeatable.  [default: {DEFAULT_DOCUMENTS}]")
@click.option("--output", default=DEFAULT_VOCAB, show_default=True,
              help="Folder for spm.model, spm.vocab and vocab.json.")
@click.option("--vocab-size", default=32_000, show_default=True, help="SentencePiece pieces (T5: 32000).")
@click.option("--model-type", default="unigram", show_default=True, type=click.Choice(MODEL_TYPES),
              help="SentencePiece's algorithm; `c4prep export` gives a Hugging Face tokenizer for unigram only.")
@click.option("--input-sentence-size", default=1_000_000, show_default=True,
              help="Most sentences (lines) to sample for training.")
@click.option("--seed", default=0, show_default=True, help="Seed of the sentence sample.")
@click.option("--language-ratio", metavar="W1:W2:...",
              help="Mix the --inputs in this ratio of sentences, e.g. 10:1:1:1 (T5: en:de:fr:ro). "
                   "Default: all inputs form one sample.")
@click.option("--split", "splits", multiple=True, default=["train"], show_default=True,
              help="Splits of the inputs to read; repeatable.")
@click.option("--character-coverage", default=0.9995, show_default=True)
@click.option("--num-threads", default=16, show_default=True,
              help="Trainer threads. Part of the result: the same value gives the same model on any machine.")
@click.option(ALLOW_FLAG, "allow_other_settings", is_flag=True,
              help="Replace a vocabulary made with other settings or inputs (by default refused: the output stays "
                   "as it was, for the token shards made with it).")
def vocab(inputs, output, vocab_size, model_type, input_sentence_size, seed, language_ratio, splits,
          character_coverage, num_threads, allow_other_settings) -> None:
    """Train a T5-style SentencePiece vocabulary on sentences sampled from document shards.

    T5's settings: unigram, pad=0 eos=1 unk=2, no BOS, NFKC, character coverage 0.9995.
    """
    from c4prep.manifest import ManifestError
    from c4prep.output_settings import OtherSettingsError
    from c4prep.shards import UnsupportedUriError

    from .train_vocab import VocabConfig, VocabError, train_vocabulary

    config = VocabConfig(inputs=list(inputs or [DEFAULT_DOCUMENTS]), output=output, vocab_size=vocab_size,
                         model_type=model_type, input_sentence_size=input_sentence_size, seed=seed,
                         language_ratio=_parse_ratio(language_ratio), splits=list(splits),
                         character_coverage=character_coverage, num_threads=num_threads,
                         allow_other_settings=allow_other_settings)
    click.echo(f"Training a {model_type} vocabulary of {vocab_size:,} pieces on {', '.join(config.inputs)}")
    with reported_as_user_errors(VocabError, OtherSettingsError, ManifestError, UnsupportedUriError):
        result = train_vocabulary(config)
    card = result.card
    for source in card["sources"]:
        click.echo(f"  {source['uri']}: {source['documents']:,} documents, {source['sentences_seen']:,} sentences "
                   f"seen ({source['sentences_too_long']:,} too long), {source['sentences_used']:,} used")
    sentences = card["sentences"]
    click.echo(f"Sentences: {sentences['seen']:,} seen, {sentences['used']:,} used for training")
    click.echo(f"Sampled in {result.seconds_sampling:.1f} s, trained in {result.seconds_training:.1f} s")
    pieces = card["model"]["num_pieces"]
    click.echo(f"Wrote {output.rstrip('/')}/spm.model ({pieces:,} pieces), spm.vocab and vocab.json")
    if pieces != vocab_size:  # SentencePiece's char model has one piece per character it kept
        click.echo(f"Warning: the {model_type} model has {pieces:,} pieces, not the {vocab_size:,} of --vocab-size",
                   err=True)


@click.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.option("--input", "input_", default=DEFAULT_DOCUMENTS, show_default=True,
              help="Document shards folder (output of `c4prep run`).")
@click.option("--vocab", "vocab_", default=DEFAULT_VOCAB, show_default=True,
              help="Vocabulary folder (output of `c4prep vocab`) or a .model file.")
@click.option("--output", default=DEFAULT_TOKENS, show_default=True, help="Output folder (local, gs://, s3://).")
@click.option("--extra-ids", default=100, show_default=True, help="Sentinel ids after the pieces (T5: 100).")
@click.option("--runner", default="DirectRunner", show_default=True,
              help="Beam runner: DirectRunner, DataflowRunner, FlinkRunner, SparkRunner, ...")
@click.option("--num-threads", type=click.IntRange(min=0), default=0, show_default=True,
              help="Encoding threads per worker process; 0: the worker's CPU count.")
@click.option("--format", "shard_format", type=click.Choice(FORMATS), default="arrow", show_default=True,
              help="Token shard files: Arrow IPC (what `train` reads), Parquet (zstd) or gzipped JSON Lines.")
@click.option(ALLOW_FLAG, "allow_other_settings", is_flag=True,
              help="Replace token shards made with other documents, vocabulary, --extra-ids or --format (by default "
                   "refused: the output stays as it was, for the training runs reading it).")
@click.pass_context
def tokenize(ctx: click.Context, input_, vocab_, output, extra_ids, runner, num_threads, shard_format,
             allow_other_settings) -> None:
    """Tokenize document shards into token shards (ids with EOS, length, url), one per document shard.

    Any other option (e.g. --direct_running_mode=multi_processing --direct_num_workers=2) is passed to Beam.
    """
    quiet_engine_logs()
    from c4prep.manifest import ManifestError
    from c4prep.runner_results import JobInputError, RunnerSetupError
    from c4prep.output_settings import OtherSettingsError
    from c4prep.shards import UnsupportedUriError

    from .run_tokenize import NAMESPACE, TokenizeConfig, TokenizeError, run_tokenize
    from .train_vocab import VocabError

    refuse_unknown_options(ctx, "c4prep tokenize")
    if not output.strip():
        raise UserError(f"--output {output!r} names no folder: give one (default {DEFAULT_TOKENS})")
    config = TokenizeConfig(input=input_, vocab=vocab_, output=output, extra_ids=extra_ids, runner=runner,
                            num_threads=num_threads, format=shard_format, allow_other_settings=allow_other_settings)
    click.echo(f"Tokenizing {input_} with {vocab_} on {runner} -> {output}")
    started = time.monotonic()
    with reported_as_user_errors(TokenizeError, VocabError, OtherSettingsError, ManifestError, RunnerSetupError,
                                 JobInputError, UnsupportedUriError):
        result = run_tokenize(config, ctx.args)
    elapsed = time.monotonic() - started
    counters = result.counters.get(NAMESPACE, {})
    total = 0
    for split, stats in result.manifest.splits.items():
        tokens = counters.get(f"tokens:{split}", 0)
        total += tokens
        click.echo(f"  {split}: {stats.num_rows:,} documents, {tokens:,} tokens "
                   f"({counters.get(f'unk_tokens:{split}', 0):,} unknown), {stats.num_shards} shards")
    click.echo(f"Manifest: {output.rstrip('/')}/manifest.json, dataset card: {output.rstrip('/')}/README.md")
    click.echo(f"Done in {elapsed:.1f} s ({total / max(elapsed, 1e-9):,.0f} tokens/s).")
