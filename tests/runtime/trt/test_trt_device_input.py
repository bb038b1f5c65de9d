"""The TensorRT session's device-pointer input (the GPU video path binds the preprocessing kernel's output buffer
with set_tensor_address): every decision of DeviceInputBinder on the CPU, against a recording FakeTrtContext.

The CUDA half (TrtSession.submit_device: the producer-stream event, execute_async_v3, the output copies) needs
TensorRT on a GPU and is not executed here.
"""

import pytest

from jetforge.errors import BackendError, ModelError
from jetforge.runtime.tensorrt.session import TENSOR_ALIGNMENT, DeviceInputBinder, DeviceTensor, check_device_input
from jetforge.runtime.tensorrt.session_logic import EngineIO

PROFILE = ((1, 3, 224, 224), (4, 3, 224, 224), (8, 3, 224, 224))
INPUT = EngineIO("input", True, (-1, 3, 224, 224), "float16", PROFILE)
BUF = 0x7F0000000000  # a cudaMalloc-like address (256-byte aligned)


class FakeTrtContext:
    """Records the IExecutionContext calls the binder makes; can refuse an address like TensorRT does."""

    def __init__(self, refuse=()):
        self.calls = []
        self.refuse = set(refuse)

    def set_input_shape(self, name, shape):
        self.calls.append(("set_input_shape", name, tuple(shape)))
        return True

    def set_tensor_address(self, name, ptr):
        self.calls.append(("set_tensor_address", name, ptr))
        return ptr not in self.refuse


def _x(batch, ptr=BUF, dtype="float16"):
    return {"input": DeviceTensor(ptr, (batch, 3, 224, 224), dtype)}


def test_binds_shape_and_address_once_and_only_what_changed():
    ctx, binder = FakeTrtContext(), DeviceInputBinder()
    shapes, moved, key = binder.bind(ctx, _x(4), [INPUT])
    assert shapes == {"input": (4, 3, 224, 224)} and moved
    assert ctx.calls == [("set_input_shape", "input", (4, 3, 224, 224)), ("set_tensor_address", "input", BUF)]
    ctx.calls.clear()
    _, moved_again, key_again = binder.bind(ctx, _x(4), [INPUT])  # the same buffer every batch: nothing to do
    assert ctx.calls == [] and not moved_again and key_again == key  # so a captured graph stays valid
    _, moved, key2 = binder.bind(ctx, _x(4, BUF + 4 * TENSOR_ALIGNMENT), [INPUT])
    assert ctx.calls == [("set_tensor_address", "input", BUF + 1024)] and moved and key2 != key
    ctx.calls.clear()
    _, moved, key3 = binder.bind(ctx, _x(8, BUF + 1024), [INPUT])
    assert ctx.calls == [("set_input_shape", "input", (8, 3, 224, 224))] and moved and key3 not in (key, key2)


def test_host_call_after_a_device_call_points_the_input_back_at_the_sessions_buffer():
    ctx, binder = FakeTrtContext(), DeviceInputBinder()
    own = BUF + (1 << 20)
    assert binder.rebind_own(ctx, {"input": own})  # the session's own buffer, as _allocate binds it
    binder.bind(ctx, _x(2), [INPUT])
    ctx.calls.clear()
    assert binder.rebind_own(ctx, {"input": own}) is True
    assert ctx.calls == [("set_tensor_address", "input", own)]
    assert binder.rebind_own(ctx, {"input": own}) is False  # already there: graphs of host calls stay valid


@pytest.mark.parametrize("value,match", [
    (DeviceTensor(BUF, (2, 3, 224, 224), "float32"), "is float32 but the engine takes float16"),
    (DeviceTensor(BUF + 128, (2, 3, 224, 224), "float16"), "not 256-byte aligned"),
    (DeviceTensor(0, (2, 3, 224, 224), "float16"), "no device pointer"),
    (DeviceTensor(BUF, (16, 3, 224, 224), "float16"), "outside the engine's optimization profile"),
    (DeviceTensor(BUF, (2, 3, 300, 300), "float16"), "expects"),
])
def test_bad_device_inputs_are_one_model_error_naming_the_problem(value, match):
    with pytest.raises(ModelError, match=match):
        check_device_input(INPUT, value)


def test_wrong_names_or_a_host_array_are_refused_before_any_context_call():
    import numpy as np

    ctx, binder = FakeTrtContext(), DeviceInputBinder()
    with pytest.raises(ModelError, match="do not match the engine's inputs"):
        binder.bind(ctx, {"images": DeviceTensor(BUF, (1, 3, 224, 224), "float16")}, [INPUT])
    with pytest.raises(ModelError, match="must be a DeviceTensor"):
        binder.bind(ctx, {"input": np.zeros((1, 3, 224, 224), np.float16)}, [INPUT])
    assert ctx.calls == []


def test_an_address_tensorrt_refuses_is_a_backend_error_and_not_recorded():
    ctx, binder = FakeTrtContext(refuse={BUF}), DeviceInputBinder()
    with pytest.raises(BackendError, match="refused the device address"):
        binder.bind(ctx, _x(1), [INPUT])
    assert binder.addresses == {}  # the next call tries again instead of believing it is bound
