"""What the build planner needs from an ONNX file: its I/O tensors and whether it carries Q/DQ nodes.

Read with the ``onnx`` package when it is installed (a workstation); on a Jetson without it the planner
gets None and the same input checks run in the builder on TensorRT's parsed network instead.
"""

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Union

from jetforge.fileio import PathLike

_ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 6: "int32", 7: "int64", 9: "bool", 10: "float16",
                11: "float64", 16: "bfloat16"}


@dataclass
class ModelInfo:
    """What the plan needs from the ONNX file: I/O tensors and whether it carries Q/DQ nodes."""

    inputs: List[Dict[str, Any]]
    outputs: List[Dict[str, Any]]
    has_qdq: bool
    opset: Optional[int] = None


def read_model_info(onnx_path: PathLike) -> Optional[ModelInfo]:
    """I/O names/shapes/dtypes and Q/DQ presence, or None when the ``onnx`` package is absent."""
    try:
        import onnx  # noqa: F401  (optional on a Jetson: TensorRT's parser then checks the inputs)
    except ImportError:
        return None
    from jetforge.runtime.onnx_file import read_onnx

    model = read_onnx(onnx_path, load_external_data=False)  # refuses empty, damaged and hollow models
    inits = {i.name for i in model.graph.initializer}

    def spec(vi: Any) -> Dict[str, Any]:
        tt = vi.type.tensor_type
        shape: List[Union[int, str]] = []
        for d in tt.shape.dim:
            if d.HasField("dim_value") and d.dim_value > 0:
                shape.append(int(d.dim_value))
            else:
                shape.append(d.dim_param or -1)
        return {"name": vi.name, "shape": shape, "dtype": _ONNX_DTYPES.get(tt.elem_type, str(tt.elem_type))}

    has_qdq = any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph.node)
    opset = next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    return ModelInfo([spec(vi) for vi in model.graph.input if vi.name not in inits],
                     [spec(vi) for vi in model.graph.output], has_qdq, opset)


def is_dynamic(shape: Sequence[Any]) -> bool:
    """Whether a shape has a dim that is not a fixed positive number (a name or -1)."""
    return any(not isinstance(d, int) or d < 0 for d in shape)
