"""The latent side of AdaVAE: posterior pooling of the encoder states and injection of z into the decoder.

Posterior (``pooling``):
- ``latent_attention``: AdaVAE's Latent Attention. The query is constant (identity), the key a bias-free linear map
  of the encoder states giving one score per position, the value the states themselves; padding is masked. The
  softmax temperature is fixed (``sqrt_d`` or a number), never the batch size (the upstream code divides by
  sqrt(B), which makes the posterior depend on the batch). ``relu`` keeps upstream's ReLU on the scores.
- ``lg``: the Optimus-style baseline, ``tanh(Linear(masked mean of the states))`` (upstream averages pads too).
Then ``mean`` and ``logvar`` are two affine maps d -> n_z.

Injection (any combination of ``psa``, ``atm``, ``embedding``):
- ``psa`` (pseudo self-attention): z -> a shared ``Linear(n_z, d)`` -> per layer ``Linear(d, 2d)`` giving one extra
  key and value slot;
- ``atm`` (add to memory): the same shared projection, then per layer one ``Linear(d, d)`` used as both key and value;
- ``embedding``: ``Linear(n_z, d)`` added to every token + position embedding.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

POOLINGS = ("latent_attention", "lg")
INJECTIONS = ("psa", "atm", "embedding")


def _normal_init(module: nn.Module) -> None:
    for layer in module.modules():
        if isinstance(layer, nn.Linear):
            nn.init.normal_(layer.weight, std=0.02)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)


def attention_entropy(weights: Tensor) -> Tensor:
    """Each row's entropy in nats of attention weights ``[B, T]`` (rows sum to 1, masked positions hold 0): 0 when
    one position takes all the weight, ``log n`` when ``n`` positions share it equally."""
    return -(weights * weights.clamp_min(torch.finfo(weights.dtype).tiny).log()).sum(-1)


class LatentAttentionPooling(nn.Module):
    """``sum_t softmax_t(score_t / temperature) H_t`` with ``score_t = w . H_t`` (masked positions excluded)."""

    def __init__(self, n_embd: int, temperature: str | float = "sqrt_d", relu: bool = True) -> None:
        super().__init__()
        self.key = nn.Linear(n_embd, 1, bias=False)
        self.temperature = math.sqrt(n_embd) if temperature == "sqrt_d" else float(temperature)
        if self.temperature <= 0:
            raise ValueError(f"attention_temperature must be 'sqrt_d' or > 0, got {temperature!r}")
        self.relu = relu
        self.weights: Tensor | None = None  # the latest attention weights [B, T] (for entropy logging)

    def forward(self, states: Tensor, mask: Tensor) -> Tensor:
        scores = self.key(states).squeeze(-1)
        if self.relu:
            scores = scores.relu()
        weights = (scores / self.temperature).masked_fill(~mask, float("-inf")).softmax(-1)
        self.weights = weights.detach()
        return torch.einsum("bt,btd->bd", weights, states)


class MeanLinearPooling(nn.Module):
    """The LG baseline: ``tanh(Linear(masked mean over t of H_t))``."""

    def __init__(self, n_embd: int) -> None:
        super().__init__()
        self.linear = nn.Linear(n_embd, n_embd)

    def forward(self, states: Tensor, mask: Tensor) -> Tensor:
        weights = mask.to(states.dtype)
        mean = torch.einsum("bt,btd->bd", weights, states) / weights.sum(-1, keepdim=True).clamp(min=1)
        return torch.tanh(self.linear(mean))


class GaussianPosterior(nn.Module):
    """Pooled encoder states -> (mean, log-variance) of q(z|x), each ``[B, latent_size]``."""

    def __init__(self, n_embd: int, latent_size: int, pooling: str = "latent_attention",
                 temperature: str | float = "sqrt_d", relu: bool = True) -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
        if latent_size < 1:
            raise ValueError(f"latent_size must be >= 1, got {latent_size}")
        self.pool: nn.Module = (LatentAttentionPooling(n_embd, temperature, relu) if pooling == "latent_attention"
                                else MeanLinearPooling(n_embd))
        self.mean = nn.Linear(n_embd, latent_size)
        self.logvar = nn.Linear(n_embd, latent_size)
        _normal_init(self.mean)
        _normal_init(self.logvar)
        if pooling == "lg":
            _normal_init(self.pool)

    def forward(self, states: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        pooled = self.pool(states, mask)
        return self.mean(pooled), self.logvar(pooled)


class LatentInjection(nn.Module):
    """Maps z to the decoder's extra attention slots (PSA, AtM) and embedding offset."""

    def __init__(self, latent_size: int, n_embd: int, n_layer: int, n_head: int,
                 injection: tuple[str, ...] = ("psa",)) -> None:
        super().__init__()
        unknown = set(injection) - set(INJECTIONS)
        if unknown or not injection:
            raise ValueError(f"injection must be a non-empty subset of {', '.join(INJECTIONS)}, got {list(injection)}")
        self.n_head = n_head
        uses_slots = "psa" in injection or "atm" in injection
        self.attn_proj = nn.Linear(latent_size, n_embd, bias=False) if uses_slots else None
        self.psa = nn.ModuleList(nn.Linear(n_embd, 2 * n_embd) for _ in range(n_layer)) if "psa" in injection else None
        self.atm = (nn.ModuleList(nn.Linear(n_embd, n_embd, bias=False) for _ in range(n_layer))
                    if "atm" in injection else None)
        self.input_proj = nn.Linear(latent_size, n_embd, bias=False) if "embedding" in injection else None
        _normal_init(self)

    def _heads(self, x: Tensor) -> Tensor:
        B, S, C = x.shape
        return x.view(B, S, self.n_head, C // self.n_head).transpose(1, 2)

    def slots(self, z: Tensor, n_layer: int) -> list[list[tuple[Tensor, Tensor]]]:
        """Per layer, the extra (keys, values) ``[B, n_head, 1, head_dim]``: the PSA slot, then the AtM slot."""
        if self.attn_proj is None:
            return [[] for _ in range(n_layer)]
        projected = self.attn_proj(z)[:, None]  # [B, 1, d], shared by every layer
        layers = []
        for layer in range(n_layer):
            found = []
            if self.psa is not None:
                key, value = self.psa[layer](projected).chunk(2, dim=-1)
                found.append((self._heads(key), self._heads(value)))
            if self.atm is not None:
                memory = self._heads(self.atm[layer](projected))
                found.append((memory, memory))
            layers.append(found)
        return layers

    def embedding(self, z: Tensor) -> Tensor | None:
        """``[B, 1, d]`` added to every input embedding, or None."""
        return None if self.input_proj is None else self.input_proj(z)[:, None]
