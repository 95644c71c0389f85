"""PTB sentence data for the AdaVAE stage (training/data/sentence_files.py) and word-level GPT pretraining on it
(`train stage=pretrain data=ptb`), on the real PTB files."""
import json
import math
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from c4prep.training.checkpoint import load_checkpoint
from c4prep.training.cli import main
from c4prep.training.data.batches import collate_rows
from c4prep.training.data.sentence_files import (
    VOCABULARY_FILE,
    SentenceDataError,
    SentenceRows,
    WordVocabulary,
    encode_sentences,
    packed_sentence_rows,
    read_sentences,
    word_counts,
)
from c4prep.training.metrics_log import read_metrics
from c4prep.training.models.gpt import GPT, gpt_config
from c4prep.training.stages.data_setup import sentence_row_set
from c4prep.training.batch_losses import DecoderLoss
from c4prep.training.experiments.adavae.vae_loss import sentence_view

PAD, BOS, EOS = WordVocabulary.PAD_ID, WordVocabulary.BOS_ID, WordVocabulary.EOS_ID
QUIET = ["trainer.progress=false", "trainer.tensorboard=false", "trainer.num_workers=0", "trainer.log_every=1",
         "trainer.device=cpu"]


@pytest.fixture(scope="module")
def ptb(shared_data) -> dict[str, list[str]]:
    return {split: read_sentences(shared_data / "ptb" / f"{split}.txt") for split in ("train", "valid", "test")}


@pytest.fixture(scope="module")
def vocab(ptb) -> WordVocabulary:
    return WordVocabulary.from_sentences(ptb["train"])


def test_ptb_splits_are_read_as_stripped_sentences(ptb, shared_data):
    assert {split: len(lines) for split, lines in ptb.items()} == {"train": 42068, "valid": 3370, "test": 3761}
    assert ptb["train"][1] == "pierre <unk> N years old will join the board as a nonexecutive director nov. N"
    raw = (shared_data / "ptb" / "valid.txt").read_text().splitlines()
    assert raw[0].startswith(" ") and ptb["valid"][0] == raw[0].strip()


def test_read_sentences_skips_blank_lines_and_names_an_unreadable_file(tmp_path):
    path = tmp_path / "s.txt"
    path.write_text(" a b \n\n   \nc\n")
    assert read_sentences(path) == ["a b", "c"]
    with pytest.raises(SentenceDataError, match=r"cannot read sentences from /no/such/ptb.txt \(No such file"):
        read_sentences("/no/such/ptb.txt")


def test_vocabulary_of_ptb_train_is_its_9999_words_by_count_plus_three_specials(vocab, ptb):
    assert (PAD, BOS, EOS) == (0, 1, 2)
    assert vocab.vocab_size == 10002 and len(vocab.words) == 9999
    assert vocab.words[:5] == ("the", "<unk>", "N", "of", "to") and vocab.unk_id == 4
    assert WordVocabulary.from_sentences(reversed(ptb["train"])) == vocab  # order of the input does not matter
    assert WordVocabulary.from_sentences(["b a", "c b a"]).words == ("a", "b", "c")  # ties alphabetically


def test_real_lines_round_trip_and_decode_stops_at_eos(vocab, ptb):
    for line in ptb["valid"][:200] + ptb["test"][:200]:
        assert vocab.decode(vocab.encode(line)) == line
    ids = vocab.encode(ptb["test"][0])
    assert vocab.decode([BOS, *ids, EOS, vocab.encode("the")[0], PAD]) == ptb["test"][0]
    assert vocab.decode([PAD, BOS, EOS]) == ""
    with pytest.raises(SentenceDataError, match="outside the vocabulary"):
        vocab.decode([vocab.vocab_size])


def test_unknown_words_become_unk_or_a_one_line_error(vocab):
    assert vocab.encode("the zyzzyva") == [vocab.encode("the")[0], vocab.unk_id]
    assert vocab.encode("<eos>") == [vocab.unk_id]  # special names are not words
    without_unk = WordVocabulary.from_sentences(["the cat"])
    assert without_unk.unk_id is None
    with pytest.raises(SentenceDataError, match=r"not in the vocabulary and no <unk> .*\['dog'\]") as error:
        without_unk.encode("the dog")
    assert "\n" not in str(error.value)


def test_vocabulary_saves_and_loads_from_a_file_or_a_run_folder(vocab, tmp_path):
    vocab.save(tmp_path / VOCABULARY_FILE)
    assert WordVocabulary.load(tmp_path) == vocab == WordVocabulary.load(tmp_path / VOCABULARY_FILE)
    assert WordVocabulary.from_json(vocab.to_json()) == vocab
    with pytest.raises(SentenceDataError, match=r"cannot read the word vocabulary /no/run/word_vocabulary.json"):
        WordVocabulary.load("/no/run/word_vocabulary.json")
    (tmp_path / "other.json").write_text(json.dumps({"words": ["a"]}))
    with pytest.raises(SentenceDataError, match="other.json: not a word vocabulary"):
        WordVocabulary.load(tmp_path / "other.json")


@pytest.mark.parametrize(("split", "capped"), [("train", 40), ("valid", 4), ("test", 1)])
def test_sentences_over_64_words_are_capped_and_keep_eos(vocab, ptb, split, capped):
    examples, count = encode_sentences(ptb[split], vocab, max_words=64)
    assert count == capped and len(examples) == len(ptb[split])
    assert max(len(ids) for ids in examples) == 66 and all(ids[0] == BOS and ids[-1] == EOS for ids in examples)
    longest = max(range(len(examples)), key=lambda i: len(ptb[split][i].split()))
    assert examples[longest][1:-1] == vocab.encode(ptb[split][longest])[:64]
    assert encode_sentences(ptb[split], vocab, max_words=1000)[1] == 0


def _sentence_batch(examples, vocab, length=65):
    """The training path's padded sentences: :class:`SentenceRows` collated, then ``sentence_view``."""
    rows = SentenceRows.from_examples(examples, [len(ids) - 2 for ids in examples], vocab, length)
    return sentence_view(collate_rows([rows(i, 0) for i in range(len(rows))]))


def test_batch_layout_shifts_targets_scores_eos_and_pads_separately(vocab, ptb):
    examples, _ = encode_sentences(ptb["valid"][:16], vocab)
    batch = _sentence_batch(examples, vocab)
    lengths = [len(ids) - 2 for ids in examples]
    assert batch.n_words.tolist() == lengths and batch.inputs.shape == (16, max(lengths) + 1)
    assert torch.equal(batch.input_mask, batch.target_mask)
    assert batch.target_mask.sum(1).tolist() == [n + 1 for n in lengths]
    for row, (ids, n) in enumerate(zip(examples, lengths)):
        assert batch.inputs[row, :n + 1].tolist() == ids[:-1] and batch.targets[row, :n + 1].tolist() == ids[1:]
        assert batch.targets[row, n] == EOS and bool(batch.target_mask[row, n])  # EOS is a scored target
        assert (batch.inputs[row, n + 1:] == PAD).all() and (batch.targets[row, n + 1:] == PAD).all()
    assert PAD != EOS and not (batch.inputs == EOS).any() and not (batch.targets == BOS).any()
    with pytest.raises(SentenceDataError, match=r"must be \[BOS\] words \[EOS\]"):
        SentenceRows.from_examples([[5, 6, EOS]], [2], vocab, 65)


def test_decoder_rows_carry_word_counts_and_packing_keeps_the_validation_loss(vocab, ptb):
    examples, _ = encode_sentences(ptb["valid"][:300], vocab)
    rows = SentenceRows.from_examples(examples, word_counts(ptb["valid"][:300], 64), vocab, 65)
    for item in range(5):
        row = rows(item, epoch=7)
        n = len(examples[item]) - 1
        assert row["n_words"] == len(ptb["valid"][item].split()) == n - 1
        assert row["input_tokens"][:n].tolist() == examples[item][:-1] and not row["input_tokens"][n:].any()
        assert row["loss_weights"].tolist() == [1] * n + [0] * (65 - n)
    packed = packed_sentence_rows(rows, 65)
    assert len(packed) < len(rows) / 2.5
    torch.manual_seed(0)
    model = GPT(gpt_config("gpt_tiny", vocab.vocab_size, block_size=65)).eval()
    with torch.no_grad():
        padded_sums = DecoderLoss().eval_sums(model, collate_rows([rows(i, 0) for i in range(len(rows))]))
        packed_sums = DecoderLoss().eval_sums(model, collate_rows(list(packed.rows)))
    assert packed_sums["targets"] == padded_sums["targets"] == sum(len(ids) - 1 for ids in examples)
    assert math.isclose(packed_sums["loss_sum"], padded_sums["loss_sum"], rel_tol=1e-5)
    with pytest.raises(SentenceDataError, match="more than the rows' 10"):
        SentenceRows.from_examples(examples, word_counts(ptb["valid"][:300], 64), vocab, 10)


@pytest.fixture(scope="module")
def ptb_subset(shared_data, tmp_path_factory) -> Path:
    """The first 400 train and 100 valid PTB lines."""
    folder = tmp_path_factory.mktemp("ptb")
    for split, count in (("train", 400), ("valid", 100)):
        lines = (shared_data / "ptb" / f"{split}.txt").read_text().splitlines(keepends=True)[:count]
        (folder / f"{split}.txt").write_text("".join(lines))
    return folder


def test_sentence_rows_fingerprint_names_the_ids_so_another_vocabulary_refuses_a_resume(vocab, ptb, shared_data):
    data = OmegaConf.create({"valid": str(shared_data / "ptb" / "valid.txt"), "max_words": 64})
    first = sentence_row_set(data, "valid", vocab)
    assert sentence_row_set(data, "valid", vocab).fingerprint == first.fingerprint
    smaller = WordVocabulary.from_sentences(ptb["train"][:5000])  # same text, other ids
    assert sentence_row_set(data, "valid", smaller).fingerprint != first.fingerprint
    assert sentence_row_set(data, "valid", vocab, positions=80).fingerprint != first.fingerprint


def test_tiny_ptb_pretraining_run_keeps_its_word_vocabulary(ptb_subset, tmp_path):
    run_dir = tmp_path / "run"
    assert main(["experiment=ptb_gpt_pretrain", "model=gpt_tiny", f"data.train={ptb_subset}/train.txt",
                 f"data.validation={ptb_subset}/valid.txt", "trainer.max_steps=3", "schedule.options.warmup_steps=1",
                 "trainer.global_batch_size=32", "trainer.micro_batch_size=16", "trainer.checkpoint_every=0",
                 f"output_dir={run_dir}", *QUIET]) == 0
    vocab = WordVocabulary.load(run_dir)
    assert vocab == WordVocabulary.from_sentences(read_sentences(ptb_subset / "train.txt"))
    state = load_checkpoint(run_dir)
    assert state["model_spec"]["vocab_size"] == vocab.vocab_size and state["model_spec"]["block_size"] == 65
    assert state["model"]["tok_emb.weight"].shape[0] == vocab.vocab_size
    records = list(read_metrics(run_dir / "metrics.jsonl"))
    assert [r["step"] for r in records if r["split"] == "train"] == [1, 2, 3]
    (validation,) = [r for r in records if r["split"] == "validation"]
    assert abs(validation["metrics"]["loss"] - math.log(vocab.vocab_size)) < 1.0  # near uniform after 3 steps


@pytest.mark.parametrize(("override", "message"), [
    ("data.train=/no/such/train.txt", "data.train: cannot read sentences from /no/such/train.txt"),
    ("data.pack_length=40", "data.pack_length=40 cannot hold a sentence of data.max_words=64"),
])
def test_ptb_setting_mistakes_are_one_line_errors(override, message, tmp_path, capsys):
    assert main(["experiment=ptb_gpt_pretrain", override, f"output_dir={tmp_path}", *QUIET]) == 2
    assert message in capsys.readouterr().err


def test_pretraining_continues_from_init_from_weights_on_the_same_vocabulary(ptb_gpt_run, ptb_small, tmp_path):
    frozen = tmp_path / "lr0"  # learning rate 0: the weights must stay the checkpoint's, exactly
    assert main(["experiment=adavae_ptb_lm", f"init_from={ptb_gpt_run}", "optimizer.lr=0.0", "trainer.max_steps=2",
                 "trainer.eval_every=0", "trainer.global_batch_size=16", "trainer.micro_batch_size=16",
                 "schedule.options.warmup_steps=1", *ptb_small, f"output_dir={frozen}", *QUIET]) == 0
    start, continued = load_checkpoint(ptb_gpt_run), load_checkpoint(frozen)
    assert continued["step"] == 2 and continued["model_spec"] == start["model_spec"]
    assert all(torch.equal(continued["model"][name], weight) for name, weight in start["model"].items())
    assert (frozen / VOCABULARY_FILE).read_text() == (ptb_gpt_run / VOCABULARY_FILE).read_text()


def test_continued_pretraining_refuses_another_vocabulary_or_model_family(ptb_gpt_run, ptb_subset, ptb_small, tmp_path,
                                                                          capsys):
    assert main(["experiment=adavae_ptb_lm", f"init_from={ptb_gpt_run}", f"data.train={ptb_subset}/train.txt",
                 f"output_dir={tmp_path}", *QUIET]) == 2
    assert f"init_from={ptb_gpt_run}: its {VOCABULARY_FILE} differs from the one this data builds" in \
        capsys.readouterr().err
    assert main(["experiment=adavae_ptb_lm", f"init_from={ptb_gpt_run}", "model=t5_tiny", *ptb_small,
                 f"output_dir={tmp_path}", *QUIET]) == 2
    assert f"init_from={ptb_gpt_run} is a gpt checkpoint but the config's model is t5" in capsys.readouterr().err
