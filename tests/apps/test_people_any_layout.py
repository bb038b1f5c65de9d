"""The person-detector apps with a detector of another output layout: the shipped ``yolov8-person-192`` (a real
YOLOv8-layout ONNX whose sidecar names the ``yolov8`` decoder) as ``--detector-model`` of ``app people`` (CPU, tiles,
the GPU path on the NVDEC stand-in), ``app action``, per-track clip calibration and the action recipe's track cache,
on vtest.avi.

The reference for every detection is ``app detect``'s :class:`~jetforge.vision.decoded_detector.DecodedDetector`
run directly on the same frames at the people app's score threshold, its rows of the ``person`` class picked here by
the label list (that decoder is itself held to an independent reference decoder in tests/apps/test_detect_app.py);
the tiled reference cuts the tiles and merges them here with :func:`~jetforge.vision.tiles.merge_tiled`, not through
the app's detector classes.  A model whose classes hold no person is one error, exit 1.  The SSD path is unchanged:
tests/apps/test_people.py, test_people_detector.py and test_gpu_tiles.py cover it.
"""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from jetforge.cli.main import main

cv2 = pytest.importorskip("cv2")

FRAMES = 6
THRESHOLD = 0.2  # the people app's default --detector-threshold (it replaces the sidecar's 0.25)
# the events round boxes to 0.1 px and scores to 0.001: half a step, plus float32's rounding of the bound
BOX_TOL, SCORE_TOL = 0.05 + 1e-3, 0.0005 + 1e-6


@pytest.fixture(scope="module")
def yolo():
    from jetforge.workflow.shipped_models import shipped_model

    return shipped_model("yolov8-person-192").onnx


@pytest.fixture(scope="module")
def vtest():
    from jetforge.assets import asset_path

    return asset_path("opencv_samples", "vtest.avi")


@pytest.fixture(scope="module")
def frames(vtest):
    cap = cv2.VideoCapture(str(vtest))
    images = [cap.read()[1] for _ in range(FRAMES)]
    cap.release()
    return images


def reference_persons(model, images):
    """(boxes, scores) of the person class per image: DecodedDetector itself at the app's threshold."""
    from jetforge.vision.decoded_detector import DecodedDetector

    with DecodedDetector(model, score_threshold=THRESHOLD) as det:
        person = list(det.labels).index("person")
        found = [det(image) for image in images]
    return [(d.boxes[d.classes == person], d.scores[d.classes == person]) for d in found]


def reference_tiled(model, images, grid=2):
    """The frame and its grid x grid tiles through DecodedDetector, person rows merged by merge_tiled."""
    from jetforge.vision.tiles import cut_tile, merge_tiled, tile_rects, tile_side_for

    rects = tile_rects(grid, tile_side_for(grid))
    out = []
    for image in images:
        parts = reference_persons(model, [image] + [cut_tile(image, r) for r in rects])
        out.append(merge_tiled(image.shape[:2], rects, [b for b, _ in parts], [s for _, s in parts]))
    return out


def run_app(tmp, *argv):
    out = Path(tmp)
    assert main(["-q", "app"] + [str(a) for a in argv] + ["--no-video", "--no-plots", "--out", str(out)]) == 0
    events = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
    return events, json.loads((out / "metrics.json").read_text())


def assert_same_rows(got, boxes, scores, box_tol=BOX_TOL, score_tol=SCORE_TOL, sort=False):
    got = np.asarray(got, np.float64).reshape(-1, 5)
    boxes, scores = np.asarray(boxes, np.float64).reshape(-1, 4), np.asarray(scores, np.float64)
    assert len(got) == len(boxes)
    if sort:  # a merge's order among equal scores is not the point: compare as sets of boxes
        g, w = np.lexsort(got[:, :4].T[::-1]), np.lexsort(boxes.T[::-1])
        got, boxes, scores = got[g], boxes[w], scores[w]
    np.testing.assert_allclose(got[:, :4], boxes, rtol=0, atol=box_tol)
    np.testing.assert_allclose(got[:, 4], scores, rtol=0, atol=score_tol)


@pytest.fixture(scope="module")
def people_run(tmp_path_factory):
    return run_app(tmp_path_factory.mktemp("yolo"), "people", "--detector-model", "yolov8-person-192",
                   "--max-frames", FRAMES)


def test_people_app_runs_the_yolov8_layout_detector_as_its_decoder_does(people_run, yolo, frames):
    """Each frame's detections are the decoder's person rows (same order: best first), within the events'
    rounding; the tracker confirms vtest's walkers from them; the metrics name the model and its decoder.  The
    app's threshold must be the one applied: frame 4 holds a person at score 0.214, which the sidecar's own 0.25
    would drop (checked: the test fails then)."""
    events, metrics = people_run
    people = [e for e in events if e["type"] == "people"]
    assert [e["frame"] for e in people] == list(range(FRAMES))
    found = 0
    for e, (boxes, scores) in zip(people, reference_persons(yolo, frames)):
        assert_same_rows(e["detections"], boxes, scores)
        found += len(boxes)
    assert found >= 2 * FRAMES  # vtest's first frames show 2-3 people: not a comparison of empty frames
    assert max(e["people"] for e in people) >= 2 and all(e["people"] == len(e["tracks"]) for e in people)
    model = metrics["model"]
    assert "yolov8 decoder" in model["model"] and "class 'person' only" in model["backend"]
    assert model["detector"]["score_threshold"] == THRESHOLD and model["detector"]["tiles"] == 0


def test_tiles_run_the_other_layout_on_the_cpu_path(tmp_path, yolo, frames):
    """``--detector-tiles 2``: the frame and its 4 tiles, merged; equal to the merge made here from the decoder's own
    person rows (as sets: boxes within the events' rounding), and finding more people than the whole frame alone."""
    events, metrics = run_app(tmp_path, "people", "--detector-model", "yolov8-person-192", "--detector-tiles", 2,
                              "--max-frames", 3)
    want = reference_tiled(yolo, frames[:3])
    people = [e for e in events if e["type"] == "people"]
    assert len(people) == 3 and metrics["model"]["detector"]["tiles"] == 2
    for e, (boxes, scores) in zip(people, want):
        assert_same_rows(e["detections"], boxes, scores, sort=True)
    whole = reference_persons(yolo, frames[:3])
    assert sum(len(b) for b, _ in want) > sum(len(b) for b, _ in whole)


@pytest.mark.parametrize("tiles", [0, 2])
def test_gpu_path_decodes_the_other_layout_as_the_cpu_detector(tmp_path, monkeypatch, yolo, vtest, tiles):
    """``--decode gpu`` (NVDEC replaced by its CPU stand-in, tests/standins/fake_nvdec.py), 2 streams of 3 frames in
    one batch (with tiles: 5 row blocks a frame): the batch's raw outputs decoded on the host by the model's decoder
    (person class, tiles merged per frame) equal the CPU detector on the same NV12-converted frames.  Tolerance:
    boxes 0.5 px and scores 0.005, as tests/apps/test_gpu_tiles.py states for the SSD (the GPU path preprocesses with
    the contract's fused OpenCV path, the reference with its reference path: equal to float32 rounding, which moves
    a box by a small fraction of a pixel; measured here, events' rounding included: boxes within 0.049 px, scores
    within 0.00043, with and without tiles)."""
    from jetforge.apps.video.sources.gpu import nvdec, open as gpu
    from jetforge.apps.video.sources.gpu.frame import bgr_from_nv12
    from jetforge.apps.video.sources.gpu.nvdec import NvDecSource
    from tests.standins.fake_nvdec import FakeNvDecoder

    monkeypatch.setattr(gpu, "choose_decoder", lambda wanted, have=None: "nvdec")
    monkeypatch.setattr(nvdec, "load_pynvvideocodec", lambda: FakeNvDecoder)
    events, metrics = run_app(tmp_path, "people", "--decode", "gpu", "--detector-model", "yolov8-person-192",
                              "--detector-tiles", tiles, "--source", vtest, "--source", vtest, "--max-frames", 3)
    with NvDecSource(vtest, codec_module=FakeNvDecoder, max_frames=3) as src:
        images = [bgr_from_nv12(cv2, f.host_nv12()) for f in src]
    want = reference_tiled(yolo, images) if tiles else reference_persons(yolo, images)
    assert metrics["model"]["detector"]["tiles"] == tiles
    for s in range(2):
        mine = sorted((e for e in events if e.get("stream") == s and "detections" in e), key=lambda e: e["frame"])
        assert [e["frame"] for e in mine] == [0, 1, 2]
        for e, (boxes, scores) in zip(mine, want):
            assert len(boxes) >= 2
            assert_same_rows(e["detections"], boxes, scores, box_tol=0.5, score_tol=0.005, sort=True)


def test_action_app_and_the_track_cache_take_it(tmp_path, people_run, yolo, vtest):
    """``app action --detector-model yolov8-person-192`` tracks and classifies people; the action recipe's track
    cache (``ensure_track_cache``, tracking through ``vision.person_tracks`` rather than the app pipeline) given the
    same model holds the people app's tracks frame for frame."""
    from jetforge.compress.action.track_clips import ensure_track_cache

    events, metrics = run_app(tmp_path / "action", "action", "--detector-model", "yolov8-person-192",
                              "--max-frames", 30, "--threads", 1)
    assert "yolov8 decoder" in metrics["model"]["model"]
    assert [t for e in events if e["type"] == "action" for t in e["tracks"] if t.get("action")]
    cache = ensure_track_cache(vtest, tmp_path / "tracks", max_frames=FRAMES, detector_model=yolo)
    cached = [json.loads(x) for x in cache.read_text().splitlines()]
    app = [e for e in people_run[0] if e["type"] == "people"]
    assert [c["tracks"] for c in cached] == [e["tracks"] for e in app] and any(c["tracks"] for c in cached)


def test_per_track_clip_calibration_takes_it_by_its_shipped_name(tmp_path, vtest):
    """``calibrate --clips per-track --detector-model yolov8-person-192`` (the shipped name resolved for calibrate
    too): the action model calibrated on clips cut along that detector's tracks of vtest.avi's first 30 frames."""
    assert main(["calibrate", "action-mobilenet3d", "--data", "%s@0:30" % vtest, "--clips", "per-track",
                 "--detector-model", "yolov8-person-192", "--clip-stride", "3", "--clips-per-track", "2",
                 "--samples", "4", "--min-samples", "4", "--no-plots", "--out", str(tmp_path / "a.calib")]) == 0
    (source,) = json.loads((tmp_path / "a.calib.json").read_text())["data"]["sources"]
    assert source["kind"] == "clips (per-track)" and source["frames"] == [0, 30]
    assert source["available"] >= 4 and source["planned"] == 4  # at most 2 clips a track: 2 tracks or more


def test_a_detector_without_a_person_class_is_one_error(tmp_path, capsys, yolo):
    """The same model with its sidecar naming another class: exit 1, one line naming its classes and the fix, no
    output written; with unnamed classes: the command that names them.  The SSD sidecar still picks the SSD."""
    from jetforge.errors import ModelError
    from jetforge.vision.person_detectors import open_person_detector
    from jetforge.vision.ssd_detector import SsdPeopleDetector
    from jetforge.workflow.shipped_models import shipped_model

    car = tmp_path / "car.onnx"
    shutil.copyfile(str(yolo), str(car))
    sidecar = json.loads(Path(str(yolo) + ".json").read_text())
    Path(str(car) + ".json").write_text(json.dumps(dict(sidecar, labels=["car"])))
    capsys.readouterr()
    assert main(["app", "people", "--detector-model", str(car), "--max-frames", "2", "--out",
                 str(tmp_path / "o")]) == 1
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("jetforge: error: ") and "Traceback" not in lines[0]
    assert "detects car, not people" in lines[0] and "yolov8-person-192" in lines[0]
    assert not (tmp_path / "o").exists()
    Path(str(car) + ".json").write_text(json.dumps(dict(sidecar, labels=[])))
    with pytest.raises(ModelError, match="unnamed") as err:
        open_person_detector(car)
    assert "export-sidecar %s --decoder yolov8 --classes person" % car in err.value.hint
    with open_person_detector(shipped_model("ssdlite-person-192").onnx) as ssd:
        assert isinstance(ssd, SsdPeopleDetector)
