"""The one judge of a Q/DQ model's quantisation parameters (scales and zero points), whoever reads them.

``bundle create --qdq`` ships a Q/DQ model for TensorRT to build in INT8; ``qat --translate`` turns one into a
calibration cache; the QAT exporter writes one.  All three must accept the same scales and zero points, or a model
``qat --translate`` refuses is bundled and fails on the board (issue 25: NaN, infinite, zero, negative and
denormal scales and non-zero zero points were bundled).  What TensorRT's explicit quantisation takes, and so what
is accepted here:

* a scale is a constant (an initializer or a Constant node), every value finite, positive and a *normal* float32
  (at least 2^-126: a denormal scale is flushed to zero on the GPU and divides by zero), and ``scale * 127`` -- the
  tensor's range -- a finite float32;
* a zero point, when given, is a constant of zeros (TensorRT quantises symmetrically) and not UINT8 (TensorRT's
  INT8 is signed).

numpy only; the ``onnx`` package is imported inside :func:`qdq_model_problem` (a board without it never calls it).
"""

from typing import Any, Dict, Optional

import numpy as np

QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")
INT8_BOUND = 127
FLOAT32_TINY = float(np.finfo(np.float32).tiny)  # 2^-126, the smallest normal float32
FLOAT32_MAX = float(np.finfo(np.float32).max)


def scale_problem(scale: Any) -> Optional[str]:
    """Why ``scale`` (an array) cannot be a TensorRT Q/DQ scale; None when every value can."""
    values = np.asarray(scale)
    if values.dtype.kind != "f" or values.size == 0:  # ONNX's Q/DQ scales are floats; an int8 1 is no scale
        return "has a scale of %s values (%d of them); scales are floating-point numbers" % (values.dtype, values.size)
    flat = values.astype(np.float64).reshape(-1)
    if not np.all(np.isfinite(flat)):
        return "has a scale that is not finite (NaN or infinite)"
    if not np.all(flat > 0):
        return "has a scale of %g; scales must be positive" % float(flat[flat <= 0][0])
    if not np.all(flat >= FLOAT32_TINY):
        return ("has a denormal scale (%g, below float32's smallest normal number %g): the GPU flushes it to zero"
                % (float(flat[flat < FLOAT32_TINY][0]), FLOAT32_TINY))
    if not np.all(flat * INT8_BOUND <= FLOAT32_MAX):
        return "has a scale whose range (scale x %d) is beyond float32" % INT8_BOUND
    return None


def zero_point_problem(zero_point: Any) -> Optional[str]:
    """Why ``zero_point`` cannot be a TensorRT zero point (None: it can, or there is none)."""
    if zero_point is None:
        return None
    values = np.asarray(zero_point)
    if values.dtype == np.uint8:
        return "is UINT8; TensorRT takes INT8 only"
    if values.size and np.any(values.astype(np.float64) != 0):
        return "has a non-zero zero point; TensorRT and calibration caches are symmetric"
    return None


def qdq_model_problem(model: Any) -> Optional[str]:
    """The first Q/DQ node of ``model`` (an ``onnx.ModelProto``) whose parameters TensorRT cannot take, in words
    that name it; None when all can."""
    from onnx import numpy_helper

    graph = model.graph
    constants: Dict[str, Any] = {t.name: t for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            for attr in node.attribute:
                if attr.name == "value" and attr.HasField("t"):
                    constants[node.output[0]] = attr.t
    for index, node in enumerate(graph.node):
        if node.op_type not in QDQ_OPS or node.domain not in ("", "ai.onnx"):
            continue
        name = "%s %r" % (node.op_type, node.name or "#%d" % index)
        if len(node.input) < 2 or node.input[1] not in constants:
            return "%s has a scale that is not a constant" % name
        problem = scale_problem(numpy_helper.to_array(constants[node.input[1]]))
        if problem is None and len(node.input) > 2 and node.input[2]:
            if node.input[2] not in constants:
                return "%s has a zero point that is not a constant" % name
            problem = zero_point_problem(numpy_helper.to_array(constants[node.input[2]]))
        if problem:
            return "%s %s" % (name, problem)
    return None


__all__ = ["FLOAT32_TINY", "QDQ_OPS", "qdq_model_problem", "scale_problem", "zero_point_problem"]
