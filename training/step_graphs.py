"""Whole optimizer steps as CUDA graphs (``trainer.capture_steps``), with PyTorch's own ``torch.cuda.graph``.

A step of a small model on a GPU is bound by the host: every kernel of the forward pass, the loss, the backward
pass, the clipping and the optimizer is launched from Python. Captured once as one graph (PyTorch's "whole network
capture"), the step is one launch: the host copies the batch into the graph's input buffers and replays it.

Per batch shape (re-packed rows come in a few row counts): the first step of a shape runs eagerly on a side stream
(the warm-up every capture needs: lazy initialisations, Triton's first-launch tuning under ``trainer.compile``),
the second is captured and replayed, every later one is replayed. Every step, warm-up or not, is a training step.

What a captured step needs, which :func:`prepare_optimizer` and the trainer see to: gradients are ``None`` when a
capture starts (the captured backward then writes them, and every replay writes them again), torch's Adam/AdamW
with ``capturable=True`` and its learning rate as a device tensor (the schedule fills it between replays), autocast
without its weight cache, and no host read of a device value inside the step (``trainer.loss_check=log``).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import torch

from .config_errors import TrainConfigError

Batch = dict[str, torch.Tensor]
StepOutputs = tuple[torch.Tensor, torch.Tensor]  # (loss, gradient norm) of the step, on the device


def prepare_optimizer(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """Make torch's Adam/AdamW capturable on ``device``: ``capturable=True``, each group's learning rate a device
    tensor (``LRScheduler`` fills it in place), step counters on the device (a checkpoint written unfused keeps
    them on the host)."""
    for group in optimizer.param_groups:
        group["capturable"] = True
        group["lr"] = torch.tensor(float(group["lr"]), dtype=torch.float32, device=device)
    for state in optimizer.state.values():
        if "step" in state:
            state["step"] = state["step"].to(device=device, dtype=torch.float32)


def uncaptured_state(state: dict) -> dict:
    """An optimizer's or a schedule's ``state_dict()`` as an uncaptured run writes it (float learning rates,
    ``capturable=False``), so its checkpoint resumes with or without captured steps, on any device."""
    if "param_groups" in state:
        groups = [{**group, "lr": float(group["lr"]), "capturable": False} for group in state["param_groups"]]
        return {**state, "param_groups": groups}
    return {**state, "_last_lr": [float(lr) for lr in state["_last_lr"]]}


@dataclass
class _Graph:
    """One captured step: the graph, the input buffers it reads and the outputs it writes."""

    graph: torch.cuda.CUDAGraph
    inputs: list[Batch]
    outputs: StepOutputs

    def replay(self, micro_batches: list[Batch]) -> StepOutputs:
        for buffers, batch in zip(self.inputs, micro_batches, strict=True):
            for key, buffer in buffers.items():
                buffer.copy_(batch[key], non_blocking=True)
        self.graph.replay()
        return self.outputs[0].clone(), self.outputs[1].clone()  # the next replay overwrites the graph's outputs


class CapturedSteps:
    """``step(micro_batches) -> (loss, grad_norm)`` run as one CUDA graph per batch shape (see the module)."""

    def __init__(self, step: Callable[[list[Batch]], StepOutputs]) -> None:
        self.step = step
        self.warmed_up: set[tuple] = set()
        self.graphs: dict[tuple, _Graph] = {}

    @cached_property
    def side_stream(self) -> torch.cuda.Stream:
        """The stream of the warm-up steps (PyTorch's CUDA graphs notes: warm up on a side stream)."""
        return torch.cuda.Stream()

    def __call__(self, micro_batches: list[Batch]) -> StepOutputs:
        shape = tuple((key, tuple(t.shape), t.dtype) for batch in micro_batches for key, t in batch.items())
        if shape in self.graphs:
            return self.graphs[shape].replay(micro_batches)
        if shape not in self.warmed_up:
            self.warmed_up.add(shape)
            return self._warm_up(micro_batches)
        self.graphs[shape] = self._capture(micro_batches)
        return self.graphs[shape].replay(micro_batches)

    def _warm_up(self, micro_batches: list[Batch]) -> StepOutputs:
        main = torch.cuda.current_stream()
        self.side_stream.wait_stream(main)
        with torch.cuda.stream(self.side_stream):
            outputs = self.step(micro_batches)
        main.wait_stream(self.side_stream)
        for output in outputs:  # read on the main stream: not to be reused by the side stream before that
            output.record_stream(main)
        return outputs

    def _capture(self, micro_batches: list[Batch]) -> _Graph:
        inputs = [{key: t.clone() for key, t in batch.items()} for batch in micro_batches]
        graph = torch.cuda.CUDAGraph()
        try:
            # thread_local, as torch.compile's CUDA graphs capture: the data loader's pinning thread goes on meanwhile
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                outputs = self.step(inputs)
        except RuntimeError as error:  # e.g. an op that reads a device value on the host: a one-line refusal
            cause = (str(error).strip().splitlines() or [repr(error)])[0]
            raise TrainConfigError(f"this stage's step cannot be captured as a CUDA graph ({cause}); run it without "
                                   "trainer.capture_steps") from error
        return _Graph(graph, inputs, outputs)
