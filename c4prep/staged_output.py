"""The staging protocol of every job that publishes shards (`c4prep run`, `c4prep tokenize`).

Workers write each shard into the run's staging folder with an info file beside it (:func:`write_info_file`); the
driver reads the infos back, builds the manifest and publishes it (:func:`c4prep.manifest.commit_output`).
"""
from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict

from apache_beam.io.filesystems import FileSystems

from c4prep.manifest import Manifest, ManifestError, commit_output, new_staging_uri, repair_output
from c4prep.shards import ShardInfo, atomic_output, join_uri, parse_shard_name

INFO_SUFFIX = ".info.json"


def write_info_file(directory: str, info: ShardInfo) -> None:
    """Record a written shard's stats next to it so the driver can build the manifest without reading shards."""
    with atomic_output(join_uri(directory, info.name + INFO_SUFFIX)) as stream:
        stream.write(json.dumps(asdict(info), sort_keys=True).encode("utf-8"))


class StagedOutput:
    """One run's staging folder ``uri`` inside the output folder ``output_uri``; absolute where local, as workers
    may run in other folders than the driver (a Dask cluster's), where a relative path names another folder."""

    def __init__(self, output_uri: str) -> None:
        self.output_uri = output_uri
        self.uri = new_staging_uri(output_uri if "://" in output_uri else os.path.abspath(output_uri))

    def shard_infos(self, rows_by_split: Mapping[str, int]) -> list[ShardInfo]:
        """Stats of the shards the workers wrote here, from their info files, by shard name; a :class:`ManifestError`
        when they hold other row counts than ``rows_by_split``, what the job counted as it wrote them (workers that
        wrote elsewhere, files lost): the output would lose them."""
        infos = []
        for metadata in FileSystems.match([join_uri(self.uri, "*" + INFO_SUFFIX)])[0].metadata_list:
            with FileSystems.open(metadata.path) as handle:
                infos.append(ShardInfo(**json.loads(handle.read())))
        staged = Counter()
        for info in infos:
            staged[parse_shard_name(info.name)[0]] += info.num_rows
        differing = sorted(split for split in {*staged, *rows_by_split} if staged[split] != rows_by_split.get(split, 0))
        if differing:
            split = differing[0]
            raise ManifestError(f"the job wrote {rows_by_split.get(split, 0):,} {split} rows, but its staging folder "
                                f"{self.uri} holds {staged[split]:,}: its workers wrote elsewhere or files were "
                                f"lost; {self.output_uri} was left unchanged. Give an --output that every worker "
                                "reaches by the same name (an absolute path, a bucket), and re-run")
        return sorted(infos, key=lambda info: info.name)

    def commit(self, manifest: Manifest) -> Manifest:
        """Publish the staged shards that ``manifest`` lists as the output; the published manifest."""
        return commit_output(self.output_uri, self.uri, manifest)


@contextmanager
def staged_output(output_uri: str) -> Iterator[StagedOutput]:
    """Repair ``output_uri``, then give the run a fresh staging folder in it to write, describe and commit.

    An error inside the block removes what the run left (:func:`~c4prep.manifest.repair_output`), so the published
    output stays exactly as it was, and goes on.
    """
    repair_output(output_uri)
    staging = StagedOutput(output_uri)
    try:
        yield staging
    except Exception:
        repair_output(output_uri)
        raise
