"""Recipe blocks shared by ``jetforge distill`` and ``jetforge qat``: data, models, the run folder.

A model block names an architecture (:mod:`jetforge.compress.models.fashion`) and optionally a
checkpoint (a jetforge ``last.pt``/``best.pt``/``student.pt`` or a plain state dict, read
weights-only: a checkpoint holding other pickled objects is refused unless the block says
``trust_pickle: true``, for files you made yourself) and pruning:
``prune_plan`` replays a saved ``model.prune.json`` before the weights are loaded, ``prune_ratio``
prunes the loaded model with :func:`jetforge.compress.prune.prune` (L1, uniform) -- the usual way to
make a student from a trained teacher.
"""

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import torch
from torch import nn

from jetforge.compress.data import CLASSES, fashion_mnist
from jetforge.compress.train.loop import model_state_from
from jetforge.compress.models.fashion import build_model
from jetforge.errors import ModelError, UnknownNameError
from jetforge.fileio import PathLike, write_text_atomic

log = logging.getLogger(__name__)

DATASETS = ("fashion_mnist",)
INPUT_SHAPE = (1, 1, 28, 28)


@dataclass
class DataConfig:
    dataset: str = "fashion_mnist"
    root: Optional[str] = None  # folder with the four IDX .gz files; the CLI fills in the asset cache
    train_limit: Optional[int] = None  # a fixed class-balanced subset (smoke runs)
    val_limit: Optional[int] = None
    augment: bool = True  # random horizontal flips
    calib_samples: int = 512  # QAT: training images for the initial activation ranges

    def __post_init__(self) -> None:
        if self.dataset not in DATASETS:
            raise ValueError("data.dataset must be one of %s, got %r" % (", ".join(DATASETS), self.dataset))


@dataclass
class ModelConfig:
    arch: str = "fashion_cnn"
    width: float = 1.0
    num_classes: int = 10
    checkpoint: Optional[str] = None
    prune_plan: Optional[str] = None
    prune_ratio: Optional[float] = None
    trust_pickle: bool = False  # unpickle a checkpoint that holds more than weights (runs code stored in it)
    made_by: Optional[str] = None  # the command that writes ``checkpoint``: named when the file does not exist yet

    def __post_init__(self) -> None:
        if self.prune_ratio is not None and not 0 <= self.prune_ratio < 1:
            raise ValueError("prune_ratio must be in [0, 1), got %r" % self.prune_ratio)


def load_data(cfg: DataConfig, seed: int = 0, train: Any = None, val: Any = None) -> Tuple[Any, Any]:
    """``(train, val)`` datasets; val is the 10k test split (or ``val_limit`` of it).

    ``train``/``val`` given by a Python caller are used as they are; only the missing ones are read.
    """
    if train is None:
        train = fashion_mnist(cfg.root, "train", limit=cfg.train_limit, augment=cfg.augment, seed=seed)
    if val is None:
        val = fashion_mnist(cfg.root, "test", limit=cfg.val_limit, augment=False, seed=seed)
    return train, val


def calibration_batches(cfg: DataConfig, batch_size: int = 128, seed: int = 0):
    """``calib_samples`` training images (no augmentation, the same on every rank) in batches."""
    ds = fashion_mnist(cfg.root, "train", limit=cfg.calib_samples, augment=False, seed=seed + 1)
    return [ds.__getitems__(list(range(i, min(i + batch_size, len(ds)))))[0] for i in range(0, len(ds), batch_size)]


def require_checkpoint(cfg: Optional[ModelConfig], what: str = "model") -> None:
    """A block's ``checkpoint`` that does not exist is one line naming how to make it (``made_by``), before any work.

    A recipe that starts from a trained model (the distillation teacher, the QAT model) names a file that another
    recipe's run writes; from a clean clone it is missing, and "check the path" did not say what to run first.
    """
    if cfg is None or not cfg.checkpoint or Path(cfg.checkpoint).exists():
        return
    from jetforge.errors import InputFileError

    hint = ("make it first: %s" % cfg.made_by if cfg.made_by else
            "train that model first (a recipe's run writes best.pt into its out_dir), or set %s.checkpoint to the "
            "weights file" % what)
    raise InputFileError("%s checkpoint %s does not exist" % (what, cfg.checkpoint), hint=hint)


def build_from_config(cfg: ModelConfig, what: str = "model") -> Tuple[nn.Module, Dict[str, Any]]:
    """The model a recipe block describes (eval mode) and notes (pruning) for the run record."""
    require_checkpoint(cfg, what)
    try:
        model = build_model(cfg.arch, cfg.width, cfg.num_classes)
    except UnknownNameError as err:
        raise UnknownNameError("%s architecture" % what, cfg.arch, err.known) from None
    notes: Dict[str, Any] = {}
    state = model_state_from(cfg.checkpoint, trusted=cfg.trust_pickle, block=what) if cfg.checkpoint else None
    if cfg.prune_plan:
        from jetforge.compress.prune import PrunePlan, load_pruned

        model = load_pruned(model, PrunePlan.load(cfg.prune_plan), state)
        notes["prune_plan"] = cfg.prune_plan
    elif state is not None:
        try:
            model.load_state_dict(state, strict=True)
        except RuntimeError as err:
            raise ModelError("%s checkpoint %s does not fit %s (width %s): %s"
                             % (what, cfg.checkpoint, cfg.arch, cfg.width, str(err).splitlines()[0]),
                             hint="set %s.arch/width to those the checkpoint was trained with (see its "
                                  "config.yaml)" % what) from err
    if cfg.prune_ratio:
        from jetforge.compress.prune import prune

        res = prune(model, torch.zeros(INPUT_SHAPE), ratio=cfg.prune_ratio, importance="l1", round_to=4)
        model = res.model
        notes["prune_plan_object"] = res.plan
        notes["pruned"] = {"ratio": cfg.prune_ratio, "params": sum(p.numel() for p in model.parameters())}
    return model.eval(), notes


def write_resolved_config(out_dir: PathLike, cfg: Any) -> Path:
    """``config.yaml`` next to the checkpoints: every option as it was used (defaults filled in)."""
    import yaml

    from jetforge.config import to_dict

    return write_text_atomic(Path(out_dir) / "config.yaml", yaml.safe_dump(to_dict(cfg), sort_keys=False))


def check_data(cfg: DataConfig) -> None:
    from jetforge.compress.data import check_root

    check_root(cfg.root)


__all__ = ["CLASSES", "DataConfig", "INPUT_SHAPE", "ModelConfig", "build_from_config", "calibration_batches",
           "check_data", "load_data", "require_checkpoint", "write_resolved_config"]

