"""The one HOG people detector (vision/hog.py) that the people and action apps run and per-track clip calibration
tracks people with, checked against OpenCV's detector called directly on real frames."""

import numpy as np
import pytest

from jetforge.vision.boxes import iou_matrix
from jetforge.vision.hog import HogPeopleDetector

cv2 = pytest.importorskip("cv2")


@pytest.fixture(scope="module")
def vtest_frames():
    """Frames 0, 100 and 200 of OpenCV's vtest.avi (pedestrians on a campus walkway)."""
    from jetforge.assets import asset_path

    cap = cv2.VideoCapture(str(asset_path("opencv_samples", "vtest.avi")))
    frames = []
    for index in range(201):
        ok, frame = cap.read()
        assert ok
        if index in (0, 100, 200):
            frames.append(frame)
    cap.release()
    return frames


def _opencv_reference(frame, min_score):
    """cv2.HOGDescriptor's default people SVM, as the recipe called it before: every window above min_score."""
    hog = cv2.HOGDescriptor()
    hog.setSVMDetector(cv2.HOGDescriptor_getDefaultPeopleDetector())
    rects, weights = hog.detectMultiScale(frame, winStride=(8, 8), padding=(8, 8), scale=1.05)
    if not len(rects):
        return np.zeros((0, 5), np.float32)
    r = np.asarray(rects, np.float32).reshape(-1, 4)
    w = np.asarray(weights, np.float32).reshape(-1)
    boxes = np.concatenate([r[:, :2], r[:, :2] + r[:, 2:], w[:, None]], axis=1)
    return boxes[boxes[:, 4] >= min_score]


def test_without_suppression_it_is_opencvs_detector_exactly(vtest_frames):
    det = HogPeopleDetector(min_score=0.3, nms_iou=None, tighten=False)
    found = 0
    for frame in vtest_frames:
        got = det(frame)
        ref = _opencv_reference(frame, 0.3)
        rows = np.concatenate([got.boxes, got.scores[:, None]], axis=1)
        # OpenCV's threads return windows in any order; the detector puts them in one canonical order
        assert np.all(np.diff(got.scores) <= 0)
        # same library call, same float32 arithmetic: the same rows, equal, not close
        assert np.array_equal(rows[np.lexsort(rows.T[::-1])], ref[np.lexsort(ref.T[::-1])])
        found += len(got)
    assert found >= 3  # people are walking in every one of these frames


def test_suppression_keeps_a_subset_that_does_not_overlap(vtest_frames):
    raw = HogPeopleDetector(min_score=0.3, nms_iou=None, tighten=False)
    nms = HogPeopleDetector(min_score=0.3, nms_iou=0.45, tighten=False)
    for frame in vtest_frames:
        everything, kept = raw(frame), nms(frame)
        assert 0 < len(kept) <= len(everything)
        rows = {tuple(b) for b in everything.boxes.tolist()}
        assert all(tuple(b) in rows for b in kept.boxes.tolist())  # NMS only removes boxes
        iou = iou_matrix(kept.boxes, kept.boxes)
        np.fill_diagonal(iou, 0.0)
        assert float(iou.max(initial=0.0)) <= 0.45 + 1e-6


def test_suppression_is_what_opencvs_nmsboxes_kept_on_real_frames(vtest_frames):
    """Before issue 23 the detector suppressed with cv2.dnn.NMSBoxes; jetforge's one NMS keeps the same windows,
    in the same order, with the people app's settings (min_score 0.2) and the action app's (0.3)."""
    for min_score in (0.2, 0.3):
        raw = HogPeopleDetector(min_score=min_score, nms_iou=None, tighten=False)
        suppressed = HogPeopleDetector(min_score=min_score, nms_iou=0.45, tighten=False)
        for frame in vtest_frames:
            everything, kept = raw(frame), suppressed(frame)
            rects = np.concatenate([everything.boxes[:, :2], everything.boxes[:, 2:] - everything.boxes[:, :2]], 1)
            idx = np.asarray(cv2.dnn.NMSBoxes([list(map(float, r)) for r in rects],
                                              [float(v) for v in everything.scores], min_score, 0.45),
                             dtype=np.int64).reshape(-1)
            assert np.array_equal(kept.boxes, everything.boxes[idx]) and np.array_equal(kept.scores,
                                                                                         everything.scores[idx])


def test_the_apps_and_the_person_tracks_share_the_detector():
    import jetforge.apps.tasks.action as action
    import jetforge.apps.tasks.people as people
    import jetforge.vision.hog as hog
    import jetforge.vision.person_tracks as person_tracks

    assert people.HogPeopleDetector is hog.HogPeopleDetector and action.HogPeopleDetector is hog.HogPeopleDetector
    assert person_tracks.score_to_unit is hog.score_to_unit is hog.HogPeopleDetector.to_confidence
