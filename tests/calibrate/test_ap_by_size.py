"""The AP-by-height analysis of benchmarks/detector_ap_by_size.py: COCO's area-range rule, checked on small cases.

With a bin that holds everyone it must give exactly ``evaluate_ap``'s AP@0.5; people outside a bin are ignored (a
detection on one is neither a hit nor a false alarm), and an unmatched detection outside the bin is ignored too
while one inside it is a false alarm.
"""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import detector_ap_by_size as by_size  # noqa: E402

from jetforge.calibrate.detection_metrics import evaluate_ap, interpolated_ap  # noqa: E402


def ap(gt, difficult, boxes, scores, low, high):
    frame, tp, fp, positives = by_size.binned_status(gt, difficult, boxes, scores, low, high)
    return interpolated_ap(tp, fp, float(positives.sum())), tp, fp, positives


def box(x, y, h, w=20.0):
    return [x, y, x + w, y + h]


def test_a_bin_holding_everyone_is_the_ordinary_ap():
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
    got = ap(gt, difficult, boxes, scores, 0.0, 1e9)[0]
    assert got == pytest.approx(evaluate_ap(gt, difficult, boxes, scores).ap50, abs=1e-12)


def test_people_and_unmatched_detections_outside_the_bin_are_ignored():
    gt = [np.array([box(0, 0, 40), box(100, 0, 100)])]  # a small and a large person
    difficult = [np.zeros(2, bool)]
    boxes = [np.array([box(0, 0, 40), box(100, 0, 100), box(300, 0, 45), box(400, 0, 110)])]
    scores = [np.array([0.9, 0.8, 0.7, 0.6])]
    small, tp, fp, positives = ap(gt, difficult, boxes, scores, 0.0, 60.0)
    assert positives.sum() == 1 and tp.sum() == 1  # the large person is not counted, its detection is no hit
    assert fp.sum() == 1  # the unmatched 45 px detection is a false alarm in the small bin; the 110 px one ignored
    assert small == pytest.approx(1.0)  # the false alarm ranks below the hit
    large, tp, fp, positives = ap(gt, difficult, boxes, scores, 60.0, 1e9)
    assert positives.sum() == 1 and tp.sum() == 1 and fp.sum() == 1  # the 110 px false alarm counts here
    assert large == pytest.approx(1.0)
