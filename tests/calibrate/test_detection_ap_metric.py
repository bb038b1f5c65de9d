"""The ``detection_ap`` INT8-evaluation metric: SSD raw outputs decoded and scored against labelled boxes.

The raw outputs are built by hand: every labelled box is encoded (faster-rcnn coder, the inverse of
the runtime's decoder) against the anchor that overlaps it most, with a high person logit; all other
anchors get logit -10 (score 4.5e-5, under the metric's 0.01 threshold).  The decoded boxes then
equal the labels up to float32 rounding (IoU > 0.999, above every COCO threshold), so the AP the
metric reports can be predicted exactly with the independent ``evaluate_ap`` on the known boxes.
"""

import numpy as np
import pytest

from jetforge.vision.detection_metrics import evaluate_ap, paired_bootstrap
from jetforge.calibrate.metrics import METRICS, DetectionAPMetric, DetectionTarget, make_metric
from jetforge.errors import CalibrationError
from jetforge.vision.ssd import SSDSpec, ssd_anchor_layers
from jetforge.runtime.inputs.image import Preprocess
from jetforge.runtime.sidecar import ModelSidecar, TensorSpec

GRIDS = ((10, 10), (5, 5), (3, 3), (2, 2), (1, 1), (1, 1))
H, W = 240, 320


def _sidecar(spec: SSDSpec) -> ModelSidecar:
    a = spec.num_anchors
    pre = Preprocess(height=300, width=300, resize="stretch", color="rgb", scale=2 / 255, mean=(1.0,), std=(1.0,))
    return ModelSidecar(task="detect", model_name="synthetic", inputs=[TensorSpec("input", [1, 3, 300, 300])],
                        outputs=[TensorSpec("box_encodings", [1, a, 4]), TensorSpec("class_logits", [1, a, 2])],
                        preprocess=pre, labels=["person"], extra={"ssd": spec.to_dict()})


def _encode(box_yxyx: np.ndarray, anchor: np.ndarray, factors) -> np.ndarray:
    ha, wa = anchor[2] - anchor[0], anchor[3] - anchor[1]
    h, w = box_yxyx[2] - box_yxyx[0], box_yxyx[3] - box_yxyx[1]
    yc, xc = box_yxyx[0] + h / 2, box_yxyx[1] + w / 2
    return np.array([(yc - (anchor[0] + ha / 2)) / ha * factors[0], (xc - (anchor[1] + wa / 2)) / wa * factors[1],
                     np.log(h / ha) * factors[2], np.log(w / wa) * factors[3]])


def _outputs(spec: SSDSpec, frames, keep):
    """Raw outputs whose detections are the labelled boxes with ``keep[f][k]`` True, score 0.99 - 0.01 k."""
    anchors = spec.anchors().astype(np.float64)
    enc = np.zeros((len(frames), len(anchors), 4), np.float32)
    logits = np.full((len(frames), len(anchors), 2), -10.0, np.float32)
    used = set()
    for f, boxes in enumerate(frames):
        for k, (x1, y1, x2, y2) in enumerate(boxes):
            if not keep[f][k]:
                continue
            yxyx = np.array([y1 / H, x1 / W, y2 / H, x2 / W])
            inter = (np.clip(np.minimum(anchors[:, 2], yxyx[2]) - np.maximum(anchors[:, 0], yxyx[0]), 0, None)
                     * np.clip(np.minimum(anchors[:, 3], yxyx[3]) - np.maximum(anchors[:, 1], yxyx[1]), 0, None))
            order = np.argsort(-inter)
            j = next(int(i) for i in order if (f, int(i)) not in used)
            used.add((f, j))
            enc[f, j] = _encode(yxyx, anchors[j], spec.scale_factors)
            p = 0.99 - 0.01 * k - 0.001 * f
            logits[f, j, 1] = np.log(p / (1 - p))
    return [enc, logits]


def _frames():
    rng = np.random.default_rng(3)
    frames = []
    for _ in range(8):
        boxes = []
        for _ in range(int(rng.integers(1, 4))):
            x1, y1 = rng.uniform(0, W - 80), rng.uniform(0, H - 120)
            boxes.append([x1, y1, x1 + rng.uniform(30, 70), y1 + rng.uniform(60, 110)])
        frames.append(np.array(boxes))
    return frames


def test_detection_ap_matches_the_independent_ap_of_the_known_boxes():
    spec = SSDSpec(layers=tuple(ssd_anchor_layers(GRIDS)))
    frames = _frames()
    targets = [DetectionTarget(b, np.zeros(len(b), bool), (H, W), group="g%d" % (i // 2)) for i, b in enumerate(frames)]
    full = [[True] * len(b) for b in frames]
    partial = [[k != 0 or f % 2 == 0 for k in range(len(b))] for f, b in enumerate(frames)]  # odd frames lose box 0
    metric = make_metric("detection_ap", sidecar=_sidecar(spec), n_resamples=300)
    out = metric.compute(_outputs(spec, frames, full), _outputs(spec, frames, partial), targets)

    gt = [t.boxes for t in targets]
    diff = [t.difficult for t in targets]
    kept_boxes = [b[np.array(k)] for b, k in zip(frames, partial)]
    kept_scores = [np.array([0.99 - 0.01 * i - 0.001 * f for i in range(len(k)) if k[i]])
                   for f, k in enumerate(partial)]
    expected = evaluate_ap(gt, diff, kept_boxes, kept_scores)
    assert out["frames"] == 8 and out["boxes"] == sum(len(b) for b in frames)
    # decoded boxes equal the labels up to float32 rounding: every IoU threshold matches -> AP exactly 1
    assert out["ap50_fp32"] == pytest.approx(1.0, abs=1e-12)
    assert out["ap_fp32"] == pytest.approx(1.0, abs=1e-12)
    assert out["ap50_int8"] == pytest.approx(expected.ap50, abs=1e-12)
    assert out["ap_int8"] == pytest.approx(expected.ap, abs=1e-12)
    assert expected.ap50 < 0.9  # the lost boxes are visible in the number
    assert out["ap50_diff"] == pytest.approx(expected.ap50 - 1.0, abs=1e-12)
    assert out["ap50_diff_ci_low"] <= out["ap50_diff"] <= out["ap50_diff_ci_high"] <= 0.0
    reference = paired_bootstrap(gt, diff, (kept_boxes, kept_scores), (gt, [np.ones(len(b)) for b in gt]),
                                 n_resamples=300, groups=[t.group for t in targets])["difference"]
    assert [out["ap50_diff_block_ci_low"], out["ap50_diff_block_ci_high"]] == pytest.approx(reference["ap50_ci"],
                                                                                          abs=1e-9)


def test_detection_ap_refusals():
    spec = SSDSpec(layers=tuple(ssd_anchor_layers(GRIDS)))
    assert METRICS.get("detection_ap") is DetectionAPMetric
    with pytest.raises(CalibrationError, match="sidecar"):
        make_metric("detection_ap")
    metric = make_metric("detection_ap", sidecar=_sidecar(spec))
    frames = _frames()
    outputs = _outputs(spec, frames, [[True] * len(b) for b in frames])
    assert metric.compute(outputs, outputs) == {"frames": 8}  # no labels: nothing to score
    with pytest.raises(CalibrationError, match="7 detection targets for 8"):
        metric.compute(outputs, outputs, [DetectionTarget(b, np.zeros(len(b), bool), (H, W)) for b in frames[:7]])


def test_calibrate_refuses_what_it_cannot_do_for_a_detector(tmp_path):
    from jetforge.calibrate.calibrate_model import _check_eval_args
    from jetforge.calibrate.options import CalibrateOptions

    labels = tmp_path / "people.json"
    labels.write_text("{}")

    def options(**kw):
        return CalibrateOptions.from_keywords(dict(kw, labels=labels))

    with pytest.raises(CalibrationError, match="images of its --labels file"):
        _check_eval_args(options(eval_data=["heldout.mp4"]), ["train/"], "detect")
    with pytest.raises(CalibrationError, match="images of its --labels file"):
        _check_eval_args(options(mixed_precision=0.98), ["train/"], "detect")
    assert _check_eval_args(options(), ["train/"], "detect") == []
    with pytest.raises(CalibrationError, match="no evaluation data"):  # a classifier still needs --eval
        _check_eval_args(options(), ["train/"], "classify")
