"""manifest.json contents, errors, and the staging -> output commit."""
import hashlib
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

import c4prep
from c4prep import manifest as manifest_module
from c4prep.dataset_card import CARD_NAME, dataset_card
from c4prep.manifest import (DOCUMENTS, FORMAT, MANIFEST_NAME, OUTPUT_KINDS, TOKENS, VOCABULARY, Manifest,
                             ManifestError, OutputFolderError, ShardEntry, SplitInfo, build_manifest,
                             check_output_folder, commit_output, manifest_fingerprint, new_staging_uri,
                             read_listed_shard, read_manifest, repair_output, write_manifest)
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
    assert m.format == FORMAT and m.format_version == 4 and m.package_version == c4prep.__version__
    assert m.shard_format == "arrow"
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
    assert list(doc) == ["format", "format_version", "package_version", "created", "data_dir", "shard_format",
                         "schema", "splits", "shards", "config", "counters", "extra"]
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


def test_a_split_without_rows_is_listed_without_shards():
    m = _manifest(_infos("train-00000-of-00001.arrow"), splits=["validation", "train"])
    assert m.splits == {"train": SplitInfo(10, 100, 1), "validation": SplitInfo(0, 0, 0)}
    assert [s.split for s in m.shards] == ["train"] and Manifest.from_json(m.to_json()) == m


def test_a_manifest_of_format_2_lists_arrow_shards():
    doc = _doc()
    doc.update(format_version=2)
    del doc["shard_format"]
    m = Manifest.from_json(json.dumps(doc))
    assert m.format_version == 2 and m.shard_format == "arrow"


def _doc() -> dict:
    return json.loads(_manifest(_infos("train-00000-of-00001.arrow")).to_json())


@pytest.mark.parametrize("mutate,match", [
    (lambda d: d.update(format="something-else"), "not a c4prep-arrow-shards manifest"),
    (lambda d: d.update(format_version=5), "format_version 5.*upgrade c4prep"),
    (lambda d: d.update(shard_format="csv"), "shard_format 'csv' is not one of arrow, parquet, jsonl.gz"),
    (lambda d: d.update(shard_format="parquet"), "'train-00000-of-00001.arrow' is not a shard name of format parquet"),
    (lambda d: d["shards"][0].update(name="../../../../etc/passwd"), "'../../../../etc/passwd' is not a shard name"),
    (lambda d: d.update(data_dir="../../elsewhere"), "not a data folder name"),
    (lambda d: d.update(data_dir="data-x/../.."), "not a data folder name"),
    (lambda d: d.pop("shards"), "missing field 'shards'"),
    (lambda d: d.pop("format_version"), "^missing field 'format_version'$"),
    (lambda d: d["shards"][0].pop("sha256"), "^shard 0 lacks the field 'sha256'$"),
    (lambda d: d["shards"][0].update(mirror="x"), "^shard 0 has an unknown field 'mirror'$"),
    (lambda d: d["shards"][0].update(num_bytes=True), "^shard 0 gives num_bytes True, which is not of type int$"),
    (lambda d: d["splits"]["train"].update(num_shards=1.0), "^split 'train' gives num_shards 1.0, which is not of"),
    (lambda d: d["shards"].append(["train"]), "^shard 1 is not an object$"),
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



def _written(out: Path) -> dict:
    """Publish 3 train shards of 4 rows and an empty validation split into ``out``; its manifest as JSON."""
    staging, infos = _stage(out, {"train": 3})
    commit_output(str(out), staging, _manifest(infos, splits=["validation"]))
    return json.loads((out / MANIFEST_NAME).read_text(encoding="utf-8"))


def _duplicate_shard_1(doc: dict) -> None:
    doc["shards"][2] = dict(doc["shards"][1])


def _delete_shard_1(doc: dict) -> None:
    del doc["shards"][1]
    doc["splits"]["train"]["num_shards"] = 2


def _mix_counts(doc: dict) -> None:
    doc["shards"].append({**doc["shards"][0], "name": "train-00003-of-00004.arrow", "index": 3, "count": 4})


@pytest.mark.parametrize("mutate,match", [
    (_duplicate_shard_1, r"split 'train' lists shard 1 twice and shard 2 not at all, but needs each of shards "
                         r"0\.\.2 of 3 once"),
    (_delete_shard_1, "split 'train' lists shard 1 not at all"),
    (lambda d: d["splits"]["train"].update(num_rows=13),
     "split 'train' records num_rows 13, but the shards listed for it give 12"),
    (lambda d: d["splits"]["train"].update(num_bytes=1), "split 'train' records num_bytes 1, but"),
    (lambda d: d["splits"]["validation"].update(num_rows=5), "split 'validation' records num_rows 5, but .* give 0"),
    (lambda d: d["splits"].pop("train"), "shards of split 'train' are listed, but 'splits' lacks it"),
    (lambda d: d["shards"][2].update(name=d["shards"][1]["name"]),
     r"the entry of shard 'train-00001-of-00003\.arrow' gives split 'train', index 2 and count 3, which are not"),
    (_mix_counts, "split 'train' mixes shards of counts 3, 4"),
    (lambda d: d["shards"][0].update(num_rows="4"), "shard 0 gives num_rows '4', which is not of type int"),
])
def test_a_manifest_listing_other_shards_than_its_splits_is_refused(tmp_path, mutate, match):
    """A hand-edited manifest listing a shard twice, or not at all, or totals its shards do not add up to was read,
    and each listed shard was only checked on its own: a split read the wrong data. Now reading it fails in one
    line naming the problem."""
    out = tmp_path / "out"
    doc = _written(out)
    mutate(doc)
    (out / MANIFEST_NAME).write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(ManifestError, match=match) as err:
        read_manifest(str(out))
    message = str(err.value)
    assert message.startswith(f"{out / MANIFEST_NAME}: ") and message.endswith("re-run the stage that produces it")
    assert "\n" not in message


def test_every_listing_build_manifest_writes_is_read(tmp_path):
    """Entries in any order, and a format-2 output whose split without rows has one empty shard, are read."""
    out = tmp_path / "out"
    staging, infos = _stage(out, {"train": 2})
    infos.append(write_shard(f"{staging}/{shard_name('validation', 0, 1)}", SCHEMA, []))
    m = commit_output(str(out), staging, _manifest(infos))
    doc = json.loads(m.to_json())
    doc.update(format_version=2, shards=doc["shards"][::-1])
    del doc["shard_format"]
    (out / MANIFEST_NAME).write_text(json.dumps(doc), encoding="utf-8")
    old = read_manifest(str(out))
    assert old.splits == m.splits and old.splits["validation"].num_rows == 0 and old.shards == m.shards[::-1]

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

def _published(out: Path) -> dict[str, list[dict]]:
    """What a reader sees: the manifest's shards by name, each checked against its recorded size and SHA-256."""
    manifest = read_manifest(str(out))
    return {s.name: read_listed_shard(str(out), manifest, s).to_pylist() for s in manifest.shards}


def test_commit_output_publishes_shards(tmp_path):
    out = tmp_path / "out"
    staging, infos = _stage(out, {"train": 2, "validation": 1})
    m = _manifest(infos)
    published = commit_output(str(out), staging, m)
    data_dir = published.data_dir
    assert data_dir == "data-" + Path(staging).name.removeprefix(".staging-")
    assert _files(out) == [CARD_NAME, data_dir, MANIFEST_NAME]
    assert (out / CARD_NAME).read_text(encoding="utf-8") == dataset_card(published)
    assert _files(out / data_dir) == ["train-00000-of-00002.arrow", "train-00001-of-00002.arrow",
                                      "validation-00000-of-00001.arrow"]
    assert read_manifest(str(out)) == published and published.shards == m.shards
    assert read_shard(str(out / data_dir / "train-00001-of-00002.arrow")).to_pylist() == _rows("train", 1, 4)
    train = 0
    for path in sorted(out.glob("data-*/train-*.arrow")):  # plain pyarrow: the shards are IPC streams
        with pa.memory_map(str(path)) as source:
            train += pa.ipc.open_stream(source).read_all().num_rows
    assert train == m.splits["train"].num_rows == 8


def test_recommit_replaces_old_shards_with_other_counts(tmp_path):
    out = tmp_path / "out"
    staging, infos = _stage(out, {"train": 3, "validation": 1})
    commit_output(str(out), staging, _manifest(infos))
    (out / "notes.txt").write_text("kept")
    staging, infos = _stage(out, {"train": 2}, rows=5)
    m = commit_output(str(out), staging, _manifest(infos))
    assert _files(out) == [CARD_NAME, m.data_dir, MANIFEST_NAME, "notes.txt"]
    assert _files(out / m.data_dir) == ["train-00000-of-00002.arrow", "train-00001-of-00002.arrow"]
    assert read_manifest(str(out)).splits["train"] == SplitInfo(10, m.splits["train"].num_bytes, 2)
    assert read_shard(m.shard_uri(str(out), m.shards[0])).num_rows == 5


def test_recommit_same_names_overwrites(tmp_path):
    out = tmp_path / "out"
    staging, infos = _stage(out, {"train": 1}, rows=2)
    commit_output(str(out), staging, _manifest(infos))
    staging, infos = _stage(out, {"train": 1}, rows=6)
    m = commit_output(str(out), staging, _manifest(infos))
    assert _files(out) == [CARD_NAME, m.data_dir, MANIFEST_NAME]
    assert _files(out / m.data_dir) == ["train-00000-of-00001.arrow"]
    assert read_shard(m.shard_uri(str(out), m.shards[0])).num_rows == 6


def test_commit_over_a_format_1_output_replaces_its_shards(tmp_path):
    """An output written before data folders existed (shards beside a version-1 manifest) is read, then replaced."""
    out = tmp_path / "out"
    infos = [write_shard(str(out / shard_name("train", 0, 1)), SCHEMA, batched(_rows("train", 0, 3), SCHEMA))]
    doc = json.loads(_manifest(infos).to_json())
    doc.update(format_version=1)
    del doc["data_dir"]
    (out / MANIFEST_NAME).write_text(json.dumps(doc))
    assert _published(out) == {"train-00000-of-00001.arrow": _rows("train", 0, 3)}
    staging, infos = _stage(out, {"train": 1}, rows=5)
    m = commit_output(str(out), staging, _manifest(infos))
    assert _files(out) == [CARD_NAME, m.data_dir, MANIFEST_NAME]
    assert _published(out) == {"train-00000-of-00001.arrow": _rows("train", 0, 5)}


def test_an_output_of_format_3_with_ipc_file_shards_is_still_read(tmp_path):
    """Up to format 3, `arrow` shards were the Arrow IPC *file* format: such an output is still read and checked, and
    its card keeps saying what its files are."""
    out, data_dir = tmp_path / "out", "data-20250101T000000Z-0123abcd"
    path = out / data_dir / shard_name("train", 0, 1)
    path.parent.mkdir(parents=True)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, SCHEMA) as writer:
        for batch in batched(_rows("train", 0, 5), SCHEMA, batch_size=2):
            writer.write_batch(batch)
    data = path.read_bytes()
    doc = json.loads(replace(_manifest([ShardInfo(path.name, 5, len(data), hashlib.sha256(data).hexdigest())]),
                             data_dir=data_dir).to_json())
    doc.update(format_version=3)
    (out / MANIFEST_NAME).write_text(json.dumps(doc))
    old = read_manifest(str(out))
    assert old.format_version == 3 and old.shard_format == "arrow" and data.startswith(b"ARROW1")
    assert read_listed_shard(str(out), old, old.shards[0]).to_pylist() == _rows("train", 0, 5)
    assert _published(out) == {path.name: _rows("train", 0, 5)}
    assert repair_output(str(out)) == [] and (out / CARD_NAME).read_text(encoding="utf-8") == dataset_card(old)
    assert "Arrow IPC file format" in dataset_card(old)
    assert "Arrow IPC stream format" in dataset_card(replace(old, format_version=4))


@pytest.mark.parametrize("shard_format", ["parquet", "jsonl.gz"])
def test_shards_of_other_formats_are_published_read_and_checked(tmp_path, shard_format):
    out = tmp_path / "out"
    staging = new_staging_uri(str(out))
    infos = [write_shard(f"{staging}/{shard_name('train', i, 2, shard_format)}", SCHEMA,
                         batched(_rows("train", i, 4), SCHEMA)) for i in range(2)]
    m = commit_output(str(out), staging, _manifest(infos, shard_format=shard_format))
    assert read_manifest(str(out)).shard_format == shard_format
    assert _published(out) == {info.name: _rows("train", i, 4) for i, info in enumerate(infos)}
    assert read_listed_shard(str(out), m, m.shards[0]).schema.equals(SCHEMA, check_metadata=True)
    path = Path(m.shard_uri(str(out), m.shards[1]))
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(ManifestError, match="does not match its recorded SHA-256"):
        read_listed_shard(str(out), m, m.shards[1])
    with pytest.raises(ValueError, match="not a shard name of format arrow"):
        _manifest(infos)


def test_commit_with_missing_staged_shard_leaves_output_untouched(tmp_path):
    out = tmp_path / "out"
    staging, infos = _stage(out, {"train": 1})
    old = commit_output(str(out), staging, _manifest(infos))
    before = _published(out)

    staging, infos = _stage(out, {"train": 2})
    Path(staging, "train-00001-of-00002.arrow").unlink()
    with pytest.raises(ManifestError, match=r"train-00001-of-00002\.arrow \(missing\).*unchanged"):
        commit_output(str(out), staging, _manifest(infos))
    assert _published(out) == before
    assert read_manifest(str(out)) == old


def test_commit_rejects_staged_shard_of_wrong_size(tmp_path):
    out = tmp_path / "out"
    staging, infos = _stage(out, {"train": 1})
    Path(staging, infos[0].name).write_bytes(b"truncated")
    with pytest.raises(ManifestError, match="9 bytes, expected"):
        commit_output(str(out), staging, _manifest(infos))
    assert not (out / MANIFEST_NAME).exists()


def test_repair_output(tmp_path):
    out = tmp_path / "out"
    assert repair_output(str(out)) == []  # no output folder yet
    staging, infos = _stage(out, {"train": 1})
    m = commit_output(str(out), staging, _manifest(infos))
    crashed, _ = _stage(out, {"train": 3})  # a run that died before its commit
    orphan = out / "data-20260101T000000Z-0123abcd"  # a run killed after moving its shards, before its manifest
    orphan.mkdir()
    temp = out / f".{MANIFEST_NAME}.tmp-{'a' * 32}"  # an interrupted manifest write
    temp.write_text("partial")
    (out / "data-backup-20231201").mkdir()  # folders of the user's, named like ones (they were deleted)
    (out / ".staging-notes").mkdir()
    assert sorted(repair_output(str(out))) == sorted([crashed, str(orphan), str(temp)])
    assert _files(out) == [".staging-notes", CARD_NAME, m.data_dir, "data-backup-20231201", MANIFEST_NAME]
    assert read_manifest(str(out)).splits["train"].num_shards == 1
    assert repair_output(str(out)) == []


def test_a_first_run_removes_only_what_a_killed_run_named(tmp_path):
    """Before any manifest (``--output .`` in a project) the clean-up deleted every folder named ``.staging-*``."""
    out = tmp_path / "project"
    crashed, _ = _stage(out, {"train": 2})
    for name in (".staging-notes", ".staging-2026", "data-backup-20231201"):
        (out / name).mkdir()
        (out / name / "keep.txt").write_text("the user's")
    assert repair_output(str(out)) == [crashed]
    assert _files(out) == [".staging-2026", ".staging-notes", "data-backup-20231201"]


class _UndeletableFolders:
    """A filesystem whose folders cannot be deleted (no permission, a file still open on NFS)."""

    def __init__(self, fs: pafs.FileSystem) -> None:
        self.fs = fs

    def __getattr__(self, name: str):
        return getattr(self.fs, name)

    def equals(self, other) -> bool:
        return self.fs.equals(other.fs if isinstance(other, _UndeletableFolders) else other)

    def delete_dir(self, path: str) -> None:
        raise PermissionError(13, "Permission denied", path)


def test_what_cannot_be_removed_is_logged_and_the_publish_stands(tmp_path, monkeypatch, caplog):
    """A leftover that cannot be deleted failed the publish with a traceback after the manifest was written, and
    every later run at its repair; now it is a warning, and the new output stands."""
    out = tmp_path / "out"
    staging, infos = _stage(out, {"train": 1})
    crashed, _ = _stage(out, {"train": 3})
    real_resolve = manifest_module.resolve_uri

    def undeletable_in_out(uri: str):
        fs, path = real_resolve(uri)
        return (_UndeletableFolders(fs), path) if uri == str(out) else (fs, path)

    monkeypatch.setattr(manifest_module, "resolve_uri", undeletable_in_out)
    published = commit_output(str(out), staging, _manifest(infos))
    assert read_manifest(str(out)) == published and Path(crashed).is_dir()
    assert f"could not remove {crashed}, which no manifest names ([Errno 13] Permission denied" in caplog.text
    assert repair_output(str(out)) == []


def test_repair_keeps_data_folders_when_the_manifest_is_unreadable(tmp_path):
    out = tmp_path / "out"
    staging, infos = _stage(out, {"train": 1})
    m = commit_output(str(out), staging, _manifest(infos))
    (out / MANIFEST_NAME).write_text("{damaged")
    assert repair_output(str(out)) == []
    assert _files(out) == [CARD_NAME, m.data_dir, MANIFEST_NAME]


# A publish in a child process whose filesystem kills the process (os._exit: no cleanup, like SIGKILL) before its
# Nth change; it prints COMMITTED when the publish completed before the kill point.
_KILLED_PUBLISH = """
import os, sys
import pyarrow.fs as pafs
from c4prep import manifest, shards

class KillingFileSystem:
    def __init__(self, kill_at):
        self.fs, self.kill_at, self.changes = pafs.LocalFileSystem(), kill_at, 0
    def __getattr__(self, name):
        method = getattr(self.fs, name)
        if name not in ("move", "delete_file", "delete_dir", "create_dir", "open_output_stream"):
            return method
        def change(*args, **kwargs):
            if self.changes == self.kill_at:
                os._exit(0)
            self.changes += 1
            return method(*args, **kwargs)
        return change
    def equals(self, other):
        return True

killing = KillingFileSystem(int(sys.argv[3]))
for module in (manifest, shards):
    module.resolve_uri = lambda uri: (killing, os.path.abspath(uri))
manifest.commit_output(sys.argv[1], sys.argv[2], manifest.read_manifest(sys.argv[2]))
print("COMMITTED")
"""


def _kill_publish_at(out: Path, staging: str, kill_at: int) -> str:
    """Publish ``staging`` (whose manifest was written into it) from a child process killed before change N."""
    script = out.parent / "killed_publish.py"
    script.write_text(_KILLED_PUBLISH)
    done = subprocess.run([sys.executable, str(script), str(out), staging, str(kill_at)], capture_output=True,
                          text=True, check=True)
    return done.stdout


def test_publish_killed_at_every_step_leaves_the_old_or_the_new_output(tmp_path):
    """Kill the publishing process before each of its filesystem changes in turn: a reader then sees either the
    complete old output or the complete new one, and the next repair leaves exactly that output and nothing else."""
    kill_at, outcomes = 0, []
    while True:
        out = tmp_path / f"out{kill_at}"
        staging, infos = _stage(out, {"train": 3, "validation": 1})
        old = commit_output(str(out), staging, _manifest(infos))
        old_view = _published(out)
        staging, infos = _stage(out, {"train": 2}, rows=6)
        write_manifest(staging, _manifest(infos))
        new_view = {info.name: _rows("train", index, 6) for index, info in enumerate(infos)}
        printed = _kill_publish_at(out, staging, kill_at)
        seen = _published(out)
        assert seen in (old_view, new_view), f"killed before change {kill_at}: a mixed or damaged output"
        repair_output(str(out))
        assert _published(out) == seen
        current = read_manifest(str(out))
        assert _files(out) == sorted([CARD_NAME, current.data_dir, MANIFEST_NAME])
        assert (out / CARD_NAME).read_text(encoding="utf-8") == dataset_card(current)  # names the files it reads
        assert (current.data_dir == old.data_dir) == (seen == old_view)
        outcomes.append("new" if seen == new_view else "old")
        if printed.startswith("COMMITTED"):
            break
        kill_at += 1
    # create the data folder, move 2 shards, write the manifest and the card (temp file, rename), delete old data
    # and staging
    assert kill_at >= 8
    assert outcomes == sorted(outcomes, reverse=True) and outcomes[0] == "old" and outcomes[-1] == "new", outcomes


# --- reading listed shards and checking output folders ------------------------------------------

def test_read_listed_shard_checks_the_file_against_its_manifest_entry(tmp_path):
    out = tmp_path / "out"
    staging, infos = _stage(out, {"train": 2})
    m = commit_output(str(out), staging, _manifest(infos))
    first, second = m.shards
    assert read_listed_shard(str(out), m, first).to_pylist() == _rows("train", 0, 4)
    Path(m.shard_uri(str(out), second)).write_bytes(b"not arrow")
    with pytest.raises(ManifestError, match=rf"{second.name} has 9 bytes, {second.num_bytes} were recorded"):
        read_listed_shard(str(out), m, second)
    Path(m.shard_uri(str(out), first)).unlink()
    with pytest.raises(ManifestError, match="cannot be read"):
        read_listed_shard(str(out), m, first)


def test_read_listed_shard_refuses_changed_bytes_of_the_same_size(tmp_path):
    out = tmp_path / "out"
    staging, infos = _stage(out, {"train": 1})
    m = commit_output(str(out), staging, _manifest(infos))
    path = Path(m.shard_uri(str(out), m.shards[0]))
    data = bytearray(path.read_bytes())
    position = data.index("train 0 2".encode())
    data[position:position + 4] = b"XXXX"  # 4 bytes of one document: the file stays valid Arrow of the same size
    path.write_bytes(bytes(data))
    with pytest.raises(ManifestError, match=r"train-00000-of-00001\.arrow does not match its recorded SHA-256"):
        read_listed_shard(str(out), m, m.shards[0])
    zeroed = replace(m, shards=[replace(m.shards[0], sha256="0" * 64)])  # a manifest whose hash was zeroed
    with pytest.raises(ManifestError, match="does not match its recorded SHA-256"):
        read_listed_shard(str(out), zeroed, zeroed.shards[0])


def test_check_output_folder_creates_it_or_names_the_problem(tmp_path):
    check_output_folder(str(tmp_path / "new" / "out"), DOCUMENTS)
    assert (tmp_path / "new" / "out").is_dir()
    (tmp_path / "afile").write_text("x")
    with pytest.raises(OutputFolderError, match=r"the output .*afile is a file; give a folder"):
        check_output_folder(str(tmp_path / "afile"), DOCUMENTS)
    with pytest.raises(OutputFolderError, match="cannot create the output folder"):
        check_output_folder(str(tmp_path / "afile" / "below"), DOCUMENTS)


def test_check_output_folder_refuses_a_training_run_folder(tmp_path):
    """`c4prep run --output <a train run folder>` wrote a corpus among its checkpoints."""
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("stage: pretrain\n")
    for kind in (DOCUMENTS, TOKENS, VOCABULARY):
        with pytest.raises(OutputFolderError) as refused:
            check_output_folder(str(run), kind)
        assert str(refused.value) == (f"the output {run} holds config.yaml but no manifest.json: it is not a c4prep "
                                      f"output, and `{OUTPUT_KINDS[kind]}` would write its files among a `train` "
                                      "run's: give another --output (a new or empty folder)")
    assert sorted(path.name for path in run.iterdir()) == ["checkpoints", "config.yaml"]
