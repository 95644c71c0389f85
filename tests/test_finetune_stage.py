"""`train stage=finetune`: text-to-text tasks (CS224N birth places), mixtures, adapters, gradual unfreezing; and the
trainer's stop on a non-finite loss."""
import json
import math
import re
from pathlib import Path

import pytest
import torch
import yaml

from c4prep.training.checkpoint import latest_checkpoint, load_checkpoint
from c4prep.training.cli import main
from c4prep.training.config import load_config
from c4prep.training.distributed import DistEnv
from c4prep.training.models.t5 import T5, t5_config
from c4prep.training.trainer import Trainer, TrainingDiverged

COMMON = ["model=t5_tiny", "trainer.global_batch_size=8", "trainer.micro_batch_size=4", "trainer.log_every=1",
          "trainer.progress=false", "trainer.tensorboard=false", "trainer.num_workers=0", "trainer.eval_every=0",
          "optimizer=adamw", "optimizer.lr=3e-3", "schedule=constant"]


@pytest.fixture(scope="module")
def pretrained(sample_tokens, tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("pretrain") / "run"
    assert main([f"data.tokens={sample_tokens}", f"output_dir={run_dir}", *COMMON, "objective.inputs_length=128",
                 "objective.targets_length=32", "trainer.max_steps=2", "data.validation_split=null"]) == 0
    return run_dir


@pytest.fixture(scope="module")
def birth_places(shared_data, tmp_path_factory) -> tuple[Path, Path]:
    """The first 64 training and 16 dev questions of the CS224N A5 birth-place task."""
    folder = tmp_path_factory.mktemp("birth")
    a5 = shared_data / "cs224n_a5"
    train, dev = folder / "train.tsv", folder / "dev.tsv"
    train.write_text("".join((a5 / "birth_places_train.tsv").read_text().splitlines(keepends=True)[:64]))
    dev.write_text("".join((a5 / "birth_dev.tsv").read_text().splitlines(keepends=True)[:16]))
    return train, dev


def finetune(pretrained, sample_vocab, birth_places, run_dir, *overrides) -> None:
    train, dev = birth_places
    args = [f"init_from={pretrained}", "stage=finetune", "data=text_to_text", f"data.vocab={sample_vocab}",
            f"data.tasks.qa.train={train}", f"data.tasks.qa.validation={dev}", "data.tasks.qa.prefix=qa: ",
            "data.inputs_length=32", "data.targets_length=8", f"output_dir={run_dir}", *COMMON, *overrides]
    assert main(args) == 0


def changed(before: dict, after: dict) -> set[str]:
    return {name for name in before if not torch.equal(before[name], after[name])}


def test_finetune_scores_exact_match_and_token_accuracy(pretrained, sample_vocab, birth_places, tmp_path, capsys):
    finetune(pretrained, sample_vocab, birth_places, tmp_path / "ft", "trainer.max_steps=3")
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    scores = summary["validation"]["qa"]
    assert summary["step"] == 3 and summary["mixing_rates"] == {"qa": 1.0}
    assert 0 <= scores["exact_match"] <= 1 and 0 <= scores["token_accuracy"] <= 1 and scores["loss"] > 0
    weights = load_checkpoint(tmp_path / "ft")["model"]
    assert changed(load_checkpoint(pretrained)["model"], weights)  # fine-tuning moved the pre-trained weights


def test_truncated_examples_are_counted_in_both_splits(pretrained, sample_vocab, birth_places, tmp_path, caplog):
    """Validation examples were truncated without a word (exact match still compares with the whole target)."""
    caplog.set_level("WARNING")
    finetune(pretrained, sample_vocab, birth_places, tmp_path / "short", "trainer.max_steps=1", "data.targets_length=2")
    counts = {split: re.search(rf"task qa: (\d+) of (\d+) {split} examples truncated to 32/2 tokens", caplog.text)
              for split in ("training", "validation")}
    assert counts["training"].group(2) == "64" and counts["validation"].group(2) == "16", caplog.text
    assert all(0 < int(found.group(1)) <= int(found.group(2)) for found in counts.values())


def test_missing_unsupervised_tokens_name_their_setting(pretrained, sample_vocab, birth_places, tmp_path, capsys):
    train, _ = birth_places
    assert main([f"init_from={pretrained}", "stage=finetune", "data=text_to_text", f"data.vocab={sample_vocab}",
                 f"data.tasks.qa.train={train}", f"data.unsupervised_tokens={tmp_path / 'none'}",
                 f"output_dir={tmp_path / 'run'}", *COMMON]) == 2
    assert capsys.readouterr().err.strip().endswith(  # it named data.tokens, which a text_to_text config refuses
        "run `c4prep tokenize` first or set data.unsupervised_tokens=<token folder>")


def test_mixing_in_the_unsupervised_task(pretrained, sample_vocab, sample_tokens, birth_places, tmp_path, capsys):
    finetune(pretrained, sample_vocab, birth_places, tmp_path / "mix", "trainer.max_steps=1",
             f"data.unsupervised_tokens={sample_tokens}", "data.mixing.size_limit=32")
    rates = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["mixing_rates"]
    assert rates == {"qa": 0.5, "c4_span_corruption": 0.5}  # both tasks exceed K=32: equal shares


def test_adapters_train_only_adapters_and_layer_norms(pretrained, sample_vocab, birth_places, tmp_path):
    finetune(pretrained, sample_vocab, birth_places, tmp_path / "adapters", "trainer.max_steps=2",
             "finetune.adapter_dim=8")
    state = load_checkpoint(tmp_path / "adapters")
    assert state["model_spec"]["adapter_dim"] == 8
    base = load_checkpoint(pretrained)["model"]
    moved = changed(base, {k: v for k, v in state["model"].items() if k in base})
    assert moved and all("norm" in name for name in moved)
    assert any("adapter" in name for name in state["model"])
    output = tmp_path / "adapters" / "generate"  # the run is usable: its adapters come from the checkpoint
    assert main(["stage=generate", f"init_from={tmp_path / 'adapters'}", 'generate.prompts=["qa: Where was"]',
                 "generate.max_tokens=3", "trainer.device=cpu", "trainer.progress=false"]) == 0
    assert output.joinpath("generations.jsonl").is_file()


def test_gradual_unfreezing_starts_with_the_top_group(pretrained, sample_vocab, birth_places, tmp_path):
    finetune(pretrained, sample_vocab, birth_places, tmp_path / "unfreeze", "trainer.max_steps=1",
             "finetune.unfreeze_every=100")
    spec = load_checkpoint(pretrained)["model_spec"]
    model = T5(t5_config(spec["size"], spec["vocab_size"]))
    names = {id(p): n for n, p in model.named_parameters()}
    top = {names[id(p)] for p in model.unfreezing_groups()[0]}
    moved = changed(load_checkpoint(pretrained)["model"], load_checkpoint(tmp_path / "unfreeze")["model"])
    assert moved and moved <= top


def test_missing_task_file_is_a_one_line_error(pretrained, sample_vocab, tmp_path, capsys):
    code = main([f"init_from={pretrained}", "stage=finetune", "data=text_to_text", f"data.vocab={sample_vocab}",
                 f"output_dir={tmp_path}", *COMMON])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "data.tasks.qa.train=" in err and len(err.splitlines()) == 1


class NaNAfterFirstStep:
    """A task whose loss becomes NaN on the second call."""

    calls = 0

    def loss(self, model, batch):
        self.calls += 1
        value = (model(batch["x"]) ** 2).sum()
        return (value * math.nan if self.calls > 1 else value), torch.tensor(1.0)

    def num_targets(self, batch):
        return torch.tensor(1.0)

    def num_tokens(self, batch):
        return 1


def linear_trainer(run_dir: Path, max_steps: int, *overrides: str) -> Trainer:
    settings = load_config([f"trainer.max_steps={max_steps}", "trainer.progress=false", "trainer.tensorboard=false",
                            "trainer.global_batch_size=1", "trainer.micro_batch_size=1", *overrides]).trainer
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    batches = lambda start: iter([{"x": torch.ones(1, 2)}] * 10)  # noqa: E731
    return Trainer(settings, run_dir, model, NaNAfterFirstStep(), optimizer, scheduler, batches, 1, DistEnv(),
                   torch.device("cpu"))


def test_non_finite_loss_stops_before_the_update(tmp_path):
    diverging = linear_trainer(tmp_path / "diverging", max_steps=5)
    with pytest.raises(TrainingDiverged, match="loss is nan at step 2"):
        diverging.fit()
    one_step = linear_trainer(tmp_path / "one_step", max_steps=1)
    one_step.fit()
    assert diverging.step == 1
    for name, value in one_step.model.state_dict().items():  # the NaN step changed nothing
        assert torch.equal(diverging.model.state_dict()[name], value)


def test_losses_read_at_log_steps_stop_the_run_at_the_next_read_before_any_checkpoint(tmp_path):
    diverging = linear_trainer(tmp_path, 8, "trainer.loss_check=log", "trainer.log_every=4",
                               "trainer.checkpoint_every=4")
    with pytest.raises(TrainingDiverged, match="loss is nan at step 2 .* the 2 step"):
        diverging.fit()
    assert diverging.step == 4  # steps 3 and 4 were queued before the read at step 4
    assert latest_checkpoint(tmp_path) is None  # the read comes before the checkpoint of step 4


def test_the_model_comes_from_init_from_and_the_run_records_it(pretrained, sample_vocab, birth_places, tmp_path,
                                                               capsys):
    """Without model settings, fine-tuning takes init_from's run's (its config.yaml recorded the default t5_small
    before, for a t5_tiny model); settings that contradict the checkpoint are one line (silently replaced by its
    architecture before); its dropout may differ."""
    train, _ = birth_places
    args = [f"init_from={pretrained}", "stage=finetune", "data=text_to_text", f"data.vocab={sample_vocab}",
            f"data.tasks.qa.train={train}", "data.inputs_length=32", "data.targets_length=8", "trainer.max_steps=1",
            *(arg for arg in COMMON if arg != "model=t5_tiny")]
    assert main([*args, f"output_dir={tmp_path / 'run'}", "model.dropout_rate=0.2"]) == 0
    model = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["model"]
    assert (model["size"], model["dropout_rate"]) == ("t5_tiny", 0.2)
    assert load_checkpoint(tmp_path / "run")["model_spec"]["dropout_rate"] == 0.2
    capsys.readouterr()
    assert main([*args, f"output_dir={tmp_path / 'small'}", "model=t5_small"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"train: error: init_from={pretrained} holds a model with size='t5_tiny', the model settings give "
        "'t5_small': the model comes from init_from, so leave out the model settings (the run's are used) or give "
        "the ones it trained with")
