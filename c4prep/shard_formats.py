"""The file formats a shard can have, told apart by the suffix of its name, each written deterministically.

- ``arrow``: Arrow IPC *file* format, uncompressed: memory-mappable, random access by record batch.
- ``parquet``: Parquet with zstd (level 3), one row group per record batch; the Arrow schema is stored in the file,
  so the types (``uint16`` ids, non-null fields) and the schema metadata read back exactly.
- ``jsonl.gz``: one JSON object per row in schema order, gzip without file name or time stamp.

The same schema and batches give byte-identical files with the same pyarrow, zstd and zlib versions: no writer
option depends on the time, the host or the run.
"""
from __future__ import annotations

import gzip
import json
from collections.abc import Iterable
from typing import BinaryIO

import pyarrow as pa
import pyarrow.json as pajson
import pyarrow.parquet as pq

SUFFIXES = {"arrow": ".arrow", "parquet": ".parquet", "jsonl.gz": ".jsonl.gz"}
FORMATS = tuple(SUFFIXES)
_PARQUET_OPTIONS = dict(compression="zstd", compression_level=3, version="2.6", data_page_version="1.0",
                        use_dictionary=True, write_statistics=True, store_schema=True)
_JSON_BLOCK_BYTES = 64 << 20  # pyarrow parses JSON in blocks: a row may be at most this long


def format_of(name: str) -> str:
    """The format of a shard file name or URI, from its suffix (``ValueError`` when it has none of them)."""
    for shard_format, suffix in SUFFIXES.items():
        if name.endswith(suffix):
            return shard_format
    raise ValueError(f"{name!r} ends in none of {', '.join(SUFFIXES.values())}")


def check_format(shard_format: str) -> str:
    """``shard_format`` when it is one of :data:`FORMATS`, else a ``ValueError`` naming them."""
    if shard_format not in SUFFIXES:
        raise ValueError(f"unknown shard format {shard_format!r}: use one of {', '.join(FORMATS)}")
    return shard_format


def write_batches(sink: BinaryIO, schema: pa.Schema, batches: Iterable[pa.RecordBatch], shard_format: str) -> int:
    """Write ``batches`` (of exactly ``schema``) to the file object ``sink`` in ``shard_format``; the row count."""
    num_rows = 0
    if shard_format == "arrow":
        with pa.ipc.new_file(sink, schema, options=pa.ipc.IpcWriteOptions(compression=None)) as writer:
            for batch in batches:
                writer.write_batch(batch)
                num_rows += batch.num_rows
    elif shard_format == "parquet":
        with pq.ParquetWriter(sink, schema, **_PARQUET_OPTIONS) as writer:
            for batch in batches:
                writer.write_batch(batch, row_group_size=max(batch.num_rows, 1))
                num_rows += batch.num_rows
    else:
        with gzip.GzipFile(filename="", mode="wb", compresslevel=6, fileobj=sink, mtime=0) as text:
            for batch in batches:
                text.write("".join(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n"
                                   for row in batch.to_pylist()).encode("utf-8"))
                num_rows += batch.num_rows
    return num_rows


def read_table(data: pa.Buffer, shard_format: str, schema: pa.Schema | None = None) -> pa.Table:
    """A whole shard from its bytes, with ``schema`` when given (Parquet stores a ``timestamp[s]`` as milliseconds).
    JSON Lines need ``schema`` for the exact types; the other formats store it."""
    if shard_format == "arrow":
        return pa.ipc.open_file(data).read_all()
    if shard_format == "parquet":
        table = pq.read_table(pa.BufferReader(data))
        return table if schema is None else table.cast(schema)
    if schema is None:
        raise ValueError("reading JSON Lines shards needs their schema")
    text = pa.input_stream(pa.BufferReader(data), compression="gzip").read_buffer()
    if text.size == 0:
        return schema.empty_table()
    table = pajson.read_json(pa.BufferReader(text), pajson.ReadOptions(block_size=_JSON_BLOCK_BYTES),
                             pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error"))
    return table.cast(schema)
