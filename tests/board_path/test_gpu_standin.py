"""On a CUDA GPU (``-m gpu``): TrtSession's CUDA half for real -- cuda-python device buffers, pinned memory, its
stream, events and CUDA graphs -- with only TensorRT stood in for (tests/standins/cuda_bridge_standin.py: the
engine's work is device-to-host copies, ONNX Runtime in a ``cudaLaunchHostFunc`` host function, host-to-device
copies, all on the session's stream and so captured into and replayed from CUDA graphs).

What it shows: the session's allocation, binding, copies, graph capture/replay/re-capture on a shape change and
its device-input path (``infer_device``) move the right bytes on a real GPU.  What it cannot: TensorRT's kernels,
and any timing (nothing is timed here).  Skips without a CUDA device.
"""

import json

import numpy as np
import pytest

from tests.board_path.conftest import ATOL, RTOL, TARGET, run_cli

pytestmark = pytest.mark.gpu
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")


@pytest.fixture
def gpu_standin(tmp_path, monkeypatch):
    from jetforge.runtime.cuda import device_count
    from jetforge.errors import JetforgeError

    try:
        if device_count() < 1:
            pytest.skip("no CUDA device")
    except JetforgeError as err:
        pytest.skip("no cuda-python: %s" % err.message)
    from tests.standins import standin_tensorrt

    monkeypatch.setenv("JETFORGE_CACHE", str(tmp_path / "cache"))
    with standin_tensorrt(real_cuda=True) as bridge:
        yield bridge
    assert not bridge.errors, bridge.errors


def conv_model(path, batch=1):
    """x[batch,3,H,W] -> Conv 3x3 (4 channels, fixed seeded weights) -> Relu -> y: a model with free height and width
    (and a free batch with ``batch="n"``)."""
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
         helper.make_node("Relu", ["c"], ["y"], name="relu")], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, "h", "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4, "h", "w"])], [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    return path


def test_action_engine_on_a_real_gpu(gpu_standin, action_model, tmp_path):
    from jetforge.runtime.cuda import DeviceBuffer, PinnedBuffer, Stream
    from jetforge.runtime.session import open_session
    from jetforge.runtime.tensorrt.session import DeviceTensor

    engine = tmp_path / "action.engine"
    assert run_cli(["-q", "build", str(action_model), "--target", TARGET, "--shape", "clip=1x3x8x112x112",
                    "--out", str(engine)]) == 0
    clips = [np.random.default_rng(s).standard_normal((1, 3, 8, 112, 112)).astype(np.float32) for s in range(4)]
    with open_session(engine) as session, open_session(action_model, backend="onnxruntime") as reference:
        for clip in clips:
            want = reference.infer({"clip": clip})["logits"]
            np.testing.assert_allclose(session.infer({"clip": clip})["logits"], want, rtol=RTOL, atol=ATOL)
        info = session.info()
        assert info["cuda_graph"] == "on" and info["cuda_graph_captures"] == 1, info
        assert gpu_standin.host_calls == len(clips)  # one eager run, then the captured graph replayed 3 times
        # device input (TensorRT's set_tensor_address on the caller's buffer): written for the GPU video path
        with DeviceBuffer(clips[0].nbytes) as dev, PinnedBuffer(clips[0].nbytes) as pinned, Stream() as stream:
            pinned.array(clips[0].shape, "float32")[:] = clips[0]
            dev.copy_from_host(pinned, clips[0].nbytes, stream)
            got = session.infer_device({"clip": DeviceTensor(dev.ptr, clips[0].shape, "float32")}, stream)["logits"]
            np.testing.assert_allclose(got, reference.infer({"clip": clips[0]})["logits"], rtol=RTOL, atol=ATOL)
            again = session.infer({"clip": clips[1]})["logits"]  # back to the session's own buffers
            np.testing.assert_allclose(again, reference.infer({"clip": clips[1]})["logits"], rtol=RTOL, atol=ATOL)


def test_shape_changes_regrow_buffers_and_recapture_graphs_on_a_real_gpu(gpu_standin, tmp_path):
    from jetforge.runtime.session import open_session

    model = conv_model(tmp_path / "conv.onnx")
    config = tmp_path / "build.yaml"
    config.write_text(json.dumps({"profiles": [{"x": {"min": [1, 3, 8, 8], "opt": [1, 3, 32, 32],
                                                      "max": [1, 3, 96, 128]}}]}))
    engine = tmp_path / "conv.engine"
    assert run_cli(["-q", "build", str(model), "--target", TARGET, "--config", str(config), "--out", str(engine)]) == 0
    sizes = [(16, 16), (16, 16), (96, 128), (96, 128), (8, 40), (16, 16)]
    with open_session(engine) as session, open_session(model, backend="onnxruntime") as reference:
        for i, (h, w) in enumerate(sizes):
            x = np.random.default_rng(i).standard_normal((1, 3, h, w)).astype(np.float32)
            np.testing.assert_allclose(session.infer({"x": x})["y"], reference.infer({"x": x})["y"], rtol=RTOL,
                                       atol=ATOL)
        assert session.info()["cuda_graph_captures"] >= 3, session.info()
    assert gpu_standin.host_calls == len(sizes)


def test_batch_sizes_moving_between_buckets_keep_a_graph_and_a_context_each_on_a_real_gpu(gpu_standin, tmp_path):
    """The video app's batch buckets in a changing order: each size captured once, from a context of its own that
    shares one cudaMalloc'ed activation memory with the others, then replayed by real CUDA graphs (TensorRT stood
    in for: its USER_MANAGED / set_device_memory calls are the stand-in's)."""
    from jetforge.runtime.session import open_session

    model = conv_model(tmp_path / "conv.onnx", batch="n")
    config = tmp_path / "build.yaml"
    config.write_text(json.dumps({"profiles": [{"x": {"min": [1, 3, 16, 16], "opt": [8, 3, 16, 16],
                                                      "max": [32, 3, 16, 16]}}]}))
    engine = tmp_path / "conv.engine"
    assert run_cli(["-q", "build", str(model), "--target", TARGET, "--config", str(config), "--out", str(engine)]) == 0
    order = [32, 8, 32, 2, 8, 32] + [int(b) for b in np.random.default_rng(0).choice([1, 2, 4, 8, 16, 32], 34)]
    with open_session(engine) as session, open_session(model, backend="onnxruntime") as reference:
        for i, n in enumerate(order):
            x = np.random.default_rng(i).standard_normal((n, 3, 16, 16)).astype(np.float32)
            np.testing.assert_allclose(session.infer({"x": x})["y"], reference.infer({"x": x})["y"], rtol=RTOL,
                                       atol=ATOL)
        info = session.info()
    assert info["cuda_graph"] == "on" and info["cuda_graph_captures"] == 6 and info["cuda_graph_contexts"] == 6, info
    assert info["context_memory"].startswith("shared: one "), info
    assert gpu_standin.host_calls == len(order)  # each call computed once: 6 eager runs, the rest graph replays


def test_a_producer_stream_rewriting_one_input_buffer_every_batch_on_a_real_gpu(gpu_standin, tmp_path):
    """The GPU path's order on real CUDA: one device buffer, rewritten on the producer's stream for every batch (as
    the preprocessing kernel does) right after the previous batch was submitted, the producer's stream first made to
    wait with ``wait_for_inputs_read``.  Each batch must give ONNX Runtime's outputs of its own input.  Without the
    wait the producer's copy may run before the engine's work has read the previous input (the CPU stand-in shows it
    deterministically: tests/runtime/trt/test_trt_session_contexts.py); here the GPU decides the order."""
    from jetforge.runtime.cuda import DeviceBuffer, PinnedBuffer, Stream
    from jetforge.runtime.session import open_session
    from jetforge.runtime.tensorrt.session import DeviceTensor

    model = conv_model(tmp_path / "conv.onnx")
    engine = tmp_path / "conv.engine"
    assert run_cli(["-q", "build", str(model), "--target", TARGET, "--shape", "x=1x3x64x64", "--out",
                    str(engine)]) == 0
    inputs = [np.random.default_rng(s).standard_normal((1, 3, 64, 64)).astype(np.float32) for s in range(12)]
    with open_session(engine) as session, open_session(model, backend="onnxruntime") as reference, \
            DeviceBuffer(inputs[0].nbytes) as dev, Stream() as producer:
        staging = [PinnedBuffer(x.nbytes) for x in inputs]
        try:
            requests = []
            for x, pinned in zip(inputs, staging):
                session.wait_for_inputs_read(producer)
                pinned.array(x.shape, "float32")[:] = x
                dev.copy_from_host(pinned, x.nbytes, producer)
                requests.append(session.submit_device({"x": DeviceTensor(dev.ptr, x.shape, "float32")}, producer))
            for x, request in zip(inputs, requests):
                np.testing.assert_allclose(request.wait()["y"], reference.infer({"x": x})["y"], rtol=RTOL, atol=ATOL)
        finally:
            for pinned in staging:
                pinned.close()



def test_ssd_outputs_decoded_behind_the_engine_on_a_real_gpu(gpu_standin, tmp_path):
    """The people app's SSD decoding on the GPU path (QueuedSsdDecoder's real NVRTC kernel on TrtSession's device
    outputs) on real CUDA: the checks of tests/board_path/test_ssd_device_outputs_standin.py, where the CPU stand-ins
    run them in CI."""
    from tests.board_path.test_ssd_device_outputs_standin import decode_batches_behind_the_engine

    decode_batches_behind_the_engine(tmp_path)
