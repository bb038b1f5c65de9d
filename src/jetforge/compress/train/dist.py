"""``torch.distributed`` from the environment ``torchrun`` sets (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_*).

Without those variables everything here is a no-op for a single process, so the same training
code runs under ``python -m ...`` and ``torchrun --nproc_per_node=N -m ...``.
"""

import contextlib
import logging
import os
from dataclasses import dataclass
from typing import Dict, Iterator, Optional

import torch
import torch.distributed as dist

from jetforge.errors import CompressError

log = logging.getLogger(__name__)


@dataclass
class DistContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: str = "cpu"
    backend: str = ""
    initialized_here: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def launched_by_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ and int(os.environ.get("WORLD_SIZE", "1")) > 1


def init_distributed(device: str = "auto") -> DistContext:
    """Initialise the process group when launched by torchrun; choose the device (``auto``: cuda if present).

    Under torchrun with CUDA each rank takes ``cuda:LOCAL_RANK`` and the NCCL backend; on CPU, gloo.
    """
    want_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    if device == "cuda" and not torch.cuda.is_available():
        raise CompressError("device cuda was asked for but torch sees no CUDA GPU",
                            hint="use device: cpu (or auto), or run on a machine with a GPU")
    if device not in ("auto", "cpu", "cuda") and not device.startswith("cuda:"):
        raise CompressError("device %r is not auto, cpu, cuda or cuda:N" % device)
    if not launched_by_torchrun():
        dev = device if device.startswith("cuda:") else ("cuda" if want_cuda else "cpu")
        return DistContext(device=dev)
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    if want_cuda:
        if local >= torch.cuda.device_count():
            raise CompressError("LOCAL_RANK %d but only %d CUDA devices are visible" % (local, torch.cuda.device_count()),
                                hint="give torchrun --nproc_per_node <= the number of GPUs")
        torch.cuda.set_device(local)
        dev, backend = "cuda:%d" % local, "nccl"
    else:
        dev, backend = "cpu", "gloo"
    here = False
    if not dist.is_initialized():
        dist.init_process_group(backend=backend)
        here = True
    log.info("rank %d/%d on %s (%s)", rank, world, dev, backend)
    return DistContext(rank=rank, world_size=world, local_rank=local, device=dev, backend=backend, initialized_here=here)


def cleanup(ctx: DistContext) -> None:
    if ctx.initialized_here and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


@contextlib.contextmanager
def distributed(device: str = "auto", ctx: Optional[DistContext] = None) -> Iterator[DistContext]:
    """``ctx`` if the caller already has one, else a new one that is torn down on exit (only if made here)."""
    if ctx is not None:
        yield ctx
        return
    own = init_distributed(device)
    try:
        yield own
    finally:
        cleanup(own)


def barrier(ctx: DistContext) -> None:
    if ctx.distributed:
        dist.barrier()


def all_reduce_sums(values: Dict[str, float], ctx: DistContext) -> Dict[str, float]:
    """Sum each value over ranks (float64); unchanged for one process."""
    if not ctx.distributed or not values:
        return dict(values)
    keys = sorted(values)
    device = ctx.device if ctx.backend == "nccl" else "cpu"
    t = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return {k: float(v) for k, v in zip(keys, t.tolist())}


def broadcast_flag(flag: bool, ctx: DistContext) -> bool:
    if not ctx.distributed:
        return flag
    device = ctx.device if ctx.backend == "nccl" else "cpu"
    t = torch.tensor([1 if flag else 0], device=device)
    dist.broadcast(t, 0)
    return bool(t.item())


__all__ = ["DistContext", "all_reduce_sums", "barrier", "broadcast_flag", "cleanup", "distributed", "init_distributed",
           "launched_by_torchrun"]
