"""Data-parallel training on ``torch.distributed``: the small object the runner and PPO call.

Launched by ``torchrun`` (``robot-rl train <task> --nproc N`` execs ``torchrun --standalone --nproc-per-node N``),
every rank runs the same training loop on its own ``num_envs / world_size`` worlds, on its own device
(``cuda:LOCAL_RANK`` where CUDA is used, the CPU otherwise), with its own environment and action-noise seed streams
(``seed + rank``). What must agree is made to agree here, with collectives:

- the networks start identical (broadcast from rank 0) and stay identical: gradients are averaged over ranks
  (one flat all-reduce per minibatch; every rank's minibatch has the same size, so the average is the gradient of the
  union), and every rank applies the same optimiser step;
- observation-normaliser statistics are merged exactly: each rank's batch moments are combined with the parallel
  (Chan) formula into the moments of all ranks' samples, and every rank folds in that same global batch;
- advantages are normalised with the global mean and standard deviation; the adaptive learning rate follows the
  global KL; the finiteness checks see the global losses, so every rank stops together;
- stop decisions (time budget, criterion met on rank 0, Ctrl-C on any rank) are OR-ed over ranks once per iteration.

Evaluation, logging, plots and checkpoints happen on rank 0 only. :class:`SingleProcess` is the same interface with
nothing to do, so the training code has no ``if distributed`` branches. NCCL is used on GPUs, gloo on the CPU.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NoReturn

import torch
import torch.distributed as dist


class DistributedConfigError(ValueError):
    """A distributed launch that cannot work (world size, devices); the message names what is wrong."""


@dataclass
class SingleProcess:
    """One process: every collective is the identity."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        """Whether this rank evaluates, logs and writes checkpoints."""
        return self.rank == 0

    def mean_(self, t: torch.Tensor) -> torch.Tensor:
        """Average ``t`` over ranks in place (identity here); returns ``t``."""
        return t

    def sum_(self, t: torch.Tensor) -> torch.Tensor:
        """Sum ``t`` over ranks in place (identity here); returns ``t``."""
        return t

    def any(self, flag: bool) -> bool:
        """Whether ``flag`` is true on any rank."""
        return flag

    def broadcast_(self, tensors: Iterable[torch.Tensor]) -> None:
        """Copy rank 0's values into ``tensors`` on every rank (nothing to do here)."""

    def average_gradients(self, params: Iterable[torch.nn.Parameter]) -> None:
        """Replace each gradient by its mean over ranks (nothing to do here)."""

    def merge_moments(
        self, count: torch.Tensor, mean: torch.Tensor, var: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Moments ``(n, mean [D], biased var [D])`` of the union of every rank's batch (this batch here)."""
        return count, mean, var

    def close(self) -> None:
        """Leave the process group."""


class TorchDistributed(SingleProcess):
    """One rank of a ``torch.distributed`` job (the process group is initialised by :func:`from_environment`)."""

    def mean_(self, t: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t.div_(self.world_size)

    def sum_(self, t: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t

    def any(self, flag: bool) -> bool:
        t = torch.tensor([1.0 if flag else 0.0], device=self._device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item() > 0)

    def broadcast_(self, tensors: Iterable[torch.Tensor]) -> None:
        for t in tensors:
            dist.broadcast(t.data, src=0)

    def average_gradients(self, params: Iterable[torch.nn.Parameter]) -> None:
        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        self.mean_(flat)
        offset = 0
        for g in grads:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()

    def merge_moments(
        self, count: torch.Tensor, mean: torch.Tensor, var: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # Sums of n, n*mean and n*(var + mean^2) are exact to combine; this is the parallel-variance formula.
        n, m, v = count.double(), mean.double(), var.double()
        packed = torch.cat((n.reshape(1), n * m, n * (v + m.square())))  # float64: exact enough to combine
        self.sum_(packed)
        d = mean.numel()
        total = packed[0]
        g_mean = packed[1 : 1 + d] / total
        g_var = (packed[1 + d :] / total - g_mean.square()).clamp_min(0.0)
        return total.to(count.dtype), g_mean.to(mean.dtype), g_var.to(var.dtype)

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()

    _device: torch.device = torch.device("cpu")


def exit_rank(code: int) -> NoReturn:
    """End this torchrun-launched rank with exit status ``code`` now, skipping the interpreter's teardown.

    Once a rank's work is done (process group destroyed, every file written), the interpreter's teardown of torch's
    C++ state aborts it now and then ("terminate called without an active exception", SIGABRT; 4 of 30 two-rank
    runs of tests/robot_rl/dist_worker.py on 2 CPU cores, 0 of 30 with this exit; 2026-11-23), and torchrun then
    reports the finished job as failed. Nothing is left to clean up, so the rank flushes its output and leaves.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def launched_by_torchrun() -> bool:
    """Whether this process was started by ``torchrun`` (its environment variables are set)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ and "LOCAL_RANK" in os.environ


def from_environment(device: str) -> tuple[SingleProcess, str]:
    """The process's distribution role and its device; initialises the process group under ``torchrun``.

    Args:
        device: The configured device (``cpu``, ``cuda``, ``cuda:1``). Under ``torchrun`` with CUDA each rank takes
            ``cuda:LOCAL_RANK``; a configured index is refused there (the ranks would collide).

    Returns:
        ``(role, device)``.

    Raises:
        DistributedConfigError: More local ranks than GPUs, or a fixed GPU index under ``torchrun``. (Every rank
            reads the same config, so devices can only be mixed by a node without CUDA; that rank refuses
            ``device: cuda`` with its own one-line error.)
    """
    if not launched_by_torchrun() or int(os.environ["WORLD_SIZE"]) == 1:
        return SingleProcess(), device
    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    dev = torch.device(device)
    if dev.type == "cuda":
        if dev.index is not None:
            raise DistributedConfigError(
                f"device '{device}' names one GPU, but under torchrun every rank takes cuda:LOCAL_RANK; use 'cuda'"
            )
        if local >= torch.cuda.device_count():
            raise DistributedConfigError(
                f"local rank {local} has no GPU: this node has {torch.cuda.device_count()}; lower --nproc-per-node"
            )
        device = f"cuda:{local}"
        torch.cuda.set_device(local)
    backend = "nccl" if dev.type == "cuda" else "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend=backend)
    role = TorchDistributed(rank, world, local)
    role._device = torch.device(device)
    return role, device
