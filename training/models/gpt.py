"""Decoder-only Transformer (GPT-1 / minGPT / nanoGPT / GPT-2): token + learned position embeddings, GELU MLPs
(exact, or GPT-2's tanh approximation), N(0, 0.02) init, pre-LN (minGPT, ``norm="pre"``) or post-LN (GPT-1,
``norm="post"``) blocks, and a pluggable attention (``attention="causal"`` dot-product or ``"synthesizer"``, CS224N A5).
:mod:`.gpt_hf` loads a local Hugging Face GPT-2 checkpoint into this model.

Inputs are ``input_tokens`` [B, T] plus, optionally, seqio-style packing (``segment_ids``, ``positions``) and a
``prefix_mask`` that makes the prefix attend bidirectionally (the T5 paper's prefix LM, Figure 3).

Models built on a GPT (AdaVAE) run its :meth:`GPT.embed` and blocks with hooks: an explicit attention mask, extra
key/value slots (``extra_kv``) and residual hooks (``attn_residual``, ``ffn_residual``, e.g. adapters); without hooks
the block computes exactly the plain forward pass.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .gpt_attention import CausalSelfAttention, SynthesizerAttention, attention_mask
from .layer_cache import LayerCache
from .sampling import next_token

Residual = Callable[[Tensor, Tensor], Tensor]  # (residual stream x, sublayer output) -> the new residual stream
Chooser = Callable[[Tensor], Tensor]  # a step's logits [B, vocab] -> the next token ids [B]


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int
    block_size: int = 128            # longest sequence (learned position embeddings)
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0             # embedding, attention and residual dropout
    norm: str = "pre"                # pre (minGPT/nanoGPT) | post (GPT-1)
    attention: str = "causal"        # causal | synthesizer
    tie_embeddings: bool = True      # LM head shares the token embedding (GPT-1, nanoGPT); A5 does not
    position_init: str = "normal"    # normal N(0, 0.02) | zeros (minGPT's pos_emb)
    residual_init: str = "normal"    # normal N(0, 0.02) | scaled: residual projections N(0, 0.02/sqrt(2 n_layer))
    bias: bool = True                # biases in linear layers and layer norms
    activation: str = "gelu"         # gelu (exact erf) | gelu_tanh (GPT-2's tanh approximation, HF "gelu_new")
    layer_norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        choices = {"norm": ("pre", "post"), "attention": ("causal", "synthesizer"),
                   "position_init": ("normal", "zeros"), "residual_init": ("normal", "scaled"),
                   "activation": ("gelu", "gelu_tanh")}
        for name, valid in choices.items():
            if getattr(self, name) not in valid:
                raise ValueError(f"{name} must be one of {', '.join(valid)}, got {getattr(self, name)!r}")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd {self.n_embd} is not divisible by n_head {self.n_head}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.layer_norm_eps <= 0:
            raise ValueError(f"layer_norm_eps must be > 0, got {self.layer_norm_eps}")


GPT_SIZES: dict[str, dict[str, Any]] = {
    "gpt_tiny": {"block_size": 64, "n_layer": 2, "n_head": 2, "n_embd": 32},
    # nanoGPT's CPU shakespeare recipe (and its GPT-2 init of the residual projections)
    "gpt_nano": {"block_size": 64, "n_layer": 4, "n_head": 4, "n_embd": 128, "residual_init": "scaled"},
    # CS224N A5 (old minGPT): dropout 0.1, untied head, zero-initialised positions
    "gpt_a5": {"block_size": 128, "n_layer": 4, "n_head": 8, "n_embd": 256, "dropout": 0.1,
               "tie_embeddings": False, "position_init": "zeros"},
    # GPT-1: post-LN, 12 x 768, 512 positions
    "gpt1": {"block_size": 512, "n_layer": 12, "n_head": 12, "n_embd": 768, "dropout": 0.1, "norm": "post"},
}


def gpt_config(size: str, vocab_size: int, **overrides: Any) -> GPTConfig:
    """A named size (``GPT_SIZES``) for ``vocab_size`` ids, with field overrides."""
    if size not in GPT_SIZES:
        raise ValueError(f"unknown GPT size {size!r}; valid sizes: {', '.join(GPT_SIZES)}")
    return GPTConfig(vocab_size=vocab_size, **{**GPT_SIZES[size], **overrides})


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.drop = nn.Dropout(config.dropout)
        self.gelu_approximate = "tanh" if config.activation == "gelu_tanh" else "none"

    def forward(self, x: Tensor) -> Tensor:
        return self.drop(self.proj(F.gelu(self.fc(x), approximate=self.gelu_approximate)))


class Block(nn.Module):
    """Attention then MLP, each residual; layer norm before each (pre-LN) or after each sum (post-LN)."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.pre_norm = config.norm == "pre"
        self.ln1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps, bias=config.bias)
        self.ln2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps, bias=config.bias)
        if config.attention == "synthesizer":
            self.attn: nn.Module = SynthesizerAttention(config.n_embd, config.n_head, config.block_size - 1,
                                                        config.dropout)
        else:
            self.attn = CausalSelfAttention(config.n_embd, config.n_head, config.dropout, config.bias)
        self.mlp = MLP(config)

    def forward(self, x: Tensor, mask: Tensor | None, positions: Tensor | None,
                extra_kv: tuple[Tensor, Tensor] | None = None, attn_residual: Residual | None = None,
                ffn_residual: Residual | None = None, cache: LayerCache | None = None) -> Tensor:
        """Hooks (None: the plain block): ``extra_kv`` goes to the attention (``mask`` then covers it);
        ``attn_residual(x, out)`` and ``ffn_residual(x, out)`` replace the sums ``x + out`` of the attention and
        MLP outputs ``out`` with the residual stream ``x`` (adapters). ``cache``: the attention's while generating."""
        if self.pre_norm:
            out = self.attn(self.ln1(x), mask, positions, extra_kv, cache)
            x = x + out if attn_residual is None else attn_residual(x, out)
            out = self.mlp(self.ln2(x))
            return x + out if ffn_residual is None else ffn_residual(x, out)
        out = self.attn(x, mask, positions, extra_kv, cache)
        x = self.ln1(x + out if attn_residual is None else attn_residual(x, out))
        out = self.mlp(x)
        return self.ln2(x + out if ffn_residual is None else ffn_residual(x, out))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.n_embd)
        self.pos_emb = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        # pre-LN needs a final norm; post-LN blocks already end with one (GPT-1 has none)
        self.ln_f = (nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps, bias=config.bias)
                     if config.norm == "pre" else nn.Identity())
        self.head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.head.weight = self.tok_emb.weight
        self.apply(_init_weights)
        if config.position_init == "zeros":
            nn.init.zeros_(self.pos_emb.weight)
        if config.residual_init == "scaled":  # GPT-2: each block adds two outputs to the residual stream
            for block in self.blocks:
                for projection in (block.attn.proj, block.mlp.proj):
                    nn.init.normal_(projection.weight, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @property
    def max_length(self) -> int:
        """Longest input: ``block_size``, one less with synthesizer attention (its score columns)."""
        return self.config.block_size - (self.config.attention == "synthesizer")

    def num_parameters(self) -> int:
        """Distinct parameters (a tied head counted once)."""
        return sum(p.numel() for p in self.parameters())

    def embed(self, input_tokens: Tensor, positions: Tensor | None = None, offset: Tensor | None = None) -> Tensor:
        """Token + position embeddings (+ ``offset``, broadcast to [B, T, n_embd]), after dropout."""
        T = input_tokens.shape[1]
        if T > self.config.block_size:
            raise ValueError(f"sequence of {T} tokens exceeds block_size {self.config.block_size}")
        position_ids = torch.arange(T, device=input_tokens.device)[None] if positions is None else positions
        x = self.tok_emb(input_tokens) + self.pos_emb(position_ids)
        return self.drop(x if offset is None else x + offset)

    def hidden_states(self, input_tokens: Tensor, segment_ids: Tensor | None = None,
                      positions: Tensor | None = None, prefix_mask: Tensor | None = None) -> Tensor:
        """Final hidden states [B, T, n_embd] (after the last layer norm)."""
        x = self.embed(input_tokens, positions)
        mask = attention_mask(input_tokens.shape[1], segment_ids, prefix_mask, input_tokens.device)
        for block in self.blocks:
            x = block(x, mask, positions)
        return self.ln_f(x)

    def forward(self, input_tokens: Tensor, segment_ids: Tensor | None = None, positions: Tensor | None = None,
                prefix_mask: Tensor | None = None) -> Tensor:
        """Next-token logits [B, T, vocab_size]."""
        return self.head(self.hidden_states(input_tokens, segment_ids, positions, prefix_mask))

    def resized(self, vocab_size: int) -> GPT:
        """A copy with ``vocab_size`` ids: existing rows kept, new ones (e.g. GPT-1's start/delimiter/extract
        tokens) drawn from N(0, 0.02)."""
        if vocab_size < self.config.vocab_size:
            raise ValueError(f"cannot shrink the vocabulary from {self.config.vocab_size} to {vocab_size}")
        grown = GPT(replace(self.config, vocab_size=vocab_size))
        state = self.state_dict()
        for name in ("tok_emb.weight", "head.weight"):
            rows = state[name]
            state[name] = torch.cat([rows, grown.state_dict()[name][rows.shape[0]:]])
        grown.load_state_dict(state)
        return grown

    @torch.no_grad()
    def generate(self, prompts: list[Tensor], max_new_tokens: int, temperature: float = 1.0,
                 top_k: int | None = None, greedy: bool = True,
                 generator: torch.Generator | None = None) -> list[Tensor]:
        """Continue each 1-D prompt by ``max_new_tokens`` tokens: greedy (argmax) or sampled at ``temperature``
        from the ``top_k`` most likely. Prompts of different lengths run as one right-padded batch (causal
        attention never sees the padding). When every prompt and its continuation fit in ``max_length`` tokens,
        each new token runs through the model alone (the attention layers cache what they computed); otherwise the
        context is cropped to the last ``max_length`` tokens and run again for each new token."""
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        device = self.tok_emb.weight.device
        lengths = torch.tensor([len(p) for p in prompts], device=device)
        if lengths.min() < 1:
            raise ValueError("every prompt needs at least one token")
        tokens = torch.zeros(len(prompts), int(lengths.max()) + max_new_tokens, dtype=torch.long, device=device)
        for row, prompt in enumerate(prompts):
            tokens[row, :len(prompt)] = prompt.to(device)

        def choose(logits: Tensor) -> Tensor:
            return next_token(logits.float() / temperature, top_k, greedy, generator)

        if max_new_tokens > 0:
            fits = int(lengths.max()) + max_new_tokens - 1 <= self.max_length
            (self._continue_cached if fits else self._continue_cropped)(tokens, lengths, max_new_tokens, choose)
        return [tokens[row, len(prompt):len(prompt) + max_new_tokens] for row, prompt in enumerate(prompts)]

    def generation_bytes(self, rows: int, prompt_length: int, max_new_tokens: int) -> int:
        """The memory :meth:`generate` allocates up front for ``rows`` prompts of at most ``prompt_length`` tokens,
        whatever the context: the ids of prompts and continuations (the caches hold at most ``max_length``)."""
        return rows * (prompt_length + max_new_tokens) * torch.long.itemsize

    def _continue_cached(self, tokens: Tensor, lengths: Tensor, count: int, choose: Chooser) -> None:
        """Write ``count`` tokens into each row of ``tokens`` after its first ``lengths`` ones: the prompts run once,
        then each new token alone against the layers' caches."""
        rows, width = torch.arange(len(lengths), device=tokens.device), int(lengths.max())
        caches = [LayerCache(width + count - 1) for _ in self.blocks]
        x = self.embed(tokens[:, :width])
        for block, cache in zip(self.blocks, caches):
            x = block(x, None, None, cache=cache)
        hidden = x[rows, lengths - 1]
        key_columns = torch.arange(caches[0].length, device=tokens.device)
        for step in range(count):
            tokens[rows, lengths] = choose(self.head(self.ln_f(hidden)))
            if step == count - 1:
                break
            positions = lengths[:, None]
            mask = (key_columns[None] <= positions)[:, None, None]  # [B, 1, 1, keys]: up to the row's new token
            x = self.embed(tokens[rows, lengths][:, None], positions)
            for block, cache in zip(self.blocks, caches):
                x = block(x, mask, positions, cache=cache)
            hidden, lengths = x[:, 0], lengths + 1

    def _continue_cropped(self, tokens: Tensor, lengths: Tensor, count: int, choose: Chooser) -> None:
        """As :meth:`_continue_cached`, running each row's last ``max_length`` tokens (at most) for every new token."""
        rows = torch.arange(len(lengths), device=tokens.device)
        for _ in range(count):
            starts = (lengths - self.max_length).clamp(min=0)
            width = int((lengths - starts).max())
            window = tokens.gather(1, starts[:, None] + torch.arange(width, device=tokens.device)[None])
            tokens[rows, lengths] = choose(self(window)[rows, lengths - 1 - starts])
            lengths = lengths + 1


def _init_weights(module: nn.Module) -> None:
    """N(0, 0.02) for linear and embedding weights, zero biases (layer norms keep (1, 0))."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)

