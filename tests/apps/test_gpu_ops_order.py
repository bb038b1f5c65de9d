"""DeviceFrameOps (the GPU path with a TensorRT engine) keeps batch k's input intact until the engine has read it.

The app preprocesses each batch into one device buffer and binds it to the engine (``submit_device``); with
``in_flight`` batches queued, batch k+1's preprocessing is queued while batch k may still be running on the session's
stream.  The ordering itself is shown on the CPU stand-in for CUDA in
tests/runtime/trt/test_trt_session_contexts.py (the race, and the wait that removes it); here, with recording
stand-ins for the session and the NVRTC preprocessor (no GPU), that the app asks for that wait on its preprocessing
stream before every preprocessing launch, and binds the buffer after it."""

from types import SimpleNamespace

from jetforge.apps.pipeline.gpu_ops import DeviceFrameOps


class RecordingSession:
    inputs = [SimpleNamespace(name="image", dtype="float16")]

    def __init__(self, log):
        self.log = log

    def wait_for_inputs_read(self, stream):
        self.log.append(("wait_for_inputs_read", stream))

    def submit_device(self, inputs, stream=None):
        self.log.append(("submit_device", stream, inputs["image"].ptr))
        return SimpleNamespace(wait=lambda: {"out": None})


class RecordingPreprocessor:
    input_format = "nv12"
    output_shape = (4, 3, 8, 8)

    def __init__(self, log):
        self.log = log

    def run(self, table, stream, out_ptr=None, crop=None):
        self.log.append(("preprocess", stream, out_ptr))


def _ops(log, tiles=None):
    """A DeviceFrameOps with its CUDA parts replaced by recording stand-ins (its constructor needs cuda-python)."""
    ops = DeviceFrameOps.__new__(DeviceFrameOps)
    ops.model = SimpleNamespace(session=RecordingSession(log), tiles=tiles, rows_per_frame=1, input_name="image")
    ops.pre, ops.stream, ops.dtype = RecordingPreprocessor(log), "preprocessing-stream", "float16"
    ops.buffer, ops.row_bytes, ops.device_input = SimpleNamespace(ptr=0x7F0000000000), 3 * 8 * 8 * 2, True
    return ops


def _frames(n):
    return [SimpleNamespace(y_ptr=0x1000 * (i + 1), uv_ptr=0x1000 * (i + 1) + 0x800, pitch=256, width=64, height=48)
            for i in range(n)]


def test_every_batch_waits_for_the_engine_to_read_the_last_one_before_its_preprocessing():
    log = []
    ops = _ops(log)
    for n in (4, 3, 4):  # three batches queued back to back, none waited on (in_flight lets them overlap)
        ops.launch(_frames(n), 4)
    assert [entry[0] for entry in log] == ["wait_for_inputs_read", "preprocess", "submit_device"] * 3
    assert all(entry[1] == "preprocessing-stream" for entry in log)  # the wait is queued on the writer's stream
    assert {entry[2] for entry in log if entry[0] != "wait_for_inputs_read"} == {0x7F0000000000}  # one buffer

