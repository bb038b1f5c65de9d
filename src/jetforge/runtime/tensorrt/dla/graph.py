"""The ONNX graph as the DLA analysis (and the latency estimator) reads it: shapes, constants, attributes.

``load_model`` reads and checks a model (through :mod:`jetforge.runtime.onnx_file`), fixes dynamic inputs
to the shapes given and runs ONNX shape inference; :class:`OnnxGraph` then answers what a rule needs: a
tensor's shape, whether it is a build-time constant (initializers, Constant nodes, Shape of a static
tensor, anything computed only from constants), and a constant's value.  ``onnx`` is imported inside
functions.
"""

import logging
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

log = logging.getLogger(__name__)


class OnnxGraph:
    """Shapes, constants and producers of an ONNX graph after shape inference."""

    def __init__(self, model: Any) -> None:
        from onnx import numpy_helper

        graph = model.graph
        self.opset = 13
        for imp in model.opset_import:
            if imp.domain in ("", "ai.onnx"):
                self.opset = int(imp.version)
        self.shapes: Dict[str, Optional[List[Optional[int]]]] = {}
        for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
            self.shapes[vi.name] = tensor_dims(vi)
        self.values: Dict[str, Any] = {}
        for init in graph.initializer:
            self.values[init.name] = numpy_helper.to_array(init)
            self.shapes[init.name] = list(self.values[init.name].shape)
        self.constant: Set[str] = set(self.values)
        self.inputs = [vi.name for vi in graph.input if vi.name not in self.constant]
        self.outputs = [vi.name for vi in graph.output]
        for node in graph.node:
            if node.op_type == "Constant":
                for attr in node.attribute:
                    if attr.name == "value":
                        self.values[node.output[0]] = numpy_helper.to_array(attr.t)
                self.constant.add(node.output[0])
            elif node.op_type == "Identity" and node.input and node.input[0] in self.values:
                self.values[node.output[0]] = self.values[node.input[0]]   # exporters alias shared constants
                self.constant.add(node.output[0])
            elif node.op_type == "Shape" and self.static(node.input[0]):
                self.constant.update(node.output)
            elif node.op_type != "Constant" and [i for i in node.input if i] and \
                    all(i in self.constant for i in node.input if i):
                self.constant.update(node.output)

    def shape(self, name: str) -> Optional[List[Optional[int]]]:
        return self.shapes.get(name)

    def static(self, name: str) -> bool:
        s = self.shapes.get(name)
        return s is not None and all(isinstance(d, int) and d > 0 for d in s)

    def value(self, name: str) -> Any:
        return self.values.get(name) if name else None


def tensor_dims(vi: Any) -> Optional[List[Optional[int]]]:
    t = vi.type
    if not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
        return None
    out: List[Optional[int]] = []
    for d in t.tensor_type.shape.dim:
        out.append(int(d.dim_value) if d.HasField("dim_value") and d.dim_value > 0 else None)
    return out


def node_attrs(node: Any) -> Dict[str, Any]:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def as_str(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def prod(values: Sequence[Optional[int]]) -> int:
    out = 1
    for v in values:
        out *= int(v or 0)
    return out


def conv_pads(attrs: Mapping[str, Any], in_spatial: Optional[Sequence[Optional[int]]], kernel: Sequence[int],
              strides: Sequence[int], dilations: Sequence[int]) -> List[int]:
    """Begin and end paddings per spatial axis, resolving ``auto_pad`` SAME_UPPER/SAME_LOWER/VALID."""
    n = len(kernel)
    auto = as_str(attrs.get("auto_pad", "NOTSET"))
    if auto in ("SAME_UPPER", "SAME_LOWER") and in_spatial and all(in_spatial):
        begin, end = [], []
        for i in range(n):
            size = int(in_spatial[i] or 0)
            out = -(-size // strides[i])
            total = max((out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - size, 0)
            small, big = total // 2, total - total // 2
            begin.append(small if auto == "SAME_UPPER" else big)
            end.append(big if auto == "SAME_UPPER" else small)
        return begin + end
    if auto == "VALID":
        return [0] * (2 * n)
    pads = list(attrs.get("pads", [0] * (2 * n)))
    return [int(p) for p in pads]


def load_model(model: Any, input_shapes: Optional[Mapping[str, Sequence[int]]]) -> Tuple[Any, str]:
    """A checked, shape-inferred copy of ``model`` (a path or a ModelProto) with ``input_shapes`` fixed; its name."""
    from jetforge.optional import require

    from jetforge.runtime.onnx_file import check_model_structure, read_onnx

    purpose = "DLA placement analysis (jetforge dla-check)"
    onnx = require("onnx", purpose)
    if isinstance(model, (str, Path)):
        proto = read_onnx(model, purpose=purpose)  # refuses empty, truncated, foreign and hollow files
        name = str(model)
    else:
        proto = onnx.ModelProto()
        proto.CopyFrom(model)
        name = proto.graph.name or "model"
        check_model_structure(proto, "model %s" % name)
    if input_shapes:
        known = {vi.name: vi for vi in proto.graph.input}
        for iname, dims in input_shapes.items():
            if iname not in known:
                from jetforge.errors import UnknownNameError

                raise UnknownNameError("model input", iname, list(known))
            shape = known[iname].type.tensor_type.shape
            while len(shape.dim) < len(dims):
                shape.dim.add()
            while len(shape.dim) > len(dims):
                shape.dim.pop()
            for d, v in zip(shape.dim, dims):
                d.Clear()
                d.dim_value = int(v)
        del proto.graph.value_info[:]
    try:
        proto = onnx.shape_inference.infer_shapes(proto, strict_mode=False, data_prop=True)
    except Exception as err:  # a partially inferred graph still analyses; say so
        log.warning("ONNX shape inference failed (%s); shapes may be unknown", err)
    return proto, name
