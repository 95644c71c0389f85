"""`c4prep run`: the C4 corpus job."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

import click
from click.core import ParameterSource

from c4prep.output_settings import ALLOW_FLAG
from c4prep.shard_formats import FORMATS
from c4prep.shards import MAX_SHARDS
from c4prep.user_errors import (
    UserError,
    quiet_engine_logs,
    refuse_unknown_options,
    reported_as_user_errors,
)

if TYPE_CHECKING:
    from .run_c4 import RunConfig

DEFAULT_OUTPUT = "c4prep_data/c4/en"  # later stages read from here by default


def _parse_progress_interval(value: str) -> float:
    from c4prep.progress import check_interval

    try:
        return check_interval(float(value))
    except ValueError:
        raise UserError(f"--progress-interval {value!r} is not a number of seconds >= 0 (0 turns progress off)") \
            from None


def _parse_num_shards(value: str) -> int | None:
    if value == "auto":
        return None
    if value.isascii() and value.isdigit() and 0 < int(value) <= MAX_SHARDS:
        return int(value)
    raise UserError(f"--num-shards {value!r} is neither 'auto' nor an integer from 1 to {MAX_SHARDS:,} (five digits "
                    "in shard names)")


@click.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.option("--input", "inputs", multiple=True, metavar="PATTERN",
              help="Input file, glob or folder (every file below it) (.warc.wet[.gz], .wet[.gz], .jsonl[.gz], "
                   ".json[.gz], .txt[.gz]); repeatable. Default: the bundled Common Crawl sample.")
@click.option("--input-list", metavar="FILE", help="A file (optionally .gz) listing one input path per line, "
              "like Common Crawl's wet.paths.gz.")
@click.option("--input-prefix", default="", metavar="PREFIX",
              help="Prepended to every path of --input-list (e.g. s3://commoncrawl/).")
@click.option("--output", default=DEFAULT_OUTPUT, show_default=True, help="Output folder (local, gs://, s3://).")
@click.option("--runner", default="DirectRunner", show_default=True,
              help="Beam runner: DirectRunner, DataflowRunner, FlinkRunner, SparkRunner, ...")
@click.option("--num-shards", default="auto", show_default=True,
              help="Shards per split, or 'auto' for the TFDS rule (64 MiB to 1 GiB per shard).")
@click.option("--format", "shard_format", type=click.Choice(FORMATS), default="arrow", show_default=True,
              help="Shard files: Arrow IPC (memory-mappable), Parquet (zstd) or gzipped JSON Lines.")
@click.option("--variant", default="en", show_default=True,
              help="Corpus variant: en, en.noclean, en.noblocklist, realnewslike, webtextlike, or a YAML file path.")
@click.option("--dedup", type=click.Choice(["sentences", "lines", "none"]),
              help="Override the variant's text dedup: sentences (T5 paper), lines (released C4), none.")
@click.option("--near-dedup/--no-near-dedup", default=None,
              help="Override the variant's MinHash near-duplicate removal (an extra stage beyond C4).")
@click.option("--webtext-urls", multiple=True, metavar="FILE",
              help="URL list file (one URL per line) for the webtextlike variant; repeatable.")
@click.option("--allow-empty", is_flag=True,
              help="Publish an empty corpus (by default a run that keeps no page refuses and leaves the output).")
@click.option("--allow-damaged", is_flag=True,
              help="Replace the output even when this run read less than the run that made it: more bad input, or "
                   "fewer pages from the same input (by default refused: the output stays as it was).")
@click.option(ALLOW_FLAG, "allow_other_settings", is_flag=True,
              help="Replace a corpus made with other inputs, --num-shards, --format or variant settings (by default "
                   "refused: the output stays as it was, for the vocabulary and token shards made from it).")
@click.option("--progress-interval", default="30", show_default=True, metavar="SECONDS",
              help="Seconds between progress lines on stderr when it is not a terminal (a terminal's line is "
                   "redrawn every second); 0 turns progress off.")
@click.option("--no-progress", is_flag=True, help="No progress line (same as --progress-interval 0).")
@click.pass_context
def run(ctx: click.Context, inputs, input_list, input_prefix, output, runner, num_shards, shard_format, variant,
        dedup, near_dedup, webtext_urls, allow_empty, allow_damaged, allow_other_settings, progress_interval,
        no_progress) -> None:
    """Build a C4 corpus (default: `en`): WET in, cleaned shards (Arrow, Parquet or JSON Lines) and a dataset card
    out.

    While it runs, a progress line on stderr shows the pages read and kept so far, the read rate and each stage's
    drops, as far as the runner reports them (live on the DirectRunner; see the README); the last line is the run's
    total. A funnel plot, funnel.png, is written beside the manifest.

    Any other option (e.g. --project, --region, --temp_location, --direct_num_workers) is passed to Beam.
    With --dry_run=True the job is built and validated for the runner but not run; --dataflow_job_file=FILE then
    receives its job graph.
    """
    quiet_engine_logs()
    from c4prep.dask_warm_up import dask_cluster, warm_up_cluster

    cluster = dask_cluster(runner, ctx.args)
    if cluster:  # the cluster imports the job's modules while this process imports its own
        warm_up_cluster(cluster)
    from apache_beam.options.pipeline_options import DebugOptions, PipelineOptions

    from c4prep.beam_runs import is_dry_run
    from c4prep.manifest import ManifestError
    from c4prep.output_settings import OtherSettingsError
    from c4prep.progress import ProgressSettings
    from c4prep.runner_results import JobInputError, LostWorkerError, RunnerSetupError
    from c4prep.shards import UnsupportedUriError

    from .funnel import format_funnel, format_input_problems, format_progress
    from .run_c4 import DataLossError, InputError, RunConfig, bundled_sample, run_c4
    from .variants import VariantError, load_variant

    refuse_unknown_options(ctx, "c4prep run")
    if not output.strip():
        raise UserError(f"--output {output!r} names no folder: give one (default {DEFAULT_OUTPUT})")
    if any(not pattern.strip() for pattern in inputs):
        raise UserError("--input '' names no file (an unset shell variable?): give a file, glob or folder")
    if not inputs and not input_list:
        inputs = (bundled_sample(),)
        click.echo(f"No --input given: using the bundled sample {inputs[0]}")
    overrides = {"dedup": dedup, "near_dedup": near_dedup, "webtext_urls": list(webtext_urls) or None}
    overrides = {key: value for key, value in overrides.items() if value is not None}
    with reported_as_user_errors(VariantError):
        corpus_variant = load_variant(variant, overrides)
    if no_progress and ctx.get_parameter_source("progress_interval") is not ParameterSource.DEFAULT:
        raise UserError(f"--no-progress turns progress off, --progress-interval {progress_interval} sets it: give one")
    interval = 0.0 if no_progress else _parse_progress_interval(progress_interval)
    config = RunConfig(output=output, inputs=list(inputs), path_list=input_list, path_prefix=input_prefix,
                       num_shards=_parse_num_shards(num_shards), runner=runner, variant=corpus_variant,
                       allow_empty=allow_empty, allow_damaged=allow_damaged, format=shard_format,
                       allow_other_settings=allow_other_settings)
    beam_options = PipelineOptions(ctx.args)
    if is_dry_run(beam_options):
        with reported_as_user_errors(RunnerSetupError):
            _dry_run(config, ctx.args, beam_options.view_as(DebugOptions).dataflow_job_file)
        return
    click.echo(f"Running the C4 {corpus_variant.name} pipeline on {runner} -> {output}")
    started = time.monotonic()
    with reported_as_user_errors(InputError, ManifestError, RunnerSetupError, DataLossError, JobInputError,
                                 LostWorkerError, UnsupportedUriError, OtherSettingsError):
        result = run_c4(config, ctx.args, ProgressSettings(format_progress, interval) if interval else None)
    elapsed = time.monotonic() - started
    click.echo("\n" + format_funnel(result.funnel))
    manifest = result.manifest
    click.echo(f"\nWrote {len(manifest.shards)} shards to {output}:")
    for split, stats in manifest.splits.items():
        click.echo(f"  {split}: {stats.num_rows:,} documents, {stats.num_bytes:,} bytes, {stats.num_shards} shards")
    click.echo(f"Manifest: {output.rstrip('/')}/manifest.json, dataset card: {output.rstrip('/')}/README.md, "
               f"funnel plot: {result.funnel_plot}")
    click.echo(f"Done in {elapsed:.1f} s ({result.funnel.pages_in / max(elapsed, 1e-9):,.0f} raw pages/s).")
    problems = format_input_problems(result.funnel)
    if problems:
        click.echo(f"Warning: {problems}", err=True)


def _dry_run(config: RunConfig, beam_args: list[str], job_file: str | None) -> None:
    """Build and validate the job without running it; report its size and write its graph to `job_file`."""
    from pathlib import Path

    from google.protobuf import json_format

    from .run_c4 import dry_run_c4

    graph = json_format.MessageToJson(dry_run_c4(config, beam_args), sort_keys=True)
    click.echo(f"Dry run on {config.runner}: the job was built and validated; nothing ran, input and output were "
               f"not touched. Job graph: {len(graph.encode('utf-8')):,} bytes of JSON.")
    if job_file:
        Path(job_file).write_text(graph, encoding="utf-8")
        click.echo(f"Job graph written to {job_file}")
