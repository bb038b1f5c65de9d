"""The network: TensorRT's parse of an ONNX file, and what the builder reads back from it.

``OnnxParser.parse_from_file`` fills an ``INetworkDefinition``; a model the parser refuses is one
EngineBuildError quoting the parser's errors.  The same code runs on TensorRT and TensorRT-RTX.
"""

from types import ModuleType
from typing import Any, Dict, Mapping, Tuple

from jetforge.errors import EngineBuildError
from jetforge.runtime.tensorrt import compat
from jetforge.runtime.tensorrt.library import version_string


def network_from_onnx(trt: ModuleType, logger: Any, onnx_path: str) -> Tuple[Any, Any, Any]:
    """``(builder, network, parser)`` for the ONNX file; the parser must stay alive with the network."""
    builder = trt.Builder(logger)
    network = builder.create_network(compat.network_flags(trt))
    parser = trt.OnnxParser(network, logger)
    ok = parser.parse_from_file(str(onnx_path))
    if not ok:
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        raise EngineBuildError("TensorRT %s could not parse %s: %s" % (version_string(trt), onnx_path,
                                                                       "; ".join(errors) or "unknown error"),
                               hint="check the export (opset, unsupported ops) with `jetforge check-onnx`")
    return builder, network, parser


def layers_by_name(network: Any) -> Dict[str, Any]:
    """The network's layers by name (per-layer precisions name them; the build report lists them)."""
    return {network.get_layer(i).name: network.get_layer(i) for i in range(network.num_layers)}


def set_layer_precisions(trt: ModuleType, network: Any, precisions: Mapping[str, str]) -> None:
    """Pin layers to fp32/fp16/int8; a name the network does not have is an EngineBuildError."""
    names = layers_by_name(network)
    missing = [n for n in precisions if n not in names]
    if missing:
        raise EngineBuildError("layer_precisions names layers TensorRT's network does not have: %s"
                               % ", ".join(missing[:5]),
                               hint="use layer names from the build report (e.g. %s)" % ", ".join(list(names)[:3]))
    for name, precision in precisions.items():
        names[name].precision = compat.layer_dtype(trt, precision)
