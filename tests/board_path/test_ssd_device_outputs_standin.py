"""The people app's SSD decoding on the GPU path, through TrtSession with the TensorRT stand-in: four padded, tiled
batches (3 frames x 2 blocks in 8 rows) written by a producer stream into one pair of input buffers
(``wait_for_inputs_read`` first, as the app's preprocessing does), each submitted with ``on_device_outputs`` =
:class:`jetforge.vision.ssd_gpu.QueuedSsdDecoder` on the session's device outputs, all four queued before any is
collected (CUDA graphs replayed after the first).  Each must equal ``vision.ssd.postprocess`` of its own frames' rows
(boxes 1e-5, scores 1e-6: the kernel's float32 arithmetic against numpy's, as the kernel's own tests bound it).  Then
the same four batches with the outputs copied back whole into a pinned set per batch in flight
(:class:`jetforge.runtime.cuda.in_flight.PinnedOutputSlots`, the consumer for host-decoded models): equal to the
inputs, bit for bit.

The "engine" passes the real detector outputs of the kernel test's fixture through (Identity), so that they land in
the session's device output buffers.  Here (CI): CUDA over host memory and the kernel's CUDA C built by g++ for the
CPU; on a GPU, tests/board_path/test_gpu_standin.py runs :func:`decode_batches_behind_the_engine` on real CUDA with
the NVRTC kernel.  Not shown: TensorRT itself.
"""

import json

import numpy as np
import pytest

from tests.board_path.conftest import TARGET, run_cli
from tests.runtime.gpu_kernels.test_queued_ssd_on_cpu import FIXTURE, assert_same, padded_tiled_batch

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")


def passthrough_ssd(path):
    """enc_in (n, 1917, 4) -> box_encodings, logits_in (n, 1917, 2) -> class_logits."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["enc_in"], ["box_encodings"], name="enc"),
         helper.make_node("Identity", ["logits_in"], ["class_logits"], name="logits")], "ssd_outputs",
        [helper.make_tensor_value_info("enc_in", TensorProto.FLOAT, ["n", 1917, 4]),
         helper.make_tensor_value_info("logits_in", TensorProto.FLOAT, ["n", 1917, 2])],
        [helper.make_tensor_value_info("box_encodings", TensorProto.FLOAT, ["n", 1917, 4]),
         helper.make_tensor_value_info("class_logits", TensorProto.FLOAT, ["n", 1917, 2])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    return path


def decode_batches_behind_the_engine(tmp_path):
    from jetforge.runtime.cuda import DeviceBuffer, PinnedBuffer, Stream
    from jetforge.runtime.cuda.in_flight import PinnedOutputSlots
    from jetforge.runtime.session import open_session
    from jetforge.runtime.tensorrt.session import DeviceTensor
    from jetforge.vision.ssd import SSDSpec, postprocess
    from jetforge.vision.ssd_gpu import QueuedSsdDecoder

    data = np.load(str(FIXTURE))
    enc, logits = data["enc"], data["logits"]
    spec = SSDSpec.from_dict(json.loads(str(data["spec"])))
    model = passthrough_ssd(tmp_path / "ssd.onnx")
    config = tmp_path / "build.yaml"
    shapes = {name: {"min": [1, 1917, c], "opt": [8, 1917, c], "max": [16, 1917, c]}
              for name, c in (("enc_in", 4), ("logits_in", 2))}
    config.write_text(json.dumps({"profiles": [shapes]}))
    engine = tmp_path / "ssd.engine"
    assert run_cli(["-q", "build", str(model), "--target", TARGET, "--config", str(config), "--out", str(engine)]) == 0
    orders = [[0, 1, 2, 3, 2, 1], [3, 0, 1, 2, 0, 3], [1, 1, 3, 0, 2, 2], [2, 3, 0, 0, 1, 2]]
    batches = [padded_tiled_batch(enc, logits, o, 4, 2) for o in orders]
    decoder = QueuedSsdDecoder(spec, rows=8, slots=4, score_threshold=0.3)
    slots = PinnedOutputSlots(slots=4)
    staging = [(PinnedBuffer(e.nbytes), PinnedBuffer(g.nbytes)) for e, g, _ in batches]
    try:
        with open_session(engine) as session, DeviceBuffer(batches[0][0].nbytes) as dev_enc, \
                DeviceBuffer(batches[0][1].nbytes) as dev_logits, Stream() as producer:
            requests = []
            for (e, g, rows), (pin_e, pin_g) in zip(batches, staging):
                session.wait_for_inputs_read(producer)
                pin_e.array(e.shape, "float32")[:] = e
                pin_g.array(g.shape, "float32")[:] = g
                dev_enc.copy_from_host(pin_e, e.nbytes, producer)
                dev_logits.copy_from_host(pin_g, g.nbytes, producer)
                feeds = {"enc_in": DeviceTensor(dev_enc.ptr, e.shape, "float32"),
                         "logits_in": DeviceTensor(dev_logits.ptr, g.shape, "float32")}
                requests.append(session.submit_device(
                    feeds, producer, on_device_outputs=lambda outs, s, r=rows: decoder.launch_outputs(outs, r, s)))
            for order, request in zip(orders, requests):
                assert_same(request.wait(), postprocess(enc[order], logits[order], spec, score_threshold=0.3))
            info = session.info()
            assert info["cuda_graph"] == "on" and info["cuda_graph_captures"] == 1, info
            # the same batches with the outputs copied back whole, per batch in flight (the host-decoded models)
            copied = []
            for (e, g, _), (pin_e, pin_g) in zip(batches, staging):
                session.wait_for_inputs_read(producer)
                dev_enc.copy_from_host(pin_e, e.nbytes, producer)
                dev_logits.copy_from_host(pin_g, g.nbytes, producer)
                feeds = {"enc_in": DeviceTensor(dev_enc.ptr, e.shape, "float32"),
                         "logits_in": DeviceTensor(dev_logits.ptr, g.shape, "float32")}
                copied.append(session.submit_device(feeds, producer, on_device_outputs=slots.launch))
            for (e, g, _), request in zip(batches, copied):
                out = request.wait()
                assert np.array_equal(out["box_encodings"], e) and np.array_equal(out["class_logits"], g)
    finally:
        decoder.close()
        slots.close()
        for pair in staging:
            for pinned in pair:
                pinned.close()


def test_ssd_outputs_decoded_behind_the_engine_on_the_standins(standin, tmp_path, tmp_path_factory, monkeypatch):
    from jetforge.runtime.cuda.kernels import launch
    from tests.runtime.gpu_kernels.test_gpu_kernels_on_cpu import CXX, FakeGpuKernel

    if CXX is None:
        pytest.skip("no g++ to compile the kernel's CUDA C for the CPU")
    FakeGpuKernel.folder = tmp_path_factory.getbasetemp()
    monkeypatch.setattr(launch, "Kernel", FakeGpuKernel)
    decode_batches_behind_the_engine(tmp_path)
