"""Regional compilation (``trainer.compile_scope=blocks``): ``torch.compile`` a model's repeated block once and run
every layer through it, instead of compiling the whole model.

A model's layers are instances of one class with the same code, so Dynamo traces and Inductor compiles the block once
and every layer reuses the compiled code with its own weights (PyTorch's "regional compilation"); the embeddings,
the output layer and the loss stay eager. On the CPU it cut the first step of A5 pretraining, where the compiling
happens, from 36-44 s to 28-30 s (benchmarks/RESULTS.md).

The compiled forward is put on the blocks only while the trainer's training forward passes run
(:meth:`CompiledBlocks.training`), so validation, generation and checkpoints see the eager model, as with
``trainer.compile_scope=model``.
"""
from __future__ import annotations

import types
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

from .config_errors import TrainConfigError


def repeated_blocks(model: nn.Module) -> list[nn.Module]:
    """The layers of ``model``: the members of every ``nn.ModuleList`` of two or more modules of one class made of
    modules themselves (not a list of single ``nn.Linear``), outer lists first, none inside a layer already found."""
    found: list[nn.Module] = []
    inside: set[int] = set()
    for module in model.modules():
        if id(module) in inside or not isinstance(module, nn.ModuleList) or len(module) < 2:
            continue
        if len({type(member) for member in module}) == 1 and any(True for _ in module[0].children()):
            found += list(module)
            inside |= {id(sub) for member in module for sub in member.modules()}
    return found


def mark_rows_dynamic(values: Iterable[object]) -> None:
    """Have torch.compile take the first dimension (rows) of these tensors as dynamic from the first call, so
    re-packed micro-batches of varying row counts compile once (other values are left alone)."""
    for value in values:
        if isinstance(value, torch.Tensor) and value.dim():
            torch._dynamo.maybe_mark_dynamic(value, 0)


def _rows_dynamic(module: nn.Module, args: tuple) -> None:
    """A forward pre-hook: :func:`mark_rows_dynamic` on a compiled block's inputs."""
    mark_rows_dynamic(args)


class CompiledBlocks:
    """``model``'s repeated blocks with one compiled forward per block class (``mode``: torch.compile's)."""

    def __init__(self, model: nn.Module, mode: str | None) -> None:
        self.blocks = repeated_blocks(model)
        if not self.blocks:
            raise TrainConfigError(f"trainer.compile_scope=blocks found no repeated blocks in {type(model).__name__} "
                                   "(an nn.ModuleList of layers of one class); use trainer.compile_scope=model")
        compiled = {kind: torch.compile(kind.forward, mode=mode) for kind in {type(block) for block in self.blocks}}
        self.forwards = [types.MethodType(compiled[type(block)], block) for block in self.blocks]

    @contextmanager
    def training(self, rows_vary: bool) -> Iterator[None]:
        """Within: every block runs the compiled forward (``rows_vary``: row counts dynamic from the first call)."""
        hooks = [block.register_forward_pre_hook(_rows_dynamic) for block in self.blocks] if rows_vary else []
        for block, forward in zip(self.blocks, self.forwards):
            block.forward = forward
        try:
            yield
        finally:
            for block in self.blocks:
                del block.forward
            for hook in hooks:
                hook.remove()
