"""What the build planner needs from an ONNX file: its I/O tensors and whether it carries Q/DQ nodes.

Read from the file's protobuf bytes by :mod:`jetforge.runtime.onnx_wire`, with or without the ``onnx`` package,
so the plan made on a JetPack board (which has no ``onnx``) is the plan made on the workstation.
"""

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

from jetforge.fileio import PathLike
from jetforge.runtime.onnx_wire import read_graph_facts


@dataclass
class ModelInfo:
    """What the plan needs from the ONNX file: I/O tensors and whether it carries Q/DQ nodes."""

    inputs: List[Dict[str, Any]]
    outputs: List[Dict[str, Any]]
    has_qdq: bool
    opset: Optional[int] = None


def read_model_info(onnx_path: PathLike) -> ModelInfo:
    """I/O names/shapes/dtypes, Q/DQ presence and opset of ``onnx_path``, read without the ``onnx`` package.

    :mod:`jetforge.runtime.onnx_wire` reads the protobuf bytes, so a board without ``onnx`` plans exactly as
    the workstation did (a Q/DQ model is recognised as INT8 on both); a damaged or partial model is a ModelError.
    """
    facts = read_graph_facts(onnx_path)
    return ModelInfo(facts.inputs, facts.outputs, facts.has_qdq, facts.opset)


def is_dynamic(shape: Sequence[Any]) -> bool:
    """Whether a shape has a dim that is not a fixed positive number (a name or -1)."""
    return any(not isinstance(d, int) or d < 0 for d in shape)
