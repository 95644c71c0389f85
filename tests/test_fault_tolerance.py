"""Runs killed midway (SIGKILL, in a child process) leave the previous output or an unpublished one, never partial
shards among the published files, and a re-run produces the same final shards as an uninterrupted run."""
import hashlib
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from c4prep.manifest import ManifestError, read_manifest
from c4prep.pipelines.run_c4 import RunConfig, run_c4
from c4prep.shards import is_temp_name

SAMPLE_NAME = "CC-MAIN-2019-30-sample-a.warc.wet.gz"
NUM_SHARDS = 4

# A worker dies while writing its second shard: half a temporary file is on disk when the process is killed.
DIE_WHILE_WRITING_A_SHARD = """
import os, signal, sys
from c4prep.pipelines import beam_c4
from c4prep.pipelines.run_c4 import RunConfig, run_c4
from c4prep.shards import atomic_output

real_write_shard, written = beam_c4.write_shard, []

def write_shard_then_die(uri, schema, batches):
    if written:
        with atomic_output(uri) as stream:
            stream.write(b"ARROW1 half a shard")
            stream.flush()
            os.kill(os.getpid(), signal.SIGKILL)
    written.append(uri)
    return real_write_shard(uri, schema, batches)

beam_c4.write_shard = write_shard_then_die
run_c4(RunConfig(output=sys.argv[1], inputs=[sys.argv[2]], num_shards=int(sys.argv[3]), allow_other_settings=True))
"""

# The driver dies while publishing: the new shards are moved into their data folder, the manifest is not written.
DIE_WHILE_COMMITTING = """
import os, signal, sys
from c4prep import manifest
from c4prep.pipelines.run_c4 import RunConfig, run_c4

manifest.write_manifest = lambda *args: os.kill(os.getpid(), signal.SIGKILL)
run_c4(RunConfig(output=sys.argv[1], inputs=[sys.argv[2]], num_shards=int(sys.argv[3]), allow_other_settings=True))
"""


def _run_and_get_killed(script: str, output: Path, sample: Path, num_shards: int) -> None:
    done = subprocess.run([sys.executable, "-c", script, str(output), str(sample), str(num_shards)],
                          capture_output=True, timeout=300)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode(errors="replace")[-2000:]


def _digests(folder: Path) -> dict[str, str]:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(folder.glob("data-*/*.arrow"))}


def _published(folder: Path) -> list[str]:
    """Visible files of an output, each data folder as `data-*/<shard>`; a partial file there (a hidden temp name)
    fails the test."""
    assert not [path.name for path in folder.iterdir() if is_temp_name(path.name)]
    return sorted([path.name for path in folder.iterdir() if path.is_file() and not path.name.startswith(".")]
                  + [f"data-*/{path.name}" for path in folder.glob("data-*/*")])


@pytest.fixture(scope="module")
def sample(webdata) -> Path:
    return webdata / SAMPLE_NAME


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, sample) -> Path:
    output = tmp_path_factory.mktemp("reference") / "en"
    run_c4(RunConfig(output=str(output), inputs=[str(sample)], num_shards=NUM_SHARDS))
    return output


def _assert_equals_uninterrupted(output: Path, uninterrupted: Path) -> None:
    """Same files (no staging folder or temp file left), same shard bytes, same counters."""
    assert not [path for path in output.iterdir() if path.name.startswith(".")]
    assert _published(output) == _published(uninterrupted)
    assert _digests(output) == _digests(uninterrupted)
    assert read_manifest(str(output)).counters == read_manifest(str(uninterrupted)).counters


def test_worker_killed_while_writing_keeps_the_previous_output(tmp_path, sample, uninterrupted):
    output = tmp_path / "en"
    run_c4(RunConfig(output=str(output), inputs=[str(sample)], num_shards=None))  # the previous output
    previous_manifest, previous_digests = read_manifest(str(output)), _digests(output)

    _run_and_get_killed(DIE_WHILE_WRITING_A_SHARD, output, sample, NUM_SHARDS)

    assert read_manifest(str(output)) == previous_manifest and _digests(output) == previous_digests
    assert _published(output) == ["README.md", "data-*/train-00000-of-00001.arrow", "funnel.png", "manifest.json"]
    (staging,) = [path for path in output.iterdir() if path.name.startswith(".staging-")]
    staged = sorted(path.name for path in staging.iterdir())
    assert any(is_temp_name(name) for name in staged)  # the half-written shard stayed hidden in staging
    assert any(name.endswith("-of-00004.arrow") for name in staged)  # the shard written before the kill

    run_c4(RunConfig(output=str(output), inputs=[str(sample)], num_shards=NUM_SHARDS, allow_other_settings=True))
    _assert_equals_uninterrupted(output, uninterrupted)


def test_driver_killed_while_publishing_is_reported_and_repaired_by_a_rerun(tmp_path, sample, uninterrupted):
    output = tmp_path / "en"
    _run_and_get_killed(DIE_WHILE_COMMITTING, output, sample, NUM_SHARDS)

    with pytest.raises(ManifestError):  # shards without a manifest read as an incomplete output, never as data
        read_manifest(str(output))
    assert "manifest.json" not in _published(output)

    run_c4(RunConfig(output=str(output), inputs=[str(sample)], num_shards=NUM_SHARDS))
    _assert_equals_uninterrupted(output, uninterrupted)


def test_driver_killed_while_publishing_keeps_the_previous_output(tmp_path, sample, uninterrupted):
    output = tmp_path / "en"
    run_c4(RunConfig(output=str(output), inputs=[str(sample)], num_shards=None))  # the previous output
    previous_manifest, previous_digests = read_manifest(str(output)), _digests(output)

    _run_and_get_killed(DIE_WHILE_COMMITTING, output, sample, NUM_SHARDS)

    assert read_manifest(str(output)) == previous_manifest
    assert {name: digest for name, digest in _digests(output).items() if name.endswith("-of-00001.arrow")} \
        == previous_digests  # the killed run's shards sit in a data folder no manifest names

    run_c4(RunConfig(output=str(output), inputs=[str(sample)], num_shards=NUM_SHARDS, allow_other_settings=True))
    _assert_equals_uninterrupted(output, uninterrupted)
