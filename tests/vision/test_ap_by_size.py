"""AP of the people of some heights only (``height_range`` of calibrate.detection_metrics, used by
benchmarks/detector_students/detector_ap_by_size.py): COCO's area-range rule on the height, checked on small cases.

With a range that holds everyone it must give exactly the ordinary AP; people outside a range are ignored (a
detection on one is neither a hit nor a false alarm), and an unmatched detection outside the range is ignored too
while one inside it is a false alarm.
"""

import numpy as np
import pytest

from jetforge.vision.detection_metrics import FP, TP, evaluate_ap, rank_detections


def counts(gt, difficult, boxes, scores, low, high):
    ranked = rank_detections(gt, difficult, boxes, scores, iou_thresholds=(0.5,), height_range=(low, high))
    ap = evaluate_ap(gt, difficult, boxes, scores, iou_thresholds=(0.5,), height_range=(low, high)).ap50
    return ap, int((ranked.status[0] == TP).sum()), int((ranked.status[0] == FP).sum()), int(ranked.positives.sum())


def box(x, y, h, w=20.0):
    return [x, y, x + w, y + h]


def test_a_range_holding_everyone_is_the_ordinary_ap():
    rng = np.random.default_rng(0)
    gt, difficult, boxes, scores = [], [], [], []
    for _ in range(12):
        n = int(rng.integers(0, 5))
        g = np.array([box(*rng.uniform(0, 400, 2), rng.uniform(20, 150)) for _ in range(n)]).reshape(-1, 4)
        d = np.concatenate([g + rng.normal(0, 6, g.shape), np.array([box(*rng.uniform(0, 400, 2), 50)])])
        d[:, 2:] = np.maximum(d[:, 2:], d[:, :2] + 1)
        gt.append(g)
        difficult.append(rng.random(n) < 0.1)
        boxes.append(d)
        scores.append(rng.random(len(d)))
    got = evaluate_ap(gt, difficult, boxes, scores, height_range=(0.0, 1e9))
    want = evaluate_ap(gt, difficult, boxes, scores)
    assert got.ap50 == pytest.approx(want.ap50, abs=1e-12) and got.ap == pytest.approx(want.ap, abs=1e-12)


def test_people_and_unmatched_detections_outside_the_range_are_ignored():
    gt = [np.array([box(0, 0, 40), box(100, 0, 100)])]  # a small and a large person
    difficult = [np.zeros(2, bool)]
    boxes = [np.array([box(0, 0, 40), box(100, 0, 100), box(300, 0, 45), box(400, 0, 110)])]
    scores = [np.array([0.9, 0.8, 0.7, 0.6])]
    small, tp, fp, positives = counts(gt, difficult, boxes, scores, 0.0, 60.0)
    assert positives == 1 and tp == 1  # the large person is not counted, its detection is no hit
    assert fp == 1  # the unmatched 45 px detection is a false alarm in the small range; the 110 px one ignored
    assert small == pytest.approx(1.0)  # the false alarm ranks below the hit
    large, tp, fp, positives = counts(gt, difficult, boxes, scores, 60.0, 1e9)
    assert positives == 1 and tp == 1 and fp == 1  # the 110 px false alarm counts here
    assert large == pytest.approx(1.0)
