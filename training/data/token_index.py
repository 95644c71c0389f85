"""The sample index over token shards: T5-style concatenated segments, packed into samples that fit one row.

Documents are read in manifest shard order. Within each shard, groups of ``concat_documents`` consecutive non-empty
documents are concatenated and cut into consecutive segments of ``segment_length`` tokens, so only a group's last
segment is short (T5's ``reduce_concat_tokens`` + ``split_tokens``). Because a shard stores its documents' ids back
to back, every segment is one contiguous slice of the shard's flat ``ids`` values: a segment is (shard, start,
span, length). ``c4prep tokenize`` ends every document with EOS; with ``drop_document_eos`` (T5, which tokenizes
without EOS) a document's final id is left out before grouping when it is that EOS id (a document that was only
EOS is then empty and skipped), so the slice's ``span`` values hold the segment's ``length`` ids plus the EOS ids
it skips (the index checks that a shard holds that id nowhere else).
Full-length segments are samples on their own; the short ones are grouped greedily in index order into samples
whose summed output lengths fit one packed row. Before a shard is used, its bytes are checked against the size and
SHA-256 its manifest records, and its ids against the vocabulary size its schema records.

Differences from T5, by design: documents longer than 65,536 tokens are kept whole (T5 keeps one random 65,536-token
chunk), and token id 0 is not deleted (SentencePiece never emits the pad id, so c4prep token shards hold none).
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from c4prep.manifest import Manifest, ManifestError, ShardEntry, read_manifest
from c4prep.shard_formats import open_arrow
from c4prep.shards import ShardIntegrityError, open_verified_shard, resolve_uri

from .encdec_rows import first_fit_groups

INDEX_VERSION = 1  # bump when the segmenting or packing rule changes: it is part of the fingerprint


class TokenDataError(ValueError):
    """Token shards or loader settings that cannot work (one-line message saying what to do)."""


@dataclass(frozen=True, eq=False)
class SampleIndex:
    """Segments of one split and the samples (packed rows) made of them.

    Segment ``j`` is the ``segment_length[j]`` ids among the ``segment_span[j]`` flat ``ids`` values starting at
    ``segment_start[j]`` of shard ``shard_paths[segment_shard[j]]`` that are not ``dropped_id`` (all of them when
    the two lengths are equal). Sample ``i`` is segments ``sample_offsets[i]:sample_offsets[i + 1]``.
    """

    split: str
    shard_paths: tuple[str, ...]
    segment_shard: np.ndarray  # int32
    segment_start: np.ndarray  # int64
    segment_length: np.ndarray  # int32
    segment_span: np.ndarray  # int32
    sample_offsets: np.ndarray  # int64, num_samples + 1
    fingerprint: str
    dropped_id: int | None = None  # the document EOS id left out (drop_document_eos)

    @property
    def num_samples(self) -> int:
        """Number of samples (packed rows)."""
        return len(self.sample_offsets) - 1

    @property
    def num_segments(self) -> int:
        """Number of segments."""
        return len(self.segment_length)

    @property
    def num_tokens(self) -> int:
        """Number of tokens over all segments (every non-empty document's ids, once, less dropped EOS ids)."""
        return int(self.segment_length.sum(dtype=np.int64))

    def sample_segments(self, sample: int) -> np.ndarray:
        """Global segment ids of ``sample``."""
        if not 0 <= sample < self.num_samples:
            raise IndexError(f"sample {sample} out of range [0, {self.num_samples})")
        return np.arange(self.sample_offsets[sample], self.sample_offsets[sample + 1], dtype=np.int64)


def _split_shards(token_dir: str, split: str,
                  manifest: Manifest | None) -> tuple[list[ShardEntry], list[str], int | None]:
    """The split's entries of ``manifest`` (read from ``token_dir`` when not given; manifest order), local shard
    paths and the vocabulary size the manifest records (None if none); :class:`TokenDataError` otherwise."""
    fs, path = resolve_uri(token_dir)
    if not isinstance(fs, pafs.LocalFileSystem):
        raise TokenDataError(f"token folder {token_dir} is not local: copy it to local disk, the loader "
                             "memory-maps the shards")
    if fs.get_file_info(path).type != pafs.FileType.Directory:
        raise TokenDataError(f"token folder {token_dir} does not exist: run `c4prep tokenize --output {token_dir}` "
                             "or pass the folder it wrote")
    try:
        manifest = manifest or read_manifest(token_dir)
    except ManifestError as error:
        raise TokenDataError(f"token folder {token_dir} is not usable: {error}") from None
    names = manifest.schema().names
    if "ids" not in names or "length" not in names:
        raise TokenDataError(f"{token_dir} holds no token shards (no 'ids'/'length' columns): pass the output "
                             "folder of `c4prep tokenize`, not the documents")
    if split not in manifest.splits:
        raise TokenDataError(f"{token_dir} has no split {split!r}; its splits are: "
                             f"{', '.join(sorted(manifest.splits)) or 'none'}")
    entries = [shard for shard in manifest.shards if shard.split == split]
    if sum(shard.num_rows for shard in entries) == 0:
        raise TokenDataError(f"split {split!r} of {token_dir} has no documents: tokenize a non-empty corpus")
    vocab_size = (manifest.extra.get("vocabulary") or {}).get("vocab_size")
    return entries, [manifest.shard_uri(path, shard) for shard in entries], vocab_size


def _document_lengths(path: str, entry: ShardEntry, drop_id: int | None,
                      manifest_vocab_size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Token counts (int64) of a shard's documents, from its ``length`` column, and how many final ids each drops (1
    where ``drop_id`` ends it), once the shard is checked: its bytes against the manifest's size and SHA-256, the
    vocabulary size its schema records (if any) against the manifest's and its ids against it, and that
    ``drop_id`` ends documents only."""
    if not os.path.isfile(path):
        raise TokenDataError(f"shard {path} listed in the manifest is missing: re-run `c4prep tokenize`")
    try:
        shard = open_verified_shard(path, entry.num_bytes, entry.sha256)
    except ShardIntegrityError as error:
        raise TokenDataError(f"{error}: the shard changed after tokenizing; re-run `c4prep tokenize`") from None
    except pa.ArrowInvalid as error:
        raise TokenDataError(f"shard {path} is not an Arrow file ({error}): re-run `c4prep tokenize`") from None
    vocab_size = int((shard.schema.metadata or {}).get(b"vocab_size", 0))
    if vocab_size and manifest_vocab_size is not None and vocab_size != manifest_vocab_size:
        raise TokenDataError(f"shard {path} was tokenized with a vocabulary of {vocab_size} ids, the manifest says "
                             f"{manifest_vocab_size}: the manifest was edited or lists another tokenize's shards; "
                             "re-run `c4prep tokenize`")
    parts, drops = [], []
    for b, batch in enumerate(shard.batches):
        ids = batch.column("ids")
        lengths = batch.column("length").to_numpy().astype(np.int64)  # copies out of the map
        offsets = ids.offsets.to_numpy()
        if not np.array_equal(np.diff(offsets), lengths):
            raise TokenDataError(f"shard {path} batch {b}: 'length' disagrees with the ids: the shard is "
                                 "corrupt; re-run `c4prep tokenize`")
        values = ids.flatten().to_numpy()  # a view of the map
        if vocab_size and len(values) and (top := int(values.max())) >= vocab_size:
            raise TokenDataError(f"shard {path} batch {b} holds token id {top}, outside its vocabulary of "
                                 f"{vocab_size} ids: the shard is corrupt; re-run `c4prep tokenize`")
        dropped = np.zeros(len(lengths), np.int64)
        if drop_id is not None:
            ends = (offsets[1:] - offsets[0])[lengths > 0]
            dropped[lengths > 0] = values[ends - 1] == drop_id
            if np.count_nonzero(values == drop_id) != dropped.sum():
                raise TokenDataError(f"shard {path} batch {b} holds EOS id {drop_id} inside documents, where "
                                     "data.document_eos=drop cannot leave it out: set data.document_eos=keep")
        parts.append(lengths)
        drops.append(dropped)
    lengths, dropped = (np.concatenate(arrays) if arrays else np.zeros(0, np.int64) for arrays in (parts, drops))
    if len(lengths) != entry.num_rows:
        raise TokenDataError(f"shard {path} has {len(lengths)} rows, the manifest says {entry.num_rows}: "
                             "re-run `c4prep tokenize`")
    return lengths, dropped


def _shard_segments(lengths: np.ndarray, dropped: np.ndarray, segment_length: int,
                    concat_documents: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, span, length) of one shard's segments: the documents less their ``dropped`` final ids, the non-empty
    ones concatenated in groups, then cut (see :class:`SampleIndex`)."""
    starts = np.zeros(len(lengths), np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    lengths = lengths - dropped
    keep = lengths > 0
    lengths, starts = lengths[keep], starts[keep]
    if len(lengths) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    stream = np.zeros(len(lengths), np.int64)  # where each document starts in the stream of kept ids
    np.cumsum(lengths[:-1], out=stream[1:])
    first = np.arange(0, len(lengths), concat_documents)
    totals = np.add.reduceat(lengths, first)
    counts = -(-totals // segment_length)
    group = np.repeat(np.arange(len(first)), counts)
    before = np.zeros(len(first), np.int64)
    np.cumsum(counts[:-1], out=before[1:])
    offset = (np.arange(len(group), dtype=np.int64) - before[group]) * segment_length
    begin, length = stream[first][group] + offset, np.minimum(segment_length, totals[group] - offset)

    def flat(position: np.ndarray) -> np.ndarray:
        """Stream positions -> positions in the flat values."""
        document = np.searchsorted(stream, position, side="right") - 1
        return starts[document] + position - stream[document]

    start = flat(begin)
    return start, flat(begin + length - 1) + 1 - start, length


def _length_table(output_lengths: Callable[[int], tuple[int, int]], segment_length: int, inputs_length: int,
                  targets_length: int) -> np.ndarray:
    """``output_lengths(n)`` for n = 1 .. segment_length as an int64 array [segment_length, 2], checked."""
    table = np.array([tuple(map(int, output_lengths(n))) for n in range(1, segment_length + 1)], dtype=np.int64)
    if table.shape != (segment_length, 2) or table.min() < 0:
        raise TokenDataError("output_lengths must return two non-negative ints (inputs, targets) per segment length")
    over = np.flatnonzero((table[:, 0] > inputs_length) | (table[:, 1] > targets_length))
    if len(over):
        n = int(over[0]) + 1
        raise TokenDataError(f"a {n}-token segment gives (inputs, targets) = {tuple(table[n - 1].tolist())}, over the "
                             f"row lengths ({inputs_length}, {targets_length}): lower segment_length or raise the "
                             "row lengths")
    return table


def build_sample_index(token_dir: str, split: str, segment_length: int,
                       output_lengths: Callable[[int], tuple[int, int]], inputs_length: int, targets_length: int,
                       concat_documents: int = 128, drop_document_eos: int | None = None,
                       manifest: Manifest | None = None) -> SampleIndex:
    """Segment and pack one split of a token folder (see the module docstring); deterministic in its arguments.
    ``drop_document_eos``: the EOS id left out of each document's end (None: documents as tokenized).
    ``manifest``: the folder's manifest when the caller has read it already.

    ``output_lengths(n)`` is the (inputs, targets) length of a row built from an ``n``-token segment (e.g. span
    corruption's, EOS included); samples are packed so that their summed lengths fit (inputs_length,
    targets_length). Samples are ordered by their first segment, segments by sample.
    """
    for name, value in (("segment_length", segment_length), ("concat_documents", concat_documents),
                        ("targets_length", targets_length)):
        if value < 1:
            raise TokenDataError(f"{name} must be >= 1, got {value}")
    if inputs_length < 0:
        raise TokenDataError(f"inputs_length must be >= 0 (0: decoder-only language modelling), got {inputs_length}")
    entries, paths, vocab_size = _split_shards(token_dir, split, manifest)
    table = _length_table(output_lengths, segment_length, inputs_length, targets_length)
    shard_ids, starts, spans, lengths = [], [], [], []
    for k, (entry, path) in enumerate(zip(entries, paths)):
        start, span, length = _shard_segments(*_document_lengths(path, entry, drop_document_eos, vocab_size),
                                              segment_length, concat_documents)
        shard_ids.append(np.full(len(start), k, np.int32))
        starts.append(start)
        spans.append(span)
        lengths.append(length)
    segment_shard, segment_start = np.concatenate(shard_ids), np.concatenate(starts)
    segment_span, segment_len = np.concatenate(spans).astype(np.int32), np.concatenate(lengths).astype(np.int32)
    if len(segment_len) == 0:
        raise TokenDataError(f"split {split!r} of {token_dir} has only empty documents: tokenize a non-empty corpus")

    # Pack: a full segment is its own sample; short ones join greedily. A sample is keyed by its first segment.
    key = np.arange(len(segment_len), dtype=np.int64)
    short = np.flatnonzero(segment_len < segment_length)
    if len(short):
        row = table[segment_len[short] - 1]
        packs = first_fit_groups(row.tolist(), inputs_length, targets_length)
        groups = np.repeat(np.arange(len(packs)), [len(pack) for pack in packs])
        firsts = short[np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]])]
        key[short] = firsts[groups]
    order = np.argsort(key, kind="stable")  # stable: a sample's segments stay in index order
    key = key[order]
    sample_starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    sample_offsets = np.r_[sample_starts, len(key)].astype(np.int64)

    description = {"version": INDEX_VERSION, "split": split, "segment_length": segment_length,
                   "concat_documents": concat_documents, "inputs_length": inputs_length,
                   "targets_length": targets_length, "output_lengths": table.tolist(),
                   "shards": [[e.name, e.num_rows, e.sha256] for e in entries]}
    if drop_document_eos is not None:  # absent when kept: the fingerprints of earlier indexes stay valid
        description["drop_document_eos"] = drop_document_eos
    fingerprint = hashlib.sha256(json.dumps(description, sort_keys=True).encode()).hexdigest()
    arrays = [segment_shard[order], segment_start[order], segment_len[order], segment_span[order], sample_offsets]
    for array in arrays:
        array.setflags(write=False)
    return SampleIndex(split, tuple(paths), *arrays, fingerprint, drop_document_eos)


class _ShardValues:
    """The flat ``ids`` values of one memory-mapped shard (either Arrow IPC format), one zero-copy view per record
    batch: the batches are read once, their buffers stay slices of the map."""

    def __init__(self, path: str) -> None:
        self._source = pa.memory_map(path)
        self._views = []
        for batch in open_arrow(self._source.read_buffer()).batches:
            ids = batch.column("ids")
            offsets = ids.offsets
            first, last = (offsets[0].as_py(), offsets[-1].as_py()) if len(ids) else (0, 0)
            self._views.append(ids.values.slice(first, last - first).to_numpy(zero_copy_only=True))
        self._starts = np.zeros(len(self._views) + 1, np.int64)
        np.cumsum([len(view) for view in self._views], out=self._starts[1:])

    def read(self, start: int, length: int) -> np.ndarray:
        """Values ``start : start + length`` (a read-only view when inside one record batch)."""
        end = start + length
        if not 0 <= start <= end <= self._starts[-1]:
            raise IndexError(f"values {start}:{end} outside the shard's {self._starts[-1]} values")
        b = int(np.searchsorted(self._starts, start, side="right")) - 1
        if end <= self._starts[b + 1]:
            return self._views[b][start - self._starts[b]:end - self._starts[b]]
        pieces = []
        while start < end:  # the range crosses record batches
            b = int(np.searchsorted(self._starts, start, side="right")) - 1
            stop = min(end, int(self._starts[b + 1]))
            pieces.append(self._views[b][start - self._starts[b]:stop - self._starts[b]])
            start = stop
        return np.concatenate(pieces)


_OPEN_SHARDS: dict[str, _ShardValues] = {}
_OPEN_PID = os.getpid()


def _shard_values(path: str) -> _ShardValues:
    """The process's memory map of ``path``, opened on first use (so DataLoader workers map after the fork)."""
    global _OPEN_PID
    if _OPEN_PID != os.getpid():
        _OPEN_SHARDS.clear()
        _OPEN_PID = os.getpid()
    shard = _OPEN_SHARDS.get(path)
    if shard is None:
        shard = _OPEN_SHARDS[path] = _ShardValues(path)
    return shard


def close_shards() -> None:
    """Drop this process's memory maps (they reopen on the next read)."""
    _OPEN_SHARDS.clear()


def read_segment(index: SampleIndex, segment: int) -> np.ndarray:
    """Token ids of global segment ``segment`` (the shard's dtype, uint16 or uint32; treat it as read-only)."""
    if not 0 <= segment < index.num_segments:
        raise IndexError(f"segment {segment} out of range [0, {index.num_segments})")
    shard = _shard_values(index.shard_paths[int(index.segment_shard[segment])])
    ids = shard.read(int(index.segment_start[segment]), int(index.segment_span[segment]))
    return ids if len(ids) == index.segment_length[segment] else ids[ids != index.dropped_id]
