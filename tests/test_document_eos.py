"""`data.document_eos` on the real sample's token shards. T5 tokenizes without EOS, concatenates documents with no
separator and appends one EOS after corruption (`drop`, the default for the T5 objectives); `keep` is the stream as
tokenized (HF/nanoT5 collators, and `lm`'s default, where EOS separates documents)."""
from __future__ import annotations

import numpy as np
import pytest

from c4prep.manifest import build_manifest, write_manifest
from c4prep.shards import read_shard, shard_name, write_shard
from c4prep.tokenization.token_shards import token_batch, token_schema
from c4prep.tokenization.vocabulary import EOS_ID
from c4prep.training.cli import main
from c4prep.training.config_data import TokensData
from c4prep.training.config_groups import TokenObjectiveConfig
from c4prep.training.data import TokenDataError, build_sample_index, read_segment
from c4prep.training.objectives import OBJECTIVES
from c4prep.training.seeding import example_rng
from c4prep.training.stages.data_setup import pretrain_data

SPAN = TokenObjectiveConfig("span_corruption", 512, 114)  # T5's lengths: 568-token segments
LM = TokenObjectiveConfig("lm", 0, 65)


def training_data(tokens, objective: TokenObjectiveConfig, document_eos: str | None = None):
    data = TokensData(kind="tokens", tokens=str(tokens), validation_split=None, document_eos=document_eos)
    return pretrain_data(data, objective, seed=0, decoder_only=objective.name == "lm")


def todays_index(tokens, objective):
    """The index as built before `data.document_eos` (no argument: the documents as tokenized)."""
    rows = training_data(tokens, objective).train
    length = rows.row_builder.objective.segment_length(objective.inputs_length, objective.targets_length)
    return build_sample_index(str(tokens), "train", length, rows.row_builder.objective.output_lengths,
                              objective.inputs_length, objective.targets_length)


def stream_segments(index, shard: int) -> list[list[int]]:
    mine = np.flatnonzero(index.segment_shard == shard)
    return [read_segment(index, int(j)).tolist() for j in mine[np.argsort(index.segment_start[mine])]]


@pytest.mark.parametrize("drop", [True, False])
def test_segments_are_the_documents_concatenated_with_or_without_their_eos(sample_tokens, drop):
    objective = training_data(sample_tokens, SPAN).row_builder.objective
    index = build_sample_index(str(sample_tokens), "train", 100, objective.output_lengths, 512, 114,
                               concat_documents=8, drop_document_eos=EOS_ID if drop else None)
    documents = 0
    for k, path in enumerate(index.shard_paths):
        docs = read_shard(path)["ids"].to_pylist()
        assert all(doc[-1] == EOS_ID and EOS_ID not in doc[:-1] for doc in docs)  # what `c4prep tokenize` writes
        docs = [doc[:-1] if drop else doc for doc in docs]
        documents += len(docs)
        expected = []
        for g in range(0, len(docs), 8):  # groups of 8 documents, each cut into 100-token segments
            stream = [t for doc in docs[g:g + 8] for t in doc]
            expected += [stream[s:s + 100] for s in range(0, len(stream), 100)]
        assert stream_segments(index, k) == expected
    kept = build_sample_index(str(sample_tokens), "train", 100, objective.output_lengths, 512, 114,
                              concat_documents=8)
    assert index.num_tokens == kept.num_tokens - (documents if drop else 0)


def test_span_corruption_examples_hold_one_eos_at_their_ends_unless_kept(sample_tokens):
    shares = {}
    for mode in ("drop", "keep"):
        rows = training_data(sample_tokens, SPAN, mode).train
        index, objective = rows.index, rows.row_builder.objective
        inner = [any((side[:-1] == EOS_ID).any() for side in objective(read_segment(index, j), example_rng(0, 0, j)))
                 for j in range(index.num_segments)]
        shares[mode] = np.mean(inner)
        for i in range(rows.size):  # the rows a model sees: EOS exactly at the end of each packed example
            row = rows.row(i, epoch=0)
            for tokens, segments in ((row["encoder_input_tokens"], row["encoder_segment_ids"]),
                                     (row["decoder_target_tokens"], row["decoder_segment_ids"])):
                ends = np.r_[segments[1:] != segments[:-1], True] & (segments > 0)
                if mode == "drop":
                    assert np.array_equal(tokens == EOS_ID, ends)
                else:
                    assert (tokens[ends] == EOS_ID).all()
    # The sample's documents average ~740 tokens: over half of the 568-token segments kept a document's EOS.
    assert shares["drop"] == 0 and shares["keep"] > 0.3


def test_keep_is_todays_stream_and_each_setting_has_its_own_fingerprint(sample_tokens):
    today = todays_index(sample_tokens, SPAN)
    keep, drop, default = (training_data(sample_tokens, SPAN, mode).train.index for mode in ("keep", "drop", None))
    for name in ("segment_shard", "segment_start", "segment_length", "sample_offsets"):
        assert np.array_equal(getattr(keep, name), getattr(today, name))
    assert keep.fingerprint == today.fingerprint != drop.fingerprint == default.fingerprint
    assert np.array_equal(default.segment_start, drop.segment_start)
    lm_today, lm_default = todays_index(sample_tokens, LM), training_data(sample_tokens, LM).train.index
    assert lm_default.dropped_id is None and lm_default.fingerprint == lm_today.fingerprint  # lm keeps EOS
    assert training_data(sample_tokens, LM, "drop").train.index.fingerprint != lm_today.fingerprint
    for name in OBJECTIVES:  # the T5 objectives append their own EOS, so they drop the documents' by default
        objective = LM if name == "lm" else TokenObjectiveConfig(name, 128, 128)
        assert training_data(sample_tokens, objective).train.index.dropped_id == (None if name == "lm" else EOS_ID)


def _token_folder(folder, docs: list[list[int]]):
    schema = token_schema(600)
    info = write_shard(str(folder / shard_name("train", 0, 1)), schema,
                       [token_batch(schema, [np.array(doc) for doc in docs], [f"doc://{i}" for i in range(len(docs))])])
    write_manifest(str(folder), build_manifest(schema, [info], config={}, counters={}))
    return str(folder)


def test_drop_skips_eos_only_documents_and_refuses_an_eos_inside_a_document(tmp_path):
    def build(folder, drop_id):
        return build_sample_index(folder, "train", 3, lambda n: (n, n), 3, 3, drop_document_eos=drop_id)

    folder = _token_folder(tmp_path / "ok", [[5, 6, 1], [1], [7, 8], [9, 1]])  # an EOS-only and an EOS-less document
    index = build(folder, EOS_ID)
    assert [read_segment(index, j).tolist() for j in range(index.num_segments)] == [[5, 6, 7], [8, 9]]
    assert index.segment_span.tolist() == [5, 2] and index.num_tokens == 5
    kept = build(folder, None)
    assert [read_segment(kept, j).tolist() for j in range(kept.num_segments)] == [[5, 6, 1], [1, 7, 8], [9, 1]]
    inside = _token_folder(tmp_path / "inside", [[5, 1, 6, 1]])
    assert build(inside, None).num_tokens == 4
    with pytest.raises(TokenDataError, match="holds EOS id 1 inside documents.*set data.document_eos=keep"):
        build(inside, EOS_ID)


TINY = ["model=t5_tiny", "objective.inputs_length=128", "objective.targets_length=32", "trainer.max_steps=2",
        "trainer.global_batch_size=4", "trainer.micro_batch_size=4", "trainer.eval_every=0", "trainer.progress=false",
        "trainer.tensorboard=false", "trainer.num_workers=0", "trainer.device=cpu", "optimizer=adamw",
        "schedule=constant"]


def test_tiny_pretrain_runs_with_both_and_a_resume_across_them_is_refused(sample_tokens, tmp_path, capsys):
    def train(run: str, *overrides: str) -> int:
        return main([f"data.tokens={sample_tokens}", f"output_dir={tmp_path / run}", *TINY, *overrides])

    assert train("drop") == 0 and train("keep", "data.document_eos=keep") == 0
    capsys.readouterr()
    assert train("drop", "data.document_eos=keep", "trainer.max_steps=3") == 2
    assert "trained on other data or batch settings" in capsys.readouterr().err
    assert train("bad", "data.document_eos=sometimes") == 2
    err = capsys.readouterr().err.strip()
    assert "data.document_eos='sometimes' is not valid; choose one of: drop, keep" in err and len(err.splitlines()) == 1
