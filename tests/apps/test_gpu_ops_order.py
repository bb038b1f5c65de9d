"""DeviceFrameOps (the GPU path with a TensorRT engine) keeps batch k's input intact until the engine has read it.

The app preprocesses each batch into one device buffer and binds it to the engine (``submit_device``); with
``in_flight`` batches queued, batch k+1's preprocessing is queued while batch k may still be running on the session's
stream.  The ordering itself is shown on the CPU stand-in for CUDA in
tests/runtime/trt/test_trt_session_contexts.py (the race, and the wait that removes it); here, with recording
stand-ins for the session and the NVRTC preprocessor (no GPU), that the app asks for that wait on its preprocessing
stream before every preprocessing launch, and binds the buffer after it."""

from types import SimpleNamespace

import pytest

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
    ops.decoder = ops.output_slots = None
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



class ConsumerSession(RecordingSession):
    """A session that hands its device outputs to a consumer (TensorRT's ``on_device_outputs``)."""

    outputs = [SimpleNamespace(name="box_encodings", dtype="float32"), SimpleNamespace(name="class_logits",
                                                                                      dtype="float32")]

    def submit_device(self, inputs, stream=None, on_device_outputs=None):
        self.log.append(("submit_device", stream, inputs["image"].ptr))
        outs = {"box_encodings": SimpleNamespace(ptr=0xE000, shape=inputs["image"].shape[:1] + (1917, 4)),
                "class_logits": SimpleNamespace(ptr=0xF000, shape=inputs["image"].shape[:1] + (1917, 2))}
        result = on_device_outputs(outs, "session-stream")
        return SimpleNamespace(wait=result)


class RecordingDecoder:
    def __init__(self, log, max_rows):
        self.log, self.max_rows, self.closed = log, max_rows, False

    def launch_outputs(self, outputs, rows, stream):
        self.log.append(("decode", stream, outputs["box_encodings"].shape[0], list(rows)))
        return lambda: ["row %d" % r for r in rows]

    def close(self):
        self.closed = True


def _head(log, opened):
    from jetforge.apps.pipeline.stages import DeviceHead

    def open_(max_rows):
        opened.append(RecordingDecoder(log, max_rows))
        return opened[-1]

    return DeviceHead(open_, lambda decoded, frames: [(f.width, decoded) for f in frames], "recorded decoding")


def test_a_device_head_decodes_behind_the_engine_the_rows_of_the_frames_blocks():
    """With a session that takes a consumer and a model with a device head (the SSD's GPU decoding), each batch's
    outputs go to the head's decoder on the session's stream, asked for the frames' rows of each tile block (3
    frames padded to 4, 1 + 2 tiles: rows 0-2, 4-6, 8-10), and ``finish`` hands its result to ``from_decoded``
    instead of ``to_outputs`` (the host decoding)."""
    from jetforge.apps.pipeline.gpu_ops import open_device_head

    log, opened = [], []
    ops = _ops(log, tiles=[(0, 0, 0.6, 0.6), (0.4, 0.4, 1, 1)])
    ops.model.session = ConsumerSession(log)
    ops.model.rows_per_frame, ops.model.device_head = 3, _head(log, opened)
    ops.model.to_outputs = lambda outputs, frames: pytest.fail("the host decoding ran")
    ops.decoder = open_device_head(ops.model, 12)
    assert opened[0].max_rows == 12 and ops.decoder is opened[0]
    frames = _frames(3)
    got = ops.finish(ops.launch(frames, 4), frames)
    rows = [0, 1, 2, 4, 5, 6, 8, 9, 10]
    assert [e for e in log if e[0] == "decode"] == [("decode", "session-stream", 12, rows)]
    assert [e[0] for e in log][-2:] == ["submit_device", "decode"]  # queued right behind the engine
    assert got == [(64, ["row %d" % r for r in rows])] * 3


def test_no_device_head_without_a_session_that_takes_a_consumer():
    from jetforge.apps.pipeline.gpu_ops import open_device_head

    log, opened = [], []
    model = SimpleNamespace(session=RecordingSession(log), device_head=_head(log, opened))
    assert open_device_head(model, 8) is None and opened == []  # submit_device has no on_device_outputs
    model = SimpleNamespace(session=ConsumerSession(log), device_head=None)
    assert open_device_head(model, 8) is None


def test_a_device_head_that_cannot_be_made_leaves_the_decoding_to_the_host(caplog):
    from jetforge.apps.pipeline.gpu_ops import open_device_head
    from jetforge.apps.pipeline.stages import DeviceHead
    from jetforge.errors import BackendError

    def cannot(max_rows):
        raise BackendError("NVRTC cannot compile for this GPU")

    model = SimpleNamespace(session=ConsumerSession([]), device_head=DeviceHead(cannot, None, "k"))
    with caplog.at_level("WARNING"):
        assert open_device_head(model, 8) is None
    assert "NVRTC cannot compile for this GPU; decoding the outputs on the host instead" in caplog.text


def test_outputs_without_a_device_head_come_back_through_per_batch_slots():
    """A model decoded on the host (MobileNetV2) on a session that takes a consumer: each batch's outputs go to the
    output slots' ``launch`` on the session's stream (its own pinned buffers: queuing the next batch does not wait
    for them), and ``finish`` hands their result to the model's ``to_outputs``."""
    log = []

    class Slots:
        def launch(self, outputs, stream):
            log.append(("copy back", stream, sorted(outputs)))
            return lambda: {"logits": "batch outputs"}

    ops = _ops(log)
    ops.model.session = ConsumerSession(log)
    ops.model.to_outputs = lambda outputs, frames: [outputs["logits"]] * len(frames)
    ops.output_slots = Slots()
    frames = _frames(2)
    got = ops.finish(ops.launch(frames, 2), frames)
    assert [e[0] for e in log] == ["wait_for_inputs_read", "preprocess", "submit_device", "copy back"]
    assert log[-1] == ("copy back", "session-stream", ["box_encodings", "class_logits"])
    assert got == ["batch outputs"] * 2
