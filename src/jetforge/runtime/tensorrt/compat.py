"""Version differences between the TensorRT builds jetforge drives: JetPack's 8.5/8.6/10.x, 11, and TensorRT-RTX.

Everything that depends on *which* TensorRT is imported lives here, as small functions of the
module object, so that :mod:`jetforge.runtime.tensorrt.builder` reads as one code path:

* network creation flags: ``EXPLICIT_BATCH`` before 10 (deprecated in 10.0, implicit batch removed),
  none from 10, ``STRONGLY_TYPED`` on 11 (TensorRT 11 networks are strongly typed);
* precision builder flags (FP16/INT8) exist on 8.x/10.x only: TensorRT 11 removed them and TensorRT-RTX
  has none (its networks are strongly typed);
* DLA (device types, DLA core, GPU fallback) and the INT8 calibrator are JetPack-TensorRT features
  that TensorRT-RTX lacks.
"""

from types import ModuleType
from typing import Any, Dict, List, Optional, Tuple

from jetforge.runtime.tensorrt.library import is_rtx
from jetforge.runtime.tensorrt.version import TensorRTVersion

DTYPE_NAMES = {"FLOAT": "float32", "HALF": "float16", "BF16": "bfloat16", "INT8": "int8", "INT32": "int32",
               "INT64": "int64", "BOOL": "bool", "UINT8": "uint8", "FP8": "float8", "INT4": "int4", "FP4": "float4"}
PRECISION_DTYPES = {"fp32": "FLOAT", "fp16": "HALF", "int8": "INT8"}


def major(trt: ModuleType) -> int:
    return TensorRTVersion.of_module(trt).major


def network_flags(trt: ModuleType) -> int:
    """Flags for ``builder.create_network``."""
    if is_rtx(trt):
        return 0
    m = major(trt)
    if m < 10:
        return 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    if m >= 11 and hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED"):
        return 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    return 0


def has_precision_flags(trt: ModuleType) -> bool:
    """Whether BuilderFlag.FP16/INT8 exist (8.x and 10.x; not 11, not TensorRT-RTX)."""
    return hasattr(trt.BuilderFlag, "FP16") and hasattr(trt.BuilderFlag, "INT8") and not is_rtx(trt)


def supports_dla(trt: ModuleType) -> bool:
    """Whether this TensorRT can target DLA through the builder (JetPack TensorRT 8.x/10.x)."""
    return (not is_rtx(trt)) and hasattr(trt, "DeviceType") and hasattr(trt.BuilderFlag, "GPU_FALLBACK") \
        and major(trt) < 11


def has_calibrator(trt: ModuleType) -> bool:
    """Whether TensorRT takes an INT8 calibrator (implicit INT8: JetPack 8.x/10.x, not 11, not TensorRT-RTX)."""
    return hasattr(trt, "IInt8EntropyCalibrator2") and not is_rtx(trt)


def supports_layer_precision(trt: ModuleType) -> bool:
    return has_precision_flags(trt)


def builder_flag(trt: ModuleType, name: str) -> Optional[Any]:
    return getattr(trt.BuilderFlag, name, None)


def memory_pool(trt: ModuleType, name: str) -> Optional[Any]:
    """``"workspace"`` / ``"dla_managed_sram"`` ... -> the MemoryPoolType member, None if absent."""
    return getattr(trt.MemoryPoolType, name.upper(), None)


def enum_name(value: Any) -> str:
    """``trt.DataType.HALF`` -> ``"HALF"`` (pybind11 enums have ``.name``; str() gives ``DataType.HALF``)."""
    name = getattr(value, "name", None)
    return str(name) if name else str(value).split(".")[-1]


def dtype_name(dtype: Any) -> str:
    text = enum_name(dtype)
    return DTYPE_NAMES.get(text, text.lower())


def layer_dtype(trt: ModuleType, precision: str) -> Any:
    return getattr(trt.DataType, PRECISION_DTYPES[precision])


def network_io(network: Any) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """Inputs and outputs of a parsed network as ``{"name", "shape", "dtype"}`` (-1 for dynamic)."""
    def spec(t: Any) -> Dict[str, Any]:
        return {"name": t.name, "shape": [int(d) for d in t.shape], "dtype": dtype_name(t.dtype)}

    return ([spec(network.get_input(i)) for i in range(network.num_inputs)],
            [spec(network.get_output(i)) for i in range(network.num_outputs)])


def engine_io(trt: ModuleType, engine: Any) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """Engine I/O through the named-tensor API (8.5+)."""
    inputs, outputs = [], []
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        spec = {"name": name, "shape": [int(d) for d in engine.get_tensor_shape(name)],
                "dtype": dtype_name(engine.get_tensor_dtype(name))}
        (inputs if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT else outputs).append(spec)
    return inputs, outputs
