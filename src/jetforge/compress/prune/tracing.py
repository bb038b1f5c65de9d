"""Tracing for the channel analysis: the whole model with ``torch.fx``, or, where it does not trace, the largest
submodules that do (each run on the inputs it received in a real forward pass, its own inputs and outputs kept).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, Tuple

import torch
import torch.fx as fx
from torch import nn

from jetforge.compress.prune.interpreter import LabelInterpreter
from jetforge.compress.prune.label_tensors import tree_map
from jetforge.compress.prune.records import GraphBuilder, Unsupported
from jetforge.errors import CompressError

log = logging.getLogger(__name__)

_LEAF_TYPES = (nn.modules.conv._ConvNd, nn.Linear, nn.modules.batchnorm._BatchNorm,
               nn.modules.instancenorm._InstanceNorm, nn.GroupNorm, nn.LayerNorm, nn.PReLU)


class _Tracer(fx.Tracer):
    """fx's tracer, except that subclasses of the layers the pruner knows (torchvision's ``Conv3DSimple``
    is an ``nn.Conv3d``) stay whole modules instead of being traced into a functional ``conv3d``."""

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return isinstance(m, _LEAF_TYPES) or super().is_leaf_module(m, qualname)


def _trace(module: nn.Module) -> fx.GraphModule:
    tracer = _Tracer()
    graph = tracer.trace(module)
    return fx.GraphModule(tracer.root, graph, type(module).__name__)


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return (text[0] if text else type(err).__name__)[:200]


def trace_units(b: GraphBuilder, model: nn.Module, inputs: Tuple[Any, ...]) -> None:
    try:
        gm = _trace(model)
    except Exception as err:  # fx raises TraceError, TypeError, AttributeError, ... on dynamic code
        reason = "%s: %s" % (type(err).__name__, _first_line(err))
        log.info("the model does not trace as a whole (%s); tracing its submodules", reason)
        b.untraced.append(Unsupported("<model>", type(model).__name__, "torch.fx cannot trace it (%s); its "
                                      "traceable submodules are pruned with their inputs and outputs kept" % reason))
        _trace_submodules(b, model, inputs)
        return
    b.traced_units.append("")
    LabelInterpreter(b, gm, "").run(inputs, {})


def _trace_submodules(b: GraphBuilder, model: nn.Module, inputs: Tuple[Any, ...]) -> None:
    captured: Dict[str, Tuple[Any, Any]] = {}
    handles = []

    def hook_for(name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, kwargs: Any) -> None:
            if name not in captured:
                clone = lambda t: t.detach().clone()  # noqa: E731 (in-place ops later must not change it)
                captured[name] = (tree_map(clone, args), tree_map(clone, kwargs))
        return hook

    for name, module in model.named_modules():
        if name:
            handles.append(module.register_forward_pre_hook(hook_for(name), with_kwargs=True))
    try:
        with torch.no_grad():
            model(*inputs)
    except Exception as err:
        raise CompressError("the model does not run on the example input: %s" % _first_line(err),
                            hint="pass example_inputs the model accepts (batch axis first)") from err
    finally:
        for h in handles:
            h.remove()

    def prunable_layers(module: nn.Module) -> int:
        return sum(1 for m in module.modules() if isinstance(m, (nn.modules.conv._ConvNd, nn.Linear)))

    def visit(prefix: str, module: nn.Module) -> None:
        for name, child in module.named_children():
            qual = prefix + "." + name if prefix else name
            if prunable_layers(child) < 2:
                continue  # a lone layer between untraced code has its inputs and outputs fixed anyway
            if qual not in captured:
                b.untraced.append(Unsupported(qual, type(child).__name__, "not called on the example input"))
                continue
            try:
                gm = _trace(child)
            except Exception as err:
                b.untraced.append(Unsupported(qual, type(child).__name__, "torch.fx cannot trace it (%s: %s)"
                                              % (type(err).__name__, _first_line(err))))
                visit(qual, child)
                continue
            args, kwargs = captured[qual]
            try:
                LabelInterpreter(b, gm, qual).run(args, kwargs)
            except Exception as err:
                raise CompressError("analysing %s (%s) failed: %s" % (qual, type(child).__name__, _first_line(err)),
                                    hint="protect it with protect=[%r]" % qual) from err
            b.traced_units.append(qual)

    visit("", model)
