"""QAT -> DLA: a Q/DQ ONNX becomes a plain ONNX + a TensorRT calibration cache + the layers to keep in FP16.

DLA through TensorRT <= 10 takes INT8 only from a calibration cache (implicit quantization); it
refuses Q/DQ networks (TensorRT's DLA documentation).  NVIDIA's separate qdq-translator fills that gap; this is
the same translation, built in:

* every activation ``QuantizeLinear`` (per tensor, zero point 0) gives the cache line of the
  tensor it quantizes: scale = the trained ``amax / 127``, bit-exact (float32, big-endian hex);
* weight Q/DQ pairs are dropped -- TensorRT computes weight scales itself as ``max|w| / 127`` per
  output channel, so a weight pair whose scales differ from that is reported (as qdq-translator
  verifies); INT8 weight initializers behind a lone DequantizeLinear are dequantized to float;
* the Q/DQ nodes are removed and their consumers read the float tensor again;
* scales are propagated where TensorRT needs a range that QAT did not place a quantizer on:
  backward from a ReLU/ReLU6 output to the Conv/Add output it activates (TensorRT fuses them; the
  negative side is clipped anyway) and from a MaxPool (2D or 3D) output to its input (max is monotone,
  so quantizing before or after it at one scale gives the same values; a 3D stem's conv -> ReLU ->
  MaxPool3d -> conv gets its stem conv in INT8 this way), forward through range-preserving ops (MaxPool, Reshape,
  Flatten, Transpose, Squeeze/Unsqueeze, Identity, ReLU) and through (Global)AveragePool, whose
  output never exceeds its input (qdq-translator's ``--infer_average_pool_scales``);
* a layer runs INT8 only when all its activation inputs and outputs have a range; every other
  layer is listed to stay FP16 (``trtexec --layerPrecisions=NAME:fp16 --precisionConstraints=obey``).

Pure onnx + numpy (``calibrate`` never imports torch).
"""

import logging
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from jetforge.calibrate.cache.format import DEFAULT_TOKEN, INT8_BOUND, CalibrationCache, float32, stamp_version
from jetforge.errors import CalibrationError, JetforgeError, ModelError
from jetforge.fileio import PathLike, atomic_output, check_not_input, write_json_atomic, write_text_atomic
from jetforge.optional import require
from jetforge.runtime.qdq_scales import scale_problem, zero_point_problem

log = logging.getLogger(__name__)

PASS_THROUGH = ("MaxPool", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Identity", "Relu")
SHRINKING = ("GlobalAveragePool", "AveragePool")
ZERO_FLOOR = ("Relu", "Clip")
BACKWARD = ("MaxPool",)  # q(max(x)) == max(q(x)) at one scale: a MaxPool output's range holds for its input
WEIGHT_RTOL = 1e-3
QDQ_HINT = "re-export the Q/DQ model with INT8 zero points of 0 and calibrated, positive scales (jetforge qat does)"


@dataclass
class QdqTranslation:
    """The plain model, its cache and what could not be INT8."""

    plain: Any  # onnx.ModelProto without Q/DQ
    cache: CalibrationCache
    trained: "OrderedDict[str, float]" = field(default_factory=OrderedDict)   # tensor -> scale from a Q node
    inferred: "OrderedDict[str, Tuple[float, str]]" = field(default_factory=OrderedDict)  # tensor -> (scale, from)
    int8_layers: List[str] = field(default_factory=list)
    fp16_layers: List[str] = field(default_factory=list)
    weight_scale_mismatch: List[str] = field(default_factory=list)
    removed_nodes: int = 0

    def trtexec_args(self) -> List[str]:
        args = ["--int8", "--fp16", "--calib=calib.cache"]
        if self.fp16_layers:
            args += ["--precisionConstraints=obey",
                     "--layerPrecisions=" + ",".join("%s:fp16" % n for n in self.fp16_layers)]
        return args

    def to_dict(self) -> Dict[str, Any]:
        return {"cache": self.cache.to_dict(), "trained_scales": len(self.trained),
                "inferred_scales": {k: {"scale": v[0], "from": v[1]} for k, v in self.inferred.items()},
                "int8_layers": list(self.int8_layers), "fp16_layers": list(self.fp16_layers),
                "weight_scale_mismatch": list(self.weight_scale_mismatch), "removed_qdq_nodes": self.removed_nodes,
                "trtexec": self.trtexec_args()}


def _onnx():
    return require("onnx", "translating a Q/DQ model")


def _load(model: Union[PathLike, Any]):
    onnx = _onnx()
    if hasattr(model, "graph"):
        m = onnx.ModelProto()
        m.CopyFrom(model)
        return m
    from jetforge.runtime.onnx_file import read_onnx

    return read_onnx(model, "Q/DQ model", purpose="translating a Q/DQ model")  # refuses empty, damaged, hollow


def _constants(g) -> Dict[str, np.ndarray]:
    from onnx import numpy_helper

    values = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    for n in g.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            values[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    return values


def _axis(node, ndim: int) -> int:
    for a in node.attribute:
        if a.name == "axis":
            return int(a.i) % max(ndim, 1)
    return 1 % max(ndim, 1)


def _dequantize(q: np.ndarray, scale: np.ndarray, zp: Optional[np.ndarray], axis: int) -> np.ndarray:
    shape = [1] * q.ndim
    if scale.size > 1:
        shape[axis] = scale.size
    s = scale.astype(np.float32).reshape(shape if scale.size > 1 else ())
    z = 0 if zp is None else zp.astype(np.float32).reshape(shape if zp.size > 1 else ())
    return ((q.astype(np.float32) - z) * s).astype(np.float32)


def _zero_floor(node, consts: Dict[str, np.ndarray]) -> bool:
    if node.op_type == "Relu":
        return True
    if node.op_type == "Clip" and len(node.input) > 1 and node.input[1] in consts:
        lo = consts[node.input[1]]
        return lo.size == 1 and float(lo.reshape(-1)[0]) == 0.0
    return False


def _users(nodes) -> Dict[str, List[Any]]:
    users: Dict[str, List[Any]] = {}
    for n in nodes:
        for i in n.input:
            users.setdefault(i, []).append(n)
    return users


def _checked_scale(q, consts: Dict[str, np.ndarray], users: Dict[str, List[Any]]) -> Tuple[np.ndarray, List[Any]]:
    """A QuantizeLinear's scale and its DequantizeLinear readers, refused unless TensorRT can take them."""
    if len(q.input) < 2 or q.input[1] not in consts:
        raise CalibrationError("QuantizeLinear %r has a scale that is not a constant" % q.name,
                               hint="export the Q/DQ model with constant scales (jetforge qat does)")
    zp = consts.get(q.input[2]) if len(q.input) > 2 and q.input[2] else None
    problem = scale_problem(consts[q.input[1]]) or zero_point_problem(zp)  # bundle create --qdq judges alike
    if problem:
        raise CalibrationError("QuantizeLinear %r %s" % (q.name, problem), hint=QDQ_HINT)
    scale = consts[q.input[1]].astype(np.float32)
    dqs = users.get(q.output[0], [])
    if not dqs or any(d.op_type != "DequantizeLinear" for d in dqs):
        raise CalibrationError("QuantizeLinear %r is not followed by DequantizeLinear only; cannot translate"
                               % q.name, hint="give a model in explicit Q/DQ form (Q -> DQ pairs)")
    return scale, dqs


def _weight_scale_matches(q, w: np.ndarray, scale: np.ndarray) -> bool:
    """Whether a weight pair's scale is TensorRT's own max|w|/127 per output channel (it recomputes it)."""
    if scale.size > 1:
        axis = _axis(q, w.ndim)
        amax = np.moveaxis(np.abs(w), axis, 0).reshape(w.shape[axis], -1).max(axis=1)
    else:
        amax = np.array(np.abs(w).max())
    expect = np.where(amax > 0, amax, 1.0).astype(np.float32) / np.float32(INT8_BOUND)
    return not (expect.shape != scale.reshape(-1).shape and scale.size > 1 or
                not np.allclose(scale.reshape(-1), expect.reshape(-1), rtol=WEIGHT_RTOL, atol=0))


def _read_pairs(nodes, consts: Dict[str, np.ndarray]):
    """Every Q -> DQ pair: (DQ output -> tensor it stands for, trained activation scales, weight pairs whose
    scales differ from TensorRT's, ids of the nodes to drop)."""
    users = _users(nodes)
    rename: Dict[str, str] = {}  # DQ output -> float tensor it stands for
    trained: "OrderedDict[str, float]" = OrderedDict()
    mismatch: List[str] = []
    drop = set()
    for q in nodes:
        if q.op_type != "QuantizeLinear":
            continue
        x = q.input[0]
        scale, dqs = _checked_scale(q, consts, users)
        if x in consts:  # a weight pair: TensorRT recomputes max|w|/127 per output channel
            if not _weight_scale_matches(q, consts[x].astype(np.float32), scale):
                mismatch.append(x)
        else:
            if scale.size != 1:
                raise CalibrationError("activation %r is quantized per channel (%d scales); TensorRT activations and "
                                       "calibration caches are per tensor" % (x, scale.size),
                                       hint="quantize activations per tensor")
            s = float(scale.reshape(-1)[0])
            if x in trained and not math.isclose(trained[x], s, rel_tol=1e-6):
                log.warning("tensor %s is quantized with two scales (%g, %g); the larger is used", x, trained[x], s)
                s = max(s, trained[x])
            trained[x] = s
        for d in dqs:
            rename[d.output[0]] = x
            drop.add(id(d))
        drop.add(id(q))
    return rename, trained, mismatch, drop


def _lone_weight_dqs(nodes, consts: Dict[str, np.ndarray], rename: Dict[str, str], drop: set) -> Dict[str, np.ndarray]:
    """Lone DequantizeLinear of INT8 weights (TensorRT 10 style pre-quantized weights) -> float initializers."""
    new_inits: Dict[str, np.ndarray] = {}
    for d in nodes:
        if d.op_type == "DequantizeLinear" and id(d) not in drop and d.input[0] in consts:
            qw = consts[d.input[0]]
            scale = consts.get(d.input[1])
            if scale is None:
                raise CalibrationError("DequantizeLinear %r has a non-constant scale" % d.name)
            zp = consts.get(d.input[2]) if len(d.input) > 2 and d.input[2] else None
            name = d.output[0] + "_float"
            new_inits[name] = _dequantize(qw, scale, zp, _axis(d, qw.ndim))
            rename[d.output[0]] = name
            drop.add(id(d))
        elif d.op_type == "DequantizeLinear" and id(d) not in drop:
            raise CalibrationError("DequantizeLinear %r has no QuantizeLinear before it and no constant input"
                                   % d.name, hint="give a model in explicit Q/DQ form (Q -> DQ pairs)")
    return new_inits


def _strip_pairs(g, nodes, drop: set, rename: Dict[str, str], new_inits: Dict[str, np.ndarray]) -> None:
    """Remove the dropped nodes, rewire their readers to the float tensors, add/prune initializers."""
    from onnx import numpy_helper

    kept = [n for n in nodes if id(n) not in drop]
    for n in kept:
        for k, i in enumerate(n.input):
            while i in rename:
                i = rename[i]
            n.input[k] = i
    for o in g.output:
        if o.name in rename:
            raise CalibrationError("graph output %r comes straight from a DequantizeLinear; cannot translate" % o.name)
    del g.node[:]
    for k, n in enumerate(kept):
        if not n.name:
            n.name = "%s_%d" % (n.op_type, k)
    g.node.extend(kept)
    for name, value in new_inits.items():
        g.initializer.append(numpy_helper.from_array(value, name))
    used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    keep_inits = [i for i in g.initializer if i.name in used]
    del g.initializer[:]
    g.initializer.extend(keep_inits)


def _infer_scales(g, consts: Dict[str, np.ndarray], trained: "OrderedDict[str, float]"):
    """Scales carried through pass-through ops and onto the input of a fused zero-floor activation."""
    scales: "OrderedDict[str, float]" = OrderedDict(trained)
    inferred: "OrderedDict[str, Tuple[float, str]]" = OrderedDict()
    producer = {o: n for n in g.node for o in n.output}
    users = _users(g.node)
    changed = True
    while changed:
        changed = False
        for n in g.node:
            if not n.input or not n.output:
                continue
            x, y = n.input[0], n.output[0]
            if _zero_floor(n, consts) and y in scales and x not in scales and len(users.get(x, [])) == 1 \
                    and x in producer:
                scales[x] = scales[y]
                inferred[x] = (scales[y], "%s output %s (fused activation)" % (n.op_type, y))
                changed = True
            elif n.op_type in BACKWARD and y in scales and x not in scales and len(users.get(x, [])) == 1 \
                    and x in producer:
                scales[x] = scales[y]
                inferred[x] = (scales[y], "%s output %s (max commutes with quantization)" % (n.op_type, y))
                changed = True
            if x in scales and y not in scales and (n.op_type in PASS_THROUGH + SHRINKING or _zero_floor(n, consts)):
                scales[y] = scales[x]
                inferred[y] = (scales[x], "%s input %s" % (n.op_type, x))
                changed = True
    return scales, inferred


def translate_qdq(model: Union[PathLike, Any], trt_version: str = "10.3", algorithm: str = DEFAULT_TOKEN,
                  infer_scales: bool = True) -> QdqTranslation:
    """Translate a Q/DQ model (path or ``onnx.ModelProto``); see the module docstring."""
    version = stamp_version(trt_version)  # a release a JetPack ships, refused before any work
    onnx = _onnx()
    m = _load(model)
    g = m.graph
    consts = _constants(g)
    nodes = list(g.node)
    rename, trained, mismatch, drop = _read_pairs(nodes, consts)
    new_inits = _lone_weight_dqs(nodes, consts, rename, drop)
    if not trained:
        raise CalibrationError("the model has no activation QuantizeLinear nodes; there is nothing to translate",
                               hint="give the Q/DQ ONNX that `jetforge qat` exported (model.qdq.onnx)")
    _strip_pairs(g, nodes, drop, rename, new_inits)
    consts = _constants(g)
    del g.value_info[:]
    if infer_scales:
        scales, inferred = _infer_scales(g, consts, trained)
    else:
        scales, inferred = OrderedDict(trained), OrderedDict()
    float_tensors = _activation_tensors(g, consts)
    int8, fp16 = [], []
    for n in g.node:
        acts = [t for t in list(n.input) + list(n.output) if t and t in float_tensors]
        if n.op_type == "Constant" or not acts:
            continue
        (int8 if acts and all(t in scales for t in acts) else fp16).append(n.name)
    onnx.checker.check_model(m)
    cache = CalibrationCache(scales=OrderedDict((k, float32(v)) for k, v in scales.items()),
                             trt_version=version, algorithm=algorithm)
    if mismatch:
        log.warning("%d weight Q/DQ pairs have scales other than max|w|/127 per channel (e.g. %s); TensorRT's "
                    "implicit INT8 recomputes them", len(mismatch), mismatch[0])
    return QdqTranslation(plain=m, cache=cache, trained=trained, inferred=inferred, int8_layers=int8,
                          fp16_layers=fp16, weight_scale_mismatch=mismatch, removed_nodes=len(drop))


def _activation_tensors(g, consts: Dict[str, np.ndarray]) -> set:
    """Tensors that carry activations (not constants, not shape/index tensors of integer type)."""
    onnx = _onnx()
    names = {i.name for i in g.input} | {o for n in g.node for o in n.output}
    names -= set(consts)
    try:
        inferred = onnx.shape_inference.infer_shapes(onnx.helper.make_model(g))
        types = {v.name: v.type.tensor_type.elem_type for v in list(inferred.graph.value_info)
                 + list(inferred.graph.input) + list(inferred.graph.output)}
    except Exception:  # pragma: no cover - shape inference is a refinement
        types = {}
    floats = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16}
    return {n for n in names if types.get(n, onnx.TensorProto.FLOAT) in floats}


def tensor_names(model) -> List[str]:
    """Every activation tensor name of a (plain) model: graph inputs and node outputs."""
    g = model.graph
    return [i.name for i in g.input] + [o for n in g.node for o in n.output]


def write_translation(result: QdqTranslation, out_dir: PathLike, stem: str = "model",
                      inputs: Tuple[PathLike, ...] = (), sidecar: Any = None) -> Dict[str, Path]:
    """Write ``<stem>.plain.onnx``, ``<stem>.calib`` (the cache), ``<stem>.fp16_layers.txt`` and
    ``<stem>.dla.json`` (the report with the trtexec arguments) into ``out_dir``; with the Q/DQ model's
    ``sidecar``, the plain model gets its own (same task, inputs, input contract and labels; its hash)."""
    onnx = _onnx()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"plain_onnx": out / ("%s.plain.onnx" % stem), "cache": out / ("%s.calib" % stem),
             "fp16_layers": out / ("%s.fp16_layers.txt" % stem), "report": out / ("%s.dla.json" % stem)}
    check_not_input(paths["plain_onnx"], inputs)
    with atomic_output(paths["plain_onnx"], suffix=".onnx") as tmp:
        onnx.save(result.plain, str(tmp))
    result.cache.write(paths["cache"])
    write_text_atomic(paths["fp16_layers"], "".join(n + "\n" for n in result.fp16_layers))
    report = result.to_dict()
    report["trtexec"] = [a.replace("calib.cache", paths["cache"].name) for a in result.trtexec_args()]
    report["files"] = {k: p.name for k, p in paths.items()}
    write_json_atomic(paths["report"], report)
    if sidecar is not None:
        _write_plain_sidecar(sidecar, paths["plain_onnx"], paths["cache"].name)
    return paths


def _write_plain_sidecar(qdq_sidecar: Any, plain_path: Path, cache_name: str) -> None:
    """The plain model is the Q/DQ model without Q/DQ: same inputs, outputs, contract, labels; INT8 comes from the
    cache beside it (bundles, the app and ``jetforge calibrate`` read the sidecar of the file they are given)."""
    from jetforge.runtime.sidecar import ModelSidecar, write_sidecar

    plain = ModelSidecar.from_dict(qdq_sidecar.to_dict())
    plain.extra = dict(plain.extra, precision="fp32", int8_cache=cache_name)
    plain.produced_by = dict(plain.produced_by, translated="Q/DQ removed by jetforge.calibrate.qdq.translate")
    write_sidecar(plain_path, plain)


def translate_file(qdq_path: PathLike, out_dir: Optional[PathLike] = None, trt_version: str = "10.3",
                   algorithm: str = DEFAULT_TOKEN) -> Tuple[QdqTranslation, Dict[str, Path]]:
    """Translate ``qdq_path`` and write the outputs next to it (or into ``out_dir``)."""
    from jetforge.runtime.sidecar import read_sidecar, sidecar_path

    p = Path(qdq_path)
    result = translate_qdq(p, trt_version=trt_version, algorithm=algorithm)
    stem = p.name[:-len(".onnx")] if p.name.endswith(".onnx") else p.stem
    if stem.endswith(".qdq"):
        stem = stem[:-4]
    sidecar = None
    if sidecar_path(p).is_file():
        try:
            sidecar = read_sidecar(p)
        except JetforgeError as err:  # stale (older jetforge qat exports) or damaged: not copied, said so
            log.warning("the plain model gets no sidecar: %s", err)
    paths = write_translation(result, out_dir or p.parent, stem=stem, inputs=(p,), sidecar=sidecar)
    log.info("translated %s: %d trained + %d inferred scales, %d INT8 / %d FP16 layers -> %s", p,
             len(result.trained), len(result.inferred), len(result.int8_layers), len(result.fp16_layers),
             paths["cache"])
    return result, paths


__all__ = ["QdqTranslation", "tensor_names", "translate_file", "translate_qdq", "write_translation"]
