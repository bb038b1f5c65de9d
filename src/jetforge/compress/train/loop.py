"""The training loop shared by distillation, QAT and plain fine-tuning.

:class:`Trainer` trains a *train module* -- an ``nn.Module`` whose ``forward(x, y)`` returns
``(loss, {name: tensor})`` (a student with its loss, or a student, a frozen teacher and feature
adapters) -- and validates the *student* after every epoch.  It provides:

* automatic mixed precision (``amp: auto`` = FP16 autocast with a GradScaler on CUDA, off on CPU;
  ``bf16`` anywhere), gradient-norm clipping, SGD (Nesterov) or AdamW without weight decay on
  biases and norm parameters;
* a per-step schedule: linear warm-up to ``lr`` over ``warmup_epochs``, then cosine down to
  ``lr * min_lr_ratio``;
* checkpoints written atomically (``last.pt`` every epoch, ``best.pt`` on the best validation
  accuracy) holding model, adapters, optimizer, schedule, scaler, RNG states (torch's, the shuffle's
  and the dataset's augmentation generators) and the metrics so far; ``resume`` continues an
  interrupted run from ``last.pt`` at the next epoch exactly as it would have gone on.  They hold only
  tensors, dicts, lists, strings and numbers, are checked for that before they replace the old
  file, and are read back weights-only (:mod:`jetforge.compress.checkpoint`): resuming never
  unpickles code;
* a tqdm bar per epoch (rate, ETA, running loss, learning rate) and ``metrics.jsonl`` (one JSON
  record per epoch) next to the checkpoints;
* DistributedDataParallel when launched by ``torchrun``: a DistributedSampler shards training,
  validation is sharded without padding and summed, only rank 0 logs and writes files.

Frozen submodules whose name starts with one of ``exclude_from_checkpoint`` (the teacher) are not
saved: they are inputs of the run, not its result.
"""

import json
import logging
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from jetforge.compress.checkpoint import TRAINING_FORMAT, check_weights_only_loadable, load_state_dict, read_weights
from jetforge.compress.data import make_loader, shard_indices
from jetforge.compress.train.dist import DistContext, all_reduce_sums, barrier, init_distributed
from jetforge.config import (COUNT, NON_NEGATIVE, NON_NEGATIVE_NUMBER, POSITIVE_NUMBER, Bound,
                             check_bounds)
from jetforge.errors import CompressError, ModelError
from jetforge.fileio import PathLike, atomic_output, write_text_atomic
from jetforge.runtime.session.base import thread_bound

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = TRAINING_FORMAT
OPTIMIZERS = ("sgd", "adamw")
AMP_MODES = ("auto", "off", "fp16", "bf16")


@dataclass
class TrainConfig:
    """The schedule and the loop's options (the ``train:`` block of a recipe)."""

    epochs: int = COUNT.field(5)
    batch_size: int = COUNT.field(128)
    eval_batch_size: int = COUNT.field(512)
    optimizer: str = "sgd"
    lr: float = POSITIVE_NUMBER.field(0.05)
    momentum: float = NON_NEGATIVE_NUMBER.field(0.9)
    weight_decay: float = NON_NEGATIVE_NUMBER.field(5e-4)
    warmup_epochs: float = NON_NEGATIVE_NUMBER.field(0.5)
    min_lr_ratio: float = Bound(float, 0.0, 1.0, why="a fraction of train.lr").field(0.01)
    grad_clip: float = NON_NEGATIVE_NUMBER.field(5.0)  # max gradient L2 norm; 0 disables clipping (NaN did too)
    amp: str = "auto"
    device: str = "auto"
    seed: int = NON_NEGATIVE.field(0)
    workers: int = NON_NEGATIVE.field(0)
    threads: int = 0  # torch CPU threads; 0 leaves torch's default; at most this process's CPUs
    max_steps_per_epoch: Optional[int] = COUNT.field(None)  # cut epochs short (smoke tests)
    progress: bool = True

    def __post_init__(self) -> None:
        check_bounds(self, "train")  # what the loader checked, for a TrainConfig made in Python
        thread_bound().check(self.threads, "train.threads")
        if self.epochs < 1:
            raise ValueError("train.epochs must be >= 1, got %r" % self.epochs)
        if self.batch_size < 1 or self.eval_batch_size < 1:
            raise ValueError("train.batch_size and train.eval_batch_size must be >= 1")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError("train.optimizer must be one of %s, got %r" % (", ".join(OPTIMIZERS), self.optimizer))
        if self.amp not in AMP_MODES:
            raise ValueError("train.amp must be one of %s, got %r" % (", ".join(AMP_MODES), self.amp))
        if not self.lr > 0:
            raise ValueError("train.lr must be positive, got %r" % self.lr)
        if self.warmup_epochs < 0 or not 0 <= self.min_lr_ratio <= 1 or self.grad_clip < 0:
            raise ValueError("train.warmup_epochs >= 0, 0 <= train.min_lr_ratio <= 1 and train.grad_clip >= 0 "
                             "are required")


@dataclass
class TrainResult:
    """What :meth:`Trainer.fit` did; ``history`` has one record per epoch (also in ``metrics.jsonl``)."""

    history: List[Dict[str, Any]] = field(default_factory=list)
    best_accuracy: float = 0.0
    best_epoch: int = 0
    final_accuracy: float = 0.0
    resumed_from_epoch: int = 0
    checkpoint: Optional[Path] = None
    best_checkpoint: Optional[Path] = None
    rank_stats: Dict[str, float] = field(default_factory=dict)  # this rank's training totals
    world_size: int = 1

    def to_dict(self) -> Dict[str, Any]:
        return {"best_accuracy": self.best_accuracy, "best_epoch": self.best_epoch,
                "final_accuracy": self.final_accuracy, "resumed_from_epoch": self.resumed_from_epoch,
                "epochs": len(self.history), "world_size": self.world_size,
                "checkpoint": str(self.checkpoint) if self.checkpoint else None,
                "best_checkpoint": str(self.best_checkpoint) if self.best_checkpoint else None}


def lr_factor(step: int, total: int, warmup: int, min_ratio: float) -> float:
    """Linear warm-up from ``1/warmup`` to 1 over ``warmup`` steps, then cosine from 1 to ``min_ratio``."""
    if warmup > 0 and step < warmup:
        return (step + 1) / float(warmup)
    span = max(1, total - warmup)
    progress = min(1.0, (step - warmup) / float(span))
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def amp_dtype(mode: str, device: str) -> Optional[torch.dtype]:
    if mode == "off":
        return None
    if mode == "bf16":
        return torch.bfloat16
    if mode == "fp16":
        return torch.float16
    return torch.float16 if device.startswith("cuda") else None  # auto


def param_groups(module: nn.Module, weight_decay: float) -> List[Dict[str, Any]]:
    """Weight decay on weights only (not on biases or norm/BN parameters, the usual practice)."""
    decay, no_decay = [], []
    for p in module.parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim <= 1 else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def evaluate_accuracy(model: nn.Module, dataset: Any, batch_size: int = 512, device: str = "cpu",
                      ctx: Optional[DistContext] = None) -> Dict[str, float]:
    """Top-1 accuracy and mean cross-entropy of ``model`` on ``dataset`` (sharded over DDP ranks, summed)."""
    ctx = ctx or DistContext(device=device)
    indices = shard_indices(len(dataset), ctx.rank, ctx.world_size)
    was_training = model.training
    model.eval()
    correct, loss_sum, count = 0.0, 0.0, 0.0
    with torch.no_grad():
        for start in range(0, len(indices), batch_size):
            x, y = dataset.__getitems__(indices[start:start + batch_size])
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            out = model(x).float()
            loss_sum += float(nn.functional.cross_entropy(out, y, reduction="sum"))
            correct += float((out.argmax(1) == y).sum())
            count += float(y.numel())
    model.train(was_training)
    sums = all_reduce_sums({"correct": correct, "loss": loss_sum, "count": count}, ctx)
    n = max(sums["count"], 1.0)
    return {"accuracy": sums["correct"] / n, "loss": sums["loss"] / n, "samples": int(sums["count"])}


def save_checkpoint(path: PathLike, state: Dict[str, Any]) -> Path:
    """``torch.save`` through a temporary file renamed over ``path``: a crash never leaves half a checkpoint.

    The temporary file is scanned before the rename: a state holding anything weights-only
    reading refuses (a numpy scalar, a Path, an object) fails now, not at resume time.
    """
    with atomic_output(path, suffix=".pt") as tmp:
        torch.save(state, str(tmp))
        check_weights_only_loadable(tmp, "checkpoint %s" % Path(path).name)
    return Path(path)


def load_checkpoint(path: PathLike) -> Dict[str, Any]:
    """A training checkpoint, read weights-only (jetforge writes nothing else into one)."""
    state = read_weights(path, "checkpoint", opt_in=None, safe_route="resume only from checkpoints jetforge wrote: "
                         "use a new out_dir, or resume: false")
    if not isinstance(state, dict):
        raise ModelError("%s is not a checkpoint (it holds a %s)" % (path, type(state).__name__),
                         hint="use a new out_dir, or resume: false")
    return state


def model_state_from(path: PathLike, trusted: bool = False, block: str = "model") -> Dict[str, Any]:
    """The student's state dict from a jetforge checkpoint or a plain state dict file, weights-only unless ``trusted``.

    ``block`` is the recipe block naming the file (``model``, ``teacher``), for the fix in errors.
    """
    route = ("save the weights with torch.save(model.state_dict(), PATH) and set %s.checkpoint to PATH (with %s.arch "
             "and, for a pruned model, %s.prune_plan)" % (block, block, block))
    return load_state_dict(path, "%s checkpoint" % block, trusted=trusted, opt_in="%s.trust_pickle: true" % block,
                           safe_route=route)


class Trainer:
    """Train ``train_module`` (``forward(x, y) -> (loss, logs)``), validating ``student`` each epoch."""

    def __init__(self, train_module: nn.Module, student: nn.Module, train_set: Any, val_set: Any,
                 cfg: TrainConfig, out_dir: PathLike, ctx: Optional[DistContext] = None,
                 run_config: Optional[Dict[str, Any]] = None,
                 exclude_from_checkpoint: Sequence[str] = ("teacher.",)) -> None:
        if len(train_set) == 0:
            raise CompressError("the training set is empty", hint="check the data folder and the subset size")
        if val_set is not None and len(val_set) == 0:
            raise CompressError("the validation set is empty", hint="check the data folder and the subset size")
        self.cfg = cfg
        self.ctx = ctx or init_distributed(cfg.device)
        self.out_dir = Path(out_dir)
        self.train_module = train_module
        self.student = student
        self.train_set = train_set
        self.val_set = val_set
        self.run_config = run_config or {}
        self.exclude = tuple(exclude_from_checkpoint)
        if cfg.threads > 0:
            torch.set_num_threads(cfg.threads)

    # ------------------------------------------------------------------ state
    def _module_state(self) -> Dict[str, Any]:
        return {k: v for k, v in self.train_module.state_dict().items() if not k.startswith(self.exclude)}

    def _load_module_state(self, state: Dict[str, Any]) -> None:
        missing, unexpected = self.train_module.load_state_dict(state, strict=False)
        missing = [k for k in missing if not k.startswith(self.exclude)]
        if missing or unexpected:
            raise ModelError("checkpoint does not fit this model: missing %s, unexpected %s"
                             % (missing[:3], unexpected[:3]),
                             hint="resume with the recipe that wrote it, or use a new out_dir")

    # ------------------------------------------------------------------ fit
    def fit(self, resume: bool = True) -> TrainResult:
        cfg, ctx = self.cfg, self.ctx
        device = ctx.device
        torch.manual_seed(cfg.seed + ctx.rank)
        np.random.seed(cfg.seed + ctx.rank)
        random.seed(cfg.seed + ctx.rank)
        self.train_module.to(device)
        run = self._setup()
        result = TrainResult(world_size=ctx.world_size)
        last, best = self.out_dir / "last.pt", self.out_dir / "best.pt"
        start_epoch = self._resume(last, run, result) if resume and last.is_file() else 0
        if ctx.is_main:
            self.out_dir.mkdir(parents=True, exist_ok=True)
        if ctx.distributed:
            from torch.nn.parallel import DistributedDataParallel as DDP

            ids = [torch.device(device).index] if run.device_type == "cuda" else None
            run.model = DDP(self.train_module, device_ids=ids)

        rank_totals = {"samples": 0.0, "loss_sum": 0.0, "steps": 0.0}
        for epoch in range(start_epoch, cfg.epochs):
            sums, seen, seconds = self._train_epoch(run, epoch)
            rank_totals["samples"] += seen
            rank_totals["loss_sum"] += sums.get("loss", 0.0)
            rank_totals["steps"] += min(run.steps, len(run.loader))
            self._end_epoch(run, epoch, sums, seen, seconds, result, last, best)
            barrier(ctx)
        result.final_accuracy = float(result.history[-1].get("val_accuracy", 0.0)) if result.history else 0.0
        result.checkpoint = last
        result.best_checkpoint = best if best.is_file() else None
        result.rank_stats = {"rank": ctx.rank, "samples": rank_totals["samples"], "steps": rank_totals["steps"],
                             "mean_loss": rank_totals["loss_sum"] / max(rank_totals["samples"], 1.0)}
        return result

    def _setup(self) -> "_Run":
        """The loader, the optimizer with its warm-up + cosine schedule, and mixed precision."""
        cfg, ctx = self.cfg, self.ctx
        loader = make_loader(self.train_set, cfg.batch_size, shuffle=True, distributed=ctx.distributed,
                             seed=cfg.seed, drop_last=len(self.train_set) > cfg.batch_size * ctx.world_size,
                             workers=cfg.workers)
        steps = len(loader)
        if cfg.max_steps_per_epoch:
            steps = min(steps, cfg.max_steps_per_epoch)
        total, warmup = steps * cfg.epochs, int(round(cfg.warmup_epochs * steps))
        groups = param_groups(self.train_module, cfg.weight_decay)
        if not any(g["params"] for g in groups):
            raise CompressError("the model has no trainable parameters", hint="check requires_grad of the student")
        if cfg.optimizer == "sgd":
            opt: Any = torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.momentum > 0)
        else:
            opt = torch.optim.AdamW(groups, lr=cfg.lr)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, total, warmup, cfg.min_lr_ratio))
        dtype = amp_dtype(cfg.amp, ctx.device)
        device_type = "cuda" if ctx.device.startswith("cuda") else "cpu"
        scaler = torch.amp.GradScaler(device_type, enabled=dtype == torch.float16 and device_type == "cuda")
        return _Run(loader, steps, opt, sched, scaler, dtype, device_type, self.train_module)

    def _resume(self, last: Path, run: "_Run", result: TrainResult) -> int:
        """Load ``last.pt`` (model, optimizer, schedule, scaler, history, random state); the epoch to start at."""
        cfg, ctx = self.cfg, self.ctx
        state = load_checkpoint(last)
        if state.get("format") != CHECKPOINT_FORMAT:
            raise ModelError("%s is not a jetforge training checkpoint" % last, hint="use a new out_dir")
        self._load_module_state(state["train_module"])
        run.opt.load_state_dict(state["optimizer"])
        run.sched.load_state_dict(state["scheduler"])
        if state.get("scaler"):
            run.scaler.load_state_dict(state["scaler"])
        start_epoch = int(state["epoch"])
        result.history = list(state.get("history", []))
        result.best_accuracy = float(state.get("best_accuracy", 0.0))
        result.best_epoch = int(state.get("best_epoch", 0))
        result.resumed_from_epoch = start_epoch
        rng = state.get("rng") or {}
        if "torch" in rng and ctx.world_size == state.get("world_size", 1):
            torch.set_rng_state(rng["torch"])
            set_generator_states(run.loader, self.train_set, rng.get("generators") or {})
        if ctx.is_main:
            log.info("resuming %s from epoch %d of %d", last, start_epoch, cfg.epochs)
        return start_epoch

    def _train_epoch(self, run: "_Run", epoch: int) -> Tuple[Dict[str, float], int, float]:
        """One epoch of training steps; (sample-weighted sums of the loss and logs, samples seen, seconds)."""
        cfg, ctx = self.cfg, self.ctx
        device, opt, scaler = ctx.device, run.opt, run.scaler
        if hasattr(run.loader.sampler, "set_epoch"):
            run.loader.sampler.set_epoch(epoch)
        self.train_module.train()
        sums: Dict[str, float] = {}
        seen = 0
        t0 = time.perf_counter()
        bar = None
        if cfg.progress and ctx.is_main:
            from tqdm import tqdm

            bar = tqdm(total=run.steps, desc="epoch %d/%d" % (epoch + 1, cfg.epochs), unit="batch",
                       dynamic_ncols=True, leave=False)
        for i, (x, y) in enumerate(run.loader):
            if i >= run.steps:
                break
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            with torch.autocast(run.device_type, dtype=run.dtype or torch.float32, enabled=run.dtype is not None):
                loss, logs = run.model(x, y)
            if not torch.isfinite(loss):
                raise CompressError("the loss became %s at epoch %d step %d" % (float(loss), epoch + 1, i),
                                    hint="lower train.lr, raise train.warmup_epochs or enable train.grad_clip")
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            if cfg.grad_clip > 0:
                scaler.unscale_(opt)
                gnorm = float(torch.nn.utils.clip_grad_norm_(self.train_module.parameters(), cfg.grad_clip))
                sums["grad_norm"] = sums.get("grad_norm", 0.0) + gnorm * y.shape[0]
            scaler.step(opt)
            scaler.update()
            run.sched.step()
            n = int(y.shape[0])
            seen += n
            sums["loss"] = sums.get("loss", 0.0) + float(loss.detach()) * n
            for k, v in logs.items():
                sums[k] = sums.get(k, 0.0) + float(v.detach() if torch.is_tensor(v) else v) * n
            if bar is not None:
                bar.set_postfix(loss="%.4f" % (sums["loss"] / seen), lr="%.2e" % opt.param_groups[0]["lr"],
                                refresh=False)
                bar.update(1)
        if bar is not None:
            bar.close()
        return sums, seen, time.perf_counter() - t0

    def _end_epoch(self, run: "_Run", epoch: int, sums: Dict[str, float], seen: int, seconds: float,
                   result: TrainResult, last: Path, best: Path) -> None:
        """Reduce the epoch's numbers over ranks, validate, and (main rank) write checkpoints and metrics."""
        cfg, ctx = self.cfg, self.ctx
        sums = dict(sums, samples=float(seen))
        sums = all_reduce_sums(sums, ctx)
        n_all = max(sums.pop("samples"), 1.0)
        record: Dict[str, Any] = {"epoch": epoch + 1, "lr": run.opt.param_groups[0]["lr"],
                                  "train_samples": int(n_all), "seconds": round(seconds, 2),
                                  "samples_per_s": round(n_all / max(seconds, 1e-9), 1),
                                  "world_size": ctx.world_size}
        record.update({"train_" + k: v / n_all for k, v in sums.items()})
        if self.val_set is not None:
            ev = evaluate_accuracy(self.student, self.val_set, cfg.eval_batch_size, ctx.device, ctx)
            record.update({"val_accuracy": ev["accuracy"], "val_loss": ev["loss"], "val_samples": ev["samples"]})
        result.history.append(record)
        acc = record.get("val_accuracy", 0.0)
        improved = self.val_set is not None and acc > result.best_accuracy
        if improved:
            result.best_accuracy, result.best_epoch = acc, epoch + 1
        if ctx.is_main:
            state = {"format": CHECKPOINT_FORMAT, "epoch": epoch + 1, "model": self.student.state_dict(),
                     "train_module": self._module_state(), "optimizer": run.opt.state_dict(),
                     "scheduler": run.sched.state_dict(), "scaler": run.scaler.state_dict(),
                     "best_accuracy": result.best_accuracy, "best_epoch": result.best_epoch,
                     "history": result.history,
                     "rng": {"torch": torch.get_rng_state(),
                             "generators": generator_states(run.loader, self.train_set)},
                     "world_size": ctx.world_size, "config": self.run_config}
            save_checkpoint(last, state)
            if improved:
                save_checkpoint(best, state)
            write_metrics(self.out_dir / "metrics.jsonl", result.history)
            log.info("epoch %d/%d: train loss %.4f, val acc %s, %.1f samples/s, %.1f s", epoch + 1, cfg.epochs,
                     record.get("train_loss", float("nan")),
                     "%.4f" % acc if self.val_set is not None else "-", record["samples_per_s"], seconds)


@dataclass
class _Run:
    """What one ``fit`` trains with: the loader and its step count, optimizer, schedule, AMP, the (DDP) model."""

    loader: Any
    steps: int
    opt: Any
    sched: Any
    scaler: Any
    dtype: Optional[torch.dtype]
    device_type: str
    model: nn.Module


def _generators(loader: Any, dataset: Any) -> Dict[str, torch.Generator]:
    """The random generators that decide the next epoch: the sampler's shuffle and the dataset's own
    (augmentation), found by type so a user's dataset is covered too."""
    found: Dict[str, torch.Generator] = {}
    if isinstance(getattr(loader.sampler, "generator", None), torch.Generator):
        found["sampler"] = loader.sampler.generator
    for name, value in sorted(vars(dataset).items()) if hasattr(dataset, "__dict__") else ():
        if isinstance(value, torch.Generator):
            found["dataset." + name] = value
    return found


def generator_states(loader: Any, dataset: Any) -> Dict[str, torch.Tensor]:
    """States of :func:`_generators`, saved in checkpoints so a resumed run shuffles and augments
    exactly as the uninterrupted run would have (with ``workers: 0``; worker processes hold copies)."""
    return {name: g.get_state() for name, g in _generators(loader, dataset).items()}


def set_generator_states(loader: Any, dataset: Any, states: Dict[str, Any]) -> None:
    for name, g in _generators(loader, dataset).items():
        if isinstance(states.get(name), torch.Tensor):
            g.set_state(states[name])


def write_metrics(path: PathLike, history: List[Dict[str, Any]]) -> Path:
    """The whole history as JSON lines, rewritten atomically (a resumed run's log stays consistent)."""
    return write_text_atomic(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in history))


def read_metrics(path: PathLike) -> List[Dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


class Supervised(nn.Module):
    """The plain train module: cross-entropy of the student (optionally label-smoothed)."""

    def __init__(self, student: nn.Module, label_smoothing: float = 0.0) -> None:
        super().__init__()
        self.student = student
        self.label_smoothing = float(label_smoothing)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        out = self.student(x)
        loss = nn.functional.cross_entropy(out.float(), y, label_smoothing=self.label_smoothing)
        return loss, {"task_loss": loss.detach()}


__all__ = ["AMP_MODES", "CHECKPOINT_FORMAT", "Supervised", "TrainConfig", "TrainResult", "Trainer", "amp_dtype",
           "evaluate_accuracy", "load_checkpoint", "lr_factor", "model_state_from", "param_groups", "read_metrics",
           "save_checkpoint", "write_metrics"]
