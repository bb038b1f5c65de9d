"""The one Detections type (jetforge.vision.detections): pixel x1, y1, x2, y2 boxes, scores, classes.

Before issue 23 there were two: HOG's (pixel boxes and scores; the people app's events come from its ``to_list``)
and the SSD decoder's (normalised ``[ymin, xmin, ymax, xmax]``, scores, classes, labels).  The SSD's convention is
now private to its decoder (``vision.ssd.SsdOutput``) and every detector hands on the one type; these tests hold
each former type's behaviour to it.
"""

import numpy as np

from jetforge.runtime.inputs import Preprocess
from jetforge.vision.detections import Detections
from jetforge.vision.ssd import SsdOutput


def test_hogs_former_event_rows_are_kept():
    """The people app writes ``detections`` as ``[x1, y1, x2, y2, score]`` rounded to 0.1 px and 3 decimals."""
    det = Detections(np.array([[10.04, 20.06, 30.96, 120.0], [1, 2, 3, 4]], np.float32),
                     np.array([0.81234, 1.9996], np.float32))
    assert det.to_list() == [[10.0, 20.1, 31.0, 120.0, 0.812], [1.0, 2.0, 3.0, 4.0, 2.0]]
    assert len(det) == 2 and det.classes.tolist() == [0, 0] and det.classes.dtype == np.int64
    empty = Detections.empty()
    assert len(empty) == 0 and empty.to_list() == [] and empty.boxes.shape == (0, 4)


def test_above_keeps_classes_and_labels():
    det = Detections(np.arange(12, dtype=np.float32).reshape(3, 4), np.array([0.2, 0.6, 0.9], np.float32),
                     np.array([1, 0, 1]), ("a", "b"))
    kept = det.above(0.5)
    assert kept.scores.tolist() == [np.float32(0.6), np.float32(0.9)] and kept.classes.tolist() == [0, 1]
    assert kept.labels == ("a", "b")


def test_the_ssd_output_maps_to_what_the_person_detector_handed_on_before():
    """SsdPeopleDetector and the GPU path used to build HOG's type from the SSD's by hand; to_detections is that
    conversion (float64 pixel mapping through the preprocessing, then float32), bit for bit."""
    rng = np.random.default_rng(0)
    yx = rng.uniform(-0.1, 0.9, size=(7, 2))
    hw = rng.uniform(0.01, 0.5, size=(7, 2))
    out = SsdOutput(np.concatenate([yx, yx + hw], 1).astype(np.float32), rng.uniform(size=7).astype(np.float32),
                    np.zeros(7, np.int64), ("person",))
    for pre, frame in ((Preprocess(height=300, width=300, resize="stretch"), (576, 768)),
                       (Preprocess(height=192, width=192, resize="letterbox"), (272, 640))):
        plan, hw_in = pre.geometry(frame), (pre.height, pre.width)
        former_boxes = np.asarray(out.xyxy(plan, hw_in), np.float32).reshape(-1, 4)
        former_scores = out.scores.astype(np.float32)
        det = out.to_detections(plan, hw_in)
        assert np.array_equal(det.boxes, former_boxes) and np.array_equal(det.scores, former_scores)
        assert det.boxes.dtype == np.float32 and det.labels == ("person",) and det.classes.tolist() == [0] * 7
