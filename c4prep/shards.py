"""Shard files: naming, shard-count rule, atomic deterministic writes, reads checked against size and SHA-256.

Paths are local paths or filesystem URIs (``gs://``, ``s3://``, ``file://``), resolved with
``pyarrow.fs``. A shard's format (Arrow IPC stream, Parquet or JSON Lines, :mod:`c4prep.shard_formats`) is the
suffix of its name; Arrow shards are uncompressed, so local ones can be memory-mapped and read with plain
``pyarrow.ipc.open_stream`` or ``datasets.Dataset.from_file``.
"""
from __future__ import annotations

import hashlib
import itertools
import os
import re
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from c4prep.shard_formats import SUFFIXES, ArrowShard, check_format, format_of, open_arrow, read_table, write_batches

MAX_SHARDS = 99_999  # five digits in shard names
_SPLIT = r"[A-Za-z0-9_][A-Za-z0-9_.-]*"
_SPLIT_RE = re.compile(_SPLIT)
_SUFFIX = "|".join(re.escape(suffix) for suffix in SUFFIXES.values())
_SHARD_RE = re.compile(rf"(?P<split>{_SPLIT})-(?P<index>\d{{5}})-of-(?P<count>\d{{5}})(?:{_SUFFIX})")
_TEMP_RE = re.compile(r"\..+\.tmp-[0-9a-f]{32}")

_MIN_SHARD_BYTES = 64 << 20
_MAX_SHARD_BYTES = 1 << 30
_EXAMPLE_OVERHEAD_BYTES = 16


@dataclass(frozen=True)
class ShardInfo:
    """What :func:`write_shard` wrote: basename, rows, file size and SHA-256 of the bytes."""

    name: str
    num_rows: int
    num_bytes: int
    sha256: str


GCS_FIRST_CONTACT_S = 30  # Arrow retries a GCS request for 15 minutes, saying nothing, before it gives up


class UnsupportedUriError(ValueError):
    """A URI whose scheme no pyarrow filesystem reads (message names it and the schemes that work), or a bucket that
    cannot be reached."""


def resolve_uri(uri: str) -> tuple[pafs.FileSystem, str]:
    """Return ``(filesystem, path)`` for a URI; a plain path is local (made absolute). The first time a process
    resolves a ``gs://`` bucket, it reads ``uri``'s status within `GCS_FIRST_CONTACT_S` seconds of retries (without
    network or credentials, Arrow's own retries kept a command silent for 15 minutes; a URI with options of its own,
    an emulator's ``?endpoint_override=``, is left to them); later requests retry as Arrow does, for a transient error
    in a long job."""
    if "://" not in uri:
        return pafs.LocalFileSystem(), os.path.abspath(uri)
    try:
        fs, path = pafs.FileSystem.from_uri(uri)
    except pa.ArrowInvalid:
        raise UnsupportedUriError(f"{uri}: no filesystem reads {uri.split('://')[0]}:// paths; use a local "
                                  "path, s3://, gs://, hdfs:// or abfs://") from None
    bucket = path.split("/")[0]
    if fs.type_name == "gcs" and "?" not in uri and bucket not in _gcs_buckets_reached:
        _check_reachable(uri, path)
        _gcs_buckets_reached.add(bucket)
    return fs, path


_gcs_buckets_reached: set[str] = set()


def _check_reachable(uri: str, path: str) -> None:
    probe, _ = pafs.FileSystem.from_uri(f"gs://{path}?retry_limit_seconds={GCS_FIRST_CONTACT_S}")
    try:
        probe.get_file_info(path)
    except (OSError, pa.ArrowException) as error:  # an unusable credentials file is an ArrowException
        reason = re.sub(r"\s*error_info=.*", "", str(error), flags=re.S)
        raise UnsupportedUriError(f"{uri}: cannot be reached in {GCS_FIRST_CONTACT_S} s of retries ({reason}); "
                                  "check the network and the Google Cloud credentials "
                                  "(GOOGLE_APPLICATION_CREDENTIALS, `gcloud auth application-default login`)") from None


def join_uri(base: str, *names: str) -> str:
    """Join path components onto a local path or URI with ``/``."""
    return "/".join([base.rstrip("/"), *names])


def shard_name(split: str, index: int, count: int, shard_format: str = "arrow") -> str:
    """File name of shard ``index`` of ``count`` of a split in a format, e.g. ``train-00000-of-00008.arrow``."""
    if not _SPLIT_RE.fullmatch(split):
        raise ValueError(f"invalid split name {split!r}: use letters, digits, '_', '.', '-' "
                         "and do not start with '.' or '-'")
    if not 1 <= count <= MAX_SHARDS:
        raise ValueError(f"shard count must be in [1, {MAX_SHARDS}], got {count}")
    if not 0 <= index < count:
        raise ValueError(f"shard index must be in [0, {count}), got {index}")
    return f"{split}-{index:05d}-of-{count:05d}{SUFFIXES[check_format(shard_format)]}"


def parse_shard_name(name: str) -> tuple[str, int, int] | None:
    """Inverse of :func:`shard_name` for a basename: ``(split, index, count)``, or None."""
    match = _SHARD_RE.fullmatch(name)
    if match is None:
        return None
    index, count = int(match["index"]), int(match["count"])
    if not 0 <= index < count:
        return None
    return match["split"], index, count


def num_shards_for(total_bytes: int, num_examples: int) -> int:
    """Number of shards for a split, following TFDS ``ShardConfig.get_number_shards``.

    Shards target 64 MiB .. 1 GiB (counting 16 bytes of overhead per example). This is
    TFDS's *precise sharding* variant: the 1 GiB upper size is not shrunk by 0.9, because
    our writer knows every shard's exact content. Above 1024 shards the result is the
    smallest multiple of 1024 reaching the minimum count (TFDS additionally requires
    ``num_examples >= n`` there and never terminates when it cannot hold).
    """
    if total_bytes < 0 or num_examples < 0:
        raise ValueError(f"sizes must be >= 0, got total_bytes={total_bytes}, "
                         f"num_examples={num_examples}")
    total = total_bytes + _EXAMPLE_OVERHEAD_BYTES * num_examples
    max_shards = total // _MIN_SHARD_BYTES
    min_shards = total // _MAX_SHARD_BYTES
    if min_shards <= 1024 <= max_shards and num_examples >= 1024:
        return 1024
    if min_shards > 1024:
        return -(-min_shards // 1024) * 1024
    for n in (512, 256, 128, 64, 32, 16, 8, 4, 2):
        if min_shards <= n <= max_shards and num_examples >= n:
            return n
    return 1


def absolute_input(path: str) -> str:
    """A local input path or pattern made absolute, links resolved (a run records it so, wherever it ran from, and
    two spellings of one folder are one input); a URI as it is."""
    return path if "://" in path else os.path.realpath(path)


def is_temp_name(name: str) -> bool:
    """Whether a basename is a temporary file left by :func:`atomic_output`."""
    return _TEMP_RE.fullmatch(name) is not None


@contextmanager
def atomic_output(uri: str) -> Iterator[pa.NativeFile]:
    """Open an output stream whose content appears at ``uri`` only if the block succeeds.

    Writes go to a hidden sibling ``.<name>.tmp-<uuid4 hex>`` that is moved onto ``uri`` on
    success and deleted (the exception re-raised) on failure.
    """
    fs, path = resolve_uri(uri)
    parent = path.rsplit("/", 1)[0]
    tmp = _temp_path(path)
    fs.create_dir(parent, recursive=True)
    stream = fs.open_output_stream(tmp)
    try:
        yield stream
        stream.close()
        fs.move(tmp, path)
    except BaseException:
        try:
            stream.close()
        except OSError:
            pass  # e.g. a full disk again while flushing: the error to report is the one re-raised below
        try:
            fs.delete_file(tmp)
        except FileNotFoundError:
            pass
        raise


def _temp_path(path: str) -> str:
    """The hidden sibling ``.<name>.tmp-<uuid4 hex>`` a file is written to before it is moved onto ``path``."""
    parent, name = path.rsplit("/", 1)
    return f"{parent}/.{name}.tmp-{uuid.uuid4().hex}"


def check_writable(folder_uri: str) -> None:
    """An :class:`OSError` where a file cannot be written into the folder ``folder_uri`` (a read-only filesystem, no
    permission): a probe file is written and deleted."""
    fs, folder = resolve_uri(folder_uri)
    probe = _temp_path(f"{folder}/probe")
    fs.open_output_stream(probe).close()
    fs.delete_file(probe)


def write_files_together(folder_uri: str, files: Mapping[str, bytes]) -> None:
    """Write ``files`` (name -> content) into ``folder_uri``: all to temporary siblings first, then each moved into
    place in order. A failed write (a full disk) leaves the folder as it was; the moves, which need no space, follow
    one another, so the last file (a card that describes the others) is replaced last."""
    fs, folder = resolve_uri(folder_uri)
    pending = {}
    try:
        for name, data in files.items():
            pending[name] = _temp_path(f"{folder}/{name}")
            with fs.open_output_stream(pending[name]) as stream:
                stream.write(data)
        for name in files:
            fs.move(pending.pop(name), f"{folder}/{name}")
    except BaseException:
        for tmp in pending.values():
            try:
                fs.delete_file(tmp)
            except OSError:
                pass  # never written, or the disk refuses again: the error to report is the one re-raised
        raise


class _HashingSink:
    """Write-only file object that forwards to a stream, hashing and counting the bytes."""

    def __init__(self, stream: pa.NativeFile) -> None:
        self._stream = stream
        self.sha256 = hashlib.sha256()
        self.num_bytes = 0
        self.closed = False  # read by pyarrow's PythonFile wrapper

    def write(self, data: Any) -> int:
        self._stream.write(data)
        self.sha256.update(data)
        self.num_bytes += len(data)
        return len(data)

    def flush(self) -> None:
        self._stream.flush()


def write_shard(uri: str, schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> ShardInfo:
    """Atomically write ``batches`` as a shard at ``uri``, in the format its name's suffix names.

    Batches must have exactly ``schema``; no batches gives a valid zero-row shard. The same
    schema and batches always produce byte-identical files.
    """
    name = uri.rstrip("/").rsplit("/", 1)[-1]
    shard_format = format_of(name)
    with atomic_output(uri) as stream:
        sink = _HashingSink(stream)
        num_rows = write_batches(sink, schema, batches, shard_format)
    return ShardInfo(name, num_rows, sink.num_bytes, sink.sha256.hexdigest())


class ShardIntegrityError(ValueError):
    """A shard's bytes are not the ones recorded for it (size or SHA-256)."""


def shard_bytes(uri: str) -> pa.Buffer:
    """All bytes of a file: a memory map when local (read lazily), one read through the filesystem otherwise."""
    fs, path = resolve_uri(uri)
    if isinstance(fs, pafs.LocalFileSystem):
        with pa.memory_map(path) as source:
            return source.read_buffer()
    with fs.open_input_stream(path) as source:
        return source.read_buffer()


def read_shard(uri: str, schema: pa.Schema | None = None) -> pa.Table:
    """Read a whole shard unchecked: memory-mapped when local; a JSON Lines shard needs its ``schema``."""
    return read_table(shard_bytes(uri), format_of(uri), schema)


def check_bytes(uri: str, data: pa.Buffer, num_bytes: int, sha256: str) -> None:
    """A :class:`ShardIntegrityError` unless ``data`` has the recorded size and SHA-256."""
    if data.size != num_bytes:
        raise ShardIntegrityError(f"{uri} has {data.size} bytes, {num_bytes} were recorded")
    if hashlib.sha256(memoryview(data)).hexdigest() != sha256:
        raise ShardIntegrityError(f"{uri} does not match its recorded SHA-256 (same size, other bytes)")


def open_verified_shard(uri: str, num_bytes: int, sha256: str) -> ArrowShard:
    """Open an Arrow shard (either IPC format, :func:`~c4prep.shard_formats.open_arrow`) after checking its bytes
    against the recorded size and SHA-256, in the one read that parsing needs anyway (the hash runs over the same
    memory map or buffer the batches are read from, zero-copy)."""
    data = shard_bytes(uri)
    check_bytes(uri, data, num_bytes, sha256)
    return open_arrow(data)


def read_verified_shard(uri: str, num_bytes: int, sha256: str, schema: pa.Schema | None = None) -> pa.Table:
    """Read a whole shard of any format whose bytes are checked as :func:`open_verified_shard` checks them (a JSON
    Lines shard needs its ``schema``)."""
    data = shard_bytes(uri)
    check_bytes(uri, data, num_bytes, sha256)
    return read_table(data, format_of(uri), schema)


def batched(rows: Iterable[dict[str, Any]], schema: pa.Schema,
            batch_size: int = 1024) -> Iterator[pa.RecordBatch]:
    """Group row dicts into record batches of at most ``batch_size`` rows with ``schema``."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    it = iter(rows)
    while chunk := list(itertools.islice(it, batch_size)):
        yield pa.RecordBatch.from_pylist(chunk, schema=schema)
