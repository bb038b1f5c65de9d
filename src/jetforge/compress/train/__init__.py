"""The training loop of distillation and QAT: AMP, clipping, cosine+warm-up, atomic checkpoints with resume,
tqdm, per-epoch validation and DistributedDataParallel under ``torchrun``; small Fashion-MNIST models."""

from jetforge.compress.train.dist import DistContext, init_distributed, launched_by_torchrun
from jetforge.compress.train.loop import (Supervised, TrainConfig, TrainResult, Trainer, evaluate_accuracy,
                                          load_checkpoint, lr_factor, model_state_from, read_metrics,
                                          save_checkpoint)
from jetforge.compress.models.fashion import ARCHS, build_model

__all__ = ["ARCHS", "DistContext", "Supervised", "TrainConfig", "TrainResult", "Trainer", "build_model",
           "evaluate_accuracy", "init_distributed", "launched_by_torchrun", "load_checkpoint", "lr_factor",
           "model_state_from", "read_metrics", "save_checkpoint"]
