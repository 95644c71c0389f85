"""Our :class:`GPT` <-> Hugging Face GPT-2: load a local checkpoint directory (``save_pretrained`` output) into our
GPT, and give the ``GPT2Config`` and weights of ours.

GPT-2 is our pre-LN GPT with learned positions, a tied head and the tanh-approximated GELU (HF ``gelu_new``). HF keeps
its linear layers as ``Conv1D`` with weights ``[in, out]``, the transpose of ``nn.Linear``'s, and fuses q, k, v in
``c_attn`` in the same order as our ``qkv``. HF always has biases: a GPT without them maps with zero biases. A
post-LN GPT (GPT-1) or synthesizer attention has no GPT-2 counterpart. Only local files are read
(``local_files_only=True``): nothing is downloaded.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import Tensor

from .gpt import GPT, GPTConfig

TRANSFORMERS_MISSING = ("install transformers to load Hugging Face GPT-2 checkpoints: "
                        "pip install 'transformers>=4.40,<6'")

# HF ``activation_function`` -> our ``GPTConfig.activation``
HF_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu"}
# ours -> the HF name written on export
OUR_ACTIVATIONS = {"gelu_tanh": "gelu_new", "gelu": "gelu"}
# GPTConfig fields GPT-2 has only at these values
GPT2_LAYOUT = {"norm": "pre", "attention": "causal"}

# HF GPT-2 switches our GPT implements only at these values (attention scaled by 1/sqrt(head_dim), no cross-attention)
REQUIRED_SETTINGS: dict[str, Any] = {"scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
                                     "reorder_and_upcast_attn": False, "add_cross_attention": False}

# HF layer -> ours within a block; the Conv1D ones store weights [in, out]
_BLOCK_LAYERS = {"ln_1": "ln1", "attn.c_attn": "attn.qkv", "attn.c_proj": "attn.proj", "ln_2": "ln2",
                 "mlp.c_fc": "mlp.fc", "mlp.c_proj": "mlp.proj"}
_CONV1D = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")


def gpt_from_hf_directory(path: str | Path, dropout: float | None = None) -> GPT:
    """Our GPT with the weights of the local HF GPT-2 checkpoint at ``path``, in train mode like any new module.

    ``dropout`` defaults to the checkpoint's own (``resid_pdrop`` = ``embd_pdrop`` = ``attn_pdrop``, 0.1 for GPT-2)."""
    directory = Path(path)
    settings = read_gpt2_settings(directory)
    config = gpt_config_from_hf(settings, dropout)
    transformers = _import_transformers()
    try:
        hf_model = transformers.GPT2LMHeadModel.from_pretrained(directory, local_files_only=True)
    except OSError as err:
        raise ValueError(f"cannot load GPT-2 weights from {directory}: {err}") from err
    model = GPT(config)
    model.load_state_dict(gpt_state_dict_from_hf(config, hf_model.state_dict()), strict=True)
    return model


def read_gpt2_settings(directory: Path) -> dict[str, Any]:
    """Every ``GPT2Config`` field of ``directory/config.json`` (HF defaults filled in); one-line errors when the
    directory or its config is missing or the checkpoint is not GPT-2."""
    config_file = directory / "config.json"
    if not directory.is_dir():
        raise FileNotFoundError(f"no GPT-2 checkpoint directory at {directory}: pass a local directory written by "
                                "save_pretrained (nothing is downloaded)")
    if not config_file.is_file():
        raise FileNotFoundError(f"{directory} has no config.json: pass a Hugging Face GPT-2 checkpoint directory")
    try:
        raw = json.loads(config_file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{config_file} is not valid JSON: {err}") from err
    model_type = raw.get("model_type") if isinstance(raw, dict) else None
    if model_type != "gpt2":
        raise ValueError(f"{directory} is not a GPT-2 checkpoint: config.json has model_type {model_type!r}, "
                         "expected 'gpt2'")
    return _import_transformers().GPT2Config.from_dict(raw).to_dict()


def gpt_config_from_hf(settings: Mapping[str, Any], dropout: float | None = None) -> GPTConfig:
    """Our ``GPTConfig`` for HF GPT-2 ``settings`` (a ``GPT2Config.to_dict()``); ``ValueError`` naming every
    setting our GPT cannot reproduce."""
    problems = [f"{name}={settings.get(name)!r} (supported: {value!r})"
                for name, value in REQUIRED_SETTINGS.items() if settings.get(name, value) != value]
    activation = settings.get("activation_function", "gelu_new")
    if activation not in HF_ACTIVATIONS:
        problems.append(f"activation_function={activation!r} (supported: {', '.join(HF_ACTIVATIONS)})")
    n_inner = settings.get("n_inner")
    if n_inner is not None and n_inner != 4 * settings["n_embd"]:
        problems.append(f"n_inner={n_inner} (supported: None or 4 * n_embd = {4 * settings['n_embd']})")
    if settings.get("pruned_heads"):
        problems.append(f"pruned_heads={settings['pruned_heads']!r} (supported: none)")
    if problems:
        raise ValueError(f"unsupported GPT-2 settings: {'; '.join(problems)}")
    return GPTConfig(vocab_size=settings["vocab_size"], block_size=settings["n_positions"],
                     n_layer=settings["n_layer"], n_head=settings["n_head"], n_embd=settings["n_embd"],
                     dropout=_checkpoint_dropout(settings) if dropout is None else dropout, norm="pre",
                     attention="causal", tie_embeddings=settings.get("tie_word_embeddings", True),
                     position_init="normal", bias=True, activation=HF_ACTIVATIONS[activation],
                     layer_norm_eps=settings["layer_norm_epsilon"])


def gpt_state_dict_from_hf(config: GPTConfig, hf_state_dict: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Our state dict from a ``GPT2LMHeadModel.state_dict()`` (Conv1D weights transposed to ``nn.Linear``'s)."""
    state = {"tok_emb.weight": hf_state_dict["transformer.wte.weight"],
             "pos_emb.weight": hf_state_dict["transformer.wpe.weight"],
             "head.weight": hf_state_dict["lm_head.weight"],
             "ln_f.weight": hf_state_dict["transformer.ln_f.weight"],
             "ln_f.bias": hf_state_dict["transformer.ln_f.bias"]}
    for i in range(config.n_layer):
        for hf_layer, our_layer in _BLOCK_LAYERS.items():
            hf_name, our_name = f"transformer.h.{i}.{hf_layer}", f"blocks.{i}.{our_layer}"
            weight = hf_state_dict[f"{hf_name}.weight"]
            state[f"{our_name}.weight"] = weight.t() if hf_layer in _CONV1D else weight
            state[f"{our_name}.bias"] = hf_state_dict[f"{hf_name}.bias"]
    return state


def hf_gpt2_config(config: GPTConfig) -> dict[str, Any]:
    """``GPT2Config`` keyword arguments for the same model; ``ValueError`` naming what GPT-2 cannot express."""
    problems = [f"{name}={getattr(config, name)} (GPT-2 has {value})" for name, value in GPT2_LAYOUT.items()
                if getattr(config, name) != value]
    if problems:
        raise ValueError(f"GPT2LMHeadModel cannot hold this GPT: {'; '.join(problems)}")
    return dict(vocab_size=config.vocab_size, n_positions=config.block_size, n_embd=config.n_embd,
                n_layer=config.n_layer, n_head=config.n_head, n_inner=None,
                activation_function=OUR_ACTIVATIONS[config.activation], resid_pdrop=config.dropout,
                embd_pdrop=config.dropout, attn_pdrop=config.dropout, layer_norm_epsilon=config.layer_norm_eps,
                tie_word_embeddings=config.tie_embeddings, **REQUIRED_SETTINGS)


def gpt_state_dict_to_hf(model: GPT) -> dict[str, Tensor]:
    """The ``GPT2LMHeadModel`` weights of ``model``, each tensor once (no ``lm_head`` when tied): Conv1D weights
    transposed, zero biases where ours has none."""
    hf_config = hf_gpt2_config(model.config)  # refuses what does not map
    ours = model.state_dict()

    def bias(name: str, size: int) -> Tensor:
        return ours[name] if name in ours else ours["ln_f.weight"].new_zeros(size)

    width = model.config.n_embd
    hf = {"transformer.wte.weight": ours["tok_emb.weight"], "transformer.wpe.weight": ours["pos_emb.weight"],
          "transformer.ln_f.weight": ours["ln_f.weight"], "transformer.ln_f.bias": bias("ln_f.bias", width)}
    if not hf_config["tie_word_embeddings"]:
        hf["lm_head.weight"] = ours["head.weight"]
    for i in range(model.config.n_layer):
        for hf_layer, our_layer in _BLOCK_LAYERS.items():
            weight = ours[f"blocks.{i}.{our_layer}.weight"]
            hf[f"transformer.h.{i}.{hf_layer}.weight"] = weight.t() if hf_layer in _CONV1D else weight
            hf[f"transformer.h.{i}.{hf_layer}.bias"] = bias(f"blocks.{i}.{our_layer}.bias", weight.shape[0])
    return {name: tensor.detach().contiguous() for name, tensor in hf.items()}


def _checkpoint_dropout(settings: Mapping[str, Any]) -> float:
    rates = {name: settings[name] for name in ("resid_pdrop", "embd_pdrop", "attn_pdrop")}
    if len(set(rates.values())) > 1:
        raise ValueError(f"our GPT has one dropout rate but the checkpoint has {rates}: pass dropout= explicitly")
    return next(iter(rates.values()))


def _import_transformers() -> Any:
    try:
        import transformers
    except ImportError as err:
        raise ImportError(TRANSFORMERS_MISSING) from err
    return transformers
