"""Hugging Face model folders: ``config.json``, ``model.safetensors`` (each tensor once: tied views are left to
``from_pretrained``) and ``generation_config.json``, written without transformers.

``config.json`` also keeps ``c4prep_model_spec`` (the checkpoint's model spec), which transformers ignores and the
reload into c4prep reads (``t5_from_hf_directory``; ``gpt_from_hf_directory`` reads the GPT-2 fields alone).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from ..models.gpt import GPT
from ..models.gpt_hf import gpt_state_dict_to_hf, hf_gpt2_config
from ..models.t5 import T5
from ..models.t5_hf import hf_config, hf_generation_config, hf_weights

SAFETENSORS_NAME = "model.safetensors"


def hf_layout(model: nn.Module) -> tuple[str, dict[str, Any]]:
    """The HF architecture and config fields of ``model``; ``ValueError`` saying why there is none."""
    if isinstance(model, T5):
        return "T5ForConditionalGeneration", {"model_type": "t5", **hf_config(model.config)}
    if isinstance(model, GPT):
        return "GPT2LMHeadModel", {"model_type": "gpt2", **hf_gpt2_config(model.config)}
    raise ValueError(f"no Hugging Face architecture holds a {type(model).__name__}")


def write_json(path: Path, content: dict[str, Any]) -> None:
    path.write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def save_tensors(tensors: dict[str, Tensor], path: Path) -> None:
    """A safetensors file as ``save_pretrained`` writes it (metadata ``format: pt``), readable as the process umask
    lets any file written here be (safetensors creates it 0600)."""
    from safetensors.torch import save_file

    save_file({name: tensor.detach().contiguous() for name, tensor in tensors.items()}, str(path),
              metadata={"format": "pt"})
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


def write_hf_model(model: nn.Module, spec: dict[str, Any], folder: Path, token_ids: dict[str, int]) -> str:
    """Write ``model`` (our T5 or a GPT that maps to GPT-2) as an HF folder; ``token_ids``: the tokenizer's
    ``bos/eos/pad_token_id`` (a GPT's config sets the ones the tokenizer lacks to null). Returns the architecture."""
    architecture, config = hf_layout(model)
    if isinstance(model, T5):
        weights, generation = hf_weights(model), hf_generation_config(model.config)
    else:
        weights = gpt_state_dict_to_hf(model)
        token_ids = {"bos_token_id": None, "eos_token_id": None, **token_ids}  # not GPT-2's 50256: none it lacks
        config.update(token_ids)
        generation = dict(token_ids)
    write_json(folder / "config.json", {"architectures": [architecture], **config, "c4prep_model_spec": spec})
    save_tensors(weights, folder / SAFETENSORS_NAME)
    write_json(folder / "generation_config.json", generation)
    return architecture
