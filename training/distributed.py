"""`torch.distributed` set-up for data-parallel training launched by ``torchrun`` (gloo on CPU, nccl on GPU).

A plain ``python``/``train`` launch is a world of one: every helper here then does nothing.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistEnv:
    """This process's place in the data-parallel world."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def launched_rank() -> int:
    """This process's rank as ``torchrun`` launched it (0 without it), known before the process group exists."""
    return int(os.environ.get("RANK", "0"))


def launched_world_size() -> int:
    """The number of ranks ``torchrun`` launched (1 without it), known before the process group exists."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def init_distributed(device: torch.device) -> DistEnv:
    """Join the process group that ``torchrun`` describes in the environment (or return a world of one)."""
    world_size = launched_world_size()
    if world_size == 1:
        return DistEnv()
    env = DistEnv(int(os.environ["RANK"]), world_size, int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return env


def shutdown_distributed() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_sum(tensor: torch.Tensor, env: DistEnv) -> torch.Tensor:
    """Sum ``tensor`` over ranks (in place) and return it."""
    if env.enabled:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def all_gather_objects(value: object, env: DistEnv) -> list[object]:
    """Every rank's ``value``, in rank order."""
    if not env.enabled:
        return [value]
    gathered: list[object] = [None] * env.world_size
    dist.all_gather_object(gathered, value)
    return gathered


def rank_share(count: int, env: DistEnv) -> list[int]:
    """This rank's items of ``range(count)``: those with ``item % world_size == rank``."""
    return list(range(env.rank, count, env.world_size))


def gather_in_item_order(items: list[int], values: list[object], env: DistEnv) -> list[object]:
    """Every rank's ``values`` (one per item of its :func:`rank_share`), merged in item order."""
    gathered = all_gather_objects(list(zip(items, values)), env)
    return [value for _, value in sorted((pair for part in gathered for pair in part), key=lambda pair: pair[0])]


def barrier(env: DistEnv) -> None:
    if env.enabled:
        dist.barrier()


def select_device(name: str) -> torch.device:
    """``auto`` picks this rank's GPU when CUDA is present, else the CPU."""
    if name == "cuda" or (name == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise ValueError("trainer.device=cuda but no CUDA device is visible; use trainer.device=cpu or auto")
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")
