"""Parameter-efficient modules for a frozen GPT backbone (AdaVAE): bottleneck adapters (and the residual hooks that
place them in a GPT block) and prefix tuning."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...models.gpt import Residual

ADAPTER_PLACEMENTS = ("parallel_ffn", "sequential_ffn", "parallel_attn", "sequential_attn")
ADAPTER_INITS = ("bert", "lora")


class BottleneckAdapter(nn.Module):
    """The bottleneck branch ``scale * up(relu(down(x)))``; the block adds it to its residual stream.

    ``init="bert"`` (AdaVAE's default): N(0, 0.02) weights, zero biases. ``init="lora"``: Kaiming-uniform down, zero
    up (the branch starts as zero). ``scale`` is a constant, or a learnable scalar starting at 1.
    """

    def __init__(self, n_embd: int, size: int, init: str = "bert", scale: float = 1.0,
                 learnable_scale: bool = False) -> None:
        super().__init__()
        if init not in ADAPTER_INITS:
            raise ValueError(f"adapter_init must be one of {', '.join(ADAPTER_INITS)}, got {init!r}")
        if size < 1:
            raise ValueError(f"adapter_size must be >= 1, got {size}")
        self.down = nn.Linear(n_embd, size)
        self.up = nn.Linear(size, n_embd)
        if learnable_scale:
            self.scale = nn.Parameter(torch.ones(()))
        else:
            self.register_buffer("scale", torch.tensor(float(scale)), persistent=False)
        if init == "bert":
            for layer in (self.down, self.up):
                nn.init.normal_(layer.weight, std=0.02)
                nn.init.zeros_(layer.bias)
        else:
            nn.init.kaiming_uniform_(self.down.weight, a=math.sqrt(5))
            nn.init.zeros_(self.down.bias)
            nn.init.zeros_(self.up.weight)
            nn.init.zeros_(self.up.bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.scale * self.up(F.relu(self.down(x)))


def residual_hooks(adapter: BottleneckAdapter, placement: str,
                   double_adapter_bug: bool = False) -> dict[str, Residual]:
    """The residual hooks of the GPT ``Block.forward`` that add ``adapter`` at ``placement`` (He et al.
    2022): beside the attention or FFN sublayer, on its input (``parallel_*``) or on its output (``sequential_*``;
    ``sequential_attn`` adapts the attention output before it joins the stream). ``double_adapter_bug``: the released
    AdaVAE block ``h = x + A(x) + attn(x); h + A(h) + ffn(h)``, where ``h + A(h)`` is formed before the FFN runs (as
    there, so the gradients sum in the same order)."""
    if double_adapter_bug:
        formed: list[Tensor] = []

        def attn_residual(x: Tensor, out: Tensor) -> Tensor:
            x = x + adapter(x) + out
            formed.append(x + adapter(x))
            return x
        return {"attn_residual": attn_residual, "ffn_residual": lambda x, out: formed.pop() + out}
    if placement == "parallel_attn":
        return {"attn_residual": lambda x, out: x + out + adapter(x)}
    if placement == "sequential_attn":
        return {"attn_residual": lambda x, out: x + (out + adapter(out))}
    if placement == "parallel_ffn":
        return {"ffn_residual": lambda x, out: x + out + adapter(x)}
    return {"ffn_residual": lambda x, out: x + out + adapter(out)}  # sequential_ffn


class Prefix(nn.Module):
    """Prefix tuning: ``length`` virtual tokens -> per-layer key and value slots ``[B, n_head, length, head_dim]``
    prepended to every layer's attention (Li & Liang 2021, reparameterised through a small MLP as AdaVAE does:
    Embedding -> Linear(d, hidden) -> tanh -> Linear(hidden, n_layer * 2 * d), dropout)."""

    def __init__(self, n_layer: int, n_embd: int, n_head: int, length: int = 25, hidden: int = 30,
                 dropout: float = 0.1) -> None:
        super().__init__()
        if length < 1 or hidden < 1:
            raise ValueError(f"prefix_length and prefix_hidden must be >= 1, got {length}, {hidden}")
        self.n_layer, self.n_head, self.length = n_layer, n_head, length
        self.tokens = nn.Embedding(length, n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, hidden), nn.Tanh(), nn.Linear(hidden, n_layer * 2 * n_embd))
        self.drop = nn.Dropout(dropout)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear):
                nn.init.zeros_(module.bias)

    def forward(self, batch_size: int) -> list[tuple[Tensor, Tensor]]:
        """(keys, values) per layer, each ``[batch_size, n_head, length, head_dim]``."""
        slots = self.drop(self.mlp(self.tokens.weight))  # [length, n_layer * 2 * d]
        d = slots.shape[-1] // (2 * self.n_layer)
        slots = slots.view(self.length, self.n_layer * 2, self.n_head, d // self.n_head).permute(1, 2, 0, 3)
        slots = slots[:, None].expand(-1, batch_size, -1, -1, -1)
        return [(slots[2 * layer], slots[2 * layer + 1]) for layer in range(self.n_layer)]
