"""Decoder-only data: LM and prefix-LM rows, re-packing padded rows (the same losses), character windows, row-set
batches over ranks and workers, minGPT's schedule and weight-decay groups."""
import math

import numpy as np
import pytest
import torch
from c4prep.training.data.batches import BatchPlan, make_loader
from c4prep.training.data.token_index import TokenDataError
from c4prep.training.experiments.cs224n_a5.char_corruption import CharCorruptionRows, load_char_corpus
from c4prep.training.experiments.shakespeare.char_text import CharTextError, char_text_splits
from c4prep.training.data.row_batches import (
    RowBatches,
    RowSet,
    length_order,
    row_set_eval_batches,
    row_set_length_batches,
)
from c4prep.training.models.gpt import GPT, gpt_config
from c4prep.training.objectives import make_objective
from c4prep.training.data.decoder_rows import (
    DecoderRowBuilder, first_fit_decreasing, pack_decoder_row, pack_padded_rows)
from c4prep.training.optim import decay_groups
from c4prep.training.schedules import mingpt_cosine
from c4prep.training.batch_losses import DecoderLoss


def test_lm_rows_predict_every_next_token_of_each_packed_segment():
    row = pack_decoder_row([(np.zeros(0, np.int32), np.array([5, 6, 7, 1])),
                            (np.zeros(0, np.int32), np.array([8, 9, 1]))], length=7)
    assert row["input_tokens"].tolist() == [5, 6, 7, 8, 9, 0, 0]
    assert row["target_tokens"].tolist() == [6, 7, 1, 9, 1, 0, 0]
    assert row["loss_weights"].tolist() == [1, 1, 1, 1, 1, 0, 0]
    assert row["segment_ids"].tolist() == [1, 1, 1, 2, 2, 0, 0]
    assert row["positions"].tolist() == [0, 1, 2, 0, 1, 0, 0]
    assert not row["prefix_mask"].any()


def test_prefix_lm_rows_weight_only_the_targets_and_mark_the_prefix():
    row = pack_decoder_row([(np.array([3, 4, 1]), np.array([5, 6, 1]))], length=6)
    assert row["input_tokens"].tolist() == [3, 4, 1, 5, 6, 0]
    assert row["target_tokens"].tolist() == [4, 1, 5, 6, 1, 0]
    assert row["loss_weights"].tolist() == [0, 0, 1, 1, 1, 0]  # predicting 5, 6 and EOS
    assert row["prefix_mask"].tolist() == [1, 1, 1, 0, 0, 0]
    with pytest.raises(ValueError, match="positions"):
        pack_decoder_row([(np.array([3, 4, 1]), np.array([5, 6, 1]))], length=4)


def test_decoder_row_builder_applies_the_objective_with_per_segment_seeds(ptb_ids):
    lm = DecoderRowBuilder(make_objective("lm", vocab_size=600), 0, 65, seed=0)
    segment = ptb_ids[:65]
    row = lm([segment], [0], epoch=0)
    assert lm.length == 64 and row["input_tokens"].tolist() == segment[:-1].tolist()
    assert row["target_tokens"].tolist() == segment[1:].tolist() and row["loss_weights"].all()
    prefix = DecoderRowBuilder(make_objective("prefix_lm", vocab_size=600), 32, 33, seed=0)
    rows = [prefix([ptb_ids[:32]], [7], epoch) for epoch in (0, 0, 1)]
    assert np.array_equal(rows[0]["prefix_mask"], rows[1]["prefix_mask"])
    assert prefix.length == 64 and rows[0]["prefix_mask"].sum() >= 2


def test_lm_objective_needs_no_inputs():
    with pytest.raises(ValueError, match="inputs_length 0"):
        make_objective("lm", vocab_size=100).segment_length(8, 65)


@pytest.fixture(scope="module")
def a5_rows(shared_data):
    documents, vocab = load_char_corpus(shared_data / "cs224n_a5" / "wiki.txt")
    return CharCorruptionRows(documents, vocab, block_size=128, seed=0)


def test_repacking_a5_rows_halves_the_positions_and_keeps_every_loss(a5_rows):
    rows = [a5_rows(i, 0) for i in range(64)]
    packed = pack_padded_rows(rows, 127)
    assert len(packed) < 0.7 * len(rows)
    assert sum(int(r["loss_weights"].sum()) for r in packed) == sum(int(r["loss_weights"].sum()) for r in rows)
    torch.manual_seed(0)
    model = GPT(gpt_config("gpt_a5", 256, n_layer=1, dropout=0.0)).eval()
    collate = {name: torch.from_numpy(np.stack([r[name] for r in rows])) for name in rows[0]}
    packed_batch = {name: torch.from_numpy(np.stack([r[name] for r in packed])) for name in packed[0]}
    padded_loss, padded_count = DecoderLoss().loss(model, collate)
    packed_loss, packed_count = DecoderLoss().loss(model, packed_batch)
    assert padded_count == packed_count
    torch.testing.assert_close(packed_loss, padded_loss, rtol=1e-5, atol=1e-3)


def test_first_fit_decreasing_places_the_largest_first_in_the_first_bin_with_room():
    order, bins, offsets, numbers = first_fit_decreasing(np.array([5, 3, 4, 2, 4]), 7)
    assert order.tolist() == [0, 2, 4, 1, 3]  # sizes 5, 4, 4, 3, 2: equal sizes keep their order
    assert bins.tolist() == [0, 1, 2, 1, 0] and offsets.tolist() == [0, 0, 0, 4, 5]
    assert numbers.tolist() == [1, 1, 1, 2, 2]


def test_repacked_rows_lay_out_each_used_part_as_a_segment():
    rows = [{"input_tokens": np.arange(10, 16), "target_tokens": np.arange(20, 26),
             "loss_weights": np.array(weights, dtype=np.int32)}
            for weights in ([1, 1, 1, 0, 0, 0], [0, 0, 0, 0, 0, 0], [0, 1, 0, 1, 0, 0], [1, 1, 1, 1, 1, 0])]
    packed = pack_padded_rows(rows, 8)  # used parts 3, -, 4, 5 positions: [5 + 3], [4]
    assert len(packed) == 2
    assert packed[0]["input_tokens"].tolist() == [10, 11, 12, 13, 14, 10, 11, 12]
    assert packed[0]["segment_ids"].tolist() == [1] * 5 + [2] * 3
    assert packed[0]["positions"].tolist() == [0, 1, 2, 3, 4, 0, 1, 2]
    assert packed[0]["loss_weights"].tolist() == [1, 1, 1, 1, 1, 1, 1, 1]
    assert packed[1]["target_tokens"].tolist() == [20, 21, 22, 23, 0, 0, 0, 0]
    assert packed[1]["loss_weights"].tolist() == [0, 1, 0, 1, 0, 0, 0, 0]
    assert packed[1]["segment_ids"].tolist() == [1] * 4 + [0] * 4
    assert all(array.dtype == np.int32 for row in packed for array in row.values())
    with pytest.raises(ValueError, match="more than 4 positions"):
        pack_padded_rows(rows, 4)


def test_repacked_batches_for_cuda_graphs_come_in_multiples_of_8_rows_with_the_same_losses(a5_rows):
    source = RowSet(a5_rows, len(a5_rows), "a5")
    plan = BatchPlan(source.size, 128, 1, 128, seed=0, drop_last=False)
    packed = RowBatches(source, plan, 0, num_steps=12, pack_length=127)
    for_graphs = RowBatches(source, plan, 0, num_steps=12, pack_length=127, packed_row_multiple=8)
    torch.manual_seed(0)
    model = GPT(gpt_config("gpt_a5", 256, n_layer=1, dropout=0.0)).eval()
    shapes, graph_shapes = set(), set()
    for batch, graph_batch in zip(packed, for_graphs):
        shapes.add(len(batch["input_tokens"]))
        graph_shapes.add(len(graph_batch["input_tokens"]))
        assert len(graph_batch["input_tokens"]) % 8 == 0 and len(graph_batch["input_tokens"]) < 128
        assert not graph_batch["loss_weights"][len(batch["input_tokens"]):].any()  # the added rows are empty
        loss, count = DecoderLoss().loss(model, batch)
        graph_loss, graph_count = DecoderLoss().loss(model, graph_batch)
        assert graph_count == count
        torch.testing.assert_close(graph_loss, loss, rtol=1e-5, atol=1e-3)
    assert len(graph_shapes) < len(shapes)


def test_shakespeare_windows_cover_the_split(shared_data):
    text = (shared_data / "tinyshakespeare" / "input.txt").read_text()
    train, validation, vocab = char_text_splits(text, block_size=64)
    assert vocab.vocab_size == 65 + 2  # the 65 characters, plus PAD and MASK ids of the shared char vocabulary
    assert len(train.ids) == 1_003_854 and len(validation.ids) == 111_540  # nanoGPT's train.bin / val.bin
    assert len(train) == 1_003_854 - 64 and len(validation) == (111_540 - 65) // 64 + 1
    row = train(10, epoch=0)
    assert vocab.decode(row["input_tokens"]) == text[10:74] and vocab.decode(row["target_tokens"]) == text[11:75]
    assert vocab.decode(validation(1, 0)["input_tokens"]) == text[1_003_854 + 64:1_003_854 + 128]
    with pytest.raises(CharTextError):
        char_text_splits("abc", block_size=64)


def _stream_items(row_set, plan, rank, workers, steps):
    stream = RowBatches(row_set, plan, rank, num_steps=steps)
    return [batch["input_tokens"][:, 0].tolist() for batch in make_loader(stream, workers)]


def test_row_batches_do_not_depend_on_ranks_or_workers_and_resume():
    ids = np.arange(1000, dtype=np.int64)
    rows = RowSet(lambda item, epoch: {"input_tokens": ids[item:item + 4]}, 37, "toy")
    one = BatchPlan(37, 8, 1, 4, seed=3, drop_last=False)
    two = BatchPlan(37, 8, 2, 4, seed=3, drop_last=False)
    single = _stream_items(rows, one, 0, 0, 6)
    rank0, rank1 = _stream_items(rows, two, 0, 2, 6), _stream_items(rows, two, 1, 0, 6)
    assert [a + b for a, b in zip(single[0::2], single[1::2])] == [a + b for a, b in zip(rank0, rank1)]
    epoch0 = [item for batch in single[:10] for item in batch]
    assert sorted(set(epoch0)) == list(range(37))  # drop_last=False: every item in an epoch of 5 steps
    resumed = RowBatches(rows, one, 0, num_steps=2).starting_at(4)
    assert [b["input_tokens"][:, 0].tolist() for b in resumed] == single[8:12]


def test_length_batches_group_rows_by_length_and_name_their_items():
    lengths = [5, 1, 3, 5, 2, 4, 1]
    rows = RowSet(lambda item, epoch: {"loss_weights": np.array([1] * lengths[item] + [0] * (6 - lengths[item]))},
                  len(lengths), "toy")
    batches = list(row_set_length_batches(rows, 3, lambda row: int(row["loss_weights"].sum())))
    assert [b["item"].tolist() for b in batches] == [[1, 6, 4], [2, 5, 0], [3]]  # ties keep item order
    assert [b["loss_weights"].sum(-1).tolist() for b in batches] == [[1, 1, 2], [3, 4, 5], [5]]
    with pytest.raises(ValueError, match="micro_batch_size"):
        next(row_set_length_batches(rows, 0, len))


def test_eval_batches_in_length_order_are_dealt_to_ranks_and_padded():
    lengths = [5, 1, 3, 5, 2, 4, 1]
    rows = RowSet(lambda item, epoch: {"loss_weights": np.array([1] * lengths[item] + [0] * (6 - lengths[item])),
                                       "id": np.array([item])}, len(lengths), "toy")
    order = length_order(rows, lambda row: int(row["loss_weights"].sum()))
    assert order.tolist() == [1, 6, 4, 2, 5, 0, 3]
    ranks = [list(row_set_eval_batches(rows, rank, 2, 2, order)) for rank in (0, 1)]
    assert [[b["id"][:, 0].tolist() for b in batches] for batches in ranks] == [[[1, 4], [5, 3]], [[6, 2], [0, 0]]]
    assert [b["row_mask"].tolist() for b in ranks[1]] == [[True, True], [True, False]]  # same batch count per rank
    assert [b["id"][:, 0].tolist() for b in row_set_eval_batches(rows, 0, 1, 4)] == [[0, 1, 2, 3], [4, 5, 6, 0]]
    with pytest.raises(TokenDataError, match="order lists 3 items"):
        next(row_set_eval_batches(rows, 0, 1, 4, order[:3]))


def test_a_limited_validation_pass_scores_the_first_items_not_the_shortest():
    """trainer.eval_batches=1 of 4 rows scored rows 1, 6, 4, 2 (the shortest) in length order; the first four now."""
    lengths = [5, 1, 3, 5, 2, 4, 1]
    rows = RowSet(lambda item, epoch: {"loss_weights": np.array([1] * lengths[item] + [0] * (6 - lengths[item])),
                                       "id": np.array([item])}, len(lengths), "toy")
    order = length_order(rows, lambda row: int(row["loss_weights"].sum()), evaluated=4)
    assert order.tolist() == [1, 2, 0, 3, 4, 5, 6]
    (first, *_) = row_set_eval_batches(rows, 0, 1, 4, order)
    assert sorted(first["id"][:, 0].tolist()) == [0, 1, 2, 3]
    assert length_order(rows, len, evaluated=10).tolist() == length_order(rows, len).tolist()


def test_mingpt_cosine_reproduces_the_a5_pretraining_anchors():
    tokens_per_step = 128 * 127
    decay_steps = 75_212_800 / tokens_per_step
    lr = [6e-3 * mingpt_cosine(epoch * 23, warmup_steps=10_240 / tokens_per_step, decay_steps=decay_steps)
          for epoch in (1, 200, 403, 650)]
    assert lr[0] == pytest.approx(6e-3, rel=1e-3)
    assert lr[1] == pytest.approx(6e-4)  # on the 0.1 floor mid-run
    assert lr[2] == pytest.approx(6e-3, rel=1e-3)  # unclamped: back at the full rate
    assert lr[3] == pytest.approx(7.18e-4, rel=0.06)  # the starter's 7.182e-4 (it counts 122-example tail batches)
    assert mingpt_cosine(0, warmup_steps=10, decay_steps=100) == 1.0  # minGPT's first step: the optimizer's lr
    assert mingpt_cosine(1, warmup_steps=10, decay_steps=100) == 0.1  # set after that step by its token count
    assert mingpt_cosine(5, warmup_steps=10, decay_steps=100) == 0.5
    assert mingpt_cosine(150, warmup_steps=10, decay_steps=100, periodic=False) == 0.1
    assert mingpt_cosine(55, warmup_steps=10, decay_steps=100) == pytest.approx(0.5 * (1 + math.cos(math.pi / 2)))


def test_weight_decay_groups_follow_mingpt_and_nanogpt():
    model = GPT(gpt_config("gpt_tiny", 50))
    named = list(model.named_parameters())
    mingpt = decay_groups(named, 0.1, "bias")
    spared = {id(p) for p in mingpt[1]["params"]}
    assert {name for name, p in named if id(p) in spared} == {name for name, _ in named if "bias" in name}
    assert any(name == "blocks.0.ln1.weight" for name, p in named if id(p) not in spared)  # minGPT's quirk
    nanogpt = decay_groups(named, 0.1, "vectors")
    assert all(p.dim() >= 2 for p in nanogpt[0]["params"]) and all(p.dim() < 2 for p in nanogpt[1]["params"])
    with pytest.raises(ValueError, match="decay exclusion"):
        decay_groups(named, 0.1, "layernorm")
