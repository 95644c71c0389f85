"""The file formats a shard can have, told apart by the suffix of its name, each written deterministically.

- ``arrow``: Arrow IPC *stream* format, uncompressed: memory-mappable (the record batches are zero-copy slices of
  the map), the format Hugging Face ``datasets`` writes, so ``datasets.Dataset.from_file`` and
  ``pyarrow.ipc.open_stream`` open a shard; a shard without rows holds one empty batch, as ``from_file`` needs one.
  A stream has no footer: readers walk its batches from the start, and ``pyarrow.dataset`` (which reads only the IPC
  *file* format) does not open it; ``parquet`` is the format for ``pyarrow.dataset`` and for readers that seek.
  Shards written before manifest format 4 are the IPC file format: :func:`open_arrow`, which every c4prep reader of
  Arrow shards uses, reads both, told apart by the file format's magic bytes.
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
from typing import BinaryIO, NamedTuple

import pyarrow as pa
import pyarrow.json as pajson
import pyarrow.parquet as pq

SUFFIXES = {"arrow": ".arrow", "parquet": ".parquet", "jsonl.gz": ".jsonl.gz"}
FORMATS = tuple(SUFFIXES)
_PARQUET_OPTIONS = dict(compression="zstd", compression_level=3, version="2.6", data_page_version="1.0",
                        use_dictionary=True, write_statistics=True, store_schema=True)
_JSON_BLOCK_BYTES = 64 << 20  # pyarrow parses JSON in blocks: a row may be at most this long
IPC_FILE_MAGIC = b"ARROW1"  # the first bytes of an Arrow IPC file; a stream starts with a message instead
_END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"  # the last 8 bytes of an IPC stream: a message of length 0


class ArrowShard(NamedTuple):
    """The schema (metadata included) and the record batches of an Arrow shard, in file order."""

    schema: pa.Schema
    batches: list[pa.RecordBatch]


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
        num_batches = 0
        with pa.ipc.new_stream(sink, schema, options=pa.ipc.IpcWriteOptions(compression=None)) as writer:
            for batch in batches:
                writer.write_batch(batch)
                num_rows += batch.num_rows
                num_batches += 1
            if num_batches == 0:  # `datasets.Dataset.from_file` refuses a stream without batches
                writer.write_batch(pa.RecordBatch.from_pylist([], schema=schema))
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


def open_arrow(data: pa.Buffer) -> ArrowShard:
    """An Arrow shard from its bytes, in either format: the IPC stream c4prep writes, or the IPC file of shards from
    before manifest format 4 (it starts with :data:`IPC_FILE_MAGIC`). The batches are zero-copy slices of ``data``
    (of the memory map, for a mapped local file). ``pa.ArrowInvalid`` when the bytes are neither, or a stream lacks
    its end-of-stream marker (a file cut short after a whole batch would otherwise read as fewer rows)."""
    try:
        if data.size >= len(IPC_FILE_MAGIC) and data.slice(0, len(IPC_FILE_MAGIC)).to_pybytes() == IPC_FILE_MAGIC:
            reader = pa.ipc.open_file(data)
            return ArrowShard(reader.schema, [reader.get_batch(b) for b in range(reader.num_record_batches)])
        stream = pa.ipc.open_stream(data)
        shard = ArrowShard(stream.schema, list(stream))
    except OSError as error:  # a message cut short: pyarrow reports the short read as an I/O error
        raise pa.ArrowInvalid(f"not a whole Arrow IPC stream or file ({error})") from None
    if data.size < len(_END_OF_STREAM) or data.slice(data.size - len(_END_OF_STREAM)).to_pybytes() != _END_OF_STREAM:
        raise pa.ArrowInvalid("the Arrow IPC stream has no end-of-stream marker: the file is cut short")
    return shard


def read_table(data: pa.Buffer, shard_format: str, schema: pa.Schema | None = None) -> pa.Table:
    """A whole shard from its bytes, with ``schema`` when given (Parquet stores a ``timestamp[s]`` as milliseconds).
    JSON Lines need ``schema`` for the exact types; the other formats store it."""
    if shard_format == "arrow":
        shard = open_arrow(data)
        return pa.Table.from_batches(shard.batches, shard.schema)
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
