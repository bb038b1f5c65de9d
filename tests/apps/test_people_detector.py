"""The people app's detector choice: the CNN (SSDLite-MobileNetV2 export) by default, HOG on request; detection on
every N-th frame with the tracker coasting in between; what a machine without torch is told."""

import argparse

import numpy as np
import pytest

from jetforge.apps.pipeline.stages import Item
from jetforge.vision.ssd_detector import SsdPeopleDetector
from jetforge.apps.tasks.people import PeopleApp, PeopleTask, make_person_detector
from jetforge.apps.video.sources.base import Frame
from jetforge.workflow import model_refs
from jetforge.errors import ConfigError, ModelError


def _args(**kw):
    parser = argparse.ArgumentParser()
    PeopleApp().add_arguments(parser)
    args = parser.parse_args([])
    for k, v in kw.items():
        setattr(args, k, v)
    return args


@pytest.fixture(scope="module")
def detector_path():
    path, _ = model_refs.ensure_person_detector()  # the app's cached export (made once from the frozen graph)
    return path


@pytest.fixture(scope="module")
def vtest_frames():
    import cv2

    from jetforge.assets import asset_path

    cap = cv2.VideoCapture(str(asset_path("opencv_samples", "vtest.avi")))
    frames = [cap.read()[1] for _ in range(4)]
    cap.release()
    return frames


def test_the_default_is_the_cnn_and_hog_stays_available():
    args = _args()
    assert args.detector == "ssd" and args.detect_every == 1 and args.line_margin == 10.0
    with pytest.raises(ConfigError, match="needs the exported person detector"):
        make_person_detector(args)  # outside the CLI nobody filled in --detector-model
    with pytest.raises(ConfigError, match="goes with --detector ssd"):
        make_person_detector(_args(detector="hog", detector_model="det.onnx"))
    hog, files = make_person_detector(_args(detector="hog"))
    assert "HOG" in hog.label and files == []
    with pytest.raises(ConfigError, match="--detect-every must be 1 or more"):
        PeopleTask(hog, detect_every=0)


def test_without_torch_the_missing_export_is_one_error_with_the_way_out(tmp_path, monkeypatch):
    monkeypatch.setattr(model_refs, "is_available", lambda name: False)
    with pytest.raises(ConfigError) as err:
        model_refs.ensure_person_detector(models_dir=tmp_path)
    assert "exporting it needs torch" in str(err.value)
    assert "--detector-model det.onnx" in err.value.hint and "jetforge export --model ssdlite" in err.value.hint
    args = _args()
    monkeypatch.setattr(model_refs, "models_cache_dir", lambda: tmp_path)
    with pytest.raises(ConfigError, match="exporting it needs torch"):
        model_refs.prepare_app_models("people", args)
    given = _args(detector_model="mine.onnx")
    assert model_refs.prepare_app_models("people", given) == [] and given.detector_model == "mine.onnx"


def test_cnn_detections_in_frame_pixels(detector_path, vtest_frames):
    with SsdPeopleDetector(detector_path) as det:
        one = det(vtest_frames[0])
        batch = det.detect_batch(vtest_frames[:2])
        assert det.to_confidence(one.scores) is not None and "ONNX Runtime" in det.describe()
        assert det.spinning is False and det.score_threshold == 0.2
    # vtest.avi frame 0, by eye (tests/apps/test_people.py's hand notes): a man in a dark jacket on the left at
    # x ~ 265 and a man coming down from the car park at the top at x ~ 515, both found with high scores
    assert len(one) >= 2 and (one.scores > 0.2).all() and (np.diff(one.scores) <= 0).all()
    centres = (one.boxes[:, 0] + one.boxes[:, 2]) / 2
    for x in (265, 515):
        k = int(np.argmin(np.abs(centres - x)))
        assert abs(centres[k] - x) < 20 and one.scores[k] > 0.8
    w, h = one.boxes[:, 2] - one.boxes[:, 0], one.boxes[:, 3] - one.boxes[:, 1]
    assert (one.boxes[:, 0] >= 0).all() and (one.boxes[:, 2] <= 768).all() and (one.boxes[:, 3] <= 576).all()
    assert (h > w).all() and (h > 40).all()
    # one session call for two frames gives each frame's own result (batch = loop, up to float summation order)
    assert np.allclose(batch[0].boxes, one.boxes, atol=1e-2) and np.allclose(batch[0].scores, one.scores, atol=1e-4)
    with pytest.raises(ModelError, match="score threshold"):
        SsdPeopleDetector(detector_path, score_threshold=1.5)


def test_detect_every_second_frame_coasts_the_tracks(detector_path, vtest_frames):
    with SsdPeopleDetector(detector_path) as det:
        task = PeopleTask(det, detect_every=2)
        frames = [Frame(index=i, timestamp=i / 10.0, image=img) for i, img in enumerate(vtest_frames)]
        inputs = [task.preprocess(f) for f in frames]
        assert [x is None for x in inputs] == [False, True, False, True]
        outputs = task.infer(inputs)
        assert [o is None for o in outputs] == [False, True, False, True]
        events = [task.postprocess(Item(frame=f, input=x, output=o)) for f, x, o in zip(frames, inputs, outputs)]
    assert events[1]["detections"] is None and events[0]["detections"]
    assert task.status_label.endswith("every 2 frames")
    # confirmed after two detections (min_hits 2: frames 0 and 2); frame 3 shows the same ids at predicted places
    ids2 = sorted(t["id"] for t in events[2]["tracks"])
    assert ids2 and sorted(t["id"] for t in events[3]["tracks"]) == ids2
    assert task.info()["detector"]["detect_every"] == 2


def test_tiles_find_the_far_person_the_whole_frame_misses_in_one_batch(detector_path, vtest_frames):
    from jetforge.vision.tiles import TiledPeopleDetector
    from jetforge.vision.person_labels import read_person_labels
    from jetforge.vision.boxes import iou_matrix

    # vtest frame 0's three hand-labelled people; the third walks near the right edge, and the whole frame at
    # 300x300 scores it ~0.1 -- below the app's 0.2 threshold. Zoomed 1.67x in a tile, the model is sure of it
    (labelled,) = [f for f in read_person_labels().select("train", "vtest") if f.index == 0]
    people = np.asarray(labelled.boxes, np.float64)
    frame = vtest_frames[0]
    with SsdPeopleDetector(detector_path) as plain:
        whole = plain(frame)
    calls = []
    with TiledPeopleDetector(SsdPeopleDetector(detector_path)) as tiled:
        inner_batch = tiled.inner.detect_batch
        tiled.inner.detect_batch = lambda images: calls.append(len(images)) or inner_batch(images)
        found = tiled.detect_batch(vtest_frames[:2])
        assert tiled.label.endswith("+ 2x2 tiles") and "2x2 tiles of 0.60" in tiled.describe()
    assert calls == [10]  # two frames and their four tiles each: one session call
    hits = lambda det: int((iou_matrix(people, det.boxes.astype(np.float64)).max(axis=1) >= 0.5).sum())  # noqa: E731
    assert hits(whole) == 2 and hits(found[0]) == 3
    # boxes in frame pixels, best first; the two people the whole frame saw keep their boxes and scores
    assert found[0].boxes.dtype == np.float32 and found[0].boxes[:, [0, 2]].max() <= frame.shape[1] + 1
    assert np.all(np.diff(found[0].scores) <= 0)
    for box, score in zip(whole.boxes[whole.scores > 0.9], whole.scores[whole.scores > 0.9]):
        same = iou_matrix(box[None].astype(np.float64), found[0].boxes.astype(np.float64))[0] > 0.99
        assert same.any() and np.isclose(found[0].scores[same].max(), score)


def test_detector_tiles_option_builds_the_tiled_detector_or_refuses(detector_path):
    from jetforge.vision.tiles import TiledPeopleDetector

    detector, files = make_person_detector(_args(detector_model=str(detector_path), detector_tiles=2))
    try:
        assert isinstance(detector, TiledPeopleDetector) and files == [detector_path]
        assert PeopleTask(detector).info()["detector"]["tiles"] == 2
    finally:
        detector.close()
    assert _args().detector_tiles == 0
    for bad in (1, -1, 5):
        with pytest.raises(ConfigError, match="--detector-tiles must be 0"):
            make_person_detector(_args(detector_model=str(detector_path), detector_tiles=bad))
    with pytest.raises(ConfigError, match="--detector-tiles goes with --detector ssd"):
        make_person_detector(_args(detector="hog", detector_tiles=2))


def test_tile_side_shrinks_with_the_grid_and_neighbours_still_overlap():
    from jetforge.vision.tiles import tile_side_for
    from jetforge.vision.tiles import tile_rects

    assert [round(tile_side_for(n), 3) for n in (2, 3, 4)] == [0.6, 0.4, 0.3]
    for n in (2, 3, 4):
        rects = tile_rects(n, tile_side_for(n))
        overlap = rects[0, 3] - rects[1, 1]  # tile 0's right edge past tile 1's left edge
        assert overlap > 0.06 and rects[-1, 3] == pytest.approx(1.0)
