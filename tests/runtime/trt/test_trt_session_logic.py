"""The TensorRT session's decisions, on the CPU: a FakeTrtContext/FakeTrtEngine stand in for TensorRT.

dtype mapping, I/O discovery with optimization profiles, shape binding, output shapes, buffer
sizing, DLA core choice, the engine sidecar, and the CUDA-graph policy (capture after a warm-up
enqueue, re-capture on shape change, fallback).  The real engine runs in
tests/hardware/test_tensorrt_session.py (marked tensorrt).
"""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from jetforge.errors import BackendError, ConfigError, DependencyError, ModelError
from jetforge.optional import is_available
from jetforge.runtime.cuda.policy import CAPTURE, ENQUEUE, LAUNCH, GraphPolicy, shape_key
from jetforge.runtime.tensorrt import session_logic as tb
from jetforge.runtime.tensorrt.session_logic import initial_graph_state


def _enum(name):
    return SimpleNamespace(name=name)


class FakeTrtEngine:
    """The ICudaEngine calls the session makes: a classifier with a dynamic batch (profile 1..8)."""

    def __init__(self, dtype="FLOAT", out_dtype="FLOAT", fmt="LINEAR", batch=-1):
        self.tensors = [("input", "INPUT", (batch, 3, 224, 224), dtype), ("logits", "OUTPUT", (batch, 1000), out_dtype)]
        self.fmt = fmt

    @property
    def num_io_tensors(self):
        return len(self.tensors)

    def get_tensor_name(self, i):
        return self.tensors[i][0]

    def _t(self, name):
        return next(t for t in self.tensors if t[0] == name)

    def get_tensor_mode(self, name):
        return _enum(self._t(name)[1])

    def get_tensor_shape(self, name):
        return list(self._t(name)[2])

    def get_tensor_dtype(self, name):
        return "DataType." + self._t(name)[3]  # str form, as older bindings print it

    def get_tensor_format(self, name):
        return _enum(self.fmt)

    def get_tensor_profile_shape(self, name, profile):
        assert profile == 0
        return [(1, 3, 224, 224), (4, 3, 224, 224), (8, 3, 224, 224)]


class FakeTrtContext:
    """The IExecutionContext calls the session makes; records them and enforces the profile."""

    def __init__(self, max_batch=8, data_dependent=False):
        self.max_batch = max_batch
        self.data_dependent = data_dependent
        self.shapes = {}
        self.addresses = {}
        self.calls = []

    def set_input_shape(self, name, shape):
        self.calls.append(("set_input_shape", name, tuple(shape)))
        if not 1 <= shape[0] <= self.max_batch:
            return False
        self.shapes[name] = tuple(shape)
        return True

    def get_tensor_shape(self, name):
        if name == "logits":
            if self.data_dependent:
                return (-1, 1000)
            return (self.shapes["input"][0], 1000)
        return self.shapes[name]

    def set_tensor_address(self, name, ptr):
        self.addresses[name] = ptr
        return True

    def execute_async_v3(self, stream):
        self.calls.append(("execute_async_v3", stream))
        return True


# -- dtype mapping ------------------------------------------------------------------------------
@pytest.mark.parametrize("trt_name,numpy_name", [("FLOAT", "float32"), ("HALF", "float16"), ("INT8", "int8"),
                                                  ("INT32", "int32"), ("INT64", "int64"), ("BOOL", "bool"),
                                                  ("UINT8", "uint8")])
def test_numpy_dtype_from_enum_and_string(trt_name, numpy_name):
    assert tb.numpy_dtype(_enum(trt_name)) == numpy_name
    assert tb.numpy_dtype("DataType." + trt_name) == numpy_name


@pytest.mark.parametrize("trt_name", ["BF16", "FP8", "INT4"])
def test_numpy_dtype_refuses_types_numpy_cannot_hold(trt_name):
    with pytest.raises(ModelError) as info:
        tb.numpy_dtype(_enum(trt_name), "scores")
    assert "'scores'" in str(info.value) and trt_name in str(info.value) and "rebuild" in str(info.value)


# -- I/O discovery ----------------------------------------------------------------------------------
def test_engine_io_reads_names_modes_shapes_dtypes_and_profile():
    io = tb.engine_io(FakeTrtEngine(dtype="HALF", out_dtype="HALF"))
    assert [(t.name, t.is_input, t.shape, t.dtype) for t in io] == [
        ("input", True, (-1, 3, 224, 224), "float16"), ("logits", False, (-1, 1000), "float16")]
    assert io[0].profile == ((1, 3, 224, 224), (4, 3, 224, 224), (8, 3, 224, 224))
    assert io[0].max_shape == (8, 3, 224, 224)
    assert io[1].profile is None
    assert io[0].spec.to_dict() == {"name": "input", "shape": [-1, 3, 224, 224], "dtype": "float16"}


def test_engine_io_static_engine_has_no_profile():
    io = tb.engine_io(FakeTrtEngine(batch=2))
    assert io[0].profile is None and io[0].max_shape == (2, 3, 224, 224)


def test_engine_io_refuses_vectorized_formats():
    with pytest.raises(ModelError) as info:
        tb.engine_io(FakeTrtEngine(fmt="CHW32"))
    assert "CHW32" in str(info.value) and "LINEAR" in str(info.value)


def test_check_input_shape_against_static_dims_and_profile():
    inp = tb.engine_io(FakeTrtEngine())[0]
    tb.check_input_shape(inp, (8, 3, 224, 224))
    with pytest.raises(ModelError, match="outside the engine's optimization profile"):
        tb.check_input_shape(inp, (9, 3, 224, 224))
    with pytest.raises(ModelError, match="axis 2"):
        tb.check_input_shape(inp, (1, 3, 200, 224))
    with pytest.raises(ModelError, match="4 dimensions"):
        tb.check_input_shape(inp, (3, 224, 224))


# -- shapes on the context ------------------------------------------------------------------------
def test_bind_input_shapes_sets_only_changed_shapes():
    ctx, bound = FakeTrtContext(), {}
    assert tb.bind_input_shapes(ctx, {"input": (1, 3, 224, 224)}, bound) == ["input"]
    assert tb.bind_input_shapes(ctx, {"input": (1, 3, 224, 224)}, bound) == []
    assert tb.bind_input_shapes(ctx, {"input": (4, 3, 224, 224)}, bound) == ["input"]
    assert [c for c in ctx.calls if c[0] == "set_input_shape"] == [
        ("set_input_shape", "input", (1, 3, 224, 224)), ("set_input_shape", "input", (4, 3, 224, 224))]
    assert bound == {"input": (4, 3, 224, 224)}


def test_bind_input_shapes_refused_shape_is_model_error_and_not_recorded():
    ctx, bound = FakeTrtContext(max_batch=2), {}
    with pytest.raises(ModelError, match="refused input shape"):
        tb.bind_input_shapes(ctx, {"input": (3, 3, 224, 224)}, bound)
    assert bound == {}


def test_output_shapes_follow_inputs_and_data_dependent_is_refused():
    ctx = FakeTrtContext()
    outputs = [t for t in tb.engine_io(FakeTrtEngine()) if not t.is_input]
    tb.bind_input_shapes(ctx, {"input": (3, 3, 224, 224)}, {})
    assert tb.resolve_output_shapes(ctx, outputs) == {"logits": (3, 1000)}
    ctx.data_dependent = True
    with pytest.raises(ModelError, match="data-dependent"):
        tb.resolve_output_shapes(ctx, outputs)


# -- buffer sizing ------------------------------------------------------------------------------------
def test_required_bytes_from_shapes_and_dtypes():
    got = tb.required_bytes({"input": (2, 3, 224, 224), "logits": (2, 1000)}, {"input": "float16", "logits": "float32"})
    assert got == {"input": 2 * 3 * 224 * 224 * 2, "logits": 2 * 1000 * 4}


def test_buffers_only_grow_and_are_rounded_to_256():
    assert tb.buffers_to_grow({"a": 1000, "b": 10}, {}) == {"a": 1024, "b": 256}
    assert tb.buffers_to_grow({"a": 1000, "b": 10}, {"a": 1024, "b": 256}) == {}
    assert tb.buffers_to_grow({"a": 500}, {"a": 1024}) == {}  # a smaller shape reuses the buffer
    assert tb.buffers_to_grow({"a": 1025}, {"a": 1024}) == {"a": 1280}


def test_inputs_are_sized_at_profile_max_up_front():
    sizes = tb.initial_buffer_sizes(tb.engine_io(FakeTrtEngine(dtype="HALF")))
    assert sizes == {"input": 8 * 3 * 224 * 224 * 2}


def test_outputs_are_sized_at_profile_max_up_front_unless_data_dependent():
    io, ctx, bound = tb.engine_io(FakeTrtEngine()), FakeTrtContext(), {}
    assert tb.initial_output_sizes(ctx, io, bound) == {"logits": 8 * 1000 * 4}  # the max batch's logits
    assert bound == {"input": (8, 3, 224, 224)}  # recorded as bound, so the first call sets only what differs
    assert tb.initial_output_sizes(FakeTrtContext(data_dependent=True), io, {}) == {}  # sized at the first call


# -- DLA core --------------------------------------------------------------------------------------------
def test_dla_core_from_sidecar_or_request():
    assert tb.resolve_dla_core(None, None, "gpu", 2) is None
    assert tb.resolve_dla_core(None, 1, "dla", 2) == 1
    assert tb.resolve_dla_core(0, 1, "dla", 2) == 0  # a DLA engine runs on either core
    assert tb.resolve_dla_core(1, None, None, 2) == 1  # no sidecar


def test_dla_core_errors_name_the_fix():
    with pytest.raises(BackendError, match="no DLA"):
        tb.resolve_dla_core(None, 0, "dla", 0)
    with pytest.raises(ConfigError, match="does not exist; this machine has 2"):
        tb.resolve_dla_core(2, None, "dla", 2)
    with pytest.raises(ConfigError, match="built for the GPU"):
        tb.resolve_dla_core(0, None, "gpu", 2)
    with pytest.raises(ConfigError, match="DLA core number"):
        tb.resolve_dla_core(True, None, None, 2)


# -- the engine sidecar --------------------------------------------------------------------------------
def test_engine_without_sidecar_is_allowed(tmp_path):
    engine = tmp_path / "m.engine"
    engine.write_bytes(b"plan")
    assert tb.load_engine_sidecar(engine, True, "10.3.0") is None


def test_plain_dict_sidecar_is_read(tmp_path):
    engine = tmp_path / "m.engine"
    engine.write_bytes(b"plan")
    (tmp_path / "m.engine.json").write_text(json.dumps({
        "inputs": [{"name": "input", "shape": [-1, 3, 224, 224], "dtype": "float16"}],
        "outputs": [{"name": "logits", "shape": [-1, 1000]}], "dla_core": 0, "device": "dla",
        "preprocess": {"height": 224, "width": 224}}))
    sidecar = tb.load_engine_sidecar(engine, True, "8.5.2")
    assert [t.name for t in sidecar.inputs] == ["input"] and sidecar.inputs[0].dtype == "float16"
    assert sidecar.outputs[0].dtype == "float32" and sidecar.dla_core == 0 and sidecar.device == "dla"


def test_engine_sidecar_of_other_tensorrt_version_is_refused(tmp_path):
    from jetforge.runtime.tensorrt.engine_sidecar import EngineSidecar, write_engine_sidecar
    from jetforge.runtime.sidecar import TensorSpec

    engine = tmp_path / "m.engine"
    engine.write_bytes(b"plan")
    write_engine_sidecar(engine, EngineSidecar(
        tensorrt_version="8.5.2", target="orin-nx-16gb", precision="fp16", device="dla", dla_core=1,
        inputs=[TensorSpec("input", [1, 3, 224, 224])], outputs=[TensorSpec("logits", [1, 1000])],
        source_onnx={"path": "m.onnx", "sha256": "0" * 64}))
    assert tb.load_engine_sidecar(engine, True, "8.5.2").dla_core == 1
    with pytest.raises(ModelError, match="built with TensorRT 8.5.2"):
        tb.load_engine_sidecar(engine, True, "10.3.0")


# -- CUDA-graph policy --------------------------------------------------------------------------------
def test_graph_capture_after_warmup_then_replay():
    policy = GraphPolicy(enabled=True, max_graphs=1)
    key = shape_key({"input": (1, 3, 224, 224)})
    assert policy.status == "on"
    assert policy.decide(key) == CAPTURE  # the session enqueues once (warm-up, real result), then captures
    assert policy.captured(key) == []
    assert policy.decide(key) == LAUNCH
    assert policy.decide(key) == LAUNCH
    assert policy.captures == 1


def test_shape_change_recaptures_and_evicts_the_old_graph():
    policy = GraphPolicy(enabled=True, max_graphs=1)
    a, b = shape_key({"input": (1, 3, 224, 224)}), shape_key({"input": (4, 3, 224, 224)})
    policy.decide(a)
    policy.captured(a)
    assert policy.decide(b) == CAPTURE
    assert policy.captured(b) == [a]  # TensorRT: one graph per context state; the old one is destroyed
    assert policy.decide(a) == CAPTURE
    assert policy.live_keys == [b]


def test_torch_style_cache_keeps_several_shapes():
    policy = GraphPolicy(enabled=True, max_graphs=2)
    keys = [shape_key({"x": (n, 3)}) for n in (1, 2, 3)]
    for k in keys[:2]:
        assert policy.decide(k) == CAPTURE and policy.captured(k) == []
    assert policy.decide(keys[0]) == LAUNCH  # most recently used now
    assert policy.decide(keys[2]) == CAPTURE
    assert policy.captured(keys[2]) == [keys[1]]


def test_capture_failure_falls_back_for_good():
    policy = GraphPolicy(enabled=True)
    key = shape_key({"input": (1, 3, 224, 224)})
    assert policy.decide(key) == CAPTURE
    assert policy.fall_back("cudaStreamEndCapture returned cudaErrorStreamCaptureInvalidated") == []
    assert policy.status == "fallback: cudaStreamEndCapture returned cudaErrorStreamCaptureInvalidated"
    assert policy.decide(key) == ENQUEUE


def test_too_many_shape_changes_fall_back():
    policy = GraphPolicy(enabled=True, max_graphs=1, max_captures=3)
    for n in range(3):
        k = shape_key({"input": (n + 1, 3)})
        assert policy.decide(k) == CAPTURE
        policy.captured(k)
    assert policy.decide(shape_key({"input": (9, 3)})) == ENQUEUE
    assert policy.status.startswith("fallback: input shapes changed 3 times")


def test_reallocation_invalidates_graphs_and_off_means_enqueue():
    policy = GraphPolicy(enabled=True)
    k = shape_key({"input": (1,)})
    policy.decide(k)
    policy.captured(k)
    assert policy.invalidate() == [k]
    assert policy.decide(k) == CAPTURE
    off = GraphPolicy(enabled=False)
    assert off.decide(k) == ENQUEUE and off.status == "off"


def test_shape_key_ignores_dict_order():
    assert shape_key({"a": (1, 2), "b": (3,)}) == shape_key({"b": [3], "a": [1, 2]})


@pytest.mark.parametrize("requested,dla,version,expected", [
    (True, None, "8.5.2.2", True), (True, 0, "8.5.2.2", False), (True, 1, "8.6.2", False),
    (True, 0, "10.3.0", True), (False, None, "10.3.0", False)])
def test_initial_graph_state(requested, dla, version, expected):
    enabled, reason = initial_graph_state(requested, dla, version)
    assert enabled is expected
    if requested and not expected:
        assert "DLA" in reason and "#3524" in reason


# -- without TensorRT ------------------------------------------------------------------------------------
@pytest.mark.skipif(is_available("tensorrt"), reason="TensorRT is installed here")
def test_engine_without_tensorrt_says_how_to_install(tmp_path):
    from jetforge.runtime.session import open_session

    engine = tmp_path / "m.engine"
    engine.write_bytes(b"plan")
    with pytest.raises(DependencyError) as info:
        open_session(engine)
    assert "TensorRT is not installed" in str(info.value) and "python3-libnvinfer" in str(info.value)


def test_dla_core_is_refused_by_backends_without_dla(tmp_path):
    from jetforge.runtime.session import open_session

    model = tmp_path / "m.onnx"
    model.write_bytes(b"not onnx")
    with pytest.raises(ConfigError, match="does not run on DLA"):
        open_session(model, dla_core=0)
    with pytest.raises(ConfigError, match="no CUDA-graph mode"):
        open_session(model, cuda_graph=True)


def test_fake_context_drives_a_full_call_sequence():
    """The order of TensorRT calls for two calls of one shape and one of another (as TrtSession makes them)."""
    engine, ctx = FakeTrtEngine(), FakeTrtContext()
    io = tb.engine_io(engine)
    inputs, outputs = [t for t in io if t.is_input], [t for t in io if not t.is_input]
    dtypes = {t.name: t.dtype for t in io}
    capacity = dict((k, v) for k, v in tb.buffers_to_grow(tb.initial_buffer_sizes(io), {}).items())
    bound, policy, actions = {}, GraphPolicy(enabled=True), []
    for batch in (2, 2, 5):
        shapes = {"input": (batch, 3, 224, 224)}
        for t in inputs:
            tb.check_input_shape(t, shapes[t.name])
        tb.bind_input_shapes(ctx, shapes, bound)
        out_shapes = tb.resolve_output_shapes(ctx, outputs)
        everything = dict(shapes, **out_shapes)
        grow = tb.buffers_to_grow(tb.required_bytes(everything, dtypes), capacity)
        if grow:
            capacity.update(grow)
            policy.invalidate()
        action = policy.decide(shape_key(shapes))
        actions.append(action)
        if action == CAPTURE:
            policy.captured(shape_key(shapes))
    # first call: output buffer allocated (graphs invalidated before any exist), capture; second: replay;
    # third: new shape -> re-capture; the input buffer (profile max 8) never moved.
    assert actions == [CAPTURE, LAUNCH, CAPTURE]
    assert capacity["input"] == 8 * 3 * 224 * 224 * 4 and capacity["logits"] == 79 * 256  # 5x1000 fp32 -> 256s
    assert np.all([c[0] == "set_input_shape" for c in ctx.calls])
