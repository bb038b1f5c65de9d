"""Tracing for the channel analysis: the whole model with ``torch.fx``, or, where it does not trace, the largest
submodules that do (each run on the inputs it received in a real forward pass, its own inputs and outputs kept).

Both modes are analysed: a model may run code in train mode that eval mode never reaches (inception_v3's
auxiliary classifier reads ``Mixed_6e``'s channels only while training), and fine-tuning a pruned model is
the normal next step, so a tie seen only in train mode must be followed too (:func:`trace_train_mode`).
"""

from __future__ import annotations

import copy
import logging
import re
from typing import Any, Callable, Dict, List, Optional, Tuple

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


def _add_untraced(b: GraphBuilder, entry: Unsupported) -> None:
    if all(u.where != entry.where for u in b.untraced):  # the train-mode pass meets the same modules again
        b.untraced.append(entry)


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return (text[0] if text else type(err).__name__)[:200]


def trace_units(b: GraphBuilder, model: nn.Module, inputs: Tuple[Any, ...]) -> None:
    try:
        gm = _trace(model)
    except Exception as err:  # fx raises TraceError, TypeError, AttributeError, ... on dynamic code
        reason = "%s: %s" % (type(err).__name__, _first_line(err))
        log.info("the model does not trace as a whole (%s); tracing its submodules", reason)
        _add_untraced(b, Unsupported("<model>", type(model).__name__, "torch.fx cannot trace it (%s); its "
                                      "traceable submodules are pruned with their inputs and outputs kept" % reason))
        _trace_submodules(b, model, inputs)
        return
    if "" not in b.traced_units:
        b.traced_units.append("")
    b.signature = graph_signature(gm)
    interpreter = LabelInterpreter(b, gm, "")
    try:
        interpreter.run(inputs, {})
    except Exception as err:
        node = interpreter.current
        where = node.name if node is not None else "?"
        raise CompressError("analysing %s failed at %s (%s): %s" % (type(model).__name__, where,
                                                                    type(err).__name__, _first_line(err)),
                            hint="protect the module there (protect=[NAME]), and please report the model") from err


def graph_signature(gm: fx.GraphModule) -> List[Tuple[Any, ...]]:
    """The traced graph's ops and arguments, with booleans blanked: train and eval mode differ in
    ``training=`` flags (dropout, stochastic depth) that change no channel, and in nothing else for most
    models; a different signature means train mode runs other code, which is then analysed too."""
    position = {n: i for i, n in enumerate(gm.graph.nodes)}  # node names and tensor constants are numbered per
    #                                                            trace, not per graph: compare positions instead

    def strip(value: Any) -> Any:
        return fx.node.map_aggregate(value, lambda v: None if isinstance(v, bool) else
                                     (position[v] if isinstance(v, fx.Node) else v))

    return [(n.op, re.sub(r"_tensor_constant\d+", "_tensor_constant", str(n.target)), strip(n.args),
             strip(n.kwargs)) for n in gm.graph.nodes]


def double_batch(inputs: Tuple[Any, ...]) -> Optional[Tuple[Any, ...]]:
    """The example input with its batch repeated twice (BatchNorm in train mode needs two values per channel),
    or None when it is not a tuple of batched tensors (a detector's list of images)."""
    if not inputs or not all(isinstance(t, torch.Tensor) and t.dim() > 0 for t in inputs):
        return None
    return tuple(torch.cat([t, t]) for t in inputs)


def trace_train_mode(b: GraphBuilder, model: nn.Module, inputs: Tuple[Any, ...]) -> str:
    """Analyse ``model`` in train mode too, on a copy (its BatchNorm statistics move), unless its train-mode graph
    is the eval one; returns what was done, for the report: ``traced``, ``same graph as eval`` or ``not
    traced: why`` (then the pruned model is not checked in train mode either)."""
    batch = double_batch(inputs)
    if batch is None:
        return "not traced: the example input is not a batch of tensors"
    clone = copy.deepcopy(model).train()
    if b.signature is not None:
        try:
            if graph_signature(_trace(clone)) == b.signature:
                return "same graph as eval"
        except Exception:  # noqa: BLE001 -- fx fails in train mode only: trace_units falls back to submodules
            pass
    try:
        with torch.no_grad():
            clone(*batch)
    except Exception as err:  # detectors want targets in train mode, some models refuse a batch of two
        return "not traced: the model does not run in train mode on the example input (%s: %s)" % (
            type(err).__name__, _first_line(err))
    b.second_pass = True
    try:
        trace_units(b, clone, batch)
    except CompressError as err:
        return "not traced: %s" % err.message
    finally:
        b.second_pass = False
    return "traced"


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
                _add_untraced(b, Unsupported(qual, type(child).__name__, "not called on the example input"))
                continue
            try:
                gm = _trace(child)
            except Exception as err:
                _add_untraced(b, Unsupported(qual, type(child).__name__, "torch.fx cannot trace it (%s: %s)"
                                              % (type(err).__name__, _first_line(err))))
                visit(qual, child)
                continue
            args, kwargs = captured[qual]
            try:
                LabelInterpreter(b, gm, qual).run(args, kwargs)
            except Exception as err:
                raise CompressError("analysing %s (%s) failed: %s" % (qual, type(child).__name__, _first_line(err)),
                                    hint="protect it with protect=[%r]" % qual) from err
            if qual not in b.traced_units:
                b.traced_units.append(qual)

    visit("", model)
