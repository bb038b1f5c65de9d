"""Does an ONNX model parse and build with TensorRT?  (TensorRT on a Jetson, TensorRT-RTX on any CPU.)

:func:`check_onnx_builds` parses the file with TensorRT's ``OnnxParser``; every parser error
becomes one line of a :class:`~jetforge.errors.ModelError` (node name, op, reason); then it
builds a serialized engine with default settings and reports what it got.  TensorRT-RTX is
strongly typed (no FP16/INT8 builder flags): precision comes from the ONNX itself, which is
exactly what a Q/DQ model needs to be checked.  Kept thin on purpose: plain data out.
"""

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from jetforge.errors import EngineBuildError, ModelError
from jetforge.runtime.tensorrt import compat
from jetforge.runtime.tensorrt.library import LIBRARY_NAMES, load_tensorrt, module_name
from jetforge.runtime.tensorrt.logger import make_logger

log = logging.getLogger(__name__)


@dataclass
class BuildCheck:
    """The outcome of a successful parse and build."""

    library: str
    version: str
    onnx_path: str
    num_layers: int
    inputs: Dict[str, Tuple[int, ...]]
    outputs: List[str]
    serialized_bytes: int
    parse_seconds: float
    build_seconds: float
    warnings: List[str] = field(default_factory=list)

    @property
    def library_name(self) -> str:
        return LIBRARY_NAMES.get(self.library, self.library)

    def to_dict(self) -> Dict[str, object]:
        return {"library": self.library_name, "version": self.version, "onnx": self.onnx_path,
                "layers": self.num_layers, "inputs": {k: list(v) for k, v in self.inputs.items()},
                "outputs": list(self.outputs), "serialized_bytes": self.serialized_bytes,
                "parse_seconds": round(self.parse_seconds, 3), "build_seconds": round(self.build_seconds, 3),
                "warnings": list(self.warnings)}


def _call(obj, name: str, default=None):
    attr = getattr(obj, name, None)
    if attr is None:
        return default
    try:
        return attr() if callable(attr) else attr
    except Exception:  # pragma: no cover - older bindings
        return default


def parser_errors(parser, onnx_nodes: Optional[Sequence[Tuple[str, str]]] = None) -> List[str]:
    """Every parser error as ``node 'NAME' (OP): reason``."""
    lines = []
    for i in range(parser.num_errors):
        err = parser.get_error(i)
        index = _call(err, "node", -1)
        name = _call(err, "node_name", "") or ""
        op = _call(err, "node_operator", "") or ""
        if onnx_nodes and isinstance(index, int) and 0 <= index < len(onnx_nodes):
            name = name or onnx_nodes[index][0]
            op = op or onnx_nodes[index][1]
        desc = " ".join(str(_call(err, "desc", "")).split())
        where = "node %r (%s)" % (name, op) if (name or op) else "the model"
        lines.append("%s: %s" % (where, desc))
    return lines


def _onnx_nodes(path: Path) -> Optional[List[Tuple[str, str]]]:
    try:
        import onnx
    except ImportError:
        return None
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:
        return None
    return [(n.name, n.op_type) for n in model.graph.node]


def check_onnx_builds(onnx_path, prefer: str = "tensorrt", input_shapes: Optional[Dict[str, Sequence[int]]] = None,
                      build: bool = True) -> BuildCheck:
    """Parse ``onnx_path`` with TensorRT's ONNX parser and build an engine; errors in jetforge's words.

    Dynamic dimensions get a profile with ``input_shapes[name]`` (min = opt = max) or 1.
    """
    from jetforge.runtime.onnx_file import check_onnx_file

    path = check_onnx_file(onnx_path)  # empty, damaged or hollow files get our message, not the parser's
    trt = load_tensorrt(prefer, fallback=True)
    module = module_name(trt)
    label = "%s %s" % (LIBRARY_NAMES[module], trt.__version__)
    logger = make_logger(trt, forward=None)  # kept, not logged: the errors below quote them
    builder = trt.Builder(logger)
    network = builder.create_network(compat.network_flags(trt))
    parser = trt.OnnxParser(network, logger)
    t0 = time.perf_counter()
    ok = parser.parse_from_file(str(path))
    parse_s = time.perf_counter() - t0
    if not ok or parser.num_errors:
        errors = parser_errors(parser, _onnx_nodes(path))
        if not errors:
            errors = logger.errors() or ["no reason given"]
        raise ModelError("%s cannot parse %s: %s" % (label, path.name, "; ".join(errors)),
                         hint="change or remove the named nodes (TensorRT's ONNX operator support: "
                              "https://github.com/onnx/onnx-tensorrt/blob/main/docs/operators.md)")
    inputs: Dict[str, Tuple[int, ...]] = {}
    config = builder.create_builder_config()
    profile = None
    for i in range(network.num_inputs):
        tensor = network.get_input(i)
        shape = tuple(int(d) for d in tensor.shape)
        if any(d < 0 for d in shape):
            given = (input_shapes or {}).get(tensor.name)
            fixed = tuple(int(d) for d in given) if given else tuple(1 if d < 0 else d for d in shape)
            if profile is None:
                profile = builder.create_optimization_profile()
            profile.set_shape(tensor.name, fixed, fixed, fixed)
            shape = fixed
        inputs[tensor.name] = shape
    if profile is not None:
        config.add_optimization_profile(profile)
    outputs = [network.get_output(i).name for i in range(network.num_outputs)]
    result = BuildCheck(library=module, version=str(trt.__version__), onnx_path=str(path),
                        num_layers=int(network.num_layers), inputs=inputs, outputs=outputs, serialized_bytes=0,
                        parse_seconds=parse_s, build_seconds=0.0)
    if build:
        t0 = time.perf_counter()
        serialized = builder.build_serialized_network(network, config)
        result.build_seconds = time.perf_counter() - t0
        if serialized is None:
            errors = logger.errors()
            raise EngineBuildError("%s parsed %s but could not build it: %s"
                                   % (label, path.name, "; ".join(" ".join(e.split()) for e in errors[-5:])
                                      or "no reason given"),
                                   hint="rerun with --debug for TensorRT's log")
        result.serialized_bytes = int(serialized.nbytes)
    result.warnings = [" ".join(m.split()) for m in logger.at_least("WARNING") if m not in logger.errors()][:50]
    log.debug("%s: %d layers, %d bytes", label, result.num_layers, result.serialized_bytes)
    return result
