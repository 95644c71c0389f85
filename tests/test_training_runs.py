"""`train`: the command chain on the real sample, exact resume, 2-process DDP, evaluation and user errors."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from c4prep.training.checkpoint import load_checkpoint
from c4prep.training.cli import main
from c4prep.training.metrics_log import read_metrics

# A t5_tiny run small enough for CI: rows of 128/32 tokens, 8 sequences per step.
TINY = ["model=t5_tiny", "objective.inputs_length=128", "objective.targets_length=32",
        "trainer.global_batch_size=8", "trainer.micro_batch_size=4", "trainer.log_every=1",
        "trainer.progress=false", "trainer.tensorboard=false", "trainer.num_workers=0",
        "optimizer=adamw", "optimizer.lr=3e-3", "schedule=constant"]


def train(tokens: Path, run_dir: Path, *overrides: str) -> int:
    return main([f"data.tokens={tokens}", f"output_dir={run_dir}", *TINY, *overrides])


def train_losses(run_dir: Path) -> dict[int, float]:
    return {r["step"]: r["metrics"]["loss"] for r in read_metrics(run_dir / "metrics.jsonl") if r["split"] == "train"}


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(run_dir)["model"]


@pytest.fixture(scope="module")
def reference_run(sample_tokens, tmp_path_factory) -> Path:
    """6 uninterrupted steps, validated on the train split (the sample's validation split is empty)."""
    run_dir = tmp_path_factory.mktemp("runs") / "reference"
    assert train(sample_tokens, run_dir, "trainer.max_steps=6", "trainer.eval_every=3", "trainer.eval_batches=2",
                 "data.validation_split=train", "trainer.checkpoint_every=3") == 0
    return run_dir


def test_pretrain_chain_trains_and_writes_a_run_folder(reference_run):
    losses = train_losses(reference_run)
    assert sorted(losses) == [1, 2, 3, 4, 5, 6]
    assert all(math.isfinite(v) for v in losses.values())
    assert losses[6] < losses[1]  # 6 AdamW steps at 3e-3 move a fresh model's loss down
    validation = [r for r in read_metrics(reference_run / "metrics.jsonl") if r["split"] == "validation"]
    assert [r["step"] for r in validation] == [3, 6]
    assert 0 <= validation[-1]["metrics"]["token_accuracy"] <= 1
    state = load_checkpoint(reference_run)
    assert state["step"] == 6 and state["model_spec"]["name"] == "t5"
    assert (reference_run / "config.yaml").read_text().count("t5_tiny") == 1


def test_resume_equals_uninterrupted_run(sample_tokens, reference_run, tmp_path):
    run_dir = tmp_path / "resumed"
    common = ["trainer.eval_every=3", "trainer.eval_batches=2", "data.validation_split=train",
              "trainer.checkpoint_every=3"]
    assert train(sample_tokens, run_dir, "trainer.max_steps=3", *common) == 0
    assert train(sample_tokens, run_dir, "trainer.max_steps=6", "resume=must", *common) == 0
    assert train_losses(run_dir) == train_losses(reference_run)  # bit-identical, steps 4-6 included
    resumed, reference = final_weights(run_dir), final_weights(reference_run)
    assert all(torch.equal(resumed[name], reference[name]) for name in reference)
    records = read_metrics(run_dir / "metrics.jsonl")
    assert len(records) == len(read_metrics(reference_run / "metrics.jsonl"))  # no duplicated steps


def test_with_dropout_a_resume_and_a_run_from_init_from_are_exact(sample_tokens, tmp_path):
    """With dropout (T5 v1.0: 0.1) a resumed run drifted from the uninterrupted one (the data loader drew its seed
    from the restored RNG), and two runs from the same init_from differed (nothing seeded dropout there)."""
    dropout = ["model=t5_v1_0_tiny", "trainer.checkpoint_every=2", "trainer.eval_every=0",
               "data.validation_split=null"]
    assert train(sample_tokens, tmp_path / "whole", "trainer.max_steps=4", *dropout) == 0
    assert train(sample_tokens, tmp_path / "resumed", "trainer.max_steps=2", *dropout) == 0
    assert train(sample_tokens, tmp_path / "resumed", "trainer.max_steps=4", "resume=must", *dropout) == 0
    assert train_losses(tmp_path / "resumed") == train_losses(tmp_path / "whole")
    for continued in ("first", "second"):
        assert train(sample_tokens, tmp_path / continued, "trainer.max_steps=2", f"init_from={tmp_path / 'whole'}",
                     *dropout) == 0
    assert train_losses(tmp_path / "first") == train_losses(tmp_path / "second")


def test_data_loader_workers_do_not_change_the_run(sample_tokens, reference_run, tmp_path):
    run_dir = tmp_path / "workers"
    assert train(sample_tokens, run_dir, "trainer.max_steps=3", "trainer.num_workers=2", "trainer.eval_every=0",
                 "data.validation_split=null") == 0
    reference = train_losses(reference_run)
    assert train_losses(run_dir) == {step: reference[step] for step in (1, 2, 3)}


def test_two_process_ddp_matches_single_process(sample_tokens, reference_run, tmp_path):
    run_dir = tmp_path / "ddp"
    overrides = [f"data.tokens={sample_tokens}", f"output_dir={run_dir}", *TINY, "trainer.max_steps=3",
                 "trainer.micro_batch_size=2", "trainer.eval_every=0", "data.validation_split=null",
                 "trainer.device=cpu"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                             "-m", "c4prep.training.cli", *overrides], env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    (summary,) = result.stdout.strip().splitlines()  # rank 0's: each rank printed one
    assert json.loads(summary)["step"] == 3
    ddp, single = train_losses(run_dir), train_losses(reference_run)
    for step in (1, 2, 3):  # same global batch of 8: 2 ranks x 2 micro-batches of 2 vs 1 rank x 2 of 4
        assert ddp[step] == pytest.approx(single[step], rel=1e-5)


def test_evaluate_stage_scores_a_checkpoint(sample_tokens, reference_run, tmp_path, capsys):
    code = main([f"data.tokens={sample_tokens}", *TINY, "stage=evaluate", f"init_from={reference_run}",
                 "data.validation_split=train", f"output_dir={tmp_path / 'eval'}"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["checkpoint_step"] == 6
    assert 0 < summary["validation"]["loss"] < 20


@pytest.mark.parametrize("overrides, message", [
    (["model=t5_huge"], "Could not find 'model/t5_huge' (available: adavae, gpt1, gpt_a5"),
    (["trainer.max_stepz=3"], "Could not override 'trainer.max_stepz' (did you mean trainer.max_steps?)"),
    (["trainer.xyzzy=3"], "Could not override 'trainer.xyzzy'; trainer has no setting xyzzy here (its settings: "
                          "max_steps, global_batch_size,"),
    (["data.vocab=x"], "Could not override 'data.vocab'; data has no setting vocab here (its settings: kind, tokens, "
     "train_split, validation_split, concat_documents, document_eos)"),  # '+data.vocab=' said Hydra, then refused it
    (["model=gpt_tiny", "model.dropout=0.1"], "Could not override 'model.dropout'; this config leaves it unset: "
     "+model.dropout=VALUE sets it"),
    (["model=gpt_tiny", "model.droput=0.1"], "Could not override 'model.droput' (did you mean +model.dropout?)"),
    (["optimizer.options.betas=[0.9,0.99]"], "to append to your config use +optimizer.options.betas=[0.9,0.99] (or "
     "check the key's spelling)"),  # options are free-form
    (["+model.d_modle=64"], "Key 'd_modle' not in 'T5ModelConfig' (did you mean model.d_model?)"),
    (["+trainer.max_stepz=3"], "Key 'max_stepz' not in 'TrainerConfig' (did you mean trainer.max_steps?)"),
    (["trainer.max_steps=abc"], "trainer.max_steps='abc' must be of type int"),
    (["stage=pretrian"], "stage='pretrian' is not valid; choose one of: pretrain, finetune, evaluate"),
    (["trainer.global_batch_size=6"], "not divisible by world size 1 x micro-batch 4"),
    (["trainer.global_batch_size=4096", "trainer.micro_batch_size=8"], "fewer than one global batch of 4096"),
    (["objective=span_corruption", "objective.targets_length=8"], "bad objective settings"),
    (["stage=evaluate"], "stage=evaluate needs init_from="),
    (["objective=lm", "objective.inputs_length=0", "objective.targets_length=65"],
     "objective=lm gives no inputs (objective.inputs_length=0), which an encoder-decoder needs"),  # a traceback before
    (["objective.inputs_length=0"], "objective.inputs_length=0 leaves the encoder no inputs: give "
     "objective=span_corruption 1 or more (T5's is 512)"),  # it said objective=span_corruption gives no inputs
    (["+objective.params.vocab_size=50"], "objective.params.vocab_size comes from the token shards' vocabulary"),
    (["+objective.params.eos_id=5"], "objective.params.eos_id comes from the token shards' vocabulary"),  # trained
    (["+objective.params.mean_noise_span_lenght=3"], "bad objective settings: objective 'span_corruption' has no "
     "parameter 'mean_noise_span_lenght'"),  # it said the shards' 100 sentinel ids needed a re-tokenize
    (["objective.inputs_length=512", "objective.targets_length=512", "objective.params.noise_density=0.5",
      "objective.params.mean_noise_span_length=1"], "has 100 sentinel ids: more need a re-tokenize with a larger "
     "--extra-ids): 510-token segments need 255 noise spans but there are only 100 sentinels"),
    (["finetune.adapter_dim=-1"], "finetune.adapter_dim must be >= 0, got -1"),  # a traceback from torch before
    (["finetune.unfreeze_every=-5"], "finetune.unfreeze_every must be >= 0, got -5"),  # accepted before
])
def test_user_errors_are_one_line(sample_tokens, tmp_path, capsys, overrides, message):
    code = main([f"data.tokens={sample_tokens}", f"output_dir={tmp_path / 'run'}", *TINY, *overrides])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert message in err and len(err.splitlines()) == 1, err
    if "batch" not in message:  # the batch plan needs the ranks, which the run joins as it makes its folder
        assert not (tmp_path / "run").exists()


def test_a_run_given_relative_paths_is_used_from_any_working_folder(sample_tokens, tmp_path, monkeypatch, capsys):
    """config.yaml recorded data.tokens as typed, so evaluate/generate/export from another folder found no tokens."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    relative = os.path.relpath(sample_tokens, tmp_path / "a")
    assert main([f"data.tokens={relative}", "output_dir=run", *TINY, "trainer.max_steps=1",
                 "data.validation_split=null"]) == 0
    assert f"tokens: {sample_tokens}\n" in (tmp_path / "a" / "run" / "config.yaml").read_text()
    monkeypatch.chdir(tmp_path / "b")
    capsys.readouterr()
    assert main(["stage=evaluate", f"init_from={tmp_path / 'a' / 'run'}", "data.validation_split=train",
                 "trainer.eval_batches=1", "trainer.progress=false"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["validation"]["loss"] > 0


def test_a_documents_folder_as_token_shards_says_what_to_run(sample_documents, tmp_path, capsys):
    """It said the folder's manifest 'names no vocabulary'."""
    assert main([f"data.tokens={sample_documents}", f"output_dir={tmp_path}", *TINY]) == 2
    assert capsys.readouterr().err.strip() == (
        f"train: error: data.tokens={sample_documents} holds documents, not token shards: tokenize them with "
        f"`c4prep tokenize --input {sample_documents}` and set data.tokens to its --output")


def test_a_manifest_file_or_a_vocabulary_as_token_shards_says_what_it_is(sample_tokens, sample_vocab, tmp_path,
                                                                         capsys):
    """Both said the output does not exist, though the file was there."""
    for given, says in [(sample_tokens / "manifest.json", "that is the manifest itself: give the folder that holds it"),
                        (sample_vocab, "it holds a vocabulary (vocab.json), not shards"),
                        (sample_vocab / "spm.model", "that is a file: give the output folder of the stage you meant")]:
        assert main([f"data.tokens={given}", f"output_dir={tmp_path / 'run'}", *TINY]) == 2
        assert capsys.readouterr().err.strip().startswith(f"train: error: no manifest.json in {given}: {says}")


def test_missing_token_folder_says_what_to_run(tmp_path, capsys):
    assert main([f"data.tokens={tmp_path / 'nowhere'}", f"output_dir={tmp_path}", *TINY]) == 2
    err = capsys.readouterr().err
    assert "c4prep tokenize" in err and len(err.strip().splitlines()) == 1


@pytest.fixture(scope="module")
def tokens_with_50_sentinels(sample_documents, sample_vocab, tmp_path_factory) -> Path:
    from c4prep.tokenization.run_tokenize import TokenizeConfig, run_tokenize

    output = tmp_path_factory.mktemp("tokens50") / "en"
    run_tokenize(TokenizeConfig(input=str(sample_documents), vocab=str(sample_vocab), output=str(output),
                                extra_ids=50))
    return output


def test_span_corruption_numbers_spans_with_the_token_shards_sentinels(tokens_with_50_sentinels, tmp_path, capsys):
    """Shards tokenized with --extra-ids 50 trained (100 assumed: a traceback from a data worker before)."""
    assert train(tokens_with_50_sentinels, tmp_path / "run", "trainer.num_workers=1", "trainer.max_steps=1",
                 "data.validation_split=null") == 0
    state = load_checkpoint(tmp_path / "run")
    assert state["model_spec"]["vocab_size"] == 1050
    capsys.readouterr()
    assert train(tokens_with_50_sentinels, tmp_path / "other", "+objective.params.max_sentinels=100") == 2
    assert capsys.readouterr().err.strip() == (
        f"train: error: objective.params.max_sentinels=100, but {tokens_with_50_sentinels} was tokenized with "
        "--extra-ids 50: leave max_sentinels unset (it follows the token shards), or re-tokenize with --extra-ids 100")
