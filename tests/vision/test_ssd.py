"""SSD host postprocessing: anchors, decoding, selection and the sidecar block, checked against hand-computed values.

The NMS it runs is jetforge's one greedy NMS: its rules are tested in tests/vision/test_boxes.py."""

import math

import numpy as np
import pytest

from jetforge.errors import ModelError
from jetforge.runtime.inputs import Preprocess
from jetforge.vision.ssd import (AnchorLayer, SSDSpec, SsdOutput, decode_boxes, generate_anchors, postprocess,
                                 ssd_anchor_layers)

GRIDS = [(19, 19), (10, 10), (5, 5), (3, 3), (2, 2), (1, 1)]


def spec_300() -> SSDSpec:
    return SSDSpec(layers=tuple(ssd_anchor_layers(GRIDS)))


def test_documented_anchor_generator_layers():
    layers = ssd_anchor_layers(GRIDS)
    assert [len(l.scales) for l in layers] == [3, 6, 6, 6, 6, 6]
    assert layers[0].scales == (0.1, 0.2, 0.2) and layers[0].aspect_ratios == (1.0, 2.0, 0.5)
    # scales spaced linearly 0.2 .. 0.95 over 6 layers; the extra box is sqrt(s_i * s_i+1), 1.0 after the last
    for i, s in enumerate([0.2, 0.35, 0.5, 0.65, 0.8, 0.95][1:], start=1):
        nxt = [0.2, 0.35, 0.5, 0.65, 0.8, 0.95, 1.0][i + 1]
        assert layers[i].scales[:5] == pytest.approx([s] * 5)
        assert layers[i].scales[5] == pytest.approx(math.sqrt(s * nxt))
        assert layers[i].aspect_ratios == pytest.approx((1.0, 2.0, 0.5, 3.0, 0.3333, 1.0))  # as the config writes it
    assert spec_300().num_anchors == 19 * 19 * 3 + (100 + 25 + 9 + 4 + 1) * 6 == 1917


def test_anchor_geometry_by_hand():
    anchors = spec_300().anchors()
    assert anchors.shape == (1917, 4) and anchors.dtype == np.float32
    c = 0.5 / 19  # the first cell's centre
    np.testing.assert_allclose(anchors[0], [c - 0.05, c - 0.05, c + 0.05, c + 0.05], atol=1e-7)
    h, w = 0.2 / math.sqrt(2), 0.2 * math.sqrt(2)  # aspect ratio 2: wide
    np.testing.assert_allclose(anchors[1], [c - h / 2, c - w / 2, c + h / 2, c + w / 2], atol=1e-7)
    # order is row, column, anchor: anchor 3 is the second cell of the first row
    c2 = 1.5 / 19
    np.testing.assert_allclose(anchors[3], [c - 0.05, c2 - 0.05, c + 0.05, c2 + 0.05], atol=1e-7)
    # the last anchor: the 1x1 map's interpolated box sqrt(0.95 * 1.0), square, centred
    s = math.sqrt(0.95)
    np.testing.assert_allclose(anchors[-1], [0.5 - s / 2] * 2 + [0.5 + s / 2] * 2, atol=1e-6)


def test_non_square_image_scales_the_base_size():
    layer = AnchorLayer(1, 1, (0.5,), (1.0,))
    a = generate_anchors([layer], image_size=(300, 600))  # min side / width = 0.5 for the widths
    np.testing.assert_allclose(a[0], [0.25, 0.375, 0.75, 0.625], atol=1e-7)


def test_decode_by_hand():
    anchors = np.array([[0.2, 0.3, 0.6, 0.5]], dtype=np.float32)  # centre (0.4, 0.4), h 0.4, w 0.2
    np.testing.assert_allclose(decode_boxes(np.zeros((1, 4)), anchors), anchors, atol=1e-7)
    # ty = 10 moves the centre by one anchor height; th = 5 ln 2 doubles the height
    enc = np.array([[10.0, -5.0, 5 * math.log(2), 0.0]], dtype=np.float32)
    np.testing.assert_allclose(decode_boxes(enc, anchors), [[0.4, 0.2, 1.2, 0.4]], atol=1e-6)


def _logit(p):
    return math.log(p / (1 - p))


def test_postprocess_sorts_clips_and_drops_empty_boxes():
    layers = (AnchorLayer(1, 1, (0.4,), (1.0,)), AnchorLayer(1, 2, (0.4,), (1.0,)))
    spec = SSDSpec(layers=layers, iou_threshold=0.6, score_threshold=0.05, max_total=2)
    enc = np.zeros((1, 3, 4), dtype=np.float32)
    enc[0, 2, 1] = 60.0  # anchor 2 moves right by 6 widths: entirely outside [0, 1] -> zero area after clipping
    logits = np.array([[[0, _logit(0.3)], [0, _logit(0.9)], [0, _logit(0.95)]]], dtype=np.float32)
    det = postprocess(enc, logits, spec)[0]
    # anchor 2 (0.95) survives NMS but is clipped to nothing and removed; then 0.9 (anchor 1), 0.3 (anchor 0)
    assert det.scores.tolist() == pytest.approx([0.9, 0.3], abs=1e-6)
    np.testing.assert_allclose(det.boxes[0], [0.3, 0.05, 0.7, 0.45], atol=1e-6)
    np.testing.assert_allclose(det.boxes[1], [0.3, 0.3, 0.7, 0.7], atol=1e-6)
    assert det.classes.tolist() == [0, 0] and det.labels == ("person",)


def test_raising_the_score_threshold_keeps_exactly_the_detections_above_it():
    spec = spec_300()
    rng = np.random.default_rng(0)
    enc = rng.normal(0, 1, (2, spec.num_anchors, 4)).astype(np.float32)
    logits = rng.normal(-2, 2, (2, spec.num_anchors, 2)).astype(np.float32)
    full = postprocess(enc, logits, spec)
    fast = postprocess(enc, logits, spec, score_threshold=0.5)
    for a, b in zip(full, fast):
        keep = a.scores > 0.5
        assert keep.sum() > 3
        np.testing.assert_array_equal(b.scores, a.scores[keep])
        np.testing.assert_array_equal(b.boxes, a.boxes[keep])


def test_sidecar_block_round_trips_and_is_checked():
    spec = spec_300()
    data = spec.to_dict()
    again = SSDSpec.from_dict(data)
    assert again == spec and np.array_equal(again.anchors(), spec.anchors())
    assert data["num_anchors"] == 1917 and data["scale_factors"] == [10.0, 10.0, 5.0, 5.0]
    tampered = dict(data, layers=[dict(data["layers"][0], scales=[0.1, 0.2, 0.25])] + data["layers"][1:])
    with pytest.raises(ModelError, match="anchors do not match"):
        SSDSpec.from_dict(tampered)
    with pytest.raises(ModelError, match="malformed"):
        SSDSpec.from_dict({k: v for k, v in data.items() if k != "scale_factors"})
    with pytest.raises(ModelError, match="anchors"):
        SSDSpec.from_dict(dict(data, num_anchors=1000))


def test_wrong_output_shapes_are_one_error():
    spec = spec_300()
    with pytest.raises(ModelError, match="do not belong together"):
        postprocess(np.zeros((1, 100, 4)), np.zeros((1, 100, 2)), spec)


def test_boxes_map_back_to_the_frame():
    pre = Preprocess(height=300, width=300, resize="stretch", scale=2 / 255, mean=(1.0,), std=(1.0,))
    det = SsdOutput(np.array([[0.25, 0.5, 0.75, 1.0]], dtype=np.float32), np.array([0.9]), np.array([0]))
    xyxy = det.xyxy(pre.geometry((576, 768)), (300, 300))
    np.testing.assert_allclose(xyxy, [[384.0, 144.0, 768.0, 432.0]], atol=1e-4)
    pixels = det.to_detections(pre.geometry((576, 768)), (300, 300))  # the one Detections type: frame pixels
    assert pixels.boxes.dtype == np.float32 and pixels.scores.dtype == np.float32
    np.testing.assert_allclose(pixels.boxes, [[384.0, 144.0, 768.0, 432.0]], atol=1e-4)
