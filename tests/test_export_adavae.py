"""`c4prep export` of an AdaVAE run: its tuned modules and config, reloaded onto the backbone run (or that backbone
exported to Hugging Face) into exactly the trained model; another backbone is refused."""
from __future__ import annotations

import json
import shutil
import stat

import pytest
import torch
from omegaconf import OmegaConf

from c4prep.training.checkpoint import load_checkpoint, resolve_checkpoint, save_checkpoint
from c4prep.training.export.adavae import adavae_from_export
from c4prep.training.export.run_export import export_run
from c4prep.training.export.run_source import ExportError
from c4prep.training.stages.model_setup import model_from_checkpoint

pytest.importorskip("safetensors")


@pytest.fixture(scope="module")
def exported(adavae_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("adavae") / "export"
    assert export_run(adavae_run, out)["architecture"] == "AdaVAE"
    return out


def test_the_export_holds_the_tuned_modules_and_the_config(exported, adavae_run, ptb_gpt_run):
    assert sorted(p.name for p in exported.iterdir()) == ["README.md", "adavae.safetensors", "adavae_config.json"]
    config = json.loads((exported / "adavae_config.json").read_text())
    assert config["model_spec"] == load_checkpoint(adavae_run)["model_spec"]
    assert config["backbone"]["source"] == str(resolve_checkpoint(ptb_gpt_run))  # the step
    tuned = set(config["tuned"])
    assert {"backbone.blocks.0.ln1.weight", "backbone.ln_f.weight"} <= tuned  # layer norms train with the adapters
    assert any(name.startswith("posterior.") for name in tuned) and any("adapters." in name for name in tuned)
    assert not any(name.startswith(("backbone.tok_emb", "backbone.blocks.0.attn", "backbone.blocks.0.mlp"))
                   for name in tuned)
    card = (exported / "README.md").read_text()
    assert "adavae_from_export" in card and config["backbone"]["frozen_sha256"] in card
    modes = {stat.S_IMODE(path.stat().st_mode) for path in exported.iterdir()}  # adavae.safetensors was 0600
    assert len(modes) == 1, modes


def test_reloading_gives_the_trained_model(exported, adavae_run, ptb_gpt_run, tmp_path):
    trained = model_from_checkpoint(load_checkpoint(adavae_run)).state_dict()
    export_run(ptb_gpt_run, tmp_path / "gpt2")  # the backbone as a Hugging Face GPT-2 folder serves too
    for backbone in (None, str(tmp_path / "gpt2")):
        reloaded = adavae_from_export(exported, backbone).state_dict()
        assert reloaded.keys() == trained.keys()
        assert all(torch.equal(reloaded[name], trained[name]) for name in trained)


def test_another_backbone_is_refused(exported, ptb_gpt_run, tmp_path):
    state = load_checkpoint(ptb_gpt_run)
    state["model"]["blocks.0.attn.qkv.weight"] = state["model"]["blocks.0.attn.qkv.weight"] + 1e-3
    save_checkpoint(tmp_path / "other", state["step"], state, keep=1)
    with pytest.raises(ExportError, match="is not the backbone this AdaVAE was trained on"):
        adavae_from_export(exported, str(tmp_path / "other"))


def test_the_export_names_the_backbone_checkpoint_after_its_run_trained_on(adavae_run, ptb_gpt_run, tmp_path):
    """The export named the backbone's run folder: once that run trained on, its latest checkpoint was another GPT
    and the export no longer loaded ("not the backbone this AdaVAE was trained on")."""
    backbone, vae = shutil.copytree(ptb_gpt_run, tmp_path / "gpt"), shutil.copytree(adavae_run, tmp_path / "vae")
    trained = resolve_checkpoint(backbone)
    record = OmegaConf.load(vae / "config.yaml")
    OmegaConf.save(OmegaConf.merge(record, {"init_from": str(backbone)}), vae / "config.yaml")
    state = load_checkpoint(trained)
    state["model"]["blocks.0.attn.qkv.weight"] = state["model"]["blocks.0.attn.qkv.weight"] + 1e-3
    state["step"] += 5
    save_checkpoint(backbone, state["step"], state, keep=10)  # the run trained on
    export_run(vae, tmp_path / "out")
    assert json.loads((tmp_path / "out" / "adavae_config.json").read_text())["backbone"]["source"] == str(trained)
    reloaded = adavae_from_export(tmp_path / "out").state_dict()
    expected = model_from_checkpoint(load_checkpoint(adavae_run)).state_dict()
    assert all(torch.equal(reloaded[name], expected[name]) for name in expected)
    trained.unlink()  # the run trained on further, and its rotation deleted that checkpoint
    with pytest.raises(ExportError) as gone:
        adavae_from_export(tmp_path / "out")
    assert str(gone.value) == (
        f"the backbone this export names, {trained}, is gone (a backbone run that trained on keeps only its "
        "trainer.keep_checkpoints newest): pass backbone= that GPT (a c4prep run, checkpoint or Hugging Face folder)")
