"""The student of a detector distillation: the teacher at an input size, pruned by jetforge or Torch-Pruning.

* :func:`detector_at_size` -- a copy of an SSDLite-MobileNetV2 body for another input size: the same
  weights (convolutions do not depend on the image size), TensorFlow ``SAME`` padding recomputed for
  the new size, batch-norm epsilons carried over.  Its feature maps, and so its anchors, follow the
  size (:func:`detector_spec`).
* :func:`prune_detector` -- structured channel pruning with :func:`jetforge.compress.prune.prune`,
  optionally latency-aware with ``latency_fn`` (e.g. :func:`estimated_gpu_latency`: the project's
  roofline estimate of the GPU the student is meant for, deterministic, so the search is not at the
  mercy of a loaded CPU's timing noise) -- the model's outputs (the predictor heads' last convs) are
  never pruned;
* :func:`torch_pruning_detector` -- the peer: Torch-Pruning's magnitude pruner with a uniform ratio
  bisected until the MACs (counted by jetforge's counter, like every variant) match a goal;
* :func:`detector_from_state` -- rebuild any pruned student from a plain state dict: every conv and
  batch norm takes the channel counts its weights have, so a checkpoint loads without the tool that
  pruned it (the benchmarks' GPU script relies on this: the H200 has neither Torch-Pruning nor the
  project's environment).
"""

import copy
import logging
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

import torch
from torch import nn

from jetforge.compress.models.efficientnet_lite import SameConv2d
from jetforge.compress.models.ssdlite_mobilenet_v2 import SSDLiteMobileNetV2
from jetforge.errors import CompressError

log = logging.getLogger(__name__)


def _bn_eps(model: nn.Module) -> Dict[str, float]:
    return {name: m.eps for name, m in model.named_modules() if isinstance(m, nn.BatchNorm2d)}


def detector_at_size(teacher: SSDLiteMobileNetV2, image_size: int) -> SSDLiteMobileNetV2:
    """An unpruned copy of ``teacher`` laid out for ``image_size`` x ``image_size`` inputs (module docstring)."""
    if image_size == teacher.image_size:
        return copy.deepcopy(teacher).eval()
    if image_size < 64:
        raise CompressError("an input of %d pixels leaves SSDLite's last feature maps empty" % image_size,
                            hint="use an input size of at least 64 (the teacher's is %d)" % teacher.image_size)
    student = SSDLiteMobileNetV2(num_classes=teacher.num_classes, image_size=image_size,
                                 anchors_per_layer=teacher.anchors_per_layer)
    student.load_state_dict(teacher.state_dict(), strict=True)
    eps = _bn_eps(teacher)
    for name, m in student.named_modules():
        if isinstance(m, nn.BatchNorm2d):
            m.eps = eps[name]
    return student.eval()


def detector_spec(model: SSDLiteMobileNetV2, teacher_spec: Any) -> Any:
    """The teacher's SSD spec (box coder, scores, NMS, anchor scales) laid out on ``model``'s feature maps."""
    from dataclasses import replace

    from jetforge.runtime.detection import AnchorLayer

    if len(model.grid_sizes) != len(teacher_spec.layers):
        raise CompressError("the student has %d feature maps, the teacher's spec %d"
                            % (len(model.grid_sizes), len(teacher_spec.layers)))
    layers = tuple(AnchorLayer(int(h), int(w), layer.scales, layer.aspect_ratios)
                   for (h, w), layer in zip(model.grid_sizes, teacher_spec.layers))
    return replace(teacher_spec, layers=layers, image_size=(model.image_size, model.image_size))


def same_anchors(a: SSDLiteMobileNetV2, b: SSDLiteMobileNetV2) -> bool:
    """Whether two detectors lay out the same anchors (same feature-map sizes and anchors per cell)."""
    return tuple(a.grid_sizes) == tuple(b.grid_sizes) and tuple(a.anchors_per_layer) == tuple(b.anchors_per_layer)


def example_input(model: SSDLiteMobileNetV2, batch: int = 1) -> torch.Tensor:
    return torch.zeros(batch, 3, model.image_size, model.image_size)


def model_macs(model: nn.Module, image_size: int) -> int:
    from jetforge.compress.prune import count_ops

    return int(count_ops(model, torch.zeros(1, 3, image_size, image_size)).macs)


def _to_onnx_proto(model: nn.Module, image_size: int) -> Any:
    import io
    import warnings

    import onnx

    buf = io.BytesIO()
    m = copy.deepcopy(model).float().eval()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, (torch.zeros(1, 3, image_size, image_size),), buf, input_names=["image"],
                          output_names=["box_encodings", "class_logits"], opset_version=17, do_constant_folding=True,
                          dynamic_axes={"image": {0: "batch"}}, dynamo=False)
    return onnx.load_from_string(buf.getvalue())


def estimated_gpu_latency(target: str = "server-hopper-h200", batch: int = 32, precision: str = "fp16",
                          efficiency: str = "pytorch_eager", fusion: str = "none") -> Callable[[nn.Module], float]:
    """``latency_fn(model) -> ms``: jetforge's roofline estimate of ``model`` on ``target`` at ``batch``.

    The defaults describe how ``benchmarks/detector_student_gpu.py`` runs the students on the H200
    (PyTorch kernels, batch norm folded, FP16, CUDA graph): one kernel per layer.  An estimate, not a
    measurement -- the speed-ups are measured by the benchmark.
    """
    from jetforge.runtime.estimate.result import estimate
    from jetforge.targets import get_target

    profile = get_target(target)

    def latency(model: nn.Module) -> float:
        size = int(getattr(model, "image_size", 300))
        est = estimate(_to_onnx_proto(model, size), profile, precision, [batch], efficiency=efficiency, fusion=fusion)
        return 1000.0 * float(est.batches[0].latency_s)

    return latency


def prune_detector(model: SSDLiteMobileNetV2, *, flops_reduction: Optional[float] = None,
                   latency_reduction: Optional[float] = None, latency_aware: bool = True,
                   latency_fn: Optional[Callable[[nn.Module], float]] = None, importance: str = "l1",
                   round_to: int = 8, protect_stem: bool = False, min_keep: float = 0.25) -> Any:
    """Prune ``model`` in place with jetforge (module docstring); returns the :class:`PruneResult`."""
    from jetforge.compress.prune import prune

    return prune(model, example_input(model), flops_reduction=flops_reduction, latency_reduction=latency_reduction,
                 latency_aware=latency_aware, latency_fn=latency_fn, importance=importance, round_to=round_to,
                 protect_stem=protect_stem, min_keep=min_keep)


def _head_outputs(model: SSDLiteMobileNetV2):
    return [h.pointwise for h in list(model.box_heads) + list(model.class_heads)]


def torch_pruning_detector(model: SSDLiteMobileNetV2, ratio: float, round_to: int = 8) -> SSDLiteMobileNetV2:
    """``model`` pruned by Torch-Pruning's magnitude (L1) pruner at a uniform ``ratio`` (a copy)."""
    import torch_pruning as tp

    pruned = copy.deepcopy(model).eval()
    pruner = tp.pruner.MagnitudePruner(pruned, example_input(pruned), importance=tp.importance.MagnitudeImportance(p=1),
                                       pruning_ratio=ratio, ignored_layers=_head_outputs(pruned), round_to=round_to)
    pruner.step()
    return pruned.eval()


def torch_pruning_for_macs(model: SSDLiteMobileNetV2, macs_goal: int, round_to: int = 8,
                           steps: int = 10) -> Tuple[SSDLiteMobileNetV2, float]:
    """Torch-Pruning's student whose MACs are closest to ``macs_goal`` from above or equal: bisection on the ratio."""
    lo, hi = 0.0, 0.9
    best: Optional[Tuple[SSDLiteMobileNetV2, float]] = None
    for _ in range(steps):
        mid = (lo + hi) / 2
        candidate = torch_pruning_detector(model, mid, round_to)
        macs = model_macs(candidate, model.image_size)
        log.info("Torch-Pruning ratio %.4f: %d MACs (goal %d)", mid, macs, macs_goal)
        if macs <= macs_goal:
            hi, best = mid, (candidate, mid)
        else:
            lo = mid
    if best is None:
        raise CompressError("Torch-Pruning did not reach %d MACs at ratio %.2f" % (macs_goal, hi))
    return best


def detector_from_state(state: Mapping[str, torch.Tensor], image_size: int, num_classes: int = 2,
                        anchors_per_layer: Tuple[int, ...] = (3, 6, 6, 6, 6, 6),
                        bn_eps: float = 1e-3) -> SSDLiteMobileNetV2:
    """An SSDLite-MobileNetV2 whose convs and batch norms have the channel counts of ``state``, loaded (eval mode)."""
    model = SSDLiteMobileNetV2(num_classes=num_classes, image_size=image_size, anchors_per_layer=anchors_per_layer)
    for name, module in list(model.named_modules()):
        if isinstance(module, nn.Conv2d) and name + ".weight" in state:
            out_ch, in_per_group = state[name + ".weight"].shape[:2]
            depthwise = module.groups > 1
            in_ch = out_ch if depthwise else in_per_group
            if isinstance(module, SameConv2d):
                new = copy.deepcopy(module)
                new.in_channels, new.out_channels = int(in_ch), int(out_ch)
                new.groups = int(in_ch) if depthwise else 1
                new.weight = nn.Parameter(torch.empty(state[name + ".weight"].shape))
            else:
                new = nn.Conv2d(int(in_ch), int(out_ch), module.kernel_size, module.stride, module.padding,
                                groups=int(in_ch) if depthwise else 1, bias=module.bias is not None)
                if hasattr(module, "tf_scope"):
                    new.tf_scope = module.tf_scope  # type: ignore[assignment]
            _replace(model, name, new)
        elif isinstance(module, nn.BatchNorm2d) and name + ".weight" in state:
            _replace(model, name, nn.BatchNorm2d(int(state[name + ".weight"].shape[0]), eps=bn_eps))
    try:
        model.load_state_dict(dict(state), strict=True)
    except RuntimeError as err:
        raise CompressError("the state dict does not describe an SSDLite-MobileNetV2 student: %s"
                            % str(err).splitlines()[0],
                            hint="give the student.pt of a detector distillation run") from err
    return model.eval()


def _replace(model: nn.Module, name: str, new: nn.Module) -> None:
    parent_name, _, leaf = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, leaf, new)


__all__ = ["detector_at_size", "detector_from_state", "detector_spec", "estimated_gpu_latency", "example_input",
           "model_macs", "prune_detector", "same_anchors", "torch_pruning_detector", "torch_pruning_for_macs"]
