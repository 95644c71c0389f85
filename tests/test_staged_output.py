"""The staging protocol shared by `c4prep run` and `c4prep tokenize`: repair, stage, describe, commit or clean up."""
from pathlib import Path

import pyarrow as pa
import pytest

from c4prep.dataset_card import CARD_NAME
from c4prep.manifest import MANIFEST_NAME, ManifestError, build_manifest, read_manifest
from c4prep.shards import batched, shard_name, write_shard
from c4prep.staged_output import StagedOutput, staged_output, write_info_file

SCHEMA = pa.schema([pa.field("text", pa.string(), nullable=False)])


def _write_shards(staging: StagedOutput, count: int, text: str) -> None:
    """What a job's workers do: each shard with its info file."""
    for index in reversed(range(count)):
        info = write_shard(f"{staging.uri}/{shard_name('train', index, count)}", SCHEMA,
                           batched([{"text": f"{text} {index}"}], SCHEMA))
        write_info_file(staging.uri, info)


def _publish(output: Path, count: int, text: str):
    with staged_output(str(output)) as staging:
        _write_shards(staging, count, text)
        infos = staging.shard_infos({"train": count})
        return infos, staging.commit(build_manifest(SCHEMA, infos, config={}, counters={}))


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def test_what_the_block_staged_is_described_and_published(tmp_path):
    output = tmp_path / "out"
    (output / ".staging-20260101T000000Z-0123abcd").mkdir(parents=True)  # what a killed run left: repaired first
    infos, published = _publish(output, 3, "first")
    assert [info.name for info in infos] == [shard_name("train", index, 3) for index in range(3)]  # by name
    assert sorted(path.name for path in output.iterdir()) == [CARD_NAME, published.data_dir, MANIFEST_NAME]
    assert read_manifest(str(output)) == published and published.splits["train"].num_rows == 3


def test_the_staging_folder_is_absolute_and_must_hold_the_rows_the_job_wrote(tmp_path, monkeypatch):
    """Workers in another folder (a Dask cluster's) wrote a relative --output's shards there: the driver found none
    and published an empty output over a good one."""
    monkeypatch.chdir(tmp_path)
    _publish(tmp_path / "out", 2, "first")
    before = _snapshot(tmp_path / "out")
    with pytest.raises(ManifestError) as lost:
        with staged_output("out") as staging:
            assert staging.uri.startswith(f"{tmp_path}/out/.staging-")
            _write_shards(staging, 2, "second")
            staging.shard_infos({"train": 3})
    assert str(lost.value) == (
        f"the job wrote 3 train rows, but its staging folder {staging.uri} holds 2: its workers wrote elsewhere or "
        "files were lost; out was left unchanged. Give an --output that every worker reaches by the same name (an "
        "absolute path, a bucket), and re-run")
    assert _snapshot(tmp_path / "out") == before


def test_an_error_in_the_block_leaves_the_published_output_as_it_was(tmp_path):
    output = tmp_path / "out"
    _publish(output, 2, "first")
    before = _snapshot(output)
    with pytest.raises(RuntimeError, match="the job failed"):
        with staged_output(str(output)) as staging:
            _write_shards(staging, 4, "second")
            raise RuntimeError("the job failed")
    assert _snapshot(output) == before  # the failed run's staging folder is gone too
