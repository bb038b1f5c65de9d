"""The YOLOv8-layout student: its ONNX read by the registered ``yolov8`` decoder equals the model's own decode, and
the anchor-free assignment and losses on hand-made boxes against an independent per-point reference.

Why these references are independent: the decoder reads ``cx, cy, w, h`` columns of the ONNX output and maps them
back through the sidecar's input contract; :func:`reference_detections` reads the box sides straight from the
torch model's distances and stretches them itself.  The assignment's reference is a plain Python loop over points
and boxes written from the documented rules, not the vectorised code.
"""

import math

import numpy as np
import pytest
import torch

from jetforge.compress.distill.anchor_free import AnchorFreeConfig, anchor_free_loss, assign_points, paired_iou
from jetforge.compress.models.yolo_student import (YoloStudent, anchor_points, reference_detections,
                                                   yolo_student_from_state)
from jetforge.errors import CompressError
from jetforge.runtime.inputs.image import Preprocess

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

PORT_CONTRACT = dict(resize="stretch", color="rgb", scale=2 / 255, mean=(1.0,), std=(1.0,), layout="nchw")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A 96 px student with random weights that give many distinct boxes and scores, exported with its sidecar.

    Its batch norms take the statistics of random inputs (a few training-mode passes), so activations are spread
    and no two candidates tie; the class bias starts at 0 (probability 0.5) so boxes pass the 0.25 threshold."""
    from jetforge.compress.models.yolo_export import export_yolo_student

    torch.manual_seed(0)
    model = YoloStudent(96)
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.momentum = None  # a plain average of the passes
    with torch.no_grad():
        for _ in range(3):
            model(torch.randn(8, 3, 96, 96))
        for head in model.heads:
            head.cls.bias.fill_(0.0)
    model.eval()
    path = tmp_path_factory.mktemp("yolo") / "student.onnx"
    pre = Preprocess(height=96, width=96, **PORT_CONTRACT)
    sidecar = export_yolo_student(model, pre, path)
    return model, pre, path, sidecar


def test_sidecar_names_the_yolov8_decoder_and_the_person_class(exported):
    from jetforge.vision.decode import decoder_for

    model, _, path, sidecar = exported
    assert sidecar.extra["decoder"]["name"] == "yolov8"
    assert sidecar.labels == ["person"] and sidecar.task == "detect"
    assert sidecar.outputs[0].shape[1:] == [5, model.num_anchors]  # [N, 4 + C, A]
    assert decoder_for(path).name == "yolov8"


@pytest.mark.parametrize("frame_hw", [(96, 96), (240, 320), (576, 768)])
def test_onnx_through_the_yolov8_decoder_equals_the_models_own_decode(exported, frame_hw):
    """Same boxes, scores and order.  Tolerance: float32 ONNX Runtime vs torch on the same weights differ by
    ~1e-6 relative; boxes are <= ~100 input px, scaled by <= 8 to the frame, and cx +- w/2 vs the sides read
    directly adds one rounding of a ~100 px number: 1e-2 frame px covers it 10x; scores (probabilities) 1e-5."""
    from jetforge.vision.decoded_detector import DecodedDetector

    model, pre, path, _ = exported
    frame = np.random.default_rng(sum(frame_hw)).integers(0, 256, frame_hw + (3,), dtype=np.uint8)
    with DecodedDetector(path) as detector:
        got = detector(frame)
        options = detector.decoder.options
    want = reference_detections(model, torch.from_numpy(pre.apply(frame)[None]), [frame_hw],
                                options.score_threshold, options.iou_threshold, options.max_detections)[0]
    assert len(want) > 5  # the comparison is not empty
    assert len(got) == len(want)
    np.testing.assert_allclose(got.scores, want.scores, atol=1e-5)
    np.testing.assert_allclose(got.boxes, want.boxes, atol=1e-2)
    assert got.boxes[:, 2].max() <= frame_hw[1] and got.boxes[:, 3].max() <= frame_hw[0]


def test_state_dict_round_trip_and_wrong_weights_refused(exported):
    model = exported[0]
    again = yolo_student_from_state(model.state_dict(), 96)
    x = torch.randn(1, 3, 96, 96)
    with torch.no_grad():
        assert torch.equal(again(x), model(x))
    with pytest.raises(CompressError, match="not a YOLO-layout student"):
        yolo_student_from_state(model.state_dict(), 96, channels=32)
    with pytest.raises(CompressError, match="multiple of 32"):
        YoloStudent(100)


# -- assignment ----------------------------------------------------------------------------------------------

SIZE = 64  # grids 8x8 (stride 8), 4x4 (16), 2x2 (32)
GRIDS = ((8, 8), (4, 4), (2, 2))


def reference_assign(points, strides, boxes, cfg):
    """The documented rules, point by point (anchor_free module docstring, steps 1-4)."""
    low = {8: 0.0, 16: cfg.scale_ranges[0], 32: cfg.scale_ranges[1]}
    high = {8: cfg.scale_ranges[0], 16: cfg.scale_ranges[1], 32: math.inf}
    out = [-1] * len(points)
    for a, ((px, py), s) in enumerate(zip(points, strides)):
        best = None
        for k, (x1, y1, x2, y2) in enumerate(boxes):
            sides = (px - x1, py - y1, x2 - px, y2 - py)
            near = abs(px - (x1 + x2) / 2) <= cfg.centre_radius * s and abs(py - (y1 + y2) / 2) <= cfg.centre_radius * s
            if min(sides) > 0 and near and low[s] < max(sides) <= high[s]:
                area = (x2 - x1) * (y2 - y1)
                if best is None or area < best[0]:
                    best = (area, k)
        if best is not None:
            out[a] = best[1]
    for k, (x1, y1, x2, y2) in enumerate(boxes):
        if k in out:
            continue
        half = max(x2 - x1, y2 - y1) / 2
        level = [a for a, s in enumerate(strides) if low[s] < half <= high[s]]
        a = min(level, key=lambda i: ((points[i][0] - (x1 + x2) / 2) ** 2 + (points[i][1] - (y1 + y2) / 2) ** 2, i))
        if out[a] < 0:
            out[a] = k
    return out


def assign(boxes, cfg=AnchorFreeConfig(scale_ranges=[16.0, 24.0])):
    points, strides = anchor_points(GRIDS, (8, 16, 32))
    b = torch.tensor([boxes], dtype=torch.float32)
    got = assign_points(points, strides, b, torch.ones(1, len(boxes), dtype=torch.bool), cfg)[0].tolist()
    return got, reference_assign(points.tolist(), [int(s) for s in strides.tolist()], boxes, cfg)


def test_a_small_box_takes_the_nine_stride8_points_around_its_centre():
    """Box 10..30 on both axes: stride-8 centres 12, 20, 28 lie inside and within 2.5 strides of 20; their largest
    side distance is <= 18 (<= 16 for the centre ones... all <= 24 px here), so stride 8 keeps them."""
    got, want = assign([[10.0, 10.0, 30.0, 30.0]], AnchorFreeConfig(scale_ranges=[32.0, 48.0]))
    assert got == want
    points, _ = anchor_points(GRIDS, (8, 16, 32))
    taken = sorted(tuple(points[i].tolist()) for i, m in enumerate(got) if m == 0)
    assert taken == [(x, y) for x in (12.0, 20.0, 28.0) for y in (12.0, 20.0, 28.0)]


def test_overlapping_boxes_the_smaller_wins_and_large_boxes_go_to_coarse_levels():
    boxes = [[2.0, 2.0, 62.0, 62.0], [20.0, 20.0, 44.0, 44.0], [40.0, 4.0, 56.0, 20.0]]
    got, want = assign(boxes)
    assert got == want
    assert {0, 1, 2} <= set(got)  # every box has points


def test_a_tiny_box_between_cells_takes_its_nearest_point():
    """A 3x3 box whose centre is no cell centre: no point lies inside it, so step 4 gives it the nearest one."""
    got, want = assign([[14.5, 14.5, 17.5, 17.5]])
    assert got == want and got.count(0) == 1


def test_assignment_skips_invalid_boxes_and_empty_images():
    points, strides = anchor_points(GRIDS, (8, 16, 32))
    boxes = torch.tensor([[[10.0, 10.0, 30.0, 30.0]]])
    none = assign_points(points, strides, boxes, torch.zeros(1, 1, dtype=torch.bool), AnchorFreeConfig())
    assert (none == -1).all()
    empty = assign_points(points, strides, torch.zeros(2, 0, 4), torch.zeros(2, 0, dtype=torch.bool),
                          AnchorFreeConfig())
    assert empty.shape == (2, len(points)) and (empty == -1).all()


def test_giou_of_hand_made_boxes():
    """(0,0,2,2) and (1,1,3,3): IoU 1/7, hull 9, union 7 -> GIoU 1/7 - 2/9."""
    a, b = torch.tensor([0.0, 0, 2, 2]), torch.tensor([1.0, 1, 3, 3])
    assert paired_iou(a, b).item() == pytest.approx(1 / 7)
    assert paired_iou(a, b, generalized=True).item() == pytest.approx(1 / 7 - 2 / 9)


def test_loss_box_term_is_zero_for_exact_boxes_and_class_term_matches_bce():
    """A student whose positives' distances give the teacher's box exactly has GIoU loss 0; the class term is the
    BCE of its logits against score x IoU (IoU 1 here), summed and divided by the positives' summed scores."""
    points, strides = anchor_points(GRIDS, (8, 16, 32))
    box = torch.tensor([[[10.0, 10.0, 30.0, 30.0]]])
    score = torch.tensor([[0.8]])
    valid = torch.ones(1, 1, dtype=torch.bool)
    cfg = AnchorFreeConfig(scale_ranges=[32.0, 48.0])
    match = assign_points(points, strides, box, valid, cfg)[0]
    dist = torch.cat([points - box[0, 0, :2], box[0, 0, 2:] - points], dim=-1).unsqueeze(0)  # exact for all
    logits = torch.randn(1, len(points), 1)
    loss, logs = anchor_free_loss(dist, logits, points, strides, box, score, valid, cfg)
    assert logs["box_giou"].item() == pytest.approx(0.0, abs=1e-6)
    target = (match >= 0).float() * 0.8
    positives = int((match >= 0).sum())
    bce = torch.nn.functional.binary_cross_entropy_with_logits(logits[0, :, 0], target, reduction="sum")
    assert logs["class_bce"].item() == pytest.approx(bce.item() / max(1.0, 0.8 * positives), rel=1e-5)
    assert loss.item() == pytest.approx(logs["class_bce"].item(), rel=1e-6)
