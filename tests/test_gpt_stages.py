"""`train` with GPT models, end to end on real data: LM pre-training on the token shards, the tiny-shakespeare
character LM, the CS224N A5 chain (pretrain -> finetune -> evaluate, vanilla and synthesizer) and GPT-1
classification fine-tuning on Yelp."""
import json
import math
from pathlib import Path

import pytest
import torch
import yaml
from c4prep.tokenization.train_vocab import VocabConfig, train_vocabulary
from c4prep.training.checkpoint import load_checkpoint
from c4prep.training.data.char_vocabulary import VOCABULARY_FILE as CHAR_VOCABULARY_FILE
from c4prep.training.cli import main
from c4prep.training.metrics_log import read_metrics

QUIET = ["trainer.progress=false", "trainer.tensorboard=false", "trainer.num_workers=0", "trainer.log_every=1",
         "trainer.device=cpu"]
# CS224N A5 presets shrunk for CI: the same data, rows and schedule, a 1-layer 32-wide model, 16 rows per step.
A5_SMALL = ["+model.n_layer=1", "+model.n_embd=32", "+model.n_head=2", "trainer.global_batch_size=16",
            "trainer.micro_batch_size=8", *QUIET]


def metrics(run_dir: Path, split: str) -> list[dict]:
    return [r for r in read_metrics(run_dir / "metrics.jsonl") if r["split"] == split]


@pytest.fixture(scope="module")
def gpt_lm_run(sample_tokens, tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("gpt") / "lm"
    assert main(["model=gpt_tiny", "objective=lm", f"data.tokens={sample_tokens}", "data.validation_split=train",
                 "optimizer=adamw", "optimizer.lr=3e-3", "schedule=constant", "trainer.max_steps=4",
                 "trainer.global_batch_size=8", "trainer.micro_batch_size=4", "trainer.eval_batches=2",
                 f"output_dir={run_dir}", *QUIET]) == 0
    return run_dir


def test_gpt_pretrains_on_the_token_shards_and_evaluates_the_same(gpt_lm_run, sample_tokens, tmp_path):
    losses = [r["metrics"]["loss"] for r in metrics(gpt_lm_run, "train")]
    assert len(losses) == 4 and all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]
    state = load_checkpoint(gpt_lm_run)
    assert state["model_spec"]["name"] == "gpt" and state["model_spec"]["size"] == "gpt_tiny"
    assert main(["stage=evaluate", f"init_from={gpt_lm_run}", "objective=lm", f"data.tokens={sample_tokens}",
                 "data.validation_split=train", "trainer.micro_batch_size=4", f"output_dir={tmp_path}",
                 *QUIET]) == 0
    (evaluated,) = metrics(tmp_path, "train")  # the split scored
    assert evaluated["step"] == 4 and 0 < evaluated["metrics"]["loss"] < 10


@pytest.mark.parametrize("refused, message", [
    (["data.validation_split=nosuch"], "split 'nosuch' of {tokens} does not exist to evaluate: set "
                                       "data.validation_split to a split with documents (train)"),
    (["data.validation_split=validation"], "split 'validation' of {tokens} has no documents to evaluate: set "
                                           "data.validation_split to a split with documents (train)"),
    (["data.validation_split=null"], "data.validation_split=null leaves nothing to evaluate: set it to a split of "
                                     "{tokens} (train)"),
    (["data.validation_split=train", "objective.targets_length=500"], "exceed the model's 64"),
])
def test_a_refused_evaluate_keeps_the_record_of_the_last_one(gpt_lm_run, sample_tokens, tmp_path, capsys, refused,
                                                             message):
    """A refused evaluate rewrote its folder's config.yaml, which then named settings no score in metrics.jsonl was
    made with (a split that does not exist, an objective the model cannot take)."""
    evaluate = ["stage=evaluate", f"init_from={gpt_lm_run}", "objective=lm", f"data.tokens={sample_tokens}",
                f"output_dir={tmp_path}", *QUIET]
    assert main([*evaluate, "data.validation_split=train", "trainer.eval_batches=1"]) == 0
    recorded = (tmp_path / "config.yaml").read_bytes()
    capsys.readouterr()
    assert main([*evaluate, *refused]) == 2
    assert message.format(tokens=sample_tokens) in capsys.readouterr().err
    assert (tmp_path / "config.yaml").read_bytes() == recorded


def test_a_learning_rate_whose_update_overflows_float32_stops_in_one_line(sample_tokens, tmp_path, capsys):
    """lr=1e300 ended in torch's traceback (exit 1), 'value cannot be converted to type float without overflow'."""
    code = main(["model=gpt_tiny", "objective=lm", "objective.targets_length=65", f"data.tokens={sample_tokens}",
                 "optimizer=adamw", "optimizer.lr=1e300", "trainer.max_steps=2", f"output_dir={tmp_path}", *QUIET])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err  # as a run whose loss becomes NaN
    assert err.strip().splitlines()[-1].startswith("train: stopped: the update of step 1 (lr ")
    assert err.strip().endswith("is beyond float32's range; lower the learning rate")
    assert not (tmp_path / "checkpoints").exists() or not any((tmp_path / "checkpoints").iterdir())


def test_lm_rows_longer_than_the_model_are_refused(sample_tokens, tmp_path, capsys):
    assert main(["model=gpt_tiny", "objective=lm", "objective.targets_length=129", f"data.tokens={sample_tokens}",
                 f"output_dir={tmp_path}", *QUIET]) == 2
    assert "exceed the model's 64" in capsys.readouterr().err


@pytest.mark.parametrize("setting, message", [
    ("+model.attention=synthesizer", "rows of 64 positions exceed the model's 63 (model.block_size - 1 with "
                                     "synthesizer attention)"),
    ("data.block_size=100", "rows of 100 positions exceed the model's 64 (model.block_size)"),
])
def test_character_rows_longer_than_the_model_are_refused(tmp_path, capsys, setting, message):
    """Both were a traceback from the model's forward pass, after the run folder was made."""
    assert main(["experiment=shakespeare_char", setting, "trainer.max_steps=1", f"output_dir={tmp_path / 'run'}",
                 *QUIET]) == 2
    assert capsys.readouterr().err.strip() == (f"train: error: {message}: give the data shorter rows "
                                               "(data.block_size, data.max_words) or the model more positions")
    assert not (tmp_path / "run").exists()


def test_shakespeare_character_lm_trains_and_validates_on_the_held_out_tenth(tmp_path):
    assert main(["experiment=shakespeare_char", "model=gpt_tiny", "trainer.max_steps=3", "trainer.eval_every=0",
                 "trainer.eval_batches=3", "schedule.options.warmup_steps=1", f"output_dir={tmp_path}", *QUIET]) == 0
    (validation,) = metrics(tmp_path, "validation")
    assert math.log(67) - 0.5 < validation["metrics"]["loss"] < math.log(67) + 1  # near uniform after 3 steps


@pytest.fixture(scope="module")
def dev_questions(shared_data, tmp_path_factory) -> Path:
    """The first 24 questions of birth_dev.tsv (one of them non-ASCII would not matter: prompts stay raw)."""
    lines = (shared_data / "cs224n_a5" / "birth_dev.tsv").read_text(encoding="utf-8").splitlines()[:24]
    path = tmp_path_factory.mktemp("a5") / "dev24.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("attention", ["causal", "synthesizer"])
def test_cs224n_a5_pretrain_finetune_evaluate(attention, dev_questions, shared_data, tmp_path, capsys):
    pretrain, finetune, evaluate = tmp_path / "pretrain", tmp_path / "finetune", tmp_path / "evaluate"
    assert main(["experiment=cs224n_a5_pretrain", f"model.attention={attention}", "+model.dropout=0.0",
                 "trainer.max_steps=3", "trainer.checkpoint_every=0", f"output_dir={pretrain}", *A5_SMALL]) == 0
    spec = load_checkpoint(pretrain)["model_spec"]
    assert spec["attention"] == attention and spec["vocab_size"] == 256 and spec["dropout"] == 0.0
    assert main(["experiment=cs224n_a5_finetune", f"init_from={pretrain}", "trainer.max_steps=2",
                 f"data.evaluate={dev_questions}", f"output_dir={finetune}", *A5_SMALL]) == 0
    assert load_checkpoint(finetune)["model_spec"] == {**spec, "dropout": 0.1}  # the handout's fine-tune dropout
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["fit_seconds"] > 0 and summary["evaluation"]["seconds"] > 0  # where a command's time went
    predictions = (finetune / "predictions.txt").read_text(encoding="utf-8").split("\n")
    assert len(predictions) == 25 and predictions[-1] == ""
    test_inputs = shared_data / "cs224n_a5" / "birth_test_inputs.tsv"
    outputs = tmp_path / "test.predictions"
    assert main(["experiment=cs224n_a5_finetune", "stage=evaluate", f"init_from={finetune}",
                 f"data.evaluate={test_inputs}", f"data.predictions={outputs}", f"output_dir={evaluate}",
                 "trainer.micro_batch_size=64", *QUIET]) == 0
    assert len(outputs.read_text(encoding="utf-8").splitlines()) == 437


def test_a5_finetune_without_pretraining_reports_accuracy(dev_questions, tmp_path, caplog):
    caplog.set_level("INFO")
    assert main(["experiment=cs224n_a5_finetune", "trainer.max_steps=1", f"data.evaluate={dev_questions}",
                 f"output_dir={tmp_path}", *A5_SMALL]) == 0
    assert any(message.startswith("Correct: ") and "out of 24" in message for message in caplog.messages)


def test_a5_answers_never_replace_an_input_or_a_runs_record(dev_questions, tmp_path, capsys):
    """`data.predictions=` wrote over any file: the run's config.yaml (later stages ran without its settings) or
    the questions it had just read. An earlier predictions file is replaced, as the handout's script does."""
    run = tmp_path / "run"
    assert main(["experiment=cs224n_a5_finetune", "trainer.max_steps=1", f"output_dir={run}", *A5_SMALL]) == 0
    evaluate = ["experiment=cs224n_a5_finetune", "stage=evaluate", f"init_from={run}", f"data.evaluate={dev_questions}",
                f"output_dir={tmp_path / 'evaluate'}", *QUIET]
    for target, says in [(run / "config.yaml", "is a file a training run keeps"),
                         (dev_questions, "is the file data.evaluate reads"), (run, "is a folder")]:
        kept = target.read_bytes() if target.is_file() else None
        capsys.readouterr()
        assert main([*evaluate, f"data.predictions={target}"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"data.predictions={target} {says}" in err
        assert kept is None or target.read_bytes() == kept
    assert not (tmp_path / "evaluate").exists()
    earlier = tmp_path / "answers.txt"
    earlier.write_text("London\n", encoding="utf-8")
    assert main([*evaluate, f"data.predictions={earlier}"]) == 0
    assert len(earlier.read_text(encoding="utf-8").splitlines()) == 24


def test_a5_finetune_refuses_a_checkpoint_with_another_vocabulary(gpt_lm_run, tmp_path, capsys):
    """The refused run left a folder with a config.yaml and the corpus's characters."""
    assert main(["experiment=cs224n_a5_finetune", f"init_from={gpt_lm_run}", f"output_dir={tmp_path / 'run'}",
                 *(setting for setting in A5_SMALL if not setting.startswith("+model."))]) == 2
    assert "give a run pre-trained on the characters of data.corpus=" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("lm_weight", [0.5, 0.0])
def test_yelp_classification_finetunes_a_pretrained_gpt(gpt_lm_run, sample_vocab, lm_weight, tmp_path):
    assert main(["stage=finetune", "data=yelp_sentiment", f"data.vocab={sample_vocab}", f"init_from={gpt_lm_run}",
                 "data.train_per_label=8", "data.eval_per_label=8", "data.max_length=32",
                 f"data.lm_weight={lm_weight}", "optimizer=adamw", "optimizer.lr=1e-3", "schedule=constant",
                 "trainer.max_steps=2", "trainer.global_batch_size=8", "trainer.micro_batch_size=8",
                 f"output_dir={tmp_path}", *QUIET]) == 0
    (validation,) = metrics(tmp_path, "validation")
    assert 0.0 <= validation["metrics"]["accuracy"] <= 1.0
    state = load_checkpoint(tmp_path)
    assert state["model_spec"]["name"] == "gpt_classifier"
    assert state["model"]["backbone.tok_emb.weight"].shape[0] == 1100 + 3  # sample vocabulary + GPT-1's specials


def test_gpt1_fine_tuning_is_deterministic_and_records_the_gpt_it_trains(gpt_lm_run, sample_vocab, tmp_path, capsys):
    """The new embedding rows and the head are drawn from the seed (two runs differed), and config.yaml records the
    run's GPT (it recorded train.yaml's T5, and model=t5_tiny was accepted)."""
    args = ["stage=finetune", "data=yelp_sentiment", f"data.vocab={sample_vocab}", f"init_from={gpt_lm_run}",
            "data.train_per_label=4", "data.eval_per_label=4", "data.max_length=32", "trainer.max_steps=1",
            "trainer.global_batch_size=8", "trainer.micro_batch_size=8", *QUIET]
    for name in ("a", "b"):
        assert main([*args, f"output_dir={tmp_path / name}"]) == 0
    first, second = (load_checkpoint(tmp_path / name)["model"] for name in ("a", "b"))
    assert all(torch.equal(first[key], second[key]) for key in first)
    recorded = yaml.safe_load((tmp_path / "a" / "config.yaml").read_text())["model"]
    assert recorded == yaml.safe_load((gpt_lm_run / "config.yaml").read_text())["model"]
    capsys.readouterr()
    assert main([*args, "model=t5_tiny", f"output_dir={tmp_path / 'c'}"]) == 2
    assert capsys.readouterr().err.strip() == (
        "train: error: data.kind=classification fine-tunes a GPT, not the t5 model the config names "
        f"(init_from={gpt_lm_run} is a gpt run): choose a GPT model preset (model=gpt_*) or a GPT run")
    classifier = tmp_path / "a"  # it said only "is not a GPT checkpoint"
    assert main([*(f"init_from={classifier}" if arg.startswith("init_from=") else arg for arg in args),
                 f"output_dir={tmp_path / 'd'}"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"train: error: init_from={classifier} holds a gpt_classifier model, not a GPT language model: fine-tune "
        "from a GPT pre-training run (stage=pretrain with a model=gpt_* preset)")


@pytest.mark.parametrize(("override", "message"), [
    ("data.corpus=/no/such/wiki.txt", "data.corpus: pretraining corpus not found or unreadable: /no/such/wiki.txt"),
    ("data.train=/no/such/train.tsv", "data.train: birth-place file not found or unreadable: /no/such/train.tsv"),
    ("data.corpus=/dev/null", "data.corpus: pretraining corpus /dev/null holds no text; pass the path of wiki.txt"),
])
def test_a5_missing_files_are_one_line_errors_naming_the_setting(override, message, tmp_path, capsys):
    assert main(["experiment=cs224n_a5_finetune", override, f"output_dir={tmp_path}", *A5_SMALL]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("setting", ["data.train", "data.evaluate"])
def test_a5_unreadable_question_files_are_refused_before_training(setting, tmp_path, capsys):
    """A binary file is one line (a traceback before); data.evaluate was read only after training."""
    binary = tmp_path / "questions.tsv"
    binary.write_bytes(bytes(range(256)))
    for path, reason in [(binary, "is not UTF-8 text (byte 128)"), (tmp_path / "none.tsv", "not found or unreadable")]:
        assert main(["experiment=cs224n_a5_finetune", f"{setting}={path}", "trainer.max_steps=1",
                     f"output_dir={tmp_path / 'run'}", *A5_SMALL]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"train: error: {setting}: birth-place file") and reason in err, err
        assert len(err.splitlines()) == 1 and not (tmp_path / "run" / "checkpoints").exists()


def test_a_binary_character_text_is_one_line(tmp_path, capsys):
    binary = tmp_path / "input.txt"
    binary.write_bytes(bytes(range(256)))
    assert main(["experiment=shakespeare_char", f"data.text={binary}", f"output_dir={tmp_path / 'run'}", *QUIET]) == 2
    assert capsys.readouterr().err.strip() == (f"train: error: data.text={binary} is not UTF-8 text (byte 128); set "
                                               "data.text to a text file")


def test_a5_evaluate_uses_the_characters_the_run_kept(dev_questions, shared_data, tmp_path, capsys):
    """It read the run's data.corpus again and failed once that file had moved; generate did not need it."""
    corpus = tmp_path / "wiki.txt"
    corpus.write_text((shared_data / "cs224n_a5" / "wiki.txt").read_text(encoding="utf-8"), encoding="utf-8")
    run = tmp_path / "finetune"
    assert main(["experiment=cs224n_a5_finetune", f"data.corpus={corpus}", "trainer.max_steps=1",
                 f"data.evaluate={dev_questions}", f"output_dir={run}", *A5_SMALL]) == 0
    corpus.unlink()
    capsys.readouterr()
    assert main(["stage=evaluate", f"init_from={run}", f"output_dir={tmp_path / 'evaluate'}", *QUIET]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["evaluation"]["questions"] == 24


def test_a5_finetune_refuses_a_corpus_with_other_characters_of_the_same_number(dev_questions, shared_data, tmp_path,
                                                                              capsys):
    """Its ids fit the checkpoint but mean other characters: the pre-training run keeps its characters."""
    pretrain = tmp_path / "pretrain"
    assert main(["experiment=cs224n_a5_pretrain", "trainer.max_steps=1", "trainer.checkpoint_every=0",
                 f"output_dir={pretrain}", *A5_SMALL]) == 0
    wiki = (shared_data / "cs224n_a5" / "wiki.txt").read_text(encoding="utf-8")
    assert "q" in wiki and "\u00a7" not in wiki
    other = tmp_path / "wiki_other.txt"
    other.write_text(wiki.replace("q", "\u00a7"), encoding="utf-8")  # 256 ids still
    assert main(["experiment=cs224n_a5_finetune", f"init_from={pretrain}", f"data.corpus={other}",
                 "trainer.max_steps=1", f"output_dir={tmp_path / 'finetune'}", *A5_SMALL]) == 2
    assert capsys.readouterr().err.strip() == (f"train: error: init_from={pretrain}: its {CHAR_VOCABULARY_FILE} "
                                               "differs from the one this data builds; use the data the checkpoint "
                                               "was trained with")


def test_finetuning_refuses_another_vocabulary_of_the_same_size(gpt_lm_run, sample_documents, sample_vocab, tmp_path,
                                                                capsys):
    """A BPE model of the sample's size: the ids fit, but they are other pieces (accepted silently before)."""
    other = tmp_path / "bpe"
    train_vocabulary(VocabConfig(inputs=[str(sample_documents)], output=str(other), vocab_size=1000, model_type="bpe"))
    args = ["stage=finetune", "data=yelp_sentiment", f"init_from={gpt_lm_run}", "data.train_per_label=8",
            "data.eval_per_label=8", "data.max_length=32", "trainer.max_steps=1", "trainer.global_batch_size=8",
            "trainer.micro_batch_size=8", *QUIET]
    assert main([*args, f"data.vocab={other}", f"output_dir={tmp_path / 'other'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"train: error: init_from={gpt_lm_run} was trained on the ids of the SentencePiece model "
                          f"of SHA-256 ") and f"but data.vocab={other} is another model's" in err, err
    assert len(err.splitlines()) == 1, err
    assert main([*args, f"data.vocab={sample_vocab}", f"output_dir={tmp_path / 'same'}"]) == 0
