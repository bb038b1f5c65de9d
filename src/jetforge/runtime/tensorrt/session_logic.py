"""The decisions of a TensorRT session, as plain functions of TensorRT's objects.

dtype mapping, I/O discovery (named-tensor API, TensorRT >= 8.5), shape checks against the engine's
optimization profile, shape binding, output shapes, buffer sizing, the DLA core to deserialize on,
the engine's sidecar, and whether to try CUDA graphs at all.
:class:`~jetforge.runtime.tensorrt.session.TrtSession` wires them to TensorRT and CUDA; here they are
tested on the CPU with ``FakeTrtContext``/``FakeTrtEngine`` (tests/runtime/trt/test_trt_session_logic.py).
Nothing here imports tensorrt.
"""

import logging
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from jetforge.errors import BackendError, ConfigError, ModelError
from jetforge.jsonfile import read_json
from jetforge.runtime.sidecar import ModelSidecar, TensorSpec, sidecar_path
from jetforge.runtime.tensorrt.compat import DTYPE_NAMES, enum_name
from jetforge.runtime.tensorrt.engine_sidecar import read_engine_sidecar
from jetforge.runtime.tensorrt.version import major_of

log = logging.getLogger(__name__)

TRT_DTYPES = {"FLOAT": "float32", "HALF": "float16", "INT8": "int8", "INT32": "int32", "INT64": "int64",
              "BOOL": "bool", "UINT8": "uint8"}


def numpy_dtype(trt_dtype: Any, tensor: str = "") -> str:
    """The numpy dtype name of a TensorRT data type; a type numpy cannot hold is a ModelError."""
    name = enum_name(trt_dtype)
    if name not in TRT_DTYPES:
        raise ModelError("engine tensor %r has TensorRT type %s, which numpy cannot hold" % (tensor, name),
                         hint="rebuild the engine with FP32, FP16, INT8, INT32 or BOOL inputs and outputs")
    return TRT_DTYPES[name]


def dims(shape: Any) -> Tuple[int, ...]:
    """A TensorRT ``Dims`` (or any sequence) as a tuple of ints."""
    return tuple(int(d) for d in shape)


class EngineIO:
    """One I/O tensor of an engine: name, input or output, shape (-1 = dynamic), dtype, profile range."""

    def __init__(self, name: str, is_input: bool, shape: Tuple[int, ...], dtype: str,
                 profile: Optional[Tuple[Tuple[int, ...], Tuple[int, ...], Tuple[int, ...]]] = None) -> None:
        self.name = name
        self.is_input = is_input
        self.shape = shape
        self.dtype = dtype
        self.profile = profile  # (min, opt, max) of optimization profile 0, for dynamic inputs

    @property
    def spec(self) -> TensorSpec:
        return TensorSpec(name=self.name, shape=list(self.shape), dtype=self.dtype)

    @property
    def max_shape(self) -> Tuple[int, ...]:
        """The largest shape this tensor can take (profile max for a dynamic input, else the shape)."""
        if self.profile is not None:
            return self.profile[2]
        return self.shape

    def __repr__(self) -> str:
        return "EngineIO(%r, %s, %s, %s)" % (self.name, "input" if self.is_input else "output", self.shape, self.dtype)


def engine_io(engine: Any) -> List[EngineIO]:
    """The engine's I/O tensors in engine order (named-tensor API; TensorRT >= 8.5)."""
    tensors = []
    for i in range(int(engine.num_io_tensors)):
        name = str(engine.get_tensor_name(i))
        mode = enum_name(engine.get_tensor_mode(name))
        if mode not in ("INPUT", "OUTPUT"):
            continue
        is_input = mode == "INPUT"
        shape = dims(engine.get_tensor_shape(name))
        check_linear_format(engine, name)
        profile = None
        if is_input and any(d < 0 for d in shape):
            # get_tensor_profile_shape(name, profile_index) -> [min, opt, max]
            lo, opt, hi = engine.get_tensor_profile_shape(name, 0)
            profile = (dims(lo), dims(opt), dims(hi))
        tensors.append(EngineIO(name, is_input, shape, numpy_dtype(engine.get_tensor_dtype(name), name), profile))
    if not any(t.is_input for t in tensors) or not any(not t.is_input for t in tensors):
        raise ModelError("engine has %d inputs and %d outputs; a session needs at least one of each"
                         % (sum(t.is_input for t in tensors), sum(not t.is_input for t in tensors)))
    return tensors


def check_linear_format(engine: Any, name: str) -> None:
    """Refuse vectorized I/O formats (CHW32, DLA HWC4...): jetforge feeds dense row-major (linear) arrays."""
    getter = getattr(engine, "get_tensor_format", None)
    if getter is None:
        return
    fmt = enum_name(getter(name))
    if fmt != "LINEAR":
        raise ModelError("engine tensor %r uses the %s I/O format; jetforge sessions feed dense (LINEAR) arrays"
                         % (name, fmt),
                         hint="rebuild the engine without --inputIOFormats/--outputIOFormats (TensorRT then "
                              "reformats on the device)")


def check_input_shape(tensor: EngineIO, shape: Tuple[int, ...]) -> None:
    """A ModelError if ``shape`` does not fit the engine's static dims or its optimization profile."""
    if len(shape) != len(tensor.shape):
        raise ModelError("input %r of the engine has %d dimensions, got shape %s"
                         % (tensor.name, len(tensor.shape), shape))
    for axis, (want, got) in enumerate(zip(tensor.shape, shape)):
        if want >= 0 and want != got:
            raise ModelError("input %r of the engine expects %s, got %s (axis %d)" % (tensor.name, tensor.shape,
                                                                                        shape, axis))
    if tensor.profile is not None:
        lo, _, hi = tensor.profile
        if any(g < a or g > b for g, a, b in zip(shape, lo, hi)):
            raise ModelError("input %r shape %s is outside the engine's optimization profile %s..%s"
                             % (tensor.name, shape, lo, hi),
                             hint="rebuild the engine with a profile that covers this shape")


def bind_input_shapes(context: Any, shapes: Mapping[str, Tuple[int, ...]],
                      bound: Dict[str, Tuple[int, ...]]) -> List[str]:
    """``context.set_input_shape`` for each input whose shape differs from ``bound``; returns the changed names.

    ``bound`` (name -> shape last set) is updated in place.  A shape TensorRT refuses
    (``set_input_shape`` returns False) is a ModelError.
    """
    changed = []
    for name, shape in shapes.items():
        shape = tuple(int(d) for d in shape)
        if bound.get(name) == shape:
            continue
        if context.set_input_shape(name, shape) is False:
            raise ModelError("TensorRT refused input shape %s for %r" % (shape, name),
                             hint="check the shape against the engine's optimization profile")
        bound[name] = shape
        changed.append(name)
    return changed


def resolve_output_shapes(context: Any, outputs: Sequence[EngineIO]) -> Dict[str, Tuple[int, ...]]:
    """Output shapes once the input shapes are set; a data-dependent (-1) output is a ModelError."""
    shapes = {}
    for tensor in outputs:
        shape = dims(context.get_tensor_shape(tensor.name))
        if any(d < 0 for d in shape):
            raise ModelError("output %r has a data-dependent shape %s; jetforge sessions need outputs whose "
                             "shape follows from the input shapes" % (tensor.name, shape),
                             hint="make the output shape static (e.g. pad detections to a fixed count)")
        shapes[tensor.name] = shape
    return shapes


def required_bytes(shapes: Mapping[str, Tuple[int, ...]], dtypes: Mapping[str, str]) -> Dict[str, int]:
    """Bytes of each tensor at its current shape."""
    out = {}
    for name, shape in shapes.items():
        count = 1
        for d in shape:
            count *= int(d)
        out[name] = count * np.dtype(dtypes[name]).itemsize
    return out


def buffers_to_grow(required: Mapping[str, int], capacity: Mapping[str, int]) -> Dict[str, int]:
    """Tensors whose buffers must be (re)allocated, with their new size: missing or too small.

    Buffers only grow (a smaller shape reuses the buffer), so that tensor addresses -- which a
    captured CUDA graph bakes in -- stay fixed as long as possible.  Sizes are rounded up to
    256 bytes (CUDA's allocation granularity for alignment).
    """
    grow = {}
    for name, need in required.items():
        if capacity.get(name, -1) < need:
            grow[name] = max(256, (int(need) + 255) // 256 * 256)
    return grow


def initial_buffer_sizes(tensors: Sequence[EngineIO]) -> Dict[str, int]:
    """Input buffers sized at the profile's max shape up front (outputs are sized at the first call)."""
    return {t.name: required_bytes({t.name: t.max_shape}, {t.name: t.dtype})[t.name] for t in tensors if t.is_input}


def initial_output_sizes(context: Any, tensors: Sequence[EngineIO], bound: Dict[str, Tuple[int, ...]]) -> Dict[str, int]:
    """Output buffers sized for the inputs' profile max up front, like the inputs, so that no buffer moves later.

    Why: a CUDA graph bakes in the buffers' addresses and a session keeps several graphs; an output buffer that
    grew at a larger batch would invalidate all of them.  The max shapes are set on ``context`` (``bound`` records
    them, as :func:`bind_input_shapes`).  An output whose size TensorRT cannot tell here (data-dependent) gets {}:
    the first call sizes it, and reports what it must.  Buffers still grow at a call if an output needs more.
    """
    outputs = [t for t in tensors if not t.is_input]
    try:
        bind_input_shapes(context, {t.name: t.max_shape for t in tensors if t.is_input}, bound)
        shapes = resolve_output_shapes(context, outputs)
    except ModelError as err:
        log.debug("outputs sized at the first call: %s", err.message)
        return {}
    return required_bytes(shapes, {t.name: t.dtype for t in outputs})


def resolve_dla_core(requested: Optional[int], sidecar_core: Optional[int], sidecar_device: Optional[str],
                     num_dla_cores: int) -> Optional[int]:
    """The DLA core to set on ``runtime.DLA_core`` before deserializing, or None for a GPU engine.

    ``requested`` overrides the core recorded at build time (an engine built for DLA runs on
    either core of the same board).  Errors name the fix: no DLA on this machine, a core
    number that does not exist, a GPU engine asked to run on DLA.
    """
    if requested is not None:
        if isinstance(requested, bool) or not isinstance(requested, int) or requested < 0:
            raise ConfigError("dla_core must be a DLA core number (0 or 1), got %r" % (requested,))
        if sidecar_device == "gpu":
            raise ConfigError("this engine was built for the GPU; dla_core=%d does not apply" % requested,
                              hint="build a DLA engine (`jetforge build --dla-core %d`), or drop dla_core" % requested)
    core = requested if requested is not None else sidecar_core
    if core is None:
        return None
    if num_dla_cores <= 0:
        raise BackendError("the engine runs on DLA core %d but this machine has no DLA" % core,
                           hint="DLA exists on Jetson AGX Orin, Orin NX and Xavier; rebuild for the GPU elsewhere")
    if core >= num_dla_cores:
        raise ConfigError("DLA core %d does not exist; this machine has %d (0..%d)" % (core, num_dla_cores,
                                                                                       num_dla_cores - 1))
    return core


def load_engine_sidecar(path: Path, verify: bool, tensorrt_version: Optional[str]) -> Any:
    """The engine's sidecar (``model.engine.json``) or None when it has none (e.g. an engine from trtexec).

    Uses :mod:`jetforge.runtime.tensorrt.engine_sidecar` (which checks the content hash and the
    TensorRT version); a sidecar that is not in its format but holds ``inputs``/``outputs``
    is read as a plain description.
    """
    if not sidecar_path(path).is_file():
        log.warning("%s has no sidecar %s: tensor specs come from the engine, preprocessing is unknown",
                    path.name, sidecar_path(path).name)
        return None
    try:
        return read_engine_sidecar(path, verify_hash=verify, tensorrt_version=tensorrt_version)
    except ModelError as err:
        if "is not an engine sidecar" not in err.message:
            raise

    data = read_json(sidecar_path(path), "engine sidecar", ModelError, hint="rebuild the engine")
    return PlainEngineSidecar(data)


class PlainEngineSidecar:
    """A sidecar given as a plain dict (``inputs``, ``outputs``, optional ``preprocess``/``dla_core``)."""

    def __init__(self, data: Dict[str, Any]) -> None:
        try:
            self.inputs = [TensorSpec.from_dict(t) for t in data.get("inputs", [])]
            self.outputs = [TensorSpec.from_dict(t) for t in data.get("outputs", [])]
        except (KeyError, TypeError) as err:
            raise ModelError("engine sidecar is malformed: %s" % err, hint="rebuild the engine") from err
        self.dla_core = data.get("dla_core")
        self.device = data.get("device")
        # its model facts, read like a model sidecar of format 1 (``preprocess``, ``extra.clip``) or 2 (``input``)
        facts = {"format": 1, "task": data.get("task", "other"), "inputs": data.get("inputs", []),
                 "outputs": data.get("outputs", []), "labels": data.get("labels", []), "extra": data.get("extra", {}),
                 "preprocess": data.get("preprocess"), "input": data.get("input")}
        self.model = ModelSidecar.from_dict(facts, where="engine sidecar")
        self.preprocess, self.labels, self.task = self.model.preprocess, list(self.model.labels), self.model.task


def initial_graph_state(requested: bool, dla_core: Optional[int], tensorrt_version: str) -> Tuple[bool, str]:
    """Whether a TensorRT session should try graphs at all: (enabled, reason when not).

    TensorRT 8.x engines on DLA fail capture on Orin (NVIDIA/TensorRT#3524, TRT 8.5.2 on
    JetPack 5): skip the attempt.  On TensorRT 10 with DLA the capture is tried and a
    failure falls back to plain enqueue.
    """
    if not requested:
        return False, ""
    if dla_core is not None:
        if major_of(tensorrt_version) < 10:
            return False, ("DLA engines cannot be captured into CUDA graphs on TensorRT %s "
                           "(NVIDIA/TensorRT#3524); plain enqueue" % tensorrt_version)
    return True, ""
