"""State-dict names ours <-> HF ``T5ForConditionalGeneration``; no transposes (both store Linear as [out, in]).

HF keeps the relative-bias table in block 0 of each stack and holds three views of the shared embedding
(``shared``, ``encoder.embed_tokens``, ``decoder.embed_tokens``) plus ``lm_head`` (the same tensor when tied).
HF has no adapters, so models with ``adapter_dim > 0`` cannot be converted.
"""
from __future__ import annotations

from torch import Tensor

from .t5 import T5, T5Config


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


def to_hf_state_dict(model: T5) -> dict[str, Tensor]:
    """HF state dict (all keys HF's ``state_dict()`` has, so ``load_state_dict(strict=True)`` works)."""
    _no_adapters(model.config)
    ours = model.state_dict()
    hf = {hf_name: ours[name] for name, hf_name in name_pairs(model.config)}
    for alias in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight"):
        hf[alias] = hf["shared.weight"]
    if model.config.tie_word_embeddings:
        hf["lm_head.weight"] = hf["shared.weight"]
    return hf


def from_hf_state_dict(config: T5Config, hf_state_dict: dict[str, Tensor]) -> T5:
    """Our model with HF's weights (extra HF aliases are ignored; a missing tensor raises ``KeyError``)."""
    _no_adapters(config)
    model = T5(config)
    model.load_state_dict({name: hf_state_dict[hf_name] for name, hf_name in name_pairs(config)}, strict=True)
    return model


def _no_adapters(config: T5Config) -> None:
    if config.adapter_dim:
        raise ValueError("HF T5 has no adapters; convert a model with adapter_dim == 0")
