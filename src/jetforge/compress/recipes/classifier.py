"""``classifier`` recipes (no ``kind`` key, or ``kind: classifier``): a classifier distilled from a frozen teacher
or fine-tuned (train stage, ``DistillConfig``: ``recipes/distill_fashion_mnist.yaml``), and quantization-aware
training to a Q/DQ ONNX and a DLA cache (INT8 stage, ``QatConfig``: ``recipes/qat_fashion_mnist.yaml``).

``--data`` is the folder of the Fashion-MNIST ``.gz`` files; default the recipe's ``data.root``, else the asset
cache.  Both stages run under ``torchrun`` (DDP): every rank trains, rank 0 prints and writes; each rank's
totals go to stderr as ``[rank R/W] ...``.
"""

import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from jetforge.compress.recipes.base import Recipe, Stage, load_without_kind


def _loader(config: Any) -> Any:
    """The stage's ``load``: the data folder is ``--data``, else the recipe's ``data.root``, else the asset cache.

    Resolving also checks that the checkpoints the recipe starts from exist (a missing one names the command that
    makes it, the block's ``made_by``), before data or models are read."""
    def load(path: Optional[str], overrides: Sequence[str], data: Optional[str], resolve: bool) -> Any:
        cls = config()
        if data:
            cfg = load_without_kind(cls, path, overrides, ["data.root=%s" % data])
        else:
            cfg = load_without_kind(cls, path, overrides)
        if resolve:
            from jetforge.compress.train.recipe import require_checkpoint

            require_checkpoint(cfg.model, "model")
            require_checkpoint(cfg.teacher, "teacher")
        if not resolve or cfg.data.root is not None:
            return cfg
        from jetforge.assets import asset_path

        root = asset_path("fashion_mnist", "train-images-idx3-ubyte.gz").parent
        return load_without_kind(cls, path, overrides, ["data.root=%s" % root])
    return load


def _ranked(train: Any) -> Any:
    """Run ``train(ctx)`` in the torchrun context (a single process without torchrun); (result, is rank 0)."""
    def run(cfg: Any, data: Optional[str], progress: bool) -> Tuple[Any, bool]:
        from jetforge.compress.train.dist import cleanup, init_distributed

        ctx = init_distributed(cfg.train.device)
        try:
            res = train(cfg, ctx)
            stats = res.train.rank_stats if res.train is not None else {}
            if ctx.distributed and stats:
                sys.stderr.write("[rank %d/%d] device=%s samples=%d steps=%d mean_train_loss=%.4f\n"  # one write
                                 % (ctx.rank, ctx.world_size, ctx.device, stats["samples"], stats["steps"],
                                    stats["mean_loss"]))
                sys.stderr.flush()
            return res, ctx.is_main
        finally:
            cleanup(ctx)
    return run


def _distill_config() -> type:
    from jetforge.compress.distill import DistillConfig

    return DistillConfig


def _distill(cfg: Any, ctx: Any) -> Any:
    from jetforge.compress.distill import distill

    return distill(cfg, ctx=ctx)


def _distill_lines(res: Any, cfg: Any) -> List[str]:
    data = res.to_dict()
    lines = ["%s: %s accuracy %.4f (best %.4f at epoch %d), started at %.4f%s"
             % (cfg.name, "distilled" if cfg.teacher else "fine-tuned", data["final_accuracy"],
                data["best_accuracy"], data["best_epoch"], data["initial_accuracy"],
                ", teacher %.4f" % data["teacher_accuracy"] if data["teacher_accuracy"] is not None else "")]
    if data.get("resumed_from_epoch"):
        lines[0] += "; resumed from epoch %d" % data["resumed_from_epoch"]
    return lines + ["  %-11s%s" % (k, v) for k, v in data["files"].items()]


def _qat_config() -> type:
    from jetforge.compress.qat import QatConfig

    return QatConfig


def _qat(cfg: Any, ctx: Any) -> Any:
    from jetforge.compress.qat import qat

    return qat(cfg, ctx=ctx)


def _qat_lines(res: Any, cfg: Any) -> List[str]:
    data = res.to_dict()
    f = lambda v: "-" if v is None else "%.4f" % v  # noqa: E731
    lines = ["%s: FP32 %s, PTQ (calibrated, before QAT) %s, QAT %s, Q/DQ ONNX %s [%s]"
             % (cfg.name, f(res.fp32_accuracy), f(res.ptq_accuracy), f(res.qat_accuracy),
                f(res.onnx_int8_accuracy), data["onnx_int8_arithmetic"])]
    if res.ort_kernels_accuracy is not None:
        lines.append("  %s: %s (kernels: %s)" % (res.ort_kernels_label, f(res.ort_kernels_accuracy),
                                                ", ".join("%s x%d" % kv for kv in data["ort_int8_kernels"].items())))
    return lines + ["  %-11s%s" % (k, Path(v)) for k, v in data["files"].items()]


def _to_dict(res: Any) -> Dict[str, Any]:
    return res.to_dict()


RECIPE = Recipe(
    name="classifier",
    summary="an image classifier distilled from a teacher (or fine-tuned); INT8 stage: QAT",
    data="the folder holding the Fashion-MNIST .gz files (default: data.root of the recipe, else the asset cache)",
    train=Stage(config=_distill_config, run=_ranked(_distill), lines=_distill_lines, json=_to_dict,
                load=_loader(_distill_config)),
    int8=Stage(config=_qat_config, run=_ranked(_qat), lines=_qat_lines, json=_to_dict, load=_loader(_qat_config)),
)
