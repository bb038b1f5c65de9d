"""``jetforge distill``: train a (pruned or smaller) student from a frozen teacher, from a YAML recipe.

A run folder (``out_dir``) receives ``config.yaml`` (the resolved recipe), ``metrics.jsonl`` (one
record per epoch), ``last.pt``/``best.pt`` (checkpoints; ``resume: true`` continues from ``last.pt``),
``student.pt`` (the final student's state dict), ``model.prune.json`` when the student was pruned,
``model.onnx`` (+ sidecar) and ``result.json``.  Launch under ``torchrun`` for DDP.
"""

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch

from jetforge.compress.distill.losses import DistillModule, FeaturePair
from jetforge.compress.train.dist import DistContext, distributed
from jetforge.compress.train.loop import (Supervised, TrainConfig, Trainer, TrainResult, evaluate_accuracy,
                                          save_checkpoint)
from jetforge.compress.train.recipe import (CLASSES, INPUT_SHAPE, DataConfig, ModelConfig, build_from_config,
                                            load_data, write_resolved_config)
from jetforge.errors import CompressError
from jetforge.fileio import write_json_atomic

log = logging.getLogger(__name__)


@dataclass
class LossConfig:
    task_weight: float = 0.5
    kd_weight: float = 0.5
    temperature: float = 4.0
    label_smoothing: float = 0.0
    features: List[FeaturePair] = field(default_factory=list)


@dataclass
class DistillConfig:
    name: str = "distill"
    out_dir: str = "runs/distill"
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)  # the student
    teacher: Optional[ModelConfig] = None  # None: plain fine-tuning (the baseline)
    teacher_fp16: bool = False
    loss: LossConfig = field(default_factory=LossConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    resume: bool = True
    export_onnx: bool = True


@dataclass
class DistillResult:
    out_dir: Path
    train: TrainResult
    student: Any
    teacher_accuracy: Optional[float] = None
    initial_accuracy: Optional[float] = None
    files: Dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        d = {"out_dir": str(self.out_dir), "teacher_accuracy": self.teacher_accuracy,
             "initial_accuracy": self.initial_accuracy, "files": dict(self.files)}
        d.update(self.train.to_dict())
        return d


def _preprocess():
    from jetforge.compress.data import MEAN, STD
    from jetforge.runtime.inputs import Preprocess

    return Preprocess(height=28, width=28, resize="stretch", color="gray", mean=(MEAN,), std=(STD,))


def distill(cfg: DistillConfig, student: Optional[torch.nn.Module] = None, teacher: Optional[torch.nn.Module] = None,
            train_set: Any = None, val_set: Any = None, ctx: Optional[DistContext] = None) -> DistillResult:
    """Run a distillation (or, without a teacher, plain fine-tuning) recipe; see the module docstring.

    ``student``/``teacher``/``train_set``/``val_set`` override the recipe's blocks (Python API).
    """
    with distributed(cfg.train.device, ctx) as run_ctx:
        return _distill(cfg, student, teacher, train_set, val_set, run_ctx)


def check_run_folder(cfg: DistillConfig) -> Path:
    """``cfg.out_dir``, refused before any data is loaded when it cannot hold this run.

    A file (or a path below one) failed only at the first write, after the data and the teacher were loaded.  The
    folder of the teacher's or the student's starting checkpoint holds another run's ``last.pt``/``best.pt``:
    ``resume`` would continue that run as this student (the wrong checkpoint), and this run would overwrite them.
    """
    from jetforge.output_set import check_output_folder

    out = check_output_folder(cfg.out_dir, "out_dir", hint="set out_dir to a folder, e.g. --set out_dir=runs/distill")
    for role, model in (("teacher", cfg.teacher), ("student", cfg.model)):
        checkpoint = getattr(model, "checkpoint", None)
        if checkpoint and Path(checkpoint).resolve().parent == out.resolve():
            raise CompressError("out_dir %s is the folder of the %s's checkpoint %s: this run would resume from "
                                "and overwrite that run's checkpoints" % (out, role, checkpoint),
                                hint="set out_dir to a new folder, e.g. --set out_dir=runs/%s" % cfg.name)
    return out


def _distill(cfg, student, teacher, train_set, val_set, ctx) -> DistillResult:
    out = check_run_folder(cfg)
    train_set, val_set = load_data(cfg.data, seed=cfg.train.seed, train=train_set, val=val_set)
    notes: Dict[str, Any] = {}
    if student is None:
        student, notes = build_from_config(cfg.model, "model")
    if teacher is None and cfg.teacher is not None:
        if not cfg.teacher.checkpoint:
            raise CompressError("the teacher has no checkpoint; an untrained teacher teaches nothing",
                                hint="set teacher.checkpoint to the trained model (e.g. runs/teacher/best.pt)")
        teacher, _ = build_from_config(cfg.teacher, "teacher")
    example = train_set.__getitems__(list(range(min(8, len(train_set)))))[0]
    device = ctx.device
    student.to(device)
    teacher_acc = None
    if teacher is not None:
        teacher.to(device)
        module = DistillModule(student, teacher, example.to(device), task_weight=cfg.loss.task_weight,
                               kd_weight=cfg.loss.kd_weight, temperature=cfg.loss.temperature,
                               features=cfg.loss.features, teacher_fp16=cfg.teacher_fp16,
                               label_smoothing=cfg.loss.label_smoothing)
        teacher_acc = evaluate_accuracy(_AsFloat(teacher), val_set, cfg.train.eval_batch_size, device, ctx)["accuracy"]
    else:
        module = Supervised(student, cfg.loss.label_smoothing)
    initial = evaluate_accuracy(student, val_set, cfg.train.eval_batch_size, device, ctx)["accuracy"]
    if ctx.is_main:
        out.mkdir(parents=True, exist_ok=True)
        write_resolved_config(out, cfg)
        if "prune_plan_object" in notes:
            notes["prune_plan_object"].save(out / "model.prune.json")
        log.info("%s: student %.4f before training%s", cfg.name, initial,
                 ", teacher %.4f" % teacher_acc if teacher_acc is not None else "")
    trainer = Trainer(module, student, train_set, val_set, cfg.train, out, ctx=ctx,
                      run_config={"name": cfg.name, "kind": "distill" if teacher is not None else "finetune"})
    result = trainer.fit(resume=cfg.resume)
    res = DistillResult(out_dir=out, train=result, student=student, teacher_accuracy=teacher_acc,
                        initial_accuracy=initial)
    if ctx.is_main:
        student.eval()
        save_checkpoint(out / "student.pt", student.state_dict())  # atomic: a stop never leaves half a file
        res.files["student"] = str(out / "student.pt")
        if (out / "model.prune.json").is_file():
            res.files["prune_plan"] = str(out / "model.prune.json")
        if cfg.export_onnx:
            from jetforge.compress.export import export_onnx

            cpu = _cpu_copy(student)
            export_onnx(cpu, out / "model.onnx", INPUT_SHAPE, model_name=cfg.name, labels=CLASSES,
                        preprocess=_preprocess(), provenance={"distilled": teacher is not None})
            res.files["onnx"] = str(out / "model.onnx")
        res.files.update({"config": str(out / "config.yaml"), "metrics": str(out / "metrics.jsonl"),
                          "checkpoint": str(result.checkpoint)})
        write_json_atomic(out / "result.json", res.to_dict())
    return res


class _AsFloat(torch.nn.Module):
    """Evaluate a (possibly FP16) teacher on float inputs."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x):
        dtype = next(self.model.parameters()).dtype
        return self.model(x.to(dtype)).float()


def _cpu_copy(model: torch.nn.Module) -> torch.nn.Module:
    import copy

    return copy.deepcopy(model).to("cpu").float().eval()


__all__ = ["DistillConfig", "DistillResult", "LossConfig", "distill"]
