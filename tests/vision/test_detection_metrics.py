"""Person AP (COCO 101-point, difficult boxes ignored) and the paired bootstrap, against hand-computed values
and against pycocotools (skipped when no interpreter with pycocotools is available; see coco_reference.py)."""

import json
from pathlib import Path

import numpy as np
import pytest

from jetforge.vision.detection_metrics import (COCO_IOU_THRESHOLDS, evaluate_ap, interpolated_ap,
                                                  paired_bootstrap, rank_detections, ap_per_threshold)
from jetforge.errors import CalibrationError
from jetforge.vision.person_labels import DEFAULT_LABELS

from tests.vision import coco_reference

LABELS = DEFAULT_LABELS  # the person-box set jetforge ships

# Exactness: the AP arithmetic is a few hundred float64 additions and divisions of small integers, the same
# as pycocotools', so agreement to 1e-12 is expected; hand values below are fractions written out exactly.
TOL = 1e-12


def box(x, y, w=20.0, h=50.0):
    return [x, y, x + w, y + h]


def one_frame(gt, difficult, dets, scores):
    return evaluate_ap([np.array(gt, float)], [np.array(difficult, bool)], [np.array(dets, float).reshape(-1, 4)],
                       [np.array(scores, float)])


# -- hand-computed cases ---------------------------------------------------------------------------------

def test_perfect_detections_score_one_at_every_threshold():
    gt = [box(0, 0), box(100, 0), box(200, 0)]
    r = one_frame(gt, [0, 0, 0], gt, [0.9, 0.8, 0.7])
    # precision is tp / (tp + fp + eps) as in COCO, so "1" is 1 - O(1e-16)
    assert np.allclose(list(r.per_threshold.values()), 1.0, atol=TOL) and abs(r.ap - 1) < TOL
    assert (r.positives, r.detections, r.frames) == (3, 3, 1)


def test_tp_fp_tp_gives_the_101_point_value():
    # ranked: TP (recall .5, precision 1), FP (.5, .5), TP (1, 2/3). Envelope: 1, 2/3, 2/3.
    # recall points 0.00..0.50 (51 of them) read precision 1; 0.51..1.00 (50) read 2/3.
    gt = [box(0, 0), box(100, 0)]
    r = one_frame(gt, [0, 0], [box(0, 0), box(300, 0), box(100, 0)], [0.9, 0.8, 0.7])
    assert abs(r.ap50 - (51 * 1.0 + 50 * 2.0 / 3.0) / 101) < TOL
    assert abs(r.ap - r.ap50) < TOL  # exact boxes: the same at every IoU threshold


def test_detection_on_a_difficult_box_is_neither_tp_nor_fp():
    # ranked: on the difficult box (ignored), a false positive, a true positive.
    # rc = [0, 0, 1], precision = [0, 0, 1/2], envelope 1/2 everywhere -> AP = 1/2.
    gt = [box(0, 0), box(100, 0)]
    dets = [box(100, 0), box(300, 0), box(0, 0)]
    r = one_frame(gt, [0, 1], dets, [0.95, 0.9, 0.8])
    assert abs(r.ap50 - 0.5) < TOL
    assert r.positives == 1 and r.ignored[0.5] == 1
    # the same detections with the box not difficult: TP, FP, TP -> (51 + 50 * 2/3) / 101
    assert abs(one_frame(gt, [0, 0], dets, [0.95, 0.9, 0.8]).ap50 - (51 + 50 * 2.0 / 3.0) / 101) < TOL
    # and with the difficult box removed altogether the first detection is a false positive: FP, FP, TP -> 1/3
    assert abs(one_frame(gt[:1], [0], dets, [0.95, 0.9, 0.8]).ap50 - 1.0 / 3.0) < TOL


def test_a_second_detection_on_a_difficult_box_is_a_false_positive():
    # COCO's rule for ignored boxes: one detection takes it. Ranked: ignored, FP (duplicate), TP -> AP 1/2.
    gt = [box(0, 0), box(100, 0)]
    r = one_frame(gt, [0, 1], [box(100, 0), box(101, 0), box(0, 0)], [0.95, 0.9, 0.8])
    assert abs(r.ap50 - 0.5) < TOL


def test_an_ordinary_box_is_preferred_to_a_better_overlapping_difficult_one():
    # The detection overlaps the difficult box exactly and the ordinary one with IoU 0.6: it is a TP at 0.5.
    ordinary = [0.0, 0.0, 20.0, 50.0]
    shifted = [5.0, 0.0, 25.0, 50.0]  # IoU with ordinary = 15*50 / (25*50) = 0.6
    r = one_frame([ordinary, shifted], [0, 1], [shifted], [0.9])
    assert abs(r.per_threshold[0.5] - 1) < TOL and abs(r.per_threshold[0.6] - 1) < TOL
    # Above 0.6 it cannot match the ordinary box, so it takes the difficult one and is ignored: recall 0, AP 0.
    assert r.per_threshold[0.65] == 0.0 and r.ignored[0.65] == 1


def test_iou_threshold_is_inclusive_and_continuous_coordinates():
    gt = [0.0, 0.0, 10.0, 10.0]
    det = [0.0, 0.0, 10.0, 7.5]  # IoU 0.75 exactly (no +1 pixel convention)
    r = one_frame([gt], [0], [det], [0.5])
    expected = [1.0 if t <= 0.75 else 0.0 for t in np.round(COCO_IOU_THRESHOLDS, 2)]
    assert np.allclose(list(r.per_threshold.values()), expected, atol=TOL)
    assert abs(r.ap - 6 / 10) < TOL  # thresholds 0.50..0.75 are 6 of 10


def test_no_positive_gives_nan_and_no_detection_gives_zero():
    assert np.isnan(one_frame([box(0, 0)], [1], [box(0, 0)], [0.9]).ap50)
    assert one_frame([box(0, 0)], [0], np.zeros((0, 4)), []).ap50 == 0.0
    assert interpolated_ap(np.zeros(0), np.zeros(0), 0) != interpolated_ap(np.zeros(0), np.zeros(0), 0)  # NaN


def test_max_dets_keeps_the_highest_scores_per_frame():
    gt = [box(0, 0)]
    dets = [box(300, 0), box(0, 0)]
    assert abs(one_frame(gt, [0], dets, [0.9, 0.8]).ap50 - 0.5) < TOL  # FP then TP, envelope 1/2
    r = evaluate_ap([np.array(gt)], None, [np.array(dets)], [np.array([0.9, 0.8])], max_dets=1)
    assert r.ap50 == 0.0 and r.detections == 1


def test_bad_input_is_one_clear_error():
    with pytest.raises(CalibrationError, match="x2 < x1"):
        one_frame([[10, 0, 0, 10]], [0], [box(0, 0)], [0.9])
    with pytest.raises(CalibrationError, match="2 frames but detections for 1"):
        evaluate_ap([np.zeros((0, 4))] * 2, None, [np.zeros((0, 4))], [np.zeros(0)])
    with pytest.raises(CalibrationError, match="finite"):
        one_frame([box(0, 0)], [0], [box(0, 0)], [float("nan")])


# -- bootstrap ---------------------------------------------------------------------------------------------

def random_set(seed, frames=30, jitter=3.0, fp_rate=1.0):
    """Frames with 0-6 people (some difficult), detections = jittered boxes + misses + random false positives."""
    rng = np.random.default_rng(seed)
    gt, diff, dets, scores = [], [], [], []
    for _ in range(frames):
        n = rng.integers(0, 7)
        xy = rng.uniform(0, 600, size=(n, 2))
        wh = rng.uniform(50, 130, size=(n, 1)) * np.array([[0.4, 1.0]])  # people-shaped, 20x50 .. 52x130
        g = np.hstack([xy, xy + wh])
        keep = rng.random(n) > 0.15
        d = g[keep] + rng.normal(0, jitter, size=(keep.sum(), 4))
        d[:, 2:] = np.maximum(d[:, 2:], d[:, :2] + 1)
        n_fp = rng.poisson(fp_rate)
        fxy = rng.uniform(0, 600, size=(n_fp, 2))
        d = np.vstack([d, np.hstack([fxy, fxy + rng.uniform(10, 60, size=(n_fp, 2))])])
        gt.append(g)
        diff.append(rng.random(n) < 0.15)
        dets.append(d)
        scores.append(rng.random(len(d)))
    return gt, diff, dets, scores


def test_weighted_ranking_equals_duplicated_frames():
    gt, diff, dets, scores = random_set(1)
    ranked = rank_detections(gt, diff, dets, scores)
    assert np.allclose(ap_per_threshold(ranked, np.ones(len(gt))), ap_per_threshold(ranked), atol=TOL)
    weights = np.random.default_rng(2).integers(0, 4, size=len(gt))
    expanded = [f for f in range(len(gt)) for _ in range(weights[f])]
    direct = rank_detections([gt[f] for f in expanded], [diff[f] for f in expanded], [dets[f] for f in expanded],
                             [scores[f] for f in expanded])
    # Continuous random scores: the copies of a detection are the only ties, so both rankings agree.
    assert np.allclose(ap_per_threshold(ranked, weights), ap_per_threshold(direct), atol=TOL)


def test_paired_bootstrap_is_reproducible_and_brackets_the_estimate():
    gt, diff, dets, scores = random_set(3, frames=40)
    _, _, dets_b, scores_b = random_set(3, frames=40, jitter=8.0, fp_rate=2.0)  # same truth, worse detector
    a = paired_bootstrap(gt, diff, (dets, scores), (dets_b, scores_b), n_resamples=300, seed=7)
    b = paired_bootstrap(gt, diff, (dets, scores), (dets_b, scores_b), n_resamples=300, seed=7)
    assert a == b
    full_a = evaluate_ap(gt, diff, dets, scores)
    assert a["a"]["ap50"] == full_a.ap50 and a["a"]["ap"] == full_a.ap
    for key in ("ap50", "ap"):
        lo, hi = a["difference"][key + "_ci"]
        assert lo <= a["difference"][key] <= hi
        assert a["difference"][key] > 0  # the jittered-by-8-px, more-false-positive detector is worse
    same = paired_bootstrap(gt, diff, (dets, scores), (dets, scores), n_resamples=50, seed=0)
    assert same["difference"]["ap50_ci"] == [0.0, 0.0] and same["difference"]["ap_ci"] == [0.0, 0.0]


def test_group_bootstrap_draws_whole_groups():
    gt, diff, dets, scores = random_set(4, frames=12)
    # One group: every resample is the whole set, so the interval collapses onto the estimate.
    r = paired_bootstrap(gt, diff, (dets, scores), n_resamples=20, seed=0, groups=["all"] * 12)
    assert r["units"] == 1 and r["a"]["ap50_ci"] == [r["a"]["ap50"]] * 2


# -- pycocotools -------------------------------------------------------------------------------------------

needs_coco = pytest.mark.skipif(
    not coco_reference.available(),
    reason="pycocotools not importable and $PYCOCOTOOLS_PYTHON not set (optional reference)")


def assert_same_as_coco(gt, diff, dets, scores):
    ours = evaluate_ap(gt, diff, dets, scores)
    ref = coco_reference.coco_ap(gt, diff, dets, scores)
    assert np.allclose(list(ours.per_threshold.values()), ref["per_threshold"], atol=TOL, equal_nan=True)
    assert abs(ours.ap - ref["stats0"]) < TOL and abs(ours.ap50 - ref["stats1"]) < TOL
    return ours


@needs_coco
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_pycocotools_on_synthetic_frames(seed):
    gt, diff, dets, scores = random_set(seed, frames=60, jitter=1.5 + seed, fp_rate=0.5 + seed)
    ours = assert_same_as_coco(gt, diff, dets, scores)
    assert 0.05 < ours.ap < 0.99  # a non-trivial case: neither perfect nor empty


@needs_coco
def test_matches_pycocotools_on_the_labelled_frames():
    data = json.loads(LABELS.read_text())
    rng = np.random.default_rng(0)
    gt, diff, dets, scores = [], [], [], []
    for frame in data["frames"]:
        g = np.array([b["box"] for b in frame["boxes"]], float).reshape(-1, 4)
        gt.append(g)
        diff.append(np.array([b["difficult"] for b in frame["boxes"]], bool))
        d = g + rng.normal(0, 4.0, size=g.shape)  # a detector that is a few pixels off, misses some, adds some
        d = d[rng.random(len(d)) > 0.1]
        fp = rng.uniform(0, 700, size=(rng.poisson(0.7), 2))
        d = np.vstack([d, np.hstack([fp, fp + [25.0, 70.0]])])
        d[:, 2:] = np.maximum(d[:, 2:], d[:, :2] + 1)
        dets.append(d)
        scores.append(rng.random(len(d)))
    assert_same_as_coco(gt, diff, dets, scores)
