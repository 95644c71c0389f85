"""State-dict names ours <-> HF ``T5ForConditionalGeneration``; no transposes (both store Linear as [out, in]).

HF keeps the relative-bias table in block 0 of each stack and holds three views of the shared embedding
(``shared``, ``encoder.embed_tokens``, ``decoder.embed_tokens``) plus ``lm_head`` (the same tensor when tied).
HF has no adapters, so models with ``adapter_dim > 0`` cannot be converted.

Our ``tie_word_embeddings`` means both "the head is the embedding" and "scale the decoder output by d_model**-0.5"
(T5 v1.0; v1.1 does neither). transformers 4.x reads the config key the same way. transformers 5.x keeps the key
only as ``scale_decoder_outputs`` and forces ``tie_word_embeddings=True``, so ``T5ForConditionalGeneration(config)``
always ties ``lm_head`` to ``shared``: loading a v1.1 state dict into it overwrites the embedding with the head.
Its ``from_pretrained`` unties the two when the weights hold different tensors, as for the released v1.1
checkpoints; :func:`hf_model` and the export's ``config.json`` + safetensors go through that path, which both
versions read alike.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from torch import Tensor

from .t5 import T5, T5Config

# HF ``feed_forward_proj`` values our T5 implements (ours uses the same names)
HF_FEED_FORWARD = ("relu", "gated-gelu")


def hf_config(config: T5Config) -> dict:
    """Keyword arguments for ``transformers.T5Config`` describing the same model (vocab = padded rows)."""
    _no_adapters(config)
    return dict(
        vocab_size=config.padded_vocab_size, d_model=config.d_model, d_kv=config.d_kv, d_ff=config.d_ff,
        num_layers=config.num_layers, num_decoder_layers=config.num_decoder_layers, num_heads=config.num_heads,
        relative_attention_num_buckets=config.relative_attention_num_buckets,
        relative_attention_max_distance=config.relative_attention_max_distance,
        dropout_rate=config.dropout_rate, layer_norm_epsilon=config.layer_norm_epsilon,
        feed_forward_proj=config.feed_forward, tie_word_embeddings=config.tie_word_embeddings,
        pad_token_id=config.pad_id, eos_token_id=config.eos_id, decoder_start_token_id=config.decoder_start_id)


def hf_generation_config(config: T5Config) -> dict[str, Any]:
    """``GenerationConfig`` fields for the same model: its start, EOS and PAD ids, and its embedding's padding rows
    (ids ``vocab_size`` and up, no token) suppressed, as :meth:`T5.generate` never chooses them."""
    return {"decoder_start_token_id": config.decoder_start_id, "eos_token_id": config.eos_id,
            "pad_token_id": config.pad_id, "suppress_tokens": list(range(config.vocab_size, config.padded_vocab_size))}


def t5_config_from_hf(settings: dict[str, Any], vocab_size: int | None = None) -> T5Config:
    """Our config for an HF T5 ``config.json`` written by transformers 4.x or 5.x (``scale_decoder_outputs``, when
    present, is 5.x's record of the v1.0 layout); ``vocab_size``: the real ids (default: HF's rows)."""
    feed_forward = settings.get("feed_forward_proj", "relu")
    if feed_forward not in HF_FEED_FORWARD:
        raise ValueError(f"feed_forward_proj={feed_forward!r} is not one of our T5's {', '.join(HF_FEED_FORWARD)}")
    tied = settings.get("scale_decoder_outputs", settings.get("tie_word_embeddings", True))
    names = ("d_model", "d_kv", "d_ff", "num_layers", "num_heads", "relative_attention_num_buckets",
             "relative_attention_max_distance", "dropout_rate", "layer_norm_epsilon")
    return T5Config(vocab_size=vocab_size or settings["vocab_size"], feed_forward=feed_forward,
                    num_decoder_layers=settings.get("num_decoder_layers") or settings["num_layers"],
                    tie_word_embeddings=bool(tied), pad_id=settings.get("pad_token_id", 0),
                    eos_id=settings.get("eos_token_id", 1),
                    decoder_start_id=settings.get("decoder_start_token_id", 0),
                    **{name: settings[name] for name in names if name in settings})


def name_pairs(config: T5Config) -> list[tuple[str, str]]:
    """(our name, HF name) for every tensor of our model."""
    ff = (["wi_0", "wi_1"] if config.feed_forward == "gated-gelu" else ["wi"]) + ["wo"]
    pairs = [("shared.weight", "shared.weight")]
    for stack, num_layers in (("encoder", config.num_layers), ("decoder", config.num_decoder_layers)):
        attentions = [("self_attn", "SelfAttention")]
        if stack == "decoder":
            attentions.append(("cross_attn", "EncDecAttention"))
        pairs.append((f"{stack}.relative_bias.weight",
                      f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"))
        for i in range(num_layers):
            ours, hf = f"{stack}.blocks.{i}", f"{stack}.block.{i}.layer"
            for j, (attn, hf_attn) in enumerate(attentions):
                pairs += [(f"{ours}.{attn}.{p}.weight", f"{hf}.{j}.{hf_attn}.{p}.weight") for p in "qkvo"]
                pairs.append((f"{ours}.{attn}_norm.weight", f"{hf}.{j}.layer_norm.weight"))
            j = len(attentions)
            pairs += [(f"{ours}.ff.{w}.weight", f"{hf}.{j}.DenseReluDense.{w}.weight") for w in ff]
            pairs.append((f"{ours}.ff_norm.weight", f"{hf}.{j}.layer_norm.weight"))
        pairs.append((f"{stack}.final_norm.weight", f"{stack}.final_layer_norm.weight"))
    if not config.tie_word_embeddings:
        pairs.append(("lm_head.weight", "lm_head.weight"))
    return pairs


def hf_weights(model: T5) -> dict[str, Tensor]:
    """Every distinct HF tensor once (no aliases of ``shared``): what a safetensors file holds."""
    _no_adapters(model.config)
    ours = model.state_dict()
    return {hf_name: ours[name].detach().contiguous() for name, hf_name in name_pairs(model.config)}


def to_hf_state_dict(model: T5) -> dict[str, Tensor]:
    """HF state dict (all keys HF's ``state_dict()`` has, so ``load_state_dict(strict=True)`` works)."""
    hf = hf_weights(model)
    for alias in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight"):
        hf[alias] = hf["shared.weight"]
    if model.config.tie_word_embeddings:
        hf["lm_head.weight"] = hf["shared.weight"]
    return hf


def hf_model(model: T5, **settings: Any) -> Any:
    """An HF ``T5ForConditionalGeneration`` (eval mode) computing and generating what ``model`` does, in
    transformers 4.x and 5.x: built through ``from_pretrained``, which leaves a v1.1 head untied (see the module
    docstring), from a copy of the weights (transformers 4.x keeps the tensors it is given: training one model would
    move the other's), with :func:`hf_generation_config`. ``settings``: more ``T5Config`` fields
    (``attn_implementation``)."""
    import transformers

    config = transformers.T5Config(**hf_config(model.config), **settings)
    state = to_hf_state_dict(model)
    copies = {id(tensor): tensor.clone() for tensor in state.values()}  # one copy per tensor, aliases kept
    hf = transformers.T5ForConditionalGeneration.from_pretrained(
        None, config=config, state_dict={name: copies[id(tensor)] for name, tensor in state.items()}).eval()
    hf.generation_config.update(**hf_generation_config(model.config))
    return hf


def from_hf_state_dict(config: T5Config, hf_state_dict: dict[str, Tensor]) -> T5:
    """Our model with HF's weights (extra HF aliases are ignored; a missing tensor raises ``KeyError``)."""
    _no_adapters(config)
    model = T5(config)
    model.load_state_dict({name: hf_state_dict[hf_name] for name, hf_name in name_pairs(config)}, strict=True)
    return model


def t5_from_hf_directory(path: str | Path, vocab_size: int | None = None) -> T5:
    """Our T5 (eval mode) from an HF T5 folder (``config.json`` + ``model.safetensors``, e.g. a ``c4prep export``);
    ``vocab_size`` defaults to the folder's ``c4prep_model_spec``, else HF's rows. Needs no transformers."""
    from safetensors.torch import load_file

    directory = Path(path)
    settings = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    if settings.get("model_type") != "t5":
        raise ValueError(f"{directory} is not a T5 folder: config.json has model_type {settings.get('model_type')!r}")
    vocab_size = vocab_size or settings.get("c4prep_model_spec", {}).get("vocab_size")
    weights = load_file(directory / "model.safetensors")
    return from_hf_state_dict(t5_config_from_hf(settings, vocab_size), weights).eval()


def _no_adapters(config: T5Config) -> None:
    if config.adapter_dim:
        raise ValueError("HF T5 has no adapters; convert a model with adapter_dim == 0")
