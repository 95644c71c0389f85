"""AdaVAE (Tu et al. 2022): a VAE whose encoder and decoder are the same frozen GPT, tuned through adapters or
prefixes, with Latent Attention pooling and PSA/AtM/embedding injection of z (see ``latent.py``).

- Encoder: the backbone's first ``encoder_layers`` blocks without the causal mask (keys limited to real tokens), its
  own adapters/prefix, then the backbone's final layer norm; pooled into q(z|x).
- Decoder: the whole causal backbone with its own adapters/prefix; z enters as extra attention slots and/or an
  embedding offset. The backbone weights are shared by both sides and frozen (``peft="full"`` trains them).
- Training phases (``set_phase``): 1 = the latent side + encoder-side tuning; 2 = the decoder side joins.

Both sides run the backbone's own embedding and blocks, with the blocks' hooks: an explicit attention mask, the
prefix and latent slots as extra keys/values, and the adapters as residual hooks placed as in He et al. 2022
(``adapter_placement``); ``double_adapter_bug`` reproduces the released AdaVAE code, which applies the same
parallel-FFN adapter twice per block (parity ablation only).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...models.gpt import GPT
from ...models.gpt_attention import prepend_visible_keys
from ...models.layer_cache import LayerCache
from ...models.sampling import next_token
from .adapters import ADAPTER_PLACEMENTS, BottleneckAdapter, Prefix, residual_hooks
from .gaussian import reparameterize
from .latent import GaussianPosterior, LatentInjection, attention_entropy

PEFT_METHODS = ("adapters", "prefix", "full")

Slots = list[tuple[Tensor, Tensor]]


@dataclass(frozen=True)
class AdaVAEConfig:
    latent_size: int = 32
    encoder_layers: int | None = None        # None: ceil(2L/3) (8 of GPT-2's 12)
    peft: str = "adapters"                   # adapters | prefix | full (everything trainable in phase 2)
    adapter_size: int = 32
    adapter_placement: str = "parallel_ffn"
    adapter_init: str = "bert"
    adapter_scale: float = 1.0
    learnable_adapter_scale: bool = False
    prefix_length: int = 25
    prefix_hidden: int = 30
    pooling: str = "latent_attention"        # latent_attention | lg
    attention_temperature: str | float = "sqrt_d"
    attention_relu: bool = True
    injection: tuple[str, ...] = ("psa",)    # any of psa, atm, embedding
    train_layer_norms: bool = True           # upstream unfreezes the (shared) layer norms with the adapters
    double_adapter_bug: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "injection", tuple(self.injection))
        if self.peft not in PEFT_METHODS:
            raise ValueError(f"peft must be one of {', '.join(PEFT_METHODS)}, got {self.peft!r}")
        if self.adapter_placement not in ADAPTER_PLACEMENTS:
            raise ValueError(f"adapter_placement must be one of {', '.join(ADAPTER_PLACEMENTS)}, "
                             f"got {self.adapter_placement!r}")
        if self.double_adapter_bug and (self.peft, self.adapter_placement) != ("adapters", "parallel_ffn"):
            raise ValueError("double_adapter_bug reproduces the released parallel_ffn adapter block: it needs "
                             "peft=adapters and adapter_placement=parallel_ffn")


def _joined(slots: Slots) -> tuple[Tensor, Tensor] | None:
    """One layer's key/value slots as one ``extra_kv`` (concatenated along the key axis); None without slots."""
    if not slots:
        return None
    return torch.cat([key for key, _ in slots], dim=2), torch.cat([value for _, value in slots], dim=2)


@dataclass(frozen=True)
class DecoderSlots:
    """Each decoder layer's extra keys and values (z's latent slots, then the prefix), and how many key columns they
    take. Built once per forward pass, and once for all the steps of :meth:`AdaVAE.generate`."""

    extra_kv: list[tuple[Tensor, Tensor] | None]
    columns: int


class AdaVAE(nn.Module):
    def __init__(self, backbone: GPT, config: AdaVAEConfig) -> None:
        super().__init__()
        gpt = backbone.config
        if gpt.norm != "pre" or gpt.attention != "causal":
            raise ValueError("AdaVAE needs a pre-LN GPT backbone with dot-product attention "
                             f"(got norm={gpt.norm}, attention={gpt.attention})")
        self.encoder_layers = config.encoder_layers or math.ceil(2 * gpt.n_layer / 3)
        if not 1 <= self.encoder_layers <= gpt.n_layer:
            raise ValueError(f"encoder_layers must be in 1..{gpt.n_layer}, got {config.encoder_layers}")
        self.config, self.backbone = config, backbone
        d, layers = gpt.n_embd, gpt.n_layer

        def adapters(count: int) -> nn.ModuleList | None:
            if config.peft != "adapters":
                return None
            return nn.ModuleList(BottleneckAdapter(d, config.adapter_size, config.adapter_init,
                                                   config.adapter_scale, config.learnable_adapter_scale)
                                 for _ in range(count))

        def prefix(count: int) -> Prefix | None:
            if config.peft != "prefix":
                return None
            return Prefix(count, d, gpt.n_head, config.prefix_length, config.prefix_hidden, gpt.dropout)

        self.encoder_adapters, self.decoder_adapters = adapters(self.encoder_layers), adapters(layers)
        self.encoder_prefix, self.decoder_prefix = prefix(self.encoder_layers), prefix(layers)
        self.posterior = GaussianPosterior(d, config.latent_size, config.pooling, config.attention_temperature,
                                           config.attention_relu)
        self.injection = LatentInjection(config.latent_size, d, layers, gpt.n_head, config.injection)
        self.set_phase(2)

    # ------------------------------------------------------------------------------------------ blocks
    def _blocks(self, x: Tensor, count: int, mask: Tensor, extra_kv: list[tuple[Tensor, Tensor] | None],
                adapters: nn.ModuleList | None, positions: Tensor | None = None,
                caches: list[LayerCache] | None = None) -> Tensor:
        """The backbone's first ``count`` blocks over the embedded ``x``, each with its layer's ``extra_kv`` (which
        ``mask`` covers first) and adapter, then the backbone's final layer norm. While generating, the tokens' keys
        and values go to ``caches`` at ``positions``."""
        config = self.config
        for index in range(count):
            hooks = ({} if adapters is None else
                     residual_hooks(adapters[index], config.adapter_placement, config.double_adapter_bug))
            x = self.backbone.blocks[index](x, mask, positions, extra_kv[index], **hooks,
                                            cache=caches[index] if caches else None)
        return self.backbone.ln_f(x)

    # ----------------------------------------------------------------------------------------- encoder
    def encode(self, inputs: Tensor, input_mask: Tensor) -> tuple[Tensor, Tensor]:
        """q(z|x): (mean, logvar) ``[B, latent_size]`` pooled from :meth:`encoder_states`."""
        return self.posterior(self.encoder_states(inputs, input_mask), input_mask)

    def pooling_entropy(self) -> float | None:
        """Mean entropy (nats) of the Latent Attention weights of the latest :meth:`encode`; None with LG pooling."""
        weights = getattr(self.posterior.pool, "weights", None)
        return None if weights is None else float(attention_entropy(weights).mean())

    def encoder_states(self, inputs: Tensor, input_mask: Tensor) -> Tensor:
        """``[B, T, d]``: bidirectional attention over the real tokens (``input_mask``), then the final norm."""
        x = self.backbone.embed(inputs)
        prefixes = self.encoder_prefix(inputs.shape[0]) if self.encoder_prefix is not None else None
        keys = input_mask[:, None, None, :]  # [B, 1, 1, T]: every query sees every real token
        mask = prepend_visible_keys(keys, self.config.prefix_length if prefixes else 0)
        return self._blocks(x, self.encoder_layers, mask, prefixes or [None] * self.encoder_layers,
                            self.encoder_adapters)

    # ----------------------------------------------------------------------------------------- decoder
    def decode(self, inputs: Tensor, z: Tensor) -> Tensor:
        """Next-token logits ``[B, T, vocab]`` of p(x|z) (causal; right padding never reaches real tokens)."""
        return self.backbone.head(self.decoder_states(inputs, z))

    def decoder_states(self, inputs: Tensor, z: Tensor) -> Tensor:
        """The decoder's final hidden states ``[B, T, d]`` (after the last layer norm) given ``z``."""
        T = inputs.shape[1]
        return self._decoder(inputs, z, torch.ones(T, T, dtype=torch.bool, device=inputs.device).tril()[None, None])

    def decoder_slots(self, z: Tensor, batch_size: int) -> DecoderSlots:
        """The decoder layers' extra keys and values for ``z`` [batch_size, latent_size] (:class:`DecoderSlots`)."""
        latent_slots = self.injection.slots(z, len(self.backbone.blocks))
        prefixes = self.decoder_prefix(batch_size) if self.decoder_prefix is not None else None
        slots = [latent + ([prefixes[index]] if prefixes else []) for index, latent in enumerate(latent_slots)]
        return DecoderSlots([_joined(layer) for layer in slots],
                            len(latent_slots[0]) + (self.config.prefix_length if prefixes else 0))

    def _decoder(self, inputs: Tensor, z: Tensor, visible: Tensor, positions: Tensor | None = None,
                 caches: list[LayerCache] | None = None, slots: DecoderSlots | None = None) -> Tensor:
        """:meth:`decoder_states` where the tokens see the keys ``visible`` (bool ``[B or 1, 1, T, keys]``) besides
        z's ``slots`` (built here when not given, after the embedding's dropout); while generating, ``inputs`` are
        the new tokens at ``positions`` and their keys and values go to ``caches``."""
        x = self.backbone.embed(inputs, positions, offset=self.injection.embedding(z))
        if slots is None:
            slots = self.decoder_slots(z, inputs.shape[0])
        mask = prepend_visible_keys(visible, slots.columns)
        return self._blocks(x, len(self.backbone.blocks), mask, slots.extra_kv, self.decoder_adapters, positions,
                            caches)

    def forward(self, inputs: Tensor, input_mask: Tensor, targets: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """One training pass: (per-target negative log-likelihoods ``[B, T]``, 0 at padding; mean, logvar),
        decoding one sample z ~ q(z|x) (reparameterised). Targets sit at the input positions (``input_mask``)."""
        mean, logvar = self.encode(inputs, input_mask)
        states = self.decoder_states(inputs, reparameterize(mean, logvar))
        return self._target_nll(states, targets, input_mask.bool()), mean, logvar

    def sentence_log_likelihood(self, inputs: Tensor, targets: Tensor, target_mask: Tensor, z: Tensor) -> Tensor:
        """log p(x|z) per sentence ``[B]``: target token log-probabilities summed over ``target_mask``."""
        return -self._target_nll(self.decoder_states(inputs, z), targets, target_mask.bool()).sum(-1)

    def _target_nll(self, states: Tensor, targets: Tensor, real: Tensor) -> Tensor:
        """Negative log-likelihoods ``[B, T]`` (fp32) of ``targets`` at the ``real`` positions, 0 elsewhere. The
        vocabulary projection runs at those positions only: on padded PTB batches it and the softmax over all
        positions were most of the importance-weighted evaluation's time."""
        logits = self.backbone.head(states[real]).float()
        nll = torch.zeros(real.shape, dtype=logits.dtype, device=logits.device)
        return nll.masked_scatter(real, F.cross_entropy(logits, targets[real], reduction="none"))

    @torch.no_grad()
    def generate(self, z: Tensor, bos_id: int, eos_id: int, max_new_tokens: int, greedy: bool = True,
                 top_k: int | None = None, temperature: float = 1.0,
                 generator: torch.Generator | None = None) -> list[list[int]]:
        """Decode each row of ``z`` from BOS until EOS (excluded) or ``max_new_tokens``; each step runs the newest
        token alone against the keys and values the attention layers cached, and z's slots, built once."""
        if max_new_tokens >= self.backbone.config.block_size:
            raise ValueError(f"max_new_tokens={max_new_tokens}: the backbone's {self.backbone.config.block_size} "
                             "positions hold BOS and fewer new tokens")
        tokens = torch.full((z.shape[0], 1), bos_id, dtype=torch.long, device=z.device)
        finished = torch.zeros(z.shape[0], dtype=torch.bool, device=z.device)
        caches = [LayerCache(max_new_tokens) for _ in self.backbone.blocks]
        columns = torch.arange(max_new_tokens, device=z.device)
        slots = self.decoder_slots(z, z.shape[0])
        for step in range(max_new_tokens):
            states = self._decoder(tokens[:, -1:], z, (columns <= step)[None, None, None], torch.full_like(
                tokens[:, :1], step), caches, slots)
            logits = self.backbone.head(states[:, -1]).float() / temperature
            next_tokens = next_token(logits, top_k, greedy, generator).masked_fill(finished, eos_id)
            tokens = torch.cat([tokens, next_tokens[:, None]], dim=1)
            finished |= next_tokens == eos_id
            if bool(finished.all()):
                break
        rows = [[int(t) for t in row[1:]] for row in tokens.cpu()]
        return [row[:row.index(eos_id)] if eos_id in row else row for row in rows]

    # --------------------------------------------------------------------------------- training phases
    def latent_parameters(self) -> list[nn.Parameter]:
        """Posterior and injection parameters (trainable from the start)."""
        return [*self.posterior.parameters(), *self.injection.parameters()]

    def _layer_norms(self, blocks: range) -> list[nn.Parameter]:
        found = [p for i in blocks for norm in (self.backbone.blocks[i].ln1, self.backbone.blocks[i].ln2)
                 for p in norm.parameters()]
        return found + list(self.backbone.ln_f.parameters())

    def encoder_side_parameters(self) -> list[nn.Parameter]:
        """Tuned from phase 1: the encoder's adapters or prefix (+ its layer norms, shared with the decoder)."""
        if self.config.peft == "full":
            return []
        found = [*(self.encoder_adapters or nn.ModuleList()).parameters(),
                 *(self.encoder_prefix.parameters() if self.encoder_prefix is not None else [])]
        return found + (self._layer_norms(range(self.encoder_layers)) if self.config.train_layer_norms else [])

    def decoder_side_parameters(self) -> list[nn.Parameter]:
        """Joining in phase 2: the decoder's adapters or prefix (+ all layer norms); ``full``: the whole backbone."""
        if self.config.peft == "full":
            return list(self.backbone.parameters())
        found = [*(self.decoder_adapters or nn.ModuleList()).parameters(),
                 *(self.decoder_prefix.parameters() if self.decoder_prefix is not None else [])]
        return found + (self._layer_norms(range(len(self.backbone.blocks))) if self.config.train_layer_norms else [])

    def set_phase(self, phase: int) -> None:
        """Phase 1: latent side + encoder side trainable; phase 2: the decoder side too; the rest stays frozen."""
        if phase not in (1, 2):
            raise ValueError(f"phase must be 1 or 2, got {phase}")
        trainable = {id(p) for p in self.latent_parameters() + self.encoder_side_parameters()}
        if phase == 2:
            trainable |= {id(p) for p in self.decoder_side_parameters()}
        for parameter in self.parameters():
            parameter.requires_grad_(id(parameter) in trainable)
        self.phase = phase

    def parameter_report(self) -> dict[str, Any]:
        """Parameter counts once every phase has joined, and the trainable share of the backbone, of the frozen
        parameters (the AdaVAE code's logged "#params %"; None when nothing is frozen) and of the whole model."""
        trainable = {id(p): p.numel() for p in
                     self.latent_parameters() + self.encoder_side_parameters() + self.decoder_side_parameters()}
        total = sum(p.numel() for p in self.parameters())
        backbone = sum(p.numel() for p in self.backbone.parameters())
        count = sum(trainable.values())
        frozen = total - count
        return {"trainable": count, "total": total, "backbone": backbone, "frozen": frozen,
                "trainable_per_backbone": count / backbone, "trainable_per_frozen": count / frozen if frozen else None,
                "trainable_per_total": count / total}
