"""Multiply-accumulates of an ONNX model, from the estimator's own layer costs (``jetforge info``).

The latency estimator already computes every layer's FLOPs from the shape-inferred graph
(:mod:`jetforge.runtime.estimate.graph`, a multiply-add counted as 2).  A model's "MACs", as papers and model
cards report them, are the multiply-adds of its convolutions, transposed convolutions and matrix products
only; so this module takes the same layers and keeps half the FLOPs of those categories, instead of a second
counter that could disagree with the estimate.  For a convolution that is ``output elements x C_in/groups x
kernel area`` (bias adds not counted), for a GEMM/MatMul ``output elements x K``.

Needs the ``onnx`` package (shape inference); a device install without it gets None and the reason, never a
guess.  Dynamic axes other than the batch must be given (``input_shapes``), as for ``jetforge estimate``.
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence, Set, Union

from jetforge.runtime.estimate.graph import DEPTHWISE_CATEGORIES, TENSOR_CATEGORIES

#: the layer categories whose FLOPs are multiply-adds (the rest: pooling, activations, ... are not MACs)
MAC_CATEGORIES = TENSOR_CATEGORIES + DEPTHWISE_CATEGORIES


@dataclass
class MacCount:
    """Total multiply-adds at ``batch`` and their split by ONNX operator type."""

    total: int
    batch: int
    by_op: Dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        return {"total": self.total, "batch": self.batch, "by_op": dict(self.by_op),
                "counted": "Conv, ConvTranspose, Gemm and MatMul multiply-adds (bias adds not counted)"}


def model_macs(model: Union[str, Path, Any], batch: int = 1,
               input_shapes: Optional[Mapping[str, Sequence[int]]] = None) -> MacCount:
    """The MACs of ``model`` (a path or an ``onnx.ModelProto``) at ``batch``; needs ``onnx``.

    Raises what :func:`jetforge.runtime.estimate.model.batch_shapes` raises for dynamic axes it cannot choose.
    """
    from jetforge.runtime.estimate.fold import fold_constants
    from jetforge.runtime.estimate.graph import graph_info, layers_of
    from jetforge.runtime.estimate.model import batch_shapes, read_model
    from jetforge.runtime.tensorrt.dla.graph import OnnxGraph, load_model

    base = read_model(model)
    proto, _ = load_model(base, batch_shapes(base, batch, input_shapes))
    proto = fold_constants(proto)
    g = OnnxGraph(proto)
    info = graph_info(proto, g)
    folded: Set[int] = {i for i, node in enumerate(proto.graph.node)
                        if node.op_type == "Constant" or (node.output and all(o in g.constant for o in node.output
                                                                              if o))}
    by_op: Dict[str, int] = {}
    for layer in layers_of(proto, g, info, folded):
        if layer.category in MAC_CATEGORIES and layer.flops:
            by_op[layer.op] = by_op.get(layer.op, 0) + int(round(layer.flops / 2.0))
    return MacCount(total=sum(by_op.values()), batch=batch, by_op=by_op)


__all__ = ["MAC_CATEGORIES", "MacCount", "model_macs"]
