"""AdaVAE end to end on real PTB sentences: GPT pretrain -> AdaVAE finetune (phases, beta cycles) -> evaluate
(IW-NLL, PPL, -ELBO, MI, AU on the whole test file) -> generate."""
import json
import math

import pytest
from c4prep.training.checkpoint import load_checkpoint
from c4prep.training.cli import main
from conftest import TRAIN_QUIET
from c4prep.training.metrics_log import read_metrics


def test_adavae_trains_from_the_pretrained_gpt_and_keeps_the_backbone_frozen(adavae_run, ptb_gpt_run):
    train = [r["metrics"] for r in read_metrics(adavae_run / "metrics.jsonl") if r["split"] == "train"]
    assert len(train) == 8 and all(math.isfinite(m["loss"]) for m in train)
    # Latent Attention's weights are spread over the real tokens: entropy between 0 (one token) and log(65 positions)
    assert all(0 < m["attention_entropy"] < math.log(65) for m in train)
    validation = [r["metrics"] for r in read_metrics(adavae_run / "metrics.jsonl") if r["split"] == "validation"]
    assert len(validation) == 2 and all(v["loss"] == pytest.approx(v["kl"] + v["reconstruction"]) for v in validation)
    vae, gpt = load_checkpoint(adavae_run), load_checkpoint(ptb_gpt_run)
    assert vae["model_spec"]["name"] == "adavae" and vae["model_spec"]["backbone"]["n_layer"] == 2
    norms = {name for name in gpt["model"] if name.split(".")[-2].startswith("ln")}
    frozen = [name for name in gpt["model"] if name not in norms]
    assert frozen and all(vae["model"][f"backbone.{name}"].equal(gpt["model"][name]) for name in frozen)
    assert any(not vae["model"][f"backbone.{name}"].equal(gpt["model"][name]) for name in norms)
    assert (adavae_run / "word_vocabulary.json").read_text() == (ptb_gpt_run / "word_vocabulary.json").read_text()
    assert vae["run_files"] == gpt["run_files"]  # its checkpoints pin the vocabulary as the GPT's do


def test_adavae_evaluates_the_whole_test_file_deterministically(adavae_run, ptb_small, tmp_path):
    args = ["experiment=adavae_ptb", "stage=evaluate", f"init_from={adavae_run}", "evaluate.iw_samples=6",
            "evaluate.iw_chunk=4", *ptb_small, *TRAIN_QUIET]
    assert main([*args, f"output_dir={tmp_path / 'a'}", "trainer.micro_batch_size=7"]) == 0
    assert main([*args, f"output_dir={tmp_path / 'b'}", "trainer.micro_batch_size=25"]) == 0
    first = json.loads((tmp_path / "a" / "evaluation.json").read_text())
    second = json.loads((tmp_path / "b" / "evaluation.json").read_text())
    assert first["n_sentences"] == 25 and first["step"] == 8
    for key in ("nll", "neg_elbo", "kl", "mi", "ppl_word"):
        assert first[key] == pytest.approx(second[key], rel=1e-4), key  # batch size does not change the numbers
    assert first["nll"] <= first["neg_elbo"] + 1e-6  # the IW bound is at least as tight as the ELBO
    assert first["ppl_word"] == pytest.approx(math.exp(first["nll"] * 25 / (first["n_words"] + 25)))
    assert 0 <= first["au"] <= 8 and first["parameters"]["trainable"] < first["parameters"]["total"]


def test_adavae_generates_interpolations_analogies_and_prior_samples(adavae_run, ptb_small, tmp_path, capsys):
    assert main(["experiment=adavae_ptb", "stage=generate", f"init_from={adavae_run}",
                 "generate.max_tokens=6", "generate.interpolation_steps=3", *ptb_small,
                 f"output_dir={tmp_path}", *TRAIN_QUIET]) == 0
    result = json.loads((tmp_path / "generation.json").read_text())
    assert len(result["interpolation"]) == 5 and len(result["prior"]) == 5 and isinstance(result["analogy"], str)
    assert all(len(s.split()) <= 6 for s in result["interpolation"] + result["prior"])
    assert "interpolation (A -> B):" in capsys.readouterr().out


def test_adavae_stages_need_only_the_run_and_write_next_to_it(adavae_run):
    assert main(["stage=generate", f"init_from={adavae_run}", "generate.max_tokens=4", "generate.prior_samples=2",
                 "generate.interpolation_steps=1", *TRAIN_QUIET]) == 0  # model, objective and data: the run's
    result = json.loads((adavae_run / "generate" / "generation.json").read_text())
    assert len(result["interpolation"]) == 3 and len(result["prior"]) == 2


def test_more_tokens_than_the_backbones_positions_hold_is_one_line(adavae_run, capsys, tmp_path):
    """generate wrote at most block_size - 1 tokens, whatever max_tokens said. Refused before the run starts, it
    leaves no folder behind (it left one with a config.yaml)."""
    positions = load_checkpoint(adavae_run)["model_spec"]["backbone"]["block_size"]
    assert main(["stage=generate", f"init_from={adavae_run}", f"generate.max_tokens={positions}",
                 f"output_dir={tmp_path / 'generate'}", *TRAIN_QUIET]) == 2
    assert capsys.readouterr().err.strip().endswith(f"backbone's {positions} positions hold BOS and at most "
                                                    f"{positions - 1} tokens; lower it")
    assert not (tmp_path / "generate").exists()


def test_adavae_needs_a_gpt_backbone(adavae_run, ptb_small, tmp_path, capsys):
    assert main(["experiment=adavae_ptb", "trainer.max_steps=1", *ptb_small, f"output_dir={tmp_path}",
                 *TRAIN_QUIET]) == 2
    assert "needs init_from" in capsys.readouterr().err
    assert main(["experiment=adavae_ptb", f"init_from={adavae_run}", "trainer.max_steps=1", *ptb_small,
                 f"output_dir={tmp_path}", *TRAIN_QUIET]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "is not a GPT (its model is adavae): AdaVAE wraps a pre-trained GPT; give a GPT run (`train stage=pretrain "
        "experiment=ptb_gpt_pretrain`) or a local Hugging Face GPT-2 directory")  # it named no next step
    assert main(["experiment=adavae_ptb", "stage=pretrain", *ptb_small, f"output_dir={tmp_path}", *TRAIN_QUIET]) == 2
    assert "model=adavae runs stage=finetune|evaluate|generate|classify" in capsys.readouterr().err


@pytest.mark.parametrize("setting, message", [
    ("model.pooling=bogus", "bad model settings for adavae: pooling must be one of latent_attention, lg, got 'bogus'"),
    ("model.latent_size=0", "bad model settings for adavae: latent_size must be >= 1, got 0"),
    ("model.encoder_layers=10", "bad model settings for adavae: encoder_layers must be in 1..2, got 10"),
])
def test_an_adavae_setting_the_model_refuses_is_one_line(ptb_gpt_run, ptb_small, tmp_path, capsys, setting, message):
    assert main(["experiment=adavae_ptb", f"init_from={ptb_gpt_run}", "trainer.max_steps=1", setting, *ptb_small,
                 f"output_dir={tmp_path}", *TRAIN_QUIET]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(message) and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("world_size, setting, message", [
    ("2", "data.pack=false", "AdaVAE trains in one process (its decoder side joins mid-run, which data-parallel "
                             "training does not follow): run `train` without torchrun"),  # DDP stopped at step 2
    ("1", "data.pack=true", "data.pack=true puts several sentences in a row, where AdaVAE encodes one sentence a "
                            "row: leave data.pack=false (experiment=adavae_ptb's)"),  # KeyError: 'n_words'
])
def test_an_adavae_run_it_cannot_train_is_one_line(ptb_gpt_run, ptb_small, tmp_path, capsys, monkeypatch, world_size,
                                                   setting, message):
    """Both were tracebacks (exit 1) that left a run folder behind."""
    monkeypatch.setenv("WORLD_SIZE", world_size)  # as torchrun sets it
    assert main(["experiment=adavae_ptb", f"init_from={ptb_gpt_run}", "trainer.max_steps=1", setting, *ptb_small,
                 f"output_dir={tmp_path / 'run'}", *TRAIN_QUIET]) == 2
    assert capsys.readouterr().err.strip() == f"train: error: {message}"
    assert not (tmp_path / "run").exists()
