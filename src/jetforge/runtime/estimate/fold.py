"""Fold what TensorRT folds at build time, so that ONNX shape inference can see through it.

Exporters compute paddings, reshape targets and slice bounds at run time from ``Shape`` of a
tensor (``F.pad`` with a size-dependent padding, ``x.view(x.size(0), -1)``).  ONNX shape inference
stops at such a node: everything behind it has unknown dimensions, and an estimate would count
no FLOPs there.  With the input shapes fixed, these subgraphs are constants: this pass replaces
``Shape`` of a statically shaped tensor by its value and evaluates every node whose inputs are
all constants (ONNX's reference implementation, numpy only), then infers shapes again, until
nothing changes -- what TensorRT's own constant folding does when it builds the engine.
"""

from typing import Any, Dict, List, Optional

_NONDETERMINISTIC = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                     "Bernoulli"}
_MAX_FOLD_ELEMS = 1 << 22      # never materialise a constant larger than 4M elements (a weight transform)


def _static_shapes(graph: Any) -> Dict[str, List[int]]:
    out: Dict[str, List[int]] = {}
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
            continue
        dims = vi.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") and d.dim_value > 0 for d in dims):
            out[vi.name] = [int(d.dim_value) for d in dims]
        elif len(dims) == 0:
            out[vi.name] = []
    return out


def _shape_value(node: Any, shape: List[int]) -> Any:
    import numpy as np
    from onnx import helper

    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    start, end = int(attrs.get("start", 0)), attrs.get("end")
    return np.array(shape[start:None if end is None else int(end)], dtype=np.int64)


def _predicted_elems(node: Any, values: Dict[str, Any], shapes: Dict[str, List[int]]) -> Optional[int]:
    """How many elements evaluating ``node`` would build, where that is known without building it; else None.

    Checked before evaluating: a graph of 1,500 ``ConstantOfShape`` nodes each declaring a huge tensor took minutes
    when every tensor was built first and only then found too large (issue 25).
    """
    import numpy as np

    known = [shapes[t] for t in node.output if t and t in shapes]
    if known and len(known) == len([t for t in node.output if t]):
        return max(int(np.prod(s, dtype=np.float64)) if s else 1 for s in known)
    op, ins = node.op_type, [t for t in node.input]
    try:
        if op == "ConstantOfShape" and ins and ins[0] in values:
            dims = np.asarray(values[ins[0]], dtype=np.float64).ravel()
            return int(np.prod(np.maximum(dims, 0))) if dims.size else 1
        if op == "Expand" and len(ins) > 1 and ins[0] in values and ins[1] in values:
            shape = np.broadcast_shapes(np.shape(values[ins[0]]), tuple(int(d) for d in np.ravel(values[ins[1]])))
            return int(np.prod(shape, dtype=np.float64))
        if op == "Tile" and len(ins) > 1 and ins[0] in values and ins[1] in values:
            return int(np.size(values[ins[0]]) * np.prod(np.asarray(values[ins[1]], dtype=np.float64)))
        if op == "Range" and len(ins) > 2 and all(t in values for t in ins[:3]):
            start, limit, delta = (float(np.asarray(values[t]).ravel()[0]) for t in ins[:3])
            return int(max(0.0, np.ceil((limit - start) / delta))) if delta else None
    except (ValueError, TypeError, OverflowError, IndexError):  # malformed: let the evaluator decline it
        return None
    return None


def _evaluate(node: Any, values: Dict[str, Any], opsets: List[Any]) -> List[Any]:
    """Run one node on constant inputs with ONNX's reference evaluator."""
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    names = [t for t in node.input if t]
    inputs = [helper.make_tensor_value_info(t, numpy_helper.from_array(values[t]).data_type, None) for t in names]
    outputs = [helper.make_tensor_value_info(t, 0, None) for t in node.output if t]
    model = helper.make_model(helper.make_graph([node], "fold", inputs, outputs), opset_imports=opsets)
    return list(ReferenceEvaluator(model).run(None, {t: values[t] for t in names}))


def fold_constants(proto: Any, max_rounds: int = 6) -> Any:
    """``proto`` (shape-inferred, static inputs) with build-time constant subgraphs folded, shapes re-inferred."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    for _ in range(max_rounds):
        graph = proto.graph
        values: Dict[str, Any] = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
        shapes = _static_shapes(graph)
        keep, added = [], []
        for node in graph.node:
            result = None
            if node.domain not in ("", "ai.onnx") or node.op_type in _NONDETERMINISTIC or \
                    any(a.type in (5, 10) for a in node.attribute):      # GRAPH / GRAPHS attributes (If, Loop)
                keep.append(node)
                continue
            inputs = [t for t in node.input if t]
            try:
                if node.op_type == "Shape" and node.input[0] in shapes:
                    result = [_shape_value(node, shapes[node.input[0]])]
                elif node.op_type == "Size" and node.input[0] in shapes:
                    result = [np.array(int(np.prod(shapes[node.input[0]])), dtype=np.int64)]
                elif node.op_type == "Constant" or (inputs and all(t in values for t in inputs)):
                    predicted = _predicted_elems(node, values, shapes)
                    if predicted is None or predicted <= _MAX_FOLD_ELEMS:
                        result = _evaluate(node, values, list(proto.opset_import))
            except Exception:  # an op the reference evaluator does not run: leave it to the engine
                result = None
            if result is None or any(np.asarray(r).size > _MAX_FOLD_ELEMS for r in result):
                keep.append(node)
                continue
            for name, value in zip([t for t in node.output if t], result):
                values[name] = np.asarray(value)
                added.append(numpy_helper.from_array(np.asarray(value), name))
        if not added:
            return proto
        del graph.node[:]
        graph.node.extend(keep)
        graph.initializer.extend(added)
        produced = {t for n in keep for t in n.output}
        for vi in [vi for vi in graph.value_info if vi.name not in produced]:
            graph.value_info.remove(vi)
        try:
            proto = onnx.shape_inference.infer_shapes(proto, strict_mode=False, data_prop=True)
        except Exception:  # keep what was folded; shapes stay as far as inference got
            return proto
    return proto


__all__ = ["fold_constants"]
