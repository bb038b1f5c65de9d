"""``jetforge qat``: quantization-aware training from a YAML recipe, ending in files for TensorRT and DLA.

Steps: build the trained FP32 model (``model.checkpoint``) -> :func:`prepare_qat` (fold BN, quantizers
on Conv/Linear/residual-Add inputs) -> :func:`calibrate_qat` on ``data.calib_samples`` training
images with ``qat.calibration`` (jetforge's entropy/percentile/mse/max) -> measure that PTQ starting
point -> train with quantization in the loop (optionally distilling from ``teacher``) -> export
``model.qdq.onnx`` (TensorRT >= 10 GPU, TensorRT 11) -> translate it for DLA: ``model.plain.onnx``,
``model.calib`` (the trained scales), ``model.fp16_layers.txt`` and ``model.dla.json`` -> evaluate the
Q/DQ ONNX in simulated TensorRT INT8 arithmetic (the same on any CPU), with ONNX Runtime's INT8
kernels on this CPU beside it as a labelled second number.  Files land in ``out_dir`` with ``config.yaml``,
``metrics.jsonl``, checkpoints and ``result.json``.
"""

import copy
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

import torch

from jetforge.calibrate.int8sim.simulate import SIMULATED_LABEL
from jetforge.compress.distill.distill_model import LossConfig, _preprocess
from jetforge.compress.distill.losses import DistillModule
from jetforge.compress.qat.export import export_qdq_onnx, onnx_accuracy, ort_kernels, qdq_for_ort
from jetforge.compress.qat.prepare import QatSummary, calibrate_qat, prepare_qat
from jetforge.compress.train.dist import DistContext, distributed
from jetforge.compress.train.loop import Supervised, TrainConfig, Trainer, TrainResult, evaluate_accuracy
from jetforge.compress.train.recipe import (CLASSES, INPUT_SHAPE, DataConfig, ModelConfig, build_from_config,
                                            calibration_batches, load_data, write_resolved_config)
from jetforge.errors import CompressError
from jetforge.fileio import write_json_atomic
from jetforge.runtime.cpu_features import SATURATION_WARNING, int8_kernels_can_saturate, ort_kernel_label

log = logging.getLogger(__name__)


EXPORT_OPTIONS = ("input_shape", "labels", "task", "input_name", "output_name", "extra", "preprocess")


@dataclass
class QatOptions:
    # percentile | entropy | mse | max (jetforge.calibrate.algorithms).  Not entropy by default: on images with a
    # large uniform background (Fashion-MNIST) KL picks the background spike and clips the objects (FP32 0.86 ->
    # 0.66 measured in benchmarks/int8/qat_distill.py); percentile 99.99 starts QAT within 0.2 points.
    calibration: str = "percentile"
    percentile: float = 99.99
    quantize_add: bool = True
    fold_bn: bool = True


@dataclass
class ExportConfig:
    opset: int = 17
    trt_version: str = "10.3"  # the cache header: JetPack 6.1/6.2; 8.6.2 for JetPack 6.0, 8.5.2 for 5.1
    dla: bool = True  # write the plain ONNX + calibration cache + FP16 layer list
    ort_eval: bool = True  # accuracy of the Q/DQ ONNX (simulated TensorRT INT8; ORT's kernels beside) on validation


def _qat_train_defaults() -> TrainConfig:
    return TrainConfig(epochs=2, lr=0.002, warmup_epochs=0.0, weight_decay=1e-4, grad_clip=5.0)


@dataclass
class QatConfig:
    name: str = "qat"
    out_dir: str = "runs/qat"
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)  # the trained FP32 model (checkpoint required)
    teacher: Optional[ModelConfig] = None  # optional: distil during QAT
    teacher_fp16: bool = False
    loss: LossConfig = field(default_factory=LossConfig)
    qat: QatOptions = field(default_factory=QatOptions)
    train: TrainConfig = field(default_factory=_qat_train_defaults)
    export: ExportConfig = field(default_factory=ExportConfig)
    resume: bool = True


@dataclass
class QatResult:
    out_dir: Path
    model: Any  # the trained QAT model (torch.fx.GraphModule)
    train: Optional[TrainResult] = None
    fp32_accuracy: Optional[float] = None
    ptq_accuracy: Optional[float] = None  # fake-quantized in torch, calibrated ranges, before training
    qat_accuracy: Optional[float] = None  # fake-quantized in torch after training
    onnx_int8_accuracy: Optional[float] = None  # the Q/DQ ONNX in simulated TensorRT INT8 arithmetic
    ort_kernels_accuracy: Optional[float] = None  # the same in ONNX Runtime's INT8 kernels (CPU-dependent)
    ort_kernels_label: str = ""
    ort_kernels: Dict[str, int] = field(default_factory=dict)
    summary: Dict[str, Any] = field(default_factory=dict)
    files: Dict[str, str] = field(default_factory=dict)
    translation: Dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        d = {"out_dir": str(self.out_dir), "fp32_accuracy": self.fp32_accuracy, "ptq_accuracy": self.ptq_accuracy,
             "qat_accuracy": self.qat_accuracy, "onnx_int8_accuracy": self.onnx_int8_accuracy,
             "onnx_int8_arithmetic": SIMULATED_LABEL, "ort_kernels_accuracy": self.ort_kernels_accuracy,
             "ort_kernels_label": self.ort_kernels_label,
             "ort_int8_kernels": {k: v for k, v in self.ort_kernels.items() if k.startswith(("QLinear", "QGemm"))},
             "quantized": self.summary, "files": dict(self.files),
             "dla": {k: self.translation.get(k) for k in ("trained_scales", "fp16_layers", "weight_scale_mismatch")}
             if self.translation else {}}
        if self.train is not None:
            d["train"] = self.train.to_dict()
        return d


def qat(cfg: QatConfig, model: Optional[torch.nn.Module] = None, teacher: Optional[torch.nn.Module] = None,
        train_set: Any = None, val_set: Any = None, ctx: Optional[DistContext] = None,
        calib_batches: Optional[Sequence[Any]] = None, export_options: Optional[Dict[str, Any]] = None) -> QatResult:
    """Run a QAT recipe (see the module docstring); ``model``/``teacher``/datasets override the recipe.

    For a model that is not the recipe's image classifier -- a 3D or (2+1)D clip model -- a Python caller gives
    the model, ``train_set``/``val_set`` (objects with ``__len__`` and ``__getitems__(indices) -> (x, y)``
    tensors, as :class:`jetforge.compress.data.ArrayDataset`), ``calib_batches`` (input tensors, e.g. clips
    ``(N, C, T, H, W)``) and ``export_options`` for :func:`export_qdq_onnx` (``input_shape``, ``labels``,
    ``task``, ``input_name``, ``output_name``, ``extra`` such as ``{"clip": contract.to_dict()}``, ``preprocess``).
    Without ``calib_batches`` the recipe's own training images calibrate; without ``export_options`` the
    recipe's image contract is exported.
    """
    unknown = set(export_options or {}) - set(EXPORT_OPTIONS)
    if unknown:  # refused before any training
        raise CompressError("unknown export option(s) for QAT: %s" % ", ".join(sorted(unknown)),
                            hint="give only %s" % ", ".join(EXPORT_OPTIONS))
    with distributed(cfg.train.device, ctx) as run_ctx:
        return _qat(cfg, model, teacher, train_set, val_set, run_ctx, calib_batches, export_options)


def _export_arguments(cfg: QatConfig, val_set: Any, export_options: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """The export call's shape and sidecar: the recipe's image classifier, or what the caller gave."""
    if export_options is None:
        return {"input_shape": INPUT_SHAPE, "labels": CLASSES, "preprocess": _preprocess()}
    options = dict(export_options)
    if "input_shape" not in options:
        example = val_set.__getitems__([0])[0]
        options["input_shape"] = (1,) + tuple(int(d) for d in example.shape[1:])
    return options


def _validation_arrays(val_set: Any):
    """``(x, y)`` numpy arrays of the whole validation set, as the model sees them."""
    if hasattr(val_set, "images"):  # the recipe's image set: raw images, normalised as in training
        from jetforge.compress.data import normalize

        return normalize(val_set.images.numpy()), val_set.labels.numpy()
    x, y = val_set.__getitems__(list(range(len(val_set))))
    return x.numpy(), y.numpy()


def _qat(cfg, model, teacher, train_set, val_set, ctx, calib_batches=None, export_options=None) -> QatResult:
    out = Path(cfg.out_dir)
    train_set, val_set = load_data(cfg.data, seed=cfg.train.seed, train=train_set, val=val_set)
    if model is None:
        if not cfg.model.checkpoint:
            raise CompressError("QAT starts from a trained model, but model.checkpoint is not set",
                                hint="train or distil the model first and set model.checkpoint to its best.pt")
        model, _ = build_from_config(cfg.model, "model")
    device = ctx.device
    model = model.to("cpu").float().eval()
    fp32 = evaluate_accuracy(model, val_set, cfg.train.eval_batch_size, "cpu", ctx)["accuracy"]
    summary = QatSummary()
    qmodel = prepare_qat(model, fold_bn=cfg.qat.fold_bn, quantize_add=cfg.qat.quantize_add, summary=summary)
    batches = calib_batches if calib_batches is not None else calibration_batches(cfg.data, seed=cfg.train.seed)
    calibrate_qat(qmodel, batches, method=cfg.qat.calibration, percentile=cfg.qat.percentile)
    ptq = evaluate_accuracy(qmodel, val_set, cfg.train.eval_batch_size, "cpu", ctx)["accuracy"]
    if ctx.is_main:
        out.mkdir(parents=True, exist_ok=True)
        write_resolved_config(out, cfg)
        log.info("%s: FP32 %.4f, fake-quantized after %s calibration %.4f", cfg.name, fp32, cfg.qat.calibration, ptq)
    qmodel.to(device)
    if teacher is None and cfg.teacher is not None:
        if not cfg.teacher.checkpoint:
            raise CompressError("the teacher has no checkpoint", hint="set teacher.checkpoint")
        teacher, _ = build_from_config(cfg.teacher, "teacher")
    if teacher is not None:
        example = train_set.__getitems__(list(range(min(8, len(train_set)))))[0].to(device)
        module = DistillModule(qmodel, teacher.to(device), example, task_weight=cfg.loss.task_weight,
                               kd_weight=cfg.loss.kd_weight, temperature=cfg.loss.temperature,
                               features=cfg.loss.features, teacher_fp16=cfg.teacher_fp16,
                               label_smoothing=cfg.loss.label_smoothing)
    else:
        module = Supervised(qmodel, cfg.loss.label_smoothing)
    trainer = Trainer(module, qmodel, train_set, val_set, cfg.train, out, ctx=ctx,
                      run_config={"name": cfg.name, "kind": "qat"})
    tres = trainer.fit(resume=cfg.resume)
    res = QatResult(out_dir=out, model=qmodel, train=tres, fp32_accuracy=fp32, ptq_accuracy=ptq,
                    qat_accuracy=tres.final_accuracy, summary=summary.to_dict())
    if ctx.is_main:
        cpu = copy.deepcopy(qmodel).to("cpu").eval()
        qdq_path = out / "model.qdq.onnx"
        export = _export_arguments(cfg, val_set, export_options)
        export_qdq_onnx(cpu, qdq_path, export.pop("input_shape"), model_name=cfg.name, opset=cfg.export.opset,
                        provenance={"calibration": cfg.qat.calibration}, **export)
        res.files["qdq_onnx"] = str(qdq_path)
        torch.save(cpu.state_dict(), str(out / "qat_state.pt"))
        res.files["qat_state"] = str(out / "qat_state.pt")
        if cfg.export.dla:
            from jetforge.calibrate.qdq.translate import translate_file

            tr, paths = translate_file(qdq_path, out, trt_version=cfg.export.trt_version)
            res.translation = {"trained_scales": len(tr.trained), "fp16_layers": tr.fp16_layers,
                               "weight_scale_mismatch": tr.weight_scale_mismatch}
            res.files.update({k: str(v) for k, v in paths.items()})
        if cfg.export.ort_eval:
            import onnx

            x, y = _validation_arrays(val_set)
            ort_model = qdq_for_ort(onnx.load(str(qdq_path)))
            res.onnx_int8_accuracy = onnx_accuracy(ort_model, x, y)  # simulated TensorRT arithmetic
            res.ort_kernels_accuracy = onnx_accuracy(ort_model, x, y, arithmetic="ort-int8")
            res.ort_kernels_label = ort_kernel_label()
            if int8_kernels_can_saturate():
                log.warning("%s", SATURATION_WARNING)
            res.ort_kernels = ort_kernels(ort_model, out)
        res.files.update({"config": str(out / "config.yaml"), "metrics": str(out / "metrics.jsonl")})
        write_json_atomic(out / "result.json", res.to_dict())
        log.info("%s: FP32 %.4f, PTQ %.4f, QAT %.4f (torch), Q/DQ ONNX %s (simulated INT8)", cfg.name, fp32, ptq,
                 res.qat_accuracy, "%.4f" % res.onnx_int8_accuracy if res.onnx_int8_accuracy is not None else "-")
    return res


__all__ = ["ExportConfig", "QatConfig", "QatOptions", "QatResult", "qat"]

