"""The student of a detector distillation: the teacher pruned by jetforge or by Torch-Pruning.

* :func:`prune_detector` -- structured channel pruning with :func:`jetforge.compress.prune.prune`
  (a MACs goal; latency-aware with a ``latency_fn`` if wanted) -- the model's outputs (the predictor
  heads' last convs) are never pruned;
* :func:`torch_pruning_detector` -- the peer: Torch-Pruning's magnitude pruner with a uniform ratio
  bisected until the MACs (counted by jetforge's counter, like every variant) match a goal;
* :func:`detector_from_state` -- rebuild any pruned student from a plain state dict: every conv and
  batch norm takes the channel counts its weights have, so a checkpoint loads without the tool that
  pruned it (the benchmarks' GPU script relies on this: the H200 has neither Torch-Pruning nor the
  project's environment).
"""

import copy
import logging
from typing import Any, Callable, Mapping, Optional, Tuple

import torch
from torch import nn

from jetforge.compress.models.efficientnet_lite import SameConv2d
from jetforge.compress.models.ssdlite_mobilenet_v2 import SSDLiteMobileNetV2
from jetforge.errors import CompressError

log = logging.getLogger(__name__)


def example_input(model: SSDLiteMobileNetV2, batch: int = 1) -> torch.Tensor:
    return torch.zeros(batch, 3, model.image_size, model.image_size)


def model_macs(model: nn.Module, image_size: int) -> int:
    """MACs of one ``image_size`` frame, counted with the input on the model's own device (the recipe counts the
    teacher while it is still on the GPU it trained the student on: a CPU input crashed the first H100 run)."""
    from jetforge.compress.prune import count_ops

    device = next(model.parameters()).device
    return int(count_ops(model, torch.zeros(1, 3, image_size, image_size, device=device)).macs)


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


__all__ = ["detector_from_state", "example_input", "model_macs", "prune_detector", "torch_pruning_detector",
           "torch_pruning_for_macs"]
