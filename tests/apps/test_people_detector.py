"""The people app's detector choice: the CNN (SSDLite-MobileNetV2 export) by default, HOG on request; detection on
every N-th frame with the tracker coasting in between; what a machine without torch is told."""

import argparse

import numpy as np
import pytest

from jetforge.apps.pipeline.stages import Item
from jetforge.apps.tasks.detectors.ssd import SsdPeopleDetector
from jetforge.apps.tasks.people import PeopleApp, PeopleTask, make_person_detector
from jetforge.apps.video.sources.base import Frame
from jetforge.cli import model_refs
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
