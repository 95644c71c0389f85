"""Driver of the C4 pipeline: check the inputs, build and run the Beam job, commit shards and manifest."""
from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.portability.api import beam_runner_api_pb2

from c4prep.beam_runs import dry_run, is_dask_runner, job_pipeline, pipeline_options, run_to_completion
from c4prep.manifest import (
    DOCUMENTS,
    Manifest,
    ManifestError,
    build_manifest,
    new_staging_uri,
    output_folder,
    read_manifest,
)
from c4prep.output_settings import Content, Settings, check_published_settings
from c4prep.progress import ProgressSettings
from c4prep.runner_results import RunnerSetupError
from c4prep.schemas import DOCUMENT_SCHEMA
from c4prep.shard_formats import check_format
from c4prep.shards import ShardInfo, absolute_input, join_uri, parse_shard_name, shard_name, write_shard
from c4prep.staged_output import staged_output

from . import c4_rules
from .beam_c4 import SPLITS, DedupUrls, JoinWebtextUrls, ReadInputFiles, WriteDocumentShards, apply_rules
from .beam_dedup import DEFAULT_CLAIM_BUCKETS, claim_buckets, dedup_transform
from .beam_near_dedup import NearDedup
from .funnel import Funnel, build_funnel, input_files_text, input_problem_counts
from .funnel_plot import PLOT_NAME, render_funnel_png, write_funnel_plot
from .input_selection import (
    InputError,
    check_beam_filesystem,
    expand_folders,
    listed_paths,
    matched_files,
    pattern_reading,
)
from .list_files import LIST_READ_ERRORS, NotUtf8Text, list_sha256, open_list_file
from .variants import BUNDLED, CorpusVariant, load_variant


class EmptyRunError(InputError):
    """A run kept no page: it refuses to publish an empty corpus unless `allow_empty` (message says why)."""


class DamagedRunError(InputError):
    """A run read less than the one that made the output it would replace (more bad input, or fewer pages from the same
    input): it refuses to publish over it unless `allow_damaged` (message says why)."""


class DataLossError(RuntimeError):
    """Pages or dedup records went missing, or were duplicated, between two pipeline steps (`Funnel.losses`);
    nothing was written."""


@dataclass
class RunConfig:
    """Everything that decides what a run produces (recorded in the manifest)."""

    output: str
    inputs: list[str] = field(default_factory=list)
    path_list: str | None = None
    path_prefix: str = ""
    num_shards: int | None = None  # None: TFDS rule on each split's size
    runner: str = "DirectRunner"
    variant: CorpusVariant = field(default_factory=lambda: load_variant("en"))
    allow_empty: bool = False  # publish even when no page is kept (otherwise refused: the output stays as it was)
    allow_damaged: bool = False  # replace an output whose run read more (otherwise refused, as above)
    format: str = "arrow"  # shard file format: one of c4prep.shard_formats.FORMATS
    allow_other_settings: bool = False  # replace an output made with other settings (otherwise refused, as above)

    def __post_init__(self) -> None:
        check_format(self.format)
        self.inputs = [absolute_input(pattern) for pattern in self.inputs]
        self.path_list = self.path_list and absolute_input(self.path_list)


@dataclass
class RunResult:
    manifest: Manifest
    funnel: Funnel
    funnel_plot: str  # URI of funnel.png beside the manifest


BUNDLED_SAMPLE = "data/sample/CC-MAIN-2019-30-sample-a.warc.wet.gz"  # in the package c4prep.pipelines


def bundled_sample() -> str:
    """Path of the real WET sample shipped with the package (used when no input is given)."""
    return str(resources.files("c4prep.pipelines").joinpath(BUNDLED_SAMPLE))


def one_partition_per_file(files: list[str], beam_args: list[str]) -> list[str]:
    """For the DaskRunner: `--dask_npartitions` = the input file count added to the Beam options, unless they set
    the partitions already (the job then reads each file of `check_inputs` as its own pattern).

    Beam's DaskRunner makes its partitions from the `Create` of the input patterns and never repartitions
    (`Reshuffle` is a no-op there), so one glob ran the whole input as one task on one worker (100,500 pages: the
    worker went over its memory limit and was restarted until the job was killed)."""
    if any(arg.startswith(("--dask_npartitions", "--dask_partition_size")) for arg in beam_args):
        return beam_args
    return [*beam_args, f"--dask_npartitions={len(files)}"]


def check_inputs(config: RunConfig) -> list[str]:
    """Fail fast, with one clear line, on input the job could not read (`input_selection`): the files the input
    patterns match, or the paths the path list names (:func:`url_lists_sha256` checks the variant's URL lists)."""
    if config.path_list and config.inputs:
        raise InputError("give --input or --input-list, not both: a run reads either its patterns or its list")
    if config.path_prefix and not config.path_list:
        raise InputError("--input-prefix goes before each path of --input-list: give --input-list FILE too, or drop "
                         "--input-prefix")
    if config.path_list:
        return listed_paths(config.path_list, config.path_prefix)
    files = matched_files(config.inputs)
    output = absolute_input(config.output).rstrip("/") + "/"
    inside = [path for path in files if absolute_input(path).startswith(output)]
    if inside:
        raise InputError(f"--output {config.output} is inside the input: the run would read its own output "
                         f"({inside[0]}); give an --output outside the input folders")
    reading = pattern_reading(config.output, config.format, config.inputs)
    if reading is not None:
        raise InputError(f"--output {config.output} is inside the input: --input {reading} would read this run's "
                         "output in the next run; give an --output outside the input folders")
    return files


def check_publishable(funnel: Funnel, config: RunConfig) -> None:
    """A :class:`DataLossError` when pages went missing (or were duplicated) between steps; an
    :class:`EmptyRunError` when the run kept no page and `allow_empty` was not given."""
    if funnel.losses:
        raise DataLossError(
            f"data went missing between pipeline steps on the {config.runner} runner ({'; '.join(funnel.losses)}), "
            f"so nothing was written to {config.output}. This is a runner fault, not an input problem: run again, "
            "and with the DirectRunner use fewer --direct_num_workers (its multi_processing mode lost a whole "
            "worker's share of a stage at 20 workers in c4prep's tests); on Dask's disk shuffle (--dask_shuffle=disk, "
            "or auto where the workers share a folder), a worker lost during a shuffle has its share counted twice "
            "(--dask_shuffle=tasks recovers from it).")
    if funnel.pages_out or config.allow_empty:
        return
    problems = input_problem_counts(funnel) or "none"
    if funnel.pages_in == 0:
        why = f"read no valid record from {input_files_text(funnel)} (bad input: {problems}; the log above names each)"
    else:
        drops = {f"{stage.namespace} {name}": count for stage in funnel.stages for name, count in stage.dropped.items()}
        top = ", ".join(f"{name} {count:,}" for name, count in sorted(drops.items(), key=lambda item: -item[1])[:3])
        why = f"kept none of the {funnel.pages_in:,} pages it read (dropped most: {top})"
    raise EmptyRunError(f"the run {why}, so it did not publish an empty corpus: {config.output} is unchanged. "
                        "Check --input, or pass --allow-empty to publish an empty corpus")


def check_no_more_damage(funnel: Funnel, config: RunConfig, hashes: dict[str, Any]) -> None:
    """A :class:`DamagedRunError`, unless `allow_damaged`, when the run read less than the run that made the output
    it would replace: it skipped bad input and more problems or fewer pages (a cut download is one problem however
    much it loses), or it read fewer pages from the same input (a file gone from an --input folder, a file cut
    exactly between gzip members, which reads as intact): a damaged copy of the input would replace a corpus made
    from an intact one. ``hashes`` are this run's :func:`input_hashes`."""
    if config.allow_damaged:
        return
    try:
        published = read_manifest(config.output)
    except ManifestError:  # nothing published, or a manifest that cannot be read: nothing good to keep
        return
    made_by = published.extra.get("funnel", {})
    before, pages_before = sum(made_by.get("input_problems", {}).values()), made_by.get("pages_in", 0)
    skipped = sum(funnel.input_problems.values())
    if skipped:
        if skipped <= before and funnel.pages_in >= pages_before:
            return
        read = f"skipped bad input ({input_problem_counts(funnel)}; the log above names each) and read"
        made = f"skipped {before or 'none'} and read"
        fix = "Replace the damaged input"
    else:
        wanted = _settings({**asdict(config), **hashes})
        same_input = _input_settings(_recorded_settings(published.config, config, hashes)) == _input_settings(wanted)
        if funnel.pages_in >= pages_before or not same_input:
            return
        read, made = "found no bad input but read", "from the same input read"
        fix = (f"Restore the input (input files: {funnel.input_files:,} now, {made_by.get('input_files', 0):,} then; a "
               "file gone or cut short?)")
    documents = sum(split.num_rows for split in published.splits.values())
    raise DamagedRunError(
        f"the run {read} {funnel.pages_in:,} pages, where the run that made {config.output} {made} {pages_before:,}: "
        f"it kept {funnel.pages_out:,} documents, the output holds {documents:,}, so it did not replace it: "
        f"{config.output} is unchanged. {fix}, give another --output, or pass --allow-damaged to publish over it")


_VARIANT_OPTIONS = {"name": "--variant", "dedup": "--dedup", "near_dedup": "--near-dedup",
                    "webtext_urls": "--webtext-urls"}  # the variant's settings `c4prep run` sets by an option


def _compared_inputs(patterns: list[str]) -> list[str]:
    """``--input`` patterns as two runs compare them: each once, sorted, the bundled sample by name (its path is the
    install's)."""
    return sorted({f"the bundled sample ({Path(pattern).name})" if pattern.endswith(BUNDLED_SAMPLE) else pattern
                   for pattern in patterns})


LISTING_FIELD = "path_list_sha256"  # in a documents manifest's config: what its --input-list named, by hash


def listing_sha256(config: RunConfig, files: list[str]) -> str | None:
    """The SHA-256 of the paths ``config.path_list`` names, one per line, from ``files`` as :func:`check_inputs`
    returned them: without ``--input-prefix`` (compared on its own), else made absolute (a relative path names another
    file from another working folder); None without a list."""
    if not config.path_list:
        return None
    paths = [path.removeprefix(config.path_prefix) if config.path_prefix else absolute_input(path) for path in files]
    return hashlib.sha256("\n".join(paths).encode()).hexdigest()


URL_LISTS_FIELD = "webtext_urls_sha256"  # in a documents manifest's config: its --webtext-urls files, by hash


def url_lists_sha256(config: RunConfig) -> list[str]:
    """The SHA-256 of each --webtext-urls file (decompressed as its name says, as the job reads it), read once here:
    an :class:`InputError` when one does not exist, is a folder, is not UTF-8 text (the job would fail on it) or
    names no URL (the job would keep no page)."""
    digests = []
    for url_list in config.variant.webtext_urls:
        check_beam_filesystem(url_list, "--webtext-urls")
        if not FileSystems.exists(url_list):
            raise InputError(f"--webtext-urls {url_list} does not exist: give a file of URLs, one per line")
        try:
            with open_list_file(url_list) as urls:
                digest = list_sha256(urls)
        except IsADirectoryError:
            raise InputError(f"--webtext-urls {url_list} is a folder: give a file of URLs, one per line") from None
        except LIST_READ_ERRORS as error:
            raise InputError(f"cannot read --webtext-urls {url_list} ({error or type(error).__name__}): give a text "
                             "file of URLs, one per line (gzipped when its name ends in .gz)") from None
        except NotUtf8Text as error:
            raise InputError(f"--webtext-urls {url_list} is not UTF-8 text (line {error.line:,}, byte {error.byte:,}): "
                             "give a UTF-8 text file of URLs, one per line") from None
        if not digest.names_items:
            raise InputError(f"--webtext-urls {url_list} names no URL: give a file of URLs, one per line")
        digests.append(digest.sha256)
    return digests


REALNEWS_DOMAINS_FIELD = "realnews_domains_sha256"  # in a documents manifest's config: a variant's own domain map


def realnews_domains_sha256(config: RunConfig) -> str | None:
    """The SHA-256 of the variant's RealNews domain file (`load_variant` checked it); None for the bundled map or
    none."""
    path = config.variant.realnews_domains
    if path in (None, BUNDLED):
        return None
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as error:
        raise InputError(f"cannot read the variant's realnews_domains {path}: {error.strerror or error}") from None


def input_hashes(config: RunConfig, files: list[str]) -> dict[str, Any]:
    """What a documents manifest's config records of this run's lists beside their paths, to compare them by content:
    :func:`listing_sha256`, :func:`url_lists_sha256` and :func:`realnews_domains_sha256`."""
    return {LISTING_FIELD: listing_sha256(config, files), URL_LISTS_FIELD: url_lists_sha256(config),
            REALNEWS_DOMAINS_FIELD: realnews_domains_sha256(config)}


def _path_list(config: dict[str, Any]) -> Content | str | None:
    """``--input-list`` as two runs compare it: by the paths it names where the manifest records their hash (an edited
    list is another input, the same list moved is not), else by its path."""
    path_list, digest = config.get("path_list"), config.get(LISTING_FIELD)
    return Content(path_list, "SHA-256 of its paths", digest) if path_list and digest else path_list


def _url_lists(config: dict[str, Any]) -> list[Content | str]:
    """``--webtext-urls`` as two runs compare them: by each file's content where the manifest records its hash (an
    edited list is another setting, the same list named otherwise is not), else by their paths."""
    url_lists, digests = (config.get("variant") or {}).get("webtext_urls") or [], config.get(URL_LISTS_FIELD)
    return [Content(given, "SHA-256", digest) for given, digest in zip(url_lists, digests)] if digests else url_lists


def _realnews_domains(config: dict[str, Any]) -> Content | str | None:
    """A variant's ``realnews_domains`` as two runs compare it: a file by its content where the manifest records its
    hash (an edited map is another setting, the same map moved is not), else as named ('bundled')."""
    domains, digest = (config.get("variant") or {}).get("realnews_domains"), config.get(REALNEWS_DOMAINS_FIELD)
    return Content(domains, "SHA-256", digest) if digest else domains


def _settings(config: dict[str, Any]) -> Settings:
    """What decides a corpus, from a documents manifest's ``config`` (a published one, or this run's): the options of
    `c4prep run --help` in their order, then the variant's other settings."""
    variant = {**(config.get("variant") or {}), "webtext_urls": _url_lists(config),
               "realnews_domains": _realnews_domains(config)}
    return [("--input", _compared_inputs(config.get("inputs") or [])), ("--input-list", _path_list(config)),
            ("--input-prefix", config.get("path_prefix")), ("--num-shards", config.get("num_shards") or "auto"),
            ("--format", config.get("format")),
            *((option, variant.get(key)) for key, option in _VARIANT_OPTIONS.items()),
            *((f"the variant's {key}", value) for key, value in sorted(variant.items())
              if key not in _VARIANT_OPTIONS and key != "description")]


def _inputs_recorded_as_given(made: dict[str, Any]) -> bool:
    """Whether a documents manifest's ``config`` names a local input relative to the working folder (as manifests
    did before inputs were recorded absolute)."""
    paths = [*made.get("inputs", []), *([made["path_list"]] if made.get("path_list") else [])]
    return any("://" not in path and not os.path.isabs(path) for path in paths)


def check_replaceable(config: RunConfig, hashes: dict[str, Any]) -> None:
    """An :class:`~c4prep.output_settings.OtherSettingsError` when ``config.output`` holds a corpus made with other
    inputs or settings than this run's (a mistyped --input would replace it with a smaller one), unless
    ``config.allow_other_settings``; ``hashes`` are this run's :func:`input_hashes`."""
    if config.allow_other_settings:
        return
    check_published_settings(config.output, "a corpus",
                             lambda published: _recorded_settings(published.config, config, hashes),
                             _settings({**asdict(config), **hashes}))


def _recorded_settings(made: dict[str, Any], config: RunConfig, hashes: dict[str, Any]) -> Settings:
    """The settings a published corpus's manifest ``config`` recorded, as this run's compare with them: inputs
    recorded relative to a folder the manifest does not name are taken as this run's, lists recorded before they
    were recorded by hash are compared by their paths."""
    if _inputs_recorded_as_given(made):
        made = {**made, "inputs": config.inputs, "path_list": config.path_list}
    if not made.get(LISTING_FIELD) and made.get("path_list") == config.path_list:
        made = {**made, LISTING_FIELD: hashes[LISTING_FIELD]}
    if not made.get(URL_LISTS_FIELD) and (made.get("variant") or {}).get("webtext_urls") == config.variant.webtext_urls:
        made = {**made, URL_LISTS_FIELD: hashes[URL_LISTS_FIELD]}
    domains = (made.get("variant") or {}).get("realnews_domains")
    if (not made.get(REALNEWS_DOMAINS_FIELD) and hashes[REALNEWS_DOMAINS_FIELD]
            and os.path.realpath(domains or "") == config.variant.realnews_domains):  # recorded as given before
        made = {**made, REALNEWS_DOMAINS_FIELD: hashes[REALNEWS_DOMAINS_FIELD]}
    return _settings(made)


def _input_settings(settings: Settings) -> Settings:
    """The settings that name the input: --input, --input-list and --input-prefix."""
    return [(option, value) for option, value in settings if option.startswith("--input")]


def build_c4_pipeline(pipeline: beam.Pipeline, config: RunConfig, staging_dir: str,
                      input_files: list[str] | None = None, claim_buckets: int = DEFAULT_CLAIM_BUCKETS):
    """Apply the variant's stages in the reference order; returns the written shard descriptions. `input_files`
    replaces the input patterns (see `one_partition_per_file`); `claim_buckets` spreads the text dedup's claims
    (`beam_dedup.claim_buckets` of the input's size)."""
    variant = config.variant
    page_rules = [c4_rules.parse_record, c4_rules.check_length]
    if variant.realnews_domains:
        path = None if variant.realnews_domains == BUNDLED else variant.realnews_domains
        page_rules.append(functools.partial(c4_rules.check_realnews_domain,
                                            allowed=c4_rules.load_realnews_domains(path)))
    patterns = input_files or expand_folders(list(dict.fromkeys(config.inputs)))  # a pattern given twice: read once
    may_repeat = not input_files and (config.path_list is not None or len(patterns) > 1)  # two patterns, one file
    pages = (
        pipeline
        | "ReadInput" >> ReadInputFiles(patterns, config.path_list, config.path_prefix, may_repeat)
        | "PageRules" >> apply_rules(*page_rules)
    )
    # Cleaning rides in the URL dedup's shuffle unless the WebText join must come between them.
    clean_in_dedup = variant.clean and not variant.webtext_filter
    pages = pages | "DedupUrls" >> DedupUrls(clean=clean_in_dedup)
    if variant.webtext_filter:
        pages = pages | "JoinWebtextUrls" >> JoinWebtextUrls(variant.webtext_urls)
    if variant.clean and not clean_in_dedup:
        pages = pages | "CleanPage" >> apply_rules(c4_rules.clean_page)
    text_dedup = dedup_transform(variant.dedup, c4_rules.MIN_NUM_SENTENCES if variant.clean else 0, claim_buckets)
    if text_dedup is not None:
        pages = pages | "DedupText" >> text_dedup
    pages = pages | "TextRules" >> apply_rules(c4_rules.check_english,
                                               *([c4_rules.check_badwords] if variant.badwords else []))
    if variant.near_dedup:  # last, so that every near-duplicate cluster keeps a page that is really published
        pages = pages | "NearDedup" >> NearDedup(variant.near_dedup_params)
    return pages | "WriteShards" >> WriteDocumentShards(staging_dir, config.num_shards, config.format)


def complete_empty_shards(staging_dir: str, infos: list[ShardInfo], shard_format: str) -> list[ShardInfo]:
    """Write the empty shards no document hashed to, so every split with documents has its full `-of-N` set; a split
    without documents gets no shard (the manifest lists it with 0 rows)."""
    counts = {}
    for info in infos:
        split, _, count = parse_shard_name(info.name)
        counts[split] = count
    written = {info.name for info in infos}
    missing = [name for split, count in counts.items() for index in range(count)
               if (name := shard_name(split, index, count, shard_format)) not in written]
    infos = [*infos, *(write_shard(join_uri(staging_dir, name), DOCUMENT_SCHEMA, []) for name in missing)]
    return sorted(infos, key=lambda info: info.name)


def check_runner(config: RunConfig) -> None:
    """Fail fast on a runner that cannot run this configuration."""
    if is_dask_runner(config.runner) and config.num_shards is None:
        raise RunnerSetupError("DaskRunner needs a fixed --num-shards N: Beam's DaskRunner would recompute the whole "
                               "pipeline inside every task to find the automatic shard count")


def dry_run_c4(config: RunConfig, beam_args: list[str] | None = None) -> beam_runner_api_pb2.Pipeline:
    """Build and validate the job for its runner without running it or touching input and output; the job graph."""
    check_runner(config)
    options = pipeline_options(config.runner, list(beam_args or []))
    with job_pipeline(options) as pipeline:
        build_c4_pipeline(pipeline, config, new_staging_uri(config.output))
        return dry_run(pipeline, options)


def run_c4(config: RunConfig, beam_args: list[str] | None = None,
           progress: ProgressSettings | None = None) -> RunResult:
    """Run the pipeline to completion and atomically replace `config.output` with its shards and manifest (unless it
    holds a corpus made with other inputs or settings: :func:`check_replaceable`); then write the funnel plot beside
    the manifest. With ``progress``, a progress line on stderr while the job runs.

    The plot is drawn before the commit (a plot that cannot be drawn leaves the output as it was) and written right
    after it: a driver killed between the two leaves the previous run's plot beside the new manifest until the next
    run. The plot is not a shard: the manifest and the dataset card do not list it."""
    check_runner(config)
    files = check_inputs(config)
    beam_args, input_files = list(beam_args or []), None
    if is_dask_runner(config.runner) and not config.path_list:
        input_files, beam_args = files, one_partition_per_file(files, beam_args)
    options = pipeline_options(config.runner, beam_args)
    hashes = input_hashes(config, files)
    with output_folder(config.output, DOCUMENTS, files=[PLOT_NAME]):
        check_replaceable(config, hashes)
        with job_pipeline(options) as pipeline, staged_output(config.output) as staging:
            build_c4_pipeline(pipeline, config, staging.uri, input_files, claim_buckets(len(files)))
            counters = run_to_completion(pipeline, options, progress)
            funnel = build_funnel(counters)
            check_publishable(funnel, config)
            check_no_more_damage(funnel, config, hashes)
            infos = complete_empty_shards(staging.uri, staging.shard_infos(funnel.pages_out_by_split), config.format)
            manifest = build_manifest(
                DOCUMENT_SCHEMA,
                infos,
                config={**asdict(config), **hashes, "rules": "TFDS c4 3.1.0"},
                counters=counters,
                extra={"funnel": funnel.to_dict()},
                splits=SPLITS,
                shard_format=config.format,
            )
            plot = render_funnel_png(funnel)
            published = staging.commit(manifest)
    return RunResult(published, funnel, write_funnel_plot(config.output, plot))
