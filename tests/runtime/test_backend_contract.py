"""One contract, every backend: the same MobileNetV2 gives the same answers through every Session.

Written once and run for each backend available here: ONNX Runtime (CPU) is the reference;
PyTorch on the CPU (same weights, loaded through jetforge.compress.models); PyTorch on CUDA in
FP32 and FP16, with and without CUDA graphs (marked gpu); TensorRT FP32/FP16 engines built
from the same ONNX (marked tensorrt).  Inputs are real frames of bikes.mp4 preprocessed with
the model's own preprocessing.  Each backend must: describe the same input/output specs, match
the reference within its precision's tolerance and agree on the top-1 class, handle a change of
batch size, pipeline with submit/wait, and refuse calls after close.
"""

import numpy as np
import pytest

from jetforge.errors import BackendError, ModelError, UnknownNameError
from jetforge.optional import is_available
from tests.hardware.trt_build import build_test_engine

# Relative tolerance: max |out - ref| / max |ref|.  FP32 on a GPU uses TF32 convolutions (cuDNN's default).
TOLERANCE = {"fp32": 5e-3, "fp16": 3e-2}
FRAMES = (5, 30, 75, 140, 160, 175)


def _cuda():
    if not is_available("torch"):
        return False
    import torch

    return torch.cuda.is_available()


def _torch_model(weights):
    pytest.importorskip("torch", reason="the PyTorch backend needs torch")
    from jetforge.compress.models import load_pretrained

    return load_pretrained("mobilenet_v2", weights)


# name -> (precision, marks, factory(onnx_path, weights, tmp_path) -> session)
def _ort(onnx_path, weights, tmp_path):
    from jetforge.runtime.session import open_session

    return open_session(onnx_path, threads=2)


def _torch(device, dtype, graph, channels_last=False):
    def make(onnx_path, weights, tmp_path):
        from jetforge.runtime.session import open_session

        return open_session(_torch_model(weights), backend="pytorch", device=device, dtype=dtype,
                            cuda_graph=graph, channels_last=channels_last, output_names=["logits"],
                            input_shapes={"input": ["batch", 3, 224, 224]})
    return make


def _trt(fp16):
    def make(onnx_path, weights, tmp_path):
        from jetforge.runtime.session import open_session

        engine = build_test_engine(onnx_path, tmp_path / ("m_fp16.engine" if fp16 else "m_fp32.engine"), fp16)
        return open_session(engine)
    return make


no_gpu = pytest.mark.skipif(not _cuda(), reason="no CUDA GPU")
no_trt = pytest.mark.skipif(not is_available("tensorrt"), reason="TensorRT is not installed (JetPack or pip tensorrt)")

BACKENDS = [
    pytest.param(("fp32", _ort), id="onnxruntime-cpu"),
    pytest.param(("fp32", _torch("cpu", "fp32", False)), id="pytorch-cpu"),
    pytest.param(("fp32", _torch("cuda", "fp32", True)), id="pytorch-cuda-fp32-graph",
                 marks=[pytest.mark.gpu, no_gpu]),
    pytest.param(("fp16", _torch("cuda", "fp16", True, True)), id="pytorch-cuda-fp16-graph-channels_last",
                 marks=[pytest.mark.gpu, no_gpu]),
    pytest.param(("fp16", _torch("cuda", "fp16", False)), id="pytorch-cuda-fp16-eager",
                 marks=[pytest.mark.gpu, no_gpu]),
    pytest.param(("fp32", _trt(False)), id="tensorrt-fp32", marks=[pytest.mark.tensorrt, pytest.mark.gpu, no_trt]),
    pytest.param(("fp16", _trt(True)), id="tensorrt-fp16", marks=[pytest.mark.tensorrt, pytest.mark.gpu, no_trt]),
]


@pytest.fixture(scope="module")
def frames_batch(mobilenet_onnx, bikes_frames):
    from jetforge.runtime.sidecar import read_sidecar

    pre = read_sidecar(mobilenet_onnx).preprocess
    return pre.batch([bikes_frames[i] for i in FRAMES])  # BGR frames; the preprocessing converts to RGB


@pytest.fixture(scope="module")
def reference(mobilenet_onnx, frames_batch):
    from jetforge.runtime.session import open_session

    with open_session(mobilenet_onnx, threads=2) as ort:
        return {"specs": ([t.to_dict() for t in ort.inputs], [t.to_dict() for t in ort.outputs]),
                "logits": ort.infer({"input": frames_batch})["logits"]}


@pytest.fixture(params=BACKENDS)
def backend(request, mobilenet_onnx, mobilenet_weights, tmp_path):
    precision, make = request.param
    session = make(mobilenet_onnx, mobilenet_weights, tmp_path)
    yield precision, session
    session.close()


def _close_enough(out, ref, precision):
    rel = float(np.abs(out.astype(np.float64) - ref).max() / np.abs(ref).max())
    return rel, rel <= TOLERANCE[precision]


def _check_top1(out, ref, precision):
    """FP32: the same top-1 class for every frame.  FP16: the reference's top-1 is within the top-3
    (an ambiguous frame -- the taxi roof sign, 'cab' vs 'racer' -- may swap its two best classes)."""
    if precision == "fp32":
        assert list(out.argmax(1)) == list(ref.argmax(1))
    else:
        top3 = np.argsort(-out, axis=1)[:, :3]
        assert all(r in t for r, t in zip(ref.argmax(1), top3))
        assert (out.argmax(1) == ref.argmax(1)).mean() >= 0.8


def test_specs_match_the_onnx_model(backend, reference):
    _, session = backend
    inputs, outputs = reference["specs"]
    assert [t.name for t in session.inputs] == [t["name"] for t in inputs] == ["input"]
    assert [t.name for t in session.outputs] == [t["name"] for t in outputs] == ["logits"]
    assert session.inputs[0].dtype == "float32" and session.outputs[0].dtype == "float32"
    assert [d for d in session.inputs[0].shape[1:]] == [3, 224, 224]
    info = session.info()
    assert info["backend"] == session.backend and info["description"]


def test_outputs_match_reference_within_precision(backend, reference, frames_batch):
    precision, session = backend
    ref = reference["logits"]
    out = session.infer({"input": frames_batch})["logits"]
    assert out.shape == (len(FRAMES), 1000) and out.dtype == np.float32
    rel, ok = _close_enough(out, ref, precision)
    assert ok, "max relative difference %.2e exceeds %s tolerance %.0e" % (rel, precision, TOLERANCE[precision])
    _check_top1(out, ref, precision)
    # a second call of the same shape (a CUDA graph replays here) gives the same answer
    again = session.infer({"input": frames_batch})["logits"]
    assert _close_enough(again, out, precision)[1]


def test_batch_size_change_is_handled(backend, reference, frames_batch):
    precision, session = backend
    ref = reference["logits"]
    for index in (0, 3):  # batch 1 (a new shape: re-capture where graphs are used), then batch 1 again
        out = session.infer({"input": frames_batch[index:index + 1]})["logits"]
        assert out.shape == (1, 1000)
        assert _close_enough(out[0], ref[index], precision)[1]
    full = session.infer({"input": frames_batch})["logits"]
    assert _close_enough(full, ref, precision)[1]


def test_submit_wait_pipelines_in_order(backend, reference, frames_batch):
    precision, session = backend
    ref = reference["logits"]
    first = session.submit({"input": frames_batch[0:1]})
    second = session.submit({"input": frames_batch[1:2]})  # submitted before the first is collected
    assert _close_enough(session.wait(second)["logits"][0], ref[1], precision)[1]
    assert _close_enough(session.wait(first)["logits"][0], ref[0], precision)[1]
    assert first.done() and second.done()
    again = first.wait()  # waiting twice returns the same outputs
    assert _close_enough(again["logits"][0], ref[0], precision)[1]


def test_inputs_are_checked_at_submit(backend, frames_batch):
    _, session = backend
    with pytest.raises(ModelError, match="float32"):
        session.submit({"input": frames_batch.astype(np.float64)})
    with pytest.raises(UnknownNameError):
        session.infer({"images": frames_batch})
    with pytest.raises(ModelError, match="dimensions"):
        session.infer({"input": frames_batch[0]})


def test_close_releases_and_refuses_further_calls(backend, frames_batch):
    _, session = backend
    request = session.submit({"input": frames_batch[:1]})
    session.close()  # a pending request is finished (or its buffers kept) before resources go
    assert session.closed
    session.close()  # idempotent
    with pytest.raises(BackendError, match="closed"):
        session.infer({"input": frames_batch[:1]})
    with pytest.raises(BackendError, match="closed"):
        session.submit({"input": frames_batch[:1]})
    del request


def test_context_manager_closes(mobilenet_onnx):
    from jetforge.runtime.session import open

    with open(mobilenet_onnx, threads=1) as session:
        assert not session.closed
    assert session.closed


def test_wait_refuses_a_request_of_another_session(mobilenet_onnx, frames_batch):
    from jetforge.runtime.session import open_session

    with open_session(mobilenet_onnx, threads=1) as a, open_session(mobilenet_onnx, threads=1) as b:
        request = a.submit({"input": frames_batch[:1]})
        with pytest.raises(BackendError, match="this session"):
            b.wait(request)
        assert a.wait(request)["logits"].shape == (1, 1000)
