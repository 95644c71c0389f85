"""manifest.json contents, errors, and the staging -> output commit."""
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

import c4prep
from c4prep.manifest import (FORMAT, MANIFEST_NAME, Manifest, ManifestError, OutputFolderError, ShardEntry,
                             SplitInfo, build_manifest, check_output_folder, commit_output, manifest_fingerprint,
                             new_staging_uri, read_listed_shard, read_manifest, remove_stale_staging,
                             write_manifest)
from c4prep.shards import ShardInfo, batched, read_shard, shard_name, write_shard

SCHEMA = pa.schema(
    [pa.field("text", pa.string(), nullable=False),
     pa.field("timestamp", pa.timestamp("s", tz="UTC")),
     pa.field("length", pa.int64(), nullable=False, metadata={b"unit": b"chars"})],
    metadata={b"source": b"CC-MAIN-2019-18"},
)
CONFIG = {"crawl": "CC-MAIN-2019-18", "min_words": 5, "langs": ["en"]}
COUNTERS = {"filter": {"kept": 7, "too_short": 3}, "dedup": {"dropped": 1}}


def _rows(split: str, index: int, n: int) -> list[dict]:
    return [{"text": f"{split} {index} {i} – naïve", "timestamp": None, "length": i}
            for i in range(n)]


def _stage(output: Path, counts: dict[str, int], rows: int = 4) -> tuple[str, list[ShardInfo]]:
    staging = new_staging_uri(str(output))
    infos = [write_shard(f"{staging}/{shard_name(split, i, count)}", SCHEMA,
                         batched(_rows(split, i, rows), SCHEMA))
             for split, count in counts.items() for i in range(count)]
    return staging, infos


def _manifest(infos, **kw) -> Manifest:
    return build_manifest(SCHEMA, infos, CONFIG, COUNTERS, **kw)


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _infos(*names: str) -> list[ShardInfo]:
    return [ShardInfo(n, 10, 100, f"{i:064x}") for i, n in enumerate(names)]


# --- building and serialising ----------------------------------------------------------------

def test_build_manifest_fills_splits_and_sorts_shards():
    infos = _infos("validation-00000-of-00001.arrow", "train-00001-of-00002.arrow",
                   "train-00000-of-00002.arrow")
    m = _manifest(infos, extra={"funnel": [["fetched", 10], ["kept", 7]]})
    assert m.splits == {"train": SplitInfo(20, 200, 2), "validation": SplitInfo(10, 100, 1)}
    assert [(s.split, s.index, s.count) for s in m.shards] == [
        ("train", 0, 2), ("train", 1, 2), ("validation", 0, 1)]
    assert m.shards[0] == ShardEntry("train-00000-of-00002.arrow", "train", 0, 2, 10, 100,
                                     f"{2:064x}")
    assert m.format == FORMAT and m.format_version == 1 and m.package_version == c4prep.__version__
    assert m.config == CONFIG and m.counters == COUNTERS and m.extra["funnel"][1] == ["kept", 7]
    assert m.created.endswith("+00:00")


@pytest.mark.parametrize("names,match", [
    (["notes.txt"], "not a shard name"),
    (["train-00000-of-00002.arrow"], "train"),  # shard 1 missing
    (["train-00000-of-00002.arrow", "train-00001-of-00003.arrow"], "one count"),
    (["train-00000-of-00001.arrow", "train-00000-of-00001.arrow"], "train"),
])
def test_build_manifest_rejects_incomplete_splits(names, match):
    with pytest.raises(ValueError, match=match):
        _manifest(_infos(*names))


def test_json_round_trip_and_layout():
    m = _manifest(_infos("train-00000-of-00001.arrow"), extra={"sources": {"a": "b" * 64}})
    text = m.to_json()
    assert Manifest.from_json(text) == m
    doc = json.loads(text)
    assert list(doc) == ["format", "format_version", "package_version", "created", "schema",
                         "splits", "shards", "config", "counters", "extra"]
    assert doc["schema"]["fields"] == [
        {"name": "text", "type": "string", "nullable": False},
        {"name": "timestamp", "type": "timestamp[s, tz=UTC]", "nullable": True},
        {"name": "length", "type": "int64", "nullable": False},
    ]
    assert doc["splits"] == {"train": {"num_rows": 10, "num_bytes": 100, "num_shards": 1}}
    assert doc["shards"][0] == {"name": "train-00000-of-00001.arrow", "split": "train",
                                "index": 0, "count": 1, "num_rows": 10, "num_bytes": 100,
                                "sha256": "0" * 64}


def test_schema_reconstructed_exactly():
    m = Manifest.from_json(_manifest([]).to_json())
    assert m.schema().equals(SCHEMA, check_metadata=True)
    assert m.schema().field("length").metadata == {b"unit": b"chars"}
    assert m.splits == {} and m.shards == []


def _doc() -> dict:
    return json.loads(_manifest(_infos("train-00000-of-00001.arrow")).to_json())


@pytest.mark.parametrize("mutate,match", [
    (lambda d: d.update(format="something-else"), "not a c4prep-arrow-shards manifest"),
    (lambda d: d.update(format_version=2), "format_version 2.*upgrade c4prep"),
    (lambda d: d.pop("shards"), "missing field 'shards'"),
    (lambda d: d["shards"][0].pop("sha256"), "malformed"),
    (lambda d: d["schema"].update(ipc_base64="not base64!"), "malformed"),
    (lambda d: d["schema"]["fields"][0].update(type="int32"), "do not match"),
])
def test_from_json_errors(mutate, match):
    doc = _doc()
    mutate(doc)
    with pytest.raises(ManifestError, match=match):
        Manifest.from_json(json.dumps(doc))


def test_from_json_rejects_non_json_and_non_objects():
    with pytest.raises(ManifestError, match="not valid JSON"):
        Manifest.from_json("{oops")
    with pytest.raises(ManifestError, match="not a c4prep-arrow-shards manifest"):
        Manifest.from_json("[1, 2]")


# --- files -----------------------------------------------------------------------------------

def test_write_and_read_manifest(tmp_path):
    m = _manifest(_infos("train-00000-of-00001.arrow"))
    write_manifest(str(tmp_path / "out"), m)
    assert _files(tmp_path / "out") == [MANIFEST_NAME]
    assert read_manifest(str(tmp_path / "out")) == m
    assert read_manifest((tmp_path / "out").as_uri()) == m


def test_read_manifest_missing(tmp_path):
    with pytest.raises(ManifestError, match=r"no manifest\.json in .*did not finish"):
        read_manifest(str(tmp_path / "nothing"))


def test_read_manifest_malformed_names_file_and_fix(tmp_path):
    (tmp_path / MANIFEST_NAME).write_text('{"format": "c4prep-arrow-shards"', encoding="utf-8")
    with pytest.raises(ManifestError) as err:
        read_manifest(str(tmp_path))
    assert str(tmp_path / MANIFEST_NAME) in str(err.value)
    assert "not valid JSON" in str(err.value) and "re-run" in str(err.value)
    (tmp_path / MANIFEST_NAME).write_bytes(b"\xff\xfe")
    with pytest.raises(ManifestError, match="utf-8"):
        read_manifest(str(tmp_path))


def test_fingerprint_depends_only_on_shard_contents():
    infos = _infos("train-00000-of-00002.arrow", "train-00001-of-00002.arrow")
    a = _manifest(infos)
    b = build_manifest(pa.schema([("x", pa.int8())]), reversed(infos), {"other": 1}, {})
    assert manifest_fingerprint(a) == manifest_fingerprint(b)
    assert manifest_fingerprint(Manifest.from_json(a.to_json())) == manifest_fingerprint(a)
    assert len(manifest_fingerprint(a)) == 64
    changed = [infos[0], ShardInfo(infos[1].name, 10, 100, "f" * 64)]
    assert manifest_fingerprint(_manifest(changed)) != manifest_fingerprint(a)


# --- commit ----------------------------------------------------------------------------------

def test_commit_output_publishes_shards(tmp_path):
    out = tmp_path / "out"
    staging, infos = _stage(out, {"train": 2, "validation": 1})
    m = _manifest(infos)
    commit_output(str(out), staging, m)
    assert _files(out) == [MANIFEST_NAME, "train-00000-of-00002.arrow",
                           "train-00001-of-00002.arrow", "validation-00000-of-00001.arrow"]
    assert read_manifest(str(out)) == m
    assert read_shard(str(out / "train-00001-of-00002.arrow")).to_pylist() == _rows("train", 1, 4)
    train = ds.dataset(sorted(map(str, out.glob("train-*.arrow"))), format="arrow")
    assert train.count_rows() == m.splits["train"].num_rows == 8


def test_recommit_replaces_old_shards_with_other_counts(tmp_path):
    out = tmp_path / "out"
    staging, infos = _stage(out, {"train": 3, "validation": 1})
    commit_output(str(out), staging, _manifest(infos))
    (out / "notes.txt").write_text("kept")
    staging, infos = _stage(out, {"train": 2}, rows=5)
    m = _manifest(infos)
    commit_output(str(out), staging, m)
    assert _files(out) == [MANIFEST_NAME, "notes.txt", "train-00000-of-00002.arrow",
                           "train-00001-of-00002.arrow"]
    assert read_manifest(str(out)).splits["train"] == SplitInfo(10, m.splits["train"].num_bytes, 2)
    assert read_shard(str(out / "train-00000-of-00002.arrow")).num_rows == 5


def test_recommit_same_names_overwrites(tmp_path):
    out = tmp_path / "out"
    staging, infos = _stage(out, {"train": 1}, rows=2)
    commit_output(str(out), staging, _manifest(infos))
    staging, infos = _stage(out, {"train": 1}, rows=6)
    commit_output(str(out), staging, _manifest(infos))
    assert _files(out) == [MANIFEST_NAME, "train-00000-of-00001.arrow"]
    assert read_shard(str(out / "train-00000-of-00001.arrow")).num_rows == 6


def test_commit_with_missing_staged_shard_leaves_output_untouched(tmp_path):
    out = tmp_path / "out"
    staging, infos = _stage(out, {"train": 1})
    old = _manifest(infos)
    commit_output(str(out), staging, old)
    before = {name: (out / name).read_bytes() for name in _files(out)}

    staging, infos = _stage(out, {"train": 2})
    Path(staging, "train-00001-of-00002.arrow").unlink()
    with pytest.raises(ManifestError, match=r"train-00001-of-00002\.arrow \(missing\).*unchanged"):
        commit_output(str(out), staging, _manifest(infos))
    assert {name: (out / name).read_bytes() for name in _files(out)
            if not name.startswith(".staging-")} == before
    assert read_manifest(str(out)) == old


def test_commit_rejects_staged_shard_of_wrong_size(tmp_path):
    out = tmp_path / "out"
    staging, infos = _stage(out, {"train": 1})
    Path(staging, infos[0].name).write_bytes(b"truncated")
    with pytest.raises(ManifestError, match="9 bytes, expected"):
        commit_output(str(out), staging, _manifest(infos))
    assert not (out / MANIFEST_NAME).exists()


def test_remove_stale_staging(tmp_path):
    out = tmp_path / "out"
    assert remove_stale_staging(str(out)) == []  # no output folder yet
    crashed, _ = _stage(out, {"train": 3})  # a run that died before its commit
    staging, infos = _stage(out, {"train": 1})
    commit_output(str(out), staging, _manifest(infos))
    temp = out / f".{MANIFEST_NAME}.tmp-{'a' * 32}"  # an interrupted manifest write
    temp.write_text("partial")
    assert sorted(remove_stale_staging(str(out))) == sorted([crashed, str(temp)])
    assert _files(out) == [MANIFEST_NAME, "train-00000-of-00001.arrow"]
    assert read_manifest(str(out)).splits["train"].num_shards == 1
    assert remove_stale_staging(str(out)) == []


# --- reading listed shards and checking output folders ------------------------------------------

def test_read_listed_shard_checks_the_file_against_its_manifest_entry(tmp_path):
    out = tmp_path / "out"
    staging, infos = _stage(out, {"train": 2})
    commit_output(str(out), staging, _manifest(infos))
    first, second = read_manifest(str(out)).shards
    assert read_listed_shard(str(out), first).to_pylist() == _rows("train", 0, 4)
    (out / second.name).write_bytes(b"not arrow")
    with pytest.raises(ManifestError, match=rf"{second.name}, listed in its folder's manifest, cannot be read"):
        read_listed_shard(str(out), second)
    (out / first.name).unlink()
    with pytest.raises(ManifestError, match="cannot be read"):
        read_listed_shard(str(out), first)
    write_shard(str(out / first.name), SCHEMA, batched(_rows("train", 0, 3), SCHEMA))  # a re-written, shorter shard
    with pytest.raises(ManifestError, match="has 3 rows but its manifest says 4: the input changed"):
        read_listed_shard(str(out), first)


def test_check_output_folder_creates_it_or_names_the_problem(tmp_path):
    check_output_folder(str(tmp_path / "new" / "out"))
    assert (tmp_path / "new" / "out").is_dir()
    (tmp_path / "afile").write_text("x")
    with pytest.raises(OutputFolderError, match=r"the output .*afile is a file; give a folder"):
        check_output_folder(str(tmp_path / "afile"))
    with pytest.raises(OutputFolderError, match="cannot create the output folder"):
        check_output_folder(str(tmp_path / "afile" / "below"))
