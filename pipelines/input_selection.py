"""What a corpus run reads: input patterns, folders and path lists, checked before the job starts.

Each check fails with one :class:`InputError` line that names the option and says what to do: a pattern that matches
nothing, a path with no Beam filesystem, a path list that is not a readable list of paths.
"""
from __future__ import annotations

import os
import re

from apache_beam.io.filesystem import FileSystem
from apache_beam.io.filesystems import FileSystems

from c4prep.shards import absolute_input, join_uri, shard_name

from .list_files import LIST_READ_ERRORS, list_item, open_list_file


class InputError(ValueError):
    """The user's input selection cannot be read (message says what and how to fix it)."""


def expand_folders(patterns: list[str]) -> list[str]:
    """Input patterns with each folder (a local folder, or any pattern ending in '/') standing for every file below
    it, recursively."""
    return [join_uri(pattern, "**") if pattern.endswith("/") or os.path.isdir(pattern) else pattern
            for pattern in patterns]


def check_beam_filesystem(path: str, option: str) -> None:
    """An :class:`InputError` when no Beam filesystem installed here reads ``path``'s scheme (``https://``, a
    misspelt ``gs:/``, ``gs://`` without ``apache-beam[gcp]``)."""
    try:
        FileSystems.get_filesystem(path)
    except ValueError:
        schemes = sorted(f"{scheme}://" for cls in FileSystem.get_all_subclasses() if (scheme := cls.scheme()))
        scheme = FileSystems.get_scheme(path)
        web = " (Beam has no HTTP filesystem: Common Crawl's files are also at s3://commoncrawl/)" \
            if scheme in ("http", "https") else ""
        raise InputError(f"{option} {path}: no Beam filesystem here reads {scheme}:// paths{web}; it reads local "
                         f"paths and {', '.join(schemes)} (gs:// needs apache-beam[gcp], s3:// apache-beam[aws])") \
            from None


def matched_files(patterns: list[str]) -> list[str]:
    """The files the ``--input`` patterns match (a folder: every file below it), sorted and each once; an
    :class:`InputError` naming the first pattern that matches nothing."""
    if not patterns:
        raise InputError("no input given: pass --input PATTERN (repeatable) or --input-list FILE")
    files = set()
    for pattern in expand_folders(patterns):
        check_beam_filesystem(pattern, "--input")
        matched = FileSystems.match([pattern])[0].metadata_list
        if not matched:
            raise InputError(f"input not found: {pattern!r} matches no file; check the path or glob (a folder "
                             "of a remote filesystem ends in '/')")
        files.update(metadata.path for metadata in matched)
    return sorted(files)


def listed_paths(path_list: str, prefix: str = "") -> list[str]:
    """The paths ``path_list`` names, one per line (blank lines skipped), each after ``prefix``: read here to check
    them, and again by the job's workers. An :class:`InputError` when the list is not text (decompressed as its
    name says, like Common Crawl's ``wet.paths.gz``), names no path, names a path no filesystem reads, or its first
    path does not exist (a WET file or a wrong prefix given as the list). Later missing paths are the job's
    ``missing_file`` input problems."""
    check_beam_filesystem(path_list, "--input-list")
    if not FileSystems.match([path_list])[0].metadata_list:
        raise InputError(f"--input-list {path_list} does not exist")
    try:
        with open_list_file(path_list) as listing:
            text = listing.read().decode("utf-8")
    except IsADirectoryError:
        raise InputError(f"--input-list {path_list} is a folder: give a file with one input path per line "
                         "(or the folder as --input)") from None
    except UnicodeDecodeError:
        raise InputError(f"--input-list {path_list} is not a text file of input paths, one per line") from None
    except LIST_READ_ERRORS as error:
        raise InputError(f"cannot read --input-list {path_list} ({error or type(error).__name__}): give a text file "
                         "of input paths, one per line (gzipped when its name ends in .gz)") from None
    paths = [prefix + item for item in map(list_item, text.splitlines()) if item]
    if not paths:
        raise InputError(f"--input-list {path_list} names no path: give one input path per line")
    where = f"a path of --input-list {path_list}:"
    check_beam_filesystem(paths[0], where)
    if not FileSystems.exists(paths[0]):
        with_prefix = f" (with --input-prefix {prefix!r})" if prefix else ""
        raise InputError(f"the first path that --input-list {path_list} names{with_prefix} does not exist: "
                         f"{paths[0]!r}; is it a list of input paths, one per line?")
    for scheme_example in {FileSystems.get_scheme(path): path for path in paths}.values():
        check_beam_filesystem(scheme_example, where)
    return paths


def pattern_reading(output: str, shard_format: str, patterns: list[str]) -> str | None:
    """The first ``--input`` pattern (a folder: every file below it) that would match a file the run writes into
    ``output`` (its manifest, or a shard in a data folder), or None: what a later run would read back as input."""
    output = absolute_input(output)
    written = [join_uri(output, "manifest.json"),
               join_uri(output, "data-00000000T000000Z-00000000", shard_name("train", 0, 1, shard_format))]
    for pattern, expanded in zip(patterns, expand_folders(patterns)):
        matches = re.compile(FileSystem.translate_pattern(absolute_input(expanded))).match
        if any(matches(path) for path in written):
            return pattern
    return None
