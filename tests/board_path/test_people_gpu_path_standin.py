"""``jetforge app people --detector-tiles 2 --decode gpu`` on a TensorRT engine, its GPU path end to end on the CPU:
DeviceFrameOps (the preprocessing kernel's crop per tile block), TrtSession binding that buffer in place, the SSD
decoded behind the engine by QueuedSsdDecoder (or, without the device head, the outputs copied back per batch in
flight and decoded on the host), the people task's merge of each frame's tiles.

Stand-ins, named as such: TensorRT's API over ONNX Runtime and CUDA over host memory (tests/standins), and the two
NVRTC kernels' CUDA C built by g++ for the CPU (tests/runtime/gpu_kernels/test_gpu_kernels_on_cpu.FakeGpuKernel);
the frames are vtest.avi's, uploaded as NV12 into "device" memory as NVDEC leaves them.  Expected: the people of the
CPU path's tiled detector on the same frames, through the kernels' float64 reference preprocessing
(tests/apps/test_gpu_tiles._ReferenceSsd): the same people per frame, boxes within 0.5 px and scores within 0.005,
the bounds the same check has on a real GPU (tests/apps/test_gpu_tiles.py, where the differences measured 0.018 px
and 0.0006); and the GPU decoding equal to the host decoding of the same engine outputs within 0.01 px and 1e-5
(float32 kernel arithmetic against numpy's on the same outputs).  Not shown: TensorRT, a GPU, timing.
"""

import dataclasses
import json

import numpy as np
import pytest

from tests.apps.test_gpu_tiles import _ReferenceSsd, device_frames, vtest_nv12  # before the stand-ins are installed
from tests.board_path.conftest import TARGET, run_cli

pytest.importorskip("onnxruntime")
pytest.importorskip("cuda.bindings.runtime", reason="the GPU path's CUDA layer imports cuda-python")


@pytest.fixture
def cpu_kernels(monkeypatch, tmp_path_factory):
    from jetforge.runtime.cuda.kernels import launch
    from tests.runtime.gpu_kernels.test_gpu_kernels_on_cpu import CXX, FakeGpuKernel

    if CXX is None:
        pytest.skip("no g++ to compile the kernels' CUDA C for the CPU")
    FakeGpuKernel.folder = tmp_path_factory.getbasetemp()
    monkeypatch.setattr(launch, "Kernel", FakeGpuKernel)


def _people(ops, frames):
    try:
        return ops.finish(ops.launch(frames, 4), frames)
    finally:
        ops.close()


def test_the_people_gpu_path_on_an_engine_finds_the_cpu_paths_people(standin, cpu_kernels, person_detector,
                                                                       vtest_clip, tmp_path):
    from jetforge.apps.pipeline.gpu_ops import DeviceFrameOps
    from jetforge.apps.tasks.people import PeopleTask
    from jetforge.runtime.cuda.kernels.color import ColorSpec
    from jetforge.runtime.cuda.kernels.reference import nv12_to_rgb
    from jetforge.vision.ssd_detector import SsdPeopleDetector
    from jetforge.vision.tiles import TiledPeopleDetector

    config = tmp_path / "build.yaml"  # 4 frames padded x (1 + 4 tiles) = 20 rows a batch
    config.write_text(json.dumps({"profiles": [{"input": {"min": [1, 3, 300, 300], "opt": [20, 3, 300, 300],
                                                          "max": [20, 3, 300, 300]}}]}))
    engine = tmp_path / "people.engine"
    assert run_cli(["-q", "build", str(person_detector), "--target", TARGET, "--config", str(config),
                    "--out", str(engine)]) == 0
    nv12 = vtest_nv12(vtest_clip)
    tiled = TiledPeopleDetector(SsdPeopleDetector(engine, score_threshold=0.3), grid=2)
    held, frames = [], []
    try:
        frames = device_frames(nv12, held)
        model = PeopleTask(tiled).gpu_model()
        assert model.session.name == "tensorrt" and model.device_head is not None
        gpu_ops = DeviceFrameOps(model, 4, frames[0])
        assert gpu_ops.decoder is not None and "decoded on the GPU" in gpu_ops.kind
        got = _people(gpu_ops, frames)
        host_ops = DeviceFrameOps(dataclasses.replace(model, device_head=None), 4, frames[0])
        assert host_ops.decoder is None and host_ops.output_slots is not None
        host = _people(host_ops, frames)
    finally:
        for b in held:
            b.close()
        tiled.close()
    reference_detector = TiledPeopleDetector(SsdPeopleDetector(person_detector, score_threshold=0.3), grid=2)
    try:
        color = ColorSpec(frames[0].matrix, "full" if frames[0].full_range else "limited")
        reference = TiledPeopleDetector(_ReferenceSsd(reference_detector.inner), grid=2)
        want = reference.detect_batch([nv12_to_rgb(y, uv, color) for y, uv in nv12])
    finally:
        reference_detector.close()
    for g, h, w in zip(got, host, want):
        assert len(g.boxes) == len(h.boxes) == len(w.boxes) >= 1
        og, oh, ow = (np.lexsort(d.boxes.T[::-1]) for d in (g, h, w))
        assert np.abs(g.boxes[og] - w.boxes[ow]).max() <= 0.5 and np.abs(g.scores[og] - w.scores[ow]).max() <= 0.005
        assert np.abs(g.boxes[og] - h.boxes[oh]).max() <= 0.01 and np.abs(g.scores[og] - h.scores[oh]).max() <= 1e-5
