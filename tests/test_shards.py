"""Shard names, the shard-count rule, and shard writes/reads in every format."""
import glob
import gzip
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from c4prep.shard_formats import FORMATS, open_arrow
from c4prep.shards import (ShardInfo, ShardIntegrityError, batched, is_temp_name, join_uri, num_shards_for,
                           open_verified_shard, parse_shard_name, read_shard, read_verified_shard, resolve_uri,
                           shard_name, write_shard)

GiB = 1 << 30
MiB = 1 << 20
SCHEMA = pa.schema([
    pa.field("text", pa.string(), nullable=False),
    pa.field("url", pa.string()),
    pa.field("length", pa.int64(), nullable=False),
])
ROWS = [
    {"text": "Hello world.", "url": "https://example.com/", "length": 12},
    {"text": "Grüße aus Köln – ça va? 日本語のテキスト 🙂", "url": None, "length": 33},
    {"text": "", "url": "https://пример.рф/путь", "length": 0},
]


def _rows(n: int) -> list[dict]:
    return [{"text": f"document {i} ünïcödé", "url": f"https://e.com/{i}", "length": i}
            for i in range(n)]


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# --- names --------------------------------------------------------------------------------

def test_shard_name_format():
    assert shard_name("train", 0, 8) == "train-00000-of-00008.arrow"
    assert shard_name("validation", 1023, 1024) == "validation-01023-of-01024.arrow"
    assert shard_name("en.noblocklist", 0, 1) == "en.noblocklist-00000-of-00001.arrow"
    assert shard_name("train", 0, 8, "parquet") == "train-00000-of-00008.parquet"
    assert shard_name("train", 0, 8, "jsonl.gz") == "train-00000-of-00008.jsonl.gz"
    with pytest.raises(ValueError, match="unknown shard format 'csv': use one of arrow, parquet, jsonl.gz"):
        shard_name("train", 0, 8, "csv")


@pytest.mark.parametrize("split,index,count", [
    ("train", -1, 8), ("train", 8, 8), ("train", 0, 0), ("train", 0, 100_000),
    ("", 0, 1), ("a/b", 0, 1), (".hidden", 0, 1), ("sp ace", 0, 1),
])
def test_shard_name_rejects_bad_arguments(split, index, count):
    with pytest.raises(ValueError, match="split|index|count"):
        shard_name(split, index, count)


@pytest.mark.parametrize("shard_format", FORMATS)
def test_parse_shard_name_round_trip(shard_format):
    for split, index, count in [("train", 0, 1), ("validation", 7, 8), ("my-split", 99998, 99999)]:
        assert parse_shard_name(shard_name(split, index, count, shard_format)) == (split, index, count)


@pytest.mark.parametrize("name", [
    "manifest.json", "train-0-of-8.arrow", "train-00000-of-00008.arrow.tmp-abc",
    ".train-00000-of-00008.arrow.tmp-" + "0" * 32, "train-00008-of-00008.arrow",
    "train-00000-of-00008.csv", "train-00000-of-00008.jsonl", "dir/train-00000-of-00008.arrow",
    "-00000-of-00001.arrow",
])
def test_parse_shard_name_rejects_other_names(name):
    assert parse_shard_name(name) is None


# --- shard-count rule -----------------------------------------------------------------------

def test_num_shards_tiny_is_one():
    assert num_shards_for(0, 0) == 1
    assert num_shards_for(10 * MiB, 1000) == 1
    assert num_shards_for(200 * MiB, 1) == 1  # never more shards than examples


def test_num_shards_power_of_two_within_bounds():
    total_bytes, num_examples = 10 * GiB, 5_000_000
    n = num_shards_for(total_bytes, num_examples)
    total = total_bytes + 16 * num_examples
    assert n == 128
    assert total // GiB <= n <= total // (64 * MiB)
    assert 64 * MiB <= total / n <= GiB


def test_num_shards_released_c4_size_is_1024():
    # Released C4 en: ~365M training documents, 1024 train shards.
    assert num_shards_for(700 * GiB, 365_000_000) == 1024


def test_num_shards_1024_needs_1024_examples():
    assert num_shards_for(100 * GiB, 1000) == 512


def test_num_shards_very_large_is_multiple_of_1024():
    total_bytes, num_examples = 2500 * GiB, 1_000_000_000
    n = num_shards_for(total_bytes, num_examples)
    min_shards = (total_bytes + 16 * num_examples) // GiB
    assert n == 3072 and n % 1024 == 0 and n - 1024 < min_shards <= n


def test_num_shards_rejects_negative():
    with pytest.raises(ValueError):
        num_shards_for(-1, 10)


# --- paths ----------------------------------------------------------------------------------

def test_resolve_uri_local_and_file_uri(tmp_path):
    fs, path = resolve_uri("relative/dir")
    assert fs.type_name == "local" and path == os.path.abspath("relative/dir")
    fs, path = resolve_uri(tmp_path.as_uri())
    assert fs.type_name == "local" and path == str(tmp_path)
    assert join_uri("gs://bucket/out/", "a", "b.arrow") == "gs://bucket/out/a/b.arrow"


# --- write / read ---------------------------------------------------------------------------

def test_round_trip(tmp_path):
    path = tmp_path / "train-00000-of-00001.arrow"
    info = write_shard(str(path), SCHEMA, batched(ROWS, SCHEMA, batch_size=2))
    data = path.read_bytes()
    assert info == ShardInfo("train-00000-of-00001.arrow", 3, len(data),
                             hashlib.sha256(data).hexdigest())
    table = read_shard(str(path))
    assert table.schema == SCHEMA
    assert table.to_pylist() == ROWS
    assert _files(tmp_path) == ["train-00000-of-00001.arrow"]


def test_readable_with_plain_pyarrow_and_datasets(tmp_path):
    """An Arrow shard is an IPC stream: plain pyarrow and `datasets.Dataset.from_file` (stream format only) open it."""
    path = str(tmp_path / "train-00000-of-00001.arrow")
    write_shard(path, SCHEMA, batched(_rows(2500), SCHEMA, batch_size=1000))
    with open(path, "rb") as f:
        batches = list(pa.ipc.open_stream(f))
        assert len(batches) == 3
        assert pa.Table.from_batches(batches).to_pylist() == _rows(2500)
    with pa.memory_map(path) as source:
        table = pa.ipc.open_stream(source).read_all()
    assert table.column("text")[2499].as_py() == "document 2499 ünïcödé"
    datasets = pytest.importorskip("datasets")
    assert datasets.Dataset.from_file(path).to_list() == _rows(2500)


def test_read_shard_via_file_uri(tmp_path):
    path = tmp_path / "train-00000-of-00001.arrow"
    write_shard(path.as_uri(), SCHEMA, batched(ROWS, SCHEMA))
    assert read_shard(path.as_uri()).to_pylist() == ROWS


def test_shard_not_compressed(tmp_path):
    path = tmp_path / "s.arrow"
    write_shard(str(path), SCHEMA, batched(ROWS, SCHEMA))
    assert "日本語のテキスト".encode() in path.read_bytes()


def test_bytes_are_deterministic(tmp_path):
    infos = [write_shard(str(tmp_path / f"{d}.arrow"), SCHEMA, batched(_rows(3000), SCHEMA))
             for d in ("a", "b")]
    assert (tmp_path / "a.arrow").read_bytes() == (tmp_path / "b.arrow").read_bytes()
    assert infos[0].sha256 == infos[1].sha256 and infos[0].num_bytes == infos[1].num_bytes


def test_bytes_are_deterministic_across_processes(tmp_path):
    script = (
        "import sys, pyarrow as pa\n"
        "from c4prep.shards import write_shard, batched\n"
        "s = pa.schema([('text', pa.string()), ('n', pa.int64())])\n"
        "rows = [{'text': f'zeile {i} äöü', 'n': i} for i in range(5000)]\n"
        "print(write_shard(sys.argv[1], s, batched(rows, s, 700)).sha256)\n"
    )
    shas = {subprocess.run([sys.executable, "-c", script, str(tmp_path / f"{i}.arrow")],
                           check=True, capture_output=True, text=True).stdout for i in range(2)}
    assert len(shas) == 1


def test_empty_shard(tmp_path):
    path = tmp_path / "validation-00000-of-00001.arrow"
    info = write_shard(str(path), SCHEMA, [])
    assert info.num_rows == 0 and info.num_bytes == path.stat().st_size > 0
    table = read_shard(str(path))
    assert table.schema == SCHEMA and table.num_rows == 0
    with pa.memory_map(str(path)) as source:
        assert pa.ipc.open_stream(source).read_all().num_rows == 0
    assert write_shard(str(tmp_path / "again.arrow"), SCHEMA, iter(())).sha256 == info.sha256
    datasets = pytest.importorskip("datasets")  # it refuses a stream without batches: the shard holds an empty one
    assert datasets.Dataset.from_file(str(path)).num_rows == 0


# --- Parquet and JSON Lines: the same rows, types and guarantees ------------------------------

TOKENS = pa.schema([pa.field("ids", pa.list_(pa.uint16()), nullable=False),
                    pa.field("length", pa.int32(), nullable=False), pa.field("url", pa.string())],
                   metadata={"vocab_size": "32100"})
_WRITE_IN_A_PROCESS = """
import sys, pyarrow as pa
from c4prep.shards import batched, write_shard
s = pa.schema([pa.field("ids", pa.list_(pa.uint16()), nullable=False), pa.field("length", pa.int32(), nullable=False),
               pa.field("url", pa.string())], metadata={"vocab_size": "32100"})
rows = [{"ids": list(range(i % 50)), "length": i % 50, "url": None if i % 7 else f"https://ü.de/{i}"}
        for i in range(3000)]
print(write_shard(sys.argv[1], s, batched(rows, s, 700)).sha256)
"""


@pytest.mark.parametrize("shard_format", FORMATS)
def test_every_format_reads_back_the_exact_rows_and_types_and_is_deterministic(tmp_path, shard_format):
    paths = [str(tmp_path / str(i) / shard_name("train", 0, 1, shard_format)) for i in range(2)]
    shas = {subprocess.run([sys.executable, "-c", _WRITE_IN_A_PROCESS, path], check=True, capture_output=True,
                           text=True).stdout for path in paths}
    assert len(shas) == 1 and Path(paths[0]).read_bytes() == Path(paths[1]).read_bytes()
    table = read_shard(paths[0], TOKENS)
    assert table.schema == TOKENS and table.schema.metadata == TOKENS.metadata
    assert table.to_pylist() == [{"ids": list(range(i % 50)), "length": i % 50,
                                  "url": None if i % 7 else f"https://ü.de/{i}"} for i in range(3000)]


def test_parquet_shards_are_zstd_with_one_row_group_per_batch_for_plain_pyarrow(tmp_path):
    path = tmp_path / "train-00000-of-00001.parquet"
    write_shard(str(path), SCHEMA, batched(_rows(2500), SCHEMA, batch_size=1000))
    metadata = pq.ParquetFile(path).metadata
    assert metadata.num_row_groups == 3
    assert {metadata.row_group(0).column(i).compression for i in range(3)} == {"ZSTD"}
    assert pq.read_table(path).to_pylist() == _rows(2500)
    assert ds.dataset(str(path), format="parquet").to_table().to_pylist() == _rows(2500)  # the README's advice


def test_jsonl_shards_are_gzipped_json_lines_without_a_time_stamp(tmp_path):
    path = tmp_path / "train-00000-of-00001.jsonl.gz"
    write_shard(str(path), SCHEMA, batched(ROWS, SCHEMA))
    data = path.read_bytes()
    assert data[4:8] == bytes(4)  # gzip MTIME
    assert [json.loads(line) for line in gzip.decompress(data).decode("utf-8").splitlines()] == ROWS


@pytest.mark.parametrize("shard_format", FORMATS)
def test_empty_shard_of_every_format(tmp_path, shard_format):
    path = str(tmp_path / shard_name("train", 0, 1, shard_format))
    info = write_shard(path, TOKENS, [])
    assert info.num_rows == 0 and read_shard(path, TOKENS).schema == TOKENS
    assert read_shard(path, TOKENS).num_rows == 0


@pytest.mark.parametrize("shard_format", FORMATS)
def test_a_flipped_byte_is_refused_in_every_format(tmp_path, shard_format):
    path = tmp_path / shard_name("train", 0, 1, shard_format)
    info = write_shard(str(path), SCHEMA, batched(_rows(500), SCHEMA))
    assert read_verified_shard(str(path), info.num_bytes, info.sha256, SCHEMA).to_pylist() == _rows(500)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(ShardIntegrityError, match="does not match its recorded SHA-256"):
        read_verified_shard(str(path), info.num_bytes, info.sha256, SCHEMA)


def _ipc_file_shard(path: Path, schema: pa.Schema, rows: list[dict], batch_size: int) -> ShardInfo:
    """A shard as c4prep wrote it before manifest format 4: the Arrow IPC *file* format, uncompressed."""
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        for batch in batched(rows, schema, batch_size):
            writer.write_batch(batch)
    data = path.read_bytes()
    assert data.startswith(b"ARROW1")
    return ShardInfo(path.name, len(rows), len(data), hashlib.sha256(data).hexdigest())


def test_shards_of_the_ipc_file_format_are_still_read(tmp_path):
    path = tmp_path / "train-00000-of-00001.arrow"
    info = _ipc_file_shard(path, TOKENS, [{"ids": [i, i + 1], "length": 2, "url": None} for i in range(2500)], 1000)
    expected = [{"ids": [i, i + 1], "length": 2, "url": None} for i in range(2500)]
    table = read_shard(str(path))
    assert table.schema == TOKENS and table.schema.metadata == TOKENS.metadata and table.to_pylist() == expected
    assert read_verified_shard(str(path), info.num_bytes, info.sha256, TOKENS).to_pylist() == expected
    shard = open_verified_shard(str(path), info.num_bytes, info.sha256)
    assert shard.schema == TOKENS and [b.num_rows for b in shard.batches] == [1000, 1000, 500]
    empty = tmp_path / "validation-00000-of-00001.arrow"
    _ipc_file_shard(empty, TOKENS, [], 1000)
    assert read_shard(str(empty)).schema == TOKENS and read_shard(str(empty)).num_rows == 0


def test_open_arrow_reads_both_formats_zero_copy_and_refuses_a_cut_stream(tmp_path):
    stream, old = tmp_path / "stream.arrow", tmp_path / "file.arrow"
    write_shard(str(stream), TOKENS, batched([{"ids": [7] * 3, "length": 3, "url": None}] * 10, TOKENS, 4))
    _ipc_file_shard(old, TOKENS, [{"ids": [7] * 3, "length": 3, "url": None}] * 10, 4)
    for path in (stream, old):
        with pa.memory_map(str(path)) as source:
            data = source.read_buffer()
        shard = open_arrow(data)
        assert [b.num_rows for b in shard.batches] == [4, 4, 2] and shard.schema.metadata == TOKENS.metadata
        values = shard.batches[0].column("ids").values
        assert data.address <= values.buffers()[1].address < data.address + data.size  # a slice of the map
    data = stream.read_bytes()
    for cut in (len(data) - 8, len(data) // 2, 3, 0):  # after the last batch, inside one, inside the schema, empty
        with pytest.raises(pa.ArrowInvalid):
            open_arrow(pa.py_buffer(data[:cut]))


def test_write_creates_parent_and_overwrites(tmp_path):
    path = tmp_path / "new" / "dir" / "s.arrow"
    write_shard(str(path), SCHEMA, batched(ROWS, SCHEMA))
    write_shard(str(path), SCHEMA, batched(ROWS[:1], SCHEMA))
    assert read_shard(str(path)).num_rows == 1
    assert _files(path.parent) == ["s.arrow"]


def test_exception_in_batches_leaves_nothing(tmp_path):
    def failing():
        yield from batched(_rows(10), SCHEMA, batch_size=3)
        raise RuntimeError("source broke")

    with pytest.raises(RuntimeError, match="source broke"):
        write_shard(str(tmp_path / "s.arrow"), SCHEMA, failing())
    assert _files(tmp_path) == []


def test_exception_keeps_previous_file(tmp_path):
    path = tmp_path / "s.arrow"
    write_shard(str(path), SCHEMA, batched(ROWS, SCHEMA))
    before = path.read_bytes()
    wrong = pa.record_batch({"other": [1]})
    with pytest.raises(pa.ArrowInvalid):
        write_shard(str(path), SCHEMA, [wrong])
    assert path.read_bytes() == before
    assert _files(tmp_path) == ["s.arrow"]


def test_temp_name_is_hidden_from_globs(tmp_path):
    seen, globbed = [], []

    def spy():
        seen.extend(_files(tmp_path))
        globbed.extend(glob.glob(os.path.join(tmp_path, "*")) + list(tmp_path.glob("*.arrow")))
        yield from batched(ROWS, SCHEMA)

    write_shard(str(tmp_path / "train-00000-of-00001.arrow"), SCHEMA, spy())
    (temp,) = seen
    assert temp.startswith(".train-00000-of-00001.arrow.tmp-") and is_temp_name(temp)
    assert globbed == []
    assert not is_temp_name("train-00000-of-00001.arrow")


def test_batched():
    batches = list(batched(_rows(2500), SCHEMA, batch_size=1000))
    assert [b.num_rows for b in batches] == [1000, 1000, 500]
    assert all(b.schema == SCHEMA for b in batches)
    assert list(batched([], SCHEMA)) == []
    with pytest.raises(ValueError):
        next(batched(ROWS, SCHEMA, batch_size=0))


def test_core_modules_do_not_import_beam():
    code = ("import sys, c4prep.shards, c4prep.manifest\n"
            "assert 'apache_beam' not in sys.modules, 'core package imported Beam'\n")
    subprocess.run([sys.executable, "-c", code], check=True)
