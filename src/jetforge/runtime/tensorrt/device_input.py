"""Inputs already in GPU memory for a TensorRT session: :class:`DeviceTensor` and the decisions of binding them.

Why apart from :mod:`.session`: these are plain functions of the engine's I/O and the execution context (names,
shapes against the profile, dtype, 256-byte alignment, which addresses changed, the graph key that includes the
addresses a graph bakes in), tested on the CPU with ``FakeTrtContext`` (tests/runtime/trt/test_trt_device_input.py);
the session only calls them.  Also the type of the device *outputs* a session hands a consumer
(``TrtSession.submit_device(..., on_device_outputs=)``).
"""

from dataclasses import dataclass
from typing import Any, Dict, Mapping, Sequence, Tuple

import numpy as np

from jetforge.errors import BackendError, ModelError
from jetforge.runtime.cuda.policy import shape_key
from jetforge.runtime.tensorrt.session_logic import EngineIO, bind_input_shapes, check_input_shape

# TensorRT's setTensorAddress: "The pointer must have at least 256-byte alignment" (cudaMalloc gives 256).
TENSOR_ALIGNMENT = 256


@dataclass(frozen=True)
class DeviceTensor:
    """An input already in GPU memory: a device pointer to a dense row-major array of ``shape`` and ``dtype``
    (a numpy dtype name), valid until the work of the call that takes it has finished."""

    ptr: int
    shape: Tuple[int, ...]
    dtype: str


class DeviceInputBinder:
    """The decisions of a device-input call, as plain logic over the execution context (tested on the CPU).

    ``bind(context, inputs, engine_inputs)`` checks every input (names, shape against the engine and its profile,
    dtype, pointer), sets the input shapes that changed, points the context at the caller's buffers with
    ``set_tensor_address`` (only those that moved) and returns ``(shapes, moved, key)``: ``moved`` says a captured
    graph (which bakes in the old addresses) is stale; ``key`` is the graph key (shapes and addresses).
    ``rebind_own(context, own)`` points the inputs back at the session's own buffers before a host-input call.
    """

    def __init__(self) -> None:
        self.shapes: Dict[str, Tuple[int, ...]] = {}  # what set_input_shape was last given
        self.addresses: Dict[str, int] = {}  # what set_tensor_address was last given

    def bind(self, context: Any, inputs: Mapping[str, DeviceTensor],
             engine_inputs: Sequence[EngineIO]) -> Tuple[Dict[str, Tuple[int, ...]], bool, Any]:
        shapes = check_device_inputs(inputs, engine_inputs)
        changed = bind_input_shapes(context, shapes, self.shapes)
        moved = self.point(context, {name: int(inputs[name].ptr) for name in shapes})
        return shapes, bool(changed) or moved, device_graph_key(shapes, inputs)

    def point(self, context: Any, addresses: Mapping[str, int]) -> bool:
        """``set_tensor_address`` for each tensor whose address differs from the bound one; True if any moved."""
        moved = False
        for name, ptr in sorted(addresses.items()):
            if self.addresses.get(name) == ptr:
                continue
            if not context.set_tensor_address(name, int(ptr)):
                raise BackendError("TensorRT refused the device address 0x%x of tensor %r" % (ptr, name),
                                   hint="the pointer must be device memory of this GPU, %d-byte aligned"
                                        % TENSOR_ALIGNMENT)
            self.addresses[name] = int(ptr)
            moved = True
        return moved

    def rebind_own(self, context: Any, own: Mapping[str, int]) -> bool:
        return self.point(context, own)


def check_device_inputs(inputs: Mapping[str, DeviceTensor],
                        engine_inputs: Sequence[EngineIO]) -> Dict[str, Tuple[int, ...]]:
    """The shapes of a device-input call's inputs, each checked (names, then :func:`check_device_input`)."""
    names = sorted(t.name for t in engine_inputs)
    if sorted(inputs) != names:
        raise ModelError("device inputs %s do not match the engine's inputs %s" % (sorted(inputs), names),
                         hint="pass one DeviceTensor per engine input, by name")
    return {t.name: check_device_input(t, inputs[t.name]) for t in engine_inputs}


def device_graph_key(shapes: Mapping[str, Tuple[int, ...]], inputs: Mapping[str, DeviceTensor]) -> Any:
    """The graph (and context) key of a device-input call: the shapes and the caller's addresses, both of which a
    graph bakes in; it never equals a host call's key (the shapes alone), so each keeps its own context."""
    return shape_key(shapes), tuple(sorted((name, int(inputs[name].ptr)) for name in shapes))


def check_device_input(tensor: EngineIO, value: DeviceTensor) -> Tuple[int, ...]:
    """The shape of a device input after the checks a host feed gets (and those only a pointer needs)."""
    if not isinstance(value, DeviceTensor):
        raise ModelError("device input %r must be a DeviceTensor(ptr, shape, dtype), got %s"
                         % (tensor.name, type(value).__name__))
    shape = tuple(int(d) for d in value.shape)
    check_input_shape(tensor, shape)
    if np.dtype(value.dtype) != np.dtype(tensor.dtype):
        raise ModelError("device input %r is %s but the engine takes %s (nothing converts it on the device)"
                         % (tensor.name, np.dtype(value.dtype).name, tensor.dtype),
                         hint="make the preprocessing kernel write %s (out_dtype)" % tensor.dtype)
    ptr = int(value.ptr)
    if ptr <= 0:
        raise ModelError("device input %r has no device pointer (0)" % tensor.name)
    if ptr % TENSOR_ALIGNMENT:
        raise ModelError("device input %r at 0x%x is not %d-byte aligned, as TensorRT requires"
                         % (tensor.name, ptr, TENSOR_ALIGNMENT),
                         hint="pass the start of a cudaMalloc'ed buffer, or an offset that is a multiple of %d"
                              % TENSOR_ALIGNMENT)
    return shape


__all__ = ["TENSOR_ALIGNMENT", "DeviceInputBinder", "DeviceTensor", "check_device_input", "check_device_inputs",
           "device_graph_key"]
