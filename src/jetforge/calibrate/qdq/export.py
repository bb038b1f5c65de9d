"""Explicit quantization: a Q/DQ ONNX built with onnx-graphsurgeon along TensorRT's rules (its developer guide's
explicit-quantization chapter).

* Weighted ops (Conv, ConvTranspose, Gemm, MatMul): the activation input gets a per-tensor
  QuantizeLinear/DequantizeLinear pair with scale ``amax/127``; a constant weight gets a
  per-channel pair with scale ``max|w| / 127`` per output channel -- axis 0 for Conv and for
  Gemm with ``transB=1`` (PyTorch's (out, in) layout), axis 1 for ConvTranspose, for Gemm with
  ``transB=0`` and for MatMul with a constant 2-D second input (K, N).
* Add: both (non-constant) inputs per-tensor, so a residual Add can fuse into the preceding conv.
* Zero points are int8 zeros (TensorRT is symmetric only), scales are positive float32,
  opset >= 13 (per-axis Q/DQ), and biases stay float: TensorRT quantizes them itself, and its
  ONNX parser rejects INT32 bias quantization.
* One Q/DQ pair per tensor feeds all its quantized consumers; other consumers keep the float tensor.

TensorRT >= 10 on the GPU and TensorRT 11 take INT8 only this way; DLA (TensorRT <= 10) takes the
calibration cache instead.
"""

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

import numpy as np

from jetforge.calibrate.cache.format import INT8_BOUND
from jetforge.calibrate.qdq.surgery import unique_name
from jetforge.errors import CalibrationError, ModelError
from jetforge.fileio import PathLike, atomic_output
from jetforge.optional import require

log = logging.getLogger(__name__)

MIN_OPSET = 13
WEIGHTED_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")


@dataclass
class QdqSummary:
    """What :func:`insert_qdq` did."""

    activations: List[str] = field(default_factory=list)
    weights: Dict[str, Tuple[Optional[int], int]] = field(default_factory=dict)  # name -> (axis, n scales)
    skipped: List[str] = field(default_factory=list)
    opset: int = MIN_OPSET

    def to_dict(self) -> Dict[str, object]:
        return {"quantized_activations": len(self.activations), "quantized_weights": len(self.weights),
                "per_channel_weights": sum(1 for a, _ in self.weights.values() if a is not None),
                "skipped_no_range": list(self.skipped), "opset": self.opset}


def weight_axis(op: str, attrs: Dict[str, object], ndim: int) -> Optional[int]:
    """Output-channel axis of a weight for per-channel scales; None means per-tensor."""
    if op == "Conv":
        return 0
    if op == "ConvTranspose":
        return 1
    if op == "Gemm":
        if int(attrs.get("transB", 0)):
            return 0
        return 1
    if op == "MatMul":
        return 1 if ndim == 2 else None
    return None


def weight_scales(w: np.ndarray, axis: Optional[int]) -> np.ndarray:
    """``max|w| / 127`` per channel along ``axis`` (a scalar when axis is None); all-zero channels get 1/127."""
    a = np.abs(np.asarray(w, dtype=np.float32))
    if axis is None:
        amax = np.asarray(a.max() if a.size else 0.0, dtype=np.float32)
    else:
        amax = np.moveaxis(a, axis, 0).reshape(a.shape[axis], -1).max(axis=1)
    amax = np.where(amax > 0, amax, np.float32(1.0))
    return (amax / np.float32(INT8_BOUND)).astype(np.float32)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.:/-]", "_", name)


def _ensure_opset(model, opset: int):
    onnx = require("onnx", "Q/DQ ONNX")
    current = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if current is None or current >= opset:
        return model
    try:
        return onnx.version_converter.convert_version(model, opset)
    except Exception as err:
        raise ModelError("cannot convert the model from opset %s to %d, which per-channel Q/DQ needs: %s"
                         % (current, opset, err), hint="re-export the model with opset >= 13") from err


def _constant_value(tensor, gs) -> Optional[np.ndarray]:
    if isinstance(tensor, gs.Constant):
        return np.asarray(tensor.values)
    if isinstance(tensor, gs.Variable) and len(tensor.inputs) == 1 and tensor.inputs[0].op == "Constant":
        value = tensor.inputs[0].attrs.get("value")
        if isinstance(value, gs.Constant):
            return np.asarray(value.values)
    return None


def _is_float32(tensor) -> bool:
    dtype = getattr(tensor, "dtype", None)
    if dtype is None:
        return True
    try:
        return np.dtype(dtype) == np.float32
    except TypeError:
        return False


class _QdqBuilder:
    """Adds Q/DQ pairs to one onnx-graphsurgeon graph: one pair per activation (shared by its readers), one
    per-channel pair per weight, every new name unique in the graph."""

    def __init__(self, graph, gs, amax: Dict[str, float], summary: QdqSummary) -> None:
        self.graph, self.gs, self.amax, self.summary = graph, gs, amax, summary
        self.used = set(graph.tensors().keys())
        self.dq_of: Dict[str, "object"] = {}

    def unique(self, base: str) -> str:
        return unique_name(base, self.used)

    def _pair(self, source, scale, zp, base: str, shape, attrs: Dict[str, int]):
        gs, unique = self.gs, self.unique
        q_out = gs.Variable(unique(base + "_quantized"), dtype=np.int8, shape=shape)
        dq_out = gs.Variable(unique(base + "_dequantized"), dtype=np.float32, shape=shape)
        self.graph.nodes.append(gs.Node("QuantizeLinear", unique(base + "_QuantizeLinear"), attrs=dict(attrs),
                                        inputs=[source, scale, zp], outputs=[q_out]))
        self.graph.nodes.append(gs.Node("DequantizeLinear", unique(base + "_DequantizeLinear"), attrs=dict(attrs),
                                        inputs=[q_out, scale, zp], outputs=[dq_out]))
        return dq_out

    def activation_dq(self, tensor):
        """The dequantized copy of ``tensor`` (None without a calibrated range)."""
        if tensor.name in self.dq_of:
            return self.dq_of[tensor.name]
        a = self.amax.get(tensor.name)
        if a is None:
            return None
        a = float(a)
        if not np.isfinite(a) or a < 0:
            raise CalibrationError("range of tensor %r is %r" % (tensor.name, a), hint="recalibrate")
        base = _safe(tensor.name)
        scale = self.gs.Constant(self.unique(base + "_scale"), np.array((a if a > 0 else 1.0) / INT8_BOUND,
                                                                        dtype=np.float32))
        zp = self.gs.Constant(self.unique(base + "_zero_point"), np.array(0, dtype=np.int8))
        dq_out = self._pair(tensor, scale, zp, base, tensor.shape, {})
        self.dq_of[tensor.name] = dq_out
        self.summary.activations.append(tensor.name)
        return dq_out

    def weight_dq(self, node, w: np.ndarray, base: str):
        """A per-output-channel Q/DQ pair over the constant weight ``w`` of ``node``."""
        axis = weight_axis(node.op, node.attrs, w.ndim)
        scales = weight_scales(w, axis)
        const_w = self.gs.Constant(self.unique(base + "_weight"), w.astype(np.float32))
        scale = self.gs.Constant(self.unique(base + "_weight_scale"), scales)
        zp = self.gs.Constant(self.unique(base + "_weight_zero_point"), np.zeros(scales.shape, dtype=np.int8))
        dq_out = self._pair(const_w, scale, zp, base + "_weight", list(w.shape), {} if axis is None else {"axis": axis})
        self.summary.weights[base] = (axis, int(scales.size))
        return dq_out

    def quantize_node(self, node) -> None:
        """Q/DQ on the activation inputs of a weighted op or Add, and on a weighted op's constant weight."""
        n_inputs = 1 if node.op in ("Conv", "ConvTranspose") else 2
        for idx in range(min(n_inputs, len(node.inputs))):
            tensor = node.inputs[idx]
            if _constant_value(tensor, self.gs) is not None:
                continue  # a constant: a weight (handled below) or a constant operand, which stays float
            if not _is_float32(tensor):
                continue
            dq = self.activation_dq(tensor)
            if dq is None:
                if tensor.name not in self.summary.skipped:
                    self.summary.skipped.append(tensor.name)
                continue
            node.inputs[idx] = dq
        if node.op in WEIGHTED_OPS and len(node.inputs) > 1:
            value = _constant_value(node.inputs[1], self.gs)
            if value is not None and value.dtype.kind == "f" and value.ndim >= 2:
                node.inputs[1] = self.weight_dq(node, value, _safe(node.name or node.inputs[1].name))


def insert_qdq(model, amax: Dict[str, float], opset: int = MIN_OPSET, quantize_add: bool = True,
               summary: Optional[QdqSummary] = None):
    """A copy of ``model`` (``onnx.ModelProto``) with Q/DQ pairs; ``amax`` maps activation names to ranges."""
    onnx = require("onnx", "Q/DQ ONNX")
    gs = require("onnx_graphsurgeon", "Q/DQ ONNX")
    summary = summary if summary is not None else QdqSummary()
    model = _ensure_opset(model, max(opset, MIN_OPSET))
    graph = gs.import_onnx(model)
    builder = _QdqBuilder(graph, gs, amax, summary)
    for node in list(graph.nodes):
        if node.op in WEIGHTED_OPS or (quantize_add and node.op == "Add"):
            builder.quantize_node(node)
    if summary.skipped:
        log.warning("%d quantizable tensors have no calibrated range and stay float, e.g. %s",
                    len(summary.skipped), summary.skipped[0])
    graph.cleanup().toposort()
    out = gs.export_onnx(graph)
    for o in out.opset_import:
        if o.domain in ("", "ai.onnx") and o.version < opset:
            o.version = opset
    out.ir_version = model.ir_version
    summary.opset = next(o.version for o in out.opset_import if o.domain in ("", "ai.onnx"))
    try:
        onnx.checker.check_model(out)
    except Exception as err:  # pragma: no cover - a bug in the insertion
        raise ModelError("the Q/DQ model fails the ONNX checker: %s" % err) from err
    return out


def save_model(model, path: PathLike) -> Path:
    """Write an ONNX model atomically (external data for models past 1.5 GB)."""
    onnx = require("onnx", "writing ONNX")
    big = model.ByteSize() > 1_500_000_000
    with atomic_output(path, suffix=".onnx") as tmp:
        if big:
            onnx.save(model, str(tmp), save_as_external_data=True, location=Path(path).name + ".data")
        else:
            onnx.save(model, str(tmp))
    return Path(path)


def describe_qdq(model) -> Dict[str, object]:
    """Counts and properties of the Q/DQ nodes of a model (for reports and tests)."""
    onnx = require("onnx", "inspecting ONNX")
    from onnx import numpy_helper

    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    q = [n for n in model.graph.node if n.op_type == "QuantizeLinear"]
    dq = [n for n in model.graph.node if n.op_type == "DequantizeLinear"]
    zero_ok = all(len(n.input) > 2 and n.input[2] in inits and inits[n.input[2]].dtype == np.int8
                  and not inits[n.input[2]].any() for n in q + dq)
    int32 = [n.name for n in dq if n.input[0] in inits and inits[n.input[0]].dtype == np.int32]
    per_channel = [n.name for n in q if any(a.name == "axis" for a in n.attribute)
                   and n.input[1] in inits and inits[n.input[1]].size > 1]
    del onnx
    return {"quantize": len(q), "dequantize": len(dq), "zero_points_int8_zero": zero_ok,
            "int32_dequantize": int32, "per_channel": len(per_channel)}
