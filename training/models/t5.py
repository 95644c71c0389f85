"""T5 encoder-decoder (v1.0 and v1.1), faithful to Mesh TensorFlow T5 and HF ``T5ForConditionalGeneration``.

Read top to bottom: config and sizes, RMSNorm, feed-forward, adapter layer, block, stack, model; the attention, its
relative position buckets and the masks are in :mod:`.t5_attention`. Token conventions are seqio's: 0 is padding and
the decoder start token, 1 is EOS. Packed rows carry segment ids 1..n (0 = padding) and positions that restart at 0 in
every segment.

Decisions worth knowing:
- The embedding (and the untied ``lm_head``) has ``padded_vocab_size`` rows: ``vocab_size`` rounded up to a multiple
  of 128, as MTF's ``vocab_divisor`` gives 32,128 rows for the 32,100-id vocabulary (32,000 pieces + 100 sentinels).
  Logits are returned over all padded rows, unmasked, exactly as MTF and the released checkpoints compute them; the
  extra rows are never targets and no token: ``generate`` chooses among the ``vocab_size`` real ids alone, as HF
  does with the ``suppress_tokens`` that :func:`.t5_hf.hf_generation_config` gives the export.
- The untied v1.1 ``lm_head`` is initialised with std d_model^-0.5 (MTF's dense-layer default), not HF's 1.0 (nanoT5
  issue #25). Every other init follows HF ``_init_weights``.
- ``attention_impl``: ``dense`` adds the bias and masks as one float tensor (SDPA on GPU, written out on CPU);
  ``flex`` runs FlexAttention with the bias as a score_mod and the masks as a block mask (:mod:`.t5_flex`).
- Adapters (paper §3.5.1) sit after each feed-forward network: the block computes ``h = FF(norm(x))``, then
  ``h + up(relu(down(h)))``, then the usual dropout and residual, i.e. Houlsby et al.'s placement (on the sublayer
  output, before the skip connection). ``up`` starts at zero, so a fresh adapter is the identity.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import zip_longest
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .layer_cache import LayerCache
from .sampling import next_token
from .t5_attention import Attention, relative_position_bucket, same_segment, with_mask
from .t5_flex import decoder_scores, encoder_scores

VOCAB_DIVISOR = 128
BlockCaches = tuple[LayerCache, LayerCache]  # a decoder block's self-attention and cross-attention caches


@dataclass
class T5Config:
    """Model hyper-parameters; the defaults of the flavour-specific fields are T5 v1.1's."""

    vocab_size: int
    d_model: int
    d_kv: int
    d_ff: int
    num_layers: int
    num_decoder_layers: int
    num_heads: int
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    dropout_rate: float = 0.0
    layer_norm_epsilon: float = 1e-6
    feed_forward: Literal["relu", "gated-gelu"] = "gated-gelu"
    tie_word_embeddings: bool = False
    adapter_dim: int = 0
    pad_id: int = 0
    eos_id: int = 1
    decoder_start_id: int = 0
    attention_impl: Literal["dense", "flex"] = "dense"

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "d_kv", "d_ff", "num_layers", "num_decoder_layers", "num_heads"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        buckets, distance = self.relative_attention_num_buckets, self.relative_attention_max_distance
        if buckets < 4 or distance <= buckets // 2:  # the encoder's direction needs 1 exact bucket and 1 log-spaced
            raise ValueError(f"relative_attention_num_buckets must be >= 4 and relative_attention_max_distance "
                             f"> half of it, got {buckets} and {distance}")
        if self.adapter_dim < 0:
            raise ValueError(f"adapter_dim must be >= 0 (0: no adapters), got {self.adapter_dim}")
        if not 0.0 <= self.dropout_rate < 1.0:
            raise ValueError(f"dropout_rate must be in [0, 1), got {self.dropout_rate}")
        if self.layer_norm_epsilon <= 0:
            raise ValueError(f"layer_norm_epsilon must be > 0, got {self.layer_norm_epsilon}")
        if self.feed_forward not in ("relu", "gated-gelu"):
            raise ValueError(f"feed_forward must be 'relu' or 'gated-gelu', got {self.feed_forward!r}")
        if self.attention_impl not in ("dense", "flex"):
            raise ValueError(f"attention_impl must be 'dense' or 'flex', got {self.attention_impl!r}")
        if self.attention_impl == "flex" and self.dropout_rate > 0:
            raise ValueError("attention_impl 'flex' has no attention dropout: it needs dropout_rate 0, "
                             f"got {self.dropout_rate}")

    @property
    def padded_vocab_size(self) -> int:
        """Embedding rows: ``vocab_size`` rounded up to a multiple of 128 (MTF ``vocab_divisor``)."""
        return -(-self.vocab_size // VOCAB_DIVISOR) * VOCAB_DIVISOR


_V1_0 = {"feed_forward": "relu", "tie_word_embeddings": True, "dropout_rate": 0.1}
_V1_1 = {"feed_forward": "gated-gelu", "tie_word_embeddings": False, "dropout_rate": 0.0}
# name: (d_model, d_kv, d_ff, layers per stack, heads, flavour); tiny (for tests) uses d_kv = d_model / heads
SIZES = {
    "t5_tiny": (32, 16, 64, 2, 2, _V1_1),
    "t5_small": (512, 64, 1024, 8, 6, _V1_1),
    "t5_base": (768, 64, 2048, 12, 12, _V1_1),
    "t5_large": (1024, 64, 2816, 24, 16, _V1_1),
    "t5_v1_0_tiny": (32, 16, 64, 2, 2, _V1_0),
    "t5_v1_0_small": (512, 64, 2048, 6, 8, _V1_0),
    "t5_v1_0_base": (768, 64, 3072, 12, 12, _V1_0),
    "t5_v1_0_large": (1024, 64, 4096, 24, 16, _V1_0),
}


def t5_config(size: str, vocab_size: int, **overrides) -> T5Config:
    """A named size: ``t5_<size>`` is T5 v1.1 (gated-GELU, untied head, dropout 0), ``t5_v1_0_<size>`` is the
    paper's v1.0 (ReLU, tied embeddings, dropout 0.1). ``vocab_size`` counts real ids (e.g. 32,100)."""
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; choose from {sorted(SIZES)}")
    d_model, d_kv, d_ff, layers, heads, flavour = SIZES[size]
    config = T5Config(vocab_size=vocab_size, d_model=d_model, d_kv=d_kv, d_ff=d_ff, num_layers=layers,
                      num_decoder_layers=layers, num_heads=heads, **flavour)
    return replace(config, **overrides)


class RMSNorm(nn.Module):
    """T5 layer norm: rescale by the root mean square (in fp32), no mean subtraction, no bias.

    Through ``F.rms_norm`` in fp32: one fused kernel on CUDA (forward and backward) where T5's written-out form runs
    about eight; the same values (bit for bit on the CPU). The output has the dtype T5's form gives (x's and the
    weight's promoted).
    """

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        normed = F.rms_norm(x.float(), self.weight.shape, self.weight.float(), self.eps)
        return normed.to(torch.promote_types(x.dtype, self.weight.dtype))


class FeedForward(nn.Module):
    """v1.0: ``wo(dropout(relu(wi x)))``; v1.1: ``wo(dropout(gelu_tanh(wi_0 x) * wi_1 x))``."""

    def __init__(self, config: T5Config):
        super().__init__()
        self.gated = config.feed_forward == "gated-gelu"
        inputs = ["wi_0", "wi_1"] if self.gated else ["wi"]
        for name in inputs:
            setattr(self, name, nn.Linear(config.d_model, config.d_ff, bias=False))
            nn.init.normal_(getattr(self, name).weight, std=config.d_model ** -0.5)
        self.wo = nn.Linear(config.d_ff, config.d_model, bias=False)
        nn.init.normal_(self.wo.weight, std=config.d_ff ** -0.5)
        self.dropout = nn.Dropout(config.dropout_rate)

    def forward(self, x: Tensor) -> Tensor:
        if self.gated:  # both input projections in one product (fewer kernels), the weights kept apart by name
            gate, linear = F.linear(x, torch.cat([self.wi_0.weight, self.wi_1.weight])).chunk(2, dim=-1)
            h = F.gelu(gate, approximate="tanh") * linear
        else:
            h = F.relu(self.wi(x))
        return self.wo(self.dropout(h))


class T5AdapterLayer(nn.Module):
    """Dense-ReLU-dense bottleneck with its own skip connection: ``h + up(relu(down(h)))``; identity at init."""

    def __init__(self, d_model: int, adapter_dim: int):
        super().__init__()
        self.down = nn.Linear(d_model, adapter_dim, bias=False)
        self.up = nn.Linear(adapter_dim, d_model, bias=False)
        nn.init.normal_(self.down.weight, std=d_model ** -0.5)
        nn.init.zeros_(self.up.weight)

    def forward(self, h: Tensor) -> Tensor:
        return h + self.up(F.relu(self.down(h)))


class Block(nn.Module):
    """Pre-norm residual sublayers: self-attention, (decoder) cross-attention, feed-forward (+ adapter)."""

    def __init__(self, config: T5Config, is_decoder: bool):
        super().__init__()
        self.self_attn_norm = RMSNorm(config.d_model, config.layer_norm_epsilon)
        self.self_attn = Attention(config)
        if is_decoder:
            self.cross_attn_norm = RMSNorm(config.d_model, config.layer_norm_epsilon)
            self.cross_attn = Attention(config)
        self.ff_norm = RMSNorm(config.d_model, config.layer_norm_epsilon)
        self.ff = FeedForward(config)
        self.adapter = T5AdapterLayer(config.d_model, config.adapter_dim) if config.adapter_dim else nn.Identity()
        self.dropout = nn.Dropout(config.dropout_rate)

    def forward(self, x: Tensor, self_bias: Tensor, memory: Tensor | None = None, cross_bias: Tensor | None = None,
                caches: BlockCaches | None = None, positions: Tensor | None = None) -> Tensor:
        """``caches`` (self-attention's, cross-attention's) and the new tokens' ``positions`` while generating."""
        # Under autocast every projection would cast its (fp32) input itself: three casts of the same tensor for
        # q, k and v. Casting each norm's output once gives the same values with one cast (a no-op otherwise).
        self_cache, cross_cache = caches or (None, None)
        dtype = _compute_dtype(x)
        h = self.self_attn_norm(x).to(dtype)
        x = x + self.dropout(self.self_attn(h, h, self_bias, self_cache, positions))
        if memory is not None:
            x = x + self.dropout(self.cross_attn(self.cross_attn_norm(x).to(dtype), memory, cross_bias, cross_cache))
        return x + self.dropout(self.adapter(self.ff(self.ff_norm(x).to(dtype))))


class Stack(nn.Module):
    """Encoder or decoder: dropout, blocks, final RMSNorm, dropout; one relative-bias table shared by all blocks."""

    def __init__(self, config: T5Config, is_decoder: bool, num_layers: int):
        super().__init__()
        self.config, self.is_decoder = config, is_decoder
        self.relative_bias = nn.Embedding(config.relative_attention_num_buckets, config.num_heads)
        nn.init.normal_(self.relative_bias.weight, std=config.d_model ** -0.5)
        self.blocks = nn.ModuleList(Block(config, is_decoder) for _ in range(num_layers))
        self.final_norm = RMSNorm(config.d_model, config.layer_norm_epsilon)
        self.dropout = nn.Dropout(config.dropout_rate)

    def position_bias(self, query_positions: Tensor, key_positions: Tensor) -> Tensor:
        """[B, H, Tq, Tk] float bias from [B, Tq] and [B, Tk] positions (B may be 1), contiguous.

        Contiguous because SDPA's fused CUDA kernels take a float mask only when its last dimension has stride 1: the
        table lookup gives [B, Tq, Tk, H], and that permuted to heads-first, as it was, has stride H there, which
        sent every self-attention layer to SDPA's unfused math path (the memory-efficient kernel adds a learned bias
        and returns its gradient). The masks and casts that follow keep the layout."""
        buckets = relative_position_bucket(
            key_positions[:, None, :] - query_positions[:, :, None], bidirectional=not self.is_decoder,
            num_buckets=self.config.relative_attention_num_buckets,
            max_distance=self.config.relative_attention_max_distance)
        return self.relative_bias(buckets).permute(0, 3, 1, 2).to(torch.float32, memory_format=torch.contiguous_format)

    def forward(self, x: Tensor, self_bias: Tensor, memory: Tensor | None = None, cross_bias: Tensor | None = None,
                caches: list[BlockCaches] | None = None, positions: Tensor | None = None) -> Tensor:
        """``caches`` (one pair a block) and the new tokens' ``positions`` while generating."""
        x = self.dropout(x)
        dtype = _compute_dtype(x)  # cast what every block shares once, not in every block
        self_bias = self_bias.to(dtype)
        if memory is not None:
            memory, cross_bias = memory.to(dtype), cross_bias.to(dtype)
        for index, block in enumerate(self.blocks):
            x = block(x, self_bias, memory, cross_bias, caches[index] if caches else None, positions)
        return self.dropout(self.final_norm(x))


def _compute_dtype(x: Tensor) -> torch.dtype:
    """The dtype attention runs in: autocast's where it is on, else ``x``'s."""
    device = x.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype


def _positions(tokens: Tensor, positions: Tensor | None) -> Tensor:
    """Given positions, or 0..T-1 as [1, T]. Index offsets equal position offsets inside a segment, and attention
    never crosses segments, so the default is exact for packed rows too."""
    return positions if positions is not None else torch.arange(tokens.shape[1], device=tokens.device)[None]


class T5(nn.Module):
    """Encoder-decoder T5. ``forward`` returns logits [B, T_dec, padded_vocab_size]."""

    def __init__(self, config: T5Config):
        super().__init__()
        self.config = config
        self.shared = nn.Embedding(config.padded_vocab_size, config.d_model)
        nn.init.normal_(self.shared.weight, std=1.0)
        self.encoder = Stack(config, is_decoder=False, num_layers=config.num_layers)
        self.decoder = Stack(config, is_decoder=True, num_layers=config.num_decoder_layers)
        self.lm_head: nn.Linear | None = None
        if not config.tie_word_embeddings:
            self.lm_head = nn.Linear(config.d_model, config.padded_vocab_size, bias=False)
            nn.init.normal_(self.lm_head.weight, std=config.d_model ** -0.5)

    def encode(self, encoder_input_tokens: Tensor, encoder_segment_ids: Tensor | None = None,
               encoder_positions: Tensor | None = None) -> Tensor:
        """Encoder states [B, T_enc, d]. Without segment ids, keys equal to ``pad_id`` are masked."""
        tokens = encoder_input_tokens
        positions = _positions(tokens, encoder_positions)
        if self.config.attention_impl == "flex":
            return self.encoder(self.shared(tokens), encoder_scores(self.encoder, tokens, encoder_segment_ids,
                                                                    positions, self.config.pad_id))
        if encoder_segment_ids is None:
            visible = (tokens != self.config.pad_id)[:, None, None, :]
        else:
            visible = same_segment(encoder_segment_ids, encoder_segment_ids)
        bias = with_mask(self.encoder.position_bias(positions, positions), visible)
        return self.encoder(self.shared(tokens), bias)

    def decode(self, encoded: Tensor, encoder_input_tokens: Tensor, decoder_input_tokens: Tensor,
               encoder_segment_ids: Tensor | None = None, decoder_segment_ids: Tensor | None = None,
               decoder_positions: Tensor | None = None) -> Tensor:
        """Logits [B, T_dec, padded_vocab_size]. Without segment ids the decoder mask is causal only (as HF) and
        cross-attention skips encoder padding; with them, attention stays inside each segment."""
        if (encoder_segment_ids is None) != (decoder_segment_ids is None):
            raise ValueError("give segment ids for both encoder and decoder, or for neither")
        tokens = decoder_input_tokens
        positions = _positions(tokens, decoder_positions)
        if self.config.attention_impl == "flex":
            self_bias, cross_bias = decoder_scores(self.decoder, tokens, encoder_input_tokens, decoder_segment_ids,
                                                   encoder_segment_ids, positions, self.config.pad_id)
        else:
            causal = torch.ones(tokens.shape[1], tokens.shape[1], dtype=torch.bool, device=tokens.device).tril()
            if decoder_segment_ids is None:
                self_visible = causal[None, None]
                cross_visible = (encoder_input_tokens != self.config.pad_id)[:, None, None, :]
            else:
                self_visible = causal & same_segment(decoder_segment_ids, decoder_segment_ids)
                cross_visible = same_segment(decoder_segment_ids, encoder_segment_ids)
            self_bias = with_mask(self.decoder.position_bias(positions, positions), self_visible)
            cross_bias = with_mask(torch.zeros((), device=tokens.device), cross_visible)
        return self._logits(self.decoder(self.shared(tokens), self_bias, encoded, cross_bias))

    def _logits(self, x: Tensor) -> Tensor:
        """The decoder's states [B, T, d] through the output layer (the tied embedding, rescaled, or ``lm_head``)."""
        if self.lm_head is None:
            return F.linear(x * self.config.d_model ** -0.5, self.shared.weight)
        return self.lm_head(x)

    def forward(self, encoder_input_tokens: Tensor, decoder_input_tokens: Tensor,
                encoder_segment_ids: Tensor | None = None, decoder_segment_ids: Tensor | None = None,
                encoder_positions: Tensor | None = None, decoder_positions: Tensor | None = None) -> Tensor:
        """Logits [B, T_dec, padded_vocab_size] for int64 token arrays [B, T] (seqio feature names)."""
        encoded = self.encode(encoder_input_tokens, encoder_segment_ids, encoder_positions)
        return self.decode(encoded, encoder_input_tokens, decoder_input_tokens, encoder_segment_ids,
                           decoder_segment_ids, decoder_positions)

    @torch.no_grad()
    def generate(self, encoder_input_tokens: Tensor, max_length: int, temperature: float = 1.0,
                 top_k: int | None = None, greedy: bool = True, generator: torch.Generator | None = None) -> Tensor:
        """Decoding of at most ``max_length`` tokens per row (start token not included) among the ``vocab_size``
        real ids (never a padding row): greedy, or sampled at ``temperature`` from the ``top_k`` most likely. A row
        ends at its EOS and is padded with ``pad_id`` after it; decoding stops once every row has ended. Each step
        runs the newest token alone through the decoder, against the keys and values its attention layers cached
        (dense attention also for ``attention_impl=flex``). Call ``eval()`` first to switch dropout off."""
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        config, device = self.config, encoder_input_tokens.device
        encoded = self.encode(encoder_input_tokens)
        tokens = torch.full((encoder_input_tokens.shape[0], 1), config.decoder_start_id, dtype=torch.long,
                            device=device)
        done = torch.zeros(tokens.shape[0], dtype=torch.bool, device=device)
        caches = [(LayerCache(max_length), LayerCache(encoder_input_tokens.shape[1])) for _ in self.decoder.blocks]
        positions = torch.arange(max_length, device=device)[None]
        causal = positions[0, :, None] >= positions[0, None, :]
        self_biases = with_mask(self.decoder.position_bias(positions, positions), causal)  # [1, H, step, column]
        cross_bias = with_mask(torch.zeros((), device=device), (encoder_input_tokens != config.pad_id)[:, None, None])
        for step in range(max_length):
            states = self.decoder(self.shared(tokens[:, -1:]), self_biases[:, :, step:step + 1], encoded, cross_bias,
                                  caches, torch.full_like(tokens[:, :1], step))
            logits = self._logits(states)[:, -1, :config.vocab_size]
            if not greedy:
                logits = logits.float() / temperature
            step_ids = next_token(logits, top_k, greedy, generator).masked_fill(done, config.pad_id)
            tokens = torch.cat([tokens, step_ids[:, None]], dim=1)
            done |= step_ids == config.eos_id
            if done.all():
                break
        return tokens[:, 1:]

    def generation_bytes(self, max_length: int) -> int:
        """The least memory :meth:`generate` allocates up front: the decoder's self-attention biases for every pair
        of its ``max_length`` positions (float32, one a head), which grow as ``max_length`` squared."""
        return self.config.num_heads * max_length ** 2 * torch.float32.itemsize

    def freeze_all_but_adapters(self) -> None:
        """Train only adapters and layer norms, as the paper's adapter fine-tuning does (§3.5.1: "only the adapter
        layer and layer normalization parameters are updated")."""
        if not self.config.adapter_dim:
            raise ValueError("model has no adapters (adapter_dim == 0)")
        trainable = {id(p) for m in self.modules() if isinstance(m, (T5AdapterLayer, RMSNorm)) for p in m.parameters()}
        for p in self.parameters():
            p.requires_grad_(id(p) in trainable)

    def unfreezing_groups(self) -> list[list[nn.Parameter]]:
        """Gradual unfreezing (paper §3.5.1): group k holds encoder and decoder block ``L-1-k`` (the stacks are
        unfrozen in parallel from the top). Group 0 also holds the embedding, the output layer and the final norms,
        which the paper updates throughout. Each stack's relative-bias table goes with its block 0 (where T5 and HF
        store it). Every parameter appears exactly once."""
        def from_top(stack: Stack) -> list[list[nn.Parameter]]:
            groups = [list(block.parameters()) for block in reversed(stack.blocks)]
            groups[0] += list(stack.final_norm.parameters())
            groups[-1] += list(stack.relative_bias.parameters())
            return groups

        groups = [dec + enc for dec, enc in
                  zip_longest(from_top(self.decoder), from_top(self.encoder), fillvalue=[])]
        head = list(self.lm_head.parameters()) if self.lm_head is not None else []
        groups[0] = list(self.shared.parameters()) + head + groups[0]
        return groups


def num_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    """Parameter count (tied weights once); only those with ``requires_grad`` when ``trainable_only``."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
