"""AdaVAE export: the tuned modules (every state-dict entry that is not a frozen backbone weight: posterior,
latent injection, adapters or prefix, and the backbone entries the run trained, e.g. its layer norms) as
``adavae.safetensors``, and ``adavae_config.json`` with the model spec, the backbone the run started from (the
checkpoint file, for a c4prep run) and a SHA-256 of the frozen backbone weights. :func:`adavae_from_export` puts
them back on that backbone.
"""
from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ..checkpoint import checkpoint_dir, load_checkpoint
from ..models import build_model
from ..models.gpt_hf import gpt_from_hf_directory
from ..stages.model_setup import model_from_checkpoint
from .hf_folders import save_tensors, write_json
from .run_source import ExportError

WEIGHTS_NAME = "adavae.safetensors"
CONFIG_NAME = "adavae_config.json"
FORMAT = "c4prep-adavae-export"

log = logging.getLogger(__name__)


def split_state(model: nn.Module) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """(tuned, frozen) state-dict entries of an AdaVAE, each tensor once (a tied head is its embedding)."""
    trainable = {id(p) for p in model.latent_parameters() + model.encoder_side_parameters()
                 + model.decoder_side_parameters()}
    tuned, frozen, seen = {}, {}, set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        backbone_frozen = name.startswith("backbone.") and id(tensor) not in trainable
        (frozen if backbone_frozen else tuned)[name] = tensor.detach()
    return tuned, frozen


def frozen_sha256(frozen: dict[str, Tensor]) -> str:
    """SHA-256 over the frozen entries' names, dtypes, shapes and values."""
    digest = hashlib.sha256()
    for name in sorted(frozen):
        tensor = frozen[name].cpu().contiguous()
        digest.update(f"{name}\t{tensor.dtype}\t{tuple(tensor.shape)}\n".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


def backbone_source(init_from: str | None, model: nn.Module) -> str | None:
    """Where the AdaVAE ``model``'s backbone is: ``init_from``; where that is a c4prep run folder, its newest
    checkpoint holding the frozen backbone weights (its latest is another once the run trains on), or the folder
    when none does (give the backbone to :func:`adavae_from_export`)."""
    if not init_from or not Path(init_from).is_dir() or (Path(init_from) / "config.json").is_file():
        return init_from
    frozen = {name.removeprefix("backbone."): tensor for name, tensor in split_state(model)[1].items()}
    for checkpoint in sorted(checkpoint_dir(init_from).glob("step_*.pt"), reverse=True):
        weights = model_from_checkpoint(load_checkpoint(checkpoint)).state_dict()
        if all(name in weights and torch.equal(weights[name], tensor) for name, tensor in frozen.items()):
            return str(checkpoint)
    log.warning("no checkpoint of %s holds this AdaVAE's backbone weights: give the backbone to adavae_from_export",
                init_from)
    return init_from


def write_adavae(model: nn.Module, spec: dict[str, Any], backbone: str | None, folder: Path) -> dict[str, Any]:
    """Write the tuned entries and the config into ``folder``; return the config."""
    tuned, frozen = split_state(model)
    config = {"format": FORMAT, "model_spec": spec, "tuned": sorted(tuned),
              "backbone": {"source": backbone, "frozen_sha256": frozen_sha256(frozen)}}
    save_tensors(tuned, folder / WEIGHTS_NAME)
    write_json(folder / CONFIG_NAME, config)
    return config


def adavae_from_export(folder: str | Path, backbone: str | None = None) -> nn.Module:
    """The exported AdaVAE (eval mode): its backbone from ``backbone`` (default: the one the run started from; a
    c4prep GPT run or checkpoint, or a local HF GPT-2 folder) with the exported tuned entries on top. An
    :class:`ExportError` when the backbone's frozen weights are not the ones the AdaVAE was trained with."""
    from safetensors.torch import load_file

    folder = Path(folder)
    config = json.loads((folder / CONFIG_NAME).read_text(encoding="utf-8"))
    if config.get("format") != FORMAT:
        raise ExportError(f"{folder / CONFIG_NAME} is not a c4prep AdaVAE export")
    source = backbone or config["backbone"]["source"]
    if not backbone and not Path(source).exists():
        raise ExportError(f"the backbone this export names, {source}, is gone (a backbone run that trained on keeps "
                          "only its trainer.keep_checkpoints newest): pass backbone= that GPT (a c4prep run, checkpoint "
                          "or Hugging Face folder)")
    model = build_model(**config["model_spec"])
    if (Path(source) / "config.json").is_file():
        gpt = gpt_from_hf_directory(source)
    else:
        gpt = model_from_checkpoint(load_checkpoint(source))
    weights = gpt.state_dict()
    try:
        model.backbone.load_state_dict({name: weights[name] for name in model.backbone.state_dict()})
    except (KeyError, RuntimeError):
        raise ExportError(f"the GPT at {source} does not have the shape of the exported AdaVAE's backbone") from None
    unexpected = model.load_state_dict(load_file(folder / WEIGHTS_NAME), strict=False).unexpected_keys
    if unexpected:
        raise ExportError(f"{folder / WEIGHTS_NAME} holds entries the AdaVAE lacks: {unexpected[:3]}")
    if frozen_sha256(split_state(model)[1]) != config["backbone"]["frozen_sha256"]:
        raise ExportError(f"the GPT at {source} is not the backbone this AdaVAE was trained on (its frozen weights "
                          "differ): pass that one")
    return model.eval()
