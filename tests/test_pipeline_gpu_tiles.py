"""The person detector's tiles in benchmarks/gpu_pipeline/pipeline_gpu.py (``people-tiles2``), on the CPU as its dry run
runs them: the benchmark's tiled ops (the torch fallback cutting the tiles into the app's row blocks, the session,
the head's gather, batched decode and the app's merge) against the CPU reference path - TiledPeopleDetector over
the GPU kernels' float64 reference preprocessing, the same model and the CPU detector's per-image decode - on the
same decoded frames (``detector_check``, the step the device run makes before its tiled points); a wrong row layout is
caught; a tiled model-alone measurement counted in frames.

The frames are vtest.avi's (768x576 through the NVDEC stand-in: tile origins x0 = 307, y0 = 230, an odd x, so the
chroma grid of a crop is the frame's), the model the SSDLite person detector's port with the weights ``--prep``
carries (FP16 state dict, turned back to FP32 as on the device)."""

from argparse import Namespace

import numpy as np
import pytest

from benchmarks.common.pipeline_gpu_tiles import (BOX_TOL_PX, SCORE_TOL, compare, detector_check, per_frame,
                                                  run_detector_check)
from jetforge.errors import BackendError
from jetforge.vision.detections import Detections
from tests.runtime.gpu_kernels.test_queued_ssd_on_cpu import host_gpu  # noqa: F401 - a fixture

torch = pytest.importorskip("torch")
pytest.importorskip("cv2")

MODEL = "people-tiles2"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """The dry run's Env over a carry folder made here: the weights as ``--prep`` writes them, vtest.avi as the
    stream (the fake decoder reads it with OpenCV)."""
    from benchmarks.common.pipeline_gpu_env import Env
    from benchmarks.common.pipeline_gpu_prep import save_half_weights
    from jetforge.assets import asset_path

    carry = tmp_path_factory.mktemp("carry")
    (carry / "assets").mkdir()
    (carry / "streams").mkdir()
    save_half_weights(carry / "assets")
    (carry / "streams" / "people720.mp4").symlink_to(asset_path("opencv_samples", "vtest.avi"))
    args = Namespace(dry_run=True, models=[MODEL, "people"], scratch=str(carry / "scratch"), torch_preprocess=False)
    threads = torch.get_num_threads()
    try:
        yield Env(args, carry)
    finally:
        torch.set_num_threads(threads)  # the dry run's Env pins torch to one thread


def test_tiled_ops_equal_the_cpu_reference_on_vtest(env):
    """3 frames in a batch padded to 4 (tile blocks at rows 4, 8, 12, 16 of 20): the same people per frame, boxes
    within 0.01 px and scores within 1e-4 (50x tighter than the check's own bounds, which allow for the NVRTC kernel
    on the device).  Why: here both sides compute the same maths, the fallback in float32 and the reference in
    float64 with another decoder (per image vs batched), so a box moves by float32 rounding only (measured here:
    0.0002 px and 1e-5 in score; 0.0003 px and 2e-6 on people720.mp4 in the dry run).  The tiles must matter: the
    merged result holds people the whole frame alone misses (measured: 3, 3, 3 vs 2, 2, 3), so a wrong tile block
    could not pass unseen."""
    r = detector_check(env, MODEL)
    assert r["equal"] is True and r["padded"] == 4 and r["rows"] == 20 and r["tiles"] == 4
    assert r["frames"] == [0, 1, 2] and r["preprocess"] == "torch-fallback" and r["ssd_decode"].startswith("host")
    assert r["people"] == r["reference_people"] and min(r["people"]) >= 1
    assert r["max_box_px"] <= 0.01 and r["max_score"] <= 1e-4
    assert sum(r["reference_people"]) > sum(r["reference_people_whole_frame"])
    assert r["tolerance"] == {"box_px": BOX_TOL_PX, "score": SCORE_TOL}


def test_tiled_ops_decoding_on_the_gpu_as_the_app_equal_the_cpu_reference(env, monkeypatch, host_gpu):
    """The goal rows' decoding (the app's on a TensorRT engine: QueuedSsdDecoder launched on every padded row, the
    frames' rows of each tile block kept) with the kernel's CUDA C built for the CPU (tests/runtime/gpu_kernels/
    test_queued_ssd_on_cpu.py): the same check, the same bounds as the host decoding above."""
    from jetforge.vision.ssd_gpu import QueuedSsdDecoder

    monkeypatch.setattr(env, "_ssd_decoder", lambda spec, host_decode, rows: None if host_decode else
                        QueuedSsdDecoder(spec, rows, score_threshold=0.5))
    r = detector_check(env, MODEL)
    assert r["ssd_decode"].startswith("gpu kernel queued") and r["equal"] is True and r["rows"] == 20
    assert r["people"] == r["reference_people"] and min(r["people"]) >= 1
    assert r["max_box_px"] <= 0.01 and r["max_score"] <= 1e-4


def test_a_wrong_row_layout_is_caught(env, monkeypatch):
    """The head reading tile 0's rows as tile 1's and the other way round (what a layout slip would do): the check
    fails, is recorded, and raises the error the run counts."""
    import jetforge.apps.tasks.people as people

    real = people.tile_block_rows

    def swapped(n, padded, blocks):
        rows = real(n, padded, blocks)
        return rows[:n] + rows[2 * n:3 * n] + rows[n:2 * n] + rows[3 * n:]

    monkeypatch.setattr(people, "tile_block_rows", swapped)
    res = {}
    with pytest.raises(BackendError):
        run_detector_check(env, res, MODEL)
    assert res["detector_check"][MODEL]["equal"] is False


def test_compare_needs_equal_counts_and_boxes_within_tolerance():
    a = Detections(np.array([[0, 0, 10, 20], [5, 5, 8, 9]], np.float32), np.array([0.9, 0.6], np.float32))
    shifted = Detections(a.boxes[::-1] + np.float32(0.25), a.scores[::-1] + np.float32(0.001))  # another order
    c = compare([a], [shifted])
    assert c["equal"] is True and c["max_box_px"] == pytest.approx(0.25, abs=1e-6)
    assert c["max_score"] == pytest.approx(0.001, abs=1e-6)
    assert compare([a], [Detections(a.boxes + np.float32(0.75), a.scores)])["equal"] is False  # 0.75 px > 0.5
    assert compare([a], [Detections(a.boxes[:1], a.scores[:1])])["equal"] is False  # one person fewer
    empty = Detections(np.zeros((0, 4), np.float32), np.zeros(0, np.float32))
    assert compare([empty], [empty])["equal"] is False  # nothing found: the check would show nothing


def test_tiled_model_alone_counts_frames():
    """20 rows at 100 rows/s = 4 frames of 5 rows at 20 frames/s; a model of one row a frame is left as it is."""
    r = per_frame({"batch": 20, "iterations": 10, "fps": 100.0, "ms_per_batch": 200.0}, 5)
    assert (r["batch"], r["rows"], r["rows_per_frame"], r["rows_fps"], r["fps"]) == (4, 20, 5, 100.0, 20.0)
    plain = {"batch": 4, "fps": 100.0}
    assert per_frame(plain, 1) is plain


def test_the_untiled_detector_is_checked_against_the_cpu_reference_too(env, monkeypatch, host_gpu):
    """``people``'s check (the goal rows' detector): 3 frames padded to 4, the SSD decoded as the goal rows decode it
    (the queued GPU decoder, the kernel's CUDA C built for the CPU), against ReferenceSsd on the same frames: the
    same bounds as the tiles above (float32 against float64 only)."""
    from jetforge.vision.ssd_gpu import QueuedSsdDecoder

    monkeypatch.setattr(env, "_ssd_decoder", lambda spec, host_decode, rows: None if host_decode else
                        QueuedSsdDecoder(spec, rows, score_threshold=0.5))
    r = detector_check(env, "people")
    assert r["equal"] is True and r["tiles"] == 0 and r["padded"] == 4 and r["rows"] == 4
    assert r["ssd_decode"].startswith("gpu kernel queued") and min(r["people"]) >= 1
    assert r["max_box_px"] <= 0.01 and r["max_score"] <= 1e-4
