"""Token-shard loader: T5 segments, packing, and deterministic batches over ranks, workers and resumes.

The token shards are real: Penn Treebank sentences (grouped into documents) encoded with a SentencePiece model
trained on them, written with the same helpers `c4prep tokenize` uses.
"""
from __future__ import annotations

import hashlib
import re
import shutil
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pickle

import numpy as np
import pyarrow as pa
import pytest
import torch

from c4prep.manifest import build_manifest, read_manifest, write_manifest
from c4prep.shards import ShardInfo, read_shard, shard_name, write_shard
from c4prep.tokenization.token_shards import token_batch, token_schema
from c4prep.tokenization.train_vocab import VocabConfig, train_model, trainer_options
from c4prep.tokenization.vocabulary import SentencePieceVocabulary
from c4prep.training.data import (BatchPlan, RowBatches, TokenDataError, TokenSampleRows, build_sample_index,
                                  close_shards, make_loader, read_segment, row_set_eval_batches)
from c4prep.training.data import token_index

SEGMENT = 64
CONCAT = 16
INPUTS, TARGETS = 58, 14  # span corruption of a full 64-token segment at density 0.15, mean span 3
TRAIN_SHARDS = 3
ROWS_PER_BATCH = 37  # several record batches per shard, so groups and segments cross batch boundaries


def span_lengths(n: int) -> tuple[int, int]:
    """(inputs, targets) lengths of span corruption of ``n`` tokens, EOS included (T5's counting)."""
    noise = min(max(int(round(n * 0.15)), 1), max(n - 1, 1))
    spans = max(1, int(round(noise / 3)))
    return n - noise + spans + 1, noise + spans + 1


class PadRow:
    """Test row builder: the sample's tokens padded to a fixed width, its segment ids (-1 padded) and the epoch."""

    def __init__(self, width: int = 2 * SEGMENT, max_segments: int = 16) -> None:
        self.width, self.max_segments = width, max_segments

    def __call__(self, segments: Sequence[np.ndarray], segment_ids: Sequence[int], epoch: int) -> dict[str, np.ndarray]:
        tokens = np.zeros(self.width, np.int32)
        flat = np.concatenate(segments) if len(segments) else np.zeros(0, np.int32)
        tokens[:len(flat)] = flat
        ids = np.full(self.max_segments, -1, np.int64)
        ids[:len(segment_ids)] = segment_ids
        return {"tokens": tokens, "segment_ids": ids, "epoch": np.array(epoch)}


def _documents(lines: list[str], rng: np.random.Generator) -> list[str]:
    """PTB sentences grouped into documents of 1..12 sentences."""
    docs, i = [], 0
    while i < len(lines):
        k = int(rng.integers(1, 13))
        docs.append("\n".join(lines[i:i + k]))
        i += k
    return docs


def _write_split(folder: Path, split: str, docs: list[np.ndarray], num_shards: int, vocab_size: int):
    schema = token_schema(vocab_size)
    infos = []
    for k, chunk in enumerate(np.array_split(np.arange(len(docs)), num_shards)):
        urls = [f"ptb://{split}/{i}" for i in chunk]
        batches = [token_batch(schema, [docs[i] for i in chunk[s:s + ROWS_PER_BATCH]], urls[s:s + ROWS_PER_BATCH])
                   for s in range(0, len(chunk), ROWS_PER_BATCH)]
        infos.append(write_shard(str(folder / shard_name(split, k, num_shards)), schema, batches))
    return schema, infos


@pytest.fixture(scope="module")
def token_dir(tmp_path_factory, shared_data) -> Path:
    """Train split: 3 uint16 shards from PTB valid (two empty documents planted); validation: 1 uint32 shard."""
    ptb = shared_data / "ptb"
    train_lines = (ptb / "valid.txt").read_text().splitlines()
    eval_lines = (ptb / "test.txt").read_text().splitlines()[:600]
    options = trainer_options(VocabConfig(inputs=["ptb"], output="", vocab_size=400, num_threads=2))
    vocab = SentencePieceVocabulary(train_model(train_lines, options))
    rng = np.random.default_rng(0)
    train = vocab.encode_arrays(_documents(train_lines, rng), add_eos=True)
    train[5] = train[5][:0]  # empty documents are skipped, as T5 filters them
    train[400] = train[400][:0]
    folder = tmp_path_factory.mktemp("tokens") / "ptb"
    schema, infos = _write_split(folder, "train", train, TRAIN_SHARDS, vocab.vocab_size)
    _, eval_infos = _write_split(folder, "validation", vocab.encode_arrays(_documents(eval_lines, rng), add_eos=True),
                                 1, 70_000)
    write_manifest(str(folder), build_manifest(schema, infos + eval_infos, config={}, counters={}))
    return folder


@pytest.fixture(scope="module")
def index(token_dir):
    return build_sample_index(str(token_dir), "train", SEGMENT, span_lengths, INPUTS, TARGETS, CONCAT)


def _segments(index, ids) -> list[list[int]]:
    return [read_segment(index, int(j)).tolist() for j in ids]


@pytest.mark.parametrize("split", ["train", "validation"])
def test_segments_reconstruct_the_concatenated_groups(token_dir, split):
    close_shards()
    index = build_sample_index(str(token_dir), split, SEGMENT, span_lengths, INPUTS, TARGETS, CONCAT)
    assert not token_index._OPEN_SHARDS  # building reads lengths only; maps open on the first read
    num_shards = TRAIN_SHARDS if split == "train" else 1
    assert [Path(p).name for p in index.shard_paths] == [shard_name(split, k, num_shards) for k in range(num_shards)]
    total = crossing = 0
    for k, path in enumerate(index.shard_paths):
        docs = [d for d in read_shard(path)["ids"].to_pylist() if d]
        total += sum(map(len, docs))
        expected = []
        for g in range(0, len(docs), CONCAT):
            stream = [t for d in docs[g:g + CONCAT] for t in d]
            expected += [stream[s:s + SEGMENT] for s in range(0, len(stream), SEGMENT)]
        mine = np.flatnonzero(index.segment_shard == k)
        mine = mine[np.argsort(index.segment_start[mine])]  # the shard's segments in stream order
        assert _segments(index, mine) == expected
        boundaries = token_index._shard_values(path)._starts[1:-1]  # record batch edges in the flat values
        starts, ends = index.segment_start[mine], index.segment_start[mine] + index.segment_length[mine]
        crossing += int(np.sum((starts[:, None] < boundaries) & (boundaries < ends[:, None])))
    assert index.num_tokens == total > 10_000 and crossing > 0  # some segments span two record batches
    assert read_segment(index, 0).dtype == (np.uint16 if split == "train" else np.uint32)
    again = build_sample_index(str(token_dir), split, SEGMENT, span_lengths, INPUTS, TARGETS, CONCAT)
    assert again.fingerprint == index.fingerprint and np.array_equal(again.segment_start, index.segment_start)


def test_every_sample_fits_one_row_and_packing_is_greedy(index):
    offsets = index.sample_offsets
    assert offsets[0] == 0 and offsets[-1] == index.num_segments and np.all(np.diff(offsets) >= 1)
    lengths = np.array([span_lengths(n) for n in range(1, SEGMENT + 1)])[index.segment_length - 1]
    sums = np.add.reduceat(lengths, offsets[:-1])
    assert np.all(sums[:, 0] <= INPUTS) and np.all(sums[:, 1] <= TARGETS)
    sizes = np.diff(offsets)
    full = index.segment_length == SEGMENT
    assert np.all(sizes[full[offsets[:-1]]] == 1)  # a full segment is a sample on its own
    packs = np.flatnonzero(~full[offsets[:-1]])
    assert np.all(~full[np.concatenate([np.arange(offsets[p], offsets[p + 1]) for p in packs])])
    assert sizes.max() > 1 and len(packs) < (~full).sum()  # packing did group short segments
    for a, b in zip(packs[:-1], packs[1:]):  # the next pack's first segment did not fit the previous pack
        assert np.any(sums[a] + lengths[offsets[b]] > (INPUTS, TARGETS))


def _batches(index, plan: BatchPlan, rank: int, **steps) -> RowBatches:
    """This rank's micro-batches of the token samples of ``index`` (rows laid out by ``PadRow``)."""
    return RowBatches(TokenSampleRows(index, PadRow()), plan, rank, **steps)


def _collect(dataset: RowBatches, workers: int) -> list[dict[str, torch.Tensor]]:
    return list(make_loader(dataset, workers))


def _same(a: list[dict[str, torch.Tensor]], b: list[dict[str, torch.Tensor]]) -> bool:
    return len(a) == len(b) and all(x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
                                    for x, y in zip(a, b))


def _first_segments(batch) -> list[int]:
    return batch["segment_ids"][:, 0].tolist()


def test_same_sequence_for_any_worker_count(index):
    plan = BatchPlan(index.num_samples, global_batch_size=6, world_size=1, micro_batch_size=2, seed=3)
    runs = [_collect(_batches(index, plan, 0, start_step=5, num_steps=3), k) for k in (0, 1, 2)]
    assert len(runs[0]) == 9 and runs[0][0]["tokens"].dtype == torch.int64
    assert _same(runs[0], runs[1]) and _same(runs[0], runs[2])
    expected = [plan.micro_batch_samples(step, 0, m) for step in (5, 6, 7) for m in range(3)]
    starts = index.sample_offsets[np.concatenate(expected)]
    assert sum(map(_first_segments, runs[2]), []) == starts.tolist()


def test_one_epoch_over_ranks_and_workers_is_each_sample_once(index):
    plan = BatchPlan(index.num_samples, global_batch_size=64, world_size=2, micro_batch_size=8, seed=1)
    steps = plan.batches_per_epoch
    assert steps == index.num_samples // 64
    seen = []
    for rank in range(2):
        for batch in _collect(_batches(index, plan, rank, num_steps=steps), 2):
            seen += _first_segments(batch)
            assert batch["epoch"].eq(0).all()
    samples = np.searchsorted(index.sample_offsets, seen, side="right") - 1
    assert len(samples) == steps * 64 == len(set(samples.tolist()))
    assert sorted(samples.tolist()) == sorted(plan.epoch_permutation(0)[:steps * 64].tolist())


def test_world_size_does_not_change_the_global_batch(index):
    one = BatchPlan(index.num_samples, 8, 1, 2, seed=7)
    two = BatchPlan(index.num_samples, 8, 2, 2, seed=7)
    single = _collect(_batches(index, one, 0, num_steps=3), 0)
    ranks = [_collect(_batches(index, two, r, num_steps=3), 0) for r in range(2)]
    for step in range(3):
        merged = torch.cat([b["tokens"] for r in range(2) for b in ranks[r][2 * step:2 * step + 2]])
        assert torch.equal(merged, torch.cat([b["tokens"] for b in single[4 * step:4 * step + 4]]))
        assert np.array_equal(one.global_batch(step), two.global_batch(step))


def test_resume_gives_the_uninterrupted_stream_across_an_epoch_boundary(index):
    plan = BatchPlan(index.num_samples, 8, 1, 4, seed=11)
    start = plan.batches_per_epoch - 2
    whole = _collect(_batches(index, plan, 0, start_step=start, num_steps=4), 0)
    first = _batches(index, plan, 0, start_step=start, num_steps=4)
    state = first.state_dict(next_step=start + 1)
    assert set(state) == {"start_step", "fingerprint"}
    resumed = _batches(index, plan, 0, num_steps=3)
    resumed.load_state_dict(state)
    tail = _collect(resumed, 2)
    assert _same(whole[2:], tail)
    assert [int(b["epoch"][0]) for b in whole] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_permutations_depend_on_seed_and_epoch_only(index):
    n = index.num_samples
    plan = BatchPlan(n, 8, 1, 8, seed=5)
    p0, p1 = plan.epoch_permutation(0).copy(), plan.epoch_permutation(1)
    assert sorted(p0.tolist()) == list(range(n)) and not np.array_equal(p0, p1)
    assert not np.array_equal(p0, BatchPlan(n, 8, 1, 8, seed=6).epoch_permutation(0))
    assert np.array_equal(p0, BatchPlan(n, 16, 2, 4, seed=5).epoch_permutation(0))
    reference = np.random.Generator(np.random.PCG64(np.random.SeedSequence([5, 0]))).permutation(n)
    assert np.array_equal(p0, reference)
    copy = pickle.loads(pickle.dumps(plan))  # workers started by spawn get the plan without the cached permutation
    assert copy == plan and "_permutation" not in copy.__dict__ and np.array_equal(copy.epoch_permutation(1), p1)


def test_drop_last_false_wraps_the_last_batch_within_the_epoch(index):
    n = index.num_samples
    G = 64 if n % 64 else 96
    plan = BatchPlan(n, G, 2, 4, seed=2, drop_last=False)
    last = plan.batches_per_epoch - 1
    assert last == n // G and plan.epoch_of(last + 1) == 1
    perm = plan.epoch_permutation(0)
    assert np.array_equal(plan.global_batch(last), np.r_[perm[last * G:], perm[:G - n % G]])
    dropped = BatchPlan(n, G, 2, 4, seed=2)
    assert dropped.batches_per_epoch == last and np.array_equal(dropped.global_batch(last), plan.global_batch(last + 1))


def test_state_from_other_data_or_settings_is_refused(token_dir, index):
    plan = BatchPlan(index.num_samples, 8, 1, 4, seed=0)
    state = _batches(index, plan, 0).state_dict(next_step=3)
    elastic = _batches(index, BatchPlan(index.num_samples, 8, 2, 2, seed=0), 1)
    elastic.load_state_dict(state)  # W and M may change with G fixed
    assert elastic.start_step == 3
    with pytest.raises(TokenDataError, match="other data or batch settings"):
        _batches(index, BatchPlan(index.num_samples, 8, 1, 4, seed=1), 0).load_state_dict(state)
    other = build_sample_index(str(token_dir), "train", SEGMENT, span_lengths, INPUTS, TARGETS, CONCAT * 2)
    assert other.fingerprint != index.fingerprint
    with pytest.raises(TokenDataError, match="other data or batch settings"):
        _batches(other, BatchPlan(other.num_samples, 8, 1, 4, seed=0), 0).load_state_dict(state)


def test_eval_batches_cover_each_sample_once_with_masked_padding(index):
    world, micro = 3, 50
    per_rank = [list(row_set_eval_batches(TokenSampleRows(index, PadRow()), r, world, micro)) for r in range(world)]
    assert len({len(batches) for batches in per_rank}) == 1  # same count on every rank
    seen = []
    for r, batches in enumerate(per_rank):
        for batch in batches:
            mask = batch["row_mask"]
            assert mask.dtype == torch.bool and batch["tokens"].shape == (micro, 2 * SEGMENT)
            assert batch["tokens"][~mask].eq(0).all()
            seen += _first_segments(batch)[:int(mask.sum())]
            assert not mask[int(mask.sum()):].any()
    samples = np.searchsorted(index.sample_offsets, seen, side="right") - 1
    assert sorted(samples.tolist()) == list(range(index.num_samples))
    assert samples[:micro].tolist() == list(range(0, world * micro, world))  # unshuffled, i % W == rank


def test_clear_errors(tmp_path, token_dir, index):
    with pytest.raises(TokenDataError, match="does not exist: run `c4prep tokenize"):
        build_sample_index(str(tmp_path / "nope"), "train", SEGMENT, span_lengths, INPUTS, TARGETS)
    with pytest.raises(TokenDataError, match="no manifest.json"):
        build_sample_index(str(tmp_path), "train", SEGMENT, span_lengths, INPUTS, TARGETS)
    with pytest.raises(TokenDataError, match="no split 'test'; its splits are: train, validation"):
        build_sample_index(str(token_dir), "test", SEGMENT, span_lengths, INPUTS, TARGETS)
    with pytest.raises(TokenDataError, match=r"a 63-token segment gives \(inputs, targets\) = \(58, 13\), over "
                                              r"the row lengths \(57, 14\)"):
        build_sample_index(str(token_dir), "train", SEGMENT, span_lengths, 57, TARGETS)
    with pytest.raises(TokenDataError, match="global batch 12 is not divisible by world size 2 x micro-batch 4"):
        BatchPlan(index.num_samples, 12, 2, 4, seed=0)
    with pytest.raises(TokenDataError, match=f"corpus has {index.num_samples} samples, fewer than one global batch"):
        BatchPlan(index.num_samples, 1 << 20, 1, 1 << 20, seed=0)
    with pytest.raises(TokenDataError, match="num_samples=source.size"):
        _batches(index, BatchPlan(index.num_samples - 1, 8, 1, 8, seed=0), 0)


def test_token_shards_of_the_ipc_file_format_give_the_same_segments(tmp_path, token_dir, index):
    """Token shards from before manifest format 4 are the Arrow IPC *file* format: the same batches in that format
    index and read exactly as the IPC stream shards do (the loader maps both zero-copy: `zero_copy_only`)."""
    old = tmp_path / "old"
    old.mkdir()
    manifest, infos = read_manifest(str(token_dir)), []
    for shard in manifest.shards:
        table, path = read_shard(manifest.shard_uri(str(token_dir), shard)), old / shard.name
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            for batch in table.to_batches():  # the stream shard's record batches, one for one
                writer.write_batch(batch)
        data = path.read_bytes()
        assert data.startswith(b"ARROW1")
        infos.append(ShardInfo(shard.name, shard.num_rows, len(data), hashlib.sha256(data).hexdigest()))
    write_manifest(str(old), replace(build_manifest(manifest.schema(), infos, config={}, counters={}),
                                     format_version=3))
    again = build_sample_index(str(old), "train", SEGMENT, span_lengths, INPUTS, TARGETS, CONCAT)
    for name in ("segment_shard", "segment_start", "segment_length", "segment_span", "sample_offsets"):
        assert np.array_equal(getattr(again, name), getattr(index, name)), name
    assert again.fingerprint != index.fingerprint  # the shards' SHA-256 are part of it
    for path, mapped in zip(again.shard_paths, index.shard_paths):
        assert np.array_equal(token_index._shard_values(path)._starts, token_index._shard_values(mapped)._starts)
    segments = range(0, index.num_segments, 7)
    assert [read_segment(again, j).tolist() for j in segments] == [read_segment(index, j).tolist() for j in segments]


def test_a_shard_that_differs_from_its_manifest_is_refused(tmp_path, token_dir):
    copy = Path(shutil.copytree(token_dir, tmp_path / "ptb"))
    shard = copy / shard_name("train", 1, TRAIN_SHARDS)
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, one byte of the ids changed
    shard.write_bytes(bytes(data))
    with pytest.raises(TokenDataError, match=re.escape(f"{shard} does not match its recorded SHA-256")):
        build_sample_index(str(copy), "train", SEGMENT, span_lengths, INPUTS, TARGETS, CONCAT)
